//! Builds the eBPF object (nightly, bpfel-unknown-none, bpf-linker) and leaves it in OUT_DIR,
//! where `src/probe.rs` embeds it (`EBPF_OBJECT`), so `scaletrace` ships as one binary.
use anyhow::{anyhow, Context as _};

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?;
    let ebpf_dir = std::path::Path::new(&manifest_dir).join("../scaletrace-ebpf");
    let ebpf_dir = ebpf_dir
        .canonicalize()
        .with_context(|| format!("eBPF crate not found at {}", ebpf_dir.display()))?;
    let root_dir = ebpf_dir
        .to_str()
        .ok_or_else(|| anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    let package = aya_build::Package {
        name: "scaletrace-ebpf",
        root_dir,
        ..Default::default()
    };
    // aya-build relays everything the nested cargo prints on stderr as `cargo:warning=` lines,
    // so its progress ("Compiling ...", "Finished ...") made every eBPF rebuild print dozens of
    // warnings. Quiet, it prints only real diagnostics (errors, and warnings of the eBPF code,
    // which still reach the build output).
    // SAFETY (edition 2024 marks set_var unsafe): a build script is single-threaded here.
    unsafe { std::env::set_var("CARGO_TERM_QUIET", "true") };
    aya_build::build_ebpf([package], aya_build::Toolchain::default()).context(
        "building the eBPF programs failed; run `cargo xtask setup` to install nightly rust-src, \
         llvm-22 and bpf-linker",
    )
}
