#!/usr/bin/env python3
"""How much Parquet `scaletrace record` writes per node-hour at its defaults, for a node whose
job keeps 64 TCP flows busy (the cost issue's reference: a training job's rings and meshes).

    python3 bench/storage.py                       # 120 s, writes docs/storage.{md,json}
    python3 bench/storage.py --seconds 300 --flows 128

Two network namespaces on a veth; the client keeps FLOWS connections sending paced chunks the
whole time (each flow ACKed continuously: the RTT table's worst case at the default 10 ms
sampling; a training job's flows are idle between collectives and write less); one
`scaletrace record --netns <client>` at its defaults records them. Then each table's bytes and
rows, and the same scaled to an hour. Run as root; the namespaces are removed at the end."""
import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import duckdb  # noqa: E402

from netlab import NetPair, Recorder  # noqa: E402

# FLOWS connections, each sending CHUNK bytes every PERIOD seconds until told to stop.
CLIENT = textwrap.dedent("""
    import socket, sys, threading, time
    host, port, flows, chunk, period, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
    socks = [socket.create_connection((host, port)) for _ in range(flows)]
    end = time.time() + seconds
    data = b'x' * chunk
    def pace(s):
        while time.time() < end:
            s.sendall(data)
            time.sleep(period)
        s.close()
    threads = [threading.Thread(target=pace, args=(s,)) for s in socks]
    for t in threads: t.start()
    for t in threads: t.join()
""")


# Accepts FLOWS connections and reads them all at once (netlab's test server reads one at a time).
SERVER = textwrap.dedent("""
    import socket, sys, threading
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1024)
    print('ready', flush=True)
    got = []
    def drain(c):
        n = 0
        while True:
            d = c.recv(1 << 16)
            if not d: break
            n += len(d)
        got.append(n)
    threads = []
    for _ in range(int(sys.argv[3])):
        c, _ = s.accept()
        t = threading.Thread(target=drain, args=(c,)); t.start(); threads.append(t)
    for t in threads: t.join()
    print(sum(got), flush=True)
""")


def table_sizes(out):
    """Bytes and rows of each table's Parquet files under `out`."""
    con = duckdb.connect()
    sizes = {}
    for table in sorted(os.listdir(out)):
        files = [os.path.join(out, table, f) for f in os.listdir(os.path.join(out, table)) if f.endswith(".parquet")]
        if not files:
            continue
        rows = con.execute(f"SELECT count(*) FROM read_parquet({files!r})").fetchone()[0]
        sizes[table] = {"bytes": sum(os.path.getsize(f) for f in files), "rows": rows}
    return sizes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120, help="how long the flows send (default 120)")
    ap.add_argument("--flows", type=int, default=64, help="concurrent TCP flows (default 64)")
    ap.add_argument("--chunk", type=int, default=16384, help="bytes each flow sends per period (default 16 KiB)")
    ap.add_argument("--period", type=float, default=0.01, help="seconds between a flow's chunks (default 0.01)")
    ap.add_argument("--docs", default=os.path.join(HERE, "..", "docs"), help="where storage.md and storage.json go")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("storage.py: run as root (it creates network namespaces and loads eBPF)")

    binary = os.environ.get("SCALETRACE_BIN", os.path.join(HERE, "..", "target", "release", "scaletrace"))
    net = NetPair()
    try:
        with tempfile.TemporaryDirectory(prefix="st-storage-") as out:
            port = 5601
            server = subprocess.Popen(["ip", "netns", "exec", net.b, sys.executable, "-c", SERVER, net.b_ip, str(port), str(args.flows)],
                                      stdout=subprocess.PIPE, text=True)
            assert server.stdout.readline().strip() == "ready"
            # the recorder's defaults, but for the namespace to record
            rec = Recorder(out, "--netns", net.a, rtt_interval="10ms")
            # keep reading its status lines, or a long run fills the pipe and blocks it
            threading.Thread(target=lambda: rec.log.extend(rec.proc.stderr), daemon=True).start()
            started = time.time()
            net.run(net.a, sys.executable, "-c", CLIENT, net.b_ip, str(port), str(args.flows), str(args.chunk),
                    str(args.period), str(args.seconds), timeout=args.seconds + 120)
            elapsed = time.time() - started
            received = int(server.communicate(timeout=120)[0].split()[-1])
            rec.proc.send_signal(signal.SIGINT)
            assert rec.proc.wait(timeout=60) == 0, rec.stderr
            sizes = table_sizes(out)
    finally:
        net.close()

    per_hour = 3600 / elapsed
    total = sum(t["bytes"] for t in sizes.values())
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} CPUs, Linux {platform.release()}",
        "binary": binary,
        "command": " ".join(["python3", "bench/storage.py", *sys.argv[1:]]),
        "flows": args.flows, "seconds": elapsed, "bytes_received": received,
        "rate_mbit_per_flow": args.chunk * 8 / args.period / 1e6,
        "tables": sizes, "total_bytes": total, "bytes_per_node_hour": total * per_hour,
    }
    os.makedirs(args.docs, exist_ok=True)
    with open(os.path.join(args.docs, "storage.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [
        "# Storage: Parquet bytes per node-hour at the defaults",
        "",
        f"Generated by `{result['command']}` on {result['date']} ({result['machine']}). Raw data: `storage.json`.",
        "",
        f"One `scaletrace record` at its defaults (RTT samples at most every 10 ms per flow) on a node whose job kept "
        f"{args.flows} TCP flows sending the whole time ({result['rate_mbit_per_flow']:.1f} Mbit/s each, paced; "
        f"{received / 1e9:.2f} GB received in {elapsed:.0f} s): every flow is ACKed continuously, the RTT table's worst case. "
        "A training job's flows are idle between collectives and write less.",
        "",
        f"**{total * per_hour / 1e6:.0f} MB per node-hour** ({total / 1e6:.1f} MB in {elapsed:.0f} s); "
        f"1,000 nodes: {total * per_hour * 1000 / 1e9:.0f} GB per hour.",
        "",
        "| table | rows | bytes | bytes/row | MB per node-hour |",
        "|---|---|---|---|---|",
    ]
    for name, t in sorted(sizes.items(), key=lambda kv: -kv[1]["bytes"]):
        lines.append(f"| `{name}` | {t['rows']:,} | {t['bytes']:,} | {t['bytes'] / max(t['rows'], 1):.1f} | {t['bytes'] * per_hour / 1e6:.1f} |")
    lines += ["", "Rerun: `python3 bench/storage.py` (as root; `--seconds`, `--flows`; `SCALETRACE_BIN` selects the binary)."]
    with open(os.path.join(args.docs, "storage.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
