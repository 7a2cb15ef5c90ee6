"""The diagnosis lab: a real PyTorch DDP job (tests/ddp_train.py, gloo on CPU) on N "nodes",
each a network namespace with its own hostname, cabled to one "switch" namespace; one
`scaletrace record` per node writing one fleet tree; planted faults on one node's link or rank.

    with DDPLab(nodes=4) as lab:
        lab.loss(2, 0.02)                       # or lab.rate_limit(1, "100mbit")
        run = lab.run_job("/tmp/run1", steps=80, hidden=512)   # or slow_rank=3, slow_ms=40
        run.findings, run.step_times(), run.truth

The switch. A Linux bridge in the switch namespace, one veth per node (`eth0` in the node,
`p<K>` on the bridge). Faults are applied in the switch, as a faulty cable, optic or switch
port would: with br_netfilter (present when /proc/sys/net/bridge exists; its sysctls are per
namespace since Linux 5.3) iptables' FORWARD chain sees bridged IPv4 and `-m physdev` matches the
bridge port. Without br_netfilter (a kernel without the module, which cannot be loaded here) the
switch is routed instead: each node gets its own /30 to the switch, which forwards, and the
rules match the routed interface (`-i`/`-o p<K>`). Both give the same wire-level faults.

Loss is dropped in the switch, never inside a node: a DROP in the node's own OUTPUT chain makes
the sender's send fail locally (the stack sees it and retries at once, no RTO, no wire loss),
which is not what a lossy link does. Direction `both` (default) drops each segment toward and
from the node with the given probability, as a bad cable or optic does; `to` / `from` drop only
one way. With `to`, the node's peers retransmit (their retransmits name the node as remote);
with `from`, the node itself retransmits.

Rate limits are token buckets (tc tbf): toward the node on the switch port's egress (a congested
or slow switch port: its queue inflates the RTT), from the node on the node's eth0 egress (a
link that negotiated a lower speed). Direction `both` (default) does both.

Frames: jumbo frames (MTU 9000, as on most training fabrics) and `gso_max_segs 1` on both ends
of every veth, so that each skb the switch sees is one wire frame. With the veth default (GSO),
TCP hands the stack 64 KB super-packets that cross the bridge whole: one iptables DROP would
then lose some 45 segments at once (a burst, not random loss), and tbf would meter bursts.

Slow rank: ddp_train.py's --slow-rank/--slow-ms (busy CPU before backward, like a slow data
loader).

2 cores, veth and reordering: veth hands a packet to the backlog of the CPU that sent it, so a
flow whose segments are sent from two CPUs can reorder them (see tests/netlab.py). Tail loss
probes then retransmit data that was never lost; they are disabled in every node namespace
(`net.ipv4.tcp_early_retrans=0`) so that a clean run has (close to) no retransmits.

Everything is removed by close() (also on failure; namespaces take their veths, bridge,
iptables rules, qdiscs and processes with them); namespaces left by a killed process (their
name carries its pid) are removed by the next lab.
"""
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "ddp_train.py")
PREFIX = "stdl"
_labs = itertools.count(1)


def scaletrace_bin():
    return os.environ.get("SCALETRACE_BIN", os.path.join(HERE, "..", "target", "release", "scaletrace"))


def sh(*args, check=True, **kw):
    proc = subprocess.run(args, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill_netns(ns):
    for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    sh("ip", "netns", "del", ns, check=False)


def sweep_stale():
    """Removes lab namespaces whose creating process is gone (a lab killed with SIGKILL)."""
    for line in sh("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(rf"{PREFIX}(\d+)x\d+-", name)
        if m and not _pid_alive(int(m.group(1))):
            _kill_netns(name)


def rate_bytes(rate):
    """'100mbit' -> bytes per second (tc's units: bit, kbit, mbit, gbit; decimal)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not m:
        raise ValueError(f"rate {rate!r}: use e.g. 50mbit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def _names(text, host, ip):
    text = text or ""
    return bool(re.search(rf"\b{re.escape(host)}\b", text) or re.search(rf"(?<![\d.]){re.escape(ip)}(?![\d])", text))


def names_planted(finding, planted):
    """Whether an `analyze --json` finding names the planted problem: for loss and rate limits its
    `host` is the node or its `subject` names the node's hostname or IP; for a slow rank its `rank`
    is the planted rank (a finding without a rank: its `host` is the rank's node)."""
    if finding is None:
        return False
    if planted["kind"] == "slow_rank":
        if finding.get("rank") is not None:
            return finding.get("rank") == planted["rank"]
        return finding.get("host") == planted["host"]
    return finding.get("host") == planted["host"] or _names(finding.get("subject"), planted["host"], planted["ip"])


class DDPLab:
    def __init__(self, nodes=4, ranks_per_node=1, mode="auto", mtu=9000, wire_frames=True, rps=True):
        if nodes < 2:
            raise ValueError("at least 2 nodes")
        sweep_stale()
        self.nodes, self.ranks_per_node = nodes, ranks_per_node
        self.world_size = nodes * ranks_per_node
        if mode == "auto":
            mode = "bridge" if os.path.isdir("/proc/sys/net/bridge") else "routed"
        self.mode, self.mtu, self.wire_frames, self.rps = mode, mtu, wire_frames, rps
        self.index = next(_labs)
        subnet = 10 + (os.getpid() * 7 + self.index) % 240  # 10.203.<subnet>.x; namespaces isolate anyway
        self.tag = f"{PREFIX}{os.getpid()}x{self.index}"
        self.cidr = f"10.203.{subnet}.0/24"
        self.switch = f"{self.tag}-sw"
        self.namespaces = [self.switch] + [f"{self.tag}-n{k}" for k in range(nodes)]
        self.faults = []
        self._procs = []
        if mode == "bridge":
            self.ips = [f"10.203.{subnet}.{k + 1}" for k in range(nodes)]
        else:
            self.ips = [f"10.203.{subnet}.{4 * k + 2}" for k in range(nodes)]
        try:
            self._build(subnet)
        except BaseException:
            self.close()
            raise

    # --- topology -------------------------------------------------------------------------
    def ns(self, k):
        return f"{self.tag}-n{k}"

    def hostname(self, k):
        return f"node{k}"

    def port(self, k):
        return f"p{k}"

    def node_of_rank(self, rank):
        return rank // self.ranks_per_node

    def _build(self, subnet):
        for ns in self.namespaces:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sw = self.switch
        if self.mode == "bridge":
            sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0")
            sh("ip", "-n", sw, "link", "set", "br0", "up")
            # per-namespace br_netfilter sysctl: bridged IPv4 goes through iptables FORWARD
            sh("ip", "netns", "exec", sw, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
        else:
            sh("ip", "netns", "exec", sw, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        for k in range(self.nodes):
            ns, port = self.ns(k), self.port(k)
            sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", sw)
            if self.mode == "bridge":
                sh("ip", "-n", sw, "link", "set", port, "master", "br0")
                sh("ip", "-n", ns, "addr", "add", f"{self.ips[k]}/24", "dev", "eth0")
            else:
                gw = f"10.203.{subnet}.{4 * k + 1}"
                sh("ip", "-n", sw, "addr", "add", f"{gw}/30", "dev", port)
                sh("ip", "-n", ns, "addr", "add", f"{self.ips[k]}/30", "dev", "eth0")
            for netns, dev in ((sw, port), (ns, "eth0")):
                frames = ["gso_max_segs", "1"] if self.wire_frames else []
                sh("ip", "-n", netns, "link", "set", "dev", dev, "mtu", str(self.mtu), *frames)
                sh("ip", "-n", netns, "link", "set", "dev", dev, "up")
            if self.mode == "routed":
                sh("ip", "-n", ns, "route", "add", f"10.203.{subnet}.0/24", "via", f"10.203.{subnet}.{4 * k + 1}")
            # tail loss probes fire on stalls of a busy 2-core machine
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_early_retrans=0")
            if self.rps:
                self._steer(ns, "eth0")
                self._steer(sw, port)
        # every node reaches every other one (ARP, bridge learning) before anything is measured
        for k in range(1, self.nodes):
            self._wait_reachable(0, k)

    def _steer(self, ns, dev):
        """RPS on a veth end: every packet it receives goes to the backlog of the CPU its flow
        hashes to, in the order it was sent. Without it, veth queues each packet on the backlog
        of the CPU that sent it, and a TCP sender transmits both from its process and from ACK
        processing on the other CPU: the two backlogs drain in parallel and the flow reorders,
        which RACK takes for loss (spurious retransmits on a clean run)."""
        mask = format((1 << (os.cpu_count() or 1)) - 1, "x")
        sh("ip", "netns", "exec", ns, "sh", "-c", f"echo {mask} > /sys/class/net/{dev}/queues/rx-0/rps_cpus")

    def _wait_reachable(self, a, b, timeout=10):
        probe = ("import socket,sys\ns=socket.socket()\ns.settimeout(1)\n"
                 "try: s.connect((sys.argv[1], 9))\nexcept ConnectionRefusedError: sys.exit(0)\n"
                 "except OSError: sys.exit(1)\n")
        deadline = time.time() + timeout
        while time.time() < deadline:
            if sh("ip", "netns", "exec", self.ns(a), sys.executable, "-c", probe, self.ips[b], check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"node{a} cannot reach node{b} ({self.ips[b]})")

    # --- faults ---------------------------------------------------------------------------
    def _match(self, k, way):
        port = self.port(k)
        if self.mode == "bridge":
            return ["-m", "physdev", f"--physdev-{'out' if way == 'to' else 'in'}", port, "--physdev-is-bridged"]
        return ["-o" if way == "to" else "-i", port]

    def loss(self, node, probability, direction="both"):
        """Random loss of TCP segments on node's switch port (iptables statistic in the switch)."""
        ways = ("to", "from") if direction == "both" else (direction,)
        for way in ways:
            sh("ip", "netns", "exec", self.switch, "iptables", "-A", "FORWARD", "-p", "tcp", *self._match(node, way),
               "-m", "statistic", "--mode", "random", "--probability", f"{probability:.6f}", "-j", "DROP")
        self.faults.append({"kind": "loss", "node": node, "host": self.hostname(node), "ip": self.ips[node],
                            "probability": probability, "direction": direction})

    def dropped(self):
        """Packets the planted loss rules dropped so far."""
        out = sh("ip", "netns", "exec", self.switch, "iptables", "-L", "FORWARD", "-v", "-n", "-x", check=False).stdout
        return sum(int(line.split()[0]) for line in out.splitlines() if " DROP " in f" {line} " and line.split()[0].isdigit())

    def rate_limit(self, node, rate, direction="both", latency_ms=20):
        """Token bucket on node's link: toward it on the switch port, from it on its eth0."""
        bps = rate_bytes(rate)
        burst = max(16 * 1514, int(bps / 250))  # at least one timer tick's worth of tokens
        args = ["tbf", "rate", rate, "burst", str(burst), "latency", f"{latency_ms}ms"]
        if direction in ("both", "to"):
            sh("ip", "netns", "exec", self.switch, "tc", "qdisc", "add", "dev", self.port(node), "root", *args)
        if direction in ("both", "from"):
            sh("ip", "netns", "exec", self.ns(node), "tc", "qdisc", "add", "dev", "eth0", "root", *args)
        self.faults.append({"kind": "rate_limit", "node": node, "host": self.hostname(node), "ip": self.ips[node],
                            "rate": rate, "direction": direction, "latency_ms": latency_ms})

    def delay(self, node, delay_ms, jitter_ms=0.0, direction="both"):
        """Added latency (and jitter, normally distributed) on node's link with netem: toward it
        on the switch port, from it on its eth0. Needs a kernel with sch_netem (the VM lab's)."""
        args = ["netem", "delay", f"{delay_ms}ms"]
        if jitter_ms:
            args += [f"{jitter_ms}ms", "distribution", "normal"]
        if direction in ("both", "to"):
            sh("ip", "netns", "exec", self.switch, "tc", "qdisc", "add", "dev", self.port(node), "root", *args)
        if direction in ("both", "from"):
            sh("ip", "netns", "exec", self.ns(node), "tc", "qdisc", "add", "dev", "eth0", "root", *args)
        self.faults.append({"kind": "delay", "node": node, "host": self.hostname(node), "ip": self.ips[node],
                            "delay_ms": delay_ms, "jitter_ms": jitter_ms, "direction": direction})

    def reorder(self, node, every=16, rate="50mbit", direction="both"):
        """Reordering on node's link, without netem: one frame in `every` (a power of two: the
        frames whose IP ID has its low bits at zero; TCP numbers a flow's segments in turn)
        waits in a slow queue (an HTB class of `rate`) while the others pass, so it arrives
        after later ones, as on a path that spreads one flow's packets over links of different
        delay. Senders take some late frames for lost and resend them, and the receivers report
        the duplicates (DSACK). Toward the node on the switch port, from it on its eth0."""
        assert every > 1 and every & (every - 1) == 0, every
        targets = []
        if direction in ("both", "to"):
            targets.append((self.switch, self.port(node)))
        if direction in ("both", "from"):
            targets.append((self.ns(node), "eth0"))
        for ns, dev in targets:
            tc = ["ip", "netns", "exec", ns, "tc"]
            sh(*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
            sh(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", "100gbit")
            sh(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", rate, "ceil", rate)
            sh(*tc, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
               "match", "u16", "0", hex(every - 1), "at", "4", "flowid", "1:20")
        self.faults.append({"kind": "reorder", "node": node, "host": self.hostname(node), "ip": self.ips[node],
                            "every": every, "rate": rate, "direction": direction})

    def clear_faults(self):
        sh("ip", "netns", "exec", self.switch, "iptables", "-F", "FORWARD", check=False)
        for k in range(self.nodes):
            sh("ip", "netns", "exec", self.switch, "tc", "qdisc", "del", "dev", self.port(k), "root", check=False)
            sh("ip", "netns", "exec", self.ns(k), "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        self.faults = []

    # --- processes ------------------------------------------------------------------------
    def in_node(self, k, argv):
        """argv run in node k's namespace under node k's own hostname (a UTS namespace)."""
        return ["ip", "netns", "exec", self.ns(k), "unshare", "--uts", "sh", "-c",
                f'hostname {self.hostname(k)} && exec "$@"', "sh", *argv]

    def popen(self, argv, **kw):
        proc = subprocess.Popen(argv, start_new_session=True, **kw)
        self._procs.append(proc)
        return proc

    def run_job(self, run_dir, steps=60, hidden=512, layers=4, batch=32, bucket_cap_mb=1.0, slow_rank=None,
                slow_ms=0.0, slow_mode="busy", fault_from_step=0, plant=None, record=True, analyze=True,
                timeout=600, log=print, recorder="node"):
        """Runs one job. A fault starts at step `fault_from_step` (0: before the job): the slow
        rank's extra work, and `plant(lab)` (e.g. `lambda lab: lab.loss(2, 0.02)`) called as that
        step starts on rank 0, so the steps before it are the run's own healthy baseline.
        `recorder`: "node" runs one recorder per node namespace under its hostname (a cluster);
        "root" one recorder in the machine's own namespace for all of them (one machine whose
        pods or containers each have their own namespace), writing `fleet/machine`."""
        return Run(self, run_dir, dict(steps=steps, hidden=hidden, layers=layers, batch=batch,
                                       bucket_cap_mb=bucket_cap_mb, slow_rank=slow_rank, slow_ms=slow_ms,
                                       slow_mode=slow_mode, fault_from_step=fault_from_step),
                   record, analyze, timeout, log, plant, recorder)

    def close(self):
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        for ns in reversed(self.namespaces):
            _kill_netns(ns)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Recorder:
    """`scaletrace record` inside one node's namespace, under its hostname."""

    def __init__(self, lab, k, out, log_path):
        """k: the node, or None for one recorder in the machine's own namespace that sees every
        node's sockets (filtered to the lab's addresses)."""
        self.out, self.lines = out, []
        common = ["--no-gpu", "--out", out, "--rtt-sample-interval", "10ms"]
        if k is None:
            argv = [scaletrace_bin(), "record", "--cidr", lab.cidr, *common]
        else:
            argv = lab.in_node(k, [scaletrace_bin(), "record", "--netns", lab.ns(k), *common])
        self.log = open(log_path, "w")
        self.proc = lab.popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.started = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            self.log.write(line)
            self.log.flush()
            if "recording to" in line:
                self.started.set()
        self.started.set()

    def wait_started(self, timeout=90):
        self.started.wait(timeout)
        if self.proc.poll() is not None or not any("recording to" in line for line in self.lines):
            raise RuntimeError("recorder did not start:\n" + "".join(self.lines[-20:]))

    def stop(self, timeout=120):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout)
        finally:
            self.reader.join(5)
            self.log.close()
        return self.proc.returncode


class Run:
    """One job on the lab: recorders, ranks, imports, analyze; its ground truth and results."""

    def __init__(self, lab, run_dir, job, record, analyze, timeout, log, plant=None, recorder="node"):
        self.lab, self.dir, self.job = lab, os.path.abspath(run_dir), job
        self.fault_flag = os.path.join(self.dir, "fault-now")
        # when the lab began and when it had finished planting a fault from outside: it takes
        # effect piece by piece in between (one node's tc or iptables command after another)
        self.fault_planting_ns = self.fault_planted_ns = None
        self._plant = plant
        if plant and job["fault_from_step"] == 0:
            plant(lab)
            self._plant = None
            self.fault_planting_ns = self.fault_planted_ns = 0
        self.fleet = os.path.join(self.dir, "fleet")
        self.kineto = os.path.join(self.dir, "kineto")
        self.truth_dir = os.path.join(self.dir, "truth")
        self.logs = os.path.join(self.dir, "logs")
        for d in (self.fleet, self.kineto, self.truth_dir, self.logs):
            os.makedirs(d, exist_ok=True)
        if os.path.exists(self.fault_flag):
            os.unlink(self.fault_flag)
        self._faults_before = len(lab.faults)
        self.faults = list(lab.faults)
        if job["slow_rank"] is not None:
            r = job["slow_rank"]
            self.faults.append({"kind": "slow_rank", "rank": r, "node": lab.node_of_rank(r),
                                "host": lab.hostname(lab.node_of_rank(r)), "ms": job["slow_ms"], "mode": job["slow_mode"]})
        self.timings = {}
        self.findings, self.analyze_output = None, ""
        t0 = time.time()
        recorders = []
        try:
            if record:
                if recorder == "root":
                    recorders.append(Recorder(lab, None, os.path.join(self.fleet, "machine"),
                                              os.path.join(self.logs, "record-machine.log")))
                for k in range(lab.nodes) if recorder == "node" else ():
                    recorders.append(Recorder(lab, k, os.path.join(self.fleet, lab.hostname(k)),
                                              os.path.join(self.logs, f"record-node{k}.log")))
                for rec in recorders:
                    rec.wait_started()
                log(f"ddplab: {len(recorders)} recorders started")
            self.timings["recorders_start_s"] = time.time() - t0
            t1 = time.time()
            log(f"ddplab: training {lab.world_size} ranks on {lab.nodes} nodes, faults {self.faults or 'none'}")
            self._train(timeout)
            self.timings["job_s"] = time.time() - t1
            # faults planted mid-run join the list, with the step they started at
            self.faults += lab.faults[self._faults_before:]
            for f in self.faults:
                f["from_step"] = job["fault_from_step"]
            log(f"ddplab: job done in {self.timings['job_s']:.0f} s")
        finally:
            codes = [rec.stop() for rec in recorders]
        self.dropped = lab.dropped()
        if any(codes):
            raise RuntimeError(f"recorders exited {codes}; logs in {self.logs}")
        t2 = time.time()
        self.truth = [self._read_truth(r) for r in range(lab.world_size)]
        if record:
            for r, t in enumerate(self.truth):
                k = lab.node_of_rank(r)
                sh(scaletrace_bin(), "import", t["trace"], "--host", lab.hostname(k), "--rank", str(r),
                   "--out", os.path.join(self.fleet, lab.hostname(k)), timeout=300)
        self.timings["import_s"] = time.time() - t2
        if record and analyze:
            t3 = time.time()
            out = os.path.join(self.dir, "findings.json")
            proc = sh(scaletrace_bin(), "analyze", self.fleet, "--json", out, "--report",
                      os.path.join(self.dir, "report.html"), check=False, timeout=600)
            self.analyze_output = proc.stdout  # the findings as printed (warnings: analyze.txt)
            with open(os.path.join(self.dir, "analyze.txt"), "w") as f:
                f.write(proc.stderr + proc.stdout)
            if proc.returncode != 0:
                raise RuntimeError(f"analyze failed: {proc.stderr.strip()[-2000:]}")
            with open(out) as f:
                self.findings = json.load(f)
            self.timings["analyze_s"] = time.time() - t3
        self.timings["total_s"] = time.time() - t0
        with open(os.path.join(self.dir, "run.json"), "w") as f:
            json.dump(self.summary(), f, indent=1)

    def _train(self, timeout):
        lab, job = self.lab, self.job
        procs = []
        for r in range(lab.world_size):
            k = lab.node_of_rank(r)
            argv = [sys.executable, TRAIN, "--rank", str(r), "--world-size", str(lab.world_size),
                    "--local-rank", str(r % lab.ranks_per_node), "--master-addr", lab.ips[0],
                    "--steps", str(job["steps"]), "--hidden", str(job["hidden"]), "--layers", str(job["layers"]),
                    "--batch", str(job["batch"]), "--bucket-cap-mb", str(job["bucket_cap_mb"]),
                    "--trace-dir", self.kineto, "--truth-dir", self.truth_dir]
            if job["slow_rank"] is not None:
                argv += ["--slow-rank", str(job["slow_rank"]), "--slow-ms", str(job["slow_ms"]),
                         "--slow-mode", job["slow_mode"]]
            argv += ["--fault-from-step", str(job["fault_from_step"]), "--fault-flag", self.fault_flag]
            env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
            out = open(os.path.join(self.logs, f"rank{r}.log"), "w")
            procs.append(lab.popen(lab.in_node(k, argv), stdout=out, stderr=subprocess.STDOUT, env=env))
            out.close()
        deadline = time.time() + timeout
        while True:
            if self._plant and os.path.exists(self.fault_flag):
                # rank 0 started the fault's first step: plant it now (the job does not wait)
                self.fault_planting_ns = time.time_ns()
                self._plant(lab)
                self._plant = None
                self.fault_planted_ns = time.time_ns()
            codes = [p.poll() for p in procs]
            if all(c == 0 for c in codes):
                return
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed or time.time() > deadline:
                for p in procs:
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
                r = failed[0] if failed else 0
                with open(os.path.join(self.logs, f"rank{r}.log")) as f:
                    tail = f.read()[-3000:]
                why = f"rank {r} exited {codes[r]}" if failed else f"timed out after {timeout}s"
                raise RuntimeError(f"training job failed: {why}:\n{tail}")
            time.sleep(0.005 if self._plant else 0.2)

    def _read_truth(self, r):
        with open(os.path.join(self.truth_dir, f"rank{r}.json")) as f:
            return json.load(f)

    # --- ground truth ----------------------------------------------------------------------
    def step_times(self, skip=3):
        """Per step (from `skip` on): the median over ranks of each rank's step duration, in s."""
        n = min(len(t["steps"]) for t in self.truth)
        return [statistics.median((t["steps"][i]["end_ns"] - t["steps"][i]["start_ns"]) / 1e9 for t in self.truth)
                for i in range(skip, n)]

    def median_step(self, skip=3):
        return statistics.median(self.step_times(skip))

    def time_lost(self, clean_median, skip=3):
        """Job time lost against a clean run's median step: sum over steps of (step - clean)."""
        return sum(s - clean_median for s in self.step_times(skip))

    def healthy_and_faulted(self, skip=3):
        """A fault that started mid-run splits the steps (from `skip` on): those before it, the
        run's own healthy baseline, and those from it on. None when it started before the job
        or too early to leave 5 healthy steps."""
        n = self.job["fault_from_step"]
        times = self.step_times(0)
        if n < skip + 5 or n >= len(times):
            return None
        return times[skip:n], times[n:]

    def time_lost_in_run(self, skip=3):
        """Job time lost against the same run's healthy steps: sum over the faulted steps of
        (step - median healthy step). Unlike a separate clean run, this baseline ran under the
        same machine load."""
        split = self.healthy_and_faulted(skip)
        if split is None:
            return None
        healthy, faulted = split
        base = statistics.median(healthy)
        return sum(s - base for s in faulted)

    def summary(self):
        return {"dir": self.dir, "nodes": self.lab.nodes, "ranks_per_node": self.lab.ranks_per_node,
                "world_size": self.lab.world_size, "mode": self.lab.mode, "ips": self.lab.ips,
                "hosts": [self.lab.hostname(k) for k in range(self.lab.nodes)], "job": self.job,
                "faults": self.faults, "dropped_packets": self.dropped, "timings": self.timings,
                "fault_planting_ns": self.fault_planting_ns, "fault_planted_ns": self.fault_planted_ns,
                "time_lost_in_run_s": self.time_lost_in_run(),
                "median_step_s": self.median_step(), "step_times_s": self.step_times(),
                "findings": self.findings}


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description="One run of the DDP diagnosis lab (root).")
    p.add_argument("--out", required=True)
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--ranks-per-node", type=int, default=1)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--loss", metavar="NODE:PROB[:DIR]")
    p.add_argument("--rate", metavar="NODE:RATE[:DIR]")
    p.add_argument("--delay", metavar="NODE:MS[:JITTER_MS]", help="netem delay on a node's link (needs sch_netem)")
    p.add_argument("--reorder", metavar="NODE:EVERY:RATE", help="hold one frame in EVERY back in a queue of RATE")
    p.add_argument("--slow", metavar="RANK:MS")
    p.add_argument("--from-step", type=int, default=0, help="the step the fault starts at (0: before the job)")
    p.add_argument("--no-record", action="store_true")
    a = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def plant(lab):
        if a.loss:
            node, prob, *d = a.loss.split(":")
            lab.loss(int(node), float(prob), *d)
        if a.rate:
            node, rate, *d = a.rate.split(":")
            lab.rate_limit(int(node), rate, *d)
        if a.delay:
            node, ms, *jitter = a.delay.split(":")
            lab.delay(int(node), float(ms), float(jitter[0]) if jitter else 0.0)
        if a.reorder:
            node, every, rate = a.reorder.split(":")
            lab.reorder(int(node), int(every), rate)

    with DDPLab(a.nodes, a.ranks_per_node) as lab:
        slow_rank, slow_ms = (int(a.slow.split(":")[0]), float(a.slow.split(":")[1])) if a.slow else (None, 0)
        run = lab.run_job(a.out, steps=a.steps, hidden=a.hidden, layers=a.layers, slow_rank=slow_rank,
                          slow_ms=slow_ms, fault_from_step=a.from_step, plant=plant, record=not a.no_record)
        s = run.summary()
        print(json.dumps({k: s[k] for k in ("faults", "dropped_packets", "timings", "median_step_s",
                                            "time_lost_in_run_s")}, indent=1))
        for f in (run.findings or [])[:5]:
            print(f.get("category"), f.get("scope"), f.get("host"), f.get("rank"), f.get("subject"), "|", f.get("summary"))


if __name__ == "__main__":
    main()
