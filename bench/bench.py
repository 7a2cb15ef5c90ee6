#!/usr/bin/env python3
"""`cargo xtask bench`: what scaletrace costs, measured against a baseline in the same run and
against bpftrace and bcc on the same workload. Writes docs/performance.md and
docs/performance.json. Run as root; it creates (and removes) its own network namespaces."""
import argparse
import glob
import json
import math
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from netlab import NetPair, Recorder, SyscallStorm, sh, voluntary_switches  # noqa: E402
import kernel_hooks  # noqa: E402

import duckdb  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def peak_rss_bytes(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def machine_cpu_seconds():
    """CPU seconds the whole machine spent in the kernel so far: system, irq and softirq (where
    the network stack, and every eBPF program on its path, run), from /proc/stat."""
    fields = open("/proc/stat").readline().split()
    # cpu user nice system idle iowait irq softirq steal ...
    return (int(fields[3]) + int(fields[6]) + int(fields[7])) / CLK_TCK


def median_interval(xs, level=0.95):
    """The median of `xs`, a distribution-free interval for it and the interval's coverage: the
    order statistics x(k) and x(n+1-k) with the largest k whose coverage, from the binomial
    distribution of how many values fall below the median, is at least `level` (n = 10:
    x(2)..x(9), 97.9 %; n = 12: x(3)..x(10), 96.1 %). Fewer than 6 values: no interval."""
    xs = sorted(xs)
    n = len(xs)
    below = lambda k: sum(math.comb(n, i) for i in range(k)) / 2 ** n  # P(Binom(n, 1/2) < k)
    k = max((k for k in range(1, n // 2 + 1) if 1 - 2 * below(k) >= level), default=None)
    if k is None:
        return statistics.median(xs), None, None, None
    return statistics.median(xs), xs[k - 1], xs[n - k], 1 - 2 * below(k)


def paired(runs, base):
    """Each run's value over the baseline run of the same repetition."""
    return [v / b for v, b in zip(runs, base) if b]


def verdict_at_least(lo, hi, target):
    """Met only when the whole interval is on the right side of the target."""
    if lo is None:
        return "not resolved: too few runs for an interval"
    if lo >= target:
        return "yes"
    if hi < target:
        return "no"
    return f"not resolved: the interval {lo:.3f}..{hi:.3f} straddles {target}"


def verdict_at_most(lo, hi, target):
    if lo is None:
        return "not resolved: too few runs for an interval"
    if hi <= target:
        return "yes"
    if lo > target:
        return "no"
    return f"not resolved: the interval {lo:.3f}..{hi:.3f} straddles {target}"


def against_baseline(tp, kind, runs_key):
    """Median ratio of `kind`'s runs to the same repetitions' baseline runs, its interval and
    the interval's coverage; None when the results lack those runs (an older performance.json)."""
    runs, base = tp.get(kind, {}).get(runs_key), tp.get("none", {}).get(runs_key)
    if not runs or not base:
        return None
    return median_interval(paired(runs, base))


def iperf(net, port, seconds, parallel, with_bytes=False):
    """Bulk TCP from a to b; returns received bits/s (and bytes, with `with_bytes`)."""
    server = subprocess.Popen(["ip", "netns", "exec", net.b, "iperf3", "-s", "-1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    try:
        out = net.run(net.a, "iperf3", "-c", net.b_ip, "-p", str(port), "-t", str(seconds), "-P", str(parallel), "-J",
                      timeout=seconds + 30).stdout
        received = json.loads(out)["end"]["sum_received"]
        return (received["bits_per_second"], received["bytes"]) if with_bytes else received["bits_per_second"]
    finally:
        server.kill()
        server.wait()


CHURN = """
import socket, sys
ip, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(n):
    c = socket.create_connection((ip, port)); c.sendall(b'x' * 1000); c.close()
"""

CHURN_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(128); print('ready', flush=True)
while True:
    c, _ = s.accept()
    while c.recv(65536): pass
    c.close()
"""


def churn(net, port, connections):
    server = subprocess.Popen(["ip", "netns", "exec", net.b, sys.executable, "-c", CHURN_SERVER, net.b_ip, str(port)],
                              stdout=subprocess.PIPE, text=True)
    server.stdout.readline()
    try:
        start = time.time()
        net.run(net.a, sys.executable, "-c", CHURN, net.b_ip, str(port), str(connections), timeout=300)
        return connections / (time.time() - start)
    finally:
        server.kill()
        server.wait()


class Tracer:
    """A tracer process over the workload, with its CPU time and events captured."""

    def __init__(self, kind, net, workdir, extra=()):
        self.kind, self.net, self.workdir = kind, net, workdir
        self.proc, self.rec, self.output = None, None, None
        os.makedirs(workdir, exist_ok=True)
        if kind == "scaletrace":
            # The recorder's defaults, except that GPU and NIC sampling have nothing to find here.
            self.rec = Recorder(workdir, "--netns", net.a, "--no-gpu", "--nic-interval", "0s", "--quiet", *extra,
                                rtt_interval="10ms")
            self.proc = self.rec.proc
        elif kind == "bpftrace":
            # The same kinds of data as scaletrace's defaults, the way a bpftrace user would get
            # them: per-flow RTT in kernel histograms (tcp_probe fires on every segment a socket
            # receives: more often than scaletrace's rate-limited samples), one line per
            # retransmit and per state change.
            script = ("tracepoint:tcp:tcp_probe { @srtt[args->sport, args->dport] = hist(args->srtt); } "
                      "tracepoint:tcp:tcp_retransmit_skb { printf(\"R %d %d\\n\", args->sport, args->dport); } "
                      "tracepoint:sock:inet_sock_set_state /args->protocol == 6/ "
                      "{ printf(\"S %d %d %d %d\\n\", args->sport, args->dport, args->oldstate, args->newstate); }")
            self.output = open(os.path.join(workdir, "bpftrace.out"), "w+")
            self.proc = subprocess.Popen(["bpftrace", "-e", script], stdout=self.output, stderr=subprocess.STDOUT)
            time.sleep(3)  # attach
        self.cpu0 = cpu_seconds(self.proc.pid) if self.proc else 0.0
        self.switches0 = voluntary_switches(self.proc.pid) if self.proc else 0
        self.started = time.time()

    def stop(self):
        if not self.proc:
            return {}
        cpu = cpu_seconds(self.proc.pid) - self.cpu0
        wakeups = (voluntary_switches(self.proc.pid) - self.switches0) / (time.time() - self.started)
        rss = peak_rss_bytes(self.proc.pid)
        if self.rec:
            assert self.rec.stop() == 0, self.rec.stderr
        else:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=30)
        return {"cpu_seconds": cpu, "peak_rss_bytes": rss, "wakeups_per_s": wakeups}

    def events(self):
        if self.rec:
            return self.rec.query("SELECT flows, rtt_samples, retransmits, state_changes, ring_drops FROM capture")[0]
        self.output.seek(0)
        lines = self.output.read().splitlines()
        return (None, None, sum(l.startswith("R ") for l in lines), sum(l.startswith("S ") for l in lines), None)


def bpf_program_stats(ours=("scaletrace_sock", "tcp_retransmit_", "tcp_retransmit", "inet_sock_set_s")):
    """run_time_ns and run_cnt of scaletrace's programs (kernel.bpf_stats_enabled must be 1)."""
    progs = json.loads(sh("bpftool", "prog", "show", "-j").stdout)
    out = {}
    for p in progs:
        name = p.get("name", "")
        if name.startswith(ours) and p.get("run_cnt"):
            # Names are cut to 15 characters; the id tells the two retransmit programs apart.
            out[f"{name}#{p['id']}"] = {"run_time_ns": p.get("run_time_ns", 0), "run_cnt": p.get("run_cnt", 0)}
    return out


def bpf_ns_per_run(before, after):
    """Mean eBPF time per program run between two `bpf_program_stats` readings."""
    ns = sum(v["run_time_ns"] - before.get(k, {}).get("run_time_ns", 0) for k, v in after.items())
    runs = sum(v["run_cnt"] - before.get(k, {}).get("run_cnt", 0) for k, v in after.items())
    return ns / max(runs, 1)


def build_storm(work):
    """The synthetic uprobe source: a stand-in libnccl and a program that calls it in a loop."""
    here = os.path.dirname(os.path.abspath(__file__))
    lib, exe = os.path.join(work, "libfakenccl.so"), os.path.join(work, "storm")
    sh("gcc", "-O2", "-shared", "-fPIC", "-o", lib, os.path.join(here, "fakenccl.c"))
    sh("gcc", "-O2", "-o", exe, os.path.join(here, "storm.c"), "-ldl")
    return lib, exe


def storm(exe, lib, rate, seconds):
    calls, ns_per_call, elapsed = sh(exe, lib, str(rate), str(seconds)).stdout.split()
    return int(calls), float(ns_per_call), float(elapsed)


def uprobe_steps(work, rates, seconds):
    """Events far beyond what TCP produces here: NCCL uprobes fired from a tight loop, one event
    per call, at increasing call rates (0 = as fast as possible), with the default and a small
    ring buffer. Finds where drops begin and what a traced call costs."""
    lib, exe = build_storm(work)
    _, base_ns, _ = storm(exe, lib, 0, seconds)
    sh("sysctl", "-qw", "kernel.bpf_stats_enabled=1")
    out = {"untraced_ns_per_call": base_ns, "steps": []}
    try:
        for ring_kib, rate in [(8192, r) for r in rates] + [(256, 0), (64, 0)]:
            d = os.path.join(work, f"storm-{ring_kib}-{rate}")
            rec = Recorder(d, "--nccl-lib", lib, "--no-gpu", "--nic-interval", "0s", "--quiet", "--port", "1",
                           "--ring-buffer-kib", str(ring_kib))
            before = {k: v for k, v in bpf_program_stats(("nccl_all_reduce",)).items()}
            calls, ns, elapsed = storm(exe, lib, rate, seconds)
            after = bpf_program_stats(("nccl_all_reduce",))
            cpu = cpu_seconds(rec.proc.pid)
            assert rec.stop() == 0, rec.stderr
            rows, drops = rec.query("SELECT nccl_calls, ring_drops_nccl FROM capture")[0]
            step = {"ring_kib": ring_kib, "target_calls_per_s": rate, "calls_per_s": calls / elapsed,
                    "events_per_s": rows / elapsed, "ring_drops": drops, "events_lost_share": drops / max(calls, 1),
                    "traced_ns_per_call": ns, "added_ns_per_call": ns - base_ns,
                    "bpf_ns_per_run": bpf_ns_per_run(before, after), "loader_cpu_seconds": cpu}
            out["steps"].append(step)
            print(f"uprobe step {step}", file=sys.stderr)
    finally:
        sh("sysctl", "-qw", "kernel.bpf_stats_enabled=0")
    return out


def loader_decode():
    """The loader's own work per CPU second (ring record to closed Parquet file), without a
    kernel: the ignored benchmark test in record/sinks.rs, which prints one line per event kind."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    out = sh("cargo", "test", "--release", "-q", "-p", "scaletrace", "--", "--ignored", "--nocapture",
             "loader_events_per_cpu_second", cwd=root).stdout
    rates = {}
    for line in out.splitlines():
        if line.startswith("loader: "):
            words = line.split()
            kind = " ".join(words[2:words.index("per")])
            rates[kind] = {"events_per_cpu_s": float(words[1]),
                           "bytes_per_row": float(line.split("(")[1].split()[0])}
    return rates


def syscall_storm(exe, rate, seconds, work=None):
    """Runs the synthetic kernel source (getppid() in a loop) at `rate` calls/s; with `work`, a
    recorder turns each call into an RTT sample. Returns (calls, ns per call, seconds, the
    recorder's (rtt_samples, ring_drops_rtt), its CPU seconds, eBPF ns per program run)."""
    storm = SyscallStorm(exe, rate, seconds)
    if not work:
        return (*storm.run(), None, 0.0, 0.0)
    # --port 1: no TCP flow of the machine adds events to the source's
    rec = Recorder(work, "--bench-source-pid", str(storm.pid), "--no-gpu", "--nic-interval", "0s", "--quiet",
                   "--port", "1")
    try:
        before = bpf_program_stats(("bench_source",))
        calls, ns_per_call, elapsed = storm.run()
        after = bpf_program_stats(("bench_source",))
    finally:
        # The recorder's CPU over its whole life, final drain included (read before the stop,
        # the drain's events were counted without its CPU), startup too: conservative.
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert rec.stop() == 0, rec.stderr
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (reaped.ru_utime + reaped.ru_stime) - (children.ru_utime + children.ru_stime)
    captured = rec.query("SELECT rtt_samples, ring_drops_rtt FROM capture")[0]
    return calls, ns_per_call, elapsed, captured, cpu, bpf_ns_per_run(before, after)


def syscall_steps(work, rates, seconds):
    """Events at rates no TCP workload here reaches: the loader's hidden synthetic source turns
    each getppid() of one process into an RTT sample, from a tight loop at increasing call
    rates (0 = as fast as possible), with the default ring buffer. Finds where drops begin and
    what the loader spends per event, end to end."""
    exe = SyscallStorm.build(work)
    _, base_ns, _, _, _, _ = syscall_storm(exe, 0, seconds)
    sh("sysctl", "-qw", "kernel.bpf_stats_enabled=1")
    out = {"untraced_ns_per_call": base_ns, "steps": []}
    try:
        for rate in rates:
            calls, ns, elapsed, (rows, drops), cpu, bpf_ns = syscall_storm(
                exe, rate, seconds, os.path.join(work, f"syscall-{rate}"))
            step = {"ring_kib": 8192, "target_calls_per_s": rate, "calls_per_s": calls / elapsed,
                    "events_per_s": rows / elapsed, "ring_drops": drops, "events_lost_share": drops / max(calls, 1),
                    "traced_ns_per_call": ns, "added_ns_per_call": ns - base_ns, "bpf_ns_per_run": bpf_ns,
                    "loader_cpu_seconds": cpu, "events_per_loader_cpu_s": rows / max(cpu, 1e-9)}
            out["steps"].append(step)
            print(f"syscall step {step}", file=sys.stderr)
    finally:
        sh("sysctl", "-qw", "kernel.bpf_stats_enabled=0")
    return out


def bcc_available():
    proc = subprocess.run(["timeout", "20", "tcplife-bpfcc"], capture_output=True, text=True)
    text = (proc.stdout + proc.stderr).strip().splitlines()
    problem = next((l for l in text if "kernel headers" in l or "rror" in l), None)
    return problem is None, problem or ""


def run(args):
    results = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                           "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")},
               "command": "cargo xtask bench", "seconds": args.seconds, "parallel": args.parallel}
    net = NetPair()
    work = tempfile.mkdtemp(prefix="scaletrace-bench-")
    try:
        net.no_spurious_retransmits()
        # Throughput and kernel CPU per GB: baseline and each tracer alternate, in a rotating
        # order, so drift and position hit all of them alike; each tracer is compared with the
        # baseline of its own repetition.
        kinds = ("none", "scaletrace", "bpftrace")
        throughput = {k: [] for k in kinds}
        cpu_per_gb = {k: [] for k in kinds}
        cost = {"scaletrace": [], "bpftrace": []}
        sh("sysctl", "-qw", "kernel.bpf_stats_enabled=1")
        bpf_stats = {}
        for rep in range(args.repeat):
            for kind in kinds[rep % 3:] + kinds[:rep % 3]:
                t = Tracer(kind, net, os.path.join(work, f"tp-{kind}-{rep}")) if kind != "none" else None
                cpu0 = machine_cpu_seconds()
                bps, received = iperf(net, 5600 + rep, args.seconds, args.parallel, with_bytes=True)
                cpu_per_gb[kind].append((machine_cpu_seconds() - cpu0) / (received / 1e9))
                throughput[kind].append(bps)
                if kind == "scaletrace":
                    bpf_stats = bpf_program_stats()
                if t:
                    c = t.stop()
                    c["events"] = t.events()
                    cost[kind].append(c)
                print(f"throughput rep {rep} {kind}: {bps / 1e9:.2f} Gbit/s, "
                      f"{cpu_per_gb[kind][-1]:.3f} kernel CPU s/GB", file=sys.stderr)
        sh("sysctl", "-qw", "kernel.bpf_stats_enabled=0")
        # raw runs only: the report computes every ratio and interval from them
        results["throughput"] = {k: {"median_bps": statistics.median(throughput[k]), "runs_bps": throughput[k],
                                     "runs_kernel_cpu_s_per_gb": cpu_per_gb[k]} for k in kinds}
        results["tracer_cost"] = cost
        results["bpf_programs"] = bpf_stats

        # Loss and churn: events captured by each tool for the same workload.
        net.drop_incoming(5700, 0.01)
        captured = {}
        for kind in ("scaletrace", "bpftrace"):
            t = Tracer(kind, net, os.path.join(work, f"loss-{kind}"))
            iperf(net, 5700, args.seconds, 4)
            churn_rate = churn(net, 5701, args.churn)
            t.stop()
            flows, rtt, retrans, states, drops = t.events()
            captured[kind] = {"flows": flows, "rtt_samples": rtt, "retransmit_events": retrans, "state_changes": states,
                              "ring_drops": drops, "churn_connections_per_s": churn_rate}
            print(f"loss+churn {kind}: {captured[kind]}", file=sys.stderr)
        ok, why = bcc_available()
        captured["bcc"] = {"available": ok, "reason": why}
        results["loss_and_churn"] = captured

        # Rate steps: every RTT update becomes an event; more flows, more events, until drops.
        steps = []
        for parallel in args.steps:
            d = os.path.join(work, f"step-{parallel}")
            os.makedirs(d, exist_ok=True)
            rec = Recorder(d, "--netns", net.a, "--no-gpu", "--nic-interval", "0s", "--quiet", rtt_interval="0s")
            start = time.time()
            iperf(net, 5800 + parallel, args.seconds, parallel)
            elapsed = time.time() - start
            cpu = cpu_seconds(rec.proc.pid)
            assert rec.stop() == 0, rec.stderr
            rtt, drops = rec.query("SELECT rtt_samples, ring_drops FROM capture")[0]
            files = glob.glob(f"{d}/*/*.parquet")
            rows = sum(duckdb.sql(f"SELECT count(*) FROM read_parquet('{f}')").fetchall()[0][0] for f in files)
            size = sum(os.path.getsize(f) for f in files)
            steps.append({"parallel": parallel, "events_per_s": rtt / elapsed, "ring_drops": drops,
                          "parquet_rows_per_s": rows / elapsed, "bytes_per_row": size / max(rows, 1),
                          "loader_cpu_seconds": cpu})
            print(f"step {parallel}: {steps[-1]}", file=sys.stderr)
        results["rate_steps"] = steps
        results["uprobe_steps"] = uprobe_steps(work, args.uprobe_rates, args.seconds)
        results["syscall_steps"] = syscall_steps(work, args.syscall_rates, args.seconds)
        results["loader_decode"] = loader_decode()
        results["kernel_hooks"] = kernel_hooks.probe_fentry()
    finally:
        net.close()
    return results


def per_ack_parts(path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "per-ack-parts.json")):
    """Program -> median ns per run, from bench/ack_parts.py's last run, and when it ran (None
    without one)."""
    try:
        saved = json.load(open(path))
        runs = saved["runs"]
    except (OSError, ValueError, KeyError):
        return None, None
    return ({name: statistics.median(r[name]["ns_per_run"] for r in runs if r[name]["ns_per_run"])
             for name in runs[0] if isinstance(runs[0][name], dict)}, saved.get("utc"))


def per_ack_storage(path=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "per-ack-storage.json")):
    """bench/ab.py's A/B of the flow state's lookup (the cookie-keyed hash first, socket storage
    second): each one's median ns per run, the second's ns per MB over the first's (median,
    interval, coverage) and when it ran; None without one."""
    try:
        saved = json.load(open(path))
        hashed, stored = saved["args"]["binaries"][:2]
        base, runs = saved["runs"][hashed], saved["runs"][stored]
    except (OSError, ValueError, KeyError):
        return None
    return {
        "hash_ns": statistics.median(r["ns_per_run"] for r in base),
        "storage_ns": statistics.median(r["ns_per_run"] for r in runs),
        "per_mb": median_interval([r["ns_per_mb"] / b["ns_per_mb"] for r, b in zip(runs, base)]),
        "reps": len(runs),
        "utc": saved.get("utc"),
    }


def markdown(r):
    tp = r["throughput"]
    lines = [
        "# scaletrace performance",
        "",
        f"Generated by `{r['command']}` on {r['machine']['cpus']} CPUs ({r['machine']['cpu']}), Linux {r['machine']['kernel']}.",
        f"Workload: iperf3, {r['parallel']} parallel TCP flows between two network namespaces over veth, "
        f"{r['seconds']} s per run, {len(tp['none']['runs_bps'])} repetitions, each running the baseline and "
        "every tracer in a rotating order; raw numbers in `performance.json`."
        + (f" The synthetic-source steps and the loader benchmark were run again by `{r['sources_rerun']['command']}` "
           f"on {r['sources_rerun']['utc']} UTC." if r.get("sources_rerun") else ""),
        "",
        "## Throughput and kernel CPU with a tracer attached",
        "",
        "Each tracer's run over the baseline run of the same repetition; the median of these ratios with a "
        "distribution-free interval of at least 95 % coverage (order statistics; the exact coverage is given). Kernel CPU is the whole machine's system, irq and "
        "softirq time (`/proc/stat`) per GB received: where the network stack and every eBPF program on its path "
        "run, steadier than throughput on a shared machine. The tracer's own process (its userspace) is the "
        "next columns; its wakeups are its threads' voluntary context switches per second.",
        "",
        "| tracer | median Gbit/s | throughput vs. baseline (interval, coverage) | kernel CPU s per GB | vs. baseline (interval, coverage) | tracer CPU s per run | tracer wakeups/s | tracer peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def interval(stats):
        if stats is None:
            return "not measured"
        median, lo, hi, coverage = stats
        return f"{median:.3f} ({lo:.3f}..{hi:.3f}, {coverage:.1%})" if lo is not None else f"{median:.3f}"

    for k, v in tp.items():
        costs = r["tracer_cost"].get(k, [])
        cpu = statistics.median(c["cpu_seconds"] for c in costs) if costs else 0
        rss = max((c["peak_rss_bytes"] or 0) for c in costs) / 2**20 if costs else 0
        wakeups = [c["wakeups_per_s"] for c in costs if "wakeups_per_s" in c]
        wakeups = f"{statistics.median(wakeups):.0f}" if wakeups else "–"
        cpu_gb = v.get("runs_kernel_cpu_s_per_gb")
        lines.append(f"| {k} | {v['median_bps'] / 1e9:.2f} | {interval(against_baseline(tp, k, 'runs_bps'))} | "
                     f"{statistics.median(cpu_gb) if cpu_gb else float('nan'):.3f} | "
                     f"{interval(against_baseline(tp, k, 'runs_kernel_cpu_s_per_gb'))} | {cpu:.2f} | {wakeups} | {rss:.1f} |")
    lines += ["", "## eBPF program time (kernel.bpf_stats_enabled)", "", "| program | runs | ns per run |", "|---|---|---|"]
    for name, s in r["bpf_programs"].items():
        lines.append(f"| {name} | {s['run_cnt']} | {s['run_time_ns'] / max(s['run_cnt'], 1):.0f} |")
    lines += ["", "Versions of sock_ops' per-ACK work against each other (A/B, alternated, same workload): "
              "[per-ack.md](per-ack.md), by `bench/ab.py`.",
              "", "`analyze` on a whole fleet's store, its time and memory as the fleet grows: "
              "[fleet.md](fleet.md), by `bench/fleet.py`; one hour of 1,000 nodes (triaged): [fleet-hour.md](fleet-hour.md). "
              "The same fleets in Spark against DuckDB: "
              "[fleet-spark.md](fleet-spark.md), by `bench/fleet_spark.py`."]
    lines += ["", "## Same loss (1 %) and connection-churn workload, events captured", "",
              "| tool | flows | RTT samples | retransmit events | state changes | ring drops |", "|---|---|---|---|---|---|"]
    for k in ("scaletrace", "bpftrace"):
        c = r["loss_and_churn"][k]
        lines.append(f"| {k} | {c['flows']} | {c['rtt_samples']} | {c['retransmit_events']} | {c['state_changes']} | {c['ring_drops']} |")
    bcc = r["loss_and_churn"]["bcc"]
    lines.append(f"| bcc tcplife/tcpretrans | {'ran' if bcc['available'] else 'could not run: ' + bcc['reason']} | | | | |")
    lines += ["", "## Event rate steps (`--rtt-sample-interval 0s`: one event per RTT update)", "",
              "| parallel flows | events/s to userspace | ring drops | Parquet rows/s | bytes per row on disk | loader CPU s |",
              "|---|---|---|---|---|---|"]
    for s in r["rate_steps"]:
        lines.append(f"| {s['parallel']} | {s['events_per_s']:.0f} | {s['ring_drops']} | {s['parquet_rows_per_s']:.0f} | "
                     f"{s['bytes_per_row']:.1f} | {s['loader_cpu_seconds']:.2f} |")
    u = r.get("uprobe_steps")
    if u:
        lines += ["", "## Uprobe event rate steps (synthetic: NCCL calls from a tight loop, one event per call)", "",
                  f"Untraced call: {u['untraced_ns_per_call']:.1f} ns. A traced call takes a uprobe and a uretprobe trap; "
                  "the eBPF time is that of both programs.", "",
                  "| ring KiB | target calls/s | calls/s made | events/s to userspace | ring drops | lost share | ns added per call | eBPF ns per program run | loader CPU s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for s in u["steps"]:
            target = "max" if s["target_calls_per_s"] == 0 else f"{s['target_calls_per_s']:,}"
            lines.append(f"| {s['ring_kib']} | {target} | {s['calls_per_s']:.0f} | {s['events_per_s']:.0f} | {s['ring_drops']} | "
                         f"{s['events_lost_share'] * 100:.2f} % | {s['added_ns_per_call']:.0f} | {s['bpf_ns_per_run']:.0f} | {s['loader_cpu_seconds']:.2f} |")
    sc = r.get("syscall_steps")
    if sc:
        lines += ["", "## Kernel event rate steps (synthetic: getppid() from a tight loop, one RTT sample per call)", "",
                  f"Untraced call: {sc['untraced_ns_per_call']:.1f} ns. The source is a tracepoint the recorder attaches only "
                  "for the benchmark (`--bench-source-pid`); the loader writes each event to the `rtt` table as usual. "
                  "Loader CPU is the recorder process's whole CPU time over its life (from the kernel's account of the "
                  "reaped child: start-up and the final drain included, so conservative), and its events per CPU second "
                  "the end-to-end figure (ring buffer reads, decode, Parquet, and its timers).", "",
                  "| target calls/s | calls/s made | events/s to userspace | ring drops | lost share | ns added per call | "
                  "eBPF ns per run | loader CPU s | events per loader CPU s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for s in sc["steps"]:
            target = "max" if s["target_calls_per_s"] == 0 else f"{s['target_calls_per_s']:,}"
            lines.append(f"| {target} | {s['calls_per_s']:.0f} | {s['events_per_s']:.0f} | {s['ring_drops']} | "
                         f"{s['events_lost_share'] * 100:.2f} % | {s['added_ns_per_call']:.0f} | {s['bpf_ns_per_run']:.0f} | "
                         f"{s['loader_cpu_seconds']:.2f} | {s['events_per_loader_cpu_s']:,.0f} |")
    decode = r.get("loader_decode")
    if decode:
        lines += ["", "## Loader alone: ring record to closed Parquet file, per CPU second", "",
                  "Synthetic records with varying fields fed to the loader's decode and sinks in one thread "
                  "(no kernel; `cargo test --release -p scaletrace -- --ignored --nocapture loader_events_per_cpu_second`).", "",
                  "| event kind | events per CPU second | bytes per row on disk |", "|---|---|---|"]
        for kind, d in decode.items():
            lines.append(f"| {kind} | {d['events_per_cpu_s']:,.0f} | {d['bytes_per_row']:.1f} |")
    hooks = r.get("kernel_hooks")
    parts, parts_utc = per_ack_parts()  # the hook section's figures and the targets'
    if hooks:
        lines += ["", "## A cheaper hook than sock_ops", ""]
        if parts:
            lines += [
                "Within what `kernel.bpf_stats_enabled` counts (a program's run and the clock reads around it, "
                "not the kernel's work to call it), the hook is not where the per-ACK time goes "
                f"([per-ack-parts.md](per-ack-parts.md), by `bench/ack_parts.py`: small programs beside "
                f"scaletrace's, run for the same callbacks, measured on {parts_utc}). An empty sock_ops program "
                f"counts {parts['empty']:.0f} ns per run, an empty raw tracepoint on tcp:tcp_probe "
                f"{parts['raw_tp tcp_probe (empty)']:.0f} ns (it fires for every segment received): the floor of "
                f"this measure. Of scaletrace's {parts['scaletrace sock_ops']:.0f} ns that day, finding the flow's "
                "state is the largest single piece: a socket-cookie-keyed hash lookup costs "
                f"{parts['cookie+hash'] - parts['empty']:.0f} ns above an empty program, socket-local storage "
                f"(`bpf_sk_storage_get`) {parts['sk_storage'] - parts['empty']:.0f} ns; with three cache lines of "
                f"per-flow state updated, {parts['cookie+hash 3l'] - parts['empty']:.0f} against "
                f"{parts['sk_storage 3l'] - parts['empty']:.0f} ns (differences of medians; the pieces' order "
                "moves each by ~10 ns). [per-ack-breakdown.md](per-ack-breakdown.md) (`bench/ab.py`) cuts "
                "scaletrace's own program short at each stage. A sock_ops program that finds per-flow state at all, "
                "by the cheapest lookup it has (socket-local storage; a raw tracepoint cannot call it and fentry is "
                f"refused here), counts {parts['sk_storage']:.0f} ns per run: 100 ns per ACK as `bpf_stats` counts it "
                "is out of reach on this machine for such a program. The sock_ops time above is the full bench's, "
                "on its own date: the day's load moves it (compare figures within one page).", ""]
        storage = per_ack_storage()
        if storage:
            ratio, lo, hi, cov = storage["per_mb"]
            lines += [
                "scaletrace keeps each flow's state in its socket's storage since then (the socket-cookie call "
                "and the hash lookup are gone from every callback; open flows are read by a TCP socket iterator "
                "in each network namespace). Against the cookie-keyed hash, same workload, alternated "
                f"([per-ack-storage.md](per-ack-storage.md), {storage['reps']} repetitions, {storage['utc']} UTC): "
                f"{storage['hash_ns']:.0f} → {storage['storage_ns']:.0f} ns per run (medians), eBPF time per MB "
                f"{ratio:.3f} of the hash's"
                + (f" (interval {lo:.3f}..{hi:.3f}, {cov:.1%})." if lo is not None else "."), ""]
        lines += ["A BPF trampoline (fentry) on the TCP receive path costs ~6-7 ns per trigger in the kernel's own "
                  "benchmarks. `bench/kernel_hooks.py` loads the smallest fentry program (`return 0`) through the raw "
                  "bpf() syscall and attaches it:", "",
                  "| hook | kernel lockdown | this kernel's answer |", "|---|---|---|",
                  f"| `{hooks['hook']}` | {hooks['lockdown']} | {hooks['answer']} |", "",
                  "On the VM lab's Debian 6.1 kernel (lockdown none) the same script loads and attaches it "
                  "(checked 2026-12-05), but TCG emulation makes timings there meaningless: fentry could not be "
                  "measured against sock_ops on either machine."]
    lines += ["", "## Targets", ""]
    tp_ratio, tp_lo, tp_hi, tp_cov = against_baseline(tp, "scaletrace", "runs_bps") or (float("nan"), None, None, None)
    cpu_ratio, cpu_lo, cpu_hi, cpu_cov = (against_baseline(tp, "scaletrace", "runs_kernel_cpu_s_per_gb")
                                          or (float("nan"), None, None, None))
    span = lambda lo, hi, cov: f" (interval {lo:.3f}..{hi:.3f}, {cov:.1%} coverage)" if lo is not None else ""
    ns = [v["run_time_ns"] / v["run_cnt"] for v in r["bpf_programs"].values() if v["run_cnt"]]
    worst_ns = max(ns) if ns else float("nan")
    per_ack = next((v["run_time_ns"] / v["run_cnt"] for k, v in r["bpf_programs"].items()
                    if k.startswith("scaletrace_sock") and v["run_cnt"]), float("nan"))
    default_ring = [s for s in (r.get("uprobe_steps") or {}).get("steps", []) if s["ring_kib"] == 8192]
    syscall = (r.get("syscall_steps") or {}).get("steps", [])
    all_steps = sorted(r["rate_steps"] + default_ring + syscall, key=lambda s: s["events_per_s"])
    drop_free = [s["events_per_s"] for s in all_steps if s["ring_drops"] == 0]
    first_drop = next((s for s in all_steps if s["ring_drops"]), None)
    rss = max((c["peak_rss_bytes"] or 0) for c in r["tracer_cost"]["scaletrace"]) / 2**20
    top = max(drop_free, default=0)
    if first_drop:
        verdict = "yes" if first_drop["events_per_s"] >= 1e6 else "no"
    else:
        # No drop at the highest rate the sources reach is not evidence about 1 M events/s.
        verdict = "yes" if top >= 1e6 else f"not shown: the sources here top out at {top:.0f} events/s"
    lines += [
        "| target | measured | met |",
        "|---|---|---|",
        f"| throughput ≥ 0.99 of the baseline (issue 15) | {tp_ratio:.3f}{span(tp_lo, tp_hi, tp_cov)} at "
        f"{tp['none']['median_bps'] / 1e9:.1f} Gbit/s | {verdict_at_least(tp_lo, tp_hi, 0.99)} |",
        f"| kernel CPU per GB ≤ 1.01 of the baseline (issue 15) | {cpu_ratio:.3f}{span(cpu_lo, cpu_hi, cpu_cov)} | "
        f"{verdict_at_most(cpu_lo, cpu_hi, 1.01)} |",
        f"| ≤ 100 ns eBPF time per ACK (issue 15) | sock_ops, mean over all its runs (every callback of every "
        f"socket it sees, the per-ACK RTT callback of tracked flows most of them) {per_ack:.0f} ns per run"
        + (f"; fentry, the cheaper hook: {hooks['answer']}" if hooks else "")
        + (f"; finding per-flow state alone, by socket-local storage (the cheapest way): {parts['sk_storage']:.0f} ns"
           if parts else "") + " | "
        + ("not measured" if math.isnan(per_ack) else ("yes" if per_ack <= 100 else "no")) + " |",
        f"| < 500 ns eBPF time per event | worst program {worst_ns:.0f} ns per run | {'yes' if worst_ns < 500 else 'no'} |",
        f"| no drops below 1 M events/s | highest drop-free step {max(drop_free, default=0):.0f} events/s"
        + (f"; drops from {first_drop['events_per_s']:.0f} events/s" if first_drop else "; no step dropped")
        + f" | {verdict} |",
        f"| loader RSS < 100 MB | {rss:.1f} MiB peak | {'yes' if rss < 100 else 'no'} |",
    ]
    if decode:
        slowest = min(d["events_per_cpu_s"] for d in decode.values())
        alone = "yes" if slowest >= 2e6 else "no"
        busiest = max(syscall, key=lambda s: s["events_per_s"], default=None)
        if busiest:
            e2e = busiest["events_per_loader_cpu_s"]
            measured = (f"decode + Parquet alone: slowest kind {slowest:,.0f} per CPU second; end to end (ring reads, "
                        f"decode, Parquet, timers) at {busiest['events_per_s']:,.0f} events/s: {e2e:,.0f} per loader CPU second")
            met = f"alone {alone}; end to end {'yes' if e2e >= 2e6 else 'no'}"
        else:
            measured, met = f"decode + Parquet alone: slowest kind {slowest:,.0f} per CPU second", alone
        lines.append(f"| loader ≥ 2 M events/s per core (issue 15) | {measured} | {met} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=int, default=8)
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--repeat", type=int, default=12,
                   help="repetitions of the throughput comparison (each: the baseline and every tracer, in "
                        "an order that rotates; a multiple of 3 puts each first equally often); at least 6 "
                        "for a 95 %% interval of the median")
    p.add_argument("--churn", type=int, default=300)
    p.add_argument("--steps", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--uprobe-rates", type=int, nargs="+", default=[10000, 50000, 100000, 200000, 0],
                   help="NCCL calls per second of the synthetic uprobe steps (0: as fast as possible)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs"))
    p.add_argument("--syscall-rates", type=int, nargs="+", default=[100000, 300000, 1000000, 2000000, 0],
                   help="getppid() calls per second of the synthetic kernel source (0: as fast as possible)")
    p.add_argument("--only-sources", action="store_true",
                   help="rerun only the synthetic sources (uprobe and syscall steps) and the loader benchmark, "
                        "keeping the rest of performance.json")
    p.add_argument("--only-uprobe", action="store_true",
                   help="rerun only the uprobe steps, keeping the other results of performance.json")
    args = p.parse_args()
    if args.only_uprobe or args.only_sources:
        with open(os.path.join(args.out, "performance.json")) as f:
            results = json.load(f)
        work = tempfile.mkdtemp(prefix="scaletrace-bench-")
        results["uprobe_steps"] = uprobe_steps(work, args.uprobe_rates, args.seconds)
        if args.only_sources:
            results["syscall_steps"] = syscall_steps(work, args.syscall_rates, args.seconds)
            results["loader_decode"] = loader_decode()
            results["kernel_hooks"] = kernel_hooks.probe_fentry()
            results["sources_rerun"] = {"command": "python3 bench/bench.py --only-sources",
                                        "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    else:
        results = run(args)
    with open(os.path.join(args.out, "performance.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "performance.md"), "w") as f:
        f.write(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
