"""libibverbs uprobes. This machine has no RDMA device, so the control path runs against a
stand-in library exporting the same symbols with the real struct layouts (compiled here against
the real infiniband/verbs.h); the symbol resolution itself is checked against the real
libibverbs in the unit tests."""
import os
import shutil
import subprocess

import pytest

from netlab import Recorder, job_cgroups

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.skipif(not os.path.exists("/usr/include/infiniband/verbs.h") or shutil.which("cc") is None,
                                reason="libibverbs-dev or a C compiler missing: run `cargo xtask setup`")


@pytest.fixture
def fake_verbs(tmp_path):
    lib = tmp_path / "libfakeverbs.so"
    driver = tmp_path / "driver"
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(lib), os.path.join(HERE, "verbs", "fakeverbs.c")], check=True)
    subprocess.run(["cc", "-O1", "-o", str(driver), os.path.join(HERE, "verbs", "driver.c"), f"-L{tmp_path}",
                    "-lfakeverbs", f"-Wl,-rpath,{tmp_path}"], check=True)
    return lib, driver


def test_qp_lifecycle_becomes_a_flow(fake_verbs, tmp_path):
    lib, driver = fake_verbs
    # the program runs in a cgroup shaped as slurmstepd's: its QPs carry the job
    with job_cgroups("slurm/uid_0/job_4121/step_0/task_0") as (root, (job,)):
        proc = subprocess.Popen(["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$1"', job, str(driver)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            qp_lifecycle(proc, lib, tmp_path, job[len(root):])
        finally:
            proc.kill()
            proc.wait()


def qp_lifecycle(proc, lib, tmp_path, cgroup):
    assert proc.stdout.readline().strip() == "ready"
    rec = Recorder(tmp_path / "out", "--verbs-lib", str(lib), "--verbs-provider-lib", str(lib), "--verbs-sample-every", "1",
                   "--pid", str(proc.pid), "--no-gpu", "--port", "1")
    assert f"verbs(8 functions):{lib}" in rec.stderr
    assert f"verbs-data-path(mlx5):{lib}" in rec.stderr
    proc.stdin.write("\n")
    proc.stdin.flush()
    qp_num, alive_qp, failed_create, polled, _mr = proc.stdout.readline().split()
    assert failed_create == "1" and polled == "3"
    proc.stdin.write("\n")
    proc.stdin.flush()
    proc.wait(timeout=30)
    assert rec.stop() == 0, rec.stderr

    calls = rec.query(f"""SELECT op, ok, device, qp_num, qp_type, qp_state, dest_qp_num, dgid, mr_length, cqe
                          FROM read_parquet('{rec.out}/verbs_calls/*.parquet') WHERE pid = {proc.pid} ORDER BY ts""")
    q, a = int(qp_num), int(alive_qp)
    assert calls == [
        ("ibv_open_device", True, "mlx5_7", None, None, None, None, None, None, None),
        ("ibv_alloc_pd", True, None, None, None, None, None, None, None, None),
        ("ibv_reg_mr", True, None, None, None, None, None, None, 1 << 20, None),
        ("ibv_create_cq", True, None, None, None, None, None, None, None, 256),
        ("ibv_create_qp", True, None, q, "RC", None, None, None, None, None),
        ("ibv_create_qp", False, None, None, None, None, None, None, None, None),
        ("ibv_modify_qp", True, None, q, None, "INIT", None, None, None, None),
        ("ibv_modify_qp", True, None, q, None, "RTR", 0x5678, "::ffff:10.0.0.2", None, None),
        ("ibv_modify_qp", True, None, q, None, "RTS", None, None, None, None),
        ("ibv_create_qp", True, None, a, "RC", None, None, None, None, None),
        ("ibv_destroy_qp", True, None, q, "RC", None, None, None, None, None),
    ]
    qps = rec.query(f"""SELECT qp_num, qp_type, dest_qp_num, dgid, last_state, rts IS NOT NULL, destroyed IS NOT NULL, modify_calls
                        FROM read_parquet('{rec.out}/qps/*.parquet') ORDER BY qp_num""")
    assert qps == [(q, "RC", 0x5678, "::ffff:10.0.0.2", "RTS", True, True, 3),
                   (a, "RC", None, None, None, False, False, 0)]
    assert rec.query(f"SELECT DISTINCT cgroup, slurm_job FROM read_parquet('{rec.out}/qps/*.parquet')") == [(cgroup, "4121")]

    # The data path of the first QP, aggregated in the kernel and sampled one by one.
    traffic = rec.query(f"""SELECT qp_num, post_calls, wrs_posted, bytes_posted, completions, completion_errors,
                                   latency_count, latency_min_ns, opcodes
                            FROM read_parquet('{rec.out}/qp_traffic/*.parquet') WHERE pid = {proc.pid}""")
    assert len(traffic) == 1, traffic
    qpn, posts, wrs, nbytes, completions, errors, measured, lat_min, opcodes = traffic[0]
    assert (qpn, posts, wrs, nbytes, completions, errors, measured) == (q, 1, 3, 4096 + 8192 + 100, 3, 1, 3)
    assert lat_min >= 1_000_000, "posted, then polled a millisecond later"
    assert opcodes == "RDMA_WRITE,SEND"
    done = rec.query(f"""SELECT wr_id, status, opcode, latency_ns >= 1000000
                         FROM read_parquet('{rec.out}/verbs_completions/*.parquet') ORDER BY wr_id""")
    assert done == [(1, "SUCCESS", "SEND", True), (2, "SUCCESS", "RDMA_WRITE", True), (99, "RETRY_EXC_ERR", "SEND", True)]


def test_queue_pairs_beyond_the_kernel_table_are_counted_not_lost_silently(fake_verbs, tmp_path):
    """20,000 QPs against a 16,384-entry per-QP table left 3,712 QPs' traffic missing without a
    word. Scaled down with --max-qps: every QP is either in qp_traffic or counted as evicted."""
    lib, driver = fake_verbs
    qps, limit = 1500, 1024
    proc = subprocess.Popen([str(driver), str(qps)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    rec = Recorder(tmp_path / "out", "--verbs-lib", str(lib), "--verbs-provider-lib", str(lib), "--max-qps", str(limit),
                   "--pid", str(proc.pid), "--no-gpu", "--port", "1")
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "done"
    assert rec.stop() == 0, rec.stderr  # while the QPs are still alive
    proc.stdin.write("\n")
    proc.stdin.flush()
    proc.wait(timeout=30)
    kept = rec.query(f"SELECT count(*), sum(bytes_posted) FROM read_parquet('{rec.out}/qp_traffic/*.parquet') WHERE pid = {proc.pid}")[0]
    evicted = rec.query("SELECT qps_evicted FROM capture")[0][0]
    assert kept[0] <= limit and kept[0] + evicted == qps, (kept, evicted)
    assert kept[1] == kept[0] * 1000
    assert f"{evicted} RDMA QPs' data-path totals evicted" in rec.stderr.strip().splitlines()[-1], rec.stderr


def test_the_agent_snapshots_live_queue_pairs_at_every_rotation(fake_verbs, tmp_path):
    """`qp_traffic` is written at the end of a run: a training job's QPs live for days. The agent
    writes each QP's counters at every rotation, with deltas that add up to them."""
    import duckdb
    import signal
    lib, driver = fake_verbs
    proc = subprocess.Popen([str(driver), "5"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    spool = tmp_path / "spool"
    agent = subprocess.Popen([os.environ.get("SCALETRACE_BIN", os.path.join(HERE, "..", "target", "release", "scaletrace")),
                              "agent", "--out", str(spool), "--verbs-lib", str(lib), "--verbs-provider-lib", str(lib),
                              "--pid", str(proc.pid), "--no-gpu", "--port", "1", "--rotate-interval", "300ms"],
                             stderr=subprocess.PIPE, text=True)
    log = []
    while "recording to" not in (line := agent.stderr.readline()):
        assert line, "".join(log)
        log.append(line)
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "done"
    import time
    time.sleep(1.5)  # a few rotations while the QPs are alive
    rows = duckdb.connect().execute(f"""
        SELECT qp_num, count(*), max(bytes_posted), sum(bytes_posted_delta), max(completions), sum(completions_delta)
        FROM read_parquet('{spool}/table=qp_snapshots/**/*.parquet') WHERE pid = {proc.pid} GROUP BY qp_num""").fetchall()
    agent.send_signal(signal.SIGTERM)
    err = agent.communicate(timeout=60)[1]
    proc.stdin.write("\n")
    proc.stdin.flush()
    proc.wait(timeout=30)
    assert agent.returncode == 0, err
    assert len(rows) == 5, rows
    for qp_num, snapshots, sent, sent_deltas, done, done_deltas in rows:
        assert snapshots >= 2 and sent == sent_deltas == 1000 and done == done_deltas == 1, rows


def test_a_library_that_is_not_the_familys_is_one_line_naming_it_and_why(tmp_path):
    """libc passed as libibverbs and as a provider gave eight lines (one per function) and a
    provider line that named neither the file nor the reason ("no provider among 1 exports ...,
    pass --verbs-provider-lib" to someone who had); a missing provider file was blamed on
    stripped symbols."""
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    rec = Recorder(tmp_path, "--verbs-lib", libc, "--verbs-provider-lib", libc,
                   "--verbs-provider-lib", "/nonexistent/libmlx5.so", "--verbs-provider-lib", str(tmp_path),
                   "--no-gpu", "--port", "1")
    assert rec.stop() == 0, rec.stderr
    assert f"verbs:{libc} not attached: exports none of the 8 verbs functions: not a libibverbs.so.1 library" in rec.stderr
    assert f"verbs-data-path:{libc} not attached: exports no <provider>_post_send/_poll_cq" in rec.stderr
    assert "verbs-data-path:/nonexistent/libmlx5.so not attached: no such file" in rec.stderr
    assert f"verbs-data-path:{tmp_path} not attached: {tmp_path} is a directory" in rec.stderr
    not_attached = [l for l in rec.stderr.splitlines() if "not attached" in l and ("verbs" in l)]
    assert len(not_attached) == 4, not_attached
