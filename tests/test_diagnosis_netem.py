"""Added latency and jitter on one node's link, diagnosed on a real PyTorch DDP job: the faults the
host's kernel cannot plant (it has no sch_netem). They run in the VM lab (`cargo xtask vmtest
--only trixie-6.12 tests/test_diagnosis_netem.py`, a Debian kernel with netem) on the same lab as
`test_diagnosis_ddp.py`: one network namespace per node behind a bridge, one recorder per node,
the fault planted mid-run on the switch port toward the node and on the node's own egress.
Elsewhere they skip and say why."""
import importlib.util
import os
import shutil
import subprocess

import pytest

from ddplab import DDPLab, names_planted

NODES = 3
STEPS = 30
ONSET = 12             # the first step with the fault
DELAYED = 1            # node whose link gets DELAY_MS more latency, both ways
DELAY_MS = 20
JITTERY = 2            # node whose link gets JITTER_MS (normal) around JITTER_BASE_MS
JITTER_BASE_MS = 10
JITTER_MS = 5
MAX_LOST_ERROR = 0.3


def _missing():
    if importlib.util.find_spec("torch") is None:
        return "torch missing: run `cargo xtask setup`"
    if os.geteuid() != 0:
        return "needs root"
    # a kernel with netem as a module: load it (tc below also asks the kernel to); without
    # modprobe the probe below says whether netem is there
    if shutil.which("modprobe"):
        subprocess.run(["modprobe", "-q", "sch_netem"], capture_output=True)
    ns = f"stnetem{os.getpid()}"
    try:
        for argv in (["ip", "netns", "add", ns], ["ip", "-n", ns, "link", "add", "name", "probe0", "type", "veth", "peer", "name", "probe1"]):
            made = subprocess.run(argv, capture_output=True, text=True)
            if made.returncode != 0:
                return f"cannot build the probe namespace: {' '.join(argv)}: {made.stderr.strip()}"
        probe = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "probe0", "root", "netem",
                                "delay", "1ms"], capture_output=True, text=True)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    if probe.returncode != 0:
        return (f"this kernel ({os.uname().release}) has no netem ({probe.stderr.strip()}): "
                "`cargo xtask vmtest --kernel trixie-6.12 tests/test_diagnosis_netem.py` runs these")
    return None


MISSING = _missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))


def _run(tmp_path_factory, name, plant=None):
    out = tmp_path_factory.mktemp(name)
    with DDPLab(NODES) as lab:
        run = lab.run_job(str(out / "run"), steps=STEPS, fault_from_step=ONSET, log=lambda *_: None,
                          hidden=256, layers=3, plant=plant)
    # the VM's files are gone when it stops: keep what analyze said where the host can read it
    keep = os.environ.get("SCALETRACE_ARTIFACTS")
    if keep:
        shutil.copytree(run.dir, os.path.join(keep, f"netem-{name}"), dirs_exist_ok=True)
    return run


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return _run(tmp_path_factory, "clean")


@pytest.fixture(scope="module")
def delayed(tmp_path_factory):
    return _run(tmp_path_factory, "delay", plant=lambda lab: lab.delay(DELAYED, DELAY_MS))


@pytest.fixture(scope="module")
def jittery(tmp_path_factory):
    return _run(tmp_path_factory, "jitter", plant=lambda lab: lab.delay(JITTERY, JITTER_BASE_MS, JITTER_MS))


def _said(run):
    return [(f["category"], f["subject"], f["summary"]) for f in run.findings][:3]


@pytest.mark.diagnosis
def test_clean_run_has_no_finding(clean):
    assert clean.findings == [], _said(clean)


@pytest.mark.diagnosis
@pytest.mark.parametrize("fault", ["delayed", "jittery"])
def test_first_finding_names_the_node_with_the_added_latency(fault, request):
    run = request.getfixturevalue(fault)
    assert run.findings, f"no finding; the job lost {run.time_lost_in_run():.2f} s"
    assert names_planted(run.findings[0], run.faults[0]), (run.faults[0], _said(run))


@pytest.mark.diagnosis
@pytest.mark.parametrize("fault", ["delayed", "jittery"])
def test_time_lost_matches_the_measured_slowdown(fault, request):
    run = request.getfixturevalue(fault)
    first = run.findings[0] if run.findings else {}
    measured = run.time_lost_in_run()
    estimated = first.get("time_lost_s")
    assert estimated is not None, _said(run)
    assert abs(estimated - measured) <= MAX_LOST_ERROR * measured, (estimated, measured, first.get("summary"))


@pytest.mark.diagnosis
@pytest.mark.parametrize("fault", ["delayed", "jittery"])
def test_the_verdict_says_when_it_began(fault, request):
    run = request.getfixturevalue(fault)
    first = run.findings[0] if run.findings else {}
    assert first.get("first_step") is not None and abs(first["first_step"] - ONSET) <= 2, first.get("seen_when")


@pytest.mark.diagnosis
def test_jitter_is_told_from_loss(jittery):
    """netem delays each packet on its own, so jitter reorders a flow's packets: the sender
    resends segments that were only late (539 retransmits in the first VM run) and the verdict
    called it packet loss, sending the operator to error counters that are clean. The
    receivers report those segments as duplicates (DSACK): the verdict says they were late,
    not lost, and sends the operator to what delays or reorders packets."""
    assert jittery.findings, f"no finding; the job lost {jittery.time_lost_in_run():.2f} s"
    first = jittery.findings[0]
    assert "not lost" in first["summary"], first["summary"]
    assert first["next_check"].startswith("look for what reorders or delays packets"), first["next_check"]
