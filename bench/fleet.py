#!/usr/bin/env python3
"""How long `scaletrace analyze` takes, and how much memory, on a whole fleet's store: the fleet
issue's curve (64 nodes x 2 min ... 1,000 nodes x 1 h), with one planted congested peer that must
come out first.

    python3 bench/fleet.py --nodes 64 --minutes 2           # one point, printed
    python3 bench/fleet.py --points 16x2,64x2,64x10 --rtt-every-ms 10 --out docs/fleet

The fleet is the tests' congested-peer scenario (tests/scenarios.py) scaled up, written as the
agent's Hive layout (`table=NAME/date=.../hour=00/host=NODE/`, a file per table and host), with what a recorder at its defaults writes per node:
64 flows (two to each of 32 ring neighbours; fewer below 33 nodes), one `flow_windows` row per
flow and second (the kernel's 1 s windows: RTT percentiles, bytes, retransmits), raw `rtt`
samples at --rtt-every-ms (the recorder's default is 10 ms per flow: 117 MB per node-hour,
117 GB for the fleet-hour, which this machine's disk cannot hold: --rtt-around writes them for
the congested node's neighbourhood only; `analyze` reads the windows for its per-window views
and its triage, the samples for the step-level attribution and per-flow latency), GPU kernels of --gpus ranks per node for every step (compute, then an AllReduce
after the last rank arrives) and a few stray retransmits. Planted: the flows *to* one node
(a third of the way round the ring) see RTT x6 and a third of their throughput from 1/3 to 1/2
of the run, and every rank's AllReduce stretches then.

Each point generates its fleet into --dir (removed after), runs `analyze --no-report --json
--triage auto` (a store of more than 64 hosts is triaged) under /usr/bin/time for wall time and
peak RSS, and checks that the first slowdown verdict names the congested node; --whole-too
analyzes the same store again with `--triage off`."""
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

import duckdb

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
BASE = "2026-01-01 00:00:00+00"
PEERS = 32          # ring neighbours per node (16 each way), two flows to each: 64 flows
FLOWS_PER_PEER = 2
NODES_PER_FILE = 32  # a file per table per 32 nodes, as a spool's rotation would batch them


def ip(node):
    return f"10.{node // 65536}.{node // 256 % 256}.{node % 256 + 1}"


def congested_node(nodes):
    return nodes // 3


def rtt_nodes_of(nodes, around):
    """The nodes that get raw RTT samples: all (around None), else the congested node and its
    `around` ring neighbours each way (the disk here holds 65 GB; the fleet-hour's raw samples at
    10 ms are 117 GB)."""
    if around is None:
        return None
    hot = congested_node(nodes)
    return sorted({(hot + d) % nodes for d in range(-around, around + 1)})


def generate(out, nodes, seconds, gpus, step_ms, rtt_every_ms, rtt_nodes=None, plant=True, profiler_steps=False,
             fault="congestion"):
    """Writes the fleet under `out` (Hive layout); returns rows written per table. Raw RTT
    samples for `rtt_nodes` only when given (None: every node); `plant=False`: no fault;
    `profiler_steps`: each rank's training steps annotated too; `fault`: what slows the flows to
    the planted node, `congestion` (RTT x6) or `loss` (5 retransmitted segments a second per
    flow, no queueing); both cut their throughput to a third."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")
    ts = f"TIMESTAMPTZ '{BASE}'"
    hot = congested_node(nodes)
    c0, c1 = (seconds // 3, seconds // 2) if plant else (0, 0)
    assert fault in ("congestion", "loss"), fault
    rtt_factor = 6.0 if fault == "congestion" else 1.0
    lost_per_s = 5 if fault == "loss" else 0
    # the histogram bucket of an RTT of v µs (v >= 4): four buckets per power of two
    con.execute("CREATE MACRO bucket(v) AS 4 * (floor(log2(v)) - 1) + floor(v / 2 ** (floor(log2(v)) - 2)) - 4")
    con.execute(f"CREATE MACRO ip(n) AS '10.' || (n // 65536) || '.' || (n // 256 % 256) || '.' || (n % 256 + 1)")
    rows = {}

    def write(table, group, query):
        # the agent's spool: a directory per table, date, hour and host (the host column kept
        # in the files, as the agent writes them), so a glob or filter on hosts reads their files
        # only; every run starts at BASE and lasts at most an hour
        directory = os.path.join(out, f"table={table}", f"date={BASE[:10]}", "hour=00")
        os.makedirs(directory, exist_ok=True)
        con.execute(f"CREATE OR REPLACE TEMP TABLE written AS {query}")
        con.execute(f"""COPY written TO '{directory}' (FORMAT parquet, ROW_GROUP_SIZE 122880,
                        PARTITION_BY (host), WRITE_PARTITION_COLUMNS true, OVERWRITE_OR_IGNORE true,
                        FILENAME_PATTERN 'nodes{group:05d}_{{i}}')""")
        rows[table] = rows.get(table, 0) + con.execute("SELECT count(*) FROM written").fetchone()[0]

    for group, first in enumerate(range(0, nodes, NODES_PER_FILE)):
        last = min(first + NODES_PER_FILE, nodes)
        span = max(1, min(PEERS // 2, (nodes - 1) // 2))
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE flow_def AS
            SELECT n AS node, (n + d + {nodes}) % {nodes} AS peer, k,
                   n * 1000 + row_number() OVER (PARTITION BY n ORDER BY d, k) AS flow_id
            FROM range({first}, {last}) a(n),
                 (SELECT * FROM range(1, {span} + 1) r(d) UNION ALL SELECT -d FROM range(1, {span} + 1) r(d)) b(d),
                 range(0, {FLOWS_PER_PEER}) c(k)
            WHERE (n + d + {nodes}) % {nodes} <> n""")
        # per flow and second: the planted factors and the window's RTT spread
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE second AS
            SELECT f.*, s,
                   f.peer = {hot} AND s >= {c0} AND s < {c1} AS congested,
                   (hash(f.flow_id, s) % 1000) / 1000.0 AS noise
            FROM flow_def f, range(0, {seconds}) t(s)""")
        write("flows", group, f"""
            SELECT 'node' || node AS host, flow_id, 0::UBIGINT AS netns_cookie, 'ipv4' AS family,
                   ip(node) AS local_addr, (40000 + flow_id % 20000)::USMALLINT AS local_port,
                   ip(peer) AS remote_addr, (5000 + k)::USMALLINT AS remote_port, 'active' AS direction,
                   1234::UINTEGER AS pid, 'python' AS comm, {ts} AS start, NULL::TIMESTAMPTZ AS "end",
                   {seconds}000000000::BIGINT AS duration_ns, true AS open_at_end,
                   ({seconds}::BIGINT * 1250000000 - (CASE WHEN peer = {hot} THEN ({c1} - {c0})::BIGINT * 837500000 ELSE 0 END))::UBIGINT AS bytes_sent,
                   0::UBIGINT AS bytes_received, (CASE WHEN peer = {hot} THEN ({c1} - {c0}) * {lost_per_s} ELSE 0 END)::UINTEGER AS total_retrans,
                   (CASE WHEN peer = {hot} THEN ({c1} - {c0}) * {lost_per_s} ELSE 0 END)::UINTEGER AS retransmit_events,
                   ({seconds} * 2000)::UINTEGER AS rtt_updates, 50::UINTEGER AS min_rtt_us
            FROM flow_def""")
        # the kernel's windows: ~2,000 RTT updates a second at ~50 µs (x6 when congested)
        # the kernel's windows: ~2,000 RTT updates a second at ~50 µs (x6 when congested); the
        # updates that give the percentiles: half at the median, 40 % at the 90th, the rest at
        # the 99th (bucket bounds as rtt_histogram.rs). The lists are built once per distinct
        # triple of buckets and joined: built per row, they took most of the generation.
        write("flow_windows", group, f"""
            WITH base AS (
                SELECT *, bucket(p50)::INTEGER AS b50, bucket(p90)::INTEGER AS b90, bucket(p99)::INTEGER AS b99
                FROM (SELECT *, m * 50 * (1 + 0.1 * noise) AS p50, m * 50 * (1.15 + 0.1 * noise) AS p90,
                             m * 50 * (1.25 + 0.2 * noise) AS p99
                      FROM (SELECT *, CASE WHEN congested THEN {rtt_factor} ELSE 1.0 END AS m FROM second))),
            lists AS (
                SELECT b50, b90, b99,
                       list_transform(range(0, 84), lambda i: (CASE WHEN i = b50 THEN 1000 ELSE 0 END
                                                          + CASE WHEN i = b90 THEN 800 ELSE 0 END
                                                          + CASE WHEN i = b99 THEN 200 ELSE 0 END))::UINTEGER[] AS rtt_buckets
                FROM (SELECT DISTINCT b50, b90, b99 FROM base))
            SELECT 'node' || node AS host, {ts} + to_seconds(s::BIGINT) AS ts, flow_id::UBIGINT AS flow_id,
                   1000000000::UBIGINT AS window_ns, 2000::UINTEGER AS rtt_updates,
                   (m * 50)::UINTEGER AS srtt_min_us, m * 50 * (1 + 0.1 * noise) AS srtt_mean_us,
                   (m * 50 * (1.3 + 0.2 * noise))::UINTEGER AS srtt_max_us,
                   p50 AS srtt_p50_us, p90 AS srtt_p90_us, p99 AS srtt_p99_us, l.rtt_buckets,
                   (1250000000 * CASE WHEN congested THEN 0.33 ELSE 1.0 END)::UBIGINT AS bytes_sent,
                   0::UBIGINT AS bytes_received, (CASE WHEN congested THEN {lost_per_s} ELSE 0 END)::UINTEGER AS retrans_segments,
                   (CASE WHEN congested THEN {lost_per_s} ELSE 0 END)::UINTEGER AS retransmit_events,
                   0::UINTEGER AS rto_count, 0::UBIGINT AS rto_recovery_ns, 0::UBIGINT AS loss_recovery_ns
            FROM base JOIN lists l USING (b50, b90, b99)""")
        if rtt_every_ms and (rtt_nodes is None or any(first <= n < last for n in rtt_nodes)):
            per_second = max(1, 1000 // rtt_every_ms)
            write("rtt", group, f"""
                SELECT 'node' || node AS host,
                       {ts} + to_microseconds((s * 1000000 + i * {rtt_every_ms * 1000} + hash(flow_id, s, i) % {rtt_every_ms * 1000})::BIGINT) AS ts,
                       flow_id::UBIGINT AS flow_id,
                       (CASE WHEN congested THEN {rtt_factor} ELSE 1.0 END * 50 * (1 + 0.2 * noise))::UINTEGER AS srtt_us,
                       50::UINTEGER AS min_rtt_us, 100::UINTEGER AS snd_cwnd, 0::UINTEGER AS total_retrans,
                       8948::UINTEGER AS mss,
                       -- 10 Gbit/s, a third of it while congested
                       (1250000000 * ((s * {per_second} + i) / {per_second}
                        - CASE WHEN peer = {hot} THEN 0.67 * greatest(0, least((s * {per_second} + i) / {per_second}, {c1}) - {c0}) ELSE 0 END))::UBIGINT AS bytes_acked,
                       0::UBIGINT AS bytes_received
                FROM second, range(0, {per_second}) r(i)
                WHERE {'true' if rtt_nodes is None else 'node IN (' + (','.join(map(str, rtt_nodes)) or '-1') + ')'}""")
        write("interfaces", group, f"""
            SELECT 'node' || n AS host, 'r1' AS run_id, 'eth0' AS name, 'ipv4' AS family, ip(n) AS addr,
                   16::UTINYINT AS prefix_len, 0::BIGINT AS numa_node
            FROM range({first}, {last}) a(n)""")
        write("gpu_devices", group, f"""
            SELECT 'node' || n AS host, 'r1' AS run_id, g::UINTEGER AS "index", 'GPU-node' || n || '-' || g AS uuid,
                   'NVIDIA H100' AS name, '0000:' || (g * 16 + 24)::VARCHAR || ':00.0' AS pci_bus_id,
                   (g * 2 // {gpus})::BIGINT AS numa_node, 85899345920::UBIGINT AS memory_total_bytes,
                   'mlx5_' || g AS nearest_nic, (g * 2 // {gpus})::BIGINT AS nic_numa_node, 'PIX' AS nic_locality
            FROM range({first}, {last}) a(n), range(0, {gpus}) b(g)""")
        # two stray retransmits a node and hour: real networks are never perfectly clean
        write("retransmits", group, f"""
            SELECT 'node' || node AS host, {ts} + to_microseconds((hash(flow_id) % ({seconds}::BIGINT * 1000000))::BIGINT) AS ts,
                   flow_id::UBIGINT AS flow_id, 'retransmit' AS kind, 'ipv4' AS family, ip(node) AS local_addr,
                   (40000 + flow_id % 20000)::USMALLINT AS local_port, ip(peer) AS remote_addr,
                   (5000 + k)::USMALLINT AS remote_port, 'ESTABLISHED' AS state
            FROM flow_def WHERE hash(flow_id) % 3600 < greatest(2 * {seconds} // 64, 1)
            UNION ALL
            -- a lossy link: its retransmits one by one, spread over each second
            SELECT 'node' || node, {ts} + to_microseconds((s * 1000000 + i * 1000000 // greatest({lost_per_s}, 1))::BIGINT),
                   flow_id::UBIGINT, 'retransmit', 'ipv4', ip(node), (40000 + flow_id % 20000)::USMALLINT, ip(peer),
                   (5000 + k)::USMALLINT, 'ESTABLISHED'
            FROM second, range(0, {lost_per_s}) r(i) WHERE congested""")
        # every rank's compute, then its AllReduce, which ends 20 % of a step after the last
        # rank of the whole job arrives (70 % in congested steps)
        step_us = step_ms * 1000
        # the CPU-side `ProfilerStep#N` annotation of each rank's step, as PyTorch's profiler
        # writes it (what `--baseline` needs)
        profiler_step_rows = f"""
            UNION ALL
            SELECT 'node' || node, rank, {ts} + to_microseconds(start_us::BIGINT), ({step_us} * 1000)::BIGINT,
                   'user_annotation', 'ProfilerStep#' || step, false, NULL, NULL, NULL, gpu, 1, NULL,
                   'rank' || rank || '.pt.trace.json', true, NULL
            FROM k""" if profiler_steps else ""
        write("gpu_events", group, f"""
            WITH a AS (
                SELECT n AS node, g AS gpu, n * {gpus} + g AS rank, step, step * {step_us} AS start_us,
                       step * {step_ms} // 1000 >= {c0} AND step * {step_ms} // 1000 < {c1} AS congested,
                       hash(n, g, step) % 100 AS jitter_us
                FROM range({first}, {last}) a(n), range(0, {gpus}) b(g), range(0, {seconds * 1000 // step_ms}) c(step)),
            k AS (
                SELECT *, CASE WHEN congested THEN {step_us // 5} ELSE {step_us // 2} END + jitter_us AS compute_us,
                       CASE WHEN congested THEN {step_us // 5} ELSE {step_us // 2} END + 99 AS last_arrival_us
                FROM a)
            SELECT 'node' || node AS host, rank::BIGINT AS rank, {ts} + to_microseconds(start_us::BIGINT) AS ts,
                   (compute_us * 1000)::BIGINT AS dur_ns, 'kernel' AS category, 'volta_sgemm_128x64_nn' AS name,
                   true AS on_gpu, NULL AS collective, gpu::BIGINT AS device, 7::BIGINT AS stream,
                   gpu::BIGINT AS pid, 7::BIGINT AS tid, NULL::BIGINT AS correlation,
                   'rank' || rank || '.pt.trace.json' AS source, true AS time_aligned, NULL AS comm_source
            FROM k
            UNION ALL
            SELECT 'node' || node, rank, {ts} + to_microseconds((start_us + compute_us)::BIGINT),
                   ((last_arrival_us - compute_us + CASE WHEN congested THEN {step_us * 7 // 10} ELSE {step_us // 5} END) * 1000)::BIGINT,
                   'kernel', 'ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)',
                   true, 'AllReduce', gpu, 8, gpu, 7, NULL, 'rank' || rank || '.pt.trace.json', true, 'nccl_kernel'
            FROM k{profiler_step_rows}""")
    return rows


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def analyze(binary, store, work, memory_limit, triage):
    out = os.path.join(work, "findings.json")
    cmd = ["/usr/bin/time", "-f", "%e %M", binary, "analyze", store, "--no-report", "--json", out,
           "--temp-dir", os.path.join(work, "spill"), "--triage", triage]
    if memory_limit:
        cmd += ["--memory-limit", memory_limit]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    tail = proc.stderr.strip().splitlines()
    wall, rss_kb = (float(x) for x in tail[-1].split())
    if proc.returncode != 0:
        return {"wall_s": wall, "peak_rss_gb": rss_kb / 2**20, "error": "\n".join(tail[-3:-1])}
    findings = json.loads(open(out).read())
    read = re.search(r"the exact analysis of (\d+) of the", proc.stdout)
    verdicts = [f for f in findings if f["category"] == "slowdown"]
    return {"wall_s": wall, "peak_rss_gb": round(rss_kb / 2**20, 2), "findings": len(findings),
            "hosts_read": int(read.group(1)) if read else None,
            "first_slowdown": verdicts[0]["subject"] if verdicts else None,
            "first_slowdown_summary": verdicts[0]["summary"] if verdicts else None,
            "first_finding": f"{findings[0]['category']}: {findings[0]['subject']}" if findings else None}


def point(args, nodes, minutes):
    work = os.path.join(args.dir, f"fleet-{nodes}x{minutes}")
    shutil.rmtree(work, ignore_errors=True)
    store = os.path.join(work, "store")
    t0 = time.monotonic()
    rtt_nodes = rtt_nodes_of(nodes, args.rtt_around)
    rows = generate(store, nodes, minutes * 60, args.gpus, args.step_ms, args.rtt_every_ms, rtt_nodes)
    generated = time.monotonic() - t0
    result = {"nodes": nodes, "minutes": minutes, "rows": rows, "store_gb": round(du(store) / 1e9, 3),
              "generate_s": round(generated, 1), "congested_node": f"node{congested_node(nodes)}",
              "rtt_nodes": len(rtt_nodes) if rtt_nodes is not None else nodes}
    result.update(analyze(args.binary, store, work, args.memory_limit, args.triage))
    result["planted_first"] = result.get("first_slowdown") == result["congested_node"]
    if args.whole_too and nodes * minutes <= args.whole_too:
        # the same store read whole (`--triage off`), right after: the baseline of the ratio
        whole = analyze(args.binary, store, work, args.memory_limit, "off")
        whole["planted_first"] = whole.get("first_slowdown") == result["congested_node"]
        result["whole"] = whole
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return result


def markdown(meta, out):
    k = meta["settings"]
    def verdict(r):
        return 'yes' if r['planted_first'] else 'no: ' + str(r.get('first_slowdown') or r.get('error'))

    def whole(r):
        w = r.get("whole")
        return f"{w['wall_s']:.0f} s, {w['peak_rss_gb']:.1f} GB, {verdict(w)}" if w else "not run"

    rows = "\n".join(
        f"| {r['nodes']} x {r['minutes']} min | {r['rows']['flows']:,} "
        f"| {r['rows'].get('rtt', 0) / 1e6:,.1f} M ({r.get('rtt_nodes', r['nodes'])} nodes) | {r['rows']['flow_windows'] / 1e6:,.2f} M | {r['store_gb']:.2f} GB "
        f"| {r['wall_s']:.0f} s | {r['peak_rss_gb']:.1f} GB | {r.get('hosts_read') or 'all'} "
        f"| {verdict(r)} | {whole(r)} |"
        for r in meta["results"])
    around = ("" if k.get("rtt_around") is None else
              f" Raw RTT samples were written for the congested node and its {k['rtt_around']} ring neighbours"
              " each way only (the disk here cannot hold the fleet-hour's 117 GB).")
    return f"""# Analyzing a fleet's store

Generated by `{meta['command']}` on {meta['date']} ({meta['machine']}); raw numbers in `{os.path.basename(out)}.json`.

The fleet is the tests' congested-peer scenario scaled up (bench/fleet.py says how): 64 flows per
node (fewer below 33 nodes), one `flow_windows` row per flow and second, {'raw RTT samples every ' + str(k['rtt_every_ms']) + ' ms per flow' if k['rtt_every_ms'] else 'no raw RTT samples'},
{k['gpus']} ranks per node with a {k['step_ms']} ms training step. One node (a third of the way round the
ring) is congested for a sixth of the run. `analyze --no-report --json --triage {k.get('triage', 'auto')}`
{('--memory-limit ' + k['memory_limit']) if k['memory_limit'] else 'at its default memory limit (80 % of RAM)'}; wall time and peak RSS from
/usr/bin/time; "hosts read": the hosts the exact analysis read after the triage (a store of more
than 64 hosts is triaged at `auto`); "planted first": the first slowdown verdict names the
congested node.{around}

| fleet | flows | RTT samples | flow windows | store | analyze wall | peak RSS | hosts read | planted first | the store read whole (`--triage off`): wall, RSS, planted first |
|---|---|---|---|---|---|---|---|---|---|
{rows}
""" + (f"\n{meta['note']}\n" if meta.get("note") else "")


def render(out, note, markdown):
    """OUT.md written again from OUT.json, with `note` if given."""
    with open(out + ".json") as f:
        meta = json.load(f)
    meta["note"] = note or meta.get("note")
    with open(out + ".json", "w") as f:
        json.dump(meta, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write(markdown(meta))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=64)
    p.add_argument("--minutes", type=int, default=2)
    p.add_argument("--points", default=None, help="several fleets, NODESxMINUTES comma-separated, e.g. 16x2,64x2,64x10")
    p.add_argument("--gpus", type=int, default=8, help="ranks per node")
    p.add_argument("--step-ms", type=int, default=1000, help="training step")
    p.add_argument("--rtt-every-ms", type=int, default=0,
                   help="raw RTT samples per flow every this many ms (0: none; the recorder's default is 10)")
    p.add_argument("--rtt-around", type=int, default=None,
                   help="raw RTT samples only for the congested node and this many ring neighbours each way "
                        "(default: every node); the fleet-hour's samples do not fit this machine's disk")
    p.add_argument("--triage", default="auto", choices=["auto", "on", "off"], help="analyze --triage")
    p.add_argument("--whole-too", type=int, default=0, metavar="NODE_MINUTES",
                   help="also analyze every point up to this many node-minutes with --triage off")
    p.add_argument("--memory-limit", default=None, help="analyze --memory-limit")
    p.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "scaletrace"))
    p.add_argument("--dir", default="/var/tmp/scaletrace-fleet", help="where the fleets are generated")
    p.add_argument("--keep", action="store_true", help="keep the generated store")
    p.add_argument("--out", default=None, help="write the curve to OUT.md and OUT.json")
    p.add_argument("--note", default=None, help="a paragraph for OUT.md (what changed, what it was before)")
    p.add_argument("--render", action="store_true", help="only write OUT.md again from OUT.json (with --note)")
    args = p.parse_args()
    points = ([tuple(int(x) for x in p.split("x")) for p in args.points.split(",")] if args.points
              else [(args.nodes, args.minutes)])
    if args.render:
        return render(args.out, args.note, lambda meta: markdown(meta, args.out))
    results = []
    for nodes, minutes in points:
        results.append(point(args, nodes, minutes))
        if args.out:  # after each point: the big ones take many minutes
            write(args, results)


def write(args, results):
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.node()}: {os.cpu_count()} CPUs, "
                       f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
            "command": "python3 " + " ".join(sys.argv), "note": args.note,
            "settings": {"rtt_every_ms": args.rtt_every_ms, "gpus": args.gpus, "step_ms": args.step_ms,
                         "memory_limit": args.memory_limit, "rtt_around": args.rtt_around, "triage": args.triage},
            "results": results}
    with open(args.out + ".json", "w") as f:
        json.dump(meta, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(meta, args.out))


if __name__ == "__main__":
    main()
