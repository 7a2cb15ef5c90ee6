//! `cargo xtask vmtest`: integration tests on other kernels than the host's, each a stock Debian
//! kernel booted in QEMU with virtme-ng, sharing the host's filesystem (read-only, with a
//! writable overlay on /tmp), so the tests run against the very binary and Python tools that
//! ran them on the host. Those kernels also have what the host's lacks: modules (soft-RoCE
//! `rdma_rxe`, netem) and kprobes.
//!
//! Kernels are downloaded with `apt-get download` from a private sources list (one per Debian
//! suite, under target/vm/apt) and unpacked with `dpkg -x`: never installed on the host.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use crate::run;

/// A Debian kernel the tests run on: the newest package of `suite` whose name matches `package`
/// (a regular expression for `apt-cache search --names-only`). Adding a kernel is one line.
pub struct KernelSource {
    pub name: &'static str,
    suite: &'static str,
    package: &'static str,
}

pub const KERNELS: &[KernelSource] = &[
    KernelSource {
        name: "bookworm-6.1",
        suite: "bookworm",
        package: r"^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$",
    },
    KernelSource {
        name: "trixie-6.12",
        suite: "trixie",
        package: r"^linux-image-6\.12\.[0-9]+\+deb13-amd64-unsigned$",
    },
];

/// The tests that run inside each VM: capture (flows, RTT, retransmits, filters, signals, the
/// adoption of open connections) and real RDMA over soft-RoCE. The rest of the suite tests
/// userspace logic that does not depend on the kernel, or takes longer than emulation allows.
pub const VM_TESTS: &[&str] = &["tests/test_capture.py", "tests/test_rdma_rxe.py"];

/// A VM that has not finished its tests by then is stopped (TCG emulation is 5-10 times slower
/// than the host).
const VM_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const VM_MEMORY: &str = "3G";

/// What a machine needs to run the VMs; `None` when it has it all.
pub fn missing_prerequisite() -> Option<String> {
    if !Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
    {
        return Some("needs root (the tests inside create namespaces and load eBPF)".into());
    }
    for (tool, package) in [
        (
            "qemu-system-x86_64",
            "qemu-system-x86 (`cargo xtask setup`)",
        ),
        ("vng", "virtme-ng from PyPI (`cargo xtask setup`)"),
        (
            "apt-get",
            "a Debian machine (kernels come from Debian's archive)",
        ),
    ] {
        if !Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return Some(format!("{tool} missing: {package}"));
        }
    }
    None
}

fn vm_dir() -> PathBuf {
    crate::workspace_root().join("target/vm")
}

/// apt options that use a private sources list, package lists and cache for `suite`, so that
/// the host's own apt configuration is neither used nor changed.
fn private_apt(suite: &str) -> Result<Vec<String>> {
    let dir = vm_dir().join("apt").join(suite);
    for sub in ["lists/partial", "cache/archives/partial"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    let list = dir.join("sources.list");
    // the point release, its updates and security fixes: the newest kernel is in one of them
    let key = "[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]";
    std::fs::write(
        &list,
        format!(
            "deb {key} http://deb.debian.org/debian {suite} main\n\
             deb {key} http://deb.debian.org/debian {suite}-updates main\n\
             deb {key} http://deb.debian.org/debian-security {suite}-security main\n"
        ),
    )?;
    Ok(vec![
        format!("-o=Dir::Etc::sourcelist={}", list.display()),
        "-o=Dir::Etc::sourceparts=-".into(),
        format!("-o=Dir::State::Lists={}", dir.join("lists").display()),
        format!("-o=Dir::Cache={}", dir.join("cache").display()),
        "-o=APT::Get::List-Cleanup=0".into(),
        // root downloads into the workspace, which apt's sandbox user cannot write
        "-o=APT::Sandbox::User=root".into(),
        "-q".into(),
    ])
}

/// Orders package names by their numbers (6.12.9 before 6.12.117), so the newest comes last.
fn version_key(name: &str) -> Vec<(u64, String)> {
    let mut key = Vec::new();
    let mut digits = String::new();
    let mut text = String::new();
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !text.is_empty() {
                key.push((0, std::mem::take(&mut text)));
            }
            digits.push(c);
        } else {
            if !digits.is_empty() {
                key.push((digits.parse().unwrap_or(u64::MAX), String::new()));
                digits.clear();
            }
            text.push(c);
        }
    }
    if !digits.is_empty() {
        key.push((digits.parse().unwrap_or(u64::MAX), String::new()));
    }
    if !text.is_empty() {
        key.push((0, text));
    }
    key
}

/// The kernel image of `kernel`, downloaded and unpacked on first use (about 100 MB each).
/// Without network, a kernel unpacked earlier is used.
fn kernel_image(kernel: &KernelSource) -> Result<PathBuf> {
    let root = vm_dir().join("kernels").join(kernel.name);
    let image = |root: &Path| -> Option<PathBuf> {
        let boot = root.join("boot");
        std::fs::read_dir(boot)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("vmlinuz-"))
            })
    };
    let complete = root.join(".unpacked");
    let apt = private_apt(kernel.suite)?;
    let updated = Command::new("apt-get")
        .args(&apt)
        .arg("update")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let newest = updated
        .then(|| {
            let out = Command::new("apt-cache")
                .args(&apt)
                .args(["search", "--names-only", kernel.package])
                .output()
                .ok()?;
            let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
                .collect();
            names.sort_by_key(|n| version_key(n));
            names.pop()
        })
        .flatten();
    let wanted = newest.clone().unwrap_or_default();
    if complete.exists() {
        let have = std::fs::read_to_string(&complete).unwrap_or_default();
        if newest.is_none() || have.trim() == wanted {
            if let Some(image) = image(&root) {
                return Ok(image);
            }
        }
    }
    let Some(package) = newest else {
        bail!(
            "{}: no package matching {} in Debian {} (no network, and no kernel downloaded earlier)",
            kernel.name,
            kernel.package,
            kernel.suite
        );
    };
    eprintln!("vmtest: downloading {package} (Debian {})", kernel.suite);
    let download = vm_dir().join("download");
    std::fs::create_dir_all(&download)?;
    run(Command::new("apt-get")
        .current_dir(&download)
        .args(&apt)
        .args(["download", &package]))?;
    let deb = std::fs::read_dir(&download)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
        })
        .with_context(|| format!("apt-get download left no {package} .deb"))?;
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    std::fs::create_dir_all(&root)?;
    run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root))?;
    std::fs::remove_file(&deb)?;
    std::fs::write(&complete, &package)?;
    image(&root).with_context(|| format!("{package} has no boot/vmlinuz-*"))
}

/// KVM only where it can boot a stock kernel: a PVM-style paravirtual KVM (this project's
/// machines, themselves VMs) hangs on one, so those use TCG emulation.
fn use_kvm() -> bool {
    let cpu_has_virtualization = std::fs::read_to_string("/proc/cpuinfo")
        .is_ok_and(|c| c.split_whitespace().any(|w| w == "vmx" || w == "svm"));
    Path::new("/dev/kvm").exists()
        && cpu_has_virtualization
        && !Path::new("/sys/module/kvm_pvm").exists()
}

/// The result of one kernel's run, from pytest's JUnit XML.
struct Outcome {
    kernel: String,
    tests: u64,
    failures: u64,
    skipped: u64,
    seconds: f64,
    problems: Vec<String>,
}

fn xml_attr(xml: &str, element: &str, attr: &str) -> Option<String> {
    let start = xml.find(&format!("<{element} "))?;
    let tag = &xml[start..start + xml[start..].find('>')?];
    let at = tag.find(&format!(" {attr}=\""))? + attr.len() + 3;
    Some(tag[at..at + tag[at..].find('"')?].to_owned())
}

/// The values of every `<property name="NAME" value="..."/>` of a JUnit report.
fn properties(xml: &str, name: &str) -> Vec<String> {
    let prefix = format!("<property name=\"{name}\" value=\"");
    xml.match_indices(&prefix)
        .filter_map(|(at, _)| {
            let value = &xml[at + prefix.len()..];
            Some(value[..value.find('"')?].to_owned())
        })
        .map(|v| {
            v.replace("&quot;", "\"")
                .replace("&apos;", "'")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&")
        })
        .collect()
}

/// Why each test failed or errored, from pytest's FAILURES and ERRORS sections: the test's
/// header, the failing line's location and the `E` lines (the assertion and its values), at
/// most `MAX_REASON_LINES`.
/// The `-rfEs` summary line alone cannot carry it: in the VM pytest sees an 80-column
/// terminal, and a test's id longer than that leaves no room for the message, so a CI run
/// printed "FAILED tests/test_capture.py::test_reordering..." and nothing to act on, with the
/// logs left on the CI machine.
fn failure_reasons(log: &str) -> Vec<String> {
    // pytest's sections are `==== TITLE ====` lines; setup and teardown errors come under
    // ERRORS, before FAILURES, and the warnings summary follows them
    let mut reasons = Vec::new();
    let mut inside = false;
    for line in log.lines().map(str::trim_end) {
        if let Some(title) = section_title(line) {
            inside = title == "ERRORS" || title == "FAILURES";
            continue;
        }
        if !inside {
            continue;
        }
        // a test's header: its name between underscores, `_ name _` when the name is long;
        // not pytest's `_ _ _ _` separators inside one failure
        let header = line.starts_with('_')
            && line.ends_with('_')
            && !line.trim_matches(|c| c == '_' || c == ' ').is_empty();
        let location = line.starts_with("tests/") && line.contains(".py:");
        if line.starts_with("E ") || location || header {
            reasons.push(line.to_owned());
        }
    }
    if reasons.len() > MAX_REASON_LINES {
        let left = reasons.len() - MAX_REASON_LINES;
        reasons.truncate(MAX_REASON_LINES);
        reasons.push(format!("... {left} more lines in pytest.log"));
    }
    reasons
}

const MAX_REASON_LINES: usize = 60;

/// The title of one of pytest's `==== TITLE ====` section lines; `None` for any other line
/// (a bare `====` rule included).
fn section_title(line: &str) -> Option<&str> {
    if !(line.starts_with('=') && line.ends_with('=')) {
        return None;
    }
    Some(line.trim_matches(|c| c == '=' || c == ' ')).filter(|t| !t.is_empty())
}

/// Whether a VM that wrote into `out` exited before the guest script's first line (which
/// writes `uname`), and within `BOOT_RETRY_WITHIN` (a VM that hung for minutes is not retried).
fn failed_at_boot(out: &Path, ran_for: Duration) -> bool {
    !out.join("uname").exists() && ran_for < BOOT_RETRY_WITHIN
}

/// How soon a VM must have failed at boot to be booted once more (a boot under TCG takes
/// about 15 s; the whole run, minutes).
const BOOT_RETRY_WITHIN: Duration = Duration::from_secs(120);

/// Runs `tests` in a VM booted on `image`, with the host's Python and the release binary.
fn run_in_vm(kernel: &KernelSource, image: &Path, tests: &[String]) -> Result<Outcome> {
    let root = crate::workspace_root();
    let out = vm_dir().join("out").join(kernel.name);
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    std::fs::create_dir_all(&out)?;
    // The guest's PATH has no pyenv shims: give it the interpreter the host's python3 is.
    let python = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .context("python3")?;
    let python = String::from_utf8_lossy(&python.stdout).trim().to_owned();
    // The guest runs its own copy: a host build during the run (minutes under TCG) would
    // otherwise swap the binary under the tests halfway.
    let bin = out.join("scaletrace");
    std::fs::copy(root.join("target/release/scaletrace"), &bin)
        .context("copying target/release/scaletrace for the guest")?;
    let script = out.join("guest.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n\
             # runs inside the VM\n\
             uname -r > {out}/uname\n\
             cd {root}\n\
             export SCALETRACE_BIN={bin} SCALETRACE_ARTIFACTS={out} PYTHONDONTWRITEBYTECODE=1\n\
             {python} -m pytest -p no:cacheprovider -v -rfEs --junitxml={out}/junit.xml {tests} > {out}/pytest.log 2>&1\n\
             echo $? > {out}/rc\n",
            out = out.display(),
            root = root.display(),
            bin = bin.display(),
            tests = tests.join(" "),
        ),
    )?;
    let launch = || -> Result<std::process::ExitStatus> {
        let mut vng = Command::new("timeout");
        vng.arg(VM_TIMEOUT.as_secs().to_string())
            .arg("vng")
            .arg("-r")
            .arg(image)
            .args(["-m", VM_MEMORY, "-p", "2"])
            .arg(format!("--rwdir={}", out.display()))
            .current_dir(&root)
            .args(["-e", &format!("bash {}", script.display())])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(out.join("console.log"))?)
            .stderr(Stdio::from(std::fs::File::create(out.join("vng.log"))?));
        if !use_kvm() {
            vng.arg("--disable-kvm");
        }
        vng.status().context("starting vng")
    };
    let mut started = Instant::now();
    let mut status = launch()?;
    // The guest's first act is writing `uname`: without it the script never ran (a VM that
    // exited at boot with nothing on its console, 255 after 17 s, once in a CI run whose next
    // boot of the same kernel worked). That is the VM, not the tests: boot it once more,
    // keeping the first attempt's logs; not after a VM that took minutes to fail (a hang
    // would cost the CI run another VM_TIMEOUT).
    if failed_at_boot(&out, started.elapsed()) {
        eprintln!(
            "vmtest: {}: the VM exited ({status}) before its script started; booting it once more",
            kernel.name
        );
        for log in ["console.log", "vng.log"] {
            let _ = std::fs::rename(out.join(log), out.join(format!("first-attempt-{log}")));
        }
        started = Instant::now();
        status = launch()?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap_or_default();
    let junit = read("junit.xml");
    if junit.is_empty() {
        bail!(
            "{}: the VM ran no tests ({status} after {seconds:.0} s); see {}",
            kernel.name,
            out.display()
        );
    }
    let count = |attr| {
        xml_attr(&junit, "testsuite", attr)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    // which path each kernel took, as the tests recorded it (`record_property("path", ...)`)
    let mut paths = properties(&junit, "path");
    paths.sort();
    paths.dedup();
    let log = read("pytest.log");
    // pytest's -rfEs summary: one line per failed, errored or skipped test, with the reason
    let problems = log
        .lines()
        .filter(|l| {
            l.starts_with("FAILED ") || l.starts_with("ERROR ") || l.starts_with("SKIPPED ")
        })
        .map(str::to_owned)
        .chain(failure_reasons(&log).into_iter().map(|l| format!("| {l}")))
        .chain(paths.into_iter().map(|p| format!("path: {p}")))
        .collect();
    Ok(Outcome {
        kernel: read("uname").trim().to_owned(),
        tests: count("tests"),
        failures: count("failures") + count("errors"),
        skipped: count("skipped"),
        seconds,
        problems,
    })
}

/// Runs the VM tests on every kernel of `KERNELS` (or those named in `only`) and prints one
/// line per kernel; fails if any test failed. Skips, saying why, where VMs cannot run.
pub fn vmtest(only: &[String], tests: &[String]) -> Result<()> {
    if let Some(why) = missing_prerequisite() {
        eprintln!("vmtest: skipped: {why}");
        return Ok(());
    }
    let unknown: Vec<&String> = only
        .iter()
        .filter(|n| !KERNELS.iter().any(|k| k.name == n.as_str()))
        .collect();
    if !unknown.is_empty() {
        let known: Vec<&str> = KERNELS.iter().map(|k| k.name).collect();
        bail!(
            "unknown kernel {unknown:?}: the list is {}",
            known.join(", ")
        );
    }
    let tests: Vec<String> = if tests.is_empty() {
        VM_TESTS.iter().map(|t| t.to_string()).collect()
    } else {
        tests.to_vec()
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    eprintln!(
        "vmtest: {} on {} ({}, {}); the host's kernel {} runs the whole suite in `cargo xtask test`",
        tests.join(" "),
        if only.is_empty() { "every kernel" } else { "the kernels named" },
        if use_kvm() { "KVM" } else { "TCG emulation: several minutes each" },
        format_args!("{VM_MEMORY} each"),
        host.trim()
    );
    let mut failed = Vec::new();
    for kernel in KERNELS
        .iter()
        .filter(|k| only.is_empty() || only.iter().any(|n| n == k.name))
    {
        let outcome = kernel_image(kernel).and_then(|image| {
            eprintln!("vmtest: {}: booting {}", kernel.name, image.display());
            run_in_vm(kernel, &image, &tests)
        });
        match outcome {
            Ok(o) => {
                let passed = o.tests - o.failures - o.skipped;
                eprintln!(
                    "vmtest: {} ({}): {passed} passed, {} failed, {} skipped in {:.0} s",
                    kernel.name, o.kernel, o.failures, o.skipped, o.seconds
                );
                for line in &o.problems {
                    eprintln!("vmtest:   {line}");
                }
                if o.failures > 0 || o.tests == 0 {
                    failed.push(kernel.name);
                }
            }
            Err(e) => {
                eprintln!("vmtest: {}: {e:#}", kernel.name);
                failed.push(kernel.name);
            }
        }
    }
    if !failed.is_empty() {
        bail!(
            "vmtest failed on {} (logs: {}/out/<kernel>/)",
            failed.join(", "),
            vm_dir().display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_vm_that_failed_quickly_before_its_script_is_booted_again() {
        let out = std::env::temp_dir().join(format!("xtask-vm-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let quick = Duration::from_secs(17);
        assert!(failed_at_boot(&out, quick));
        assert!(!failed_at_boot(&out, BOOT_RETRY_WITHIN));
        std::fs::write(out.join("uname"), "6.12.118+deb13-amd64\n").unwrap();
        assert!(
            !failed_at_boot(&out, quick),
            "the script ran: a test failure, not a boot"
        );
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn a_section_title_is_read_from_its_rule_and_a_bare_rule_has_none() {
        assert_eq!(section_title("==== FAILURES ===="), Some("FAILURES"));
        assert_eq!(
            section_title("=== short test summary info ==="),
            Some("short test summary info")
        );
        assert_eq!(section_title("========"), None);
        assert_eq!(section_title("E   assert 0 > 0"), None);
        assert_eq!(section_title("=== a line that only starts so"), None);
    }

    #[test]
    fn a_failure_is_reported_with_its_location_and_assertion() {
        let log = "tests/test_capture.py::test_a PASSED\n\
            =================================== FAILURES ===================================\n\
            ______ test_reordering ______\n\
            \n\
            net = <netlab.Net object>\n\
            >       assert kernel[\"reord_seen\"] > 0\n\
            E       AssertionError: cwnd:10 reord_seen:0\n\
            E       assert 0 > 0\n\
            \n\
            tests/test_capture.py:201: AssertionError\n\
            =========================== short test summary info ============================\n\
            FAILED tests/test_capture.py::test_reordering\n";
        assert_eq!(
            failure_reasons(log),
            vec![
                "______ test_reordering ______",
                "E       AssertionError: cwnd:10 reord_seen:0",
                "E       assert 0 > 0",
                "tests/test_capture.py:201: AssertionError",
            ]
        );
        assert!(failure_reasons("1 passed in 2.0s\n").is_empty());
        // a setup error, a name too long for the 80 columns, separators, and the warnings
        // summary (whose `tests/x.py::test` lines are not reasons)
        let log =
            "==================================== ERRORS ====================================\n\
            _____________________ ERROR at setup of test_agent_starts ______________________\n\
            E       fixture 'store' not found\n\
            =================================== FAILURES ===================================\n\
            _ test_reordering_and_spurious_retransmits_are_counted_as_the_kernel_counts_them _\n\
            _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _\n\
            E       assert 0 > 0\n\
            tests/test_capture.py:201: AssertionError\n\
            =============================== warnings summary ===============================\n\
            tests/test_capture.py::test_a\n\
            =========================== short test summary info ============================\n";
        assert_eq!(
            failure_reasons(log),
            vec![
                "_____________________ ERROR at setup of test_agent_starts ______________________",
                "E       fixture 'store' not found",
                "_ test_reordering_and_spurious_retransmits_are_counted_as_the_kernel_counts_them _",
                "E       assert 0 > 0",
                "tests/test_capture.py:201: AssertionError",
            ]
        );
    }

    #[test]
    fn newest_kernel_package_sorts_last() {
        let mut names = [
            "linux-image-6.12.117+deb13-amd64-unsigned",
            "linux-image-6.12.9+deb13-amd64-unsigned",
            "linux-image-6.12.107+deb13-amd64-unsigned",
        ];
        names.sort_by_key(|n| version_key(n));
        assert_eq!(names[2], "linux-image-6.12.117+deb13-amd64-unsigned");
        assert_eq!(names[0], "linux-image-6.12.9+deb13-amd64-unsigned");
    }

    #[test]
    fn junit_counts_are_read_from_the_testsuite_element() {
        let xml = r#"<?xml version="1.0"?><testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="20" time="12.5"><testcase/></testsuite></testsuites>"#;
        assert_eq!(xml_attr(xml, "testsuite", "tests").as_deref(), Some("20"));
        assert_eq!(xml_attr(xml, "testsuite", "failures").as_deref(), Some("2"));
        assert_eq!(xml_attr(xml, "testsuite", "errors").as_deref(), Some("1"));
        assert_eq!(
            xml_attr(xml, "testsuite", "name").as_deref(),
            Some("pytest")
        );
        assert_eq!(xml_attr(xml, "testsuites", "nope"), None);
    }

    #[test]
    fn path_properties_are_read_and_unescaped() {
        let xml = r#"<testcase name="a"><properties><property name="path" value="hooks: sock_ops, &quot;iter:tcp&quot; &amp; more"/><property name="other" value="x"/></properties></testcase><testcase name="b"><properties><property name="path" value="rdma: netlink"/></properties></testcase>"#;
        assert_eq!(
            properties(xml, "path"),
            vec![
                r#"hooks: sock_ops, "iter:tcp" & more"#.to_string(),
                "rdma: netlink".to_string()
            ]
        );
    }
}
