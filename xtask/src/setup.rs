//! `cargo xtask setup`: idempotent installation of the toolchain and test tools.
use std::process::{Command, Stdio};

use anyhow::{bail, Result};

use crate::run;

/// Debian packages: LLVM 22 for bpf-linker (it must match nightly rustc's LLVM), network tools
/// for the namespace tests (ip, tc, iptables, sysctl; taskset and setpriv are in util-linux),
/// libibverbs (library and headers: the verbs uprobe tests), a C compiler, and pip for the
/// Python test tools.
const APT_PACKAGES: [&str; 8] = [
    "llvm-22-dev",
    "libibverbs-dev",
    "gcc",
    "iproute2",
    "iptables",
    "procps",
    "util-linux",
    "python3-pip",
];
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// The workload and the tools compared against in `cargo xtask bench`.
const BENCH_PACKAGES: [&str; 4] = ["iperf3", "bpftrace", "bpfcc-tools", "bpftool"];

pub fn bench_tools() -> Result<()> {
    apt_install(&BENCH_PACKAGES)
}

fn apt_packages() -> Result<()> {
    apt_install(&APT_PACKAGES)
}

fn apt_install(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !succeeds(Command::new("dpkg").args(["-s", p])))
        .collect();
    // pip may come with a non-Debian python3 (pyenv); do not install Debian's then.
    let missing: Vec<&str> = missing
        .into_iter()
        .filter(|p| {
            *p != "python3-pip"
                || !succeeds(Command::new("python3").args(["-m", "pip", "--version"]))
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("setup: installing Debian packages {}", missing.join(" "));
    run(Command::new("apt-get").arg("update").arg("-q"))?;
    run(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing))
}

/// Whether a `rustup` listing has a line starting with `prefix`.
fn rustup_lists(args: &[&str], prefix: &str) -> bool {
    Command::new("rustup")
        .args(args)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.starts_with(prefix))
        })
        .unwrap_or(false)
}

fn nightly_rust_src() -> Result<()> {
    if !rustup_lists(&["toolchain", "list"], "nightly") {
        eprintln!("setup: installing the nightly toolchain");
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    if !rustup_lists(
        &["component", "list", "--installed", "--toolchain", "nightly"],
        "rust-src",
    ) {
        eprintln!("setup: adding rust-src to nightly");
        run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    Ok(())
}

fn bpf_linker() -> Result<()> {
    if succeeds(Command::new("bpf-linker").arg("--version")) {
        return Ok(());
    }
    eprintln!("setup: building bpf-linker against llvm-22 (about a minute)");
    let path = format!(
        "{LLVM_PREFIX}/bin:{}",
        std::env::var("PATH").unwrap_or_default()
    );
    run(Command::new("cargo")
        .env("LLVM_PREFIX", LLVM_PREFIX)
        .env("PATH", path)
        .args([
            "install",
            "bpf-linker",
            "--no-default-features",
            "--features",
            "llvm-22",
        ]))
}

/// DuckDB reads the Parquet in tests; the NCCL wheel ships a real libnccl.so for the uprobe
/// tests (about 350 MB, no GPU needed).
const PYTHON_PACKAGES: [&str; 3] = ["duckdb", "pytest", "nvidia-nccl-cu12"];

fn python_test_tools() -> Result<()> {
    if succeeds(Command::new("python3").args(["-c", "import duckdb, pytest, nvidia.nccl"])) {
        return Ok(());
    }
    eprintln!("setup: installing {} from PyPI", PYTHON_PACKAGES.join(", "));
    let pip = |extra: &[&str]| {
        Command::new("python3")
            .args(["-m", "pip", "install", "-q"])
            .args(PYTHON_PACKAGES)
            .args(extra)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    // Debian's own python3 refuses system-wide pip installs without the override.
    if pip(&[]) || pip(&["--break-system-packages"]) {
        Ok(())
    } else {
        bail!("installing {} with pip failed", PYTHON_PACKAGES.join(", "))
    }
}

pub fn setup() -> Result<()> {
    apt_packages()?;
    nightly_rust_src()?;
    bpf_linker()?;
    python_test_tools()?;
    Ok(())
}
