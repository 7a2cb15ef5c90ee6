//! Loading the embedded eBPF object and attaching the hooks whose offsets go into it at load
//! (the TCP source's, `sources/tcp/attach.rs`, and the benchmark's source); the uprobe sources
//! attach to the loaded object afterwards. Each hook on its own (`hooks.rs`).
use std::path::Path;

use anyhow::{Context as _, Result};
use aya::{
    programs::{Program, ProgramError, TracePoint},
    Ebpf, EbpfLoader,
};
use scaletrace_common::Config;

use crate::hooks::{short_error, Hooks};
use crate::sources::tcp::attach::{
    adopt_open_connections, attach_sockops, forget_tcp_sock_offsets, kernel_struct_offsets,
    netns_index, reads_tcp_sock, tracepoint_offsets, TRACEPOINTS,
};
use crate::sources::tcp::open_flows;

/// The eBPF object built by build.rs.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/scaletrace"));

/// The benchmark's synthetic event source (`--bench-source-pid`), as (program, tracepoint
/// category, name): one RTT sample per getppid() of that process. Never attached otherwise.
const BENCH_SOURCE: (&str, &str, &str) = ("bench_source", "syscalls", "sys_enter_getppid");

pub struct Capture {
    pub ebpf: Ebpf,
    pub hooks: Hooks,
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
        .map_max_entries("UNSENT_ENDS", max_flows)
        .map_max_entries("TRACKED", max_flows)
        .map_max_entries("QP_TRAFFIC", max_qps)
        .load(EBPF_OBJECT)
        .context("loading the eBPF object into the kernel failed")
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
    netns_index(&mut config, &mut hooks, &usable_tracepoints);

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
            match open_flows::load(&mut ebpf) {
                Ok(()) => hooks.attached.push("iter:open-flows".into()),
                Err(e) => {
                    log::warn!(
                        "flows still open at a rotation or the stop cannot be read ({}): they \
                         will have no row; flows that end during the run are recorded",
                        short_error(&e)
                    );
                    hooks
                        .missing
                        .push(("iter:open-flows".into(), short_error(&e)));
                }
            }
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

/// Detaches and unloads every program, each from a thread of its own, then frees the maps.
/// Detaching waits for the kernel in places (a grace period, 76-128 ms per close in `strace`
/// of a stop); one after the other, a plain run's programs made every stop (and an agent's
/// restart) take 2.1 s, from threads 1.6 s. The tracepoints' detaches still come one after
/// the other (the kernel holds a lock across the wait), which is most of what remains.
pub fn detach_all(mut ebpf: Ebpf) {
    std::thread::scope(|scope| {
        for (name, program) in ebpf.programs_mut() {
            let detach = move || {
                if let Err(e) = unload(program) {
                    log::debug!("unloading {name}: {e}");
                }
            };
            // A thread refused (a pids limit, no memory) must not cost the run its files:
            // that program is unloaded here, in turn.
            let detach = std::sync::Arc::new(std::sync::Mutex::new(Some(detach)));
            let in_thread = detach.clone();
            let spawned = std::thread::Builder::new()
                .name("detach".into())
                .spawn_scoped(scope, move || take_and_run(&in_thread));
            if spawned.is_err() {
                take_and_run(&detach);
            }
        }
    });
    drop(ebpf);
}

/// Runs the closure in `slot` once, whichever caller gets it first.
fn take_and_run(slot: &std::sync::Mutex<Option<impl FnOnce()>>) {
    let job = slot.lock().map(|mut s| s.take()).unwrap_or(None);
    if let Some(job) = job {
        job();
    }
}

/// Unloads one program (its links first); kinds scaletrace does not load are left to the drop.
fn unload(program: &mut Program) -> Result<(), ProgramError> {
    let unloaded = match program {
        Program::UProbe(p) => p.unload(),
        Program::TracePoint(p) => p.unload(),
        Program::SockOps(p) => p.unload(),
        Program::Iter(p) => p.unload(),
        _ => Ok(()),
    };
    match unloaded {
        // (a program this run never loaded: a library that was not found, the bench source)
        Err(ProgramError::NotLoaded) => Ok(()),
        other => other,
    }
}
