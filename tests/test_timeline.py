"""GPU timelines beside the network: import a Kineto trace of the same period as a recorded
namespace transfer, merge into windows, and check in DuckDB that they line up."""
import json
import os
import socket
import subprocess
import time

import duckdb

from netlab import Recorder, transfer

BIN = os.environ.get("SCALETRACE_BIN", os.path.join(os.path.dirname(__file__), "..", "target", "release", "scaletrace"))
WINDOW_NS = 500_000_000


def run(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120)


def kineto_trace(path, base_ns, events, rank=0, base_key=True):
    """A trace as the PyTorch profiler writes it: ts/dur in µs relative to baseTimeNanoseconds,
    which comes after the events."""
    doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
           "traceEvents": events, "traceName": str(path)}
    if base_key:
        doc["baseTimeNanoseconds"] = base_ns
    path.write_text(json.dumps(doc, indent=1))


def kernel(name, start_ns, dur_ns, base_ns, stream=7, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream,
            "ts": (start_ns - base_ns) / 1000, "dur": dur_ns / 1000,
            "args": {"device": 0, "stream": stream, "correlation": start_ns % 100000}}


def test_recorded_transfer_and_imported_trace_share_windows(net, tmp_path):
    net.rate_limit_client("40mbit", "100ms")  # makes 8 MB last about two seconds
    rec = Recorder(tmp_path, "--netns", net.a)
    base = time.time_ns()
    transfer(net, 5401, 8 << 20)
    end = time.time_ns()
    assert rec.stop() == 0, rec.stderr

    w0 = -(-base // WINDOW_NS) * WINDOW_NS  # first window boundary after the start
    events = [
        # window w0: compute for the whole window, on two streams that overlap
        kernel("volta_sgemm_128x64_nn", w0, WINDOW_NS, base),
        kernel("elementwise_kernel", w0 + 100_000_000, 100_000_000, base, stream=8),
        # window w0+1: an NCCL all-reduce for 80 % of it and nothing else
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", w0 + WINDOW_NS, 400_000_000, base),
        # a CPU op: imported, but not GPU time
        kernel("aten::mm", w0, 50_000, base, cat="cpu_op"),
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    ]
    trace = tmp_path / "rank0.pt.trace.json"
    kineto_trace(trace, base, events)
    imp = run("import", str(trace), "--out", str(tmp_path))
    assert imp.returncode == 0, imp.stderr
    assert "imported 4 events" in imp.stderr
    merged = run("merge", str(tmp_path), "--window", "500ms")
    assert merged.returncode == 0, merged.stderr

    con = duckdb.connect()
    for t in ("flows", "rtt", "gpu_events", "windows"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{tmp_path}/{t}/*.parquet')")
    host = socket.gethostname()

    # Imported events sit on the UTC axis: base + ts.
    first = con.execute("SELECT epoch_ns(ts), rank, collective FROM gpu_events WHERE on_gpu ORDER BY ts LIMIT 1").fetchone()
    assert first == (w0, 0, None)
    assert con.execute("SELECT collective FROM gpu_events WHERE collective IS NOT NULL").fetchall() == [("AllReduce",)]

    win = {r[0]: r[1:] for r in con.execute(f"""
        SELECT epoch_ns(window_start), busy_frac, compute_frac, comm_frac, collective_ops,
               waiting_on_collectives, coalesce(net_bytes, 0), coalesce(rtt_samples, 0), rank, traced_ns
        FROM windows WHERE host = '{host}' ORDER BY 1""").fetchall()}
    assert len(win) == con.execute("SELECT count(*) FROM windows").fetchone()[0], "one row per window"
    busy, compute, coll, ops, idle, *_ = win[w0]
    assert (busy, compute, coll, ops, idle) == (1.0, 1.0, 0.0, 0, False)
    # The trace ends 400 ms into the next window: its shares are of those 400 ms, not of the
    # whole window (a rank all-reducing for all of its traced time is 100 % in collectives).
    busy, compute, coll, ops, idle, _, _, rank, traced = win[w0 + WINDOW_NS]
    assert (compute, coll, ops, idle, rank) == (0.0, 1.0, 1, True, 0)
    assert abs(busy - 1.0) < 1e-9 and traced == 400_000_000
    # Windows outside the trace: the host's network alone, rank null, no timeline columns.
    outside = [v for w, v in win.items() if w not in (w0, w0 + WINDOW_NS)]
    assert outside and all(v[7] is None and v[0] is None for v in outside)

    # The network side of the same windows: the transfer's bytes, spread over its duration.
    sent = con.execute(f"SELECT bytes_sent FROM flows WHERE remote_port = 5401").fetchone()[0]
    in_windows = sum(v[5] for v in win.values())
    assert 0.9 * sent <= in_windows <= sent, (in_windows, sent)
    busy_windows = [w for w, v in win.items() if v[5] > 0]
    assert len(busy_windows) >= 3, "a 2 s transfer spans several 500 ms windows"
    assert min(busy_windows) >= (base // WINDOW_NS) * WINDOW_NS and max(busy_windows) <= end
    assert all(win[w][6] > 0 for w in busy_windows), "RTT samples in every window with traffic"


def test_truncated_trace_reports_location_and_keeps_earlier_events(tmp_path):
    base = 1_700_000_000_000_000_000
    events = [kernel(f"k{i}", base + i * 1000, 500, base) for i in range(3)]
    trace = tmp_path / "cut.json"
    kineto_trace(trace, base, events)
    text = trace.read_text()
    trace.write_text(text[: text.index('"k2"')])  # cut inside the third event
    proc = run("import", str(trace), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1
    errors = [l for l in proc.stderr.splitlines() if l.startswith("scaletrace: error:")]
    assert len(errors) == 1, proc.stderr
    # baseTimeNanoseconds is after the events, so the header pass already meets the cut
    assert "truncated trace at line" in errors[0] and "column" in errors[0]


def test_malformed_event_after_valid_ones_keeps_them(tmp_path):
    base = 1_700_000_000_000_000_000
    events = [kernel(f"k{i}", base + i * 1000, 500, base) for i in range(3)] + [{"ph": "X", "ts": "soon"}]
    trace = tmp_path / "bad.json"
    kineto_trace(trace, base, events)
    proc = run("import", str(trace), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1
    assert "unexpected trace content at line" in proc.stderr
    assert "3 events before the error were kept" in proc.stderr
    kept = duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path}/out/gpu_events/*.parquet')").fetchall()[0][0]
    assert kept == 3
    meta = dict(duckdb.sql(f"SELECT decode(key), decode(value) FROM parquet_kv_metadata('{tmp_path}/out/gpu_events/*.parquet')").fetchall())
    assert "scaletrace.import.incomplete" in meta


def test_a_file_with_no_event_before_its_error_leaves_no_table_file(tmp_path):
    """An empty gpu_events file would make `analyze` believe the rank has a timeline with
    nothing in it ("nothing found" instead of "not analyzed")."""
    (tmp_path / "notjson.json").write_text("this is not a trace\n")
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "adir").mkdir()
    for bad in ("notjson.json", "empty.json", "adir"):
        proc = run("import", str(tmp_path / bad), "--out", str(tmp_path / "out"))
        errors = [l for l in proc.stderr.splitlines() if l.startswith("scaletrace: error:")]
        assert proc.returncode == 1 and len(errors) == 1, proc.stderr
        assert "kept in" not in errors[0], errors[0]
    # (a directory is searched for traces: this one holds none)
    assert "holds no trace" in errors[0]
    # a valid trace without events: no file either
    kineto_trace(tmp_path / "none.json", 1_700_000_000_000_000_000, [])
    proc = run("import", str(tmp_path / "none.json"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1 and "holds no event" in proc.stderr, proc.stderr
    assert list((tmp_path / "out").rglob("*.parquet*")) == []


def test_trace_without_time_base_is_kept_unaligned(tmp_path):
    """Relative timestamps and no base: the events are kept on the trace's own axis, marked,
    and the user is told how to align them (they used to be refused and lost)."""
    trace = tmp_path / "rel.json"
    kineto_trace(trace, 0, [kernel("k", 5_000, 1_000, 0)], base_key=False)
    proc = run("import", str(trace), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0 and "no baseTimeNanoseconds" in proc.stderr and "--time-base" in proc.stderr
    row = duckdb.connect().execute(
        f"SELECT epoch_ns(ts), time_aligned FROM read_parquet('{tmp_path}/out/gpu_events/*.parquet')").fetchall()
    assert row == [(5_000, False)]


def test_other_json_beside_traces_in_a_directory_is_skipped(tmp_path):
    """The same as test_real_traces' directory test, on made-up traces, so that it runs where
    ../shared/real-traces is not beside the checkout: saved findings and a run's settings
    beside two ranks' traces are skipped with a line, and the import succeeds."""
    base = 1_700_000_000_000_000_000
    (tmp_path / "run").mkdir()
    for rank in (0, 1):
        kineto_trace(tmp_path / "run" / f"rank{rank}.json", base, [kernel("k", base + 5_000, 1_000, base)], rank=rank)
    (tmp_path / "run" / "findings.json").write_text(json.dumps([{"category": "slowdown"}]))
    (tmp_path / "run" / "settings.json").write_text(json.dumps({"steps": 80}))
    proc = run("import", str(tmp_path / "run"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    skipped = [l for l in proc.stderr.splitlines() if l.startswith("scaletrace: skipped ")]
    assert [l.split(":")[1].strip() for l in skipped] == [f"skipped {tmp_path / 'run' / n}" for n in ("findings.json", "settings.json")], proc.stderr
    assert len(os.listdir(tmp_path / "out" / "gpu_events")) == 2


def test_merge_of_an_empty_directory_says_what_to_do(tmp_path):
    proc = run("merge", str(tmp_path))
    assert proc.returncode == 1
    assert "no scaletrace tables under" in proc.stderr
    assert run("import", str(tmp_path / "missing.json")).returncode == 1
