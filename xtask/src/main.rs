//! Project tasks: `cargo xtask setup | build | test | vmtest | bench | eval | run`.
mod setup;
mod vm;

use std::process::Command;

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "scaletrace project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install everything a fresh Debian machine lacks: nightly rust-src, llvm-22, bpf-linker,
    /// iproute2/iptables, the test tools (DuckDB, pytest) and PyTorch for the diagnosis lab.
    /// Quick when all is there.
    Setup,
    /// Build the release binary (the eBPF object is built and embedded by scaletrace/build.rs).
    Build,
    /// Run every test: unit tests, the integration tests in tests/ against real eBPF programs,
    /// real namespaced traffic and a real DuckDB (needs root), then the VM lab (`vmtest`: the
    /// kernel-dependent tests and real soft-RoCE RDMA on other Debian kernels, ~15 minutes).
    Test {
        /// Skip the VM lab (it also is skipped when pytest arguments select tests).
        #[arg(long)]
        no_vm: bool,
        /// Extra arguments for pytest (e.g. -k loss).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        pytest_args: Vec<String>,
    },
    /// Run the kernel-dependent tests (capture, real soft-RoCE RDMA) inside QEMU VMs booted on
    /// other Debian kernels than the host's (the list is `KERNELS` in xtask/src/vm.rs), with the
    /// host's filesystem; 3-10 minutes per kernel under TCG emulation. Skips, saying why, on a
    /// machine that cannot run VMs.
    Vmtest {
        /// Only these kernels (repeatable; names as in the list, e.g. bookworm-6.1).
        #[arg(long = "kernel")]
        kernels: Vec<String>,
        /// pytest selection to run instead of the default (e.g. tests/test_rdma_rxe.py).
        tests: Vec<String>,
    },
    /// Measure overhead, event rates and drops against a same-run baseline and bpftrace/bcc
    /// (needs root; about 5 minutes); writes docs/performance.md and docs/performance.json.
    Bench {
        /// Extra arguments for bench/bench.py (e.g. --seconds 20 --repeat 5).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        bench_args: Vec<String>,
    },
    /// Score `scaletrace analyze` on a real PyTorch DDP job (gloo, CPU) in namespaced nodes with
    /// planted faults (loss, rate limit, slow rank, clean); needs root, 15-20 minutes on 2 cores;
    /// writes docs/diagnosis.md and docs/diagnosis.json.
    Eval {
        /// Extra arguments for bench/eval.py (e.g. --quick, --reps 5, --seed 7).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        eval_args: Vec<String>,
    },
    /// Set up, build, and run scaletrace (default: `record --duration 30s --out ./traces`, then
    /// `analyze ./traces --report ./traces/report.html`).
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("failed to start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn build_release() -> Result<std::path::PathBuf> {
    run(Command::new("cargo").current_dir(workspace_root()).args([
        "build",
        "--release",
        "-p",
        "scaletrace",
    ]))?;
    Ok(workspace_root().join("target/release/scaletrace"))
}

/// Builds the release binary and runs a Python script of the repository against it.
fn run_against_release(script: &str, args: &[String]) -> Result<()> {
    let bin = build_release()?;
    run(Command::new("python3")
        .current_dir(workspace_root())
        .env("SCALETRACE_BIN", &bin)
        .arg(script)
        .args(args))
}

/// Installs what the VMs need, then runs the VM tests; a machine where that cannot be installed
/// skips them with one line saying why.
fn vmtest(kernels: &[String], tests: &[String]) -> Result<()> {
    if let Err(e) = setup::vm_tools() {
        eprintln!("vmtest: skipped: the VM tools could not be installed: {e:#}");
        return Ok(());
    }
    vm::vmtest(kernels, tests)
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup::setup(),
        Task::Build => build_release().map(|_| ()),
        Task::Test { no_vm, pytest_args } => {
            setup::setup()?;
            let root = workspace_root();
            // Default members: the eBPF crate only builds for the BPF target.
            run(Command::new("cargo").current_dir(&root).arg("test"))?;
            let bin = build_release()?;
            run(Command::new("python3")
                .current_dir(&root)
                .env("SCALETRACE_BIN", &bin)
                .args(["-m", "pytest", "-v", "tests"])
                .args(&pytest_args))?;
            if no_vm || !pytest_args.is_empty() {
                eprintln!("test: VM lab not run (`cargo xtask vmtest` runs it)");
                return Ok(());
            }
            vmtest(&[], &[])
        }
        Task::Vmtest { kernels, tests } => {
            setup::setup()?;
            build_release()?;
            vmtest(&kernels, &tests)
        }
        Task::Bench { bench_args } => {
            setup::setup()?;
            setup::bench_tools()?;
            run_against_release("bench/bench.py", &bench_args)
        }
        Task::Eval { eval_args } => {
            setup::setup()?;
            run_against_release("bench/eval.py", &eval_args)
        }
        Task::Run { args } => {
            setup::setup()?;
            let bin = build_release()?;
            if !args.is_empty() {
                return run(Command::new(bin).current_dir(workspace_root()).args(args));
            }
            // The default job: record this host, then analyze what was recorded.
            run(Command::new(&bin).current_dir(workspace_root()).args([
                "record",
                "--duration",
                "30s",
                "--out",
                "./traces",
            ]))?;
            run(Command::new(bin).current_dir(workspace_root()).args([
                "analyze",
                "./traces",
                "--report",
                "./traces/report.html",
            ]))
        }
    }
}
