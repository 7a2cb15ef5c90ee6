"""Real RDMA: two soft-RoCE devices (the kernel's rdma_rxe) on the two ends of a veth pair, real
perftest traffic through the real libibverbs and its rxe provider, recorded by `scaletrace record`.

The host kernel of the project's machines has no modules, so these tests run in the VM lab
(`cargo xtask vmtest`, Debian kernels that ship rdma_rxe and netem); elsewhere they skip and say
why. The test_verbs.py tests keep checking the probes against a stand-in library, in seconds.

rxe on Linux 6.1 lives only in the initial network namespace, so both ends stay in it and policy
routing sends the traffic between the two local addresses over the veth (the VM is throw-away;
the fixture still undoes what it did)."""
import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pytest

from netlab import Recorder

BIN = os.environ.get("SCALETRACE_BIN", os.path.join(os.path.dirname(__file__), "..", "target", "release", "scaletrace"))

# Two links, each a veth pair with an rxe device on either end: (rdma devices, veths, addresses).
# Two, so a fault on one has a healthy neighbour to be told apart from.
LINKS = (
    (("rxe0", "rxe1"), ("strxe0", "strxe1"), ("10.77.0.1", "10.77.0.2")),
    (("rxe2", "rxe3"), ("strxe2", "strxe3"), ("10.77.1.1", "10.77.1.2")),
)
DEVICES, VETH, ADDR = LINKS[0]
PERFTEST_PORT = 18515


def _missing():
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("rdma", "ib_write_bw", "ib_send_lat", "ib_read_bw", "tc", "modprobe"):
        if shutil.which(tool) is None:
            return f"{tool} missing (rdma-core, perftest, iproute2, kmod: `cargo xtask setup`)"
    if subprocess.run(["modprobe", "-q", "rdma_rxe"], capture_output=True).returncode != 0:
        return f"this kernel ({os.uname().release}) has no rdma_rxe module: run `cargo xtask vmtest`"
    if subprocess.run(["modprobe", "-q", "sch_netem"], capture_output=True).returncode != 0:
        return f"this kernel ({os.uname().release}) has no netem"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


def sh(*args):
    subprocess.run(args, check=True, capture_output=True, text=True)


def roce_v2_gid_index(device, addr):
    """The GID table index of the RoCE v2 GID that carries `addr` (IPv4-mapped)."""
    port = f"/sys/class/infiniband/{device}/ports/1"
    tail = "{:02x}{:02x}:{:02x}{:02x}".format(*map(int, addr.split(".")))
    for _ in range(100):  # the GID table fills in shortly after the address is up
        for index in range(len(os.listdir(f"{port}/gids"))):
            try:
                with open(f"{port}/gids/{index}") as f:
                    gid = f.read().strip()
                with open(f"{port}/gid_attrs/types/{index}") as f:
                    kind = f.read().strip()
            except OSError:
                continue
            if kind == "RoCE v2" and gid.endswith(tail):
                return index
        time.sleep(0.1)
    raise AssertionError(f"no RoCE v2 GID for {addr} on {device}")


@pytest.fixture(scope="module")
def rxe():
    """Every link of LINKS: rxe devices on both ends of a veth, traffic between the two local
    addresses routed over the veth. Yields each link's RoCE v2 GID index."""
    rules, links = [], []
    try:
        for i, (_, veth, addrs) in enumerate(LINKS):
            sh("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
            links.append(veth[0])
            for dev, addr in zip(veth, addrs):
                sh("ip", "addr", "add", f"{addr}/24", "dev", dev)
                sh("ip", "link", "set", dev, "up")
                sh("sysctl", "-qw", f"net.ipv4.conf.{dev}.rp_filter=0", f"net.ipv4.conf.{dev}.accept_local=1")
            macs = [open(f"/sys/class/net/{dev}/address").read().strip() for dev in veth]
            # locally generated packets to the other end go out of this end's veth, and the
            # local table is consulted after these rules, not before them
            for end, (dev, src, dst) in enumerate(((veth[0], addrs[0], addrs[1]), (veth[1], addrs[1], addrs[0]))):
                pref, table = str(10 + 2 * i + end), str(100 + 2 * i + end)
                sh("ip", "rule", "add", "pref", pref, "to", dst, "iif", "lo", "lookup", table)
                rules.append(pref)
                sh("ip", "route", "add", dst, "dev", dev, "src", src, "table", table)
            sh("ip", "neigh", "replace", addrs[1], "lladdr", macs[1], "dev", veth[0], "nud", "permanent")
            sh("ip", "neigh", "replace", addrs[0], "lladdr", macs[0], "dev", veth[1], "nud", "permanent")
        sh("sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0")
        sh("ip", "rule", "add", "pref", "100", "lookup", "local")
        rules.append("100")
        sh("ip", "rule", "del", "pref", "0")
        for devices, veth, _ in LINKS:
            for rdma_dev, dev in zip(devices, veth):
                sh("rdma", "link", "add", rdma_dev, "type", "rxe", "netdev", dev)
        yield [roce_v2_gid_index(devices[0], addrs[0]) for devices, _, addrs in LINKS]
    finally:
        for devices, _, _ in LINKS:
            for rdma_dev in devices:
                subprocess.run(["rdma", "link", "delete", rdma_dev], capture_output=True)
        if "100" in rules:
            subprocess.run(["ip", "rule", "add", "pref", "0", "lookup", "local"], capture_output=True)
        for pref in rules:
            subprocess.run(["ip", "rule", "del", "pref", pref], capture_output=True)
        for i in range(len(LINKS)):
            for table in (str(100 + 2 * i), str(101 + 2 * i)):
                subprocess.run(["ip", "route", "flush", "table", table], capture_output=True)
        for veth in links:
            subprocess.run(["ip", "link", "del", veth], capture_output=True)


def listening(port):
    """Whether a TCP socket listens on `port` (IPv4 or IPv6), from /proc: a probe connection
    would be taken for perftest's client."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and local.endswith(f":{port:04X}"):
                    return True
    return False


def perftest(tool, gids, *args, link=0):
    """One perftest run over one link of LINKS, server on its second device and client on its
    first; returns (client pid, server pid, client output)."""
    (client_dev, server_dev), _, addrs = LINKS[link]
    port = PERFTEST_PORT + link
    common = ["-x", str(gids[link]), "-F", "-p", str(port), *args]
    server = subprocess.Popen([tool, "-d", server_dev, *common], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        deadline = time.time() + 60
        while not listening(port):
            assert server.poll() is None, server.communicate()[0]
            assert time.time() < deadline, "perftest server did not listen"
            time.sleep(0.1)
        client = subprocess.Popen([tool, "-d", client_dev, *common, addrs[1]], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        out = client.communicate(timeout=300)[0]
        assert client.returncode == 0, out
        server.communicate(timeout=60)
        assert server.returncode == 0
        return client.pid, server.pid, out
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def tables(out):
    con = duckdb.connect()
    for table in os.listdir(out):
        if os.path.isdir(os.path.join(out, table)):
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{out}/{table}/*.parquet')")
    return con


def counter_growth(con, device, counter):
    """How much an rxe hardware counter grew during the recording (sum of its deltas); the
    counter must have been read at all (a counter is written at its first reading)."""
    assert con.execute("""SELECT count(*) FROM nic_counters WHERE source = 'ib_hw' AND device = ? AND counter = ?""",
                       [device, counter]).fetchone()[0] > 0, (device, counter, "never read")
    return con.execute("""SELECT coalesce(sum(delta), 0) FROM nic_counters
                          WHERE source = 'ib_hw' AND device = ? AND counter = ?""", [device, counter]).fetchone()[0]


# RoCE sends at most one 4 KB MTU of payload per packet: a lower bound on packets per message
MAX_MTU = 4096


def test_rxe_traffic_is_seen_by_the_verbs_probes_and_the_nic_counters(rxe, tmp_path, record_property):
    rec = Recorder(tmp_path / "out", "--no-gpu", "--nic-interval", "200ms")
    runs = {
        "ib_write_bw": perftest("ib_write_bw", rxe, "-s", "65536", "-n", "2000"),
        "ib_send_lat": perftest("ib_send_lat", rxe, "-s", "64", "-n", "1000"),
        "ib_read_bw": perftest("ib_read_bw", rxe, "-s", "65536", "-n", "1000"),
    }
    time.sleep(0.5)  # one more counter reading after the last packet
    assert rec.stop() == 0, rec.stderr
    con = tables(rec.out)

    # the control path of every process, through the real libibverbs
    for tool, (client, server, out) in runs.items():
        assert "---" in out, out
        for pid, device in ((client, DEVICES[0]), (server, DEVICES[1])):
            ops = {op for (op,) in con.execute("SELECT DISTINCT op FROM verbs_calls WHERE pid = ? AND ok", [pid]).fetchall()}
            assert {"ibv_open_device", "ibv_alloc_pd", "ibv_create_cq", "ibv_create_qp", "ibv_modify_qp"} <= ops, \
                (tool, pid, ops)
            # rdma-core's headers turn ibv_reg_mr into ibv_reg_mr_iova2 for newer binaries
            assert ops & {"ibv_reg_mr", "ibv_reg_mr_iova2"}, (tool, pid, ops)
            opened = con.execute("SELECT device FROM verbs_calls WHERE pid = ? AND op = 'ibv_open_device'", [pid]).fetchall()
            assert opened == [(device,)], (tool, opened)
        # each end's QP points at the other's QP (each device numbers its own), at the other's address
        qps = {pid: con.execute("""SELECT qp_num, dest_qp_num, dgid, last_state, rts IS NOT NULL FROM qps
                                   WHERE pid = ? AND qp_type = 'RC'""", [pid]).fetchall() for pid in (client, server)}
        assert len(qps[client]) == 1 and len(qps[server]) == 1, (tool, qps)
        (cq, c_dest, c_gid, c_state, c_rts), (sq, s_dest, s_gid, s_state, s_rts) = qps[client][0], qps[server][0]
        assert (c_dest, s_dest) == (sq, cq), (tool, qps)
        assert (c_gid, s_gid) == (f"::ffff:{ADDR[1]}", f"::ffff:{ADDR[0]}"), (tool, qps)
        # the requester sends; perftest leaves a write/read test's responder in RTR (it never
        # sends), so RTS is required of the client only
        assert c_rts and c_state == "RTS", (tool, qps)
        assert s_state in ("RTR", "RTS") and s_rts == (s_state == "RTS"), (tool, qps)

    # the packets, in the rxe hardware counters of both devices
    messages = {"ib_write_bw": (2000, 65536), "ib_send_lat": (1000, 64), "ib_read_bw": (1000, 65536)}
    least = sum(n * -(-size // MAX_MTU) for n, size in messages.values())
    for device in DEVICES:
        assert counter_growth(con, device, "sent_pkts") >= least // 2, (device, least)
        assert counter_growth(con, device, "rcvd_pkts") >= least // 2, (device, least)
    assert counter_growth(con, DEVICES[0], "sent_pkts") + counter_growth(con, DEVICES[1], "sent_pkts") >= least
    # a clean wire: nothing failed. (A few sequence errors are normal here: rxe drops packets
    # when its own queues overflow, which emulation makes likely; 25 in one run.)
    for device in DEVICES:
        assert counter_growth(con, device, "retry_exceeded_err") == 0, device

    # every QP of both devices in qp_counters (RDMA netlink), each perftest QP with its process,
    # its port's network device and its packets; the kernel's own GSI QP too
    for device, veth in zip(DEVICES, VETH):
        gsi = con.execute("""SELECT count(*), count(pid), count(comm) FROM qp_counters
                             WHERE device = ? AND qp_type = 'GSI'""", [device]).fetchone()
        assert gsi[0] > 0 and gsi[1] == 0 and gsi[2] == gsi[0], (device, gsi)
    for tool, (client, server, _) in runs.items():
        for pid, device, veth in ((client, DEVICES[0], VETH[0]), (server, DEVICES[1], VETH[1])):
            (qp_num,), = con.execute("SELECT qp_num FROM qps WHERE pid = ? AND qp_type = 'RC'", [pid]).fetchall()
            seen = con.execute("""SELECT DISTINCT device, netdev, qp_type, comm FROM qp_counters
                                  WHERE pid = ? AND qp_num = ? AND port IS NOT NULL""", [pid, qp_num]).fetchall()
            assert seen == [(device, veth, "RC", tool)], (tool, pid, qp_num, seen)
            # a sample that caught the QP before its move to INIT sees no port (the kernel binds
            # one then, just after the driver's move), so no network device either
            unbound = con.execute("""SELECT DISTINCT state, netdev FROM qp_counters
                                     WHERE pid = ? AND qp_num = ? AND port IS NULL""", [pid, qp_num]).fetchall()
            assert set(unbound) <= {("RESET", None), ("INIT", None)}, (tool, pid, qp_num, unbound)
    # a write's requester sends every data packet, its responder receives them: their PSNs moved
    # by at least half of the fewest packets the messages need (the samples, 200 ms apart,
    # bracket most of a run that lasts seconds), and by no more than the devices counted
    client, server, _ = runs["ib_write_bw"]
    progress = {pid: con.execute("""SELECT coalesce(sum(delta), 0) FROM qp_counters q JOIN qps USING (pid, qp_num)
                                    WHERE q.pid = ? AND q.counter = ?""", [pid, counter]).fetchone()[0]
                for pid, counter in ((client, "sq_psn"), (server, "rq_psn"))}
    fewest = 2000 * (65536 // MAX_MTU)
    assert fewest // 2 <= progress[client] <= counter_growth(con, DEVICES[0], "sent_pkts"), (progress, fewest)
    assert fewest // 2 <= progress[server] <= counter_growth(con, DEVICES[1], "rcvd_pkts"), (progress, fewest)

    # a clean wire is not an RDMA hot spot
    findings = analyze(rec.out, tmp_path)
    assert not [f["summary"] for f in findings if f["category"] == "rdma_retransmits"]

    # the data path: rxe's provider posts and polls inside librxe, where scaletrace has no probe
    # (it follows mlx5's); the capture says so instead of writing empty traffic
    hooks = con.execute("SELECT hooks_attached, hooks_missing FROM capture").fetchall()
    attached, missing = hooks[0]
    assert "verbs(" in attached, hooks
    traffic = con.execute("SELECT count(*) FROM qp_traffic").fetchone()[0] if "qp_traffic" in os.listdir(rec.out) else 0
    assert traffic > 0 or "verbs-data-path" in missing or "verbs-data-path" not in attached, hooks
    record_property("path", "RDMA: verbs control path " + ("attached" if "verbs(" in attached else "missing")
                    + ", data path " + (f"attached ({traffic} QPs)" if traffic else "not attached")
                    + ", QPs and PSNs over RDMA netlink")


def analyze(out, tmp_path):
    findings = tmp_path / "findings.json"
    proc = subprocess.run([BIN, "analyze", str(out), "--no-report", "--json", str(findings)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(findings.read_text())


def test_loss_on_one_rdma_link_moves_its_counters_and_is_named_first(rxe, tmp_path, record_property):
    """2 % loss and 1 ms delay on one link while both links carry the same RDMA writes: the lossy
    link's devices count the recovery, and analyze names one of them first, the healthy link
    never."""
    lossy_devices, lossy_veth, _ = LINKS[1]
    for dev in lossy_veth:
        sh("tc", "qdisc", "replace", "dev", dev, "root", "netem", "loss", "2%", "delay", "1ms")
    try:
        rec = Recorder(tmp_path / "out", "--no-gpu", "--nic-interval", "200ms")
        # 4 KB messages and no jitter: rxe's go-back-N recovers from loss, not from reordering
        with ThreadPoolExecutor(len(LINKS)) as pool:
            runs = [pool.submit(perftest, "ib_write_bw", rxe, "-s", "4096", "-n", "1000", link=i)
                    for i in range(len(LINKS))]
            for run in runs:
                run.result()
        time.sleep(0.5)
        assert rec.stop() == 0, rec.stderr
    finally:
        for dev in lossy_veth:
            subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)
    con = tables(rec.out)
    # the requester sees gaps in the responses, the responder out-of-sequence requests
    errors = {(d, c): counter_growth(con, d, c) for d in lossy_devices
              for c in ("rcvd_seq_err", "out_of_seq_request", "duplicate_request", "retry_exceeded_err")}
    assert errors[(lossy_devices[0], "rcvd_seq_err")] + errors[(lossy_devices[1], "out_of_seq_request")] > 0, errors
    assert errors[(lossy_devices[0], "retry_exceeded_err")] == 0, errors

    findings = analyze(rec.out, tmp_path)
    assert findings, "nothing found"
    first = findings[0]
    record_property("first_finding", first["summary"])  # in the JUnit report vmtest keeps
    assert first["category"] == "rdma_retransmits", findings[:3]
    assert first["subject"].rsplit("/", 1)[1] in lossy_devices, first
    assert any(f"netdev {veth}" in first["summary"] for veth in lossy_veth), first
    # the busiest QP named is the lossy link's perftest QP
    assert "ib_write_bw" in first["summary"], first
    named = {f["subject"].rsplit("/", 1)[1] for f in findings if f["category"] == "rdma_retransmits"}
    assert not named & set(DEVICES), findings
