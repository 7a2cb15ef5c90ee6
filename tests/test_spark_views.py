"""`scaletrace sql --dialect spark` gives the same findings in Spark as `analyze` does in DuckDB:
real DDP jobs with a planted fault (tests/data), read by PySpark in local mode, the script run
as it is printed (its settings, table views, thresholds, the views translate.py makes of the
DuckDB ones, and the building blocks written as tables)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import scenarios
from spark_script import comparable, nanosecond_timestamps, spark_statements
from test_agent import BIN

ROOT = Path(__file__).resolve().parent.parent
SPARK_DIR = ROOT / "scaletrace" / "src" / "analyze" / "spark"
sys.path.insert(0, str(SPARK_DIR))
from translate import statements  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
# a network fault and a straggler: the two halves of the verdict
# reorder-quiet-steps-after-onset: the one whose verdict charges steps without evidence
RECORDINGS = ["loss-gap-after-onset", "slow-rank-noise-before-onset", "rate-limit-overflow", "slow-rank-last-step",
              "reorder-quiet-steps-after-onset"]


def test_the_spark_views_are_what_translate_makes_of_the_duckdb_views():
    run = subprocess.run([sys.executable, str(SPARK_DIR / "translate.py"), "--check"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    # only what is not the script's: the session's resources and where its tables go
    session = (SparkSession.builder.master("local[1]").appName("scaletrace-views")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               # a broadcast join of the analysis ran out of the default 1 GB once (the JVM
               # is shared by the test modules: whichever starts it sets its heap)
               .config("spark.driver.memory", "4g")
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               .getOrCreate())
    session.sparkContext.setLogLevel("OFF")
    yield session
    session.stop()


def script(store, args, dialect):
    run = subprocess.run([BIN, "sql", "--dialect", dialect, *args, str(store)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def duckdb_run(store, args):
    """A DuckDB connection that has run `scaletrace sql`'s script."""
    con = duckdb.connect()
    for sql in statements(script(store, args, "duckdb")):
        if sql.strip():
            con.execute(sql)
    return con


def duckdb_rows(con, query):
    cur = con.execute(query)
    names = [c[0] for c in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def spark_run(spark, store, args):
    """Runs `scaletrace sql --dialect spark`'s script in the session, statement by statement,
    split as docs/queries.md tells users to."""
    for sql in spark_statements(script(store, args, "spark")):
        spark.sql(sql)


def duckdb_findings(store, args):
    return duckdb_rows(duckdb_run(store, args), "SELECT * FROM st_finding")


def spark_findings(spark, store, args):
    spark_run(spark, store, args)
    return [r.asDict(recursive=True) for r in spark.sql("SELECT * FROM st_finding").collect()]


def assert_same_findings(in_spark, in_duckdb):
    """Equal row for row; on a difference, the rows each engine alone has."""
    spark, duck = comparable(in_spark), comparable(in_duckdb)
    only_spark = [r for r in spark if r not in duck]
    only_duck = [r for r in duck if r not in spark]
    assert spark == duck, f"only in Spark: {only_spark}\nonly in DuckDB: {only_duck}"


def hive_copy(store, root):
    """The recording as agents ship it: table=/date=/hour=/host= directories of part files."""
    for f in store.glob("fleet/*/*/*.parquet"):
        node, table = f.parent.parent.name, f.parent.name
        d = root / f"table={table}" / "date=2026-12-04" / "hour=21" / f"host={node}"
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, d / f"part-{f.stem}.parquet")
    return root


@pytest.mark.parametrize("recording,args", [(r, []) for r in RECORDINGS] + [
    # analysis windows longer than the recorder's: kernel histograms added bucket by bucket
    ("loss-gap-after-onset", ["--window", "3s"]),
])
def test_spark_finds_what_duckdb_finds(spark, recording, args):
    store = DATA / recording
    duck = duckdb_findings(store, args)
    assert duck, "the recording has findings to compare"
    assert_same_findings(spark_findings(spark, store, args), duck)


def test_spark_reads_the_hive_layout_agents_ship(spark, tmp_path):
    store = hive_copy(DATA / "slow-rank-noise-before-onset", tmp_path / "store")
    assert f"'file://{store.resolve()}/table=rtt'" in script(store, [], "spark"), "one tree per table"
    duck = duckdb_findings(store, [])
    assert duck
    assert_same_findings(spark_findings(spark, store, []), duck)


def test_spark_finds_what_duckdb_finds_on_a_generated_gpu_fleet(spark, tmp_path):
    """GPU timelines, NUMA locality and congestion, which the recorded CPU jobs lack, under a
    directory whose name Hadoop would take as a glob."""
    store = scenarios.generate(str(tmp_path / "run[1],x"),
                               ["congested_peer", "straggler", "wrong_numa", "loss_burst"])
    nanosecond_timestamps(store)
    duck = duckdb_findings(store, [])
    assert {f["category"] for f in duck} >= {"slowdown", "contention", "straggler", "locality", "gpu_idle"}, duck
    assert_same_findings(spark_findings(spark, store, []), duck)


def test_a_store_with_other_timestamps_than_nanoseconds_is_refused_for_spark(tmp_path):
    """Spark reads the timestamps as integers in the unit the script assumes: microseconds
    (DuckDB's COPY) would put every time 1,000 times too early, silently."""
    store = scenarios.generate(str(tmp_path / "fleet"), [])
    run = subprocess.run([BIN, "sql", "--dialect", "spark", store], capture_output=True, text=True)
    assert run.returncode != 0
    assert "nanoseconds" in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    nanosecond_timestamps(store)
    assert "CREATE OR REPLACE TEMPORARY VIEW st_finding" in script(store, [], "spark")


def test_a_later_session_writes_the_building_blocks_over_what_an_earlier_one_left(spark, tmp_path):
    """A session without a metastore (plain pyspark, spark-sql) forgets its tables but not their
    files: with tables in the warehouse, a second run there stopped at LOCATION_ALREADY_EXISTS.
    Each building block is written over what is at its location: a directory of the store's
    own in the session's warehouse by default, else under --spark-tables; a run again in the
    same session (the table known) drops it first."""
    store = DATA / "rate-limit-overflow"
    expected = duckdb_run(store, []).execute("SELECT count(*) FROM st_rtt_window").fetchone()[0]
    tables = tmp_path / "tables"
    leftover = tables / "st_rtt_window__computed" / "part-00000-earlier-run.parquet"
    leftover.parent.mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2, 3]}), leftover)
    warehouse = spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:")
    for args in [], ["--spark-tables", f"file://{tables}"]:
        text = script(store, args, "spark")
        (location,) = set(re.findall(r"LOCATION '([^']*)/st_rtt_window__computed'", text))
        location = Path(location.replace("${spark.sql.warehouse.dir}", warehouse).removeprefix("file://"))
        assert location == tables if args else location.parent == Path(warehouse), location
        # the script up to its first building block's table, as each run begins
        first = text.index("CREATE OR REPLACE TEMPORARY VIEW st_rtt_window AS SELECT * FROM st_rtt_window__computed")
        for forget in (False, True, False):
            for sql in spark_statements(text[:first]):
                spark.sql(sql)
            if forget:  # as a new session without a metastore would
                spark.sql("DROP TABLE st_rtt_window__computed")
        assert location != tables or not leftover.exists()
        read = spark.read.parquet(f"file://{location}/st_rtt_window__computed").count()
        assert read == expected, (read, expected)
    spark.sql("RESET spark.sql.legacy.allowNonEmptyLocationInCTAS")
    assert "RESET spark.sql.legacy.allowNonEmptyLocationInCTAS;" in text.split("st_finding")[-1]
