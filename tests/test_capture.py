"""End to end: real eBPF programs, real TCP between namespaces, real Parquet read by DuckDB."""
import os
import re
import signal
import socket
import statistics
import subprocess
import time
import uuid
import sys

import duckdb
import pytest

from netlab import Recorder, Server, SyscallStorm, job_cgroups, transfer, voluntary_switches

MB = 1 << 20


def client_flow(rec, net, port):
    rows = rec.query(f"""
        SELECT flow_id, bytes_sent, total_retrans, retransmit_events, rtt_updates, direction, comm,
               open_at_end, local_addr, remote_addr, local_port
        FROM flows WHERE remote_addr = '{net.b_ip}' AND remote_port = {port}""")
    assert len(rows) == 1, f"expected one client flow to port {port}, got {rows}\n{rec.stderr}"
    return rows[0]


def test_clean_transfer_is_recorded_with_its_tuple_bytes_and_rtt(net, tmp_path, record_property):
    net.no_spurious_retransmits()
    rec = Recorder(tmp_path, "--netns", net.a)
    local_port, received = transfer(net, 5201, 20 * MB)
    assert rec.stop() == 0, rec.stderr
    assert received == 20 * MB

    flow_id, sent, total_retrans, retrans_events, rtt_updates, direction, comm, open_at_end, laddr, raddr, lport = client_flow(rec, net, 5201)
    assert (laddr, raddr, lport) == (net.a_ip, net.b_ip, local_port)
    assert direction == "active" and not open_at_end
    assert comm.startswith("python")
    # bytes_acked counts the FIN too; allow a few percent as the issue asks.
    assert abs(sent - received) <= 0.02 * received
    assert total_retrans == 0 and retrans_events == 0
    assert rec.query(f"SELECT loss_recovery_ns FROM flows WHERE flow_id = {flow_id}") == [(0,)]
    assert rtt_updates > 0
    assert rec.query(f"SELECT count(*) FROM retransmits WHERE flow_id = {flow_id}")[0][0] == 0

    srtts = [r[0] for r in rec.query(f"SELECT srtt_us FROM rtt WHERE flow_id = {flow_id}")]
    assert srtts, "no RTT samples"
    # veth inside one machine: tens of microseconds to a few milliseconds.
    assert 1 <= statistics.median(srtts) < 20_000, srtts

    # Only the client namespace was selected: the server side must not appear.
    assert rec.query("SELECT count(*) FROM flows WHERE direction = 'passive'")[0][0] == 0
    (drops, flows, hooks, missing) = rec.query("SELECT ring_drops, flows, hooks_attached, hooks_missing FROM capture")[0]
    assert drops == 0 and flows >= 1
    assert "sock_ops" in hooks and "tcp:tcp_retransmit_skb" in hooks
    # which hooks this kernel gave (`cargo xtask vmtest` prints these per kernel)
    record_property("path", f"hooks attached: {hooks}")
    record_property("path", f"hooks missing: {missing or 'none'}")


def test_random_loss_shows_up_as_retransmits(net, tmp_path):
    net.drop_incoming(5202, 0.03)
    rec = Recorder(tmp_path, "--netns", net.a)
    _, received = transfer(net, 5202, 20 * MB)
    assert rec.stop() == 0, rec.stderr
    assert received == 20 * MB

    flow_id, sent, total_retrans, retrans_events, *_ = client_flow(rec, net, 5202)
    assert abs(sent - received) <= 0.02 * received
    assert total_retrans > 0 and retrans_events > 0
    # each loss costs its recovery: some of the transfer, not all of it
    recovery, duration = rec.query(f"SELECT loss_recovery_ns, duration_ns FROM flows WHERE flow_id = {flow_id}")[0]
    assert 0 < recovery < duration, (recovery, duration)
    rows = rec.query(f"SELECT count(*), min(kind), min(state) FROM retransmits WHERE flow_id = {flow_id}")
    count, kind, _state = rows[0]
    assert count > 0 and kind == "retransmit"
    # Per-packet events and the kernel's own counter tell the same story (no rate limiting at this rate).
    assert count <= total_retrans
    assert rec.query("SELECT retransmits_over_rate, ring_drops FROM capture")[0] == (0, 0)
    # Lost segments, not only late ones: some of what was resent had never arrived, so not every
    # retransmit drew a DSACK (under pure reordering nearly all do: the reordering test below).
    # How many did depends on the machine's timing, not on the recorder: a retransmission
    # timeout resends everything outstanding, some of which had arrived. Runs here saw 90 of
    # 539; a slower CI machine 731 of 1529, which an earlier bound (a third) failed. (That
    # DSACKs are counted at all is the reordering test's check, against `ss`.)
    (dsack_dups,) = rec.query(f"SELECT dsack_dups FROM flows WHERE flow_id = {flow_id}")[0]
    assert dsack_dups is not None and dsack_dups < total_retrans, (dsack_dups, total_retrans)
    # The flow's windows (1 s) add up to its totals, retransmits and recovery time included.
    windows = rec.query(f"""
        SELECT sum(bytes_sent), sum(retrans_segments), sum(retransmit_events), sum(loss_recovery_ns),
               count(*) FILTER (WHERE retrans_segments > 0)
        FROM flow_windows WHERE flow_id = {flow_id}""")[0]
    assert windows[:4] == (sent, total_retrans, retrans_events, recovery), windows
    assert windows[4] >= 1


def ss_counters(net, port):
    """The kernel's own counters of the client's connection to `port`, as `ss -ti` prints them
    (`dsack_dups:N`, `reord_seen:N`, `retrans:A/N`; a counter at 0 is not printed)."""
    out = net.run(net.a, "ss", "-tinH", "dst", net.b_ip, "dport", f"= :{port}").stdout
    found = lambda name: int(m.group(1)) if (m := re.search(rf"\b{name}:(\d+)", out)) else 0
    total = re.search(r"\bretrans:\d+/(\d+)", out)
    return {"dsack_dups": found("dsack_dups"), "reord_seen": found("reord_seen"),
            "total_retrans": int(total.group(1)) if total else 0, "ss": out}


PHASED_CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.sendall(b"x" * int(sys.argv[3])); print("sent", flush=True)
for line in sys.stdin:
    if line.strip() == "close":
        break
    c.sendall(b"x" * int(sys.argv[3])); print("sent", flush=True)
c.close()
"""


def test_no_event_is_lost_at_100k_events_per_second_and_the_loader_is_woken_per_batch(tmp_path):
    """The synthetic kernel source (one RTT sample per getppid() of one process) at 100 k
    events/s for 2 s: every call reaches the rtt table and none is dropped, though the loader is
    woken only once a batch waits and drains the rest on a timer. A wakeup per event (the
    kernel's default for a reader that keeps up) cost more than the per-ACK work itself; with
    it the loader was woken 21,330 times a second here (and 356 times a second for 355 RTT
    samples a second on one TCP flow); with batches, about 20.
    (The benchmark takes the same source past 1 M events/s.)"""
    storm = SyscallStorm(SyscallStorm.build(tmp_path), 100_000, 2)
    rec = Recorder(tmp_path / "rec", "--bench-source-pid", str(storm.pid), "--no-gpu", "--nic-interval", "0s",
                   "--port", "1")
    try:
        switches = voluntary_switches(rec.proc.pid)
        calls, _, elapsed = storm.run()
        wakeups_per_s = (voluntary_switches(rec.proc.pid) - switches) / elapsed
    finally:
        assert rec.stop() == 0, rec.stderr
    assert calls >= 100_000
    assert wakeups_per_s < 200, wakeups_per_s
    assert rec.query("SELECT rtt_samples, ring_drops FROM capture")[0] == (calls, 0)
    assert rec.query("SELECT count(*) FROM rtt")[0][0] == calls
    assert "bench:syscalls:sys_enter_getppid" in rec.query("SELECT hooks_attached FROM capture")[0][0]


def test_flows_carry_the_job_of_their_cgroup(net, tmp_path):
    """Each flow carries the cgroup v2 its process ran in, and the Kubernetes pod and container
    or the Slurm job that the cgroup's path names. The clients run in cgroups shaped as the
    kubelet (cgroupfs driver) and slurmstepd (v1 layout) name them, below a top cgroup this test
    creates and removes; a third runs where the test runs."""
    uid, cid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "ab12" * 16
    own = next(line.split("::", 1)[1].strip() for line in open("/proc/self/cgroup") if line.startswith("0::"))
    with job_cgroups(f"kubepods/besteffort/pod{uid}/{cid}", "slurm/uid_0/job_4121/step_0/task_0") as (root, (pod, job)):
        rec = Recorder(tmp_path, "--netns", net.a)
        transfer(net, 5211, MB, cgroup=pod)
        transfer(net, 5212, MB, cgroup=job)
        transfer(net, 5213, MB)
        assert rec.stop() == 0, rec.stderr
    assert "sock:cgroup_id" in rec.query("SELECT hooks_attached FROM capture")[0][0], rec.stderr
    rows = rec.query("SELECT remote_port, cgroup, pod_uid, container_id, slurm_job FROM flows "
                     "WHERE direction = 'active' ORDER BY remote_port")
    assert rows == [
        (5211, pod[len(root):], uid, cid, None),
        (5212, job[len(root):], None, None, "4121"),
        (5213, own, None, None, None),
    ], rows


def settled_counters(net, port, acked):
    """The client's counters once `acked` bytes are acknowledged (the FIN not yet sent), its
    egress queues are empty and two reads 0.3 s apart agree: a segment resent on the fast path
    can be acknowledged while its original still waits in the slow queue, and the original's
    late arrival brings one more DSACK. The recorder reads the counts at close."""
    deadline = time.time() + 30
    last = None
    while True:
        kernel = ss_counters(net, port)
        settled = (f"bytes_acked:{acked + 1} " in kernel["ss"] + " " and "unacked:" not in kernel["ss"]
                   and net.client_egress_backlog() == 0)
        counts = (kernel["dsack_dups"], kernel["reord_seen"], kernel["total_retrans"])
        if settled and counts == last:
            return kernel
        last = counts if settled else None
        assert time.time() < deadline, kernel["ss"]
        time.sleep(0.3)


def test_reordering_and_spurious_retransmits_are_counted_as_the_kernel_counts_them(net, tmp_path):
    """Two things that look like loss to a sender and are not. Every 16th segment is held back
    in a slow queue (reordering); and the receiver's ACKs are dropped for 0.6 s, so the
    sender's timer resends data that had arrived, and the receiver reports the duplicate with
    a DSACK. The flow's counts (read from the kernel's tcp_sock, placed by its BTF) are the
    kernel's own, as `ss` reads them through sock_diag, and its RTT samples carry them.
    Whether a phase produces a DSACK depends on timing: under the VM lab's emulation 2 of 8
    runs of one ACK-dropping phase had none (the first timer's resend came while ACKs were
    still dropped, and a later ACK covered it), and one in 8 saw no reordering at a 4 Mbit/s
    slow queue. So the phase is repeated, up to 4 times, until the kernel has counted both."""
    port = 5230
    net.reorder_client(port)
    # a tail loss probe of the FIN, sent after the counts were read (the receiver's ACK
    # stalled under emulation), would count one more retransmit than `ss` saw
    net.no_spurious_retransmits()
    rec = Recorder(tmp_path, "--netns", net.a)
    server = Server(net, port)
    client = subprocess.Popen(["ip", "netns", "exec", net.a, "taskset", "-c", "0", sys.executable, "-c",
                               PHASED_CLIENT, net.b_ip, str(port), str(2 * MB)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert client.stdout.readline().strip() == "sent"
    sent = 2 * MB
    drop_acks = ["iptables", "-I", "OUTPUT", "-p", "tcp", "--sport", str(port), "-j", "DROP"]
    for _ in range(4):
        net.run(net.b, *drop_acks)
        client.stdin.write("send\n")
        client.stdin.flush()
        time.sleep(0.6)
        net.run(net.b, *["-D" if a == "-I" else a for a in drop_acks])
        assert client.stdout.readline().strip() == "sent"  # all handed to the kernel
        sent += 2 * MB
        kernel = settled_counters(net, port, sent)
        if kernel["reord_seen"] > 0 and kernel["dsack_dups"] > 0:
            break
    client.stdin.write("close\n")
    client.stdin.flush()
    assert client.wait(timeout=60) == 0
    assert server.received() == [sent]
    assert rec.stop() == 0, rec.stderr
    rows = rec.query(f"SELECT flow_id, dsack_dups, reord_seen, total_retrans FROM flows WHERE remote_port = {port}")
    assert len(rows) == 1, rows
    flow_id, dsack_dups, reord_seen, total_retrans = rows[0]
    assert kernel["reord_seen"] > 0 and kernel["dsack_dups"] > 0, kernel["ss"]
    assert (dsack_dups, reord_seen, total_retrans) == (kernel["dsack_dups"], kernel["reord_seen"], kernel["total_retrans"]), kernel["ss"]
    assert "tcp_sock:dsack_dups" in rec.query("SELECT hooks_attached FROM capture")[0][0]
    # the samples' running counts only grow, up to the flow's
    samples = [r[0] for r in rec.query(f"SELECT dsack_dups FROM rtt WHERE flow_id = {flow_id} ORDER BY ts")]
    assert samples == sorted(samples) and 0 <= samples[-1] <= dsack_dups, samples
    # every retransmit recorded went on the wire: attempts the kernel did not send (the
    # original still in this host's slow queue) were 410 rows against 11 sent in a DDP run
    recorded = rec.query(f"SELECT count(*) FROM retransmits WHERE flow_id = {flow_id}")[0][0]
    assert recorded <= total_retrans, (recorded, total_retrans, rec.query("SELECT retransmits_not_sent FROM capture"))


def tcp_timeouts(net):
    """The kernel's own count of retransmission timeouts in the client namespace (TcpExt
    TCPTimeouts): independent of scaletrace."""
    lines = net.run(net.a, "cat", "/proc/net/netstat").stdout.splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            return dict(zip(names.split()[1:], map(int, values.split()[1:])))["TCPTimeouts"]
    raise AssertionError("no TcpExt in /proc/net/netstat")


def test_a_blackout_is_counted_as_retransmit_timeouts_with_their_recovery_time(net, tmp_path):
    """A link that drops everything for 1.5 s while data is in flight: the sender recovers only
    by retransmission timeouts (200 ms, then backed off), which the flow counts as the kernel's
    TCPTimeouts does, and the stall from the first timeout to the next acknowledged data."""
    net.no_spurious_retransmits()
    rec = Recorder(tmp_path, "--netns", net.a)
    server = Server(net, 5223)
    before = tcp_timeouts(net)
    # the client says when it is sending: under emulation (the VM lab) its start alone can
    # outlast a fixed wait, and a blackout before the connection exists tests nothing
    client = subprocess.Popen(["ip", "netns", "exec", net.a, sys.executable, "-c",
                               "import socket,sys,time; c=socket.create_connection((sys.argv[1],5223))\n"
                               "c.sendall(b'x'*4096); print('sending', flush=True); end=time.time()+3\n"
                               "while time.time() < end: c.sendall(b'x'*4096); time.sleep(0.01)\n"
                               "c.close()", net.b_ip], stdout=subprocess.PIPE, text=True)
    assert client.stdout.readline().strip() == "sending"
    time.sleep(0.5)
    blackout = ["iptables", "-I", "INPUT", "-p", "tcp", "--dport", "5223", "-j", "DROP"]
    net.run(net.b, *blackout)
    time.sleep(1.5)
    net.run(net.b, *["-D" if a == "-I" else a for a in blackout])
    assert client.wait(timeout=60) == 0
    server.received()
    assert rec.stop() == 0, rec.stderr
    timeouts = tcp_timeouts(net) - before
    rows = rec.query("SELECT rto_count, rto_recovery_ns, total_retrans, loss_recovery_ns FROM flows WHERE remote_port = 5223")
    assert len(rows) == 1, rows
    rto_count, recovery_ns, total_retrans, loss_recovery_ns = rows[0]
    # the loss recovery holds the timeout stall: from the first retransmit, the first timeout's
    assert recovery_ns <= loss_recovery_ns <= recovery_ns + 1e9, (recovery_ns, loss_recovery_ns)
    assert timeouts >= 2, timeouts  # 200 ms, 400 ms, 800 ms... within 1.5 s
    assert rto_count == timeouts, (rto_count, timeouts)
    assert total_retrans >= rto_count
    # from the first timeout (~0.2 s into the blackout) to the first retransmission after it
    # ended (the next backed-off timer): at least the rest of the blackout, at most a few s
    assert 1.0e9 <= recovery_ns <= 6e9, recovery_ns
    # The flow's windows (1 s) have the timeouts in the windows they fired in (no RTT update
    # comes during the blackout: each timeout opens its window) and the stall where it ended.
    per_window = rec.query("""
        SELECT w.rto_count, w.rto_recovery_ns, w.rtt_updates FROM flow_windows w JOIN flows f USING (flow_id)
        WHERE f.remote_port = 5223 ORDER BY w.ts""")
    assert sum(r[0] for r in per_window) == rto_count, per_window
    assert sum(r[1] for r in per_window) == recovery_ns, per_window
    assert [r[1] for r in per_window].count(0) == len(per_window) - 1, "one window holds the stall's end"
    # 1.5 s of backed-off timers (0.2, 0.4, 0.8 s) span at least two windows of 1 s
    assert sum(1 for r in per_window if r[0] > 0) >= 2, per_window


def median_srtt(rec, net, port):
    flow_id = client_flow(rec, net, port)[0]
    return statistics.median(r[0] for r in rec.query(f"SELECT srtt_us FROM rtt WHERE flow_id = {flow_id}"))


def test_rate_limit_queueing_raises_rtt(net, tmp_path):
    rec = Recorder(tmp_path / "base", "--netns", net.a)
    transfer(net, 5203, 4 * MB)
    assert rec.stop() == 0, rec.stderr
    base = median_srtt(rec, net, 5203)

    net.rate_limit_client("20mbit", "300ms")
    rec = Recorder(tmp_path / "shaped", "--netns", net.a)
    transfer(net, 5204, 4 * MB)
    assert rec.stop() == 0, rec.stderr
    shaped = median_srtt(rec, net, 5204)
    # A 20 Mbit/s bottleneck with a deep queue adds milliseconds of queueing to sub-ms veth RTT.
    assert shaped > 2_000 and shaped > 5 * base, (base, shaped)


def test_flow_windows_count_every_rtt_update_and_add_up_to_the_flow(net, tmp_path):
    """Every ACK that measured an RTT is counted in the kernel, in its flow's window, not only
    the sampled ones: a flow's windows add up to its own count of RTT updates and its bytes,
    their extremes and mean are the flow's, and each sampled RTT lies within its window's range.
    A token bucket builds a queue, so the RTT spreads from microseconds to milliseconds."""
    net.rate_limit_client("40mbit", "300ms")
    rec = Recorder(tmp_path, "--netns", net.a, "--flow-window", "250ms")
    transfer(net, 5205, 8 * MB)
    assert rec.stop() == 0, rec.stderr
    flow_id, sent, total_retrans, _, rtt_updates = client_flow(rec, net, 5205)[:5]
    f_min, f_max, f_mean = rec.query(f"SELECT srtt_min_us, srtt_max_us, srtt_mean_us FROM flows WHERE flow_id = {flow_id}")[0]
    (windows, distinct, updates, lo, hi, weighted_sum, bytes_sent, retrans, bad_sums, unaligned, unordered) = rec.query(f"""
        SELECT count(*), count(DISTINCT ts), sum(rtt_updates), min(srtt_min_us), max(srtt_max_us),
               sum(srtt_mean_us * rtt_updates), sum(bytes_sent), sum(retrans_segments),
               count(*) FILTER (WHERE list_sum(rtt_buckets) <> rtt_updates OR len(rtt_buckets) <> 84),
               count(*) FILTER (WHERE epoch_ns(ts) % window_ns <> 0 OR window_ns <> 250000000),
               count(*) FILTER (WHERE NOT (srtt_min_us <= srtt_p50_us AND srtt_p50_us <= srtt_p90_us
                                           AND srtt_p90_us <= srtt_p99_us AND srtt_p99_us <= srtt_max_us))
        FROM flow_windows WHERE flow_id = {flow_id}""")[0]
    # 8 MB at 40 Mbit/s: 1.7 s, about seven windows of 250 ms
    assert windows >= 5 and distinct == windows, (windows, distinct)
    assert (updates, bytes_sent, retrans) == (rtt_updates, sent, total_retrans)
    assert (lo, hi) == (f_min, f_max)
    assert abs(weighted_sum / updates - f_mean) <= 1e-6 * f_mean
    assert (bad_sums, unaligned, unordered) == (0, 0, 0)
    # the queue built: the windows do span a range (here 81 µs to 30 ms; under the VM lab's
    # emulation, with a base RTT of milliseconds, 4 to 34 ms)
    assert hi > 5 * lo, (lo, hi)
    # a window moves at most what the bottleneck lets through: 40 Mbit/s is 1.25 MB per 250 ms
    busiest = rec.query(f"SELECT max(bytes_sent) FROM flow_windows WHERE flow_id = {flow_id}")[0][0]
    assert 0 < busiest < 1.6e6, busiest
    # The sampled RTTs (`rtt`) against their windows, away from the edges (the kernel's and the
    # loader's conversions to UTC may differ by microseconds).
    outside, samples = rec.query(f"""
        SELECT count(*) FILTER (WHERE r.srtt_us NOT BETWEEN h.srtt_min_us AND h.srtt_max_us), count(*)
        FROM rtt r JOIN flow_windows h
          ON h.flow_id = r.flow_id AND epoch_ns(r.ts) // h.window_ns = epoch_ns(h.ts) // h.window_ns
        WHERE r.flow_id = {flow_id} AND epoch_ns(r.ts) % h.window_ns BETWEEN 1000000 AND h.window_ns - 1000000""")[0]
    assert samples >= 20 and outside == 0, (samples, outside)
    assert rec.query("SELECT sum(ring_drops_flow_window) FROM capture")[0][0] == 0


def test_sigint_mid_transfer_leaves_readable_parquet_with_the_open_flow(net, tmp_path):
    # An open flow's counters are those of its last RTT callback, and the ACK of a retransmitted
    # segment carries no RTT sample (Karn): a tail loss probe fired by a stalled CPU (a busy CI
    # machine) left the last segment out of bytes_sent here about once in ten runs.
    net.no_spurious_retransmits()
    rec = Recorder(tmp_path, "--netns", net.a)
    server = Server(net, 5205)
    client = subprocess.Popen(["ip", "netns", "exec", net.a, sys.executable, "-c",
                               # sendall returns once the data is queued; wait until the peer has
                               # acknowledged all of it (SIOCOUTQ = 0), or a stop that comes first
                               # rightly records fewer bytes acknowledged (seen on a loaded CI)
                               "import socket,time,sys,fcntl,termios,struct; c=socket.create_connection((sys.argv[1],5205)); c.sendall(b'x'*(1<<20))\n"
                               "while struct.unpack('i', fcntl.ioctl(c.fileno(), termios.TIOCOUTQ, b'0000'))[0]: time.sleep(0.01)\n"
                               "print('sent',flush=True); time.sleep(30)",
                               net.b_ip], stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "sent"
        assert rec.stop() == 0, rec.stderr
    finally:
        client.kill()
        server.proc.kill()
    assert not list(tmp_path.glob("*/*.partial"))
    rows = rec.query(f"SELECT open_at_end, bytes_sent, \"end\" FROM flows WHERE remote_port = 5205")
    assert len(rows) == 1
    open_at_end, sent, end = rows[0]
    assert open_at_end and end is None
    assert sent >= 1 << 20
    assert "stopped (SIGINT)" in rec.stderr


def test_sigterm_also_flushes(net, tmp_path):
    rec = Recorder(tmp_path, "--netns", net.a)
    transfer(net, 5206, MB)
    assert rec.stop(signal.SIGTERM) == 0, rec.stderr
    assert rec.query("SELECT count(*) FROM flows WHERE remote_port = 5206")[0][0] == 1


def test_hangup_and_user_signals_lose_nothing(net, tmp_path):
    """An ssh session that closes sends SIGHUP; a stray `kill -USR1` used to kill the run too
    (rc 129/138, no Parquet, .partial files left): USR1/USR2 are ignored, HUP ends the run as
    SIGINT does."""
    rec = Recorder(tmp_path, "--netns", net.a)
    transfer(net, 5222, MB)
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        rec.proc.send_signal(sig)
    time.sleep(0.5)
    assert rec.proc.poll() is None, rec.stop()
    assert rec.stop(signal.SIGHUP) == 0, rec.stderr
    assert "SIGUSR1 ignored" in rec.stderr and "stopped (SIGHUP)" in rec.stderr, rec.stderr
    assert not list(tmp_path.glob("*/*.partial"))
    assert rec.query("SELECT count(*) FROM flows WHERE remote_port = 5222")[0][0] == 1


def test_port_filter_selects_only_matching_flows(net, tmp_path):
    rec = Recorder(tmp_path, "--netns", net.a, "--port", "5207")
    transfer(net, 5207, MB)
    transfer(net, 5208, MB)
    assert rec.stop() == 0, rec.stderr
    ports = [r[0] for r in rec.query("SELECT remote_port FROM flows")]
    assert ports == [5207]
    assert rec.query("SELECT flows_filtered_out FROM capture")[0][0] >= 1


def test_flows_of_every_namespace_carry_its_name(net, tmp_path):
    """One recorder in the root namespace sees the flows of every namespace on the node; before,
    they all looked alike (one host). Each flow names its namespace; the recorder's own is null."""
    rec = Recorder(tmp_path, "--port", "5217")
    transfer(net, 5217, MB)
    assert rec.stop() == 0, rec.stderr
    rows = rec.query("SELECT direction, netns FROM flows WHERE remote_port = 5217 OR local_port = 5217 ORDER BY direction")
    assert rows == [("active", net.a), ("passive", net.b)], rows
    # a flow in the recorder's own namespace
    port = 5218
    rec2 = Recorder(tmp_path / "own", "--port", str(port))
    with socket.create_server(("127.0.0.1", port)) as srv:
        c = socket.create_connection(("127.0.0.1", port))
        a, _ = srv.accept()
        c.sendall(b"x" * 1000)
        a.recv(1000)
        c.close()
        a.close()
    assert rec2.stop() == 0, rec2.stderr
    assert {r[0] for r in rec2.query("SELECT netns FROM flows")} == {None}


PAUSING_CLIENT = """
import fcntl, socket, struct, sys, termios, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
def send_and_wait(n):
    c.sendall(b'x' * n)
    while struct.unpack('i', fcntl.ioctl(c.fileno(), termios.TIOCOUTQ, b'0000'))[0]:
        time.sleep(0.01)
send_and_wait(1 << 20)
print('sent', flush=True)
sys.stdin.readline()
send_and_wait(1 << 20)
c.close()
print('done', flush=True)
"""


def test_a_connection_from_an_earlier_run_is_adopted(net, tmp_path):
    """The agent restarted or upgraded while a job runs: its connections were invisible to the
    new run. A connection whose callbacks the earlier run enabled is adopted at its next ACK,
    with the socket's totals."""
    server = Server(net, 5219)
    first = Recorder(tmp_path / "first", "--netns", net.a, "--port", "5219")
    client = subprocess.Popen(["ip", "netns", "exec", net.a, sys.executable, "-c", PAUSING_CLIENT, net.b_ip, "5219"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert client.stdout.readline().strip() == "sent"
    assert first.stop() == 0, first.stderr
    second = Recorder(tmp_path / "second", "--netns", net.a, "--port", "5219")
    client.stdin.write("\n")
    client.stdin.flush()
    assert client.stdout.readline().strip() == "done"
    client.wait(timeout=30)
    received = server.received()[0]
    assert second.stop() == 0, second.stderr
    rows = second.query("SELECT adopted, tracked, direction, bytes_sent, rtt_updates FROM flows WHERE remote_port = 5219")
    assert len(rows) == 1, rows
    adopted, tracked, direction, sent, rtt_updates = rows[0]
    assert adopted and tracked and direction == "unknown" and rtt_updates > 0, rows
    # the socket's totals: both megabytes, the one sent before this run too (+ SYN and FIN)
    assert received == 2 << 20 and sent == received + 2, (sent, received)
    # the first run saw it open at its end, not adopted
    assert first.query("SELECT adopted, open_at_end FROM flows WHERE remote_port = 5219") == [(False, True)]


# Sends a megabyte, then another when told, and closes only when told again.
HOLDING_CLIENT = PAUSING_CLIENT.replace("c.close()\nprint('done', flush=True)",
                                        "print('sent again', flush=True)\nsys.stdin.readline()\nc.close()")


def test_a_connection_that_only_receives_is_adopted(net, tmp_path):
    """The receiving end of a connection open before the run (NCCL's socket transport sends
    each way on its own connection) gets no RTT callback: adopted at its next ACK, it was never
    adopted, and a capture that ended before the connection did had no row for it, though it
    took in megabytes. It is adopted at its next incoming segment."""
    server = Server(net, 5228)
    client = subprocess.Popen(["ip", "netns", "exec", net.a, sys.executable, "-c", HOLDING_CLIENT, net.b_ip, "5228"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "sent"
        # the receiving side only: the server's namespace and port
        rec = Recorder(tmp_path, "--netns", net.b, "--port", "5228")
        if "iter:tcp not attached" in rec.stderr:
            assert rec.stop() == 0
            pytest.skip("this kernel cannot turn on an open connection's callbacks (Linux < 6.12)")
        client.stdin.write("\n")
        client.stdin.flush()
        assert client.stdout.readline().strip() == "sent again"
        # stopped while the connection is still open
        assert rec.stop() == 0, rec.stderr
    finally:
        # (end of input: the client goes past both waits, whichever it is at)
        client.stdin.close()
        client.wait(timeout=30)
    assert server.received() == [2 << 20]
    rows = rec.query("SELECT local_port, adopted, tracked, open_at_end, bytes_received, bytes_sent FROM flows")
    assert len(rows) == 1, rows
    port, adopted, tracked, open_at_end, received, sent = rows[0]
    # the socket's totals at the end: both megabytes, the one before this run too
    assert (port, adopted, tracked, open_at_end) == (5228, True, True, True), rows
    assert received == 2 << 20 and sent <= 1, rows


def test_connections_open_before_any_run_are_adopted(net, tmp_path, record_property):
    """A job's connections opened before scaletrace ever ran (no callbacks turned on by anyone):
    the iter/tcp program turns them on at the start, sock_ops adopts each at its next ACK with
    the socket's totals, and one the filters leave out is not recorded."""
    wanted, other = (5225, 5226, 5227), 5224
    # one server per connection: the lab's server reads its connections one after the other
    servers = [Server(net, port) for port in (*wanted, other)]
    clients = [subprocess.Popen(["ip", "netns", "exec", net.a, sys.executable, "-c", PAUSING_CLIENT, net.b_ip, str(port)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for port in (*wanted, other)]
    for c in clients:
        assert c.stdout.readline().strip() == "sent"
    rec = Recorder(tmp_path, "--netns", net.a, "--port", f"{wanted[0]}-{wanted[-1]}")
    # before Linux 6.12 no program may turn on an open connection's callbacks: the recorder says
    # how many connections it cannot record and records the rest (the VM lab's 6.1 takes this path)
    unsupported = "iter:tcp not attached: this kernel does not let a program turn on an open connection's callbacks"
    adopting = unsupported not in rec.stderr
    record_property("path", "connections open before the start: " + (
        "adopted (iter/tcp turns their callbacks on)" if adopting else "counted as not recorded (no iter/tcp setsockopt)"))
    if adopting:
        assert "adopting connections open before the start: 4 in 1 network namespace" in rec.stderr, rec.stderr
    else:
        assert "4 connections open before the start are not recorded" in rec.stderr, rec.stderr
    for c in clients:
        c.stdin.write("\n")
        c.stdin.flush()
        assert c.stdout.readline().strip() == "done"
        c.wait(timeout=30)
    assert [s.received() for s in servers] == [[2 << 20]] * 4
    assert rec.stop() == 0, rec.stderr
    if not adopting:
        # no flows file at all, or none of these connections in it
        if list(tmp_path.glob("flows/*.parquet")):
            assert rec.query("SELECT count(*) FROM flows WHERE remote_port BETWEEN 5224 AND 5227") == [(0,)]
        assert "iter:tcp" in rec.query("SELECT hooks_missing FROM capture")[0][0]
        return
    rows = rec.query(f"SELECT remote_port, adopted, tracked, bytes_sent, rtt_updates FROM flows WHERE remote_port <> {other} ORDER BY 1")
    assert [r[0] for r in rows] == list(wanted), rows
    for _, adopted, tracked, sent, rtt_updates in rows:
        # both megabytes, the one sent before the run too (+ SYN and FIN)
        assert adopted and tracked and rtt_updates > 0 and sent == (2 << 20) + 2, rows
    assert rec.query(f"SELECT count(*) FROM flows WHERE remote_port = {other}") == [(0,)]
    assert "iter:tcp" in rec.query("SELECT hooks_attached FROM capture")[0][0]


def test_cidr_filter(net, tmp_path):
    rec = Recorder(tmp_path, "--netns", net.a, "--cidr", "192.0.2.0/24")
    transfer(net, 5209, MB)
    assert rec.stop() == 0, rec.stderr
    assert rec.query("SELECT count(*) FROM flows")[0][0] == 0
    rec = Recorder(tmp_path / "match", "--netns", net.a, "--cidr", f"{net.b_ip}/32")
    transfer(net, 5210, MB)
    assert rec.stop() == 0, rec.stderr
    assert rec.query("SELECT count(*) FROM flows WHERE remote_port = 5210")[0][0] == 1


def test_ipv4_cidr_matches_dual_stack_sockets(net, tmp_path):
    """A client on an AF_INET6 socket talking to an IPv4 peer (::ffff:a.b.c.d, as PyTorch's
    TCPStore does) is IPv4 traffic: an IPv4 --cidr must select it."""
    rec = Recorder(tmp_path, "--netns", net.a, "--cidr", f"{net.b_ip}/32")
    server = Server(net, 5221)
    client = subprocess.run(["ip", "netns", "exec", net.a, sys.executable, "-c",
                             "import socket,sys; c=socket.socket(socket.AF_INET6); c.connect(('::ffff:'+sys.argv[1],5221)); "
                             "c.sendall(b'x'*(1<<20)); c.close()", net.b_ip],
                            capture_output=True, text=True, timeout=60)
    assert client.returncode == 0, client.stderr
    assert server.received() == [1 << 20]
    assert rec.stop() == 0, rec.stderr
    rows = rec.query("SELECT family, remote_addr, bytes_sent FROM flows WHERE remote_port = 5221")
    assert len(rows) == 1, rows
    assert rows[0][:2] == ("ipv4", net.b_ip), rows
    assert rows[0][2] >= 1 << 20


def test_duration_ends_the_run_and_metadata_names_the_node(net, tmp_path):
    rec = Recorder(tmp_path, "--netns", net.a, duration="2s")
    assert rec.proc.wait(timeout=30) == 0
    rec.stop()
    assert "duration reached" in rec.stderr
    meta = dict(duckdb.sql(f"SELECT decode(key), decode(value) FROM parquet_kv_metadata('{tmp_path}/flows/*.parquet')").fetchall())
    assert meta["scaletrace.host"] == socket.gethostname()
    assert int(meta["scaletrace.clock.error_ns"]) >= 0
    assert meta["scaletrace.boot_id"] == open("/proc/sys/kernel/random/boot_id").read().strip()


def test_full_ring_buffer_is_counted_and_loses_no_flow(net, tmp_path):
    # A 4 KiB ring, an RTT event per ACK, and the recorder frozen while the flows run and close:
    # the ring overflows for certain.
    rec = Recorder(tmp_path, "--netns", net.a, "--ring-buffer-kib", "4", rtt_interval="0s")
    rec.proc.send_signal(signal.SIGSTOP)
    try:
        for port in range(5211, 5216):
            transfer(net, port, 2 * MB)
    finally:
        rec.proc.send_signal(signal.SIGCONT)
    assert rec.stop() == 0, rec.stderr
    drops, drops_rtt, drops_end, rtt_rows = rec.query(
        "SELECT ring_drops, ring_drops_rtt, ring_drops_flow_end, rtt_samples FROM capture")[0]
    assert drops_rtt > 0 and drops_end > 0, (drops_rtt, drops_end)
    assert rtt_rows == rec.query("SELECT count(*) FROM rtt")[0][0]
    # Flow-end records that did not fit were recovered from the kernel's table of unsent ends.
    ports = sorted(r[0] for r in rec.query("SELECT remote_port FROM flows WHERE NOT open_at_end"))
    assert ports == list(range(5211, 5216)), ports
    assert f"{drops} events lost to a full ring buffer" in rec.stderr


HOLDER = """
import resource, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
host, port, held, short = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if sys.argv[5] == 'serve':
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(4096); print('ready', flush=True)
    conns = []
    s.settimeout(60)
    while len(conns) < held + short:
        c, _ = s.accept(); conns.append(c)
    time.sleep(3)
    sys.exit(0)
open_ = []
for _ in range(held):
    c = socket.create_connection((host, port)); c.sendall(b'x'); open_.append(c)
# while every slot of the table is taken: short connections
for _ in range(short):
    c = socket.create_connection((host, port)); c.sendall(b'y'); c.close()
time.sleep(1)
for c in open_:
    c.close()
print('done', flush=True)
"""


def test_a_full_flow_table_counts_each_untracked_connection_once_and_says_so(net, tmp_path):
    """70,000 connections against a 65,536-flow table lost 6,464 flows silently before (counted
    twice in capture, 8,520 warnings on stderr, nothing in the summary). Scaled down with
    --max-flows: every connection is either a flow or counted once as untracked."""
    held, short, limit, port = 1100, 60, 1024, 5331
    rec = Recorder(tmp_path, "--netns", net.a, "--port", str(port), "--max-flows", str(limit), rtt_interval="0s")
    server = subprocess.Popen(["ip", "netns", "exec", net.b, sys.executable, "-c", HOLDER, net.b_ip, str(port),
                               str(held), str(short), "serve"], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "ready"
    client = net.run(net.a, sys.executable, "-c", HOLDER, net.b_ip, str(port), str(held), str(short), "client",
                     timeout=120)
    assert client.stdout.strip() == "done", client.stderr
    server.wait(timeout=60)
    assert rec.stop() == 0, rec.stderr
    flows = rec.query(f"SELECT count(*) FROM flows WHERE remote_port = {port} AND tracked")[0][0]
    untracked = rec.query("SELECT flows_untracked_map_full FROM capture")[0][0]
    assert flows == limit, flows
    assert flows + untracked == held + short, (flows, untracked)
    # ... and each untracked one still has its totals from its close: the byte it sent, counted
    # as the kernel counts it for every flow (bytes_acked includes the SYN and the FIN)
    sent_by_tracked = rec.query(f"SELECT DISTINCT bytes_sent FROM flows WHERE remote_port = {port} AND tracked")
    assert sent_by_tracked == [(3,)], sent_by_tracked
    totals = rec.query(f"""SELECT count(*), min(bytes_sent), max(bytes_sent), max(rtt_updates), max(duration_ns)
                           FROM flows WHERE remote_port = {port} AND NOT tracked""")[0]
    assert totals == (untracked, 3, 3, 0, 0), totals
    warnings = [l for l in rec.stderr.splitlines() if "flow table is full" in l]
    assert len(warnings) == 1 and "--max-flows" in warnings[0], rec.stderr
    assert f"{untracked} connections not tracked" in rec.stderr.strip().splitlines()[-1], rec.stderr
    assert len(rec.stderr.splitlines()) < 20, "a line per lost flow"


def test_ipv6_flow(net, tmp_path):
    a6, b6 = net.add_ipv6()
    rec = Recorder(tmp_path, "--netns", net.a, "--cidr", "fd00:5c::/64")
    server = Server(net, 5220, bind=b6)
    client = subprocess.run(["ip", "netns", "exec", net.a, sys.executable, "-c",
                             "import socket,sys; c=socket.create_connection((sys.argv[1],5220)); c.sendall(b'x'*(1<<20)); c.close()", b6],
                            capture_output=True, text=True, timeout=60)
    assert client.returncode == 0, client.stderr
    assert server.received() == [1 << 20]
    assert rec.stop() == 0, rec.stderr
    rows = rec.query("SELECT family, local_addr, remote_addr, bytes_sent, rtt_updates FROM flows WHERE remote_port = 5220")
    assert len(rows) == 1, rows
    family, local, remote, sent, rtt_updates = rows[0]
    assert (family, local, remote) == ("ipv6", a6, b6)
    assert sent >= 1 << 20 and rtt_updates > 0
    states = rec.query("SELECT count(*) FROM state_changes WHERE remote_port = 5220 AND flow_id IS NOT NULL")
    assert states[0][0] >= 2  # the tracepoints matched the IPv6 tuple of the sock_ops flow


# A loopback connection with fixed ports on both ends: the same tuple in every namespace that
# runs it. Connects, sends, then closes both ends when told.
LOOPBACK_PAIR = """
import socket, sys
srv = socket.create_server(("127.0.0.1", 7311))
c = socket.socket()
c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
c.bind(("127.0.0.1", 7312))
c.connect(("127.0.0.1", 7311))
a, _ = srv.accept()
c.sendall(b"x" * 1000)
a.recv(1000)
print("connected", flush=True)
sys.stdin.readline()
c.close()
a.close()
print("closed", flush=True)
sys.stdin.readline()
"""


def test_flows_that_share_a_tuple_in_two_namespaces_keep_their_own_state_changes(tmp_path):
    """Two pods' loopback connections have the same tuple. The tracepoints find flows by tuple
    and by the namespace of their socket: keyed by tuple alone, the second flow overwrote the
    first's entry, the first's close was recorded under the second's flow id, and its close
    removed the entry the second still used."""
    tag = uuid.uuid4().hex[:6]
    namespaces = [f"st-dup{i}-{tag}" for i in (1, 2)]
    pairs = []
    try:
        for ns in namespaces:
            subprocess.run(["ip", "netns", "add", ns], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        rec = Recorder(tmp_path, "--port", "7311")
        for ns in namespaces:
            p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", LOOPBACK_PAIR],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            pairs.append(p)
            assert p.stdout.readline().strip() == "connected"
        for p in pairs:  # the first closes first, then the second
            p.stdin.write("\n")
            p.stdin.flush()
            assert p.stdout.readline().strip() == "closed"
            time.sleep(0.3)
        assert rec.stop() == 0, rec.stderr
        clients = dict(rec.query("SELECT netns, flow_id FROM flows WHERE local_port = 7312"))
        assert set(clients) == set(namespaces), clients
        # each client's establishment and close are its own (found by tuple and namespace)
        for old in ("SYN_SENT", "ESTABLISHED"):
            rows = rec.query(f"SELECT flow_id FROM state_changes WHERE local_port = 7312 "
                             f"AND old_state = '{old}' ORDER BY ts")
            assert rows == [(clients[ns],) for ns in namespaces], (old, rows, clients)
    finally:
        for p in pairs:
            p.kill()
            p.wait()
        for ns in namespaces:
            subprocess.run(["ip", "netns", "del", ns], check=False)
