//! `cargo xtask setup`: idempotent installation of the toolchain and test tools.
use std::process::{Command, Stdio};

use anyhow::{bail, Result};

use crate::run;

/// Debian packages: LLVM 22 for bpf-linker (it must match nightly rustc's LLVM), network tools
/// for the namespace tests (ip, tc, iptables, sysctl; taskset and setpriv are in util-linux),
/// libibverbs (library and headers: the verbs uprobe tests), a C compiler, and pip for the
/// Python test tools; headless Chromium renders the `analyze` HTML report in its test;
/// libfaketime steps the wall clock of one agent in the clock-step test; a Java runtime runs
/// Spark (PySpark), one of the engines the store-readers test reads an agent's spool with;
/// kmod's modprobe loads netem and rdma_rxe where the kernel has them as modules.
const APT_PACKAGES: [&str; 12] = [
    "llvm-22-dev",
    "libibverbs-dev",
    "gcc",
    "iproute2",
    "iptables",
    "procps",
    "util-linux",
    "python3-pip",
    "chromium",
    "libfaketime",
    "default-jre-headless",
    "kmod",
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

/// The VM lab (`cargo xtask vmtest`): QEMU; busybox and kmod for virtme-ng's init and the guest's
/// modprobe; rdma-core's `rdma` and the rxe provider of libibverbs, perftest for real RDMA
/// traffic. virtme-ng itself comes from PyPI (pinned: its command line has changed before).
const VM_PACKAGES: [&str; 7] = [
    "qemu-system-x86",
    "busybox-static",
    "kmod",
    "rdma-core",
    "ibverbs-providers",
    "ibverbs-utils",
    "perftest",
];
const VIRTME_NG: &str = "virtme-ng==1.42";

pub fn vm_tools() -> Result<()> {
    apt_install(&VM_PACKAGES)?;
    pip_install(
        "import importlib.metadata as m, sys; sys.exit(m.version('virtme-ng') != '1.42')",
        &[VIRTME_NG],
        "",
    )
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
/// tests (about 350 MB, no GPU needed); moto is the S3 server of the export tests; Pillow
/// checks the report screenshots; prometheus-client's parser reads the agent's textfile;
/// pyarrow, Polars and PySpark (about 450 MB) are the other engines that must read the store
/// (the versions docs/schema.md names as tested); sqlglot translates the analysis views into
/// Spark SQL (scaletrace/src/analyze/spark/translate.py), pinned: another version may write
/// the checked-in translation differently.
const PYTHON_PACKAGES: [&str; 10] = [
    "duckdb",
    "pytest",
    "nvidia-nccl-cu12",
    "moto[server]",
    "pillow",
    "prometheus-client",
    "pyarrow>=26,<27",
    "polars>=2.1,<3",
    "pyspark>=4.3,<5",
    "sqlglot==30.31.0",
];

fn python_test_tools() -> Result<()> {
    pip_install(
        "import duckdb, pytest, nvidia.nccl, moto.server, boto3, PIL, prometheus_client, pyarrow, polars, pyspark, sys, \
         importlib.metadata as m; sys.exit(m.version('sqlglot') != '30.31.0')",
        &PYTHON_PACKAGES,
        "",
    )
}

/// PyTorch (CPU is enough: gloo) for the DDP training job of the diagnosis lab
/// (tests/ddp_train.py, tests/test_diagnosis_ddp.py, `cargo xtask eval`). The default PyPI
/// wheel, with its CUDA dependencies (about 3 GB; it runs without a GPU).
const PYTHON_EVAL_PACKAGES: [&str; 1] = ["torch"];

fn python_eval_tools() -> Result<()> {
    pip_install("import torch", &PYTHON_EVAL_PACKAGES, " (about 3 GB)")
}

/// Installs `packages` from PyPI unless `check` (Python code) already runs.
fn pip_install(check: &str, packages: &[&str], size_note: &str) -> Result<()> {
    if succeeds(Command::new("python3").args(["-c", check])) {
        return Ok(());
    }
    eprintln!(
        "setup: installing {} from PyPI{size_note}",
        packages.join(", ")
    );
    let pip = |extra: &[&str]| {
        Command::new("python3")
            .args(["-m", "pip", "install", "-q"])
            .args(packages)
            .args(extra)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    // Debian's own python3 refuses system-wide pip installs without the override.
    if pip(&[]) || pip(&["--break-system-packages"]) {
        Ok(())
    } else {
        bail!("installing {} with pip failed", packages.join(", "))
    }
}

/// `scaletrace analyze` runs its SQL in DuckDB, loaded at run time (so `record` on the nodes
/// does not depend on it). Compiling DuckDB from source takes hours on a small machine; the
/// official prebuilt library is published on npm inside DuckDB's Node bindings.
const DUCKDB_TARBALL: &str =
    "https://registry.npmjs.org/@duckdb/node-bindings-linux-x64/-/node-bindings-linux-x64-1.5.6-r.1.tgz";
/// npm's integrity string for that tarball (base64 SHA-512).
const DUCKDB_INTEGRITY: &str =
    "sha512-IXcrZJE6kEqM0Z4wwdVnGBHX/frOS33VPNAwDXQ/Q+Fs84b058Qe94chrCCIcNJlG8Y3UHIUU4eBeCQxW5mN1Q==";
const DUCKDB_LIB: &str = "/usr/local/lib/libduckdb.so";

fn duckdb_library() -> Result<()> {
    if std::path::Path::new(DUCKDB_LIB).exists() {
        return Ok(());
    }
    eprintln!("setup: installing DuckDB 1.5.6 ({DUCKDB_LIB}) for `scaletrace analyze`");
    let dir = tempfile_dir()?;
    let script = format!(
        r#"
import base64, hashlib, io, shutil, sys, tarfile, urllib.request
data = urllib.request.urlopen("{DUCKDB_TARBALL}", timeout=300).read()
got = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
if got != "{DUCKDB_INTEGRITY}":
    sys.exit("DuckDB tarball integrity mismatch: " + got)
with tarfile.open(fileobj=io.BytesIO(data)) as t:
    src = t.extractfile("package/libduckdb.so")
    with open("{dir}/libduckdb.so", "wb") as out:
        shutil.copyfileobj(src, out)
"#
    );
    run(Command::new("python3").args(["-c", &script]))?;
    run(Command::new("install").args(["-m", "0755", &format!("{dir}/libduckdb.so"), DUCKDB_LIB]))?;
    let _ = std::fs::remove_dir_all(&dir);
    run(&mut Command::new("ldconfig"))
}

fn tempfile_dir() -> Result<String> {
    let dir = std::env::temp_dir().join(format!("scaletrace-setup-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir.display().to_string())
}

pub fn setup() -> Result<()> {
    apt_packages()?;
    nightly_rust_src()?;
    bpf_linker()?;
    python_test_tools()?;
    python_eval_tools()?;
    duckdb_library()?;
    Ok(())
}
