"""The analysis views in Spark SQL (scaletrace/src/analyze/spark/views.sql, made from the DuckDB
views by translate.py) give the same findings as DuckDB on the same recordings: real DDP jobs
with a planted fault (tests/data), read by PySpark in local mode.

The table views here are the test's own (each table's files, unsigned columns as bigint,
timestamps as nanoseconds since the epoch, the reader setting docs/schema.md names); the
building blocks `analyze` computes once are written as tables, as `analyze` does in DuckDB."""
import glob
import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from pyspark.sql import SparkSession

from test_agent import BIN

ROOT = Path(__file__).resolve().parent.parent
SPARK_DIR = ROOT / "scaletrace" / "src" / "analyze" / "spark"
sys.path.insert(0, str(SPARK_DIR))
from translate import statements  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
# a network fault and a straggler: the two halves of the verdict
RECORDINGS = ["loss-gap-after-onset", "slow-rank-noise-before-onset", "rate-limit-overflow", "slow-rank-last-step"]


def test_the_spark_views_are_what_translate_makes_of_the_duckdb_views():
    run = subprocess.run([sys.executable, str(SPARK_DIR / "translate.py"), "--check"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    session = (SparkSession.builder.master("local[1]").appName("scaletrace-views")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.legacy.parquet.nanosAsLong", "true")
               # DuckDB's semantics: x / 0 is NULL, casts do not throw
               .config("spark.sql.ansi.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               # views over views: without it each reference analyzes its whole tree again
               .config("spark.sql.legacy.storeAnalyzedPlanForView", "true")
               .config("spark.sql.shuffle.partitions", "2")
               # Spark 4.3's RemoveRedundantAliases leaves an unresolved plan behind on the
               # verdict's views (PLAN_VALIDATION_FAILED_RULE_IN_BATCH): an optimization only
               .config("spark.sql.optimizer.excludedRules",
                       "org.apache.spark.sql.catalyst.optimizer.RemoveRedundantAliases")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               .getOrCreate())
    session.sparkContext.setLogLevel("OFF")
    yield session
    session.stop()


def materialized():
    """The views `analyze` computes once (analyze/mod.rs)."""
    src = (ROOT / "scaletrace" / "src" / "analyze" / "mod.rs").read_text()
    names = re.findall(r'"(st_\w+)"', src[src.index("const MATERIALIZED"):src.index("fn materialized")])
    assert len(names) > 10
    return set(names)


def duckdb_script(store, views_only):
    args = [BIN, "sql"] + (["--views-only"] if views_only else []) + [str(store)]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def duckdb_findings(store):
    con = duckdb.connect()
    for sql in statements(duckdb_script(store, False)):
        if sql.strip():
            con.execute(sql)
    cur = con.execute("SELECT * FROM st_finding")
    names = [c[0] for c in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def spark_tables(spark, store):
    """Each table as DuckDB sees it (`scaletrace sql`'s table views), over the same files."""
    con = duckdb.connect()
    script = list(statements(duckdb_script(store, True)))
    tables = []
    for sql in script:
        if re.search(r"VIEW st_params\b", sql):
            break
        con.execute(sql)
        if view := re.search(r"CREATE OR REPLACE VIEW (\w+)", sql):
            tables.append(view.group(1))
    spark_type = {"VARCHAR": "STRING", "UBIGINT": "BIGINT", "UINTEGER": "BIGINT", "USMALLINT": "INT",
                  "UTINYINT": "SMALLINT", "INTEGER": "INT", "TIMESTAMP WITH TIME ZONE": "BIGINT",
                  "UBIGINT[]": "ARRAY<BIGINT>", "UINTEGER[]": "ARRAY<BIGINT>"}

    def null(name, typ):
        return f"CAST(NULL AS {spark_type.get(typ, typ)}) AS `{name}`"

    for table in tables:
        columns = con.execute(f"DESCRIBE {table}").fetchall()
        files = glob.glob(f"{store}/**/{table}/*.parquet", recursive=True)
        if not files:
            nulls = ", ".join(null(n, t) for n, t, *_ in columns)
            spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {table} AS SELECT {nulls} WHERE false")
            continue
        # files of an older scaletrace lack newer columns: null there, as DuckDB's views have them
        frame = spark.read.option("mergeSchema", "true").parquet(*files)
        frame.createOrReplaceTempView(f"{table}__files")
        select = []
        for name, typ, *_ in columns:
            if name != "import_file" and name not in frame.columns:
                select.append(null(name, typ))
            elif name == "import_file":
                select.append("input_file_name() AS import_file")
            elif typ in ("UBIGINT", "UINTEGER"):
                select.append(f"CAST(`{name}` AS BIGINT) AS `{name}`")
            elif typ.endswith("[]"):
                select.append(f"CAST(`{name}` AS ARRAY<BIGINT>) AS `{name}`")
            else:
                select.append(f"`{name}`")
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {table} AS SELECT {', '.join(select)} FROM {table}__files")
    # the thresholds (and no baseline), as `scaletrace sql` writes them, in Spark's syntax
    import sqlglot
    for sql in script:
        if re.search(r"VIEW (st_params|st_baseline)\b", sql):
            tree = sqlglot.parse_one(sql, read="duckdb")
            props = tree.args.get("properties") or sqlglot.exp.Properties(expressions=[])
            props.append("expressions", sqlglot.exp.TemporaryProperty())
            tree.set("properties", props)
            spark.sql(tree.sql(dialect="spark"))


def spark_findings(spark, store):
    spark_tables(spark, store)
    keep = materialized()
    views = (SPARK_DIR / "views.sql").read_text()
    for sql in statements(views, "spark"):
        if not re.sub(r"/\*.*?\*/", "", sql, flags=re.S).strip():
            continue
        spark.sql(sql)
        name = re.search(r"VIEW (\w+)", sql).group(1)
        if name in keep:
            # computed once, as analyze does: a view over views over views is analyzed whole
            # at every reference otherwise
            spark.sql(f"DROP TABLE IF EXISTS {name}__computed")
            spark.sql(f"CREATE TABLE {name}__computed USING parquet AS SELECT * FROM {name}")
            spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW {name} AS SELECT * FROM {name}__computed")
    return [r.asDict(recursive=True) for r in spark.sql("SELECT * FROM st_finding").collect()]


def comparable(rows):
    def value(v):
        if isinstance(v, float):
            return round(v, 6)
        if isinstance(v, (list, tuple)):
            return [value(x) for x in v]
        return v
    return sorted(json.dumps({k: value(v) for k, v in r.items()}, sort_keys=True, default=str) for r in rows)


@pytest.mark.parametrize("recording", RECORDINGS)
def test_spark_finds_what_duckdb_finds(spark, recording):
    store = DATA / recording
    duck = duckdb_findings(store)
    assert duck, "the recording has findings to compare"
    assert comparable(spark_findings(spark, store)) == comparable(duck)
