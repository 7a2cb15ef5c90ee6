//! What the uprobe sources (NCCL, verbs) share: finding the libraries to probe and the symbol
//! to attach to, attaching a family of entry/return probes, and timing a probed call.
pub mod elf_symbols;
pub mod libraries;

use std::path::Path;

use anyhow::{Context as _, Result};
use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeScope},
        UProbe,
    },
    Ebpf,
};

use crate::hooks::{short_error, Hooks};

/// A family of uprobes: the functions of one library and how their programs are named.
pub struct UprobeFamily {
    pub label: &'static str,
    pub functions: &'static [(u32, &'static str)],
    /// Entry program name for a symbol; the return program adds `_ret`.
    pub program: fn(&str) -> String,
    /// The command-line flag that names its libraries (`--<flag>`, repeatable).
    pub flag: &'static str,
    /// File names its libraries start with, in a process's maps (`--pid`).
    pub lib_prefix: &'static str,
    /// The soname the dynamic loader resolves (without `--pid`).
    pub soname: &'static str,
}

/// Finds the family's libraries (its flag, else `--pid`'s maps, else the loader's cache) and
/// attaches its probes to each; none found is said once, at info level (most hosts have no
/// NCCL or RDMA).
pub fn attach_found(
    ebpf: &mut Ebpf,
    family: &UprobeFamily,
    target: &super::family::AttachTarget,
    hooks: &mut Hooks,
) {
    let explicit = target.libraries(family.flag);
    let (libs, source) =
        libraries::find_libraries(&explicit, target.pid, family.lib_prefix, family.soname);
    let libs = libraries::each_file_once(libs);
    if libs.is_empty() {
        log::info!(
            "no {} found (pass --{} or --pid): {} calls are not traced",
            family.soname,
            family.flag,
            family.label
        );
    } else {
        log::debug!("{} libraries from {source}: {libs:?}", family.label);
        attach_uprobes(ebpf, family, &libs, target.pid, hooks);
    }
}

/// Probes fire for one process (`--pid`) or for all.
pub fn uprobe_scope(pid: Option<u32>) -> UProbeScope {
    match pid.and_then(std::num::NonZeroU32::new) {
        Some(pid) => UProbeScope::OneProcess(pid),
        None => UProbeScope::AllProcesses,
    }
}

/// Attaches a family's probes to each library; each function that fails is reported on its own.
/// Symbols are resolved to the default version (see elf_symbols), then attached by offset.
pub fn attach_uprobes(
    ebpf: &mut Ebpf,
    family: &UprobeFamily,
    libs: &[std::path::PathBuf],
    pid: Option<u32>,
    hooks: &mut Hooks,
) {
    let scope = uprobe_scope(pid);
    for lib in libs {
        if !lib.exists() {
            hooks.missing.push((
                format!("{}:{}", family.label, lib.display()),
                "no such file".into(),
            ));
            continue;
        }
        let hook = format!("{}:{}", family.label, lib.display());
        // One line for a library that is not one of the family's (unreadable, not ELF, or
        // exporting none of its functions); one per function only for a library that has
        // some of them (an older version lacking one, a probe the kernel refused).
        let table = match elf_symbols::FunctionTable::read(lib) {
            Ok(table) => table,
            Err(e) => {
                hooks.missing.push((hook, short_error(&e)));
                continue;
            }
        };
        let offsets: Vec<(&str, Option<u64>)> = family
            .functions
            .iter()
            .map(|(_, symbol)| (*symbol, table.offset(symbol)))
            .collect();
        if offsets.iter().all(|(_, offset)| offset.is_none()) {
            hooks.missing.push((
                hook,
                format!(
                    "exports none of the {} {} functions: not a {} library",
                    offsets.len(),
                    family.label,
                    family.soname
                ),
            ));
            continue;
        }
        let mut attached = 0;
        for (symbol, offset) in offsets {
            let enter = (family.program)(symbol);
            let exit = format!("{enter}_ret");
            let result = match offset {
                Some(offset) => attach_uprobe_at(ebpf, &enter, offset, lib, scope)
                    .and_then(|_| attach_uprobe_at(ebpf, &exit, offset, lib, scope))
                    .with_context(|| format!("attaching to {symbol}")),
                None => Err(anyhow::anyhow!("{symbol} not found in {}", lib.display())),
            };
            match result {
                Ok(()) => attached += 1,
                Err(e) => hooks.missing.push((
                    format!("{}:{symbol}@{}", family.label, lib.display()),
                    short_error(&e),
                )),
            }
        }
        if attached > 0 {
            hooks.attached.push(format!(
                "{}({attached} functions):{}",
                family.label,
                lib.display()
            ));
        }
    }
}

pub fn attach_uprobe_at(
    ebpf: &mut Ebpf,
    program: &str,
    offset: u64,
    lib: &Path,
    scope: UProbeScope,
) -> Result<()> {
    let prog: &mut UProbe = ebpf
        .program_mut(program)
        .with_context(|| format!("program {program} missing from the object"))?
        .try_into()?;
    if prog.fd().is_err() {
        prog.load()
            .with_context(|| format!("the verifier rejected {program}"))?;
    }
    prog.attach(UProbeAttachLocation::AbsoluteOffset(offset), lib, scope)?;
    Ok(())
}

/// When and by whom a probed library call ran: entry to return, from the probes' pid_tgid.
pub struct CallTiming {
    pub ts: i64,
    pub dur_ns: i64,
    pub pid: u32,
    pub tid: u32,
}

impl CallTiming {
    /// `utc` converts kernel monotonic ns.
    pub fn new(entry_ns: u64, return_ns: u64, pid_tgid: u64, utc: impl Fn(u64) -> i64) -> Self {
        CallTiming {
            ts: utc(entry_ns),
            dur_ns: return_ns.saturating_sub(entry_ns) as i64,
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
        }
    }
}
