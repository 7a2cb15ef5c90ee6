"""`scaletrace agent`: rotation into a Hive-partitioned spool, upload to a real S3-compatible
server (moto) that goes away and comes back, kill -9 mid-rotation, health files, config file,
and DuckDB reading the partitioned tree with partition pruning."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import boto3
from prometheus_client.parser import text_string_to_metric_families
import duckdb
import pytest

from netlab import HERE

BIN = os.environ.get("SCALETRACE_BIN", os.path.join(HERE, "..", "target", "release", "scaletrace"))
PORT = 5401
S3_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}

SERVER = textwrap.dedent("""
    import socket, sys, threading
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64); print('ready', flush=True)
    def drain(c):
        while c.recv(1 << 16): pass
        c.close()
    while True:
        c, _ = s.accept(); threading.Thread(target=drain, args=(c,), daemon=True).start()
""")

CLIENTS = textwrap.dedent("""
    import socket, sys, time
    end = time.time() + float(sys.argv[3]); n = 0
    while time.time() < end:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
        c.sendall(b'x' * 200000); c.close(); n += 1; time.sleep(0.1)
    print(n, flush=True)
""")

PROXY = textwrap.dedent("""
    import socket, sys, threading
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(64); print('ready', flush=True)
    def pipe(a, b):
        try:
            while (d := a.recv(1 << 16)):
                b.sendall(d)
        except OSError:
            pass
        finally:
            a.close(); b.close()
    while True:
        c, _ = s.accept()
        u = socket.create_connection(('127.0.0.1', int(sys.argv[2])))
        threading.Thread(target=pipe, args=(c, u), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c), daemon=True).start()
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def started(cmd, **kw):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **kw)
    assert proc.stdout.readline().strip() == "ready"
    return proc


@pytest.fixture
def s3():
    """A moto S3 server on loopback with bucket `fleet`."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", **{
        "aws_access_key_id": "test", "aws_secret_access_key": "test", "region_name": "us-east-1"})
    for _ in range(100):
        try:
            client.create_bucket(Bucket="fleet")
            break
        except Exception:
            time.sleep(0.1)
    else:
        raise AssertionError("moto server did not start")
    yield port, client
    proc.kill()
    proc.wait()


class Traffic:
    """Connections from namespace a to a server in b, one every 0.1 s, for `seconds`."""

    def __init__(self, net, seconds):
        self.server = started(["ip", "netns", "exec", net.b, sys.executable, "-c", SERVER, net.b_ip, str(PORT)])
        self.clients = subprocess.Popen(["ip", "netns", "exec", net.a, sys.executable, "-c", CLIENTS, net.b_ip, str(PORT), str(seconds)],
                                        stdout=subprocess.PIPE, text=True)

    def connections(self):
        n = int(self.clients.communicate(timeout=120)[0])
        self.server.kill()
        return n


class Agent:
    def __init__(self, spool, *extra, env=None):
        self.spool = str(spool)
        self.proc = subprocess.Popen([BIN, "agent", "--out", self.spool, "--no-gpu", "--port", str(PORT), *extra],
                                     stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
        self.log = []
        while True:
            line = self.proc.stderr.readline()
            assert line, "agent exited:\n" + "".join(self.log)
            self.log.append(line)
            if "recording to" in line:
                return

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        self.log.append(self.proc.communicate(timeout=120)[1])
        return self.proc.returncode

    @property
    def stderr(self):
        return "".join(self.log)

    def status(self):
        with open(os.path.join(self.spool, "status.json")) as f:
            return json.load(f)

    def wait_status(self, ready, timeout=30):
        """`status.json` once `ready(status)` holds. The agent rewrites it every half interval;
        a fixed sleep before reading it is a guess at how fast this machine is."""
        deadline = time.monotonic() + timeout
        status = None
        while True:
            try:
                status = self.status()
                if ready(status):
                    return status
            except FileNotFoundError:
                pass
            assert time.monotonic() < deadline, f"status not reached in {timeout} s: {status}"
            time.sleep(0.1)


def parquet_files(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".parquet"))


def download(client, dest):
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket="fleet")
            for o in page.get("Contents", [])]
    for key in keys:
        path = os.path.join(dest, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        client.download_file("fleet", key, path)
    return keys


def test_upload_survives_a_store_outage_nothing_lost_nothing_duplicated(net, s3, tmp_path):
    moto_port, client = s3
    proxy_port = free_port()
    proxy = started([sys.executable, "-c", PROXY, str(proxy_port), str(moto_port)])
    agent = Agent(tmp_path / "spool", "--rotate-interval", "1s", "--upload", "s3://fleet/prod",
                  "--s3-endpoint", f"http://127.0.0.1:{proxy_port}", env=S3_ENV)
    traffic = Traffic(net, 9)
    agent.wait_status(lambda s: s["uploaded_files_total"] > 0)  # the store works
    proxy.kill()  # the store is gone: connections are refused
    proxy.wait()
    # failures counted and files kept while it is gone (a backlog: more than one attempt)
    agent.wait_status(lambda s: s["upload_failures_total"] >= 2 and s["last_upload_error"] and s["spool_files"] > 0)
    proxy = started([sys.executable, "-c", PROXY, str(proxy_port), str(moto_port)])
    connections = traffic.connections()
    assert agent.stop() == 0, agent.stderr
    proxy.kill()
    assert "failed, keeping files in the spool and retrying" in agent.stderr
    assert "work again" in agent.stderr

    status = agent.status()
    assert parquet_files(agent.spool) == [], "files left in the spool after a successful drain"
    keys = download(client, str(tmp_path / "bucket"))
    assert len(keys) == status["uploaded_files_total"] == len(set(keys))
    assert all(k.startswith("prod/table=") for k in keys)
    root = tmp_path / "bucket" / "prod"
    con = duckdb.connect()
    q = lambda sql: con.execute(sql.replace("T(", f"read_parquet('{root}/table=").replace(")T", "/**/*.parquet', hive_partitioning=true)")).fetchall()
    # Every interval's files arrived once: each capture row's counts equal the rows of its part.
    intervals = q("SELECT run_id, start, flows, rtt_samples FROM T(capture)T ORDER BY start")
    assert len(intervals) >= 6, intervals
    per_part = dict(((f, n) for f, n in q("SELECT regexp_extract(filename, 'part-.*') AS part, count(*) FROM read_parquet("
                                           f"'{root}/table=rtt/**/*.parquet', filename=true) GROUP BY part")))
    capture_parts = q("SELECT regexp_extract(filename, 'part-.*'), rtt_samples FROM read_parquet("
                      f"'{root}/table=capture/**/*.parquet', filename=true)")
    for part, rtt_rows in capture_parts:
        assert per_part.get(part, 0) == rtt_rows, (part, rtt_rows, per_part.get(part))
    assert sum(r for _, r in capture_parts) == q("SELECT count(*) FROM T(rtt)T")[0][0] > 0
    # Every connection is one client flow, once.
    flows = q(f"SELECT count(*), count(DISTINCT flow_id) FROM T(flows)T WHERE remote_port = {PORT}")[0]
    assert flows == (connections, connections), (flows, connections)


def test_kill_9_mid_rotation_leaves_no_torn_file_and_restart_cleans_up(net, tmp_path):
    spool = tmp_path / "spool"
    traffic = Traffic(net, 8)
    partials = 0
    for delay in (1.3, 1.7, 2.1):
        agent = Agent(spool, "--rotate-interval", "100ms")
        time.sleep(delay)
        agent.proc.kill()  # SIGKILL: no cleanup at all
        agent.proc.wait()
        files = parquet_files(spool)
        assert files
        for f in files:  # every visible file is complete and readable
            duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{f}')").fetchall()
        leftovers = [os.path.join(d, f) for d, _, fs in os.walk(spool) for f in fs if f.endswith(".partial")]
        partials += len(leftovers)
        killed_run = agent.status()["run_id"] if os.path.exists(spool / "status.json") else None
        agent = Agent(spool, "--rotate-interval", "100ms")
        status = agent.wait_status(lambda s: s["run_id"] != killed_run)  # its first health files
        assert status["leftovers_removed"] == len(leftovers) if leftovers else True
        assert not [f for d, _, fs in os.walk(spool) for f in fs if f.endswith(".partial") and os.path.join(d, f) in leftovers]
        if leftovers:
            assert "unfinished file(s)" in agent.stderr
        assert agent.stop() == 0, agent.stderr
    traffic.connections()
    assert partials > 0, "no kill landed while files were open"
    # the whole tree reads as one table
    n = duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{spool}/table=rtt/**/*.parquet', hive_partitioning=true)").fetchall()[0][0]
    assert n > 0


def test_partitioned_tree_reads_with_one_glob_and_prunes_by_host_and_hour(net, tmp_path):
    spool = tmp_path / "spool"
    traffic = Traffic(net, 3)
    agent = Agent(spool, "--rotate-interval", "1s")
    time.sleep(3)
    assert agent.stop() == 0, agent.stderr
    traffic.connections()
    con = duckdb.connect()
    glob = f"{spool}/table=rtt/**/*.parquet"
    # One group per host: a run that crossed an hour boundary has two hour partitions; the
    # earlier one is the hour the other node's files go one hour after.
    (host, hour, date, rows), = con.execute(f"SELECT host, min(hour), min(date), count(*) FROM read_parquet('{glob}', hive_partitioning=true) GROUP BY host").fetchall()
    assert rows > 0 and host == socket.gethostname()
    # A second node's files for another hour: the same rows under other partition values.
    other = spool / "table=rtt" / f"date={date}" / f"hour={(hour + 1) % 24}" / "host=node-b"
    other.mkdir(parents=True)
    con.execute(f"COPY (SELECT * REPLACE ('node-b' AS host) FROM read_parquet('{glob}')) TO '{other}/part-x.parquet'")
    total_files = len(parquet_files(spool / "table=rtt"))
    # sum() must read the rows (count(*) may be answered from metadata without a scan operator)
    plan = con.execute(f"EXPLAIN ANALYZE SELECT sum(srtt_us) FROM read_parquet('{glob}', hive_partitioning=true) "
                       f"WHERE host = 'node-b' AND hour = {(hour + 1) % 24}").fetchall()[0][1]
    assert f"Scanning Files: 1/{total_files}" in plan, plan
    assert con.execute(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning=true) WHERE host = 'node-b'").fetchall()[0][0] == rows
    # `analyze` reads the same tree
    proc = subprocess.run([BIN, "analyze", str(spool), "--no-report"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "2 hosts" in proc.stdout.splitlines()[0], proc.stdout


def test_config_file_health_files_and_bad_settings(net, tmp_path):
    spool = tmp_path / "spool"
    config = tmp_path / "agent.toml"
    config.write_text(f'out = "{spool}"\nrotate_interval = "500ms"\nno_gpu = true\nport = "{PORT}"\nrotate_size_mb = 64\n')
    proc = subprocess.Popen([BIN, "agent", "--config", str(config), "--duration", "2s"], stderr=subprocess.PIPE, text=True)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, err
    status = json.loads((spool / "status.json").read_text())
    assert status["rotations_total"] >= 2 and status["upload_target"] is None
    # read by the Prometheus project's Python parser of the text format (node_exporter's textfile
    # collector reads this format with Go's expfmt, stricter; it does not read OpenMetrics)
    families = {f.name: f for f in text_string_to_metric_families((spool / "scaletrace.prom").read_text())}
    assert families["scaletrace_ring_drops"].type == "counter"
    assert families["scaletrace_spool_bytes"].type == "gauge"
    rotations = families["scaletrace_rotations"].samples[0]
    assert rotations.labels == {"host": status["host"]} and rotations.value == status["rotations_total"]
    assert {p.name.split("=")[1] for p in spool.glob("table=*")} >= {"capture", "interfaces"}
    # the files the agent leaves as it stops say so, with the run's totals: they stay behind and
    # node_exporter goes on exporting them (they said 0 files completed beside 19 in the spool)
    assert status["running"] is False and families["scaletrace_running"].samples[0].value == 0
    completed = len(list(spool.rglob("*.parquet")))
    assert status["files_completed_total"] == completed == status["spool_files"], status
    assert families["scaletrace_files_completed"].samples[0].value == completed

    config.write_text('rotate_intervl = "5m"\n')
    for args, expected in [
        (["--config", str(config)], "unknown key `rotate_intervl`"),
        (["--out", str(spool), "--upload", "http://bucket"], "expected s3://BUCKET"),
        (["--out", str(spool), "--rotate-interval", "10ms"], "at least 100ms"),
        (["--out", str(spool), "--bench-source-pid", "1"], "not for the agent"),
        (["--config", str(tmp_path / "missing.toml")], "reading config"),
    ]:
        p = subprocess.run([BIN, "agent", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and expected in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_links_planted_in_the_spool_are_never_written_through(net, tmp_path):
    """As root in a directory others can write to, links planted at the names the agent writes
    (the old predictable status.json.partial, scaletrace.prom.partial, a final name, a table
    directory) must not make it overwrite their targets or write files elsewhere."""
    spool = tmp_path / "spool"
    spool.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("status.json.partial", "scaletrace.prom.partial", "scaletrace.prom"):
        os.symlink(victim, spool / name)
    os.chmod(spool, 0o1777)  # as a directory under /tmp would be
    agent = [BIN, "agent", "--out", str(spool), "--no-gpu", "--port", str(PORT), "--rotate-interval", "500ms",
             "--duration", "2s"]
    proc = subprocess.run(agent, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_bytes() == b"precious"
    # the health files are whole files of their own; the planted final name was replaced, not followed
    assert json.loads((spool / "status.json").read_text())["rotations_total"] >= 1
    assert not (spool / "scaletrace.prom").is_symlink()
    assert (spool / "status.json.partial").is_symlink(), "the agent removed a link it did not create"
    assert f"--out {spool} is writable by other users" in proc.stderr, proc.stderr

    # a table directory that is a link: refused with one clear line, nothing written through it
    spool2 = tmp_path / "spool2"
    spool2.mkdir()
    os.symlink(elsewhere, spool2 / "table=flows")
    agent[agent.index("--out") + 1] = str(spool2)
    proc = subprocess.run(agent, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "table=flows is a symbolic link" in proc.stderr, proc.stderr
    assert list(elsewhere.iterdir()) == [], "files written through the planted table directory"
    assert (spool2 / "table=flows").is_symlink()


def test_a_second_agent_on_the_same_spool_refuses_and_the_first_loses_nothing(net, tmp_path):
    """Two agents on one spool: the second's start-up cleanup removed the first's open files
    before. Now it refuses with one line naming the holder, and the first runs on untouched."""
    spool = tmp_path / "spool"
    traffic = Traffic(net, 4)
    first = Agent(spool, "--rotate-interval", "300ms")
    time.sleep(1)
    second = subprocess.run([BIN, "agent", "--out", str(spool), "--no-gpu", "--port", str(PORT), "--duration", "2s"],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode != 0
    assert f"another scaletrace agent (pid {first.proc.pid}) is writing to {spool}" in second.stderr, second.stderr
    assert len(second.stderr.strip().splitlines()) == 1, second.stderr
    # a `record` into the agent's spool is refused too: both would record every flow of the
    # host, and an analysis of the spool would count them twice (the two used different locks)
    rec = subprocess.run([BIN, "record", "--out", str(spool), "--no-gpu", "--port", str(PORT), "--duration", "1s"],
                         capture_output=True, text=True, timeout=60)
    assert rec.returncode != 0
    assert f"another scaletrace agent (pid {first.proc.pid}) is writing to {spool}" in rec.stderr, rec.stderr
    time.sleep(1)
    assert first.stop() == 0, first.stderr
    traffic.connections()
    assert not [f for d, _, fs in os.walk(spool) for f in fs if f.endswith(".partial")]
    # every capture row's files are there: the flows it claims can be read back
    con = duckdb.connect()
    rows = con.execute(f"SELECT count(*) FROM read_parquet('{spool}/table=flows/**/*.parquet')").fetchall()[0][0]
    assert rows > 0
    # once the first is gone, an agent starts on the same spool again (the lock died with it)
    again = subprocess.run([BIN, "agent", "--out", str(spool), "--no-gpu", "--port", str(PORT), "--duration", "1s"],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr


STORE = textwrap.dedent("""
    # A store that refuses every request with a multi-line XML body (deny), or that accepts
    # connections and never answers (hang).
    import socket, sys, threading
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', 0)); s.listen(64); print(s.getsockname()[1], flush=True)
    body = b'<?xml version="1.0" encoding="UTF-8"?>\\n<Error>\\n  <Code>AccessDenied</Code>\\n  <Message>Access Denied</Message>\\n</Error>\\n'
    def serve(c):
        if sys.argv[1] == 'hang':
            while c.recv(1 << 16): pass
            return
        c.recv(1 << 16)
        c.sendall(b'HTTP/1.1 403 Forbidden\\r\\nContent-Type: application/xml\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n' % len(body) + body)
        c.close()
    while True:
        c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
""")


def fake_store(mode):
    proc = subprocess.Popen([sys.executable, "-c", STORE, mode], stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


def test_store_errors_are_one_line_and_hide_the_endpoint_password(net, tmp_path):
    store, port = fake_store("deny")
    try:
        spool = tmp_path / "spool"
        endpoint = f"http://admin:s3cr3t@127.0.0.1:{port}"
        agent = Agent(spool, "--rotate-interval", "300ms", "--upload", "s3://fleet/x", "--s3-endpoint", endpoint,
                      "--drain-timeout", "1s", env=S3_ENV)
        agent.wait_status(lambda s: s["last_upload_error"])
        status = (spool / "status.json").read_text()
        assert agent.stop() == 0, agent.stderr
    finally:
        store.kill()
    last_error = json.loads(status)["last_upload_error"]
    assert "AccessDenied" in last_error or "403" in last_error, last_error
    for text in (status, agent.stderr, (spool / "scaletrace.prom").read_text()):
        assert "s3cr3t" not in text and "admin:" not in text
    assert "\n" not in last_error
    upload_lines = [l for l in agent.stderr.splitlines() if "upload to" in l]
    assert upload_lines and all("<Code>" not in l or "</Error>" in l for l in upload_lines), agent.stderr


def test_a_second_signal_ends_the_drain_to_an_unreachable_store_at_once(net, tmp_path):
    store, port = fake_store("hang")
    try:
        spool = tmp_path / "spool"
        agent = Agent(spool, "--rotate-interval", "300ms", "--upload", "s3://fleet/x",
                      "--s3-endpoint", f"http://127.0.0.1:{port}", "--drain-timeout", "5m", env=S3_ENV)
        time.sleep(2)
        agent.proc.send_signal(signal.SIGTERM)
        time.sleep(2)  # now draining: every upload hangs
        assert agent.proc.poll() is None, "the drain to a store that never answers ended by itself"
        t0 = time.monotonic()
        rc = agent.stop(signal.SIGTERM)
        waited = time.monotonic() - t0
    finally:
        store.kill()
    assert rc == 0, agent.stderr
    assert waited < 10, f"the second SIGTERM took {waited:.1f} s to end the drain"
    assert "second SIGTERM" in agent.stderr, agent.stderr
    left = parquet_files(spool)
    assert left, "nothing left in the spool, yet nothing could be uploaded"
    assert f"{len(left)} files left in the spool" in agent.stderr, agent.stderr
    assert not [f for d, _, fs in os.walk(spool) for f in fs if f.endswith(".partial")]


LONG_LIVED = textwrap.dedent("""
    import socket, sys, time
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    print(c.getsockname()[1], flush=True)
    end, sent = time.time() + float(sys.argv[3]), 0
    while time.time() < end:
        c.sendall(b'z' * 100000); sent += 100000; time.sleep(0.05)
    print(sent, flush=True)
    sys.stdin.readline()  # stay connected until told
    c.close()
""")


def test_a_long_lived_flow_is_in_the_spool_while_it_runs(net, tmp_path):
    """Training connections live for days; `flows` gets them only at close or agent stop. Each
    rotation writes a snapshot row per open flow: cumulative counters and the interval's
    deltas, which add up to the cumulative ones."""
    spool = tmp_path / "spool"
    server = started(["ip", "netns", "exec", net.b, sys.executable, "-c", SERVER, net.b_ip, str(PORT)])
    agent = Agent(spool, "--rotate-interval", "500ms")
    client = subprocess.Popen(["ip", "netns", "exec", net.a, sys.executable, "-c", LONG_LIVED, net.b_ip, str(PORT), "3"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        local_port = int(client.stdout.readline())
        total = int(client.stdout.readline())  # sent for 3 s, now idle but connected
        # until two rotations have seen it idle (polled: a rotation's period depends on the machine)
        deadline, con = time.time() + 30, duckdb.connect()
        while True:
            snaps = con.execute(f"""
                SELECT ts, bytes_sent, bytes_sent_delta FROM read_parquet('{spool}/table=flow_snapshots/**/*.parquet')
                WHERE local_port = {local_port} ORDER BY ts""").fetchall() \
                if list(spool.glob("table=flow_snapshots/**/*.parquet")) else []
            if len([s for s in snaps if s[1] >= total]) >= 2:
                break
            assert time.time() < deadline, f"no two snapshots with the {total} bytes sent in 30 s: {snaps}"
            time.sleep(0.25)
        open_rows = con.execute(f"""
            SELECT count(*) FROM read_parquet('{spool}/table=flows/**/*.parquet', union_by_name = true)
            WHERE local_port = {local_port}""").fetchall()[0][0] if list(spool.glob("table=flows/**/*.parquet")) else 0
    finally:
        client.communicate("\n", timeout=30)
    assert agent.stop() == 0, agent.stderr
    server.kill()
    assert open_rows == 0, "a flow that is still open has a row in flows"
    assert len(snaps) >= 3, snaps
    sent = [s[1] for s in snaps]
    # every byte the client sent is in the last snapshots (the SYN counts one more)
    assert sent == sorted(sent) and sent[-1] >= total and sent[-2] == sent[-1], (total, sent)
    assert sum(s[2] for s in snaps) == sent[-1], snaps
    # Its final row, written at close, has exactly what the snapshots taken once it was idle
    # had: a snapshot reads an open flow's counters from the kernel, not those of the flow's
    # last RTT sample (sock_ops copies them only then, so the last ACKs' bytes were missing).
    final = duckdb.connect().execute(f"""
        SELECT bytes_sent FROM read_parquet('{spool}/table=flows/**/*.parquet') WHERE local_port = {local_port}""").fetchall()
    # (the peer's ACK of the FIN at close counts one more in bytes_acked, as that of the SYN did)
    assert len(final) == 1 and final[0][0] - 1 == sent[-1], (final, sent)


FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


@pytest.mark.skipif(not os.path.exists(FAKETIME_LIB), reason="libfaketime is not installed (cargo xtask setup installs it)")
def test_a_wall_clock_step_is_followed(net, tmp_path):
    """The wall clock an hour behind at start and fixed while the agent runs (a late time sync):
    rows after the fix carry the right time and go to the right hour partition; before, every
    later row stayed an hour off."""
    spool = tmp_path / "spool"
    offset = tmp_path / "faketime"
    offset.write_text("-3600\n")
    env = {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME_TIMESTAMP_FILE": str(offset), "FAKETIME_NO_CACHE": "1",
           "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    traffic = Traffic(net, 6)
    agent = Agent(spool, "--rotate-interval", "500ms", env=env)
    time.sleep(2.5)
    offset.write_text("+0\n")  # the clock is fixed
    time.sleep(3)
    assert agent.stop() == 0, agent.stderr
    traffic.connections()
    now = time.time()
    assert "the wall clock was stepped by +3600" in agent.stderr, agent.stderr
    con = duckdb.connect()
    rows = con.execute(f"""
        SELECT epoch(ts), hour FROM read_parquet('{spool}/table=rtt/**/*.parquet', hive_partitioning = true)""").fetchall()
    early = [r for r in rows if r[0] < now - 1800]
    late = [r for r in rows if r[0] >= now - 1800]
    assert early and late, "no rows before or after the fix"
    assert max(r[0] for r in late) > now - 30
    # each row in the hour partition of its own time
    for ts, hour in rows:
        assert time.gmtime(ts).tm_hour == hour, (ts, hour)
    # the interval that spans the step says so
    errors = [e for (e,) in con.execute(f"SELECT clock_error_ns FROM read_parquet('{spool}/table=capture/**/*.parquet')").fetchall()]
    assert max(errors) >= 3_000_000_000_000, errors


def test_a_full_disk_costs_an_interval_not_the_agent(net, tmp_path):
    """The spool on a 2 MB tmpfs, most of it taken by a file the agent did not write: before,
    the agent died after 20 s with 10 `.partial` files left. Now each time the disk fills it
    drops the open interval (counted), deletes its own oldest files and records on."""
    spool = tmp_path / "spool"
    spool.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(spool)], check=True)
    try:
        foreign = spool / "someone-elses.bin"
        foreign.write_bytes(bytes(1600 << 10))
        status = tmp_path / "status"
        traffic = Traffic(net, 16)
        agent = Agent(spool, "--rotate-interval", "300ms", "--status-dir", str(status), "--rtt-sample-interval", "0s")
        time.sleep(15)
        assert agent.proc.poll() is None, "the agent died on a full disk:\n" + agent.stderr
        rc = agent.stop()
        traffic.connections()
        assert rc == 0, agent.stderr
        assert "the spool's disk is full" in agent.stderr, agent.stderr
        health = json.loads((status / "status.json").read_text())
        assert health["rows_lost_disk_full_total"] > 0 and health["evicted_files_total"] > 0, health
        assert foreign.stat().st_size == 1600 << 10, "the agent deleted a file it did not write"
        assert not [f for d, _, fs in os.walk(spool) for f in fs if f.endswith(".partial")]
        files = parquet_files(spool)
        assert files, "nothing kept"
        for f in files:  # what is left is whole
            duckdb.connect().execute(f"SELECT count(*) FROM read_parquet('{f}')").fetchall()
        # the newest data was kept: the last rotation's files are there
        newest = max(os.path.getmtime(f) for f in files)
        assert time.time() - newest < 10
    finally:
        subprocess.run(["umount", "-l", str(spool)])


OPEN_BEFORE = textwrap.dedent("""
    import socket, sys
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    c.sendall(b'y' * 1_000_000)
    print(c.getsockname()[1], flush=True)
    sys.stdin.readline()  # the agent starts meanwhile
    c.sendall(b'y' * 1_000_000)
    c.close()
""")


def test_connections_open_before_the_agent_started_are_recorded(net, tmp_path):
    """The agent started (or restarted, or upgraded) while a job's long-lived connections are
    already open: each is a flow from its next ACK on, with its totals since it opened."""
    spool = tmp_path / "spool"
    server = started(["ip", "netns", "exec", net.b, sys.executable, "-c", SERVER, net.b_ip, str(PORT)])
    clients = [subprocess.Popen(["ip", "netns", "exec", net.a, sys.executable, "-c", OPEN_BEFORE, net.b_ip, str(PORT)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    ports = sorted(int(c.stdout.readline()) for c in clients)
    agent = Agent(spool, "--netns", net.a)
    for c in clients:
        c.communicate("\n", timeout=30)
    time.sleep(0.5)
    assert agent.stop() == 0, agent.stderr
    server.kill()
    assert "adopting connections open before the start: 4 in 1 network namespace" in agent.stderr, agent.stderr
    rows = duckdb.connect().execute(f"""
        SELECT local_port, adopted, bytes_sent FROM read_parquet('{spool}/table=flows/**/*.parquet', union_by_name = true)
        WHERE remote_port = {PORT} ORDER BY local_port""").fetchall()
    # both megabytes, the one sent before the agent started too (+ SYN and FIN)
    assert rows == [(p, True, 2_000_002) for p in ports], rows
