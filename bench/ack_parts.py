#!/usr/bin/env python3
"""What each piece of sock_ops' per-ACK work costs, and whether another hook would be cheaper:
issue 15 asks for at most 100 ns of eBPF time per ACK.

Beside a running `scaletrace record` (whose sock_ops program turns on the per-ACK RTT callback
of every flow it tracks), small programs built here instruction by instruction
(`kernel_hooks`: no toolchain of ours involved) are attached to the same cgroup, so each runs
for exactly the callbacks scaletrace's program runs for, in the same iperf3 runs:

  empty           returns at once: what `kernel.bpf_stats_enabled` counts for no work at all
                  (the kernel's two clock reads around the program, and its call)
  cookie          the socket-cookie helper (scaletrace's flow table key)
  cookie+hash     + a lookup in a cookie-keyed hash map, inserting on a miss (8-byte value):
                  how scaletrace finds a flow's state today
  cookie+hash 3l  the same with a 384-byte value, one counter in each of 3 cache lines updated
                  (a flow's RTT aggregates, its open window, a histogram bucket)
  sk_storage      bpf_sk_storage_get on the callback's socket (8-byte value, created on the
                  first callback): the socket-local storage issue 15 names instead of the hash
  sk_storage 3l   the same with 384 bytes and 3 cache lines updated
(their order in the cgroup rotated every repetition), and an empty raw tracepoint on
tcp:tcp_probe (fires for every segment a socket receives: on the sender, every ACK), the
cheaper hook the kernel here offers (fentry is refused:
`kernel_hooks.py`). Per program: the median over repetitions of its time per run, with a
distribution-free interval.

    sudo python3 bench/ack_parts.py --reps 12 --markdown docs/per-ack-parts.md
"""
import argparse
import json
import os
import platform
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)
import kernel_hooks as k  # noqa: E402
from bench import iperf, median_interval  # noqa: E402
from netlab import NetPair, Recorder, cgroup2_mount, sh  # noqa: E402

HELPER_MAP_LOOKUP, HELPER_MAP_UPDATE, HELPER_SOCKET_COOKIE, HELPER_SK_STORAGE_GET = 1, 2, 46, 107
BPF_NOEXIST, SK_STORAGE_GET_F_CREATE = 1, 1
SOCK_OPS_SK = 184  # offsetof(struct bpf_sock_ops, sk)
BIG_VALUE = 384
THREE_LINES = (0, 128, 256)


def bump(reg, offsets):
    """*(u64 *)(reg + off) += 1 at each offset (r1 as scratch)."""
    return b"".join(k.load64(1, reg, off) + k.add_imm(1, 1) + k.store64(reg, off, 1) for off in offsets)


def cookie_hash(map_fd, value_size, on_hit=b""):
    """key = socket cookie; look it up; insert a zeroed value on a miss, else run `on_hit` with
    the value's address in r0."""
    lookup = (k.mov(6, 1) + k.call(HELPER_SOCKET_COOKIE) + k.store64(10, -8, 0)
              + k.load_map(1, map_fd) + k.mov(2, 10) + k.add_imm(2, -8) + k.call(HELPER_MAP_LOOKUP))
    zeroed = b"".join(k.store64_imm(10, -16 - 8 * i, 0) for i in range(value_size // 8))
    insert = (zeroed + k.load_map(1, map_fd) + k.mov(2, 10) + k.add_imm(2, -8)
              + k.mov(3, 10) + k.add_imm(3, -8 - value_size) + k.mov_imm(4, BPF_NOEXIST) + k.call(HELPER_MAP_UPDATE))
    return (lookup + k.jump_if_not(0, 0, k.count(insert) + 1) + insert + k.jump(k.count(on_hit))
            + on_hit + k.exit_with(1))


def sk_storage(map_fd, on_hit=b""):
    """The callback socket's storage (created on its first callback); `on_hit` with it in r0."""
    get = k.load_map(1, map_fd) + k.mov_imm(3, 0) + k.mov_imm(4, SK_STORAGE_GET_F_CREATE) + k.call(HELPER_SK_STORAGE_GET)
    found = k.jump_if_not(0, 0, 1) + k.jump(k.count(on_hit)) + on_hit
    return (k.mov(6, 1) + k.load64(2, 6, SOCK_OPS_SK) + k.jump_if_not(2, 0, 1)  # no socket: done
            + k.jump(k.count(get) + k.count(found)) + get + found + k.exit_with(1))


def sock_ops_pieces():
    """name -> program fd, every one a sock_ops program."""
    hash_small = k.create_map(k.BPF_MAP_TYPE_HASH, 8, 8, 65536, k.BPF_F_NO_PREALLOC)
    hash_big = k.create_map(k.BPF_MAP_TYPE_HASH, 8, BIG_VALUE, 65536, k.BPF_F_NO_PREALLOC)
    storage = {size: k.create_map(k.BPF_MAP_TYPE_SK_STORAGE, 4, size, 0, k.BPF_F_NO_PREALLOC,
                                  btf=(k.load_int_btf(size), 1, 3)) for size in (8, BIG_VALUE)}
    code = {
        "empty": k.exit_with(1),
        "cookie": k.mov(6, 1) + k.call(HELPER_SOCKET_COOKIE) + k.exit_with(1),
        "cookie+hash": cookie_hash(hash_small, 8),
        "cookie+hash 3l": cookie_hash(hash_big, BIG_VALUE, bump(0, THREE_LINES)),
        "sk_storage": sk_storage(storage[8]),
        "sk_storage 3l": sk_storage(storage[BIG_VALUE], bump(0, THREE_LINES)),
    }
    return {name: k.load_program(k.BPF_PROG_TYPE_SOCK_OPS, c, f"st_ack_{i}") for i, (name, c) in enumerate(code.items())}


def prog_times(fdinfo):
    """name -> (run_time_ns, run_cnt) of each program, from its fd's fdinfo file."""
    out = {}
    for name, path in fdinfo.items():
        info = dict(line.split(":", 1) for line in open(path).read().splitlines() if ":" in line)
        out[name] = (int(info.get("run_time_ns", 0)), int(info.get("run_cnt", 0)))
    return out


def recorder_sockops(pid):
    """The fdinfo file of the recorder's sock_ops program."""
    for entry in os.listdir(f"/proc/{pid}/fdinfo"):
        path = f"/proc/{pid}/fdinfo/{entry}"
        info = open(path).read()
        if f"prog_type:\t{k.BPF_PROG_TYPE_SOCK_OPS}\n" in info and "run_cnt" in info:
            return path
    raise RuntimeError("the recorder holds no sock_ops program")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--markdown", help="also write this table, and the runs in a .json beside it")
    args = ap.parse_args()

    pieces = sock_ops_pieces()
    cgroup = os.open(cgroup2_mount(), os.O_RDONLY | os.O_DIRECTORY)
    tcp_probe = k.load_program(k.BPF_PROG_TYPE_RAW_TRACEPOINT, k.exit_with(0), "st_ack_rawtp")
    net, rec, link, attached = NetPair(), None, None, []
    sh("sysctl", "-qw", "kernel.bpf_stats_enabled=1")
    runs = []
    try:
        with tempfile.TemporaryDirectory(prefix="scaletrace-ack-parts-") as work:
            rec = Recorder(work, "--netns", net.a, "--no-gpu", "--nic-interval", "0s", "--quiet", rtt_interval="10ms")
            time.sleep(2)
            fds = {"scaletrace sock_ops": recorder_sockops(rec.proc.pid),
                   **{name: f"/proc/self/fdinfo/{fd}" for name, fd in pieces.items()},
                   "raw_tp tcp_probe (empty)": f"/proc/self/fdinfo/{tcp_probe}"}
            link = k.raw_tracepoint_open(tcp_probe, "tcp_probe")
            order = list(pieces.values())
            for rep in range(args.reps):
                # The cgroup runs its programs in the order they were attached: rotated each
                # repetition, so no piece always runs first (after scaletrace's) or last.
                for fd in attached:
                    k.cgroup_detach(fd, cgroup, k.BPF_CGROUP_SOCK_OPS)
                attached.clear()
                for fd in order[rep % len(order):] + order[:rep % len(order)]:
                    k.cgroup_attach(fd, cgroup, k.BPF_CGROUP_SOCK_OPS, k.BPF_F_ALLOW_MULTI)
                    attached.append(fd)
                before = prog_times(fds)
                bps = iperf(net, 5201, args.seconds, args.parallel)
                after = prog_times(fds)
                run = {"gbit_per_s": bps / 1e9}
                for name in fds:
                    ns, n = (a - b for a, b in zip(after[name], before[name]))
                    run[name] = {"runs": n, "ns_per_run": ns / n if n else None}
                runs.append(run)
                print(f"rep {rep + 1}/{args.reps}: {bps / 1e9:.1f} Gbit/s, "
                      + ", ".join(f"{n} {r['ns_per_run']:.0f}" for n, r in run.items() if isinstance(r, dict) and r["ns_per_run"]),
                      file=sys.stderr, flush=True)
            assert rec.stop() == 0, rec.stderr
            rec = None
    finally:
        if link is not None:
            os.close(link)
        for fd in attached:
            k.cgroup_detach(fd, cgroup, k.BPF_CGROUP_SOCK_OPS)
        if rec is not None:
            rec.stop()
        sh("sysctl", "-qw", "kernel.bpf_stats_enabled=0")
        net.close()

    utc = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    table = summarize(runs, utc)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
        with open(os.path.splitext(args.markdown)[0] + ".json", "w") as f:
            json.dump({"args": vars(args), "kernel": platform.release(), "utc": utc, "runs": runs}, f, indent=1)


def summarize(runs, utc):
    names = [n for n in runs[0] if isinstance(runs[0][n], dict)]
    gbit = median_interval([r["gbit_per_s"] for r in runs])[0]
    lines = [
        "# Per-ACK work, piece by piece",
        "",
        f"Generated by `bench/ack_parts.py` on {os.cpu_count()} CPUs, {platform.release()}, {utc}: iperf3, "
        f"{len(runs)} runs (median {gbit:.1f} Gbit/s) while `scaletrace record` tracks the flows; each piece is a "
        "sock_ops program of its own attached beside scaletrace's, so it runs for exactly the same callbacks "
        "(their order rotated each run) "
        "(the raw tracepoint fires for every segment received instead). Time per run from "
        "`kernel.bpf_stats_enabled`: the median over runs, with a distribution-free interval and its coverage. "
        "What each piece is: the docstring of bench/ack_parts.py. Scaletrace's program runs first, so the pieces "
        "find the socket's own cache lines warm; each map's lines are its own. Raw runs in the .json beside this file.",
        "",
        "| program | runs per iperf3 run (median) | ns per run (median) | interval | coverage | median above the empty program's |",
        "|---|---|---|---|---|---|",
    ]
    empty = median_interval([r["empty"]["ns_per_run"] for r in runs])[0]
    for name in names:
        ns = [r[name]["ns_per_run"] for r in runs if r[name]["ns_per_run"]]
        med, lo, hi, cov = median_interval(ns)
        n = median_interval([r[name]["runs"] for r in runs])[0]
        interval = f"{lo:.0f}..{hi:.0f}" if lo is not None else "–"
        coverage = f"{100 * cov:.1f} %" if cov else "–"
        lines.append(f"| {name} | {n:,.0f} | {med:.0f} | {interval} | {coverage} | {med - empty:+.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
