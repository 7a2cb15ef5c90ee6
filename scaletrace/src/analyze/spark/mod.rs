//! `scaletrace sql --dialect spark`: the analysis as a Spark SQL script, for a store too large
//! for one machine. It holds the session settings the views rely on, a view per table over
//! the store's files (read as DuckDB reads them), the thresholds, and the views that
//! translate.py makes of ../views.sql. Run it with `spark-sql -f`, or statement by statement
//! from PySpark (`spark.sql` takes one statement: split at the `;` that ends a line).
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _, Result};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{
    after_each_building_block,
    baseline::{self, Baseline},
    params::Params,
    sources::{Location, Sources},
};
use crate::tables::{catalog, TableInfo};

/// The analysis views in Spark SQL (generated: see translate.py beside this file).
const VIEWS_SQL: &str = include_str!("views.sql");

/// Where the building blocks' tables go.
#[derive(Debug, Clone, Copy)]
pub enum BuildingBlocks<'a> {
    /// In the session's warehouse, a directory per analysis (below).
    InWarehouse,
    /// Under this directory (`--spark-tables`, checked by `check_tables_dir`).
    At(&'a str),
}

/// A directory URI the script may write over: absolute, with no substitution of its own.
pub fn check_tables_dir(uri: &str) -> Result<()> {
    let has_scheme = uri.split_once(':').is_some_and(|(scheme, _)| {
        scheme.len() > 1
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
    });
    if uri.contains('\\') || uri.contains("${") {
        bail!("--spark-tables {uri:?}: give the directory itself, without backslashes or ${{...}} (Spark substitutes only its own settings, and an unknown one silently becomes empty)");
    }
    if uri.trim_matches('/').is_empty() && !uri.is_empty() {
        bail!("--spark-tables {uri:?}: the root of a filesystem; give a directory of the analysis' own (each run writes over what is in it)");
    }
    if !(uri.starts_with('/') || has_scheme) {
        bail!("--spark-tables {uri:?} is not an absolute path or a URI (hdfs://..., s3a://..., file:///...): Spark would resolve it against the current database's location");
    }
    Ok(())
}

/// The session warehouse's directory for one analysis: `scaletrace-` and a checksum of what the
/// script reads and how (the tables' files, thresholds, baseline). Each analysis of the same
/// store writes over its own directory; another store, or other settings, gets another, so
/// two databases analyzing different stores do not read each other's building blocks. (Spark
/// puts `${setting}` in a statement's text before it parses it.)
fn warehouse_dir(inputs: &str) -> String {
    let mut crc = flate2::Crc::new();
    crc.update(inputs.as_bytes());
    format!("${{spark.sql.warehouse.dir}}/scaletrace-{:08x}", crc.sum())
}

/// Set only while the building blocks are written (RESET at the end of the script): it lets a
/// CREATE TABLE ... AS of the user's own replace a directory that is not empty.
const OVERWRITE_SETTING: &str = "spark.sql.legacy.allowNonEmptyLocationInCTAS";

/// Session settings the views need, each with the reason.
const SETTINGS: [(&str, &str, &str); 8] = [
    (
        "spark.sql.parser.escapedStringLiterals",
        "false",
        "the script's strings escape quotes and backslashes with a backslash",
    ),
    (
        "spark.sql.legacy.parquet.nanosAsLong",
        "true",
        "the tables' nanosecond timestamps, read as nanoseconds since the epoch (Spark's own timestamps stop at microseconds and refuse these)",
    ),
    (
        "spark.sql.ansi.enabled",
        "false",
        "as DuckDB: x / 0 is NULL, a cast that does not fit is NULL (ANSI mode throws)",
    ),
    (
        "spark.sql.session.timeZone",
        "UTC",
        "times in findings are UTC, as in DuckDB's analysis",
    ),
    (
        "spark.sql.legacy.storeAnalyzedPlanForView",
        "true",
        "views over views: without it each reference analyzes its whole tree again (minutes)",
    ),
    (
        "spark.sql.optimizer.excludedRules",
        "org.apache.spark.sql.catalyst.optimizer.RemoveRedundantAliases",
        "Spark 4.3's rule leaves an unresolved plan behind on the verdict's views (PLAN_VALIDATION_FAILED_RULE_IN_BATCH); an optimization only",
    ),
    (
        "spark.sql.variable.substitute",
        "true",
        "the building blocks' tables are placed under ${spark.sql.warehouse.dir} unless --spark-tables names a directory",
    ),
    (
        OVERWRITE_SETTING,
        "true",
        "each run overwrites the building blocks' tables where the last run left them: a session without a metastore (plain pyspark, spark-sql) forgets its tables but not their files, and refused a second run (LOCATION_ALREADY_EXISTS); reset at the end",
    ),
];

/// The whole script. The building blocks `analyze` computes once are
/// written as tables (`{view}__computed` of the current database, their files in
/// `DIR/{view}__computed`, overwritten at each run): Spark, too, plans a view
/// over views over views whole at every reference; binding the verdict's views took minutes.
/// Caching instead would write nothing, but Spark 4.3 fails binding views over cached ones
/// (`CACHE TABLE x AS`: "key not found"; `CACHE TABLE` of the view:
/// INTERNAL_ERROR_ATTRIBUTE_NOT_FOUND). Tables at a location of their own, not managed ones:
/// a session without a metastore forgets a managed table but keeps its directory, and Spark
/// refuses to create a managed table over a directory that is not empty.
pub fn script(
    sources: &Sources,
    params: &Params,
    baseline: Option<&Baseline>,
    blocks: BuildingBlocks,
) -> Result<String> {
    let mut out = format!(
        "-- generated by scaletrace {} (`scaletrace sql --dialect spark`)\n",
        env!("CARGO_PKG_VERSION")
    );
    for (name, value, why) in SETTINGS {
        out.push_str(&format!("-- {why}\nSET {name} = {value};\n"));
    }
    let inputs = format!(
        "{}\n{}{}\n",
        table_views(sources)?,
        own_line_comments(&temporary(&params.sql())),
        temporary(&baseline::sql(baseline, quote))
    );
    out.push_str("\n-- Tables\n");
    out.push_str(&inputs);
    out.push_str(VIEWS_SQL);
    let dir = match blocks {
        BuildingBlocks::InWarehouse => warehouse_dir(&inputs),
        BuildingBlocks::At(dir) => dir.to_string(),
    };
    let mut out = cached(&out, &dir)?;
    out.push_str(&format!(
        "\n-- the session's own setting again (see the top)\nRESET {OVERWRITE_SETTING};\n"
    ));
    Ok(out)
}

/// `sql` with a comment after a statement's `;` moved before it, onto a line of its own: a
/// script split at each `;` that ends a line must leave statements only.
fn own_line_comments(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    for line in sql.lines() {
        match line.split_once("; --") {
            Some((statement, comment)) if !statement.contains('\'') => {
                out.push_str(&format!("{statement} --{comment}\n;\n"));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// Session views, as the translated ones: the tables' views are the session's own.
fn temporary(sql: &str) -> String {
    sql.replace("CREATE OR REPLACE VIEW", "CREATE OR REPLACE TEMPORARY VIEW")
}

/// After each building block, its rows written as a table and the view read from them.
fn cached(script: &str, tables_dir: &str) -> Result<String> {
    after_each_building_block(script, "CREATE OR REPLACE TEMPORARY VIEW", |v| {
        building_block_table(v, tables_dir)
    })
}

/// The statements that write view `v`'s rows under `tables_dir` and read the view from them.
fn building_block_table(v: &str, tables_dir: &str) -> String {
    let location = quote(&format!(
        "{}/{v}__computed",
        tables_dir.trim_end_matches('/')
    ));
    format!(
        "DROP TABLE IF EXISTS {v}__computed;\n\
         CREATE TABLE {v}__computed USING parquet LOCATION {location} AS SELECT * FROM {v};\n\
         CREATE OR REPLACE TEMPORARY VIEW {v} AS SELECT * FROM {v}__computed;\n"
    )
}

/// A Spark SQL string literal (Spark reads backslash escapes in strings).
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// How Spark reads a column of a type docs/schema.md names (DuckDB's), and the type the
/// views take it as: (in the files, in the views).
fn spark_types(name: &str, duckdb_type: &str) -> Result<(&'static str, &'static str)> {
    Ok(match duckdb_type {
        "BIGINT" => ("BIGINT", "BIGINT"),
        "DOUBLE" => ("DOUBLE", "DOUBLE"),
        "BOOLEAN" => ("BOOLEAN", "BOOLEAN"),
        "VARCHAR" => ("STRING", "STRING"),
        // nanoseconds since the epoch (spark.sql.legacy.parquet.nanosAsLong)
        "TIMESTAMP WITH TIME ZONE" => ("BIGINT", "BIGINT"),
        // Spark has no unsigned integers: it widens them as they are written in Parquet
        "USMALLINT" => ("INT", "INT"),
        "UINTEGER" => ("BIGINT", "BIGINT"),
        "UINTEGER[]" => ("ARRAY<BIGINT>", "ARRAY<BIGINT>"),
        // ... and 64 bits to decimal(20,0); scaletrace's values (byte counters, socket
        // cookies, ids) stay below 2^63, so the views take them as BIGINT
        "UBIGINT" => ("DECIMAL(20,0)", "BIGINT"),
        other => bail!("internal: column {name} has a type ({other}) with no Spark form"),
    })
}

/// A path as a Hadoop glob matching only itself.
fn escape_glob(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if "\\*?[]{},".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The Hadoop glob patterns that read a table's files, each with `file://` (a path without a
/// scheme is looked up on the cluster's default filesystem, HDFS or S3 on many):
/// - a Hive `table=NAME` tree as itself (Spark lists it recursively): one pattern per root
///   however many hosts and hours it holds, and new directories in it are read;
/// - directories and single files as one pattern, `COMMON/{a/*.parquet,b/c.parquet}`, and one
///   more for each whose path below the common part holds glob characters (Hadoop does not
///   honour an escape inside braces: such an alternative matched nothing, silently).
///
/// Paths are resolved first: Hadoop normalizes `..` away lexically, which moved `COMMON/{..}`.
fn patterns(locations: &BTreeSet<Location>) -> Vec<String> {
    let resolved = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let uri = |path: &Path| format!("file://{}", escape_glob(&path.display().to_string()));
    let mut out = Vec::new();
    // each directory or file: a literal path, and the glob that follows it
    let mut entries: Vec<(PathBuf, &str)> = Vec::new();
    for location in locations {
        match location {
            Location::Tree(tree) => out.push(uri(&resolved(tree))),
            Location::Directory(dir) => entries.push((resolved(dir), "/*.parquet")),
            Location::File(file) => entries.push((resolved(file), "")),
        }
    }
    let anchors: Vec<&Path> = entries
        .iter()
        .map(|(path, glob)| {
            if glob.is_empty() {
                path.parent().unwrap_or(path)
            } else {
                path
            }
        })
        .collect();
    let common = common_directory(&anchors);
    let mut plain = Vec::new();
    for (path, glob) in &entries {
        let below = path
            .strip_prefix(&common)
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        if below.is_empty() || below.contains(|c| "\\*?[]{},".contains(c)) {
            out.push(format!("{}{glob}", uri(path)));
        } else {
            plain.push(format!("{below}{glob}"));
        }
    }
    // the root directory as `file://` and the `/` joined below, not `file:///` and one more
    let common = if common == Path::new("/") {
        "file://".to_string()
    } else {
        uri(&common)
    };
    match plain.as_slice() {
        [] => {}
        [one] => out.push(format!("{common}/{one}")),
        many => out.push(format!("{common}/{{{}}}", many.join(","))),
    }
    out
}

/// The deepest directory above or at every one of `dirs`.
fn common_directory(dirs: &[&Path]) -> PathBuf {
    let mut common: Option<PathBuf> = None;
    for dir in dirs {
        common = Some(match common {
            None => dir.to_path_buf(),
            Some(c) => c
                .components()
                .zip(dir.components())
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a)
                .collect(),
        });
    }
    common.unwrap_or_else(|| PathBuf::from("/"))
}

/// Refuses a table whose files hold timestamps in another unit than the nanoseconds
/// scaletrace writes: Spark reads them as plain integers (`nanosAsLong`) in the unit the
/// schema gives, and a file written by another tool (DuckDB's COPY writes microseconds) would
/// put every time 1,000 times too early, without an error. Read: every file named, and the
/// first of each directory and tree (footers only; a store that mixes units within one
/// directory is not caught).
fn nanosecond_timestamps(table: &TableInfo, locations: &BTreeSet<Location>) -> Result<()> {
    use arrow::datatypes::{DataType, TimeUnit};
    let first_in = |dir: &Path, recursive: bool| {
        walkdir::WalkDir::new(dir)
            .max_depth(if recursive { usize::MAX } else { 1 })
            .into_iter()
            .filter_map(|e| e.ok())
            .find(|e| {
                e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "parquet")
            })
            .map(|e| e.into_path())
    };
    let files = locations.iter().filter_map(|l| match l {
        Location::File(f) => Some(f.clone()),
        Location::Directory(d) => first_in(d, false),
        Location::Tree(t) => first_in(t, true),
    });
    for file in files {
        let schema = std::fs::File::open(&file)
            .map_err(anyhow::Error::from)
            .and_then(|f| {
                Ok(ParquetRecordBatchReaderBuilder::try_new(f)?
                    .schema()
                    .clone())
            })
            .with_context(|| format!("reading the schema of {}", file.display()))?;
        for (name, _) in table
            .columns
            .iter()
            .filter(|(_, ty)| *ty == "TIMESTAMP WITH TIME ZONE")
        {
            // a column an older file lacks reads as null
            let Ok(field) = schema.field_with_name(name) else {
                continue;
            };
            if let DataType::Timestamp(unit, _) = field.data_type() {
                if *unit != TimeUnit::Nanosecond {
                    bail!(
                        "{}: column {name} holds timestamps in {}s, not the nanoseconds scaletrace writes, and Spark would read them as nanoseconds: analyze this store with `scaletrace analyze` (DuckDB), or rewrite its files with nanosecond timestamps",
                        file.display(),
                        format!("{unit:?}").to_lowercase()
                    );
                }
            }
        }
    }
    Ok(())
}

/// One view per table over its files, with the columns and types the views expect; an empty
/// view of the same shape for a table no node wrote. A file of an older scaletrace that lacks
/// a newer column reads it as null (the schema is given, not inferred from the files).
fn table_views(sources: &Sources) -> Result<String> {
    let mut out = String::new();
    for table in catalog() {
        let mut schema = Vec::new();
        let mut select = Vec::new();
        let mut empty = Vec::new();
        for (name, ty) in &table.columns {
            let (in_file, in_view) = spark_types(name, ty)?;
            schema.push(format!("`{name}` {in_file}"));
            select.push(if in_file == in_view {
                format!("`{name}`")
            } else {
                format!("CAST(`{name}` AS {in_view}) AS `{name}`")
            });
            empty.push(format!("CAST(NULL AS {in_view}) AS `{name}`"));
        }
        if table.name == "gpu_events" {
            // each imported trace is one file: two runs' `rank0.pt.trace.json` differ only
            // there. Spark names it as a URI; DuckDB as the path it read ('+' kept as is)
            select.push(
                "url_decode(replace(regexp_replace(input_file_name(), '^file://', ''), '+', '%2B')) AS import_file"
                    .into(),
            );
            empty.push("CAST(NULL AS STRING) AS import_file".into());
        }
        let locations = sources.locations.get(table.name);
        let Some(locations) = locations.filter(|l| !l.is_empty()) else {
            // comments on a line of their own: a script split at each `;` that ends a line
            // (spark.sql takes one statement) must find only statements between
            out.push_str(&format!(
                "-- no files\nCREATE OR REPLACE TEMPORARY VIEW {} AS SELECT {} WHERE false;\n",
                table.name,
                empty.join(", ")
            ));
            continue;
        };
        nanosecond_timestamps(&table, locations)?;
        let mut parts = Vec::new();
        for (i, pattern) in patterns(locations).iter().enumerate() {
            let files = format!("{}__files{i}", table.name);
            // recursiveFileLookup: a tree read at any depth, and no partition columns inferred
            // from its `host=` directories; pathGlobFilter: not the `.partial` files beside
            out.push_str(&format!(
                "CREATE OR REPLACE TEMPORARY VIEW {files} ({}) USING parquet OPTIONS (path {}, recursiveFileLookup 'true', pathGlobFilter '*.parquet');\n",
                schema.join(", "),
                quote(pattern)
            ));
            parts.push(format!("SELECT {} FROM {files}", select.join(", ")));
        }
        out.push_str(&format!(
            "CREATE OR REPLACE TEMPORARY VIEW {} AS {};\n",
            table.name,
            parts.join(" UNION ALL ")
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(paths: &[&str]) -> BTreeSet<Location> {
        paths
            .iter()
            .map(|p| Location::Directory(PathBuf::from(p)))
            .collect()
    }

    #[test]
    fn one_pattern_for_a_fleet_one_more_per_odd_name() {
        // (paths that do not exist stay as they are given)
        assert_eq!(
            patterns(&dirs(&["/s/n1/rtt", "/s/n2/rtt"])),
            ["file:///s/{n1/rtt/*.parquet,n2/rtt/*.parquet}"]
        );
        assert_eq!(
            patterns(&dirs(&["/s/run[1]/n1/rtt"])),
            ["file:///s/run\\[1\\]/n1/rtt/*.parquet"]
        );
        assert_eq!(
            patterns(&dirs(&["/s/n1/rtt", "/s/n{2},x/rtt"])),
            [
                "file:///s/n\\{2\\}\\,x/rtt/*.parquet",
                "file:///s/n1/rtt/*.parquet"
            ]
        );
        let mut mixed = dirs(&["/s/n1/rtt"]);
        mixed.insert(Location::File(PathBuf::from("/s/n2/rtt/a.parquet")));
        mixed.insert(Location::Tree(PathBuf::from("/spool/table=rtt")));
        assert_eq!(
            patterns(&mixed),
            [
                "file:///spool/table=rtt",
                "file:///s/{n1/rtt/*.parquet,n2/rtt/a.parquet}"
            ]
        );
        assert_eq!(
            patterns(&dirs(&["/a/rtt", "/b/rtt"])),
            ["file:///{a/rtt/*.parquet,b/rtt/*.parquet}"]
        );
    }

    #[test]
    fn a_path_is_resolved_before_its_pattern_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(real.join("proj")).unwrap();
        std::fs::create_dir_all(real.join("s1/rtt")).unwrap();
        std::fs::create_dir_all(real.join("s2/rtt")).unwrap();
        let locations = dirs(&[
            &real.join("proj/../s1/rtt").display().to_string(),
            &real.join("s2/rtt").display().to_string(),
        ]);
        assert_eq!(
            patterns(&locations),
            [format!(
                "file://{}/{{s1/rtt/*.parquet,s2/rtt/*.parquet}}",
                real.display()
            )]
        );
    }

    #[test]
    fn a_comment_after_a_statement_goes_before_its_end() {
        assert_eq!(
            own_line_comments("SELECT\n  1 AS a, -- one\n  2 AS b; -- two\nSELECT 'x; -- y';\n"),
            "SELECT\n  1 AS a, -- one\n  2 AS b -- two\n;\nSELECT 'x; -- y';\n"
        );
    }

    #[test]
    fn strings_and_types_in_spark_form() {
        assert_eq!(quote("it's a\\b"), "'it\\'s a\\\\b'");
        assert_eq!(
            spark_types("count", "UBIGINT").unwrap(),
            ("DECIMAL(20,0)", "BIGINT")
        );
        assert!(spark_types("x", "HUGEINT").is_err());
    }

    #[test]
    fn a_tables_directory_is_absolute_and_literal() {
        for good in [
            "/data/st",
            "hdfs://nn:8020/st/",
            "s3a://bucket/st",
            "file:///tmp/st",
        ] {
            check_tables_dir(good).unwrap();
        }
        for (bad, says) in [
            ("", "not an absolute path"),
            ("rel/dir", "not an absolute path"),
            ("/", "root"),
            (r"C:\tmp\st", "backslashes"),
            ("/x/${unset}/st", "${...}"),
        ] {
            let e = check_tables_dir(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn each_building_block_is_written_over_at_its_own_location() {
        let out = building_block_table("st_event", "s3a://b/it's/");
        assert!(
            out.contains(
                r"CREATE TABLE st_event__computed USING parquet LOCATION 's3a://b/it\'s/st_event__computed' AS"
            ),
            "{out}"
        );
        assert!(out.contains("DROP TABLE IF EXISTS st_event__computed;"));
        // another store or other settings: another directory in the warehouse
        assert_ne!(warehouse_dir("a"), warehouse_dir("b"));
        assert_eq!(warehouse_dir("a"), warehouse_dir("a"));
        assert!(warehouse_dir("a").starts_with("${spark.sql.warehouse.dir}/scaletrace-"));
    }
}
