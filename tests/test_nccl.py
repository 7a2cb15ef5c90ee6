"""NCCL uprobes against the real libnccl from PyPI's nvidia-nccl-cu12 wheel. Without a GPU the
calls fail fast, but they enter the library, so the probes fire and record what was called."""
import os
import subprocess
import sys
import textwrap

import pytest

from netlab import Recorder

try:
    import nvidia.nccl
    LIB = os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2")
except ImportError:  # pragma: no cover - setup installs it
    LIB = None

pytestmark = pytest.mark.skipif(LIB is None or not os.path.exists(LIB),
                                reason="nvidia-nccl-cu12 missing: run `cargo xtask setup`")

# Loads libnccl, waits for a line on stdin, then makes a known sequence of calls.
CALLER = textwrap.dedent("""
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1])
    P, S, I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    class UniqueId(ctypes.Structure):
        _fields_ = [("internal", ctypes.c_char * 128)]
    print("loaded", flush=True)
    sys.stdin.readline()
    comm = P()
    results = [
        lib.ncclCommInitRank(ctypes.byref(comm), I(4), UniqueId(), I(2)),
        lib.ncclGroupStart(),
        lib.ncclAllReduce(P(0x1000), P(0x2000), S(1024), I(7), I(0), P(0), P(0)),
        lib.ncclAllGather(P(0x1000), P(0x2000), S(256), I(9), P(0), P(0)),
        lib.ncclReduceScatter(P(0x1000), P(0x2000), S(64), I(4), I(2), P(0), P(0)),
        lib.ncclBroadcast(P(0x1000), P(0x2000), S(8), I(0), I(3), P(0), P(0)),
        lib.ncclSend(P(0x1000), S(10), I(2), I(1), P(0), P(0)),
        lib.ncclRecv(P(0x2000), S(10), I(2), I(3), P(0), P(0)),
        lib.ncclGroupEnd(),
    ]
    print(" ".join(map(str, results)), flush=True)
""")

EXPECTED = [  # op, count, datatype, red_op, peer, bytes, rank, nranks
    ("CommInitRank", None, None, None, None, None, 2, 4),
    ("GroupStart", None, None, None, None, None, None, None),
    ("AllReduce", 1024, "ncclFloat32", "ncclSum", None, 4096, None, None),
    ("AllGather", 256, "ncclBfloat16", None, None, 512, None, None),
    ("ReduceScatter", 64, "ncclInt64", "ncclMax", None, 512, None, None),
    ("Broadcast", 8, "ncclInt8", None, 3, 8, None, None),
    ("Send", 10, "ncclInt32", None, 1, 40, None, None),
    ("Recv", 10, "ncclInt32", None, 3, 40, None, None),
    ("GroupEnd", None, None, None, None, None, None, None),
]

RESULT_NAMES = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
                4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}


def start_caller():
    proc = subprocess.Popen([sys.executable, "-c", CALLER, LIB], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "loaded"
    return proc


def run_calls(proc):
    proc.stdin.write("go\n")
    proc.stdin.flush()
    results = [int(x) for x in proc.stdout.readline().split()]
    proc.wait(timeout=30)
    return results


def calls_of(rec, pid):
    return rec.query(f"""SELECT op, count, datatype, red_op, peer, bytes, rank, nranks, result, dur_ns
                         FROM read_parquet('{rec.out}/nccl_calls/*.parquet') WHERE pid = {pid} ORDER BY ts""")


def test_every_call_is_recorded_with_its_arguments_and_result(tmp_path):
    caller = start_caller()
    rec = Recorder(tmp_path, "--nccl-lib", LIB, "--no-gpu", "--port", "1")
    assert f"nccl(9 functions):{LIB}" in rec.stderr
    results = run_calls(caller)
    assert rec.stop() == 0, rec.stderr
    rows = calls_of(rec, caller.pid)
    assert [r[:8] for r in rows] == EXPECTED
    assert [r[8] for r in rows] == [RESULT_NAMES[x] for x in results]
    assert all(r[9] >= 0 for r in rows)
    assert rec.query(f"SELECT nccl_calls, ring_drops_nccl FROM read_parquet('{rec.out}/capture/*.parquet')")[0] == (9, 0)


def test_pid_finds_the_library_in_its_maps_and_ignores_other_processes(tmp_path):
    target, other = start_caller(), start_caller()
    rec = Recorder(tmp_path, "--pid", str(target.pid), "--no-gpu", "--port", "1")
    assert "nccl(9 functions)" in rec.stderr
    run_calls(other)
    run_calls(target)
    assert rec.stop() == 0, rec.stderr
    assert len(calls_of(rec, target.pid)) == 9
    assert calls_of(rec, other.pid) == []


def test_missing_library_is_reported_and_capture_continues(tmp_path):
    rec = Recorder(tmp_path, "--nccl-lib", "/nonexistent/libnccl.so.2", "--no-gpu")
    assert "nccl:/nonexistent/libnccl.so.2 not attached: no such file" in rec.stderr
    assert rec.stop() == 0, rec.stderr
    missing = rec.query(f"SELECT hooks_missing, hooks_attached FROM read_parquet('{rec.out}/capture/*.parquet')")[0]
    assert "nccl:/nonexistent" in missing[0] and "sock_ops" in missing[1]
