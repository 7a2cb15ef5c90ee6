"""The reduced diagnosis matrix of `cargo xtask eval` (bench/eval.py): a real PyTorch DDP job
(gloo, CPU, 4 ranks in 4 node namespaces behind a bridge, tests/ddplab.py), recorded by one
`scaletrace record` per node, its Kineto traces imported, then `scaletrace analyze`; once
clean, once with random loss on one node's switch port, once with a rate limit on another
node's link, once with reordering on a third (no netem: one frame in 16 held back in a slow
queue), once with a slow rank. Each fault starts at step ONSET, so the steps before it
are the run's own healthy baseline (the ground truth of the time lost).

The tests without a marker check the lab itself, whatever the diagnosis says: the traces hold
the gloo collectives, a fault slows the job measurably, the recorders saw the DDP flows between
the node IPs (with retransmits under loss) under each node's own hostname. The `diagnosis`
tests check `analyze`'s verdict against the planted problem."""
import datetime
import glob
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess

import duckdb
import pytest

from ddplab import DDPLab, names_planted, scaletrace_bin

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="torch missing: run `cargo xtask setup`")

NODES = 4
STEPS = 40
LOSSY = 2          # node whose switch port drops 3 % of the TCP segments, both ways
LOSS = 0.03
LIMITED = 3        # node whose link is limited to RATE both ways (tc tbf)
RATE_MBIT = 200
RATE = f"{RATE_MBIT}mbit"
REORDERED = 0      # node whose link holds one frame in REORDER_EVERY back in a queue of REORDER_RATE
REORDER_EVERY = 16
REORDER_RATE = "20mbit"
SLOW = 1           # rank that busy-loops SLOW_MS every step
SLOW_MS = 60
ONSET = 15         # the first step with the fault
# the verdict's time lost against the measured one (docs/diagnosis.md holds the full matrix)
MAX_LOST_ERROR = 0.3


def _run(tmp_path_factory, name, onset=ONSET, **job):
    out = tmp_path_factory.mktemp(name)
    with DDPLab(NODES) as lab:
        return lab.run_job(str(out / "run"), steps=STEPS, fault_from_step=onset, log=lambda *_: None, **job)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return _run(tmp_path_factory, "clean")


@pytest.fixture(scope="module")
def lossy(tmp_path_factory):
    return _run(tmp_path_factory, "loss", plant=lambda lab: lab.loss(LOSSY, LOSS))


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    return _run(tmp_path_factory, "rate", plant=lambda lab: lab.rate_limit(LIMITED, RATE))


@pytest.fixture(scope="module")
def reordered(tmp_path_factory):
    return _run(tmp_path_factory, "reorder", plant=lambda lab: lab.reorder(REORDERED, REORDER_EVERY, REORDER_RATE))


@pytest.fixture(scope="module")
def limited_from_start(tmp_path_factory):
    """The rate limit planted before the job: no healthy step of its own to price it against."""
    return _run(tmp_path_factory, "rate-start", onset=0, plant=lambda lab: lab.rate_limit(LIMITED, RATE))


@pytest.fixture(scope="module")
def lossy_seen_from_the_machine(tmp_path_factory):
    """The loss run recorded by one recorder in the machine's own namespace for every node (as on
    a machine whose pods each have a namespace), not one per node."""
    return _run(tmp_path_factory, "loss-root", recorder="root", plant=lambda lab: lab.loss(LOSSY, LOSS))


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    return _run(tmp_path_factory, "slow", slow_rank=SLOW, slow_ms=SLOW_MS)


def flows(run):
    return duckdb.sql(f"""SELECT host, local_addr, local_port, remote_addr, remote_port, bytes_sent,
                                 bytes_received, total_retrans
                          FROM read_parquet('{run.fleet}/*/flows/*.parquet')""").fetchall()


def node_flows(run):
    ips = set(run.summary()["ips"])
    return [f for f in flows(run) if f[1] in ips and f[3] in ips]


def test_kineto_traces_hold_the_gloo_collectives(clean):
    for rank, truth in enumerate(clean.truth):
        with open(truth["trace"]) as f:
            trace = json.load(f)
        assert trace["distributedInfo"]["backend"] == "gloo"
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["distributedInfo"]["world_size"] == NODES
        assert "baseTimeNanoseconds" in trace
        names = [e.get("name", "") for e in trace["traceEvents"] if e.get("ph") == "X"]
        steps = [n for n in names if n.startswith("ProfilerStep#")]
        assert len(steps) == len(truth["profiled_steps"]) >= STEPS - 4
        # several all-reduces (gradient buckets) per step
        assert names.count("gloo:all_reduce") >= 2 * len(steps), names.count("gloo:all_reduce")
        assert names.count("c10d::allreduce_") >= 2 * len(steps)


def test_ground_truth_has_every_step_on_its_own_node(clean):
    for rank, truth in enumerate(clean.truth):
        assert truth["rank"] == rank and truth["world_size"] == NODES
        assert truth["host"] == f"node{rank}"
        assert [s["step"] for s in truth["steps"]] == list(range(STEPS))
        assert all(s["start_ns"] < s["end_ns"] for s in truth["steps"])
    # the ranks step together: step 10 starts within a few hundred ms on every rank
    starts = [t["steps"][10]["start_ns"] for t in clean.truth]
    assert (max(starts) - min(starts)) / 1e9 < 0.5


def test_every_node_directory_has_its_own_hostname(clean):
    nodes = sorted(os.listdir(clean.fleet))
    assert nodes == [f"node{k}" for k in range(NODES)]
    for node in nodes:
        for table in ("flows", "gpu_events"):
            hosts = duckdb.sql(f"SELECT DISTINCT host FROM read_parquet('{clean.fleet}/{node}/{table}/*.parquet')").fetchall()
            assert hosts == [(node,)], (node, table, hosts)


def test_recorders_see_the_ddp_flows_between_the_nodes(clean):
    ips = clean.summary()["ips"]
    between = node_flows(clean)
    # gloo connects every pair of ranks (full mesh), and each side records its end of each pair
    pairs = {(f[1], f[3]) for f in between}
    for a in ips:
        for b in ips:
            if a != b:
                assert (a, b) in pairs, (a, b, sorted(pairs))
    # every rank sends its share of the gradients: MBs per step on its busiest flows
    grad_bytes = clean.truth[0]["model"]["grad_bytes"]
    for k, ip in enumerate(ips):
        sent = sum(f[5] for f in between if f[1] == ip)
        assert sent > grad_bytes * STEPS / 2, (k, sent)
    # the rendezvous: every node has a flow to node0's TCPStore port
    store = {f[1] for f in between if f[3] == ips[0] and f[4] == 29500}
    assert store >= set(ips[1:]), store


def slower(run):
    """Mean step from the fault's onset on, and median step before it."""
    healthy, faulted = run.healthy_and_faulted()
    return statistics.mean(faulted), statistics.median(healthy)


def test_mid_run_fault_starts_at_its_step(lossy, slow):
    assert lossy.fault_planted_ns, "the loss was never planted"
    # planted while step ONSET ran on rank 0, not before
    steps = lossy.truth[0]["steps"]
    assert steps[ONSET]["start_ns"] <= lossy.fault_planted_ns, (steps[ONSET], lossy.fault_planted_ns)
    # Planting from outside (iptables in two namespaces) takes a few steps on a loaded machine
    # (planted_steps says how many it took); what the later tests need is that most faulted
    # steps ran with the fault, so it must be in place within the first half of them.
    assert lossy.fault_planted_ns < steps[ONSET + (STEPS - ONSET) // 2]["start_ns"]
    assert [f["from_step"] for f in lossy.faults] == [ONSET]
    assert slow.truth[SLOW]["fault_from_step"] == ONSET


def test_loss_run_is_slower_and_retransmits_toward_the_lossy_node(clean, lossy):
    assert lossy.dropped > 0
    faulted, healthy = slower(lossy)
    assert faulted > 1.3 * healthy, (faulted, healthy)
    assert lossy.time_lost_in_run() > 1.0
    lossy_ip = lossy.summary()["ips"][LOSSY]
    between = node_flows(lossy)
    touching = sum(f[7] for f in between if lossy_ip in (f[1], f[3]))
    elsewhere = sum(f[7] for f in between if lossy_ip not in (f[1], f[3]))
    assert touching > 0
    assert touching > 5 * elsewhere, (touching, elsewhere)
    clean_retrans = sum(f[7] for f in node_flows(clean))
    assert touching > 5 * clean_retrans, (touching, clean_retrans)


def test_clean_run_has_almost_no_retransmits(clean):
    """The lab's own noise floor: without RPS on the veths a clean run retransmits ~0.1 % of its
    segments (reordering between the CPUs' backlogs), which would blur every loss diagnosis."""
    assert sum(f[7] for f in node_flows(clean)) <= 10


def test_rate_limited_run_is_slower_and_queues_at_the_limited_node(limited):
    faulted, healthy = slower(limited)
    assert faulted > 1.5 * healthy, (faulted, healthy)
    assert limited.time_lost_in_run() > 1.0
    ip = limited.summary()["ips"][LIMITED]
    rtt = duckdb.sql(f"""SELECT remote_addr = '{ip}' OR local_addr = '{ip}' AS limited, max(srtt_mean_us)
                         FROM read_parquet('{limited.fleet}/*/flows/*.parquet')
                         WHERE bytes_sent > 10000000 GROUP BY ALL""").fetchall()
    rtt = dict(rtt)
    # the tbf queue (up to 20 ms) sits on the limited node's flows
    assert rtt[True] > 1000 and rtt[True] > 2 * rtt.get(False, 0), rtt


def test_slow_rank_run_is_slower(slow):
    faulted, healthy = slower(slow)
    assert faulted > healthy + SLOW_MS / 1e3 / 4, (faulted, healthy)
    with open(slow.truth[SLOW]["trace"]) as f:
        names = {e.get("name") for e in json.load(f)["traceEvents"]}
    assert "slow_rank_extra_work" in names


def test_analyze_ran_on_every_run(clean, lossy, limited, slow):
    for run in (clean, lossy, limited, slow):
        assert isinstance(run.findings, list)
        assert os.path.exists(os.path.join(run.dir, "report.html"))
        gpu_files = glob.glob(os.path.join(run.fleet, "*", "gpu_events", "*.parquet"))
        assert len(gpu_files) == NODES


def planted_steps(run):
    """The steps rank 0 was in when the lab began and when it had finished planting the fault:
    the lab plants a network fault from outside once rank 0 starts step ONSET (tc and iptables
    in the nodes' namespaces, one command after another, each in effect once it returns), which
    on a loaded machine took until step 20 once (a rate limit asked for at step 15, the steps
    slower from 20 on) and from step 15 to 18 another time (reordering, the steps held up from
    16 on). A slow rank starts in the job itself, at ONSET."""
    if not run.fault_planted_ns:
        return ONSET, ONSET

    def step_at(ns):
        return max(s["step"] for s in run.truth[0]["steps"] if s["start_ns"] <= ns)

    return step_at(run.fault_planting_ns), step_at(run.fault_planted_ns)


@pytest.mark.diagnosis
def test_clean_run_has_no_finding(clean):
    assert clean.findings == [], [(f["category"], f["subject"]) for f in clean.findings]


@pytest.mark.diagnosis
@pytest.mark.parametrize("fault", ["lossy", "limited", "reordered", "slow"])
def test_first_finding_names_the_planted_problem(fault, request):
    run = request.getfixturevalue(fault)
    planted = run.faults[0]
    assert run.findings, "no finding"
    assert names_planted(run.findings[0], planted), (planted, run.findings[0])


@pytest.mark.diagnosis
@pytest.mark.parametrize("fault", ["lossy", "limited", "reordered", "slow"])
def test_time_lost_matches_the_measured_slowdown(fault, request):
    """The verdict's time lost against the job's own step times: the faulted steps' excess over
    the median healthy step, as the ranks timed them (not as the profiler did)."""
    run = request.getfixturevalue(fault)
    first = run.findings[0] if run.findings else {}
    measured = run.time_lost_in_run()
    estimated = first.get("time_lost_s")
    assert estimated is not None, first
    assert abs(estimated - measured) <= MAX_LOST_ERROR * measured, (estimated, measured, first.get("summary"))


@pytest.mark.diagnosis
@pytest.mark.parametrize("fault", ["lossy", "limited", "reordered", "slow"])
def test_the_verdict_says_when_the_problem_began_and_where_to_look(fault, request):
    """The verdict said what and how much, never when: an engineer paged about a slow job asks
    first when it began. Its first step is the step the fault was planted at (3 % loss holds up
    most steps, not each one, so its first held-up step may come a few steps later), not a step
    of noise before it (a slow rank planted at step 33 also left evidence in step 19), and its
    moment is that step's on the ranks' own clocks. The planted steps are those the lab was
    planting it in (`planted_steps`): from the first to the last, any of them may be the first
    the fault held up."""
    run = request.getfixturevalue(fault)
    first = run.findings[0]
    late = fault in ("lossy", "reordered")  # faults that hold up most steps, not each one
    later = 4 if late else 1
    assert first.get("first_step") is not None, first
    began, finished = planted_steps(run)
    assert began - 1 <= first["first_step"] <= finished + later, (first["first_step"], began, finished,
                                                                first["seen_when"])
    step = run.truth[0]["steps"][first["first_step"]]
    began_ns = datetime.datetime.fromisoformat(first["first_seen"]).timestamp() * 1e9
    assert step["start_ns"] - 50e6 <= began_ns <= step["end_ns"] + 50e6, (first["first_seen"], step)
    if not late:  # a lossy link need not hold up the very last step
        assert "still going when the trace ended" in first["seen_when"], first["seen_when"]
    planted = run.faults[0]
    where = f"rank {SLOW}" if fault == "slow" else planted["host"]
    assert where in first["next_check"], first["next_check"]


@pytest.mark.diagnosis
def test_lost_frames_are_called_loss_not_reordering(lossy):
    """Frames dropped on the wire are lost, not late: the receivers report (almost) none of the
    segments resent as duplicates (DSACK), so the verdict keeps sending the operator to error
    and drop counters. Jitter, which reorders, is told apart in test_diagnosis_netem.py."""
    first = lossy.findings[0]
    assert "not lost" not in first["summary"], first["summary"]
    assert first["next_check"].startswith("look for packet loss"), first["next_check"]


@pytest.mark.diagnosis
def test_reordering_is_called_reordering_not_loss(reordered):
    """Frames held back behind others arrive late, not never: the senders resend some of them
    and the receivers report those as duplicates (DSACK). The verdict says they were late, and
    sends the operator to what delays or reorders packets (the error counters are clean)."""
    first = reordered.findings[0]
    assert "not lost" in first["summary"], first["summary"]
    assert first["next_check"].startswith("look for what reorders or delays packets"), first["next_check"]


@pytest.mark.diagnosis
def test_retransmit_hot_spots_say_how_many_were_late_not_lost(reordered):
    """A peer's or an interface's line counted retransmits as if lost ("282 retransmits") when
    the receivers had reported every one of them as a duplicate (DSACK); only the flow lines
    said so. The hot spots say it too."""
    hot = [f for f in reordered.findings if f["category"] == "retransmits" and f["scope"] in ("peer", "interface")]
    assert hot, reordered.findings
    for scope in ("peer", "interface"):
        top = next(f for f in hot if f["scope"] == scope)
        assert "(DSACK: late, not lost)" in top["summary"], top["summary"]


@pytest.mark.diagnosis
@pytest.mark.parametrize("fault", ["lossy", "limited", "reordered"])
def test_no_rank_is_called_a_straggler_under_a_network_fault(fault, request):
    """Under a rate limit on node0 a rank of node3 arrived last in 193 of 308 steps, with 1.6 ms
    *less* work of its own per step than the others: its previous transfer over the slow link
    held it up. It was listed as a straggler beside a verdict naming node0."""
    run = request.getfixturevalue(fault)
    assert not [f for f in run.findings if f["category"] == "straggler"], run.findings


@pytest.mark.diagnosis
def test_the_verdict_counts_no_more_evidence_than_was_recorded(lossy, limited):
    """The verdict summed each slow step's evidence, and the steps of concurrent collectives
    overlap: "17489 RTT samples ... queued" in a capture of 12,048, "1105 retransmits" in a run
    of 1,099. Each sample or retransmit counts once."""
    counts = ((r"with (\d+) retransmits", "retransmits", "kind = 'retransmit'"),
              (r"while (\d+) RTT samples", "rtt", "true"))
    checked = 0
    for run in (lossy, limited):
        for finding in (f for f in run.findings if f["category"] == "slowdown"):
            for pattern, table, where in counts:
                match = re.search(pattern, finding["summary"])
                if not match:
                    continue
                recorded = duckdb.sql(f"SELECT count(*) FROM read_parquet('{run.fleet}/*/{table}/*.parquet') WHERE {where}").fetchall()[0][0]
                assert 0 < int(match.group(1)) <= recorded, (finding["summary"], recorded)
                checked += 1
    assert checked >= 2, [f["summary"] for f in lossy.findings + limited.findings]


def analyze_json(tmp_path, fleet, *args, check=True):
    out = tmp_path / "findings.json"
    proc = subprocess.run([scaletrace_bin(), "analyze", fleet, "--json", str(out), "--no-report", *args],
                          capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
        return json.loads(out.read_text()), proc.stdout  # the findings as printed
    return None, proc.stderr


@pytest.mark.diagnosis
def test_slow_link_from_the_first_step_is_priced_against_a_baseline_run(limited_from_start, clean, tmp_path):
    """Without healthy steps the verdict names the link but cannot price it, and says how; with
    the clean run as `--baseline` it prices it by step time. The truth here is measured against
    the same clean run, so this checks the pricing, not the noise between two runs (the
    scorecard's from-start matrix measures against an independent clean run)."""
    ip = limited_from_start.summary()["ips"][LIMITED]
    planted = {"kind": "rate_limit", "host": f"node{LIMITED}", "ip": ip}
    alone = limited_from_start.findings
    assert alone and names_planted(alone[0], planted), alone[:1]
    assert alone[0]["time_lost_s"] is None and "--baseline" in alone[0]["summary"], alone[0]
    # there from the start: its onset is no random later step (a split of steps held up at one
    # rate always fits a little better than none; it must fit much better to be a change)
    assert re.match("there (from the first traced step|throughout the traced steps)", alone[0]["seen_when"]), alone[0]["seen_when"]
    # the kernel's delivery rate of the limited link's flow is the tbf rate
    rate = re.search(r"its slowest flow delivered (\d+) Mbit/s", alone[0]["summary"])
    assert rate and 0.75 * RATE_MBIT <= int(rate.group(1)) <= 1.1 * RATE_MBIT, alone[0]["summary"]
    found, printed = analyze_json(tmp_path, limited_from_start.fleet, "--baseline", clean.fleet)
    assert "baseline" in printed and f"{NODES} ranks" in printed, printed
    assert found and names_planted(found[0], planted), found[:1]
    base = clean.median_step()
    measured = sum(s - base for s in limited_from_start.step_times())
    estimated = found[0]["time_lost_s"]
    assert estimated is not None and "baseline run" in found[0]["summary"], found[0]
    assert abs(estimated - measured) <= MAX_LOST_ERROR * measured, (estimated, measured, found[0]["summary"])


@pytest.mark.diagnosis
def test_the_same_run_analyzed_again_gives_the_same_findings(limited, tmp_path):
    """DuckDB aggregates in parallel, in no fixed order: every choice among ties must be
    broken by a rule, or the verdict of one run changes between analyses (it did: 51 and 52
    impaired steps, 9.47 and 9.49 s, on one recorded rate-limit run)."""
    for attempt in range(3):
        again, _ = analyze_json(tmp_path, limited.fleet)
        assert [(f["subject"], f["summary"]) for f in again] == \
            [(f["subject"], f["summary"]) for f in limited.findings], attempt
        # sums in another order may differ in the last bits, no more
        lost = lambda found: [-1.0 if f["time_lost_s"] is None else f["time_lost_s"] for f in found]
        assert lost(again) == pytest.approx(lost(limited.findings), rel=1e-9), attempt


@pytest.mark.diagnosis
def test_a_culprit_below_the_floors_is_shown_under_an_empty_verdict(slow, tmp_path):
    """A fault that costs less than the verdict's floors is no finding, but "nothing found" alone
    told an engineer whose job did get slower nothing (a 20 ms slower rank that cost 2 % of a
    run): analyze prints the largest suspect below the floors, its cost and the floor it missed.
    Here the floor is raised above the slow rank's real cost."""
    first = slow.findings[0]
    assert first["category"] == "slowdown" and first["rank"] == SLOW, first
    found, printed = analyze_json(tmp_path, slow.fleet, "--set", "min_lost_fraction=0.95")
    assert not [f for f in found if f["category"] == "slowdown"], found
    verdict = printed[printed.index("Verdict:"):].split("\n\n")[0]
    assert "nothing found" in verdict and "below the floors" in verdict, verdict
    line = next(ln for ln in verdict.splitlines() if ln.startswith("  - "))
    assert line.startswith(f"  - rank {SLOW} (node{SLOW}), a straggler: {first['time_lost_s']:.2f} s lost"), (line, first)
    assert line.endswith("less than 95% of the traced time"), line


def test_baseline_of_another_job_or_without_steps_is_one_line(clean, tmp_path):
    fewer = tmp_path / "three-ranks"
    shutil.copytree(clean.fleet, fewer)
    shutil.rmtree(fewer / "node3" / "gpu_events")
    _, stderr = analyze_json(tmp_path, clean.fleet, "--baseline", str(fewer), check=False)
    assert "its job has 3 ranks, this one 4: not a run of the same job" in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    untraced = tmp_path / "untraced"
    shutil.copytree(clean.fleet, untraced, ignore=shutil.ignore_patterns("gpu_events"))
    _, stderr = analyze_json(tmp_path, clean.fleet, "--baseline", str(untraced), check=False)
    assert "no training steps (ProfilerStep#N)" in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.diagnosis
def test_one_recorder_for_the_whole_machine_names_the_lossy_namespace(lossy_seen_from_the_machine):
    """Every flow has the recorder's hostname; each node is its network namespace
    (`flows.netns`), so the verdict names `<machine>/<namespace>` of the lossy node, not the
    machine that holds them all."""
    run = lossy_seen_from_the_machine
    hosts = {f[0] for f in flows(run)}
    assert len(hosts) == 1, hosts
    nss = {r[0] for r in duckdb.sql(f"SELECT DISTINCT netns FROM read_parquet('{run.fleet}/machine/flows/*.parquet')").fetchall()}
    assert {run.lab.ns(k) for k in range(NODES)} <= nss, nss
    assert run.findings, "no finding"
    first = run.findings[0]
    lossy = f"{hosts.pop()}/{run.lab.ns(LOSSY)}"
    assert first["category"] == "slowdown" and lossy in (first["host"], first["subject"]), first
    measured = run.time_lost_in_run()
    assert abs(first["time_lost_s"] - measured) <= MAX_LOST_ERROR * measured, (first["time_lost_s"], measured)
