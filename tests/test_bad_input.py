"""Bad flags and a hostile environment: one clear line, a non-zero exit, nothing half-written."""
import json
import os
import subprocess

import duckdb
import pytest

from netlab import Recorder, transfer

BIN = os.environ.get("SCALETRACE_BIN", os.path.join(os.path.dirname(__file__), "..", "target", "release", "scaletrace"))


def run(*args, **kw):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60, **kw)


def error_line(proc):
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("scaletrace: error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


@pytest.mark.parametrize("args, expected", [
    (["record", "--duration", "ten"], "invalid value 'ten' for '--duration"),
    (["record", "--port", "99999"], "not a port"),
    (["record", "--port", "10-5"], "empty"),
    (["record", "--cidr", "10.0.0.0/40"], "the prefix length 40 is not a number from 0 to 32"),
    (["record", "--cidr", "fd00::/129"], "the prefix length 129 is not a number from 0 to 128"),
    (["record", "--cidr", "10.0.0/8"], "10.0.0 is not an IPv4 or IPv6 address"),
    # a recording of nothing said it had succeeded
    (["record", "--duration", "0s"], "a recording of no time records nothing"),
    # 300000y wrapped around to "at least 1ms"; 10000000h leaked a DuckDB overflow error
    (["analyze", "--window", "300000y"], "a window is from 1ms to 1d"),
    (["analyze", "--window", "10000000h"], "a window is from 1ms to 1d"),
    (["analyze", "--window", "0s"], "a window is from 1ms to 1d"),
    (["sql", "--window", "2d"], "a window is from 1ms to 1d"),
    # merge allowed 1 µs, analyze 1ms, for the same views
    (["merge", "--window", "500us"], "a window is from 1ms to 1d"),
    # --top 0 showed one finding per category
    (["analyze", "--top", "0"], "that would show no finding"),
    (["analyze", "--triage", "maybe"], "[possible values: auto, on, off]"),
    (["record", "--max-retransmit-rate", "0"], "--max-retransmit-rate"),
    (["record", "--bogus"], "unexpected argument '--bogus'"),
    (["frobnicate"], "unrecognized subcommand"),
])
def test_bad_flags_are_rejected_by_name(args, expected):
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr


@pytest.mark.parametrize("flag,value", [
    ("record --duration", "0s"), ("record --cidr", "10.0.0.0/33"), ("record --cidr", "10.0.0/8"),
    ("record --gpu-interval", "1ms"), ("record --flow-window", "2h"), ("record --ring-buffer-kib", "1000"),
    ("analyze --window", "300000y"), ("analyze --top", "0"), ("analyze --top", "many"),
    ("record --port", "70000"), ("record --port", "10-5"), ("record --ring-buffer-kib", "99999999999"),
])
def test_a_refused_value_is_named_once(flag, value):
    """clap's line names the value ("invalid value '0s' for '--duration <DURATION>'"); the
    reason after it repeated it ("0s: a recording of no time ...")."""
    command, option = flag.split()
    proc = run(command, option, value)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[0]
    assert line.startswith(f"error: invalid value '{value}' for '{option}") and line.count(value) == 1, line


DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.mark.parametrize("args", [
    ["schema"],
    ["sql", "--dialect", "spark", os.path.join(DATA, "loss-gap-after-onset")],
    # the findings are analyze's output: a println of the baseline's line panicked here
    ["analyze", "--no-report", os.path.join(DATA, "loss-gap-after-onset"),
     "--baseline", os.path.join(DATA, "loss-gap-after-onset")],
])
def test_a_reader_that_stops_early_is_no_error(args):
    """`scaletrace sql ... | head`: the closed pipe ends the output quietly (it panicked, with a
    backtrace). The pipe's reading end is closed before the first write, so every write
    meets it, whatever the output's size."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([BIN, *args], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    # (analyze says on stderr how long it took: that is all it may say)
    assert proc.returncode == 0 and all(l.endswith(" s") and " findings in " in l for l in proc.stderr.splitlines()), proc.stderr


def test_findings_that_cannot_be_written_are_an_error_and_the_json_is_kept(tmp_path):
    """`analyze > /dev/full` exited 0 with every finding lost (its writes' errors were
    ignored). The JSON is written first, then the findings, whose failure is the exit code."""
    out = tmp_path / "f.json"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([BIN, "analyze", "--no-report", "--json", str(out), os.path.join(DATA, "loss-gap-after-onset")],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 1 and "writing the findings to standard output" in error_line(proc), proc.stderr
    assert json.loads(out.read_text()), "the JSON was not written"


@pytest.mark.parametrize("args, expected", [
    (["--spark-tables", "/x"], "--spark-tables is for --dialect spark"),
    (["--views-only"], "--views-only is gone"),
    (["--dialect", "spark", "--views-only"], "run the printed script again"),
    (["--dialect", "spark", "--spark-tables", "tables"], "not an absolute path or a URI"),
    (["--dialect", "spark", "--spark-tables", ""], "not an absolute path or a URI"),
    (["--dialect", "spark", "--spark-tables", "/"], "the root of a filesystem"),
    (["--dialect", "spark", "--spark-tables", "/x/${HOME}"], "without backslashes or ${...}"),
])
def test_spark_tables_only_where_they_are_written(args, expected):
    proc = run("sql", *args, os.path.join(DATA, "loss-gap-after-onset"))
    assert proc.returncode == 1 and expected in error_line(proc), proc.stderr


def test_help_explains_every_flag():
    out = run("record", "--help").stdout
    for flag in ("--duration", "--out", "--port", "--cidr", "--netns", "--cgroup", "--pid",
                 "--rtt-sample-interval", "--max-retransmit-rate", "--quiet"):
        assert flag in out
    assert "Ctrl-C" in out
    assert "record" in run("--help").stdout


def test_quiet_still_prints_what_was_kept_and_lost(tmp_path):
    """--quiet drops the live status line only: the service units run with it, and the last
    line (events kept, lost) is what an operator reads in the journal."""
    proc = run("record", "--quiet", "--out", str(tmp_path), "--port", "1", "--no-gpu", "--duration", "1s")
    assert proc.returncode == 0, proc.stderr
    assert "scaletrace: stopped (" in proc.stderr and "lost" in proc.stderr, proc.stderr


def test_a_second_recorder_into_the_same_out_is_refused(tmp_path):
    """Two recorders on one host writing one --out both succeeded and recorded every flow,
    NIC counter and GPU sample twice; analyze then counted them twice. The second is refused
    while the first runs (also into a directory inside the first's), and the directory serves
    the next run once the first has ended."""
    out = tmp_path / "out"
    first = Recorder(out, "--port", "1", "--no-gpu")
    second = run("record", "--out", str(out), "--port", "1", "--no-gpu", "--duration", "1s")
    assert second.returncode == 1
    line = error_line(second)
    assert f"another scaletrace record (pid {first.proc.pid}) is writing to {out}" in line, line
    # nor into a directory inside it: a query over the outer one would read both
    nested = run("record", "--out", str(out / "debug"), "--port", "1", "--no-gpu", "--duration", "1s")
    assert nested.returncode == 1
    line = error_line(nested)
    assert f"is writing to {out} for host" in line and f"{out / 'debug'} is inside {out}" in line, line
    assert not (out / "debug").exists(), "a refused record leaves the directory it created"
    assert first.stop() == 0, first.stderr
    assert len(list((out / "capture").glob("*.parquet"))) == 1
    again = run("record", "--out", str(out), "--port", "1", "--no-gpu", "--duration", "1s")
    assert again.returncode == 0, again.stderr
    assert len(list((out / "capture").glob("*.parquet"))) == 2
    afile = tmp_path / "afile"
    afile.write_text("")
    proc = run("record", "--out", str(afile), "--duration", "1s")
    assert proc.returncode == 1 and f"--out {afile} is not a directory" in error_line(proc)


def test_unknown_netns(tmp_path):
    proc = run("record", "--out", str(tmp_path), "--netns", "no-such-ns-xyz", "--duration", "1s")
    assert proc.returncode == 1
    assert "/run/netns/no-such-ns-xyz does not exist" in error_line(proc)


def test_unknown_cgroup_and_pid(tmp_path):
    proc = run("record", "--out", str(tmp_path), "--cgroup", "/nonexistent/cg", "--duration", "1s")
    assert proc.returncode == 1 and "no such cgroup directory" in error_line(proc)
    proc = run("record", "--out", str(tmp_path), "--pid", "999999999", "--duration", "1s")
    assert proc.returncode == 1 and "no such process" in error_line(proc)


def test_unwritable_output_fails_before_attaching(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = run("record", "--out", str(blocker / "sub"), "--duration", "1s")
    assert proc.returncode == 1
    assert f"--out {blocker / 'sub'}: {blocker} is not a directory" in error_line(proc), proc.stderr
    assert "recording to" not in proc.stderr
    # a link to nothing: the system's own word for it, "File exists", named neither
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "missing")
    trace = tmp_path / "trace.json"
    trace.write_text('{"traceEvents": []}')
    for command in (["record", "--duration", "1s"], ["agent", "--no-gpu", "--duration", "1s"], ["import", str(trace)]):
        proc = run(*command, "--out", str(dangling))
        assert proc.returncode == 1, proc.stderr
        assert error_line(proc) == (f"scaletrace: error: --out {dangling} is a symbolic link to "
                                    f"{tmp_path / 'missing'}, which does not exist"), proc.stderr
    assert not (tmp_path / "missing").exists()
    # import said "creating FILE: File exists" (record: "is not a directory"); with a slash at
    # the end too
    for out in (str(blocker), str(blocker) + "/"):
        proc = run("import", str(trace), "--out", out)
        assert proc.returncode == 1 and error_line(proc) == f"scaletrace: error: --out {blocker} is not a directory", proc.stderr
    # a trace that is not there leaves no output directory behind
    proc = run("import", str(tmp_path / "typo.json"), "--out", str(tmp_path / "new"))
    assert proc.returncode == 1 and not (tmp_path / "new").exists(), proc.stderr


def test_without_privileges_the_error_names_what_is_missing(tmp_path):
    os.chmod(tmp_path, 0o777)
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                           BIN, "record", "--out", str(tmp_path / "o"), "--duration", "1s"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    line = error_line(proc)
    assert "needs root" in line and "CAP_BPF" in line and "sudo" in line
    assert not (tmp_path / "o").exists()
    # the agent too, without naming `record` or leaving its spool directory behind
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                           BIN, "agent", "--out", str(tmp_path / "spool"), "--duration", "1s"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    line = error_line(proc)
    assert line.startswith("scaletrace: error: scaletrace needs root") and "CAP_BPF" in line, line
    assert not (tmp_path / "spool").exists()


def test_full_disk_is_reported_and_other_tables_survive(net, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20k", "tmpfs", str(small)], check=True)
    try:
        rec = Recorder(small, "--netns", net.a)
        transfer(net, 5301, 8 << 20)
        code = rec.stop()
        assert code == 1, rec.stderr
        errors = [l for l in rec.stderr.splitlines() if l.startswith("scaletrace: error:")]
        assert len(errors) == 1 and "No space left on device" in errors[0], rec.stderr
        # Tables closed before the disk filled are complete and valid; nothing torn carries the
        # final name (a failed table stays *.parquet.partial).
        complete = list(small.glob("*/*.parquet"))
        assert complete, rec.stderr
        for f in complete:
            duckdb.sql(f"SELECT count(*) FROM read_parquet('{f}')").fetchall()
        flows = duckdb.sql(f"SELECT count(*) FROM read_parquet('{small}/flows/*.parquet') WHERE remote_port = 5301")
        assert flows.fetchall()[0][0] == 1
    finally:
        subprocess.run(["umount", str(small)], check=False)
