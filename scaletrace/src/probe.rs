//! Loading the embedded eBPF object and attaching each hook on its own, so a kernel that lacks
//! one hook loses only what that hook provides.
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeScope},
        CgroupAttachMode, SockOps, TracePoint, UProbe,
    },
    Ebpf, EbpfLoader,
};
use scaletrace_common::{Config, TracepointOffsets};

use crate::tracefs;

/// The eBPF object built by build.rs.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/scaletrace"));

/// A tracepoint hook: its program name, tracefs location and state field for `oldstate`.
struct TracepointHook {
    program: &'static str,
    category: &'static str,
    name: &'static str,
    state_field: Option<&'static str>,
    /// Where its offsets go in the eBPF config.
    slot: fn(&mut Config) -> &mut TracepointOffsets,
}

const TRACEPOINTS: [TracepointHook; 3] = [
    TracepointHook {
        program: "tcp_retransmit_skb",
        category: "tcp",
        name: "tcp_retransmit_skb",
        state_field: Some("state"),
        slot: |c| &mut c.retransmit_tp,
    },
    TracepointHook {
        program: "tcp_retransmit_synack",
        category: "tcp",
        name: "tcp_retransmit_synack",
        state_field: None,
        slot: |c| &mut c.synack_tp,
    },
    TracepointHook {
        program: "inet_sock_set_state",
        category: "sock",
        name: "inet_sock_set_state",
        state_field: Some("oldstate"),
        slot: |c| &mut c.state_tp,
    },
];

/// The benchmark's synthetic event source (`--bench-source-pid`), as (program, tracepoint
/// category, name): one RTT sample per getppid() of that process. Never attached otherwise.
const BENCH_SOURCE: (&str, &str, &str) = ("bench_source", "syscalls", "sys_enter_getppid");

/// What got attached, and what did not with the reason.
#[derive(Debug, Default)]
pub struct Hooks {
    pub attached: Vec<String>,
    pub missing: Vec<(String, String)>,
}

impl Hooks {
    pub fn attached_list(&self) -> String {
        self.attached.join(",")
    }
    pub fn missing_list(&self) -> String {
        self.missing
            .iter()
            .map(|(h, why)| format!("{h}: {why}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

pub struct Capture {
    pub ebpf: Ebpf,
    pub hooks: Hooks,
}

/// Fills in tracepoint offsets; a tracepoint whose layout cannot be read is marked missing.
fn tracepoint_offsets(
    config: &mut Config,
    tracefs_root: &Path,
    hooks: &mut Hooks,
) -> Vec<&'static str> {
    let mut usable = Vec::new();
    for tp in &TRACEPOINTS {
        let hook = format!("{}:{}", tp.category, tp.name);
        match tracefs::tracepoint_offsets(tracefs_root, tp.category, tp.name, tp.state_field) {
            // The state program filters on protocol and reports both states.
            Ok(off)
                if tp.name == "inet_sock_set_state"
                    && (off.protocol == TracepointOffsets::ABSENT
                        || off.newstate == TracepointOffsets::ABSENT) =>
            {
                hooks
                    .missing
                    .push((hook, "kernel too old: no protocol/newstate fields".into()))
            }
            Ok(off) => {
                *(tp.slot)(config) = off;
                usable.push(tp.program);
            }
            Err(e) => hooks.missing.push((hook, format!("{e:#}"))),
        }
    }
    usable
}

/// Where an offset goes in the eBPF config.
type OffsetSlot = fn(&mut Config) -> &mut u16;

/// The `struct tcp_sock` members sock_ops reads through its socket (`Config` slot, member).
const TCP_SOCK_MEMBERS: [(OffsetSlot, &str); 2] = [
    (|c| &mut c.tcp_sock_dsack_dups, "dsack_dups"),
    (|c| &mut c.tcp_sock_reord_seen, "reord_seen"),
];

/// The offsets on the way from a socket to its cgroup v2 id (`Config` slot, the (struct,
/// member) pairs whose offsets add up to it): `sk->sk_cgrp_data.cgroup->kn->id`.
const CGROUP_ID_PATH: [(OffsetSlot, &[(&str, &str)]); 3] = [
    (
        |c| &mut c.sock_cgroup,
        &[("sock", "sk_cgrp_data"), ("sock_cgroup_data", "cgroup")],
    ),
    (|c| &mut c.cgroup_kn, &[("cgroup", "kn")]),
    (|c| &mut c.kernfs_node_id, &[("kernfs_node", "id")]),
];

/// The hook name of the flows' cgroup (`flows.cgroup` and the job labels).
const CGROUP_ID_HOOK: &str = "sock:cgroup_id";

/// Fills in, from the kernel's BTF, the offsets of the kernel struct members sock_ops reads
/// through its socket: the `tcp_sock` counters and the socket's cgroup id. One it cannot place
/// is listed missing with the reason, and its columns stay null.
fn kernel_struct_offsets(config: &mut Config, hooks: &mut Hooks) {
    let btf = btf_rs::Btf::from_file(crate::kernel_btf::VMLINUX_BTF)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", crate::kernel_btf::VMLINUX_BTF));
    let offset = |name: &str, member: &str| -> Result<u16> {
        let btf = btf.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        match crate::kernel_btf::member_offset(btf, name, member)? {
            Some(offset) if offset < u32::from(TracepointOffsets::ABSENT) => Ok(offset as u16),
            Some(offset) => bail!("{name}.{member} at offset {offset}: out of range"),
            None => bail!("kernel too old: {name} has no member {member}"),
        }
    };
    for (slot, member) in TCP_SOCK_MEMBERS {
        let hook = format!("tcp_sock:{member}");
        match offset("tcp_sock", member) {
            Ok(at) => {
                *slot(config) = at;
                hooks.attached.push(hook);
            }
            Err(e) => hooks.missing.push((hook, format!("{e:#}"))),
        }
    }
    let cgroup_path: Result<Vec<u16>> = CGROUP_ID_PATH
        .iter()
        .map(|(_, path)| {
            path.iter().try_fold(0u16, |sum, (name, member)| {
                sum.checked_add(offset(name, member)?)
                    .filter(|&at| at < TracepointOffsets::ABSENT)
                    .context("offset out of range")
            })
        })
        .collect();
    match cgroup_path {
        Ok(offsets) => {
            for ((slot, _), at) in CGROUP_ID_PATH.iter().zip(offsets) {
                *slot(config) = at;
            }
            hooks.attached.push(CGROUP_ID_HOOK.into());
        }
        Err(e) => hooks
            .missing
            .push((CGROUP_ID_HOOK.into(), format!("{e:#}"))),
    }
}

/// The eBPF object with `config` in place, its maps created; programs load when attached.
fn load_object(
    config: &Config,
    ebpf_log_level: u8,
    ring_bytes: u32,
    max_flows: u32,
    max_qps: u32,
) -> Result<Ebpf> {
    EbpfLoader::new()
        .override_global("CONFIG", config, true)
        .override_global("AYA_LOG_LEVEL", &ebpf_log_level, false)
        .map_max_entries("EVENTS", ring_bytes)
        .map_max_entries("FLOWS", max_flows)
        .map_max_entries("TRACKED", max_flows)
        .map_max_entries("QP_TRAFFIC", max_qps)
        .load(EBPF_OBJECT)
        .context("loading the eBPF object into the kernel failed")
}

/// Whether sock_ops will read any `tcp_sock` member.
fn reads_tcp_sock(config: &Config) -> bool {
    let mut config = *config;
    TCP_SOCK_MEMBERS
        .iter()
        .map(|(slot, _)| *slot)
        .chain(CGROUP_ID_PATH.iter().map(|(slot, _)| *slot))
        .any(|slot| *slot(&mut config) != TracepointOffsets::ABSENT)
}

/// Turns the kernel struct reads off (their columns become null), saying why.
fn forget_tcp_sock_offsets(config: &mut Config, hooks: &mut Hooks, why: &str) {
    let hooks_off = TCP_SOCK_MEMBERS
        .iter()
        .map(|(slot, member)| (*slot, format!("tcp_sock:{member}")))
        .chain(
            CGROUP_ID_PATH
                .iter()
                .map(|(slot, _)| (*slot, CGROUP_ID_HOOK.to_string())),
        );
    for (slot, hook) in hooks_off {
        *slot(config) = TracepointOffsets::ABSENT;
        hooks.attached.retain(|h| *h != hook);
        if !hooks.missing.iter().any(|(h, _)| *h == hook) {
            hooks.missing.push((hook, why.to_owned()));
        }
    }
}

/// Loads the programs with `config` and attaches sock_ops to `cgroup` and the tracepoints.
pub fn load_and_attach(
    mut config: Config,
    ring_bytes: u32,
    max_flows: u32,
    max_qps: u32,
    tracefs_root: &Path,
    cgroup: &Path,
    netns: Option<&Path>,
) -> Result<Capture> {
    let mut hooks = Hooks::default();
    let usable_tracepoints = tracepoint_offsets(&mut config, tracefs_root, &mut hooks);
    kernel_struct_offsets(&mut config, &mut hooks);

    // Program-side aya-log statements below this level cost nothing: follow the loader's level.
    let ebpf_log_level: u8 = match log::max_level() {
        log::LevelFilter::Off => 0,
        log::LevelFilter::Error => 1,
        log::LevelFilter::Warn => 2,
        log::LevelFilter::Info => 3,
        log::LevelFilter::Debug => 4,
        log::LevelFilter::Trace => 5,
    };
    let mut ebpf = load_object(&config, ebpf_log_level, ring_bytes, max_flows, max_qps)?;
    let mut sockops = attach_sockops(&mut ebpf, cgroup);
    if let Err(e) = &sockops {
        if reads_tcp_sock(&config) && format!("{e:#}").contains("verifier rejected") {
            // A kernel whose verifier refuses the tcp_sock reads in sock_ops (the helpers
            // came in 5.10) must not lose the flow table for two counters: load again without.
            let why = format!("sock_ops cannot read tcp_sock here ({})", short_error(e));
            forget_tcp_sock_offsets(&mut config, &mut hooks, &why);
            ebpf = load_object(&config, ebpf_log_level, ring_bytes, max_flows, max_qps)?;
            sockops = attach_sockops(&mut ebpf, cgroup);
        }
    }
    match sockops {
        Ok(()) => {
            hooks
                .attached
                .push(format!("sock_ops:{}", cgroup.display()));
            adopt_open_connections(&mut ebpf, netns, &mut hooks);
        }
        Err(e) => hooks.missing.push(("sock_ops".into(), short_error(&e))),
    }
    for tp in TRACEPOINTS
        .iter()
        .filter(|tp| usable_tracepoints.contains(&tp.program))
    {
        let hook = format!("{}:{}", tp.category, tp.name);
        match attach_tracepoint(&mut ebpf, tp.program, tp.category, tp.name) {
            Ok(()) => hooks.attached.push(hook),
            Err(e) => hooks.missing.push((hook, short_error(&e))),
        }
    }
    if config.bench_source_tgid != 0 {
        // the benchmark asked for it: failing to attach it is an error, not a missing hook
        let (program, category, name) = BENCH_SOURCE;
        attach_tracepoint(&mut ebpf, program, category, name)?;
        hooks.attached.push(format!(
            "bench:{category}:{name} (pid {})",
            config.bench_source_tgid
        ));
    }
    Ok(Capture { ebpf, hooks })
}

/// Turns on sock_ops' callbacks for the connections already open (after sock_ops is attached,
/// so none is missed in between), and says what it did.
fn adopt_open_connections(ebpf: &mut Ebpf, netns: Option<&Path>, hooks: &mut Hooks) {
    const HOOK: &str = "iter:tcp";
    let namespaces = crate::adopt::namespaces(netns);
    match crate::adopt::adopt_open_connections(ebpf, &namespaces) {
        Ok(a) => {
            for (ns, why) in &a.failed {
                log::debug!("open connections in {} not adopted: {why}", ns.display());
            }
            if a.refused > 0 && a.connections == 0 {
                hooks.missing.push((
                    HOOK.into(),
                    format!(
                        "this kernel does not let a program turn on an open connection's callbacks (Linux 6.12 does): {} connections open before the start are not recorded",
                        a.refused
                    ),
                ));
                return;
            }
            log::info!(
                "adopting connections open before the start: {} in {} network namespace(s){}, recorded from their next ACK if the filters keep them",
                a.connections,
                a.namespaces,
                if a.failed.is_empty() {
                    String::new()
                } else {
                    format!(" ({} could not be entered)", a.failed.len())
                }
            );
            hooks.attached.push(HOOK.into());
        }
        Err(e) => hooks.missing.push((
            format!("{HOOK} (connections open before the start)"),
            short_error(&e),
        )),
    }
}

/// Error text for one hook: the verifier log can be thousands of lines, so keep the cause and
/// the verifier's last words.
fn short_error(e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= 4 {
        return lines.join(" ");
    }
    // the verifier's reason comes just before its statistics (verification time, stack
    // depth, instructions processed)
    let mut tail: Vec<&str> = lines
        .iter()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(7)
        .copied()
        .collect();
    tail.reverse();
    format!("{} ... {}", lines[0], tail.join(" | "))
}

fn attach_sockops(ebpf: &mut Ebpf, cgroup: &Path) -> Result<()> {
    let prog: &mut SockOps = ebpf
        .program_mut("scaletrace_sockops")
        .context("program scaletrace_sockops missing from the object")?
        .try_into()?;
    prog.load()
        .context("the verifier rejected the sock_ops program")?;
    let dir = std::fs::File::open(cgroup)
        .with_context(|| format!("opening cgroup {}", cgroup.display()))?;
    // Default mode: on 5.7+ aya attaches through a BPF link, which always coexists with other
    // sock_ops users (CNI plugins) and takes no flags (AllowMultiple there is EINVAL).
    prog.attach(dir, CgroupAttachMode::default())
        .with_context(|| format!("attaching sock_ops to {}", cgroup.display()))?;
    Ok(())
}

/// eBPF program name of the entry probe of an NCCL function: ncclAllReduce -> nccl_all_reduce.
pub fn nccl_program(symbol: &str) -> String {
    let mut snake = String::from("nccl");
    for c in symbol.trim_start_matches("nccl").chars() {
        if c.is_ascii_uppercase() {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    snake
}

/// A family of uprobes: the functions of one library and how their programs are named.
pub struct UprobeFamily {
    pub label: &'static str,
    pub functions: &'static [(u32, &'static str)],
    /// Entry program name for a symbol; the return program adds `_ret`.
    pub program: fn(&str) -> String,
}

pub const NCCL: UprobeFamily = UprobeFamily {
    label: "nccl",
    functions: &scaletrace_common::NCCL_FUNCTIONS,
    program: nccl_program,
};

pub const VERBS: UprobeFamily = UprobeFamily {
    label: "verbs",
    functions: &scaletrace_common::VERBS_FUNCTIONS,
    program: str::to_string,
};

/// Probes fire for one process (`--pid`) or for all.
fn uprobe_scope(pid: Option<u32>) -> UProbeScope {
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
        let mut attached = 0;
        for (_, symbol) in family.functions {
            let enter = (family.program)(symbol);
            let exit = format!("{enter}_ret");
            let result = crate::elf_symbols::function_offset(lib, symbol).and_then(|offset| {
                attach_uprobe_at(ebpf, &enter, offset, lib, scope)
                    .and_then(|_| attach_uprobe_at(ebpf, &exit, offset, lib, scope))
                    .with_context(|| format!("attaching to {symbol}"))
            });
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

fn attach_uprobe_at(
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

/// Attaches the data-path probes to each provider library whose symbol table has
/// `<prefix>_post_send` / `<prefix>_poll_cq`. Distribution builds strip these static functions;
/// then one line says so instead of one per library.
pub fn attach_verbs_providers(
    ebpf: &mut Ebpf,
    libs: &[std::path::PathBuf],
    pid: Option<u32>,
    hooks: &mut Hooks,
) {
    let scope = uprobe_scope(pid);
    let mut found = false;
    for lib in libs {
        for prefix in scaletrace_common::VERBS_PROVIDER_PREFIXES {
            let post = format!("{prefix}_post_send");
            let poll = format!("{prefix}_poll_cq");
            let (Ok(post_at), Ok(poll_at)) = (
                crate::elf_symbols::function_offset(lib, &post),
                crate::elf_symbols::function_offset(lib, &poll),
            ) else {
                continue;
            };
            found = true;
            let hook = format!("verbs-data-path({prefix}):{}", lib.display());
            let result = attach_uprobe_at(ebpf, "verbs_post_send", post_at, lib, scope)
                .and_then(|_| attach_uprobe_at(ebpf, "verbs_poll_cq", poll_at, lib, scope))
                .and_then(|_| attach_uprobe_at(ebpf, "verbs_poll_cq_ret", poll_at, lib, scope));
            match result {
                Ok(()) => hooks.attached.push(hook),
                Err(e) => hooks.missing.push((hook, short_error(&e))),
            }
        }
    }
    if !found && !libs.is_empty() {
        hooks.missing.push((
            "verbs-data-path".into(),
            format!(
                "no provider among {} exports post_send/poll_cq symbols (stripped; install the rdma-core debug symbols or pass --verbs-provider-lib)",
                libs.len()
            ),
        ));
    }
}

fn attach_tracepoint(ebpf: &mut Ebpf, program: &str, category: &str, name: &str) -> Result<()> {
    let prog: &mut TracePoint = ebpf
        .program_mut(program)
        .with_context(|| format!("program {program} missing from the object"))?
        .try_into()?;
    prog.load()
        .with_context(|| format!("the verifier rejected {program}"))?;
    prog.attach(category, name)?;
    Ok(())
}
