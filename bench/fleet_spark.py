#!/usr/bin/env python3
"""The same fleet as bench/fleet.py, analyzed by Spark (PySpark, local mode) from
`scaletrace sql --dialect spark` and by DuckDB from `scaletrace sql`: wall time, peak memory of
each engine, and whether their findings are the same rows.

    python3 bench/fleet_spark.py --points 16x2,32x2 --rtt-every-ms 10 --out docs/fleet-spark

Spark reads the store's timestamps as integers in nanoseconds (the script's setting), and the
generator writes microseconds (DuckDB's COPY), so the generated files are rewritten with
nanosecond timestamps first, as the recorder writes them; that time is not counted. Each
engine runs the whole script, statement by statement, then `SELECT * FROM st_finding`; each
runs in its own process, so its peak RSS (the JVM's for Spark, read from /proc before it
stops) is its own."""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scaletrace", "src", "analyze", "spark"))

sys.path.insert(0, os.path.join(ROOT, "tests"))
import fleet  # noqa: E402
from spark_script import comparable, nanosecond_timestamps, spark_statements  # noqa: E402


def script(binary, store, dialect):
    run = subprocess.run([binary, "sql", "--dialect", dialect, store], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"scaletrace sql --dialect {dialect}: {run.stderr.strip()}")
    return run.stdout


# Each engine runs in a child process (this file with --engine): it prints one JSON line.
def run_duckdb(sql_path, threads):
    import duckdb
    from translate import statements
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    t0 = time.monotonic()
    for sql in statements(open(sql_path).read()):
        if sql.strip():
            con.execute(sql)
    views = time.monotonic() - t0
    cur = con.execute("SELECT * FROM st_finding")
    names = [c[0] for c in cur.description]
    findings = [dict(zip(names, r)) for r in cur.fetchall()]
    return views, time.monotonic() - t0 - views, findings


def run_spark(sql_path, threads, driver_memory):
    from pyspark.sql import SparkSession
    session = (SparkSession.builder.master(f"local[{threads}]").appName("scaletrace-fleet")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(2 * threads))
               .config("spark.driver.memory", driver_memory)
               .config("spark.sql.warehouse.dir", os.path.join(os.path.dirname(sql_path), "warehouse"))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    t0 = time.monotonic()
    # split as docs/queries.md tells users to
    for sql in spark_statements(open(sql_path).read()):
        session.sql(sql)
    views = time.monotonic() - t0
    findings = [r.asDict(recursive=True) for r in session.sql("SELECT * FROM st_finding").collect()]
    return views, time.monotonic() - t0 - views, findings


def jvm_peak_rss_gb():
    """Peak RSS of this process's Java child (Spark's driver), before it stops."""
    peak = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                status = f.read()
        except OSError:
            continue
        if re.search(rf"^PPid:\s+{os.getpid()}$", status, re.M) and "java" in status.split("\n", 1)[0]:
            peak = max(peak, int(re.search(r"^VmHWM:\s+(\d+)", status, re.M).group(1)))
    return peak / 2**20


def engine_main(args):
    if args.engine == "duckdb":
        views, query, findings = run_duckdb(args.sql, args.threads)
        peak = None
    else:
        views, query, findings = run_spark(args.sql, args.threads, args.driver_memory)
        peak = jvm_peak_rss_gb()
    print(json.dumps({"views_s": views, "findings_s": query, "jvm_peak_rss_gb": peak,
                      "findings": findings}, default=str))


def engine(name, sql_path, args):
    cmd = ["/usr/bin/time", "-f", "%e %M", sys.executable, os.path.abspath(__file__), "--engine", name,
           "--sql", sql_path, "--threads", str(args.threads), "--driver-memory", args.driver_memory]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall, rss_kb = (float(x) for x in proc.stderr.strip().splitlines()[-1].split())
    if proc.returncode != 0:
        return {"wall_s": wall, "error": "\n".join(proc.stderr.strip().splitlines()[-4:-1])}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # the Python process's own peak for DuckDB; for Spark the JVM's (the Python side only drives it)
    peak = out["jvm_peak_rss_gb"] if name == "spark" else rss_kb / 2**20
    return {"wall_s": wall, "views_s": round(out["views_s"], 1), "findings_s": round(out["findings_s"], 1),
            "peak_rss_gb": round(peak, 2), "findings": out["findings"]}


def point(args, nodes, minutes):
    work = os.path.join(args.dir, f"fleet-spark-{nodes}x{minutes}")
    shutil.rmtree(work, ignore_errors=True)
    store = os.path.join(work, "store")
    rows = fleet.generate(store, nodes, minutes * 60, args.gpus, args.step_ms, args.rtt_every_ms)
    nanosecond_timestamps(store)
    result = {"nodes": nodes, "minutes": minutes, "rows": rows, "store_gb": round(fleet.du(store) / 1e9, 3),
              "congested_node": f"node{fleet.congested_node(nodes)}"}
    for name, dialect in (("duckdb", "duckdb"), ("spark", "spark")):
        path = os.path.join(work, f"{name}.sql")
        with open(path, "w") as f:
            f.write(script(args.binary, store, dialect))
        result[name] = engine(name, path, args)
        print(f"{nodes} x {minutes} min, {name}: "
              f"{ {k: v for k, v in result[name].items() if k != 'findings'} }", file=sys.stderr, flush=True)
    duck, spark = result["duckdb"].pop("findings", None), result["spark"].pop("findings", None)
    if duck is not None and spark is not None:
        a, b = comparable(duck), comparable(spark)
        result["same_findings"] = a == b
        result["findings"] = len(duck)
        result["only_duckdb"], result["only_spark"] = [r for r in a if r not in b], [r for r in b if r not in a]
        verdicts = [f for f in duck if f["category"] == "slowdown"]
        result["planted_first"] = bool(verdicts) and verdicts[0]["subject"] == result["congested_node"]
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return result


def markdown(meta):
    k = meta["settings"]
    def cell(r, name):
        e = r[name]
        return (f"error: {e['error']}" if "error" in e else
                f"{e['wall_s']:.0f} s ({e['views_s']:.1f} + {e['findings_s']:.1f}) | {e['peak_rss_gb']:.1f} GB")
    rows = "\n".join(
        f"| {r['nodes']} x {r['minutes']} min | {r['rows'].get('rtt', 0) / 1e6:,.1f} M | {r['rows']['flow_windows'] / 1e6:,.2f} M "
        f"| {cell(r, 'duckdb')} | {cell(r, 'spark')} "
        f"| {'yes' if r.get('same_findings') else 'no'} ({r.get('findings', '?')}) |"
        for r in meta["results"])
    return f"""# The fleet's store analyzed by Spark and by DuckDB

Generated by `{meta['command']}` on {meta['date']} ({meta['machine']}); raw numbers in the `.json` beside this file.

The fleet is bench/fleet.py's ({k['gpus']} ranks per node, {k['step_ms']} ms steps, 64 flows per
node, {'raw RTT samples every ' + str(k['rtt_every_ms']) + ' ms per flow' if k['rtt_every_ms'] else 'no raw RTT samples'}).
Both engines run the script `scaletrace sql` prints for them, statement by statement, then
`SELECT * FROM st_finding`, each with {k['threads']} threads ({'Spark local[' + str(k['threads']) + '], driver heap ' + k['driver_memory']}).
Wall time is the whole child process (start-up included); in brackets, the script's views and
tables, then the findings query. Peak RSS: DuckDB's process; Spark's JVM (VmHWM).

| fleet | RTT samples | flow windows | DuckDB wall | DuckDB RSS | Spark wall | Spark RSS | same findings (rows) |
|---|---|---|---|---|---|---|---|
{rows}
""" + (f"\n{meta['note']}\n" if meta.get("note") else "")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default="16x2", help="fleets, NODESxMINUTES comma-separated")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--step-ms", type=int, default=1000)
    p.add_argument("--rtt-every-ms", type=int, default=10)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--driver-memory", default="8g")
    p.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "scaletrace"))
    p.add_argument("--dir", default="/var/tmp/scaletrace-fleet")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--out", default=None, help="write OUT.md and OUT.json")
    p.add_argument("--note", default=None)
    p.add_argument("--render", action="store_true", help="only write OUT.md again from OUT.json (with --note)")
    p.add_argument("--engine", choices=["duckdb", "spark"], help=argparse.SUPPRESS)
    p.add_argument("--sql", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.engine:
        return engine_main(args)
    if args.render:
        return fleet.render(args.out, args.note, markdown)
    results = []
    for spec in args.points.split(","):
        nodes, minutes = (int(x) for x in spec.split("x"))
        results.append(point(args, nodes, minutes))
        if args.out:
            meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "machine": f"{platform.node()}: {os.cpu_count()} CPUs, "
                               f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
                    "command": "python3 " + " ".join(sys.argv), "note": args.note,
                    "settings": {k: getattr(args, k) for k in ("rtt_every_ms", "gpus", "step_ms", "threads", "driver_memory")},
                    "results": results}
            with open(args.out + ".json", "w") as f:
                json.dump(meta, f, indent=1)
            with open(args.out + ".md", "w") as f:
                f.write(markdown(meta))


if __name__ == "__main__":
    main()
