//! Finds the scaletrace tables under the paths given to `analyze`/`sql` and turns them into
//! DuckDB views: a glob per table and root, so the printed script keeps working as new files
//! arrive, and an empty view of the right shape for a table no node wrote.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _, Result};

use crate::tables::{catalog, TableInfo};

/// The files found for each table, and the glob patterns that match them.
#[derive(Debug, Default)]
pub struct Sources {
    /// table -> patterns (globs or single files), in a stable order
    pub patterns: BTreeMap<&'static str, BTreeSet<String>>,
    /// table -> number of files
    pub files: BTreeMap<&'static str, usize>,
    /// table -> where its files lie, for engines that cannot read the globs (Spark: no `**`)
    pub locations: BTreeMap<&'static str, BTreeSet<Location>>,
    /// Files left out: not whole Parquet files (truncated: a partial copy or download).
    pub skipped: Vec<PathBuf>,
    /// Read only these hosts' rows (`analyze --triage`); None: every host.
    pub hosts: Option<BTreeSet<String>>,
    /// pattern -> host (as its `host=` directory spells it) -> the directories of its files
    /// (the agent's spool), or None where a file lies elsewhere: what lets `hosts` narrow a
    /// pattern to those hosts' directories, named without `**`, so that no other file is opened
    /// and no other directory listed. Filtered by rows alone, every scan listed and opened the
    /// 1,000 hosts' files of a fleet-hour (100 s and 11 GB); with a `**/host=NAME` glob per host,
    /// it listed them all once per host (137 s); the same hosts' directories given as paths
    /// took 34 s and 2 GB (bench/fleet.py).
    pub pattern_hosts: BTreeMap<String, Option<BTreeMap<String, BTreeSet<PathBuf>>>>,
}

impl Sources {
    pub fn has(&self, table: &str) -> bool {
        self.files.get(table).is_some_and(|n| *n > 0)
    }
    pub fn total_files(&self) -> usize {
        self.files.values().sum()
    }
}

/// Where some of a table's files lie.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Location {
    /// Every `*.parquet` below the directory, at any depth, is a whole file of the table: a
    /// `table=NAME` directory of the Hive layout (or one below it).
    Tree(PathBuf),
    /// Every `*.parquet` in the directory is a whole file of the table (a directory's files
    /// all belong to one table: the table is named by the directory or one above it).
    Directory(PathBuf),
    /// One file, named: given as such, or beside a file left out.
    File(PathBuf),
}

/// The table a Parquet file belongs to: the `table=NAME` component of a Hive-partitioned path,
/// or the name of the directory holding it (`record`'s `OUT/<table>/<run>.parquet`).
pub fn table_of<'a>(file: &Path, tables: &'a [TableInfo]) -> Option<&'a TableInfo> {
    let known = |name: &str| tables.iter().find(|t| t.name == name);
    for component in file.parent()?.components().rev() {
        let c = component.as_os_str().to_string_lossy();
        if let Some(name) = crate::layout::hive_table_name(&c) {
            return known(name);
        }
    }
    known(&file.parent()?.file_name()?.to_string_lossy())
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

fn is_parquet(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "parquet")
}

/// Whether `file` can be a whole Parquet file: `PAR1` at both ends, with room for a footer.
/// One truncated file (a copy or download cut short) made DuckDB refuse the whole analysis;
/// such a file is left out and named instead. (scaletrace's own writers never leave one: they
/// write under `.partial` names and rename a finished file.)
fn is_whole_parquet(file: &Path) -> bool {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let check = || -> std::io::Result<bool> {
        let mut f = std::fs::File::open(file)?;
        let len = f.metadata()?.len();
        if len < 12 {
            return Ok(false);
        }
        let (mut head, mut tail) = ([0u8; 4], [0u8; 4]);
        f.read_exact(&mut head)?;
        f.seek(SeekFrom::End(-4))?;
        f.read_exact(&mut tail)?;
        Ok(&head == b"PAR1" && &tail == b"PAR1")
    };
    // one that cannot be read is DuckDB's to report, with its reason
    check().unwrap_or(true)
}

/// `path` as a DuckDB glob that matches only itself: DuckDB globs every file name it is given,
/// so a directory called `run[1]` would otherwise read `run1`. A character class holding one
/// character is the escape DuckDB's matcher understands (a backslash is not one).
fn escape_glob(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '*' | '?' | '[' => {
                out.push('[');
                out.push(c);
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

/// Where each table's files are under `paths` (directories, Parquet files or glob patterns).
/// A path that exists is a path even when its name holds glob characters.
pub fn discover(paths: &[String]) -> Result<Sources> {
    let tables = catalog();
    let mut sources = Sources::default();
    for arg in paths {
        // Absolute, so the script `sql` prints reads the same files from any directory.
        let path = std::path::absolute(arg).unwrap_or_else(|_| PathBuf::from(arg));
        if path.exists() {
            add_path(&path, &tables, &mut sources)?;
        } else if is_glob(arg) {
            // the directory it is relative to, escaped: its name may hold glob characters
            let pattern = match std::env::current_dir() {
                Ok(cwd) if Path::new(arg).is_relative() => format!(
                    "{}/{arg}",
                    glob::Pattern::escape(&cwd.display().to_string())
                ),
                _ => arg.clone(),
            };
            let matches =
                glob::glob(&pattern).with_context(|| format!("bad glob pattern {arg}"))?;
            let mut any = false;
            for m in matches.filter_map(|m| m.ok()) {
                any = true;
                add_path(&m, &tables, &mut sources)?;
            }
            if !any {
                bail!("{arg}: the pattern matches nothing");
            }
        } else {
            let default = if arg == crate::layout::DEFAULT_DIR {
                " (the default: give the directory `scaletrace record --out` wrote)"
            } else {
                ""
            };
            bail!("{arg}: no such file or directory{default}");
        }
    }
    if let Some(first) = sources.skipped.first() {
        log::warn!(
            "left out {} file(s) that are not whole Parquet files (truncated: a copy or download cut short?): {}{}",
            sources.skipped.len(),
            first.display(),
            if sources.skipped.len() > 1 { ", ..." } else { "" }
        );
    }
    if sources.total_files() == 0 {
        bail!(
            "no scaletrace tables under {} (expected e.g. DIR/flows/*.parquet from `scaletrace record --out DIR`)",
            paths.join(", ")
        );
    }
    Ok(sources)
}

/// A file DuckDB can be told to read by name: as it is, or escaped where it holds glob
/// characters. DuckDB cannot glob through a backslash and reads such a name only as it is, so
/// a name with both is refused rather than read wrongly.
fn literal_file(file: &Path) -> Result<String> {
    let name = file.display().to_string();
    if !is_glob(&name) {
        return Ok(name);
    }
    if name.contains('\\') {
        bail!(
            "{name}: DuckDB cannot read a path holding both a backslash and glob characters (*, ?, [): rename or link it"
        );
    }
    Ok(escape_glob(&name))
}

fn add_path(path: &Path, tables: &[TableInfo], sources: &mut Sources) -> Result<()> {
    if path.is_file() {
        if let Some(t) = table_of(path, tables).filter(|_| is_parquet(path)) {
            if !is_whole_parquet(path) {
                sources.skipped.push(path.to_path_buf());
                return Ok(());
            }
            sources
                .patterns
                .entry(t.name)
                .or_default()
                .insert(literal_file(path)?);
            *sources.files.entry(t.name).or_default() += 1;
            sources
                .locations
                .entry(t.name)
                .or_default()
                .insert(Location::File(path.to_path_buf()));
        }
        return Ok(());
    }
    let root = path.display().to_string();
    let root = root.trim_end_matches('/');
    // DuckDB's `**` neither follows links to directories nor matches through a backslash: below
    // such a root, name every file (the view then misses files that arrive later; a plain tree
    // keeps its globs, which do not).
    let mut found: Vec<(&'static str, PathBuf)> = Vec::new();
    let mut through_link = false;
    for entry in walkdir::WalkDir::new(path).follow_links(true) {
        let entry = entry.with_context(|| format!("listing {}", path.display()))?;
        if entry.depth() > 0 && entry.path_is_symlink() && entry.file_type().is_dir() {
            through_link = true;
        }
        let file = entry.path();
        if !entry.file_type().is_file() || !is_parquet(file) {
            continue;
        }
        if let Some(t) = table_of(file, tables) {
            if is_whole_parquet(file) {
                found.push((t.name, file.to_path_buf()));
            } else {
                sources.skipped.push(file.to_path_buf());
            }
        }
    }
    // a glob would read the files left out: name the others
    let by_name = through_link
        || sources.skipped.iter().any(|f| f.starts_with(path))
        || found
            .iter()
            .any(|(_, f)| f.display().to_string().contains('\\'));
    // a directory holding a file left out is read file by file
    let holds_skipped: BTreeSet<&Path> =
        sources.skipped.iter().filter_map(|f| f.parent()).collect();
    for (table, file) in &found {
        let tree = hive_tree(path, file, table)
            .filter(|t| !by_name && !sources.skipped.iter().any(|f| f.starts_with(t)));
        let location = match (tree, file.parent()) {
            (Some(tree), _) => Location::Tree(tree),
            (None, Some(dir)) if !holds_skipped.contains(dir) => {
                Location::Directory(dir.to_path_buf())
            }
            _ => Location::File(file.clone()),
        };
        sources.locations.entry(table).or_default().insert(location);
    }
    for (table, file) in found {
        let pattern = if by_name {
            literal_file(&file)?
        } else {
            pattern_for(
                &escape_glob(root),
                file.strip_prefix(path).unwrap_or(&file),
                table,
            )
        };
        let dir = file.parent();
        let host = dir
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("host="));
        let hosts = sources
            .pattern_hosts
            .entry(pattern.clone())
            .or_insert_with(|| Some(BTreeMap::new()));
        match (hosts.as_mut(), host, dir) {
            (Some(seen), Some(h), Some(dir)) => {
                seen.entry(h.to_string())
                    .or_default()
                    .insert(dir.to_path_buf());
            }
            _ => *hosts = None,
        }
        sources.patterns.entry(table).or_default().insert(pattern);
        *sources.files.entry(table).or_default() += 1;
    }
    Ok(())
}

/// `patterns` narrowed to the directories of `hosts` where every file of a pattern lies in a
/// `host=` directory (the agent's spool); the other patterns as they are (their rows are
/// filtered by host instead).
fn patterns_of_hosts(sources: &Sources, patterns: &BTreeSet<String>) -> Vec<String> {
    let Some(hosts) = &sources.hosts else {
        return patterns.iter().cloned().collect();
    };
    let mut out = BTreeSet::new();
    for p in patterns {
        let Some(Some(seen)) = sources.pattern_hosts.get(p) else {
            out.insert(p.clone());
            continue;
        };
        let chosen = hosts
            .iter()
            .filter_map(|h| seen.get(&crate::layout::partition_value(h)));
        if p.ends_with("/**/*.parquet") {
            // a tree: the chosen hosts' directories in it
            for dirs in chosen {
                out.extend(
                    dirs.iter()
                        .map(|d| format!("{}/*.parquet", escape_glob(&d.display().to_string()))),
                );
            }
        } else if chosen.count() > 0 {
            // a file named on its own (beside one left out as truncated, or under a link) or
            // one host's directory: kept as it is, or left out with its host
            out.insert(p.clone());
        }
    }
    out.into_iter().collect()
}

/// The `table=NAME` directory holding `file` (found below `root`), or `root` itself where it
/// lies inside one: every Parquet file below it is the table's.
fn hive_tree(root: &Path, file: &Path, table: &str) -> Option<PathBuf> {
    let hive = crate::layout::hive_table_dir(table);
    if root.components().any(|c| c.as_os_str() == hive.as_str()) {
        return Some(root.to_path_buf());
    }
    let rel = file.strip_prefix(root).ok()?;
    let mut tree = root.to_path_buf();
    for c in rel.parent()?.components() {
        tree.push(c);
        if c.as_os_str() == hive.as_str() {
            return Some(tree);
        }
    }
    None
}

/// A glob under `root` matching `rel` (a file below it) and its siblings of the same table,
/// whether `root` is a fleet tree, one node's output, or a table directory itself.
fn pattern_for(root: &str, rel: &Path, table: &str) -> String {
    let hive = crate::layout::hive_table_dir(table);
    let dirs: Vec<String> = rel
        .parent()
        .map(|p| {
            p.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    // DuckDB allows one `**` per pattern: spell out the path down to `table=NAME`.
    if let Some(at) = dirs.iter().position(|d| *d == hive) {
        format!(
            "{root}/{}/**/*.parquet",
            escape_glob(&dirs[..=at].join("/"))
        )
    } else if root.contains(&hive) {
        format!("{root}/**/*.parquet")
    } else if dirs.last().is_some_and(|d| d == table) {
        format!("{root}/**/{table}/*.parquet")
    } else {
        format!("{root}/*.parquet")
    }
}

/// `host IN (...)` for these hosts (`false` for none).
pub fn host_in(hosts: &BTreeSet<String>) -> String {
    if hosts.is_empty() {
        return "false".to_string();
    }
    let list: Vec<String> = hosts.iter().map(|h| quote(h)).collect();
    format!("host IN ({})", list.join(", "))
}

/// SQL string literal.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// One `CREATE VIEW` per table: over its files when there are any, else empty with the
/// table's columns, so every analysis query runs and simply finds nothing. Files written by an
/// older scaletrace may lack newer columns: the typed empty row joined by name gives every
/// column of the current schema (null where a file has none).
pub fn views_sql(sources: &Sources) -> String {
    let mut out = String::new();
    for table in catalog() {
        let columns: Vec<String> = table
            .columns
            .iter()
            .map(|(name, ty)| format!("NULL::{ty} AS \"{name}\""))
            .collect();
        // Each imported trace is one file: two runs' `rank0.pt.trace.json` differ only there.
        let (file_column, empty_file_column) = if table.name == "gpu_events" {
            (
                ", filename AS import_file",
                ", NULL::VARCHAR AS import_file",
            )
        } else {
            ("", "")
        };
        let empty = format!(
            "SELECT {}{empty_file_column} WHERE false",
            columns.join(", ")
        );
        // The parquet reader skips the row groups (and so the files, one host each in an
        // agent's spool) whose statistics rule the hosts out.
        let only_hosts = match &sources.hosts {
            Some(hosts) if table.columns.iter().any(|(name, _)| *name == "host") => {
                format!(" WHERE {}", host_in(hosts))
            }
            _ => String::new(),
        };
        let patterns = sources
            .patterns
            .get(table.name)
            .filter(|_| sources.has(table.name))
            .map(|p| patterns_of_hosts(sources, p))
            .unwrap_or_default();
        match patterns {
            patterns if !patterns.is_empty() => {
                let list: Vec<String> = patterns.iter().map(|p| quote(p)).collect();
                out.push_str(&format!(
                    "CREATE OR REPLACE VIEW {} AS SELECT *{file_column} FROM read_parquet([{}], union_by_name = true, hive_partitioning = false){only_hosts}\n  UNION ALL BY NAME {empty};\n",
                    table.name,
                    list.join(", ")
                ));
            }
            _ => {
                out.push_str(&format!(
                    "CREATE OR REPLACE VIEW {} AS {empty}; -- no files\n",
                    table.name,
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Enough of a Parquet file for discovery, which checks only the magic at both ends.
    const LOOKS_WHOLE: &[u8] = b"PAR1\0\0\0\0PAR1";

    /// These files (paths below `root`), each looking whole.
    fn lay_out(root: &Path, files: &[&str]) {
        for p in files {
            let f = root.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, LOOKS_WHOLE).unwrap();
        }
    }

    #[test]
    fn table_from_record_and_hive_layouts() {
        let tables = catalog();
        let name = |p: &str| table_of(Path::new(p), &tables).map(|t| t.name);
        assert_eq!(name("/t/node1/flows/node1-x.parquet"), Some("flows"));
        assert_eq!(
            name("/b/table=rtt/date=2026-12-02/hour=22/host=n1/part-1.parquet"),
            Some("rtt")
        );
        assert_eq!(name("/t/notes/x.parquet"), None);
        assert_eq!(name("/t/table=bogus/flows/x.parquet"), None);
    }

    #[test]
    fn a_file_without_parquet_magic_at_both_ends_is_not_whole() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.parquet");
        for (bytes, whole) in [
            (LOOKS_WHOLE, true),
            (&b""[..], false),
            (&b"PAR1\0\0\0\0\0\0"[..], false),
            (&b"PAR1PAR1"[..], false),
        ] {
            std::fs::write(&f, bytes).unwrap();
            assert_eq!(is_whole_parquet(&f), whole, "{bytes:?}");
        }
    }

    #[test]
    fn discovers_globs_per_root_and_layout() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        lay_out(
            root,
            &[
                "n1/flows/a.parquet",
                "n2/flows/b.parquet",
                "n2/flows/c.parquet.partial",
                "spool/table=rtt/date=2026-12-02/hour=01/host=n3/part-0.parquet",
                "n1/README.txt",
            ],
        );
        let r = root.display().to_string();
        let s = discover(std::slice::from_ref(&r)).unwrap();
        assert_eq!(s.files["flows"], 2);
        assert_eq!(s.files["rtt"], 1);
        assert_eq!(
            s.patterns["flows"].iter().collect::<Vec<_>>(),
            [&format!("{r}/**/flows/*.parquet")]
        );
        assert_eq!(
            s.patterns["rtt"].iter().collect::<Vec<_>>(),
            [&format!("{r}/spool/table=rtt/**/*.parquet")]
        );
        // for engines without `**`: the Hive tree as one, the other layout by directory
        assert_eq!(
            s.locations["rtt"].iter().collect::<Vec<_>>(),
            [&Location::Tree(root.join("spool/table=rtt"))]
        );
        assert_eq!(
            s.locations["flows"].iter().collect::<Vec<_>>(),
            [
                &Location::Directory(root.join("n1/flows")),
                &Location::Directory(root.join("n2/flows"))
            ]
        );
        let sql = views_sql(&s);
        assert!(sql.contains("CREATE OR REPLACE VIEW flows AS SELECT * FROM read_parquet(["));
        assert!(sql.contains("CREATE OR REPLACE VIEW gpu_events AS SELECT NULL::"));
        assert!(!sql.contains(" WHERE host IN"));
    }

    #[test]
    fn a_triage_reads_its_hosts_rows_only() {
        let dir = tempfile::tempdir().unwrap();
        lay_out(dir.path(), &["n1/flows/a.parquet"]);
        let mut s = discover(&[dir.path().display().to_string()]).unwrap();
        s.hosts = Some(["n1".to_string(), "it's".to_string()].into());
        let sql = views_sql(&s);
        let flows = sql
            .lines()
            .find(|l| l.starts_with("CREATE OR REPLACE VIEW flows AS"))
            .unwrap();
        assert!(
            flows.ends_with("hive_partitioning = false) WHERE host IN ('it''s', 'n1')"),
            "{flows}"
        );
        s.hosts = Some(Default::default());
        assert!(views_sql(&s).contains(" WHERE false\n  UNION ALL BY NAME"));
    }

    #[test]
    fn a_triage_of_an_agents_spool_names_its_hosts_directories_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        lay_out(
            root,
            &[
                "spool/table=flows/date=d/hour=1/host=n1/a.parquet",
                "spool/table=flows/date=d/hour=2/host=n1/b.parquet",
                "spool/table=flows/date=d/hour=1/host=n2/a.parquet",
                "spool/table=rtt/date=d/hour=1/host=n2/a.parquet",
                // a table whose files lie outside `host=` directories: filtered by rows instead
                "n1/retransmits/a.parquet",
            ],
        );
        let r = root.display().to_string();
        let mut s = discover(std::slice::from_ref(&r)).unwrap();
        let everything = views_sql(&s);
        s.hosts = Some(["n1".to_string()].into());
        let sql = views_sql(&s);
        let view = |name: &str| {
            sql.lines()
                .find(|l| l.starts_with(&format!("CREATE OR REPLACE VIEW {name} AS")))
                .unwrap()
                .to_string()
        };
        let flows = view("flows");
        for hour in [1, 2] {
            assert!(
                flows.contains(&format!(
                    "'{r}/spool/table=flows/date=d/hour={hour}/host=n1/*.parquet'"
                )),
                "{flows}"
            );
        }
        assert!(
            !flows.contains("host=n2") && !flows.contains("**"),
            "{flows}"
        );
        // n1 has no rtt files: an empty view, not a glob that matches nothing
        assert!(view("rtt").ends_with("-- no files"), "{}", view("rtt"));
        let retransmits = view("retransmits");
        assert!(
            retransmits.contains(&format!("'{r}/**/retransmits/*.parquet'"))
                && retransmits.ends_with("WHERE host IN ('n1')"),
            "{retransmits}"
        );
        s.hosts = None;
        assert_eq!(views_sql(&s), everything);
    }

    #[test]
    fn a_triage_of_a_spool_read_file_by_file_keeps_its_hosts_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        lay_out(
            root,
            &[
                "table=flows/date=d/hour=1/host=n1/a.parquet",
                "table=flows/date=d/hour=1/host=n2/a.parquet",
            ],
        );
        // truncated: the spool is then read file by file, never by a glob that would take this
        // one in again
        std::fs::write(
            root.join("table=flows/date=d/hour=1/host=n2/b.parquet"),
            b"PAR1",
        )
        .unwrap();
        let r = root.display().to_string();
        let mut s = discover(std::slice::from_ref(&r)).unwrap();
        s.hosts = Some(["n1".to_string()].into());
        let sql = views_sql(&s);
        let flows = sql
            .lines()
            .find(|l| l.starts_with("CREATE OR REPLACE VIEW flows AS"))
            .unwrap();
        assert!(
            flows.contains(&format!(
                "read_parquet(['{r}/table=flows/date=d/hour=1/host=n1/a.parquet']"
            )),
            "{flows}"
        );
    }

    #[test]
    fn patterns_for_every_starting_point() {
        let p = |root, rel: &str| pattern_for(root, Path::new(rel), "flows");
        assert_eq!(p("/t", "n1/flows/a.parquet"), "/t/**/flows/*.parquet");
        assert_eq!(p("/t/n1/flows", "a.parquet"), "/t/n1/flows/*.parquet");
        assert_eq!(
            p("/b", "table=flows/date=x/host=h/p.parquet"),
            "/b/table=flows/**/*.parquet"
        );
        assert_eq!(
            p("/b/table=flows", "date=x/p.parquet"),
            "/b/table=flows/**/*.parquet"
        );
    }

    #[test]
    fn glob_characters_in_names_are_escaped() {
        assert_eq!(escape_glob("/t/run[1]/a*b?"), "/t/run[[]1]/a[*]b[?]");
        assert_eq!(
            literal_file(Path::new("/t/a\\b/x.parquet")).unwrap(),
            "/t/a\\b/x.parquet"
        );
        assert!(literal_file(Path::new("/t/a\\b[1]/x.parquet")).is_err());
    }

    #[test]
    fn an_existing_path_with_glob_characters_is_a_path() {
        let dir = tempfile::tempdir().unwrap();
        for p in ["run[1]/n1/flows/a.parquet", "run1/n1/flows/b.parquet"] {
            let f = dir.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, LOOKS_WHOLE).unwrap();
        }
        let r = dir.path().join("run[1]").display().to_string();
        let s = discover(std::slice::from_ref(&r)).unwrap();
        assert_eq!(s.files["flows"], 1);
        assert_eq!(
            s.patterns["flows"].iter().collect::<Vec<_>>(),
            [&format!("{}/**/flows/*.parquet", escape_glob(&r))]
        );
    }

    #[test]
    fn files_below_a_linked_directory_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere/n2/flows");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("b.parquet"), LOOKS_WHOLE).unwrap();
        let fleet = dir.path().join("fleet");
        std::fs::create_dir_all(fleet.join("n1/flows")).unwrap();
        std::fs::write(fleet.join("n1/flows/a.parquet"), LOOKS_WHOLE).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere/n2"), fleet.join("n2")).unwrap();
        let s = discover(&[fleet.display().to_string()]).unwrap();
        assert_eq!(s.files["flows"], 2);
        let names: Vec<_> = s.patterns["flows"].iter().cloned().collect();
        assert_eq!(
            names,
            [
                fleet.join("n1/flows/a.parquet").display().to_string(),
                fleet.join("n2/flows/b.parquet").display().to_string()
            ]
        );
    }

    #[test]
    fn nothing_to_analyze_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = discover(&[dir.path().display().to_string()]).unwrap_err();
        assert!(err.to_string().contains("no scaletrace tables"), "{err}");
        let err = discover(&["/nonexistent/x".into()]).unwrap_err();
        assert!(err.to_string().contains("no such file"), "{err}");
        assert!(!err.to_string().contains("the default"), "{err}");
        // run with no path, the default is named as such (cargo runs tests in the crate's
        // directory, which has no traces)
        if !Path::new(crate::layout::DEFAULT_DIR).exists() {
            let err = discover(&[crate::layout::DEFAULT_DIR.into()]).unwrap_err();
            assert!(err.to_string().contains("(the default"), "{err}");
        }
    }
}
