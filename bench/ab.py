#!/usr/bin/env python3
"""A/B of the per-ACK cost: two or more scaletrace binaries recording the same iperf3 workload
(TCP flows between two network namespaces), alternated in a rotating order so drift and
position hit all of them alike. For each binary: the sock_ops program's time per run and per
MB transferred (kernel.bpf_stats_enabled, read from the recorder's own program fds), the
loader's wakeups per second and the throughput; for each binary after the first, its eBPF time
per MB over the first's in the same repetition, as a median with a distribution-free interval.

Time per MB is the figure to compare: how many callbacks a run gets depends on how the
kernel coalesces ACKs, which changes from run to run on a busy machine, and time per run
changes with it (fewer, colder runs cost more each).

    sudo python3 bench/ab.py --reps 8 OLD_BINARY NEW_BINARY [--json out.json]
    sudo python3 bench/ab.py --reps 12 --label before --label after A B --markdown docs/per-ack.md

With --markdown, the summary is also written there as a table (and the runs beside it, in a
.json of the same name), for docs/performance.md to point to.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)
from bench import iperf, median_interval  # noqa: E402
from netlab import NetPair, Recorder, sh, voluntary_switches  # noqa: E402

BPF_PROG_TYPE_SOCK_OPS = 13


def sockops_time(pid):
    """(run_time_ns, run_cnt) summed over the sock_ops programs `pid` holds open."""
    ns = runs = 0
    for fd in glob.glob(f"/proc/{pid}/fdinfo/*"):
        try:
            info = dict(line.split(":", 1) for line in open(fd).read().splitlines() if ":" in line)
        except OSError:
            continue
        if int(info.get("prog_type", -1)) == BPF_PROG_TYPE_SOCK_OPS and "run_cnt" in info:
            ns += int(info["run_time_ns"])
            runs += int(info["run_cnt"])
    return ns, runs


def one_run(binary, net, port, seconds, parallel, work):
    os.environ["SCALETRACE_BIN"] = binary
    rec = Recorder(work, "--netns", net.a, "--no-gpu", "--nic-interval", "0s", "--quiet", rtt_interval="10ms")
    ns0, runs0 = sockops_time(rec.proc.pid)
    switches0, t0 = voluntary_switches(rec.proc.pid), time.time()
    bps, received = iperf(net, port, seconds, parallel, with_bytes=True)
    ns1, runs1 = sockops_time(rec.proc.pid)
    wakeups = (voluntary_switches(rec.proc.pid) - switches0) / (time.time() - t0)
    assert rec.stop() == 0, rec.stderr
    ns, runs = ns1 - ns0, runs1 - runs0
    return {"gbit_per_s": bps / 1e9, "sockops_runs": runs, "ns_per_run": ns / max(runs, 1),
            "ns_per_mb": ns / (received / 1e6), "loader_wakeups_per_s": wakeups}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("binaries", nargs="+", help="scaletrace binaries; the first is the baseline")
    p.add_argument("--reps", type=int, default=8, help="repetitions of each binary (default 8)")
    p.add_argument("--seconds", type=int, default=5, help="iperf3 seconds per run (default 5)")
    p.add_argument("--parallel", type=int, default=8, help="parallel TCP flows (default 8)")
    p.add_argument("--json", help="also write every run here")
    p.add_argument("--label", action="append", default=[],
                   help="a name for each binary, in order (default: its path)")
    p.add_argument("--markdown", help="also write the summary here as markdown, and the runs to the "
                                      "same path with .json")
    p.add_argument("--note", default="", help="a paragraph for the markdown: what each binary changes")
    args = p.parse_args()
    if args.label and len(args.label) != len(args.binaries):
        sys.exit("ab.py: give one --label per binary, or none")
    if os.geteuid() != 0:
        sys.exit("ab.py: run as root (namespaces, eBPF)")
    for b in args.binaries:
        if not os.access(b, os.X_OK):
            sys.exit(f"ab.py: {b}: not an executable")
    net = NetPair()
    net.no_spurious_retransmits()
    sh("sysctl", "-qw", "kernel.bpf_stats_enabled=1")
    runs = {b: [] for b in args.binaries}
    try:
        for rep in range(args.reps):
            k = rep % len(args.binaries)
            for b in args.binaries[k:] + args.binaries[:k]:
                with tempfile.TemporaryDirectory(prefix="scaletrace-ab-") as work:
                    r = one_run(b, net, 5900 + rep, args.seconds, args.parallel, work)
                runs[b].append(r)
                print(f"rep {rep} {b}: {r['gbit_per_s']:.1f} Gbit/s, {r['sockops_runs']} sock_ops runs, "
                      f"{r['ns_per_run']:.0f} ns/run, {r['ns_per_mb']:.0f} ns/MB, "
                      f"{r['loader_wakeups_per_s']:.0f} loader wakeups/s", file=sys.stderr, flush=True)
    finally:
        sh("sysctl", "-qw", "kernel.bpf_stats_enabled=0")
        net.close()
    fmt = lambda s: f"{s[0]:.3f} ({s[1]:.3f}..{s[2]:.3f}, {s[3]:.1%})" if s[1] is not None else f"{s[0]:.3f}"
    labels = dict(zip(args.binaries, args.label or args.binaries))
    base = runs[args.binaries[0]]
    rows = []
    for b in args.binaries:
        rs = runs[b]
        med = lambda key: statistics.median(r[key] for r in rs)
        ratio = None if rs is base else median_interval([r["ns_per_mb"] / b0["ns_per_mb"] for r, b0 in zip(rs, base)])
        rows.append((labels[b], med("ns_per_run"), med("ns_per_mb"), med("gbit_per_s"), ratio))
        print(f"{labels[b]}: {med('ns_per_run'):.0f} ns/run, {med('ns_per_mb'):.0f} ns/MB, "
              f"{med('loader_wakeups_per_s'):.0f} wakeups/s, {med('gbit_per_s'):.1f} Gbit/s (medians of {len(rs)})")
        if ratio:
            print(f"  eBPF ns/MB over the first binary's, same repetition: {fmt(ratio)}")
    record = {"args": vars(args), "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
              "labels": labels, "runs": runs}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    if args.markdown:
        with open(os.path.splitext(args.markdown)[0] + ".json", "w") as f:
            json.dump(record, f, indent=1)
        with open(args.markdown, "w") as f:
            f.write(markdown(rows, args, record["utc"]))


def markdown(rows, args, utc):
    """The summary as a page: what was compared, how, and each binary against the first."""
    lines = ["# Per-ACK cost: sock_ops versions compared", "",
             f"Generated by `bench/ab.py` on {os.cpu_count()} CPUs, {os.uname().release}, {utc} UTC: "
             f"iperf3, {args.parallel} parallel TCP flows between two network namespaces, {args.seconds} s per "
             f"run, {args.reps} repetitions, the binaries alternated in a rotating order. eBPF time is the "
             "sock_ops program's (kernel.bpf_stats_enabled); per MB transferred is the figure to compare (per run "
             "moves with how the kernel coalesces ACKs). The ratio is each repetition's over the first binary's in "
             "the same repetition: the median, with a distribution-free interval and its coverage. Raw runs in "
             "the .json beside this file.", ""]
    if args.note:
        lines += [args.note, ""]
    lines += ["| binary | median ns per run | median ns per MB | median Gbit/s | ns per MB vs. the first (interval, coverage) | resolved |",
              "|---|---|---|---|---|---|"]
    for label, per_run, per_mb, gbit, ratio in rows:
        if ratio is None:
            vs, resolved = "1 (baseline)", ""
        elif ratio[1] is None:
            vs, resolved = f"{ratio[0]:.3f}", "no interval (fewer than 6 repetitions)"
        else:
            vs = f"{ratio[0]:.3f} ({ratio[1]:.3f}..{ratio[2]:.3f}, {ratio[3]:.1%})"
            resolved = "no: the interval holds 1" if ratio[1] <= 1 <= ratio[2] else (
                "yes: slower" if ratio[1] > 1 else "yes: faster")
        lines.append(f"| {label} | {per_run:.0f} | {per_mb:.0f} | {gbit:.1f} | {vs} | {resolved} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
