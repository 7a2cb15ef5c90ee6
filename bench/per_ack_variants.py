#!/usr/bin/env python3
"""The cut-short versions of sock_ops' per-ACK path that docs/per-ack-breakdown.md compares
(`bench/ab.py`): each edits `on_rtt` in scaletrace-ebpf/src/probes/tcp_sockops.rs in place, to
be built and copied aside, then restored (`git checkout` of that file). The code after each
early return stays in the program (reached only for cookie 0, which no socket has), so the
verifier sees the same program shape.

    python3 bench/per_ack_variants.py lookup && cargo build --release && cp target/release/scaletrace /tmp/lookup
    git checkout scaletrace-ebpf/src/probes/tcp_sockops.rs

  lookup      returns right after the flow table lookup
  aggregates  returns after the RTT aggregates, window roll and histogram bucket, before the
              stall and recovery ends and the sample's rate limit
  no-counter  the whole path without the per-ACK rate-limited counter
"""
import os
import sys

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scaletrace-ebpf", "src", "probes", "tcp_sockops.rs")
EARLY_RETURN = "    if cookie != 0 {\n        return Ok(());\n    }\n"
EDITS = {
    "lookup": ("    let ops = sock_ops(ctx);\n    let srtt_us = ops.srtt_us >> 3;",
               EARLY_RETURN + "    let ops = sock_ops(ctx);\n    let srtt_us = ops.srtt_us >> 3;"),
    "aggregates": ("    // An RTT sample means new data was acknowledged: a timeout stall is over.\n",
                   EARLY_RETURN + "    // An RTT sample means new data was acknowledged: a timeout stall is over.\n"),
    "no-counter": ("        count(STAT_RATE_LIMITED + EVENT_RTT_SAMPLE);\n        return Ok(());",
                   "        return Ok(());"),
}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in EDITS:
        sys.exit(f"usage: per_ack_variants.py {{{','.join(EDITS)}}}")
    old, new = EDITS[sys.argv[1]]
    with open(SOURCE) as f:
        text = f.read()
    if text.count(old) != 1:
        sys.exit(f"per_ack_variants.py: {SOURCE} has changed; the {sys.argv[1]} edit no longer applies")
    with open(SOURCE, "w") as f:
        f.write(text.replace(old, new))


if __name__ == "__main__":
    main()
