"""Real PyTorch profiler (Kineto) traces from GPU clusters (../shared/real-traces, recorded by
others): import, merge and analyze them, and check every number against an independent
computation written here from the JSON itself (exact decimals, interval unions in Python) —
never against the code under test. Also: cut traces keep their events, two inputs with one
file name stay two, traces of different jobs are refused, and the SQL that `scaletrace sql`
prints runs in the Python DuckDB that setup installs."""
import decimal
import gzip
import json
import os
import shutil
import subprocess

import duckdb
import pytest

from netlab import Recorder, transfer

BIN = os.environ.get("SCALETRACE_BIN", os.path.join(os.path.dirname(__file__), "..", "target", "release", "scaletrace"))
HERE = os.path.dirname(os.path.abspath(__file__))
REAL = next((p for p in (os.path.join(HERE, "..", "..", "shared", "real-traces"),
                         os.path.join(HERE, "..", "shared", "real-traces")) if os.path.isdir(p)), None)
pytestmark = pytest.mark.skipif(REAL is None, reason="../shared/real-traces is not beside this checkout")

NCCL_DATA = "hta_nccl_parser_config/nccl_data.json.gz"        # rank 0 of 2, base at the end, kernel args
DF_INDEX = "hta_df_index_resolver/df_index_resolver.json.gz"  # rank 1 of 2, 216k events, absolute µs
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def run(*args, timeout=600):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


def load(name):
    """The trace with every number as an exact Decimal."""
    with gzip.open(os.path.join(REAL, name), "rt") as f:
        return json.load(f, parse_float=decimal.Decimal, parse_int=decimal.Decimal)


def ns(us):
    """µs (Decimal) to ns, rounded half away from zero."""
    return int((us * 1000).to_integral_value(rounding=decimal.ROUND_HALF_UP))


def complete(events):
    return [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]


def union(intervals):
    out = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def covered(intervals, lo, hi):
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in intervals)


def sql_script(*paths):
    proc = run("sql", *paths)
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect()
    con.execute(proc.stdout)
    return con


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("real")
    for name, host in ((NCCL_DATA, "a100"), (DF_INDEX, "v100")):
        proc = run("import", os.path.join(REAL, name), "--out", str(out / host), "--host", host)
        assert proc.returncode == 0, proc.stderr
    return out


SAMPLED = ["hta_trace_filter/sampled_rank-0.json.gz", "hta_trace_filter/sampled_rank-1.json.gz"]


def test_a_layer_of_point_to_point_kernels_alone_does_not_hide_the_collectives(tmp_path):
    """HTA's sampled traces keep NCCL's SendRecv kernels (NCCL runs all_to_all on them) and the
    backend's nccl:all_reduce, nccl:all_to_all and nccl:_all_gather_base annotations. The
    collectives were read from the most precise layer, the kernels, which hold no collective:
    analyze said "no collective operations". They are read from the most precise layer that
    has collectives: every annotation of each rank, as the trace has them."""
    for name in SAMPLED:
        proc = run("import", os.path.join(REAL, name), "--out", str(tmp_path / "fleet"))
        assert proc.returncode == 0, proc.stderr
    con = sql_script(str(tmp_path / "fleet"))
    assert con.execute("SELECT DISTINCT comm_layer FROM st_rank_trace").fetchall() == [("backend",)]
    got = con.execute("SELECT rank, collective, count(*) FROM st_collective_op GROUP BY ALL ORDER BY ALL").fetchall()
    want = {}
    for rank, name in enumerate(SAMPLED):
        for e in complete(load(name)["traceEvents"]):
            if e["name"].startswith("ncclKernel_"):
                assert "SendRecv" in e["name"], e["name"]  # the kernels: point-to-point only
            collective = {"nccl:all_reduce": "AllReduce", "nccl:all_to_all": "AllToAll",
                          "nccl:_all_gather_base": "AllGather"}.get(e["name"])
            if collective:
                want[(rank, collective)] = want.get((rank, collective), 0) + 1
    assert got == sorted((r, c, n) for (r, c), n in want.items()) and len(got) == 6, got
    proc = run("analyze", str(tmp_path / "fleet"), "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert "no collective operations" not in proc.stdout and " 20 collective operations" in proc.stdout, proc.stdout
    # the two sampled ranks' annotations do not overlap in time: said, not matched into steps
    assert "whose ranks' operations do not overlap in time" in proc.stderr, proc.stderr


def test_a_directory_is_imported_with_every_trace_below_it(tmp_path):
    """`import DIR` was refused with a hint, DIR/*.json, that matched none of these traces
    (gzipped, one directory down). Every .json and .json.gz below it is imported, as
    `analyze` searches a directory."""
    below = sorted(os.path.relpath(os.path.join(d, f), REAL) for d, _, fs in os.walk(REAL)
                   for f in fs if f.endswith((".json", ".json.gz")))
    assert len(below) >= 4 and all(os.sep in b for b in below), below
    proc = run("import", REAL, "--out", str(tmp_path / "all"), "--host", "h")
    assert proc.returncode == 0, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.startswith("scaletrace: imported ")]
    assert [l.split(" from ")[1].split(" into ")[0] for l in lines] == [os.path.join(REAL, b) for b in below], proc.stderr
    assert len(os.listdir(tmp_path / "all" / "gpu_events")) == len(below)
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "sub" / "notes.txt").write_text("no trace here")
    proc = run("import", str(tmp_path / "empty"), "--out", str(tmp_path / "none"))
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        f"scaletrace: error: {tmp_path / 'empty'} holds no trace (.json or .json.gz file), in it or below"], proc.stderr


def test_json_files_that_are_no_trace_are_skipped_in_a_directory_and_a_damaged_trace_is_not(tmp_path):
    """A directory of traces often holds other JSON: findings saved by `analyze --json`, a run's
    settings. Each was an `error:` line and made `import DIR` exit 1 ("1 of N traces could not
    be imported completely") though every trace was imported. Found by searching, such a file
    is skipped with a line saying so; a trace cut short is still an error, and a file named on
    the command line is imported or refused, not skipped."""
    traces = tmp_path / "traces"
    traces.mkdir()
    for name in ("sampled_rank-0.json.gz", "sampled_rank-1.json.gz"):
        shutil.copy(os.path.join(REAL, "hta_trace_filter", name), traces / name)
    findings = traces / "findings.json"
    findings.write_text(json.dumps([{"category": "slowdown", "summary": "rank 1 ..."}]))
    (traces / "settings.json").write_text(json.dumps({"steps": 80, "ranks": 2}))
    proc = run("import", str(traces), "--out", str(tmp_path / "out"), "--host", "h")
    assert proc.returncode == 0, proc.stderr
    skipped = sorted(l for l in proc.stderr.splitlines() if l.startswith("scaletrace: skipped "))
    assert skipped == [f"scaletrace: skipped {traces / n}: not a profiler trace (PyTorch's profiler writes a JSON object with a traceEvents array)"
                       for n in ("findings.json", "settings.json")], proc.stderr
    assert len(os.listdir(tmp_path / "out" / "gpu_events")) == 2
    # a trace cut short beside them is still a failure
    whole = gzip.decompress((traces / "sampled_rank-1.json.gz").read_bytes())
    (traces / "sampled_rank-2.json").write_bytes(whole[: len(whole) // 2])
    proc = run("import", str(traces), "--out", str(tmp_path / "out2"), "--host", "h")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "scaletrace: error: 1 of 3 traces could not be imported completely", proc.stderr
    # named on the command line, it is refused
    proc = run("import", str(findings), "--out", str(tmp_path / "out3"), "--host", "h")
    assert proc.returncode == 1 and "not a profiler trace" in proc.stderr, proc.stderr
    assert not (tmp_path / "out3").exists()
    # ... also beside a trace (a shell's run/*.json): the trace is imported, the summary says
    # what the other file is rather than counting it as a damaged trace
    proc = run("import", str(traces / "sampled_rank-0.json.gz"), str(findings), "--out", str(tmp_path / "out5"), "--host", "h")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "scaletrace: error: 1 file named is no profiler trace", proc.stderr
    assert len(os.listdir(tmp_path / "out5" / "gpu_events")) == 1
    # a trace's header without its events is a trace that lost them, not other JSON
    (tmp_path / "lost").mkdir()
    (tmp_path / "lost" / "rank3.json").write_text(json.dumps({"distributedInfo": {"rank": 3}, "baseTimeNanoseconds": 1700000000000000000}))
    proc = run("import", str(tmp_path / "lost"), "--out", str(tmp_path / "out6"), "--host", "h")
    assert proc.returncode == 1 and "no traceEvents array" in proc.stderr and "skipped" not in proc.stderr, proc.stderr
    # a directory of nothing but other JSON
    (tmp_path / "other").mkdir()
    shutil.copy(findings, tmp_path / "other" / "a.json")
    proc = run("import", str(tmp_path / "other"), "--out", str(tmp_path / "out4"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "scaletrace: error: none of the 1 JSON file found is a profiler trace", proc.stderr
    shutil.copy(findings, tmp_path / "other" / "b.json")
    proc = run("import", str(tmp_path / "other"), "--out", str(tmp_path / "out4"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "scaletrace: error: none of the 2 JSON files found is a profiler trace", proc.stderr
    assert not (tmp_path / "out4").exists()


def test_every_event_lands_with_exact_nanoseconds(imported):
    doc = load(NCCL_DATA)
    base = int(doc["baseTimeNanoseconds"])
    events = complete(doc["traceEvents"])
    con = duckdb.connect()
    got = con.execute(f"""SELECT name, epoch_ns(ts), dur_ns FROM read_parquet('{imported}/a100/gpu_events/*.parquet')
                          ORDER BY epoch_ns(ts), name, dur_ns""").fetchall()
    want = sorted((e["name"], base + ns(e["ts"]), ns(e["dur"])) for e in events)
    got.sort()
    assert len(got) == len(want)
    assert got == want, "every timestamp exact to the nanosecond"
    # The absolute-µs trace: ts carries no fraction there, so the UTC is ts × 1000 exactly.
    doc = load(DF_INDEX)
    n = len(complete(doc["traceEvents"]))
    assert con.execute(f"SELECT count(*) FROM read_parquet('{imported}/v100/gpu_events/*.parquet')").fetchone()[0] == n


def test_collectives_of_every_layer_with_their_arguments(imported):
    doc = load(NCCL_DATA)
    events = complete(doc["traceEvents"])
    want = {
        "nccl_kernel": sum(1 for e in events if e["cat"] == "kernel" and e["name"].startswith(("ncclKernel_", "ncclDevKernel_"))),
        "c10d": sum(1 for e in events if e["name"] in ("c10d::allreduce_", "c10d::broadcast_")),
        "backend": sum(1 for e in events if e["name"] in ("nccl:all_reduce", "nccl:broadcast")),
        "param_comms": sum(1 for e in events if e["name"] == "record_param_comms"),
    }
    con = duckdb.connect()
    got = dict(con.execute(f"""SELECT comm_source, count(*) FROM read_parquet('{imported}/a100/gpu_events/*.parquet')
                              WHERE comm_source IS NOT NULL GROUP BY ALL""").fetchall())
    assert got == want
    # Message sizes from `In msg nelems` × 4 bytes (Float), process group with its description.
    params = [e["args"] for e in events if e["name"] == "record_param_comms"]
    want_bytes = sorted(int(a["In msg nelems"]) * 4 for a in params if a.get("dtype") == "Float")
    got_bytes = [r[0] for r in con.execute(f"""SELECT msg_bytes FROM read_parquet('{imported}/a100/gpu_events/*.parquet')
        WHERE comm_source = 'param_comms' AND dtype = 'Float' ORDER BY msg_bytes""").fetchall()]
    assert got_bytes == want_bytes and want_bytes
    assert con.execute(f"""SELECT DISTINCT process_group, group_size FROM read_parquet('{imported}/a100/gpu_events/*.parquet')
        WHERE comm_source = 'param_comms' AND process_group IS NOT NULL""").fetchall() == [("0 (default_pg)", 2)]
    # Bus bandwidth of the NCCL kernels, from their own arguments (2 ranks: AllReduce x 1).
    kernels = [e for e in events if e["cat"] == "kernel" and e["name"].startswith("ncclKernel_AllReduce")
               and e["args"].get("dtype") == "Float" and "In msg nelems" in e["args"]]
    want = sorted(round(int(e["args"]["In msg nelems"]) * 4 * 8e9 / ns(e["dur"]) * 2 * (2 - 1) / 2) for e in kernels)
    got = sorted(round(r[0]) for r in sql_script(str(imported / "a100")).execute(
        "SELECT busbw_bps FROM st_collective_bandwidth WHERE collective = 'AllReduce'").fetchall())
    assert got == want and want


def rank_steps_independently(doc, rank_has_gpu=True):
    """Per ProfilerStep: busy, compute, communication and overlap in µs, from the JSON."""
    events = complete(doc["traceEvents"])
    us = lambda e: (float(e["ts"]), float(e["ts"] + e["dur"]))
    gpu = [e for e in events if e["cat"] in GPU_CATS]
    comm = union([us(e) for e in gpu if e["name"].startswith(("ncclKernel_", "ncclDevKernel_"))])
    compute = union([us(e) for e in gpu if not e["name"].startswith(("ncclKernel_", "ncclDevKernel_"))])
    busy = union([us(e) for e in gpu])
    steps = {}
    for e in events:
        if e["name"].startswith("ProfilerStep#") and e["cat"] != "gpu_user_annotation":
            lo, hi = us(e)
            steps[int(e["name"].split("#")[1])] = (hi - lo, covered(busy, lo, hi), covered(compute, lo, hi), covered(comm, lo, hi))
    return steps


@pytest.mark.parametrize("name,host", [(NCCL_DATA, "a100"), (DF_INDEX, "v100")])
def test_busy_compute_communication_and_overlap_per_step(imported, name, host):
    """The printed SQL, run in the Python DuckDB: st_rank_step against interval unions computed
    here. Timestamps are µs in the views (≤ 1 µs per interval edge)."""
    doc = load(name)
    want = rank_steps_independently(doc)
    assert want, "the trace has ProfilerStep annotations"
    con = sql_script(str(imported / host))
    got = {r[0]: r[1:] for r in con.execute(
        "SELECT step, step_us, busy_us, compute_us, comm_us, overlap_us, idle_us FROM st_rank_step").fetchall()}
    assert set(got) == set(want)
    for step, (dur, busy, compute, comm) in want.items():
        g_dur, g_busy, g_compute, g_comm, g_overlap, g_idle = got[step]
        tol = 2 + 0.001 * dur
        assert abs(g_dur - dur) <= tol
        assert abs(g_busy - busy) <= tol, (step, g_busy, busy)
        assert abs(g_compute - compute) <= tol, (step, g_compute, compute)
        assert abs(g_comm - comm) <= tol, (step, g_comm, comm)
        assert abs(g_overlap - (compute + comm - busy)) <= 2 * tol
        assert abs(g_idle - (dur - busy)) <= tol
        assert 0 <= g_overlap <= min(g_compute, g_comm) + 1


def test_merge_windows_are_shares_of_traced_time(imported, tmp_path):
    """A window half inside the trace: its shares are of the traced half, and windows outside
    the trace have no row (no zero-filled grid)."""
    doc = load(NCCL_DATA)
    base = int(doc["baseTimeNanoseconds"])
    events = complete(doc["traceEvents"])
    span = (min(base + ns(e["ts"]) for e in events), max(base + ns(e["ts"]) + ns(e["dur"]) for e in events))
    tree = tmp_path / "tree"
    shutil.copytree(imported / "a100", tree / "a100")
    proc = run("merge", str(tree), "--window", "100ms")
    assert proc.returncode == 0, proc.stderr
    con = duckdb.connect()
    rows = con.execute(f"""SELECT epoch_ns(window_start), traced_ns, busy_frac, comm_frac, idle_frac, device, rank
                           FROM read_parquet('{tree}/windows/*.parquet') ORDER BY 1""").fetchall()
    w = 100_000_000
    assert [r[0] for r in rows] == list(range(span[0] // w * w, span[1], w))
    gpu = union([(base + ns(e["ts"]), base + ns(e["ts"]) + ns(e["dur"])) for e in events if e["cat"] in GPU_CATS])
    for start, traced, busy, comm, idle, device, rank in rows:
        lo, hi = max(start, span[0]), min(start + w, span[1])
        assert abs(traced - (hi - lo)) <= 2_000
        assert abs(busy - covered(gpu, lo, hi) / (hi - lo)) <= 0.001
        assert 0 <= comm <= 1 and abs(busy + idle - 1) < 1e-9
        assert (device, rank) == ("gpu", 0)
    # One definition of "waiting on collectives": most of the traced time in collectives and
    # little compute — not every window that has a collective in it.
    flags = con.execute(f"""SELECT waiting_on_collectives, comm_frac >= 0.5 AND compute_frac <= 0.25
                            FROM read_parquet('{tree}/windows/*.parquet')""").fetchall()
    assert all(a == b for a, b in flags) and not all(a for a, _ in flags)
    # A second merge with another window length says the directory now mixes two lengths
    # (the README's query reads every file there; it read both without a word).
    again = run("merge", str(tree), "--window", "1s")
    assert again.returncode == 0, again.stderr
    assert "also holds window-100ms.parquet (other window lengths)" in again.stderr, again.stderr
    lengths = con.execute(f"SELECT DISTINCT window_ns FROM read_parquet('{tree}/windows/*.parquet') ORDER BY 1").fetchall()
    assert lengths == [(100_000_000,), (1_000_000_000,)]
    # merge reads what analyze reads: a fleet directory with one subdirectory per host.
    assert run("merge", str(imported), "--out", str(tmp_path / "fleet")).returncode == 0


def test_report_of_gpu_only_input_shows_ranks_and_steps(imported, tmp_path):
    proc = run("analyze", str(imported / "a100"), "--report", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    assert " 1 rank," in proc.stdout, proc.stdout
    html = (tmp_path / "r.html").read_text()
    assert "Training steps per rank" in html and "Exposed communication per step" in html
    assert "RTT over time" not in html, "no empty network charts without network tables"


def test_a_cut_trace_keeps_its_events_unaligned_and_can_be_aligned_later(tmp_path):
    doc = load(NCCL_DATA)
    base = int(doc["baseTimeNanoseconds"])
    with gzip.open(os.path.join(REAL, NCCL_DATA), "rt") as f:
        text = f.read()
    cut = text[: int(len(text) * 0.6)]
    # Independently: the complete events before the cut, decoded one by one.
    decoder = json.JSONDecoder(parse_float=decimal.Decimal)
    pos = cut.index("[", cut.index('"traceEvents"')) + 1
    before = []
    while True:
        while pos < len(cut) and cut[pos] in " \n\r\t,":
            pos += 1
        try:
            event, pos = decoder.raw_decode(cut, pos)
        except json.JSONDecodeError:
            break
        before.append(event)
    want = sorted(ns(e["ts"]) for e in complete(before))
    assert 1000 < len(want) < len(complete(doc["traceEvents"]))
    trace = tmp_path / "cut.json"
    trace.write_text(cut)
    proc = run("import", str(trace), "--out", str(tmp_path / "unaligned"), "--host", "h")
    assert proc.returncode == 1
    assert f"{len(want)} events before the error were kept" in proc.stderr, proc.stderr
    assert "truncated trace at line" in proc.stderr and "--time-base" in proc.stderr
    con = duckdb.connect()
    got = con.execute(f"""SELECT epoch_ns(ts), time_aligned FROM read_parquet('{tmp_path}/unaligned/gpu_events/*.parquet')
                          ORDER BY 1""").fetchall()
    assert [g[0] for g in got] == want and {g[1] for g in got} == {False}
    # Aligned later with the base the intact file had.
    proc = run("import", str(trace), "--out", str(tmp_path / "aligned"), "--host", "h", "--time-base", str(base))
    assert proc.returncode == 1 and f"{len(want)} events before the error were kept" in proc.stderr
    got = con.execute(f"""SELECT epoch_ns(ts), time_aligned FROM read_parquet('{tmp_path}/aligned/gpu_events/*.parquet')
                          ORDER BY 1""").fetchall()
    assert [g[0] for g in got] == [base + t for t in want] and {g[1] for g in got} == {True}
    # The unaligned events are not put on the UTC axis of the analysis.
    con = sql_script(str(tmp_path / "unaligned"))
    assert con.execute("SELECT count(*) FROM st_event").fetchone()[0] == 0
    # A cut .json.gz: the decoder's error, and the events before it kept.
    raw = open(os.path.join(REAL, NCCL_DATA), "rb").read()
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(raw[: len(raw) // 2])
    proc = run("import", str(gz), "--out", str(tmp_path / "gz"), "--host", "h")
    assert proc.returncode == 1
    kept = con.execute(f"SELECT count(*) FROM read_parquet('{tmp_path}/gz/gpu_events/*.parquet')").fetchone()[0]
    assert kept > 1000, proc.stderr


def test_two_inputs_with_one_file_name_stay_two(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        shutil.copy(os.path.join(REAL, NCCL_DATA), tmp_path / d / "trace.json.gz")
    proc = run("import", str(tmp_path / "a" / "trace.json.gz"), str(tmp_path / "b" / "trace.json.gz"),
               "--out", str(tmp_path / "out"), "--host", "h")
    assert proc.returncode == 0, proc.stderr
    files = os.listdir(tmp_path / "out" / "gpu_events")
    assert len(files) == 2, files
    n = len(complete(load(NCCL_DATA)["traceEvents"]))
    total = duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{tmp_path}/out/gpu_events/*.parquet')").fetchone()[0]
    assert total == 2 * n


def test_nonsense_is_refused_with_its_location(tmp_path):
    def trace(events, base=1_700_000_000_000_000_000):
        p = tmp_path / "t.json"
        doc = {"traceEvents": events}
        if base is not None:
            doc["baseTimeNanoseconds"] = base
        p.write_text(json.dumps(doc, indent=1))
        return run("import", str(p), "--out", str(tmp_path / "out"))
    ok = {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1}
    proc = trace([ok, {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 1e17, "dur": 1}], base=None)
    assert proc.returncode == 1 and "outside 2000..2100" in proc.stderr and "line" in proc.stderr
    proc = trace([ok], base=9223372036854775000)
    assert proc.returncode == 1 and "outside 2000..2100" in proc.stderr
    proc = trace([ok], base="build 42 at 1.7e18")
    assert proc.returncode == 1 and "not an integer number of nanoseconds" in proc.stderr
    proc = trace([ok, {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 2, "dur": -5}])
    assert proc.returncode == 1 and "negative duration" in proc.stderr and "line 1" in proc.stderr


def test_traces_of_different_jobs_are_not_matched(imported):
    """Rank 0 of one job (2024) and rank 1 of another (2022): no straggler 'late by 735003787
    ms', no waits above 100 %, and the refusal said."""
    proc = run("analyze", str(imported), "--no-report", "--json", str(imported / "f.json"))
    assert proc.returncode == 0, proc.stderr
    assert "not matched" in proc.stderr and "does not overlap in time" in proc.stderr
    found = json.loads((imported / "f.json").read_text())
    assert not [f for f in found if f["category"] in ("straggler", "sync_amplification")], found
    con = sql_script(str(imported))
    assert con.execute("SELECT count(*) FROM st_collective_rank_step").fetchone()[0] == 0


def test_collectives_that_do_not_overlap_are_not_one_step(tmp_path):
    """Two ranks' AllReduce kernels that do not overlap in time cannot be one operation."""
    base = 1_700_000_000_000_000_000
    for rank, start in ((0, 0), (1, 20)):
        doc = {"distributedInfo": {"rank": rank, "world_size": 2}, "baseTimeNanoseconds": base, "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "ts": start, "dur": 10},
            {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 0, "dur": 40}]}
        p = tmp_path / f"r{rank}.json"
        p.write_text(json.dumps(doc))
        assert run("import", str(p), "--out", str(tmp_path / f"n{rank}"), "--host", f"n{rank}").returncode == 0
    con = sql_script(str(tmp_path))
    assert con.execute("SELECT count(*) FROM st_collective_rank_step").fetchone()[0] == 0
    assert con.execute("SELECT not_overlapping FROM st_collective_refused").fetchall() == [(1,)]
    assert con.execute("SELECT max(wait_fraction) FROM st_collective_rank_step").fetchone()[0] is None


def test_each_process_group_counts_its_own_sequence_numbers(tmp_path):
    """A job with a data-parallel group of all 4 ranks and two tensor-parallel pairs: every group
    starts its sequence numbers at 1, as c10d does. Matched by sequence number alone, `seq 1` of
    the world and of both pairs made one "operation" of 8 ranks, refused as repeated, and none
    of the job's collectives was timed. Each group's operations are its own steps, a pair's with
    its 2 ranks; so too without sequence numbers (matched by order within the training step),
    where both pairs' first operation of a step shared one key. Steps matched by sequence
    number had no training step: the verdict could neither price nor date them."""
    base = 1_700_000_000_000_000_000
    seqs = 3

    def kernel(ts, pg, size, seq):
        args = {"device": 0, "stream": 7, "Process Group Name": pg, "Group size": size,
                "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float"}
        if seq is not None:
            args["Seq"] = seq
        return {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "pid": 0, "tid": 7,
                "ts": ts, "dur": 20, "args": args}

    for with_seq in (True, False):
        out = tmp_path / ("seq" if with_seq else "no-seq")
        for rank in range(4):
            events = []
            for k in range(seqs):
                t = k * 100
                seq = k + 1 if with_seq else None
                events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 9, "tid": 9,
                               "ts": t, "dur": 99})
                events.append(kernel(t + rank, "0", 4, seq))                          # the world
                events.append(kernel(t + 50 + rank, "1" if rank < 2 else "2", 2, seq))  # its pair
            doc = {"distributedInfo": {"rank": rank, "world_size": 4}, "baseTimeNanoseconds": base, "traceEvents": events}
            p = out / f"rank{rank}.json"
            out.mkdir(exist_ok=True)
            p.write_text(json.dumps(doc))
            assert run("import", str(p), "--out", str(out / f"n{rank}"), "--host", f"n{rank}").returncode == 0
        con = sql_script(str(out))
        steps = con.execute("SELECT ranks, count(*) FROM st_collective_step GROUP BY ranks ORDER BY ranks").fetchall()
        assert steps == [(2, 2 * seqs), (4, seqs)], (with_seq, steps)
        assert con.execute("SELECT count(*) FROM st_collective_refused").fetchone()[0] == 0
        # a pair's step holds the ranks of that pair only
        pairs = con.execute("SELECT list(DISTINCT rank ORDER BY rank) FROM st_collective_rank_step "
                            "WHERE ranks = 2 GROUP BY step ORDER BY 1").fetchall()
        assert sorted({tuple(r) for (r,) in pairs}) == [(0, 1), (2, 3)], pairs
        # each step knows its training step (ProfilerStep#N), sequence numbers or not: the
        # verdict prices culprits and dates their onset by it
        iterations = con.execute("SELECT list(DISTINCT iteration ORDER BY iteration) FROM st_collective_excess").fetchone()[0]
        assert iterations == list(range(seqs)), (with_seq, iterations)


def test_two_runs_of_the_same_ranks_are_not_one_job(tmp_path):
    """Two runs of one 2-rank job on the same hosts, an hour apart, with the same trace file
    names, read together: their collectives (matched by order) made one "job" spanning both. A later trace of the same
    process (a profiler schedule with `repeat` writes one per cycle) is the same job; one from
    another process is another run: refused and said."""
    base = 1_700_000_000_000_000_000
    steps = 5

    def write(rank, name, start_ns, pid):
        events = []
        for k in range(steps):
            t = k * 100
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": pid, "tid": pid, "ts": t, "dur": 99})
            events.append({"ph": "X", "cat": "cpu_op", "name": "forward", "pid": pid, "tid": pid, "ts": t, "dur": 50})
            events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)",
                           "pid": 0, "tid": 7, "ts": t + 50 + rank, "dur": 20, "args": {"device": 0, "stream": 7}})
        doc = {"distributedInfo": {"rank": rank, "world_size": 2}, "baseTimeNanoseconds": start_ns, "traceEvents": events}
        # every run names its traces alike, as the profiler's handler does: only the
        # directory differs
        (tmp_path / f"{name}-traces").mkdir(exist_ok=True)
        p = tmp_path / f"{name}-traces" / f"rank{rank}.pt.trace.json"
        p.write_text(json.dumps(doc))
        assert run("import", str(p), "--out", str(tmp_path / name / f"n{rank}"), "--host", f"n{rank}").returncode == 0

    def matched(*names):
        con = sql_script(*(str(tmp_path / n) for n in names))
        return con.execute("SELECT count(DISTINCT step) FROM st_collective_rank_step").fetchone()[0], con

    hour = 3600 * 10**9
    for rank in (0, 1):
        write(rank, "first", base, 100 + rank)
        write(rank, "cycle", base + hour, 100 + rank)
        write(rank, "rerun", base + hour, 200 + rank)
    assert matched("first")[0] == steps
    assert matched("first", "cycle")[0] == 2 * steps
    n, con = matched("first", "rerun")
    assert n == steps
    reasons = [r for (r,) in con.execute("SELECT reason FROM st_rank_refused ORDER BY rank").fetchall()]
    assert len(reasons) == 2 and all("another process" in r and "another run" in r for r in reasons), reasons
    # a refused trace's steps are not the job's: ProfilerStep#N of both runs made one
    # hour-long step per N, and ranks "doing 94 ms more own work"
    assert con.execute("SELECT max(step_us) FROM st_rank_step").fetchone()[0] < 1000
    proc = run("analyze", str(tmp_path / "first"), str(tmp_path / "rerun"), "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert "not matched: n1 rank 1: rank1.pt.trace.json (imported as" in proc.stderr, proc.stderr
    assert "2 ranks (2 traces not of this job left out" in proc.stdout, proc.stdout
    # and the rest of the line is the job's, as if the refused traces were not there: their
    # events and their hour counted in it (helper's trial: a refused 2022 trace made the span
    # of a 2026 job's 12 seconds 2022-11-30 .. 2026-12-06)
    alone = run("analyze", str(tmp_path / "first"), "--no-report")
    assert alone.returncode == 0, alone.stderr
    job = lambda text: text.splitlines()[0].split(" collective operations, ")[1]
    assert job(proc.stdout) == job(alone.stdout), (proc.stdout, alone.stdout)


def test_a_ranks_trace_of_another_job_does_not_change_the_group_size_of_its_trace_of_this_one(tmp_path):
    """Rank 0 traced a 3-rank job and, an hour later, a 4-rank one. The group size was taken per
    rank over all its traces (4), so its trace of the 3-rank job was refused as "states a group
    size of 4, the other ranks 3", and the job lost a rank. Per trace, only the other job's trace
    is refused."""
    base = 1_700_000_000_000_000_000
    steps = 5

    def write(rank, world, name, start_ns, pid):
        events = []
        for k in range(steps):
            t = k * 100
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": pid, "tid": pid, "ts": t, "dur": 99})
            events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)",
                           "pid": 0, "tid": 7, "ts": t + 50 + rank, "dur": 20,
                           "args": {"device": 0, "stream": 7, "Group size": world}})
        doc = {"distributedInfo": {"rank": rank, "world_size": world}, "baseTimeNanoseconds": start_ns, "traceEvents": events}
        (tmp_path / name).mkdir(exist_ok=True)
        p = tmp_path / name / f"rank{rank}.json"
        p.write_text(json.dumps(doc))
        assert run("import", str(p), "--out", str(tmp_path / "fleet" / f"n{rank}"), "--host", f"n{rank}").returncode == 0

    for rank in range(3):
        write(rank, 3, "job3", base, 100 + rank)
    write(0, 4, "job4", base + 3600 * 10**9, 500)
    con = sql_script(str(tmp_path / "fleet"))
    refused = con.execute("SELECT host, rank, import_file FROM st_rank_refused").fetchall()
    assert len(refused) == 1 and refused[0][:2] == ("n0", 0), refused
    assert con.execute("SELECT count(DISTINCT step), min(ranks) FROM st_collective_rank_step").fetchone() == (steps, 3)


def test_printed_sql_runs_on_a_real_recording(net, tmp_path):
    """The script `scaletrace sql` prints, on real recorded Parquet (nanosecond timestamps with
    time zone), in the DuckDB that setup installs for Python."""
    rec = Recorder(tmp_path, "--netns", net.a)
    # enough to span several RTT samples: a veth moved 2 MiB in 1.6 ms, between a flow's first
    # and second sample or before its only one (net_bytes 0, in 2 of 3 runs)
    size = 32 << 20
    transfer(net, 5411, size)
    assert rec.stop() == 0, rec.stderr
    con = sql_script(str(tmp_path))
    assert con.execute("SELECT count(*) FROM st_flow_window").fetchone()[0] > 0
    windows = con.execute("SELECT count(*), sum(net_bytes) FROM st_window WHERE rank IS NULL").fetchone()
    # bytes between a flow's first and last RTT sample (a veth moves much of it before the
    # first sample): some, never more than were sent
    assert windows[0] > 0 and 0 < windows[1] <= 1.01 * size
    con.execute("SELECT * FROM findings").fetchall()


def test_a_trace_and_a_capture_of_different_times_are_said_not_to_overlap(imported, tmp_path):
    """A 2022 trace analyzed beside a 2026 capture was read as one job without a word: the
    network categories said "nothing found" where nothing could be tied. The analysis says the
    two do not overlap; the recording whose trace and capture do overlap gets no such line."""
    data = os.path.join(HERE, "data", "slow-rank-last-step", "fleet")
    capture = tmp_path / "capture"
    for table in ("flows", "flow_windows", "capture"):
        shutil.copytree(os.path.join(data, "node0", table), capture / table)
    proc = run("analyze", str(capture), str(imported / "v100"), "--no-report")
    assert proc.returncode == 0, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if "do not overlap in time" in l and "network capture" in l]
    assert len(lines) == 1 and lines[0].startswith("scaletrace: not matched: the timelines (2022-"), proc.stderr
    assert "and the network capture (2026-" in lines[0], lines[0]
    proc = run("analyze", data, "--no-report")
    assert proc.returncode == 0 and "network capture" not in proc.stderr, proc.stderr


def test_one_rank_is_not_analyzed_for_stragglers(imported):
    """One rank's trace (rank 1 of 2) said "Straggler ranks: nothing found": with one rank there
    is nothing to compare. Those categories are not analyzed, and say why."""
    proc = run("analyze", str(imported / "v100"), "--no-report")
    assert proc.returncode == 0, proc.stderr
    for category in ("straggler", "sync_amplification"):
        assert f"not analyzed: {category} (1 rank in the timelines: it takes two or more to compare)" in proc.stdout, proc.stdout
    assert "Straggler ranks: nothing found" not in proc.stdout and "not analyzed: straggler" in proc.stdout
