"""An agent's Hive store read by the engines users bring: pyarrow, Polars and Spark (PySpark in
local mode) must find every table the agent records, empty ones included, and read the same rows
and values as DuckDB. Spark needs one documented reader setting (docs/schema.md, Layout)."""
import re
import subprocess
import time

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql import SparkSession

from test_agent import BIN, Agent, Traffic
from test_spark_views import assert_same_findings, duckdb_rows, duckdb_run, spark_run

# Written by `import` and `analyze`, not by the agent.
NOT_RECORDED = {"gpu_events", "windows"}


def recorded_tables():
    schema = subprocess.run([BIN, "schema"], capture_output=True, text=True, check=True).stdout
    return sorted(set(re.findall(r"^## `(\w+)`", schema, re.M)) - NOT_RECORDED)


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    session = (SparkSession.builder.master("local[1]").appName("scaletrace-store")
               .config("spark.ui.enabled", "false")
               # a broadcast join of the analysis ran out of the default 1 GB once (the JVM
               # is shared by the test modules: whichever starts it sets its heap)
               .config("spark.driver.memory", "4g")
               # the analysis script's building blocks are tables
               .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
               .config("spark.sql.legacy.parquet.nanosAsLong", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def test_every_table_of_a_spool_reads_the_same_in_duckdb_polars_pyarrow_and_spark(net, tmp_path, spark):
    spool = tmp_path / "spool"
    traffic = Traffic(net, 3)
    # several rotations: the tables without rows (no RDMA, NCCL or GPU here) get a file once
    agent = Agent(spool, "--rotate-interval", "1s")
    # two rotations' files, then the stop's (polled: a rotation's period depends on the machine)
    deadline = time.time() + 30
    while len(list((spool / "table=capture").rglob("*.parquet"))) < 2:
        assert time.time() < deadline, "no two rotations in 30 s"
        time.sleep(0.2)
    assert agent.stop() == 0, agent.stderr
    assert traffic.connections() > 0
    tables = recorded_tables()
    assert len(tables) >= 18, tables
    on_disk = sorted(d.name.removeprefix("table=") for d in spool.iterdir() if d.name.startswith("table="))
    assert on_disk == tables
    rotations = len(list((spool / "table=capture").rglob("*.parquet")))
    assert rotations >= 3
    con = duckdb.connect()
    for table in tables:
        where = spool / f"table={table}"
        glob = f"{where}/**/*.parquet"
        files = list(where.rglob("*.parquet"))
        duck = con.execute(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning = true)").fetchone()[0]
        if duck == 0:
            assert len(files) == 1, f"{table}: an empty table is one file, not one per interval: {files}"
        polars_rows = pl.scan_parquet(glob, hive_partitioning=True).collect().height
        arrow_rows = ds.dataset(str(where), format="parquet", partitioning="hive").count_rows()
        spark_rows = spark.read.option("pathGlobFilter", "*.parquet").parquet(str(where)).count()
        assert (table, polars_rows, arrow_rows, spark_rows) == (table, duck, duck, duck)

    # Values, not only counts: unsigned ids and counters, nanosecond timestamps.
    flows = spool / "table=flows"
    flows_glob = f"{flows}/**/*.parquet"
    duck_flows = sorted(con.execute(
        f"SELECT flow_id, bytes_sent, epoch_ns(start) FROM read_parquet('{flows_glob}')").fetchall())
    assert duck_flows and all(start > 1.7e18 for _, _, start in duck_flows)
    spark_flows = spark.read.option("pathGlobFilter", "*.parquet").parquet(str(flows))
    types = dict(spark_flows.dtypes)
    assert (types["flow_id"], types["bytes_sent"], types["start"]) == ("decimal(20,0)", "decimal(20,0)", "bigint")
    assert sorted((int(r.flow_id), int(r.bytes_sent), r.start)
                  for r in spark_flows.select("flow_id", "bytes_sent", "start").collect()) == duck_flows
    polars_flows = pl.scan_parquet(flows_glob).select(
        "flow_id", "bytes_sent", pl.col("start").dt.epoch("ns")).collect()
    assert sorted(polars_flows.iter_rows()) == duck_flows
    arrow_flows = ds.dataset(str(flows), format="parquet", partitioning="hive").to_table(
        columns=["flow_id", "bytes_sent", "start"])
    starts = arrow_flows.column("start").cast(pa.int64()).to_pylist()
    assert sorted(zip(arrow_flows.column("flow_id").to_pylist(), arrow_flows.column("bytes_sent").to_pylist(),
                      starts)) == duck_flows

    # The analysis in Spark SQL on the agent's own store (hour partitions, rotations, empty
    # tables): every table view reads the rows DuckDB's reads, and the findings are DuckDB's.
    duck_script = duckdb_run(spool, [])
    spark_run(spark, spool, [])
    for table in tables:
        duck = duck_script.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        assert (table, spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0]) == (table, duck)
    # values: nanosecond times and unsigned ids as DuckDB reads them
    for table, column in [("rtt", "ts"), ("flows", "start"), ("capture", "end")]:
        duck = duck_script.execute(
            f'SELECT epoch_ns(min("{column}")), epoch_ns(max("{column}")) FROM {table}').fetchone()
        assert duck[0] is not None and duck[0] > 1.7e18, (table, duck)
        spark_row = spark.sql(f"SELECT min(`{column}`), max(`{column}`) FROM {table}").collect()[0]
        assert (table, *spark_row) == (table, *duck)
    duck_ids = sorted(r[0] for r in duck_script.execute("SELECT flow_id FROM flows").fetchall())
    assert sorted(r[0] for r in spark.sql("SELECT flow_id FROM flows").collect()) == duck_ids
    assert spark.sql("SELECT count(*) FROM st_flow_window").collect()[0][0] > 0
    spark_findings = [r.asDict(recursive=True) for r in spark.sql("SELECT * FROM st_finding").collect()]
    assert_same_findings(spark_findings, duckdb_rows(duck_script, "SELECT * FROM st_finding"))
