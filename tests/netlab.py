"""Test hosts for scaletrace: network namespaces joined by veth, with traffic, loss and rate
limits, and a recorder wrapper. Everything created here is removed by the fixtures."""
import contextlib
import glob
import itertools
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import duckdb

HERE = os.path.dirname(os.path.abspath(__file__))
_subnet = itertools.count(10)


def sh(*args, check=True, **kw):
    return subprocess.run(args, check=check, capture_output=True, text=True, **kw)


def voluntary_switches(pid):
    """How often any thread of `pid` went to sleep and was woken: for a loader that sleeps
    until the ring buffer has data, its wakeups."""
    total = 0
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            total += next(int(l.split()[1]) for l in open(status) if l.startswith("voluntary_ctxt_switches"))
        except (OSError, StopIteration):
            pass  # a thread that ended meanwhile
    return total


def cgroup2_mount():
    return next(line.split()[1] for line in open("/proc/self/mounts") if line.split()[2] == "cgroup2")


@contextlib.contextmanager
def job_cgroups(*relative):
    """Cgroup v2 directories `relative` below a top cgroup made for the caller
    (`scaletrace-test-<tag>` under the cgroup2 mount), yielded as (the mount, [absolute paths]);
    removed afterwards, with any process still in them killed first."""
    root = cgroup2_mount()
    top = os.path.join(root, f"scaletrace-test-{uuid.uuid4().hex[:8]}")
    dirs = [os.path.join(top, r) for r in relative]
    for d in dirs:
        os.makedirs(d)
    try:
        yield root, dirs
    finally:
        # a process a failed test left behind would keep its cgroup busy
        for here, _, _ in os.walk(top, topdown=False):
            for pid in open(os.path.join(here, "cgroup.procs")).read().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for here, _, _ in os.walk(top, topdown=False):
            for _ in range(50):
                try:
                    os.rmdir(here)
                    break
                except OSError:
                    time.sleep(0.1)  # a killed process leaves its cgroup a moment later
            else:
                os.rmdir(here)  # still busy: say so


class NetPair:
    """Two namespaces, `a` (client, 10.201.N.1) and `b` (server, 10.201.N.2), on one veth link."""

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        n = next(_subnet)
        self.a, self.b = f"st-a-{tag}", f"st-b-{tag}"
        self.a_ip, self.b_ip = f"10.201.{n}.1", f"10.201.{n}.2"
        self.veth_a, self.veth_b = f"sta{tag}", f"stb{tag}"
        sh("ip", "netns", "add", self.a)
        sh("ip", "netns", "add", self.b)
        sh("ip", "link", "add", self.veth_a, "netns", self.a, "type", "veth", "peer", "name", self.veth_b, "netns", self.b)
        for ns, dev, ip in ((self.a, self.veth_a, self.a_ip), (self.b, self.veth_b, self.b_ip)):
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def run(self, ns, *args, **kw):
        return sh("ip", "netns", "exec", ns, *args, **kw)

    def add_ipv6(self):
        """Adds fd00:5c::1 (a) and fd00:5c::2 (b) without duplicate address detection."""
        for ns, dev, ip in ((self.a, self.veth_a, "fd00:5c::1"), (self.b, self.veth_b, "fd00:5c::2")):
            sh("ip", "-n", ns, "-6", "addr", "add", f"{ip}/64", "dev", dev, "nodad")
        return "fd00:5c::1", "fd00:5c::2"

    def no_spurious_retransmits(self):
        """Disables tail loss probes in the client namespace (a per-namespace sysctl): on a small,
        busy CI machine the receiver can stall for over 10 ms, and TLP then retransmits data that
        was never lost. A test that asserts zero retransmits without loss must rule that out."""
        self.run(self.a, "sysctl", "-qw", "net.ipv4.tcp_early_retrans=0")

    def drop_incoming(self, port, probability):
        """Random loss of segments arriving at the server port (data direction)."""
        self.run(self.b, "iptables", "-A", "INPUT", "-p", "tcp", "--dport", str(port),
                 "-m", "statistic", "--mode", "random", "--probability", str(probability), "-j", "DROP")

    def rate_limit_client(self, rate="20mbit", latency="300ms"):
        """Token bucket on the client's egress: the queue it builds inflates RTT."""
        self.run(self.a, "tc", "qdisc", "add", "dev", self.veth_a, "root", "tbf",
                 "rate", rate, "burst", "32kbit", "latency", latency)

    def reorder_client(self, port, every=16, rate="1mbit"):
        """Holds every `every`-th segment to `port` back in a slow queue (an HTB class of
        `rate` on the client's egress), so it arrives after later ones: reordering without loss
        and without netem. How much reordering that makes depends on timing: on how fast the
        sender bursts packets (not its average rate), and on how many segments each packet
        carries (the `nth` match counts packets, and veth passes large GSO packets). Measured,
        not modelled: under the VM lab's emulation a 4 Mbit/s class gave no reordering at all
        (`reord_seen` 0) in one run of 8, a 1 Mbit/s class some in 8 of 8. The sender takes some of the late segments for lost and resends
        them, and the receiver reports each duplicate with a DSACK. RACK's reordering window is
        kept static (tcp_recovery 0x3, a per-namespace sysctl): left adaptive, the kernel learns
        the reordering within a few segments and some runs resend nothing."""
        dev = self.veth_a
        self.run(self.a, "sysctl", "-qw", "net.ipv4.tcp_recovery=3", "net.ipv4.tcp_max_reordering=3")
        self.run(self.a, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
        self.run(self.a, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit")
        self.run(self.a, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb",
                 "rate", rate, "ceil", rate)
        self.run(self.a, "iptables", "-t", "mangle", "-A", "POSTROUTING", "-p", "tcp", "--dport", str(port),
                 "-m", "statistic", "--mode", "nth", "--every", str(every), "--packet", "0",
                 "-j", "CLASSIFY", "--set-class", "1:20")

    def client_egress_backlog(self):
        """Packets still queued on the client's egress (all qdisc classes), from `tc -s`."""
        out = self.run(self.a, "tc", "-s", "qdisc", "show", "dev", self.veth_a).stdout
        return sum(int(n) for n in re.findall(r"backlog \S+ (\d+)p", out))

    def close(self):
        for ns in (self.a, self.b):
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            sh("ip", "netns", "del", ns, check=False)


class RootLink:
    """A veth from the root namespace (where `record` reads /sys/class/net) to a test host in
    namespace `b` (10.202.N.2), so the root side's interface counters see the traffic."""

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        n = next(_subnet)
        self.b = f"st-r-{tag}"
        self.root_dev, self.peer_dev = f"str{tag}", f"stp{tag}"
        self.root_ip, self.b_ip = f"10.202.{n}.1", f"10.202.{n}.2"
        self.cidr = f"10.202.{n}.0/24"
        sh("ip", "netns", "add", self.b)
        sh("ip", "link", "add", self.root_dev, "type", "veth", "peer", "name", self.peer_dev, "netns", self.b)
        sh("ip", "addr", "add", f"{self.root_ip}/24", "dev", self.root_dev)
        sh("ip", "link", "set", self.root_dev, "up")
        sh("ip", "-n", self.b, "addr", "add", f"{self.b_ip}/24", "dev", self.peer_dev)
        sh("ip", "-n", self.b, "link", "set", self.peer_dev, "up")
        sh("ip", "-n", self.b, "link", "set", "lo", "up")

    def close(self):
        sh("ip", "link", "del", self.root_dev, check=False)
        for pid in sh("ip", "netns", "pids", self.b, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        sh("ip", "netns", "del", self.b, check=False)


SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
    print('ready', flush=True)
    for _ in range(int(sys.argv[3])):
        c, _ = s.accept(); got = 0
        while True:
            d = c.recv(1 << 16)
            if not d: break
            got += len(d)
        c.close(); print(got, flush=True)
""")

CLIENT = textwrap.dedent("""
    import socket, sys, time
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    total, hold = int(sys.argv[3]), float(sys.argv[4])
    chunk = b'x' * (1 << 16); sent = 0
    while sent < total:
        n = c.send(chunk[:min(len(chunk), total - sent)]); sent += n
    print(c.getsockname()[1], flush=True)
    time.sleep(hold)
    c.close()
""")


class Server:
    def __init__(self, net, port, connections=1, bind=None):
        self.proc = subprocess.Popen(["ip", "netns", "exec", net.b, "taskset", "-c", "0", sys.executable, "-c", SERVER, bind or net.b_ip, str(port), str(connections)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def received(self, timeout=120):
        out, _ = self.proc.communicate(timeout=timeout)
        return [int(x) for x in out.split()]


def transfer(net, port, nbytes, hold=0.0, timeout=180, cgroup=None):
    """Sends nbytes from a to b; returns (client local port, bytes the server received).

    Client and server are pinned to one CPU: veth hands each packet to the backlog of the CPU
    that sent it, and TCP sends both from the process and from ACK processing on whichever CPU
    the ACK landed, so on several CPUs a flow reorders its own segments, and the reordering
    triggers (spurious, DSACK-undone) fast retransmits that no loss caused. With `cgroup`, the
    client runs in that cgroup v2 directory."""
    server = Server(net, port)
    # In `cgroup` (a cgroup v2 directory), when given: the client moves itself there before it
    # enters the namespace (`ip netns exec` mounts a sysfs of its own, without the cgroup tree).
    enter = ("sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup) if cgroup else ()
    client = sh(*enter, "ip", "netns", "exec", net.a, "taskset", "-c", "0", sys.executable, "-c", CLIENT, net.b_ip,
                str(port), str(nbytes), str(hold), timeout=timeout)
    local_port = int(client.stdout.split()[0])
    return local_port, server.received(timeout)[0]


class SyscallStorm:
    """bench/syscall_storm.c: getppid() from a tight loop at `rate` calls/s (0: as fast as it
    can) for `seconds`, the synthetic kernel event source (a recorder given its pid with
    --bench-source-pid turns each call into an RTT sample). Started here, it prints its pid and
    waits: `run()` lets it go and returns (calls made, ns per call, seconds it ran)."""

    @staticmethod
    def build(directory):
        exe = os.path.join(str(directory), "syscall_storm")
        sh("gcc", "-O2", "-o", exe, os.path.join(HERE, "..", "bench", "syscall_storm.c"))
        return exe

    def __init__(self, exe, rate, seconds):
        self.seconds = seconds
        self.proc = subprocess.Popen([exe, str(rate), str(seconds)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.pid = int(self.proc.stdout.readline())

    def run(self):
        try:
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
            calls, ns_per_call, elapsed = self.proc.communicate(timeout=self.seconds + 60)[0].split()
            return int(calls), float(ns_per_call), float(elapsed)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


class Recorder:
    """Runs `scaletrace record` and waits until its hooks are attached."""

    def __init__(self, out_dir, *extra, duration=None, prefix=(), rtt_interval="1ms"):
        self.out = str(out_dir)
        args = [*prefix, os.environ.get("SCALETRACE_BIN", os.path.join(HERE, "..", "target", "release", "scaletrace")),
                "record", "--out", self.out, "--rtt-sample-interval", rtt_interval, *extra]
        if duration:
            args += ["--duration", duration]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            if "recording to" in line:
                return
        self.proc.kill()
        raise AssertionError("recorder did not start:\n" + "".join(self.log) + self.proc.stderr.read())

    def stop(self, sig=signal.SIGINT, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rest = self.proc.communicate(timeout=timeout)[1]
        self.log.append(rest)
        return self.proc.returncode

    @property
    def stderr(self):
        return "".join(self.log)

    def query(self, sql):
        """Runs SQL with the tables available as views of the written Parquet."""
        con = duckdb.connect()
        for table in ("flows", "rtt", "flow_windows", "retransmits", "state_changes", "capture"):
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{self.out}/{table}/*.parquet')")
        return con.execute(sql).fetchall()
