#!/usr/bin/env python3
"""`cargo xtask eval`: how well `scaletrace analyze` diagnoses a real PyTorch DDP job (gloo, CPU)
with one planted problem at a time, scored against the job's own step times. Writes
docs/diagnosis.md (the scorecard) and docs/diagnosis.json (raw). Run as root; the lab
(tests/ddplab.py) creates and removes its own network namespaces.

    python3 bench/eval.py                 # full matrix (about 15-20 minutes on 2 cores)
    python3 bench/eval.py --quick         # one repetition of one configuration (a few minutes)
    python3 bench/eval.py --seed 1234     # reproduce the planted nodes, ranks and sizes
    python3 bench/eval.py --onset start   # faults from the first step (priced without a healthy baseline)

By default each fault starts mid-run, at a step drawn from ONSET_STEPS: the steps before it are
the run's own healthy baseline, measured under the same machine load (a separate clean run on
2 shared cores differs by ±10 % in median step time, which is the size of a small fault).
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests"))
import ddplab  # noqa: E402
from ddplab import DDPLab, names_planted  # noqa: E402

# World size, topology (ranks per node) and model size vary between repetitions.
CONFIGS = [
    {"name": "4x1-mlp512", "nodes": 4, "ranks_per_node": 1, "hidden": 512, "layers": 4},
    {"name": "5x1-mlp768", "nodes": 5, "ranks_per_node": 1, "hidden": 768, "layers": 3},
    {"name": "3x2-mlp384", "nodes": 3, "ranks_per_node": 2, "hidden": 384, "layers": 6},
]
# Fault sizes, drawn per repetition (shuffled by the seed).
LOSS = [0.01, 0.02, 0.03]
LOSS_DIRECTIONS = ["both", "to", "from"]
RATES = ["400mbit", "200mbit", "100mbit"]
SLOW_MS = [20, 40, 80]
# reordering: one frame in REORDER_EVERY held back in a queue of this rate (tests/ddplab.py)
REORDER_EVERY = 16
REORDER_RATES = ["10mbit", "20mbit", "40mbit"]
# (reorder came last, with draws of its own: the other scenarios' runs of a seed stay as before)
SCENARIOS = ["clean", "loss", "rate_limit", "slow_rank", "reorder"]
ONSET_STEPS = (25, 40)  # a mid-run fault starts at a step drawn from this range (of --steps 80)
SKIP = 3  # warmup steps left out of every step-time statistic (connection setup, allocator)


def log(msg):
    print(f"[{datetime.datetime.now():%H:%M:%S}] {msg}", flush=True)


def describe(f):
    if f is None:
        return "(none)"
    where = ", ".join(x for x in (f"host {f.get('host')}" if f.get("host") else "",
                                  f"rank {f.get('rank')}" if f.get("rank") is not None else "") if x)
    return f"{f.get('category')}/{f.get('scope')}: {f.get('subject')}" + (f" ({where})" if where else "")


def flow_stats(fleet, ips):
    """Lab check from the recorded flows: retransmits, bytes and the flows between node IPs."""
    try:
        import duckdb
    except ImportError:
        return None
    con = duckdb.connect()
    try:
        rows = con.execute(f"""
            SELECT host, local_addr, remote_addr, local_port, remote_port, bytes_sent, bytes_received,
                   total_retrans FROM read_parquet('{fleet}/*/flows/*.parquet', union_by_name=true)""").fetchall()
    except Exception as e:  # noqa: BLE001 - a lab statistic, not the measurement
        return {"error": str(e)}
    node_ips = set(ips)
    between = [r for r in rows if r[1] in node_ips and r[2] in node_ips]
    per_host = {}
    for r in between:
        per_host[r[0]] = per_host.get(r[0], 0) + (r[7] or 0)
    return {"flows": len(rows), "node_flows": len(between),
            "bytes_sent": sum(r[5] or 0 for r in between),
            "retransmits": sum(r[7] or 0 for r in between), "retransmits_by_host": per_host}


def below_floors(fleet):
    """The analysis' suspects whose cost stayed below the verdict's floors (`st_below_floors`,
    largest first), and the floors themselves: what `analyze` prints under an empty verdict."""
    import duckdb
    proc = subprocess.run([ddplab.scaletrace_bin(), "sql", fleet], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"scaletrace sql failed on {fleet}: {proc.stderr.strip()[-500:]}")
    con = duckdb.connect()
    con.execute(proc.stdout)
    cur = con.execute("SELECT cause, culprit, host, rank, slow_steps, time_lost_s, lost_fraction, below "
                      "FROM st_below_floors ORDER BY time_lost_s DESC, culprit")
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    lost_s, fraction = con.execute("SELECT min_lost_s, min_lost_fraction FROM st_params").fetchone()
    return rows, {"min_lost_s": lost_s, "min_lost_fraction": fraction}


def baseline_run(rec, records):
    """The clean run that priced `rec` as its baseline: the first clean run of its repetition
    (recorded before the faults); the second one stays independent and measures the truth."""
    return next((c for c in records if c["scenario"] == "clean" and not c["error"] and c["rep"] == rec["rep"]
                 and os.path.basename(c["dir"]).startswith("clean-")), None)


def analyze_with_baseline(rec, records):
    """A fault from the first step has no healthy steps of its own: analyze it again with
    `--baseline` (a clean run of the same configuration), as an operator would compare with an
    earlier run of the job."""
    base = baseline_run(rec, records)
    if rec["error"] or rec["scenario"] == "clean" or rec.get("onset_step") or base is None:
        return
    out = os.path.join(rec["dir"], "findings-baseline.json")
    proc = subprocess.run([ddplab.scaletrace_bin(), "analyze", os.path.join(rec["dir"], "fleet"),
                           "--baseline", os.path.join(base["dir"], "fleet"), "--json", out, "--no-report"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"analyze --baseline failed on {rec['dir']}: {proc.stderr.strip()[-500:]}")
    with open(out) as f:
        rec["findings_baseline"] = json.load(f)
    rec["baseline_dir"] = base["dir"]


def run_one(args, cfg, scenario, rep, rng_draw, out_dir):
    """Builds a lab, runs the job with the fault planted at its onset step; returns the raw
    record of the run."""
    onset = 0 if scenario == "clean" else rng_draw["onset"]
    rec = {"scenario": scenario, "rep": rep, "config": cfg["name"], "nodes": cfg["nodes"],
           "ranks_per_node": cfg["ranks_per_node"], "world_size": cfg["nodes"] * cfg["ranks_per_node"],
           "hidden": cfg["hidden"], "layers": cfg["layers"], "steps": args.steps, "planted": None, "error": None,
           "onset_step": onset}
    # the second clean run of a repetition gets its own directory
    name = scenario if scenario != "clean" or not rng_draw.get("second") else "clean2"
    run_dir = os.path.join(out_dir, f"{name}-r{rep}-{cfg['name']}")
    shutil.rmtree(run_dir, ignore_errors=True)
    rec["dir"] = run_dir
    t0 = time.time()
    try:
        with DDPLab(cfg["nodes"], cfg["ranks_per_node"]) as lab:
            slow_rank, slow_ms, plant = None, 0, None
            if scenario == "loss":
                node, prob, direction = rng_draw["node"], rng_draw["loss"], rng_draw["direction"]
                plant = lambda lab: lab.loss(node, prob, direction)  # noqa: E731
                rec["planted"] = {"kind": "loss", "node": node, "host": lab.hostname(node), "ip": lab.ips[node],
                                  "size": f"{prob:.0%} {direction}"}
            elif scenario == "rate_limit":
                node, rate = rng_draw["node"], rng_draw["rate"]
                plant = lambda lab: lab.rate_limit(node, rate)  # noqa: E731
                rec["planted"] = {"kind": "rate_limit", "node": node, "host": lab.hostname(node),
                                  "ip": lab.ips[node], "size": rate}
            elif scenario == "reorder":
                node, rate = rng_draw["node"], rng_draw["reorder_rate"]
                plant = lambda lab: lab.reorder(node, REORDER_EVERY, rate)  # noqa: E731
                rec["planted"] = {"kind": "reorder", "node": node, "host": lab.hostname(node),
                                  "ip": lab.ips[node], "size": f"1 in {REORDER_EVERY} at {rate}"}
            elif scenario == "slow_rank":
                slow_rank, slow_ms = rng_draw["rank"], rng_draw["slow_ms"]
                node = lab.node_of_rank(slow_rank)
                rec["planted"] = {"kind": "slow_rank", "rank": slow_rank, "node": node, "host": lab.hostname(node),
                                  "ip": lab.ips[node], "size": f"{slow_ms} ms/step"}
            run = lab.run_job(run_dir, steps=args.steps, hidden=cfg["hidden"], layers=cfg["layers"],
                              slow_rank=slow_rank, slow_ms=slow_ms, fault_from_step=onset, plant=plant,
                              log=lambda m: log("  " + m))
            split = run.healthy_and_faulted(SKIP)
            rec.update(ips=lab.ips, mode=lab.mode, dropped_packets=run.dropped, timings=run.timings,
                       time_lost_in_run_s=run.time_lost_in_run(SKIP),
                       healthy_median_step_s=statistics.median(split[0]) if split else None,
                       faulted_median_step_s=statistics.median(split[1]) if split else None,
                       step_times_s=run.step_times(SKIP), median_step_s=run.median_step(SKIP),
                       findings=run.findings, analyze_summary=(run.analyze_output.splitlines() or [""])[0],
                       flow_stats=flow_stats(run.fleet, lab.ips))
            rec["below_floors"], rec["floors"] = below_floors(run.fleet)
    except Exception as e:  # noqa: BLE001 - one failed run must not end the matrix
        rec["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    rec["wall_s"] = time.time() - t0
    # 1-minute load average after the run: the lab's own ranks and recorders plus anything else
    # on the machine (a build moves every step time; compare with the clean runs')
    rec["loadavg_1m"] = os.getloadavg()[0]
    return rec


def score(records):
    """Adds the clean baseline, measured and estimated time lost, and the verdicts."""
    clean = {}
    for r in records:
        if r["scenario"] == "clean" and not r["error"]:
            clean.setdefault(r["config"], []).extend(r["step_times_s"])
    for r in records:
        if r["error"]:
            continue
        base = statistics.median(clean[r["config"]]) if r["config"] in clean else None
        r["clean_median_step_s"] = base
        r["mean_step_s"] = statistics.mean(r["step_times_s"])
        r["lost_vs_clean_s"] = sum(s - base for s in r["step_times_s"]) if base is not None else None
        # a mid-run fault is measured against the same run's healthy steps; one from the start
        # only against the clean runs
        in_run = r.get("time_lost_in_run_s")
        r["measured_against"] = "healthy steps" if in_run is not None else "clean runs"
        r["measured_lost_s"] = in_run if in_run is not None else r["lost_vs_clean_s"]
        found = r["findings"] or []
        first = found[0] if found else None
        r["n_findings"] = len(found)
        r["first"] = describe(first)
        r["estimated_lost_s"] = first.get("time_lost_s") if first else None
        # the training step the verdict says the problem began at (`first_step`)
        r["began_at_step"] = first.get("first_step") if first else None
        if r["scenario"] == "clean":
            r["right"] = len(found) == 0
            r["lost_error"] = None
            continue
        # A fault that cost the job less than the verdict's floors is within what two healthy
        # runs differ by: no finding is the right answer (one naming it is right too). Such runs
        # are scored apart, with the largest suspect below the floors (what analyze prints under
        # an empty verdict) in place of the first finding.
        floors = r["floors"]
        job_s = sum(r["step_times_s"])
        meas = r["measured_lost_s"]
        r["measured_fraction"] = meas / job_s if meas is not None and job_s else None
        r["below_floors_fault"] = meas is not None and (
            meas < floors["min_lost_s"] or meas < floors["min_lost_fraction"] * job_s)
        closest = (r.get("below_floors") or [None])[0]
        r["closest_below_floors"] = closest and f"{closest['cause']}: {closest['culprit']}"
        r["closest_names_planted"] = bool(closest) and names_planted(closest, r["planted"])
        if r["below_floors_fault"]:
            r["right"] = first is None or names_planted(first, r["planted"])
            if first is None and closest is not None:
                r["estimated_lost_s"] = closest["time_lost_s"]
        else:
            r["right"] = names_planted(first, r["planted"])
        base_first = next((c["findings"][0] for c in records if c["scenario"] == "clean" and not c["error"]
                           and c["config"] == r["config"] and c["findings"]), None)
        key = lambda f: (f.get("category"), f.get("scope"), f.get("subject"))  # noqa: E731
        r["same_as_clean"] = bool(first and base_first and key(first) == key(base_first))
        hits = [i for i, f in enumerate(found) if names_planted(f, r["planted"])]
        r["first_naming_position"] = hits[0] + 1 if hits else None
        est = r["estimated_lost_s"]
        r["lost_error"] = abs(est - meas) / meas if est is not None and meas and meas > 0 else None
        if r.get("findings_baseline") is not None:
            # priced against the first clean run; measured against the other one, so that the
            # estimate and the truth do not share a baseline (their difference is run-to-run noise
            # plus the attribution)
            fb = r["findings_baseline"]
            r["first_baseline"] = describe(fb[0]) if fb else "(none)"
            r["right_baseline"] = names_planted(fb[0] if fb else None, r["planted"])
            r["estimated_lost_baseline_s"] = fb[0].get("time_lost_s") if fb else None
            others = [c for c in records if c["scenario"] == "clean" and not c["error"]
                      and c["config"] == r["config"] and c["dir"] != r.get("baseline_dir")]
            other_steps = [x for c in others for x in c["step_times_s"]]
            other = statistics.median(other_steps) if other_steps else None
            base = next((c for c in records if c["dir"] == r.get("baseline_dir")), None)
            r["baseline_median_step_s"] = base and base["median_step_s"]
            r["other_clean_median_step_s"] = other
            r["measured_vs_other_clean_s"] = sum(x - other for x in r["step_times_s"]) if other is not None else None
            e, m = r["estimated_lost_baseline_s"], r["measured_vs_other_clean_s"]
            r["lost_error_baseline"] = abs(e - m) / m if e is not None and m and m > 0 else None
    return records


def baseline_totals(faulty):
    """Totals of the analyses priced against a baseline run (faults from the first step)."""
    rs = [r for r in faulty if r.get("findings_baseline") is not None]
    if not rs:
        return {}
    errors = [r["lost_error_baseline"] for r in rs if r.get("lost_error_baseline") is not None]
    return {"baseline_runs": len(rs), "baseline_named_right": sum(bool(r["right_baseline"]) for r in rs),
            "baseline_runs_with_estimate": len(errors),
            "baseline_median_error": statistics.median(errors) if errors else None,
            "baseline_within_30_percent": sum(e <= 0.3 for e in errors)}


def fmt(x, digits=2, unit=""):
    return "–" if x is None else f"{x:.{digits}f}{unit}"


def totals(records):
    faulty = [r for r in records if r["scenario"] != "clean"]
    ok_faulty = [r for r in faulty if not r["error"]]
    cleans = [r for r in records if r["scenario"] == "clean" and not r["error"]]
    below = [r for r in ok_faulty if r.get("below_floors_fault")]
    above = [r for r in ok_faulty if not r.get("below_floors_fault")]
    errors = [r["lost_error"] for r in above if r.get("lost_error") is not None]
    below_errors = [r["lost_error"] for r in below if r.get("lost_error") is not None]
    per = {}
    for s in SCENARIOS[1:]:
        rs = [r for r in above if r["scenario"] == s]
        per[s] = {"runs": len(rs), "named_right": sum(r["right"] for r in rs)}
    return {"fault_runs": len(above), "named_right": sum(r["right"] for r in above),
            "named_right_rate": (sum(r["right"] for r in above) / len(above)) if above else None,
            "below_floor_runs": len(below), "below_floor_right": sum(r["right"] for r in below),
            "below_floor_closest_named": sum(r["closest_names_planted"] for r in below),
            "below_floor_errors": below_errors,
            "below_floor_measured": [r["measured_fraction"] for r in below],
            "clean_closest_fraction": [((r.get("below_floors") or [{}])[0].get("lost_fraction")) for r in cleans],
            "per_scenario": per, "clean_runs": len(cleans),
            "verdict_same_as_clean": sum(bool(r.get("same_as_clean")) for r in above),
            "chance": statistics.mean(1 / (r["world_size"] if r["scenario"] == "slow_rank" else r["nodes"])
                                      for r in above) if above else None,
            "clean_runs_without_findings": sum(r["n_findings"] == 0 for r in cleans),
            "clean_findings": [r["n_findings"] for r in cleans],
            "runs_with_estimate": len(errors), "median_time_lost_error": statistics.median(errors) if errors else None,
            "within_30_percent": sum(e <= 0.3 for e in errors),
            # began at − planted step, for the right verdicts of faults planted mid-run
            "onset_offsets": [r["began_at_step"] - r["onset_step"] for r in above
                              if r["right"] and r.get("onset_step") and r.get("began_at_step") is not None],
            "onset_runs": sum(1 for r in above if r["right"] and r.get("onset_step")),
            **baseline_totals(ok_faulty),
            "failed_runs": [f"{r['scenario']} r{r['rep']}: {r['error']}" for r in records if r["error"]]}


def below_note(r):
    """For a fault that cost less than the floors: what the table's estimate is, and the largest
    suspect below them."""
    if not r.get("below_floors_fault"):
        return ""
    return (f" — fault below the floors ({fmt(100 * r['measured_fraction'], 1)} % of the job); largest suspect "
            f"below them: {r.get('closest_below_floors') or 'none'}")


def markdown(meta, records, tot):
    # the floors as the analysis read them (st_params), not as this script remembers them
    floors = next((r["floors"] for r in records if r.get("floors")), None) or {
        "min_lost_s": float("nan"), "min_lost_fraction": float("nan")}
    L = ["# Diagnosis scorecard: `scaletrace analyze` on a real DDP job", "",
         f"Generated by `{meta['command']}` on {meta['date']} ({meta['cpus']} CPUs, Linux {meta['kernel']}, "
         f"torch {meta['torch']}, {meta['scaletrace']}); seed {meta['seed']}, {meta['steps']} steps per job, "
         f"{meta['wall_min']:.1f} minutes in all. Raw data: `diagnosis.json`."
         + (f" The recorded runs were analyzed again on {meta['rescored']} (`--rescore`) by the binary named above."
            if meta.get("rescored") else ""), "",
         "## Totals", "",
         f"- **First finding names the planted problem: {tot['named_right']} of {tot['fault_runs']} runs** "
         "whose fault cost the job at least the verdict's floors"
         + (f" ({tot['named_right_rate']:.0%})" if tot["named_right_rate"] is not None else "")
         + " — " + ", ".join(f"{s}: {v['named_right']}/{v['runs']}" for s, v in tot["per_scenario"].items()) + ".",
         f"- For scale: a verdict that always named the same node would be right about "
         f"{fmt(tot['chance'] and 100 * tot['chance'], 0)} % of the time; in {tot['verdict_same_as_clean']} of "
         f"{tot['fault_runs']} fault runs the first finding was the same (category, scope, subject) as on the clean "
         "run of the same configuration.",
         f"- **Clean runs without any finding: {tot['clean_runs_without_findings']} of {tot['clean_runs']}** "
         f"(findings per clean run: {tot['clean_findings']}).",
         f"- **Median time-lost error** |estimated − measured| / measured: {fmt(tot['median_time_lost_error'])} "
         f"over {tot['runs_with_estimate']} fault runs whose first finding carries `time_lost_s`; "
         f"within 30 %: {tot.get('within_30_percent', '–')} of {tot['fault_runs']} fault runs"
         + (" (today's binary gives no estimate)" if tot["runs_with_estimate"] == 0 else "") + ".",
         f"- **When it began**: the verdict's first step was the planted step in "
         f"{sum(o == 0 for o in tot['onset_offsets'])} of {tot['onset_runs']} right verdicts of faults planted mid-run, "
         f"within 1 step in {sum(abs(o) <= 1 for o in tot['onset_offsets'])}; its offsets (steps): {tot['onset_offsets']}.",
         ]
    if tot.get("below_floor_runs"):
        n = tot["below_floor_runs"]
        L.append(f"- **Faults that cost less than the floors** (measured below 5 % of the job's time or 0.2 s: "
                 f"{', '.join(fmt(100 * x, 1, ' %') for x in tot['below_floor_measured'])}): {n} run(s), scored "
                 f"apart — no finding is right for them, and the verdict was empty (or named the fault) in "
                 f"{tot['below_floor_right']} of {n}; the largest suspect below the floors, which analyze prints "
                 f"under an empty verdict, named the planted problem in {tot['below_floor_closest_named']} of {n}"
                 + (f", its cost off by {', '.join(fmt(e) for e in tot['below_floor_errors'])}"
                    if tot["below_floor_errors"] else "") + ".")
    if any(x is not None for x in tot.get("clean_closest_fraction", [])):
        L.append("- For comparison, the largest suspect below the floors on each clean run (noise the floors keep "
                 "out): " + ", ".join("none" if x is None else fmt(100 * x, 1, " %") for x in tot["clean_closest_fraction"])
                 + " of the traced time.")
    if tot.get("baseline_runs"):
        L.append(f"- **Priced against a baseline run** (`analyze --baseline`, the repetition's first clean run; "
                 f"measured against its other clean run): first finding right in {tot['baseline_named_right']} of "
                 f"{tot['baseline_runs']}, median time-lost error {fmt(tot['baseline_median_error'])}, within 30 %: "
                 f"{tot['baseline_within_30_percent']} of {tot['baseline_runs']} (table at the end of the runs).")
    if tot["failed_runs"]:
        L.append(f"- Runs that failed (not scored): {'; '.join(tot['failed_runs'])}.")
    L += ["", "Columns: *from step* is the step the fault started at (0: before the job); *began at* is the "
          "step the first finding says it began at (`first_step`); *healthy / faulted "
          "median* is the median step before and from it (a step's duration is the median over ranks of each "
          f"rank's step, first {SKIP} steps left out); *clean / run median* the median step of the clean runs of "
          "the same configuration and of this whole run; *measured lost* is the sum over the faulted steps of "
          "(step − healthy median) — for a fault from step 0 (marked *vs clean*) the sum over all steps of "
          "(step − clean median), which carries the load difference between two runs; *estimated* is the first finding's "
          "`time_lost_s` (for a fault below the floors under an empty verdict: the largest suspect's below them); *right?* says whether the first finding's `host` or `subject` names the planted node "
          "(hostname or IP) — for a slow rank its `rank` (or, for a finding without a rank, its host); "
          "*hit at* is the position of the first finding that names it; *retrans* counts the retransmits "
          "the recorders saw on the flows between node IPs; *load* is the 1-minute load average after the run (the "
          "lab's ranks and recorders plus anything else on the machine: a build running beside the eval moves "
          "every step time, so a measured loss near zero or below it is within the noise).", ""]
    for s in SCENARIOS:
        rs = [r for r in records if r["scenario"] == s]
        if not rs:
            continue
        L += [f"## {s.replace('_', ' ')}", ""]
        if s == "clean":
            L += ["| rep | config | world | run median ms | load | retrans | findings | first finding | pass? |",
                  "|---|---|---|---|---|---|---|---|---|"]
            for r in rs:
                if r["error"]:
                    L.append(f"| {r['rep']} | {r['config']} | {r['world_size']} | failed: {r['error'][:80]} | | | | | |")
                    continue
                fs = r.get("flow_stats") or {}
                L.append(f"| {r['rep']} | {r['config']} | {r['world_size']} | {r['median_step_s'] * 1e3:.0f} | "
                         f"{r['loadavg_1m']:.1f} | {fs.get('retransmits', '–')} | {r['n_findings']} | {r['first']} | "
                         f"{'yes' if r['right'] else 'no'} |")
        else:
            L += ["| rep | config | world | planted | size | from step | began at | healthy / faulted median ms | clean / run median ms "
                  "| load | measured lost s | estimated s | error | retrans | first finding | right? | hit at | findings |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in rs:
                p = r["planted"] or {}
                what = f"rank {p.get('rank')} ({p.get('host')})" if s == "slow_rank" else f"{p.get('host')} ({p.get('ip')})"
                if r["error"]:
                    L.append(f"| {r['rep']} | {r['config']} | {r['world_size']} | {what} | {p.get('size')} | "
                             f"{r.get('onset_step', 0)} | failed: {r['error'][:80]} | | | | | | | | | | | |")
                    continue
                fs = r.get("flow_stats") or {}
                healthy, faulted = r.get("healthy_median_step_s"), r.get("faulted_median_step_s")
                L.append(f"| {r['rep']} | {r['config']} | {r['world_size']} | {what} | {p.get('size')} | "
                         f"{r.get('onset_step', 0)} | {r.get('began_at_step') if r.get('began_at_step') is not None else '–'} | "
                         f"{fmt(healthy and healthy * 1e3, 0)} / {fmt(faulted and faulted * 1e3, 0)} | "
                         f"{fmt(r['clean_median_step_s'] and r['clean_median_step_s'] * 1e3, 0)} / "
                         f"{r['median_step_s'] * 1e3:.0f} | {r['loadavg_1m']:.1f} | {fmt(r['measured_lost_s'])}"
                         f"{'' if r.get('measured_against') == 'healthy steps' else ' (vs clean)'} | "
                         f"{fmt(r['estimated_lost_s'])} | {fmt(r['lost_error'])} | {fs.get('retransmits', '–')} | "
                         f"{r['first']}{below_note(r)} | {'yes' if r['right'] else 'no'} | "
                         f"{r.get('first_naming_position') or '–'} | "
                         f"{r['n_findings']} |")
        L.append("")
    based = [r for r in records if r.get("findings_baseline") is not None]
    if based:
        L += ["## Priced against a baseline run", "",
              "The same fault runs analyzed again with `--baseline <the repetition's first clean run>`, as an "
              "operator compares a slow job with an earlier run of it. *Measured* is against the *other* clean "
              "run of the configuration (so estimate and truth share no baseline: two clean runs of one "
              "configuration differ by up to a quarter on this machine, and that noise is in the error).", "",
              "| scenario | rep | config | planted | size | baseline median ms | other clean median ms | measured lost s | "
              "estimated s | error | first finding | right? |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in based:
            p = r["planted"] or {}
            what = f"rank {p.get('rank')} ({p.get('host')})" if r["scenario"] == "slow_rank" else f"{p.get('host')}"
            base, other = r["baseline_median_step_s"], r["other_clean_median_step_s"]
            L.append(f"| {r['scenario']} | {r['rep']} | {r['config']} | {what} | {p.get('size')} | "
                     f"{fmt(base and base * 1e3, 0)} | "
                     f"{fmt(other and other * 1e3, 0)} | {fmt(r['measured_vs_other_clean_s'])} | "
                     f"{fmt(r['estimated_lost_baseline_s'])} | {fmt(r['lost_error_baseline'])} | "
                     f"{r['first_baseline']} | {'yes' if r['right_baseline'] else 'no'} |")
        L.append("")
    L += ["## The lab", "",
          "- **Job**: `tests/ddp_train.py`, real PyTorch DistributedDataParallel on CPU with the gloo backend, "
          "TCP rendezvous at node0, one process per rank, `torch.set_num_threads(1)`; an MLP (64 → hidden × "
          "layers → 10) with `bucket_cap_mb=1`, so every step all-reduces several gradient buckets; the PyTorch "
          "profiler (CPU activity) records the steady state (after the first "
          f"{SKIP} steps) into one Kineto Chrome trace per rank. Each rank writes its ground truth: wall "
          "start/end of every step (UTC ns), rank, world size, hostname.",
          "- **Nodes and switch**: `tests/ddplab.py`. Each node is a network namespace with its own hostname "
          "(UTS namespace: `nodeK`), its `eth0` a veth to a switch namespace holding a Linux bridge. "
          "br_netfilter is present (`/proc/sys/net/bridge`; per namespace since Linux 5.3), so the switch's "
          "iptables FORWARD chain sees bridged traffic and `-m physdev` selects a node's port; without it the "
          "lab falls back to a routed switch (a /30 per node). Jumbo frames (MTU 9000) and `gso_max_segs 1` on "
          "every veth: each packet crossing the switch is one wire frame, so a drop loses one frame, not a "
          "64 KB GSO burst. RPS on every veth end keeps each flow on one CPU's backlog: without it veth "
          "reorders a flow sent from two CPUs (its process and its ACK processing), and RACK retransmitted "
          "~0.1 % of the segments of a clean run (87 retransmits in a 40-step 4-node run; 0 with RPS). Tail "
          "loss probes are off in the nodes (`tcp_early_retrans=0`): stalls of 2 shared CPUs would fire them.",
          "- **Faults**, one per run, on a node drawn by the seed: *loss* — iptables `statistic --mode random` "
          "DROP of TCP in the switch on that node's port, toward it (`to`: its peers retransmit), from it "
          "(`from`: it retransmits) or both; never inside the node, where a DROP only fails the send locally "
          "and is no wire loss. *rate_limit* — tc tbf (20 ms queue) on the switch port toward the node and on "
          "the node's egress. *reorder* — one frame in 16 (IP ID's low bits zero) held back in a slow HTB "
          "class on the same two queues, so it arrives after later ones (reordering without netem). *slow_rank* — that rank busy-loops the given time every step before backward "
          "(a slow data loader). "
          + ("Each fault starts mid-run, at a step drawn from "
             f"{ONSET_STEPS[0]}..{ONSET_STEPS[1]} (of 80): rank 0 signals the step's start and the lab plants the "
             "rule then, without pausing the job; the slow rank starts its extra work at that step."
             if meta.get("onset", "start") == "mid" else "Each fault is planted before the job starts."),
          "- **Recording**: one `scaletrace record --netns <node ns> --no-gpu` per node, run inside the node "
          "under its hostname (so every file carries it and the node's own eth0 is in its NIC tables), all "
          "writing one fleet tree `fleet/nodeK`; started before the job, stopped (SIGINT) after it. Then "
          "`scaletrace import rankR.pt.trace.json --host nodeK --rank R --out fleet/nodeK` and `scaletrace "
          "analyze fleet --json findings.json --report report.html`.",
          "- **Matrix**: scenarios clean, loss, rate_limit, slow_rank, reorder; per repetition a configuration "
          "(world size and ranks per node, model size) in turn: "
          + "; ".join(f"`{c['name']}` ({c['nodes']} nodes × {c['ranks_per_node']} rank, hidden {c['hidden']}, "
                      f"{c['layers']} layers)" for c in CONFIGS)
          + f"; fault sizes drawn from loss {LOSS} ({'/'.join(LOSS_DIRECTIONS)}), rate {RATES}, reorder queue {REORDER_RATES}, slow "
          f"{SLOW_MS} ms. Every run is a fresh lab; the clean runs of a configuration give the precision check (no finding) and the baseline of faults planted from step 0.",
          "- **Limits**: all nodes share 2 CPUs, so a node's CPU is not its own (a busy rank also slows the "
          "kernel's forwarding for everyone) and anything else running on the machine (a build) moves the "
          "step times; veth has no real wire: the base RTT is tens of microseconds, so loss recovery is "
          "dominated by the 200 ms minimum RTO. The TCPStore (node0:29500) connections and gloo's full mesh "
          "are recorded too: with one rank per node the ring sends rank r → r−1, the other pairs carry only "
          "the initial broadcast and barriers.",
          "- **What the time-lost error measures**: `analyze` prices a culprit by the job's own step times "
          "(`ProfilerStep#N` in the traces: the iterations with the culprit's evidence, and those between them without "
          "any when they were as slow, above the median of the iterations without any — those outside every "
          "culprit's span of evidence when there are enough of them), and the ground truth is the ranks' own step timing against the same run's "
          "healthy steps. The two clocks agree to the µs on every step, so the error is the attribution: faulted "
          "iterations the evidence missed, healthy ones it blamed, and the healthy median drawn from the profiled "
          "steps. It is not a model of what a fault should cost.",
          "- **Faults from the first step** (`--onset start`) leave no healthy iterations of their own. Without a "
          "baseline, `analyze` prices a loss by its evidence (the stalls' own duration: `priced_by = 'evidence'`), "
          "a straggler by its extra own work per step (`own_time`: the time the others waited for it — on this "
          "machine the ranks share 2 CPUs, so the job loses less than that: a busy rank's work also takes CPU "
          "from the others, and their work from it), and names a slow link unpriced (every step is equally "
          "slow). With `--baseline <a clean run>` every culprit is priced by step time against the baseline's "
          "(the section *Priced against a baseline run*).",
          f"- **Floors**: a culprit must cost ≥ {100 * floors['min_lost_fraction']:.0f} % of the traced time "
          f"(`min_lost_fraction`) and ≥ {floors['min_lost_s']:.2g} s (`min_lost_s`): two clean runs of one configuration differ by more than that here. A smaller fault "
          "(a 20 ms busy loop on a rank that shares 2 CPUs with the others cost 2-6 % of a run) is below them by "
          "design: `analyze` prints it under an empty verdict as the largest suspect *below the floors*, with "
          "its cost, and the scorecard scores such runs apart (measured against the same floors).",
          "",
          "## Rerun", "",
          "```sh", "cargo xtask eval                       # full matrix, rewrites docs/diagnosis.{md,json}",
          "cargo xtask eval -- --seed " + str(meta["seed"]) + "      # the same draws as this scorecard",
          "python3 bench/eval.py --quick          # one repetition (SCALETRACE_BIN or target/release/scaletrace)",
          "pytest tests/test_diagnosis_ddp.py     # the reduced matrix CI runs", "```",
          "",
          f"Each run's directory (fleet tree, Kineto traces, ground truth, findings, report) is under `{meta['out']}`.",
          ""]
    return "\n".join(L)


def write_docs(docs, meta, records, tot):
    binary = ddplab.scaletrace_bin()
    with open(binary, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    built = datetime.datetime.fromtimestamp(os.path.getmtime(binary), datetime.timezone.utc)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    meta["scaletrace"] = f"{version}, binary sha256 {digest}… built {built:%Y-%m-%d %H:%M} UTC"
    os.makedirs(docs, exist_ok=True)
    with open(os.path.join(docs, "diagnosis.json"), "w") as f:
        json.dump({"meta": meta, "totals": tot, "configs": CONFIGS, "runs": records}, f, indent=1)
    with open(os.path.join(docs, "diagnosis.md"), "w") as f:
        f.write(markdown(meta, records, tot))
    log(f"named right {tot['named_right']}/{tot['fault_runs']}, clean runs without findings "
        f"{tot['clean_runs_without_findings']}/{tot['clean_runs']}, median time-lost error "
        f"{fmt(tot['median_time_lost_error'])}; wrote {docs}/diagnosis.md and diagnosis.json")


def rescore(args):
    """The recorded runs of an earlier eval, analyzed again by the current binary."""
    with open(args.rescore) as f:
        earlier = json.load(f)
    records = earlier["runs"]
    for rec in records:
        if rec["error"]:
            continue
        out = os.path.join(rec["dir"], "findings.json")
        proc = subprocess.run([ddplab.scaletrace_bin(), "analyze", os.path.join(rec["dir"], "fleet"),
                               "--json", out, "--no-report"], capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"analyze failed on {rec['dir']}: {proc.stderr.strip()}")
        with open(out) as f:
            rec["findings"] = json.load(f)
        rec["analyze_summary"] = (proc.stdout.splitlines() or [""])[0]
        rec["below_floors"], rec["floors"] = below_floors(os.path.join(rec["dir"], "fleet"))
        analyze_with_baseline(rec, records)
        log(f"{os.path.basename(rec['dir'])}: {len(rec['findings'])} finding(s); first: "
            f"{describe(rec['findings'][0]) if rec['findings'] else '(none)'}")
    score(records)
    tot = totals(records)
    meta = dict(earlier["meta"], rescored=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    write_docs(args.docs or os.path.dirname(os.path.abspath(args.rescore)), meta, records, tot)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3, help="repetitions per scenario (each a configuration in turn)")
    p.add_argument("--steps", type=int, default=80, help="training steps per job")
    p.add_argument("--seed", type=int, default=None, help="seed of the planted nodes, ranks and sizes")
    p.add_argument("--scenarios", nargs="+", default=SCENARIOS, choices=SCENARIOS)
    p.add_argument("--onset", choices=("mid", "start"), default="mid",
                   help="mid: each fault starts at a step drawn from %s (per 80 steps), after healthy steps "
                        "of the same run; start: from the first step" % (ONSET_STEPS,))
    p.add_argument("--no-clean-after", dest="clean_after", action="store_false",
                   help="one clean baseline per repetition (before the faults) instead of two (before and after)")
    p.add_argument("--quick", action="store_true",
                   help="1 repetition of the first configuration, 40 steps; writes to --out only unless --docs")
    p.add_argument("--out", default=None, help="run directories (default /tmp/scaletrace-eval-SEED)")
    p.add_argument("--docs", default=None, help="where diagnosis.md/.json go (default docs/, or --out for --quick)")
    p.add_argument("--rescore", metavar="DIAGNOSIS_JSON", default=None,
                   help="analyze the runs recorded in this diagnosis.json again with the current binary "
                        "(same jobs, same data: for a change of the analysis) and rewrite the scorecard")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("eval.py creates network namespaces and loads eBPF: run it as root")
    if not os.path.exists(ddplab.scaletrace_bin()):
        sys.exit(f"{ddplab.scaletrace_bin()} missing: build it (cargo xtask build) or set SCALETRACE_BIN")
    if args.rescore:
        return rescore(args)
    if args.quick:
        args.reps = 1
        args.steps = 40 if args.steps == 80 else args.steps
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    rng = random.Random(seed)
    out = os.path.abspath(args.out or f"/tmp/scaletrace-eval-{seed}")
    docs = args.docs or (out if args.quick else os.path.join(ROOT, "docs"))
    os.makedirs(out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # labs are closed on the way out
    log(f"eval: seed {seed}, {args.reps} repetition(s) × {args.scenarios}, {args.steps} steps per job, runs in {out}")

    loss, rates, slows, dirs = LOSS[:], RATES[:], SLOW_MS[:], LOSS_DIRECTIONS[:]
    for xs in (loss, rates, slows, dirs):
        rng.shuffle(xs)
    reorder_rng = random.Random(f"{seed}-reorder")
    reorder_rates = REORDER_RATES[:]
    reorder_rng.shuffle(reorder_rates)
    records, t0 = [], time.time()
    total = args.reps * (len(args.scenarios) + ("clean" in args.scenarios and args.clean_after))
    for rep in range(args.reps):
        cfg = CONFIGS[rep % len(CONFIGS)]
        world = cfg["nodes"] * cfg["ranks_per_node"]
        draw = {"node": None, "loss": loss[rep % 3], "direction": dirs[rep % 3], "rate": rates[rep % 3],
                "slow_ms": slows[rep % 3], "reorder_rate": reorder_rates[rep % 3]}
        # clean first and (unless --no-clean-after) last: the baseline of this configuration,
        # taken on both sides of the faults so that a drift in the machine's load averages out
        order = [s for s in SCENARIOS if s in args.scenarios]
        if "clean" in order and args.clean_after:
            order.append("clean")
        for i, scenario in enumerate(order):
            lo, hi = (round(x * args.steps / 80) for x in ONSET_STEPS)
            r = reorder_rng if scenario == "reorder" else rng
            d = dict(draw, node=r.randrange(cfg["nodes"]), rank=r.randrange(world),
                     onset=r.randint(lo, hi) if args.onset == "mid" else 0, second=scenario in order[:i])
            n = len(records) + 1
            log(f"run {n}/{total}: {scenario}, rep {rep}, {cfg['name']} (world {world})")
            rec = run_one(args, cfg, scenario, rep, d, out)
            records.append(rec)
            try:
                analyze_with_baseline(rec, records)
            except RuntimeError as e:
                rec["error"] = str(e)
            if rec["error"]:
                log(f"  failed: {rec['error']}")
                continue
            p = rec["planted"]
            fs = rec.get("flow_stats") or {}
            log(f"  planted {p['kind']} {p.get('host')} rank {p.get('rank')} {p['size']}" if p else "  planted nothing")
            log(f"  median step {rec['median_step_s'] * 1e3:.0f} ms, mean {statistics.mean(rec['step_times_s']) * 1e3:.0f} ms, "
                f"dropped {rec['dropped_packets']}, retransmits {fs.get('retransmits')}, {rec['wall_s']:.0f} s")
            fnd = rec["findings"] or []
            log(f"  analyze: {len(fnd)} finding(s); first: {describe(fnd[0]) if fnd else '(none)'}")
    score(records)
    tot = totals(records)
    meta = {"command": "python3 bench/eval.py " + " ".join(sys.argv[1:]), "date": datetime.datetime.now(
        datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(), "kernel": platform.release(),
        "seed": seed, "steps": args.steps, "reps": args.reps, "out": out, "onset": args.onset, "wall_min": (time.time() - t0) / 60}
    meta["torch"] = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    write_docs(docs, meta, records, tot)
    return 1 if tot["failed_runs"] else 0


if __name__ == "__main__":
    sys.exit(main())
