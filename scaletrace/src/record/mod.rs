//! `scaletrace record`: load, attach, drain the ring buffer into Parquet until the duration
//! ends or a signal arrives, then detach and flush everything, including flows still open.
pub mod accounting;
mod args;
mod housekeeping;
mod kernel_tables;
mod sinks;
mod status;

use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use aya::maps::RingBuf;
use tokio::{
    io::unix::AsyncFd,
    signal::unix::{signal, SignalKind},
};

pub use args::RecordArgs;
use args::RING_DRAIN_INTERVAL;
use housekeeping::Rotation;
pub use housekeeping::{Housekeeping, Session, StartHousekeeping};
pub use kernel_tables::{KernelCounters, KernelMaps, KernelTables};
use sinks::ring_records;
pub use sinks::{RunTotals, Sinks};
use status::StatusLine;

use crate::{
    clock::{now_ns, ClockOffset},
    environment,
    layout::Layout,
    node::NodeIdentity,
    probe,
    sources::{family::AttachTarget, probe_families, tcp::open_flows::OpenFlows},
    tracefs,
};

fn take_map(ebpf: &mut aya::Ebpf, name: &str) -> Result<aya::maps::Map> {
    ebpf.take_map(name)
        .with_context(|| format!("map {name} missing from the eBPF object"))
}

pub fn run(args: RecordArgs) -> Result<()> {
    run_with(args, None)
}

/// `record`, or a service with its caller's housekeeping (`agent`: Hive layout, rotation,
/// spool and health).
pub fn run_with(args: RecordArgs, housekeeping: Option<StartHousekeeping>) -> Result<()> {
    environment::check_privileges()?;
    if !environment::btf_available() {
        log::warn!("no kernel BTF at /sys/kernel/btf/vmlinux; continuing (tracepoint layouts come from tracefs)");
    }
    environment::raise_memlock_limit();
    let netns_path = args
        .netns
        .as_deref()
        .map(environment::netns_path)
        .transpose()?;
    let netns_cookie = match &netns_path {
        Some(path) => environment::netns_cookie(path)?,
        None => 0,
    };
    let config = args.config(netns_cookie)?;
    let cgroup_mount = environment::cgroup2_root(None)?;
    let cgroup = args.cgroup_dir(&cgroup_mount)?.unwrap_or(cgroup_mount);
    let cgroup = environment::cgroup2_root(Some(&cgroup))?;
    let tracefs_root = tracefs::ensure_mounted()?;

    let node = NodeIdentity::current();
    let clock_start = ClockOffset::measure();
    let start_utc = now_ns(libc::CLOCK_REALTIME);
    let run_id = format!(
        "{}-{}-{}",
        node.hostname,
        chrono::DateTime::from_timestamp_nanos(start_utc).format("%Y%m%dT%H%M%SZ"),
        std::process::id()
    );

    // Signal handlers go in before anything is attached: a Ctrl-C from here on ends the run
    // cleanly instead of killing the process with programs attached and files half-written.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let _runtime_context = runtime.enter();
    let mut signals = Signals {
        sigint: signal(SignalKind::interrupt()).context("installing SIGINT handler")?,
        sigterm: signal(SignalKind::terminate()).context("installing SIGTERM handler")?,
        // a closed ssh session sends HUP: end the run as for Ctrl-C, with every file finished
        sighup: signal(SignalKind::hangup()).context("installing SIGHUP handler")?,
        // USR1/USR2 kill by default and mean nothing here: a stray `kill -USR1` loses no data
        sigusr1: signal(SignalKind::user_defined1()).context("installing SIGUSR1 handler")?,
        sigusr2: signal(SignalKind::user_defined2()).context("installing SIGUSR2 handler")?,
    };

    // Create the output first: a bad --out must fail before anything is attached.
    let _out_lock = match &housekeeping {
        // (the agent holds its own lock on its spool)
        Some(_) => None,
        None => Some(lock_out(&args.out, &node.hostname)?),
    };
    let nic_sysfs = (!args.nic_interval.is_zero()).then_some(args.sysfs_root.as_path());
    let interfaces = crate::interfaces::list(&node.hostname, &run_id, &args.sysfs_root);
    let layout = match &housekeeping {
        None => Layout::PerRun {
            out: args.out.clone(),
            run_id: run_id.clone(),
        },
        Some(_) => Layout::Hive {
            root: args.out.clone(),
            host: node.hostname.clone(),
            run_id: run_id.clone(),
            seq: 0,
            start_utc_ns: start_utc,
        },
    };
    let mut sinks = Sinks::create(
        layout.clone(),
        &node,
        &clock_start,
        start_utc,
        nic_sysfs,
        interfaces,
    )?;

    let probe::Capture {
        mut ebpf,
        mut hooks,
    } = probe::load_and_attach(
        config,
        args.ring_buffer_kib * 1024,
        args.max_flows,
        args.max_qps,
        &tracefs_root,
        &cgroup,
        netns_path.as_deref(),
    )?;
    let families = probe_families();
    let explicit_libraries = families
        .iter()
        .flat_map(|f| f.library_flags())
        .map(|&flag| (flag, args.explicit_libraries(flag)))
        .collect();
    let target = AttachTarget {
        pid: args.pid,
        explicit_libraries: &explicit_libraries,
    };
    for family in families {
        log::debug!("attaching the {} probes", family.label());
        family.attach(&mut ebpf, &target, &mut hooks);
    }
    for (hook, why) in &hooks.missing {
        log::warn!("{hook} not attached: {why}");
    }
    if hooks.attached.is_empty() {
        sinks.abandon();
        bail!("no hook could be attached: {}", hooks.missing_list());
    }
    if !hooks.attached.iter().any(|h| h.starts_with("sock_ops")) {
        log::warn!("without sock_ops there is no flow table or RTT data, only retransmits");
    }
    let (gpus, mut gpu_batches) = if args.no_gpu {
        (None, None)
    } else {
        match crate::sources::gpu::GpuRecorder::start(
            &node.hostname,
            &run_id,
            args.gpu_interval,
            &args.sysfs_root,
        ) {
            Ok(started) => {
                sinks.set_gpus(started.devices, started.dropped);
                (Some(started.recorder), Some(started.batches))
            }
            Err(why) => {
                log::info!("GPU sampling skipped: {why}");
                (None, None)
            }
        }
    };
    let mut housekeeping = match housekeeping {
        Some(start) => Some(start(Session {
            host: &node.hostname,
            run_id: &run_id,
        })?),
        None => {
            // (the agent checks its directories itself)
            crate::atomic_file::warn_if_writable_by_others(&args.out, "--out");
            None
        }
    };
    log::info!(
        "recording to {} (run {run_id}); hooks: {}",
        args.out.display(),
        hooks.attached_list()
    );

    let ebpf_logger = match aya_log::EbpfLogger::init(&mut ebpf) {
        Ok(logger) => Some(logger),
        Err(e) => {
            log::warn!("eBPF-side diagnostics unavailable: {e}");
            None
        }
    };
    let ring = RingBuf::try_from(take_map(&mut ebpf, "EVENTS")?)?;
    let mut maps = KernelMaps {
        open_flows: OpenFlows::take(&ebpf)?,
        unsent_ends: take_map(&mut ebpf, "UNSENT_ENDS")?.try_into()?,
        tracked: take_map(&mut ebpf, "TRACKED")?.try_into()?,
        max_flows: args.max_flows,
        netns: netns_path.clone(),
        held_open: None,
        qp_traffic: take_map(&mut ebpf, "QP_TRAFFIC")?.try_into()?,
        stats: take_map(&mut ebpf, "STATS")?.try_into()?,
    };

    // SAFETY: the RingBuf owns its map fd and keeps it open until it is dropped, which happens
    // only after into_inner() below.
    let mut ring = unsafe { AsyncFd::register(ring) }
        .map_err(|e| anyhow::anyhow!("polling the ring buffer: {e}"))?;
    // SAFETY: as above, the logger owns its ring buffer fd for its whole life.
    let mut ebpf_logger = ebpf_logger.and_then(|l| unsafe { AsyncFd::register(l) }.ok());
    let loop_result = runtime.block_on(event_loop(
        &args,
        &mut signals,
        Inputs {
            ring: &mut ring,
            ebpf_log: ebpf_logger.as_mut(),
            gpu_batches: gpu_batches.as_mut(),
        },
        &mut sinks,
        &mut maps,
        Rotation {
            housekeeping: housekeeping.as_deref_mut(),
            hooks: &hooks,
        },
    ));

    // Detach first so no event is produced after the final drain; the open flows are read
    // just before (a flow's state goes with its socket).
    maps.hold_open_flows();
    probe::detach_all(ebpf);
    let mut ring = ring.into_inner();
    // The GPU sampler stops, and its last batches go into the last interval: until its thread
    // ends and closes the channel, or for GPU_STOP_WAIT at most (an NVML call that hangs must
    // not keep the run's files open).
    if let Some(g) = &gpus {
        g.stop();
    }
    let mut gpu_push = Ok(());
    if let Some(batches) = gpu_batches.as_mut() {
        let deadline = tokio::time::Instant::now() + GPU_STOP_WAIT;
        while let Ok(Some(batch)) =
            runtime.block_on(tokio::time::timeout_at(deadline, batches.recv()))
        {
            gpu_push = gpu_push.and(sinks.push_gpu(batch));
        }
    }
    let finish = gpu_push.and(sinks.finish(ring_records(&mut ring), &mut maps, &hooks));
    let totals = finish.as_ref().ok().map(|end| end.totals);
    let finish = finish.map(|end| end.summary);
    let gpu_finish = gpus.map(|g| g.finish());
    let finish = match (finish, gpu_finish) {
        (Ok(summary), Some(Ok(gpu))) => Ok(format!("{summary}; {gpu}")),
        (Ok(_), Some(Err(e))) => Err(e.context("GPU sampling")),
        (finish, _) => finish,
    };
    // The agent uploads what the run left in the spool before it exits; a second signal ends
    // that at once (an unreachable store must not hold a node's shutdown for --drain-timeout).
    let finish = match housekeeping {
        Some(h) => {
            let uploaded = runtime.block_on(finish_housekeeping(h, totals, &mut signals));
            finish.map(|summary| format!("{summary}; {uploaded}"))
        }
        None => finish,
    };
    match (loop_result, finish) {
        (Err(e), _) => Err(e),
        (Ok(stop), Ok(summary)) => {
            // Even with --quiet: what was kept and lost is the one line a service's log needs.
            eprintln!("scaletrace: stopped ({stop}); {summary}");
            Ok(())
        }
        (Ok(_), Err(e)) => Err(e),
    }
}

/// Creates `--out` and claims it for this run (`layout::claim_output`). Refused, it leaves
/// nothing behind that it created: a mistyped `--out` inside a running agent's spool must not
/// leave an empty directory there (with lock files that look like a recording's).
fn lock_out(out: &std::path::Path, host: &str) -> Result<crate::layout::OutputLock> {
    // the directories this call creates, deepest first
    let created: Vec<&std::path::Path> = out.ancestors().take_while(|d| !d.exists()).collect();
    crate::atomic_file::create_output_dir("--out", out)?;
    crate::layout::claim_output(out, host, "record").inspect_err(|_| {
        if created.is_empty() {
            return;
        }
        for name in crate::layout::lock_names(host) {
            let _ = std::fs::remove_file(out.join(name));
        }
        // each only if empty: anything another process put there meanwhile stays
        for dir in created {
            if std::fs::remove_dir(dir).is_err() {
                break;
            }
        }
    })
}

/// `Housekeeping::finish` on a blocking thread while this one listens for a second SIGINT,
/// SIGTERM or SIGHUP, which cuts the upload short.
async fn finish_housekeeping(
    housekeeping: Box<dyn Housekeeping>,
    totals: Option<sinks::RunTotals>,
    signals: &mut Signals,
) -> String {
    let abort = housekeeping.abort_handle();
    let mut finishing = tokio::task::spawn_blocking(move || housekeeping.finish(totals.as_ref()));
    let second = tokio::select! {
        done = &mut finishing => return done.unwrap_or_else(|e| format!("upload worker failed: {e}")),
        _ = signals.sigint.recv() => "SIGINT",
        _ = signals.sigterm.recv() => "SIGTERM",
        _ = signals.sighup.recv() => "SIGHUP",
    };
    log::warn!("second {second} during the upload of the last files: stopping it now");
    abort.notify_one();
    finishing
        .await
        .unwrap_or_else(|e| format!("upload worker failed: {e}"))
}

/// Diagnostics logged by the eBPF programs through aya-log.
type EbpfLog = AsyncFd<aya_log::EbpfLogger<&'static dyn log::Log>>;

/// Waits until the eBPF log has records; never, when there is no logger.
async fn ebpf_log_ready<'a>(
    logger: &'a mut Option<&mut EbpfLog>,
) -> std::io::Result<
    tokio::io::unix::AsyncFdReadyMutGuard<'a, aya_log::EbpfLogger<&'static dyn log::Log>>,
> {
    match logger {
        Some(l) => l.readable_mut().await,
        None => std::future::pending().await,
    }
}

/// How long the end of a run waits for the GPU sampler's last batches.
const GPU_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The GPU samples of one period, from the sampler thread.
type GpuBatches = tokio::sync::mpsc::Receiver<crate::sources::gpu::GpuBatch>;

/// The GPU sampler's next batch; never, without a sampler or once its thread has ended.
async fn next_gpu_batch(batches: &mut Option<&mut GpuBatches>) -> crate::sources::gpu::GpuBatch {
    if let Some(rx) = batches {
        if let Some(batch) = rx.recv().await {
            return batch;
        }
        *batches = None;
    }
    std::future::pending().await
}

/// The next tick of an optional timer; never, without one.
async fn next_tick(timer: &mut Option<tokio::time::Interval>) {
    match timer {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

struct Signals {
    sigint: tokio::signal::unix::Signal,
    sigterm: tokio::signal::unix::Signal,
    sighup: tokio::signal::unix::Signal,
    sigusr1: tokio::signal::unix::Signal,
    sigusr2: tokio::signal::unix::Signal,
}

/// What the event loop reads besides timers and signals.
struct Inputs<'a> {
    /// The kernel's events.
    ring: &'a mut AsyncFd<RingBuf<aya::maps::MapData>>,
    /// The eBPF programs' diagnostics, where aya-log could start.
    ebpf_log: Option<&'a mut EbpfLog>,
    /// The GPU sampler's rows, where one runs.
    gpu_batches: Option<&'a mut GpuBatches>,
}

async fn event_loop(
    args: &RecordArgs,
    signals: &mut Signals,
    inputs: Inputs<'_>,
    sinks: &mut Sinks,
    maps: &mut KernelMaps,
    mut rotation: Rotation<'_>,
) -> Result<&'static str> {
    let Inputs {
        ring,
        mut ebpf_log,
        mut gpu_batches,
    } = inputs;
    let deadline = async {
        match args.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(rotation.tick());
    // No NIC sampling means no timer at all, not a fast one that does nothing.
    let mut nic_tick =
        (!args.nic_interval.is_zero()).then(|| tokio::time::interval(args.nic_interval));
    let started = Instant::now();
    let mut status = StatusLine::new(args.quiet);
    let mut warned_table_full = false;
    // The programs wake this loop only once a batch waits (`Config::ring_wakeup_bytes`): the
    // rest is collected here.
    let mut ring_drain = tokio::time::interval(RING_DRAIN_INTERVAL);
    ring_drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let stop = loop {
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard.context("waiting on the ring buffer")?;
                rotation.drain_ring(sinks, guard.get_inner_mut())?;
                guard.clear_ready();
            }
            _ = ring_drain.tick() => {
                rotation.drain_ring(sinks, ring.get_mut())?;
            }
            guard = ebpf_log_ready(&mut ebpf_log) => {
                let mut guard = guard.context("waiting on the eBPF log")?;
                guard.get_inner_mut().flush();
                guard.clear_ready();
            }
            batch = next_gpu_batch(&mut gpu_batches) => rotation.push_gpu(sinks, batch)?,
            _ = next_tick(&mut nic_tick) => {
                let sampled = sinks.sample_nics();
                rotation.survive_disk_full(sinks, sampled)?;
            }
            _ = tick.tick() => {
                // what waits in the ring and from the GPU sampler belongs to the interval a
                // rotation below closes
                rotation.drain_ring(sinks, ring.get_mut())?;
                while let Some(batch) = gpu_batches.as_mut().and_then(|b| b.try_recv().ok()) {
                    rotation.push_gpu(sinks, batch)?;
                }
                let counters = maps.counters()?;
                let now = now_ns(libc::CLOCK_MONOTONIC) as u64;
                let swept = sinks.sweep_unsent_flows(maps, &counters, now);
                rotation.survive_disk_full(sinks, swept)?;
                if let Some(step) = sinks.follow_clock() {
                    log::warn!(
                        "the wall clock was stepped by {:+.3} s: events from now on are stamped with the new time (the interval before it flags the step in capture.clock_error_ns)",
                        step as f64 / 1e9
                    );
                }
                if !warned_table_full && counters.untracked_flows() > 0 {
                    warned_table_full = true;
                    log::warn!(
                        "the kernel flow table is full ({} connections open): new connections are not tracked until some close (counted in capture.flows_untracked_map_full); raise --max-flows",
                        args.max_flows
                    );
                }
                status.update(started.elapsed(), sinks, || maps.flow_count(), &counters);
                let ticked = rotation.on_tick(sinks, &counters, maps);
                rotation.survive_disk_full(sinks, ticked)?;
            }
            _ = signals.sigint.recv() => break "SIGINT",
            _ = signals.sigterm.recv() => break "SIGTERM",
            _ = signals.sighup.recv() => break "SIGHUP",
            _ = signals.sigusr1.recv() => log::warn!("SIGUSR1 ignored (SIGINT or SIGTERM end the run)"),
            _ = signals.sigusr2.recv() => log::warn!("SIGUSR2 ignored (SIGINT or SIGTERM end the run)"),
            _ = &mut deadline => break "duration reached",
        }
    };
    status.finish();
    Ok(stop)
}
