//! The tables of a recording: decode events, assemble rows, write them; at every rotation
//! (agent) and at the end, write the interval's `capture`, `interfaces` and `gpu_devices` rows
//! and close the files; at the end also recover every flow left in the kernel table.
use std::path::Path;

/// The Hive layout's partitions are UTC dates and hours.
const NS_PER_DAY: i64 = 86_400 * 1_000_000_000;

use anyhow::{bail, Context as _, Result};
use aya::maps::{MapData, RingBuf};
use scaletrace_common::*;

use super::{
    accounting::{Accounting, CaptureRow, IntervalEnd, IntervalRows},
    KernelCounters, KernelTables,
};
use crate::{
    clock::{now_ns, ClockOffset},
    columns::Table as _,
    decode::{decode, Event, ProbeRecord},
    hooks::Hooks,
    interfaces::InterfaceRow,
    layout::Layout,
    node::NodeIdentity,
    parquet_sink::{OpenTable, TableWriter},
    sources::{
        family::{interval_files, FamilySink, Handled, IntervalFiles, RowContext, TableFiles},
        gpu::tables::*,
        nccl::tables::NcclCallRow,
        nic::{tables::*, NicSampler},
        probe_families,
        tcp::{assemble::Assembler, tables::*},
        verbs::{qp_counters::QpSampler, tables::*},
    },
};

const CLOSED: &str = "the run's files are already closed";

/// A change of the wall clock's offset this large is a step to follow, not slewing or noise.
const CLOCK_STEP_NS: i64 = 100_000_000;

/// How an interval ends: at a rotation, with the open flows' and QPs' snapshots; or at the end
/// of the run, with the kernel tables whose per-QP totals are written.
enum Interval<'a> {
    Rotation(Snapshots),
    Last(&'a dyn KernelTables),
}

/// What is still open at a rotation.
#[derive(Default)]
struct Snapshots {
    flows: Vec<FlowSnapshotRow>,
    qps: Vec<QpSnapshotRow>,
}

interval_files! {
    /// The recorder's own files of one interval (the whole run for `record`): TCP's, the NIC
    /// counters' and the GPU samples'. Each probe family keeps its own (`FamilySink`).
    struct Writers {
        flows: FlowRow,
        rtt: RttRow,
        flow_windows: FlowWindowRow,
        retransmits: RetransmitRow,
        states: StateChangeRow,
        nic: NicCounterRow,
        qp_counters: QpCounterRow,
        gpu_samples: GpuSampleRow,
        gpu_processes: GpuProcessRow,
    }
}

/// The family that sends each record kind. A kind out of range or sent by two families is a
/// mistake in `sources::probe_families` (a unit test checks it), refused before anything runs.
fn kind_owners(families: &[Box<dyn FamilySink>]) -> Result<[Option<usize>; EVENT_KINDS as usize]> {
    let mut owners = [None; EVENT_KINDS as usize];
    for (i, family) in families.iter().enumerate() {
        for &kind in family.record_kinds() {
            let Some(owner) = owners.get_mut(kind as usize).filter(|_| kind != 0) else {
                bail!(
                    "the {} family sends record kind {kind}, outside 1..{EVENT_KINDS}",
                    family.label()
                );
            };
            if let Some(other) = owner.replace(i) {
                bail!(
                    "record kind {kind} is sent by both the {} and the {} family",
                    families[other].label(),
                    family.label()
                );
            }
        }
    }
    Ok(owners)
}

/// Creates an interval's files: the recorder's, returned, and each family's, kept aside in it
/// until its `start_next`. When one cannot be created, none of the new files is left (each set
/// removes its own, `interval_files!`), and the open ones are untouched.
fn open_interval(
    families: &mut [Box<dyn FamilySink>],
    layout: &Layout,
    metadata: &[(String, String)],
) -> Result<Writers> {
    let path = |table: &str| layout.path(table);
    let files = table_files(layout, &path, metadata);
    let writers = Writers::create(&files)?;
    let prepared = families
        .iter_mut()
        .try_for_each(|family| family.prepare_next(&files));
    if let Err(e) = prepared {
        for family in families.iter_mut() {
            family.discard_next();
        }
        abandon_all(writers.into_files());
        return Err(e);
    }
    Ok(writers)
}

/// An interval's files, taken from the sinks to be closed: the recorder's own (none while the
/// disk is full), and the probe families'.
type TakenInterval = (Option<Writers>, Vec<Box<dyn OpenTable>>);

/// Rows of `table` in `files`.
fn rows_of(files: &[Box<dyn OpenTable>], table: &str) -> u64 {
    files
        .iter()
        .filter(|f| f.table() == table)
        .map(|f| f.rows())
        .sum()
}

fn abandon_all(files: Vec<Box<dyn OpenTable>>) {
    for f in files {
        f.abandon();
    }
}

/// Where an interval's files go.
fn table_files<'a>(
    layout: &'a Layout,
    path: &'a dyn Fn(&str) -> std::path::PathBuf,
    metadata: &'a [(String, String)],
) -> TableFiles<'a> {
    TableFiles {
        root: layout.root(),
        path,
        metadata,
    }
}

/// Rows of the main tables in closed intervals, for the status line and the summary.
#[derive(Default, Clone, Copy)]
struct Totals {
    flows: u64,
    rtt: u64,
    retransmits: u64,
    states: u64,
}

/// How long after the ring refused a flow's end the table of unsent ends is walked on every call.
const SWEEP_SETTLE_NS: u64 = 2_000_000_000;
/// The longest the table of unsent ends goes without a walk.
const SWEEP_BACKSTOP_NS: u64 = 60_000_000_000;

/// What `sweep_unsent_flows` remembers between calls (monotonic ns).
#[derive(Default)]
struct SweepState {
    /// Flow ends the ring had refused at the last walk that followed a new refusal.
    refused: u64,
    /// When that walk ran.
    changed_at: Option<u64>,
    /// When the table was last walked.
    walked_at: u64,
}

pub struct Sinks {
    assembler: Assembler,
    node: NodeIdentity,
    layout: Layout,
    metadata: Vec<(String, String)>,
    /// The open interval's own files; None only inside `finish` and while the disk is full.
    writers: Option<Writers>,
    /// Every probe family, with its open interval's files (`sources::probe_families`).
    families: Vec<Box<dyn FamilySink>>,
    /// The family that decodes each record kind (by `EventHeader::kind`).
    family_of_kind: [Option<usize>; EVENT_KINDS as usize],
    clock: ClockOffset,
    nic_sampler: Option<NicSampler>,
    /// RDMA QPs, read with the NIC counters
    qp_sampler: Option<QpSampler>,
    interfaces: Vec<InterfaceRow>,
    interval_start_utc: i64,
    closed: Totals,
    /// Rows of each probe family's tables in closed intervals, for the summary.
    closed_family_rows: std::collections::BTreeMap<&'static str, u64>,
    /// What was read, kept and lost, for the capture rows and the agent's health.
    pub accounting: Accounting,
    /// The open interval was dropped for a full disk and no new files could be created yet:
    /// events are counted as lost until `try_resume` succeeds.
    disk_full: bool,
    /// Each QP's counters at its previous snapshot (requests, bytes, completions, errors).
    qp_snapshot_prev: std::collections::HashMap<QpKey, [u64; 4]>,
    /// Each open flow's counters at its previous snapshot (bytes sent, received, retransmits).
    snapshot_prev: std::collections::HashMap<u64, (u64, u64, u32)>,
    /// When to walk the kernel's table of unsent flow ends (`sweep_unsent_flows`).
    sweep: SweepState,
    /// Files completed so far (every table, every interval).
    pub files_closed: u64,
    /// Tables with a completed file in this run and UTC day (`tables_on_disk_day`). The Hive
    /// layout skips an interval's empty files, except a table's first of the day: every table
    /// is then a file with its schema, which engines that infer a table's schema from its files
    /// need (Spark, Polars), and one that outlives the spool's retention (`--retain-max-age`,
    /// in days). When a full disk makes the agent delete its oldest files, those may go too:
    /// they come back the next day, not at once, on a disk that has no room.
    tables_on_disk: std::collections::HashSet<&'static str>,
    tables_on_disk_day: i64,
    /// The flows whose end the final drain wrote (None before it): their copy read as still
    /// open before the programs were detached is not written again.
    ended_in_final_drain: Option<std::collections::HashSet<u64>>,
    /// The sampled GPUs (none without NVML), written in every interval like `interfaces`.
    gpu_devices: Vec<GpuDeviceRow>,
    /// The GPU sampler's count of samples it dropped (`capture.gpu_samples_dropped`).
    gpu_samples_dropped: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

impl Sinks {
    pub fn create(
        layout: Layout,
        node: &NodeIdentity,
        clock: &ClockOffset,
        start_utc: i64,
        nic_sysfs: Option<&Path>,
        interfaces: Vec<InterfaceRow>,
    ) -> Result<Self> {
        let root = layout.root();
        std::fs::create_dir_all(root)
            .with_context(|| format!("--out {}: cannot create it", root.display()))?;
        let metadata = vec![
            (
                "scaletrace.version".into(),
                env!("CARGO_PKG_VERSION").into(),
            ),
            ("scaletrace.run_id".into(), layout.run_id().into()),
            ("scaletrace.host".into(), node.hostname.clone()),
            ("scaletrace.boot_id".into(), node.boot_id.clone()),
            ("scaletrace.kernel".into(), node.kernel.clone()),
            (
                "scaletrace.time_base".into(),
                "UTC ns; converted from CLOCK_MONOTONIC".into(),
            ),
            (
                "scaletrace.clock.method".into(),
                "bracketed CLOCK_MONOTONIC/CLOCK_REALTIME reads, narrowest of 32".into(),
            ),
            (
                "scaletrace.clock.offset_ns".into(),
                clock.offset_ns.to_string(),
            ),
            (
                "scaletrace.clock.error_ns".into(),
                clock.error_ns.to_string(),
            ),
        ];
        let mut families = probe_families();
        let family_of_kind = kind_owners(&families)?;
        let writers = open_interval(&mut families, &layout, &metadata)?;
        for family in &mut families {
            family.start_next();
        }
        Ok(Sinks {
            assembler: Assembler::new(node.hostname.clone(), *clock),
            node: node.clone(),
            writers: Some(writers),
            families,
            family_of_kind,
            layout,
            clock: *clock,
            nic_sampler: nic_sysfs.map(|root| NicSampler::new(root, &node.hostname)),
            qp_sampler: nic_sysfs.map(|_| QpSampler::new(&node.hostname)),
            interfaces,
            interval_start_utc: start_utc,
            closed: Totals::default(),
            closed_family_rows: Default::default(),
            snapshot_prev: Default::default(),
            sweep: SweepState::default(),
            qp_snapshot_prev: Default::default(),
            accounting: Accounting::new(),
            disk_full: false,
            files_closed: 0,
            tables_on_disk: Default::default(),
            tables_on_disk_day: 0,
            ended_in_final_drain: None,
            gpu_devices: Vec::new(),
            gpu_samples_dropped: None,
            metadata,
        })
    }

    /// Re-reads the wall clock's offset from the monotonic clock and, when it moved by at
    /// least `CLOCK_STEP_NS` (a step by an operator or a late time sync; NTP's slewing moves it
    /// by at most 0.5 ms a second), converts every later event with the new offset and says so.
    /// Rows already written keep the offset they were converted with: `capture.clock_error_ns`
    /// of their interval covers the step. Returns the step, if any.
    pub fn follow_clock(&mut self) -> Option<i64> {
        let fresh = ClockOffset::measure();
        let step = fresh.offset_ns - self.clock.offset_ns;
        if step.abs() < CLOCK_STEP_NS {
            return None;
        }
        self.clock = fresh;
        self.assembler.set_clock(fresh);
        self.accounting.clock_stepped(step);
        for (key, value) in &mut self.metadata {
            match key.as_str() {
                "scaletrace.clock.offset_ns" => *value = fresh.offset_ns.to_string(),
                "scaletrace.clock.error_ns" => *value = fresh.error_ns.to_string(),
                _ => {}
            }
        }
        Some(step)
    }

    pub fn flows_written(&self) -> u64 {
        self.closed.flows + self.writers.as_ref().map_or(0, |w| w.flows.rows())
    }
    pub fn rtt_written(&self) -> u64 {
        self.closed.rtt + self.writers.as_ref().map_or(0, |w| w.rtt.rows())
    }
    pub fn retransmits_written(&self) -> u64 {
        self.closed.retransmits + self.writers.as_ref().map_or(0, |w| w.retransmits.rows())
    }

    /// What the run read, wrote and lost so far (rows of the open interval included), with
    /// the kernel's counters `k`: the agent's health files, and the run's end.
    pub fn totals(&self, k: &KernelCounters) -> RunTotals {
        RunTotals {
            events: self.accounting.events,
            decode_errors: self.accounting.decode_errors,
            ring_drops: k.ring_drops(),
            untracked_flows: k.untracked_flows(),
            rows_lost_disk_full: self.accounting.rows_lost_disk_full,
            flows: self.flows_written(),
            rtt_samples: self.rtt_written(),
            retransmits: self.retransmits_written(),
            files_closed: self.files_closed,
        }
    }

    /// The open interval's files, the recorder's and the families'.
    fn open_files(&self) -> Vec<&dyn OpenTable> {
        let mut files = self.writers.as_ref().map(|w| w.files()).unwrap_or_default();
        files.extend(self.families.iter().flat_map(|f| f.open_files()));
        files
    }

    /// Closes over the open interval: its files, the recorder's and the families', to be
    /// closed or abandoned.
    fn take_interval(&mut self) -> TakenInterval {
        let families = self
            .families
            .iter_mut()
            .flat_map(|f| f.take_open())
            .collect();
        (self.writers.take(), families)
    }

    /// Opens the files of the interval `layout` names; the open ones, returned, stay open
    /// if any file cannot be created.
    fn start_interval(&mut self, layout: &Layout) -> Result<TakenInterval> {
        let writers = open_interval(&mut self.families, layout, &self.metadata)?;
        let families = self
            .families
            .iter_mut()
            .flat_map(|f| f.start_next())
            .collect();
        Ok((self.writers.replace(writers), families))
    }

    /// Estimated bytes of the open interval's files.
    pub fn open_bytes(&self) -> u64 {
        self.open_files().iter().map(|f| f.bytes()).sum()
    }

    /// Start of the open interval (UTC ns).
    pub fn interval_start(&self) -> i64 {
        self.interval_start_utc
    }

    /// Hands a row to the open interval's files; while the disk is full, counts it as lost.
    fn push_with(&mut self, push: impl FnOnce(&mut Writers) -> Result<()>) -> Result<()> {
        match self.writers.as_mut() {
            Some(w) => push(w),
            None if self.disk_full => {
                self.accounting.rows_lost_disk_full += 1;
                Ok(())
            }
            None => Err(anyhow::anyhow!(CLOSED)),
        }
    }

    /// GPU samples the sampler dropped so far (live; `capture` takes it at each interval's end).
    pub fn gpu_samples_dropped(&self) -> u64 {
        self.gpu_samples_dropped
            .as_ref()
            .map_or(0, |d| d.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The GPUs the sampler found, for `gpu_devices`, and its count of dropped samples.
    pub fn set_gpus(
        &mut self,
        devices: Vec<GpuDeviceRow>,
        dropped: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ) {
        self.gpu_devices = devices;
        self.gpu_samples_dropped = Some(dropped);
    }

    /// One period of GPU samples, into the open interval like the kernel's events.
    /// A write that fails (a full disk) loses the rest of the batch, counted like the rows
    /// of a dropped interval.
    pub fn push_gpu(&mut self, batch: crate::sources::gpu::GpuBatch) -> Result<()> {
        let mut left = (batch.samples.len() + batch.processes.len()) as u64;
        let pushed = self
            .push_each(batch.samples, &mut left, |w, row| w.gpu_samples.push(row))
            .and_then(|_| {
                self.push_each(batch.processes, &mut left, |w, row| {
                    w.gpu_processes.push(row)
                })
            });
        if pushed.is_err() {
            self.accounting.rows_lost_disk_full += left;
        }
        pushed
    }

    /// Pushes `rows` until one fails; `left` counts down the rows not yet tried.
    fn push_each<R>(
        &mut self,
        rows: Vec<R>,
        left: &mut u64,
        push: impl Fn(&mut Writers, R) -> Result<()>,
    ) -> Result<()> {
        for row in rows {
            *left -= 1;
            self.push_with(|w| push(w, row))?;
        }
        Ok(())
    }

    /// Whether the open interval was dropped for a full disk and recording waits for space.
    pub fn waiting_for_space(&self) -> bool {
        self.disk_full
    }

    /// Drops the open interval (its rows are counted in `rows_lost_disk_full`), so that its
    /// files free their space; returns how many bytes they held. `try_resume` opens new ones.
    pub fn drop_open_interval(&mut self) -> u64 {
        self.disk_full = true;
        let (writers, mut files) = self.take_interval();
        files.extend(writers.map(IntervalFiles::into_files).unwrap_or_default());
        let bytes = files.iter().map(|f| f.bytes()).sum();
        self.accounting.rows_lost_disk_full += files.iter().map(|f| f.rows()).sum::<u64>();
        abandon_all(files);
        bytes
    }

    /// Opens new files after `drop_open_interval`; false while the disk is still full.
    pub fn try_resume(&mut self) -> bool {
        if !self.disk_full {
            return true;
        }
        let next = self.layout.next(now_ns(libc::CLOCK_REALTIME));
        match self.start_interval(&next) {
            Ok(_) => {
                // (nothing was open: `drop_open_interval` took it all)
                self.layout = next;
                self.disk_full = false;
                true
            }
            Err(_) => false,
        }
    }

    /// Reads the NIC counters and the RDMA QPs once (if enabled).
    pub fn sample_nics(&mut self) -> Result<()> {
        let now = now_ns(libc::CLOCK_REALTIME);
        let nic_rows = self
            .nic_sampler
            .as_mut()
            .map(|s| s.sample(now))
            .unwrap_or_default();
        for row in nic_rows {
            self.push_with(|w| w.nic.push(row))?;
        }
        let qp_rows = self
            .qp_sampler
            .as_mut()
            .map(|s| s.sample(now))
            .unwrap_or_default();
        for row in qp_rows {
            self.push_with(|w| w.qp_counters.push(row))?;
        }
        Ok(())
    }

    /// Removes the files of a run that never started.
    pub fn abandon(mut self) {
        let (writers, files) = self.take_interval();
        abandon_all(files);
        abandon_all(writers.map(IntervalFiles::into_files).unwrap_or_default());
    }

    /// One record of the ring buffer, decoded (or not: counted in `decode_errors`).
    fn handle(&mut self, record: Result<Event>) -> Result<()> {
        self.accounting.events += 1;
        let event = match record {
            Ok(e) => e,
            Err(e) => {
                self.accounting.decode_errors += 1;
                log::debug!("undecodable record: {e}");
                return Ok(());
            }
        };
        match event {
            Event::FlowEnd(e) => {
                if let Some(ended) = &mut self.ended_in_final_drain {
                    ended.insert(e.stats.cookie);
                }
                self.push_flow(&e.stats, e.header.ts_ns)
            }
            Event::RttSample(e) => {
                let row = self.assembler.rtt(&e);
                self.push_with(|w| w.rtt.push(row))
            }
            Event::FlowWindow(e) => {
                match self.assembler.flow_window(e.cookie, &e.window, &e.closed) {
                    Some(row) => self.push_with(|w| w.flow_windows.push(row)),
                    None => Ok(()),
                }
            }
            Event::Retransmit(e) => {
                let row = self.assembler.retransmit(&e);
                self.push_with(|w| w.retransmits.push(row))
            }
            Event::StateChange(e) => {
                let row = self.assembler.state_change(&e);
                self.push_with(|w| w.states.push(row))
            }
            Event::Probe(record) => self.handle_probe(record),
        }
    }

    /// A probe family's record, to the family that sends its kind.
    fn handle_probe(&mut self, record: ProbeRecord) -> Result<()> {
        let Some(family) = self
            .family_of_kind
            .get(record.kind as usize)
            .copied()
            .flatten()
        else {
            self.accounting.decode_errors += 1;
            log::debug!("undecodable record: no family sends kind {}", record.kind);
            return Ok(());
        };
        let assembler = &mut self.assembler;
        let mut cx = RowContext {
            host: &self.node.hostname,
            clock: self.clock,
            job: &mut |cgroup_id| assembler.job(cgroup_id),
        };
        let handled = self.families[family].record(
            record.kind,
            &record.bytes,
            &mut cx,
            &mut self.accounting.rows_lost_disk_full,
        )?;
        if let Handled::Undecodable(e) = handled {
            self.accounting.decode_errors += 1;
            log::debug!("undecodable record: {e}");
        }
        Ok(())
    }

    /// Writes a flow's final row, and the window it still held (`capture_end_mono`
    /// ends a flow still open).
    fn push_flow(&mut self, s: &FlowStats, capture_end_mono: u64) -> Result<()> {
        let row = self.assembler.flow(s, capture_end_mono);
        let window = self.assembler.flow_window(
            s.cookie,
            &s.flow_window,
            &crate::sources::tcp::assemble::counters_at_end(s, capture_end_mono),
        );
        // The window first: a failure between the two leaves the flow to be written again by
        // the next sweep, and a window written twice is plain in (flow_id, ts); a flow row
        // written twice would double its totals.
        if let Some(window) = window {
            self.push_with(|w| w.flow_windows.push(window))?;
        }
        self.push_with(|w| w.flows.push(row))
    }

    /// Writes every record of `records` (`ring_records`: what the ring buffer holds now).
    pub fn drain(&mut self, records: impl IntoIterator<Item = Result<Event>>) -> Result<()> {
        for record in records {
            self.handle(record)?;
        }
        Ok(())
    }

    /// Writes flows that closed while the ring buffer was full (the kernel kept them in its
    /// table of unsent ends) and removes them from it. The table is walked only when it can
    /// hold such a flow: a walk costs two syscalls per entry, and after a burst of refusals
    /// the table can hold thousands, every tick. So: when the ring has refused a flow's end since the last walk
    /// (`counters`, read before this call), on every call for `SWEEP_SETTLE_NS` after that
    /// (the kernel counts the refusal just before it marks the flow, and a preempted close can
    /// mark it later), and at least every `SWEEP_BACKSTOP_NS`.
    pub fn sweep_unsent_flows(
        &mut self,
        tables: &mut dyn KernelTables,
        counters: &KernelCounters,
        now_mono: u64,
    ) -> Result<()> {
        let refused = counters.get(STAT_RING_FULL + EVENT_FLOW_END);
        let changed = refused != self.sweep.refused;
        let settling = self
            .sweep
            .changed_at
            .is_some_and(|at| now_mono.saturating_sub(at) < SWEEP_SETTLE_NS);
        let overdue = now_mono.saturating_sub(self.sweep.walked_at) >= SWEEP_BACKSTOP_NS;
        if !changed && !settling && !overdue {
            return Ok(());
        }
        for (cookie, s) in tables.closed_unsent_flows() {
            self.push_flow(&s, now_mono)?;
            tables.remove_flow(cookie);
        }
        // only after a walk that wrote everything: a failed one is repeated at the next call
        if changed {
            self.sweep.refused = refused;
            self.sweep.changed_at = Some(now_mono);
        }
        self.sweep.walked_at = now_mono;
        Ok(())
    }

    /// A row per flow still open in the kernel table, with what changed since its previous
    /// snapshot; flows gone since are forgotten.
    fn snapshot_open_flows(
        &mut self,
        flows: Vec<FlowStats>,
        now_mono: u64,
        now_utc: i64,
    ) -> Vec<FlowSnapshotRow> {
        let mut prev = std::mem::take(&mut self.snapshot_prev);
        let mut rows = Vec::new();
        for s in flows {
            let cookie = s.cookie;
            if s.end_ns != 0 {
                continue; // closed: its final row goes to `flows`
            }
            let mut f = self.assembler.flow(&s, now_mono);
            let (sent0, received0, retrans0) = prev.remove(&cookie).unwrap_or_default();
            // Cumulative counters never go back: a flow sock_diag missed this time (closing,
            // its namespace gone) has only its last sample's, older than the last snapshot's.
            f.bytes_sent = f.bytes_sent.max(sent0);
            f.bytes_received = f.bytes_received.max(received0);
            f.total_retrans = f.total_retrans.max(retrans0);
            self.snapshot_prev
                .insert(cookie, (f.bytes_sent, f.bytes_received, f.total_retrans));
            rows.push(FlowSnapshotRow {
                host: f.host,
                ts: now_utc,
                flow_id: f.flow_id,
                local_addr: f.local_addr,
                local_port: f.local_port,
                remote_addr: f.remote_addr,
                remote_port: f.remote_port,
                direction: f.direction,
                start: f.start,
                bytes_sent_delta: f.bytes_sent.saturating_sub(sent0),
                bytes_received_delta: f.bytes_received.saturating_sub(received0),
                retrans_delta: f.total_retrans.saturating_sub(retrans0),
                bytes_sent: f.bytes_sent,
                bytes_received: f.bytes_received,
                total_retrans: f.total_retrans,
                rto_count: f.rto_count,
                srtt_last_us: f.srtt_last_us,
                min_rtt_us: f.min_rtt_us,
            });
        }
        rows
    }

    /// A row per QP in the kernel's per-QP table, with what changed since its previous
    /// snapshot; QPs gone since (evicted) are forgotten.
    fn snapshot_qps(&mut self, qps: Vec<(QpKey, QpTraffic)>, now_utc: i64) -> Vec<QpSnapshotRow> {
        let mut prev = std::mem::take(&mut self.qp_snapshot_prev);
        let mut rows = Vec::new();
        for (key, t) in qps {
            let now = [
                t.wrs_posted,
                t.bytes_posted,
                t.completions,
                t.completion_errors,
            ];
            let before = prev.remove(&key).unwrap_or_default();
            let delta: [u64; 4] = std::array::from_fn(|i| now[i].saturating_sub(before[i]));
            self.qp_snapshot_prev.insert(key, now);
            rows.push(QpSnapshotRow {
                host: self.node.hostname.clone(),
                ts: now_utc,
                pid: key.tgid,
                qp_num: key.qp_num,
                wrs_posted: now[0],
                bytes_posted: now[1],
                completions: now[2],
                completion_errors: now[3],
                wrs_posted_delta: delta[0],
                bytes_posted_delta: delta[1],
                completions_delta: delta[2],
                completion_errors_delta: delta[3],
            });
        }
        rows
    }

    /// Closes the open interval's files and opens the next interval's (agent rotation), with a
    /// snapshot of every flow still open and every QP. The next files are created first: if that fails the
    /// current ones stay open.
    pub fn rotate(
        &mut self,
        counters: &KernelCounters,
        hooks: &Hooks,
        tables: &dyn KernelTables,
    ) -> Result<()> {
        let end_utc = now_ns(libc::CLOCK_REALTIME);
        let next = self.layout.next(end_utc);
        if self.writers.is_none() {
            bail!(CLOSED);
        }
        let (old, old_families) = self.start_interval(&next)?;
        let old = old.context(CLOSED)?;
        let old_layout = std::mem::replace(&mut self.layout, next);
        let snapshots = Snapshots {
            flows: self.snapshot_open_flows(
                tables.flows_now(),
                now_ns(libc::CLOCK_MONOTONIC) as u64,
                end_utc,
            ),
            qps: self.snapshot_qps(tables.qp_traffic(), end_utc),
        };
        let result = self.close_interval(
            old,
            old_families,
            &old_layout,
            counters,
            hooks,
            end_utc,
            Interval::Rotation(snapshots),
        );
        self.interval_start_utc = end_utc;
        result.map(|_| ())
    }

    /// Writes the interval's `capture`, `interfaces` and `gpu_devices` rows and closes every
    /// file, even when
    /// one fails, so one full table does not cost the others. At the end of the run (`tables`)
    /// also the per-QP data-path totals (the QPs still alive went into the verbs family's files
    /// just before, `FamilySink::last_interval`).
    #[allow(clippy::too_many_arguments)]
    fn close_interval(
        &mut self,
        w: Writers,
        family_files: Vec<Box<dyn OpenTable>>,
        layout: &Layout,
        counters: &KernelCounters,
        hooks: &Hooks,
        end_utc: i64,
        interval: Interval<'_>,
    ) -> Result<CaptureRow> {
        let (snapshots, tables) = match interval {
            Interval::Rotation(rows) => (rows, None),
            Interval::Last(tables) => (Snapshots::default(), Some(tables)),
        };
        // Per-QP data-path totals live in the kernel map until the end of the run.
        let host = self.node.hostname.clone();
        let qp_traffic: Option<Vec<QpTrafficRow>> = tables.map(|m| {
            m.qp_traffic()
                .into_iter()
                .map(|(key, traffic)| crate::sources::verbs::traffic_row(&key, &traffic, &host))
                .collect()
        });
        // Every QP that got an entry and has none now was evicted (the LRU map never shrinks
        // otherwise), its totals with it.
        let qps_evicted = qp_traffic.as_ref().map_or(0, |rows| {
            counters
                .get(STAT_QP_TRACKED)
                .saturating_sub(rows.len() as u64)
        });
        let mut first_error: Option<anyhow::Error> = None;
        let mut note = |r: Result<()>| {
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        };
        let clock_end = ClockOffset::measure();
        self.accounting.gpu_samples_dropped = self.gpu_samples_dropped();
        let capture = self.accounting.close_interval(IntervalEnd {
            node: &self.node,
            run_id: self.layout.run_id(),
            start_utc: self.interval_start_utc,
            end_utc,
            hooks,
            rows: IntervalRows {
                flows: w.flows.rows(),
                rtt: w.rtt.rows(),
                retransmits: w.retransmits.rows(),
                states: w.states.rows(),
                nccl: rows_of(&family_files, NcclCallRow::NAME),
                verbs: rows_of(&family_files, VerbsCallRow::NAME),
            },
            counters,
            qps_evicted,
            clock_in_use: self.clock,
            clock_now: clock_end,
        });
        let end_meta = [
            (
                "scaletrace.clock.end_offset_ns",
                clock_end.offset_ns.to_string(),
            ),
            ("scaletrace.ring_drops", capture.ring_drops.to_string()),
        ];
        // The agent writes a file per table and interval: empty ones would only add files,
        // once the table has one that day.
        let skip_empty = matches!(layout, Layout::Hive { .. });
        let day = self.interval_start_utc.div_euclid(NS_PER_DAY);
        if day != self.tables_on_disk_day {
            self.tables_on_disk.clear();
            self.tables_on_disk_day = day;
        }
        macro_rules! close {
            ($w:expr) => {{
                let mut w: Box<dyn OpenTable> = $w;
                if skip_empty && w.rows() == 0 && self.tables_on_disk.contains(w.table()) {
                    w.abandon();
                } else {
                    for (k, v) in &end_meta {
                        w.append_metadata(k, v.clone());
                    }
                    let rows = w.rows();
                    let table = w.table();
                    match w.close() {
                        Ok(_) => {
                            self.files_closed += 1;
                            self.tables_on_disk.insert(table);
                        }
                        Err(e) => {
                            // counted in the next interval's capture row
                            if crate::parquet_sink::is_disk_full(&e) {
                                self.accounting.rows_lost_disk_full += rows;
                            }
                            note(Err(e));
                        }
                    }
                }
            }};
        }
        // A table written whole here: no file at all when `close!` would only drop it.
        macro_rules! table {
            ($t:ty, $rows:expr) => {{
                let rows: Vec<$t> = $rows.into_iter().collect();
                if !(skip_empty && rows.is_empty() && self.tables_on_disk.contains(<$t>::NAME)) {
                    match TableWriter::<$t>::create_at(
                        layout.root(),
                        layout.path(<$t>::NAME),
                        &self.metadata,
                    ) {
                        Ok(mut tw) => {
                            for row in rows {
                                note(tw.push(row));
                            }
                            close!(Box::new(tw));
                        }
                        Err(e) => note(Err(e)),
                    }
                }
            }};
        }
        self.closed.flows += w.flows.rows();
        self.closed.rtt += w.rtt.rows();
        self.closed.retransmits += w.retransmits.rows();
        self.closed.states += w.states.rows();
        for file in &family_files {
            *self.closed_family_rows.entry(file.table()).or_default() += file.rows();
        }
        for file in w.into_files().into_iter().chain(family_files) {
            close!(file);
        }
        let interfaces = self.interfaces.clone();
        table!(InterfaceRow, interfaces);
        let gpu_devices = self.gpu_devices.clone();
        table!(GpuDeviceRow, gpu_devices);
        // The agent's tables (only the agent rotates): snapshots at rotations (at the end of
        // the run open flows go to `flows`, `open_at_end`, so its last interval has none), the
        // per-QP totals at the end; each is still a file when empty, by the rule above.
        if skip_empty {
            table!(FlowSnapshotRow, snapshots.flows);
            table!(QpSnapshotRow, snapshots.qps);
        }
        // (`record` writes its run's totals at the end too, `Some` there)
        table!(QpTrafficRow, qp_traffic.unwrap_or_default());
        table!(CaptureRow, [capture.clone()]);
        match first_error {
            Some(e) => Err(e),
            None => Ok(capture),
        }
    }

    /// After detaching: drain the ring, write every flow left in the kernel table (closed but
    /// unsent, or still open), then close the last interval.
    pub fn finish(
        mut self,
        records: impl IntoIterator<Item = Result<Event>>,
        tables: &mut dyn KernelTables,
        hooks: &Hooks,
    ) -> Result<RunEnd> {
        let mut first_error: Option<anyhow::Error> = None;
        let mut note = |r: Result<()>| {
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        };
        self.ended_in_final_drain = Some(Default::default());
        note(self.drain(records));
        // A last reading, so the counters cover the whole run.
        note(self.sample_nics());
        let end_mono = now_ns(libc::CLOCK_MONOTONIC) as u64;
        let mut remaining = tables.flows_now();
        // A flow read before the programs were detached (`hold_open_flows`) that closed before
        // they were: its end came through the ring and is written, not the copy (which can be
        // one read inside its close, its end time set). A flow end the ring refused never
        // comes through it: it is in the table of unsent ends.
        if let Some(ended) = &self.ended_in_final_drain {
            remaining.retain(|s| !ended.contains(&s.cookie));
        }
        for s in &remaining {
            note(self.push_flow(s, end_mono));
        }
        let counters = tables.counters()?;
        let end_utc = now_ns(libc::CLOCK_REALTIME);
        if self.disk_full && !self.try_resume() {
            bail!(
                "the disk is still full: the last interval could not be written ({} rows lost to a full disk in this run)",
                self.accounting.rows_lost_disk_full
            );
        }
        // (after `try_resume`, which opens the files of a new interval)
        for family in &mut self.families {
            note(family.last_interval(&mut self.accounting.rows_lost_disk_full));
        }
        let layout = self.layout.clone();
        let (writers, family_files) = self.take_interval();
        let writers = writers.context(CLOSED)?;
        let capture = self.close_interval(
            writers,
            family_files,
            &layout,
            &counters,
            hooks,
            end_utc,
            Interval::Last(tables),
        );
        let ring_drops = counters.ring_drops();
        let mut untracked = match counters.untracked_flows() {
            0 => String::new(),
            n => {
                format!(", {n} connections not tracked (kernel flow table full: raise --max-flows)")
            }
        };
        match counters.get(STAT_FLOW_NO_MEMORY) {
            0 => {}
            n => untracked.push_str(&format!(
                ", {n} connections not tracked (the kernel had no memory for their state)"
            )),
        }
        match counters.get(STAT_FLOW_ENDS_LOST) {
            0 => {}
            n => untracked.push_str(&format!(
                ", {n} flows lost (they closed while the ring buffer and the kernel's table of unsent flow ends were full)"
            )),
        }
        if self.accounting.rows_lost_disk_full > 0 {
            untracked.push_str(&format!(
                ", {} rows lost to a full disk",
                self.accounting.rows_lost_disk_full
            ));
        }
        if let Ok(c) = &capture {
            if c.qps_evicted > 0 {
                untracked.push_str(&format!(
                    ", {} RDMA QPs' data-path totals evicted from the kernel table (raise --max-qps)",
                    c.qps_evicted
                ));
            }
        }
        // the probe families' tables that got rows (most hosts have no NCCL or RDMA)
        let family_rows: String = self
            .closed_family_rows
            .iter()
            .filter(|(_, rows)| **rows > 0)
            .map(|(table, rows)| format!(", {rows} {table} rows"))
            .collect();
        let summary = format!(
            "{} flows ({} still open), {} RTT samples, {} retransmit events, {} state changes{family_rows}, {} events lost to a full ring buffer{untracked}; {} files under {}",
            self.closed.flows,
            remaining.iter().filter(|s| s.end_ns == 0).count(),
            self.closed.rtt,
            self.closed.retransmits,
            self.closed.states,
            ring_drops,
            self.files_closed,
            self.layout.root().display()
        );
        if let Err(e) = capture {
            note(Err(e));
        }
        // (every file is closed now: the rows written are the closed intervals')
        let totals = self.totals(&counters);
        match first_error {
            Some(e) => Err(e),
            None => Ok(RunEnd { summary, totals }),
        }
    }
}

/// What a finished run wrote and lost: the run's last line, and its totals (for the agent's
/// last health files).
pub struct RunEnd {
    pub summary: String,
    pub totals: RunTotals,
}

#[derive(Debug, Clone, Copy)]
pub struct RunTotals {
    pub events: u64,
    pub decode_errors: u64,
    pub ring_drops: u64,
    pub untracked_flows: u64,
    pub rows_lost_disk_full: u64,
    pub flows: u64,
    pub rtt_samples: u64,
    pub retransmits: u64,
    pub files_closed: u64,
}

/// The records the ring buffer holds now, each decoded straight from its slot (the event is
/// a copy, so the slot is released before the row is written).
pub fn ring_records(ring: &mut RingBuf<MapData>) -> impl Iterator<Item = Result<Event>> + '_ {
    std::iter::from_fn(move || ring.next().map(|item| decode(&item)))
}

#[cfg(test)]
mod tests {
    //! The sinks without a kernel: records as the ring buffer would hand them over, the
    //! kernel's flow and QP tables as `KernelTables`, and the files read back.
    use std::{collections::BTreeMap, path::Path};

    use arrow::{array::UInt64Array, compute::cast, datatypes::DataType};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::*;
    use crate::decode::bytes_of;

    /// The kernel tables of a test: flows by cookie, no QPs, counters all zero; counts the
    /// walks of the table of unsent flow ends.
    #[derive(Default)]
    struct FakeKernel {
        flows: BTreeMap<u64, FlowStats>,
        sweeps: std::cell::Cell<u32>,
    }

    impl KernelTables for FakeKernel {
        fn closed_unsent_flows(&self) -> Vec<(u64, FlowStats)> {
            self.sweeps.set(self.sweeps.get() + 1);
            self.flows
                .iter()
                .filter(|(_, s)| s.closed_unsent != 0)
                .map(|(k, v)| (*k, *v))
                .collect()
        }
        fn flow_count(&self) -> usize {
            self.flows.len()
        }
        fn remove_flow(&mut self, cookie: u64) {
            self.flows.remove(&cookie);
        }
        fn flows_now(&self) -> Vec<FlowStats> {
            self.flows.values().copied().collect()
        }
        fn qp_traffic(&self) -> Vec<(QpKey, QpTraffic)> {
            Vec::new()
        }
        fn counters(&self) -> Result<KernelCounters> {
            Ok(KernelCounters::zero())
        }
    }

    fn flow(cookie: u64, bytes_acked: u64) -> FlowStats {
        let mut s = FlowStats {
            cookie,
            start_ns: 1_000,
            bytes_acked,
            direction: DIRECTION_ACTIVE,
            ..Default::default()
        };
        s.tuple.family = AF_INET;
        s.tuple.local_addr[..4].copy_from_slice(&[10, 0, 0, 1]);
        s.tuple.remote_addr[..4].copy_from_slice(&[10, 0, 0, 2]);
        s.tuple.local_port = 40000;
        s.tuple.remote_port = 29500;
        s
    }

    /// A flow that closed while the ring buffer was full: the kernel keeps it, marked.
    fn closed_unsent(s: FlowStats) -> FlowStats {
        FlowStats {
            end_ns: 2_500,
            closed_unsent: 1,
            ..s
        }
    }

    /// Sinks writing one file per table under `out`.
    fn per_run_sinks(out: &Path) -> Sinks {
        sinks(Layout::PerRun {
            out: out.to_path_buf(),
            run_id: "run".into(),
        })
    }

    fn rtt(cookie: u64, srtt_us: u32) -> Vec<u8> {
        let mut e = RttSampleEvent {
            cookie,
            srtt_us,
            ..Default::default()
        };
        e.header.kind = EVENT_RTT_SAMPLE;
        e.header.ts_ns = 2_000;
        bytes_of(&e)
    }

    fn flow_end(s: FlowStats) -> Vec<u8> {
        let mut e = FlowEndEvent {
            stats: FlowStats { end_ns: 3_000, ..s },
            ..Default::default()
        };
        e.header.kind = EVENT_FLOW_END;
        e.header.ts_ns = 3_000;
        bytes_of(&e)
    }

    /// Kernel counters after the ring refused `n` flow ends.
    fn flow_ends_refused(n: u64) -> KernelCounters {
        let mut slots = vec![0; STAT_SLOTS as usize];
        slots[(STAT_RING_FULL + EVENT_FLOW_END) as usize] = n;
        KernelCounters::from_slots(slots)
    }

    /// Records as `ring_records` hands them over: each decoded, a bad one an error.
    fn records(raw: &[Vec<u8>]) -> Vec<Result<Event>> {
        raw.iter().map(|r| decode(r)).collect()
    }

    fn sinks(layout: Layout) -> Sinks {
        let node = NodeIdentity {
            hostname: "node7".into(),
            boot_id: "boot".into(),
            kernel: "test".into(),
        };
        let clock = ClockOffset {
            offset_ns: 1_700_000_000_000_000_000,
            error_ns: 10,
        };
        Sinks::create(
            layout,
            &node,
            &clock,
            now_ns(libc::CLOCK_REALTIME),
            None,
            Vec::new(),
        )
        .unwrap()
    }

    /// Every value of an unsigned column in the files of `table` under `root` (any layout),
    /// in file order.
    fn column(root: &Path, table: &str, name: &str) -> Vec<u64> {
        let mut files: Vec<_> = walkdir::WalkDir::new(root)
            .into_iter()
            .filter_map(|e| e.ok())
            .map(|e| e.into_path())
            .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
            .filter(|p| {
                p.components().any(|c| {
                    let c = c.as_os_str().to_string_lossy();
                    c == table || crate::layout::hive_table_name(&c) == Some(table)
                })
            })
            .collect();
        files.sort();
        let mut values = Vec::new();
        for path in files {
            let file = std::fs::File::open(&path).unwrap();
            for batch in ParquetRecordBatchReaderBuilder::try_new(file)
                .unwrap()
                .build()
                .unwrap()
            {
                let batch = batch.unwrap();
                let col = cast(batch.column_by_name(name).unwrap(), &DataType::UInt64).unwrap();
                let col = col.as_any().downcast_ref::<UInt64Array>().unwrap();
                values.extend(col.iter().map(|v| v.unwrap_or_default()));
            }
        }
        values
    }

    /// CPU time of the calling thread.
    fn thread_cpu() -> std::time::Duration {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec to fill; CLOCK_THREAD_CPUTIME_ID needs nothing else.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }

    /// Decodes `count` records cycled from `raw` and writes them to Parquet, as the loader does
    /// from the ring buffer to closed files; returns (events per CPU second of this thread,
    /// bytes per row on disk in `table`).
    fn drain_rate(raw: &[Vec<u8>], count: usize, table: &str) -> (f64, f64) {
        let dir = tempfile::tempdir().unwrap();
        let mut sinks = per_run_sinks(dir.path());
        let mut kernel = FakeKernel::default();
        let cpu = thread_cpu();
        sinks
            .drain((0..count).map(|i| decode(&raw[i % raw.len()])))
            .unwrap();
        sinks
            .finish(Vec::new(), &mut kernel, &Hooks::default())
            .unwrap();
        let cpu = thread_cpu() - cpu;
        let bytes: u64 = std::fs::read_dir(dir.path().join(table))
            .unwrap()
            .map(|f| f.unwrap().metadata().unwrap().len())
            .sum();
        assert_eq!(column(dir.path(), table, "flow_id").len(), count);
        (
            count as f64 / cpu.as_secs_f64(),
            bytes as f64 / count as f64,
        )
    }

    /// Pseudo-random values (an LCG): events whose fields vary as a busy host's do, since a
    /// fixed pattern would compress to nothing and flatter the writer.
    struct Noise(u64);

    impl Noise {
        fn below(&mut self, range: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % range
        }
    }

    /// A benchmark, not a test: what one core of the loader turns into Parquet per second, from
    /// decoding ring buffer records to closed files, for RTT samples (the commonest event) on
    /// 64 flows and for retransmits (whose rows carry addresses as text). The kernel is left
    /// out: only the loader's own work is timed. Run it with
    /// `cargo test --release -p scaletrace -- --ignored --nocapture loader_events_per_cpu_second`.
    #[test]
    #[ignore = "benchmark: prints events per CPU second"]
    fn loader_events_per_cpu_second() {
        const EVENTS: usize = 2_000_000;
        let mut noise = Noise(0x5eed);
        let mut acked = [0u64; 64];
        let mut ts = 1_000_000u64;
        let rtt: Vec<Vec<u8>> = (0..16_384usize)
            .map(|i| {
                let flow = i % 64;
                acked[flow] += 1448 * (1 + noise.below(40));
                ts += noise.below(20_000);
                let mut e = RttSampleEvent {
                    cookie: 0x1000 + flow as u64,
                    srtt_us: 50 + noise.below(5_000) as u32,
                    min_rtt_us: 40 + flow as u32,
                    snd_cwnd: 10 + noise.below(200) as u32,
                    snd_ssthresh: 64,
                    packets_out: noise.below(100) as u32,
                    sacked_out: noise.below(3) as u32,
                    total_retrans: (acked[flow] >> 24) as u32,
                    bytes_acked: acked[flow],
                    mss: 1448,
                    rate_delivered: 1 + noise.below(60) as u32,
                    rate_interval_us: 50 + noise.below(500) as u32,
                    dsack_dups: NOT_MEASURED,
                    reord_seen: NOT_MEASURED,
                    ..Default::default()
                };
                e.header.kind = EVENT_RTT_SAMPLE;
                e.header.ts_ns = ts;
                bytes_of(&e)
            })
            .collect();
        let retransmits: Vec<Vec<u8>> = (0..16_384usize)
            .map(|i| {
                let flow = i % 64;
                ts += noise.below(20_000);
                let mut e = RetransmitEvent {
                    cookie: 0x1000 + flow as u64,
                    state: 1,
                    ..Default::default()
                };
                e.tuple.family = AF_INET;
                e.tuple.local_addr[..4].copy_from_slice(&[10, 0, 0, 1]);
                e.tuple.remote_addr[..4].copy_from_slice(&[
                    10,
                    0,
                    (flow / 8) as u8,
                    2 + (flow % 8) as u8,
                ]);
                e.tuple.local_port = 40_000 + flow as u16;
                e.tuple.remote_port = 29_500;
                e.header.kind = EVENT_RETRANSMIT;
                e.header.ts_ns = ts;
                bytes_of(&e)
            })
            .collect();
        for (name, raw, table) in [
            ("RTT samples", &rtt, "rtt"),
            ("retransmits", &retransmits, "retransmits"),
        ] {
            let (rate, bytes_per_row) = drain_rate(raw, EVENTS, table);
            println!(
                "loader: {rate:.0} {name} per CPU second, decoded and written to Parquet ({bytes_per_row:.1} bytes per row)"
            );
        }
    }

    #[test]
    fn every_record_and_every_flow_left_in_the_kernel_is_written_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let mut sinks = per_run_sinks(dir.path());
        let mut kernel = FakeKernel::default();
        // a flow still open at the end, and one that closed while the ring was full
        kernel.flows.insert(1, flow(1, 100));
        kernel.flows.insert(2, closed_unsent(flow(2, 200)));
        let mut raw = vec![rtt(1, 50), rtt(1, 60), rtt(3, 70), flow_end(flow(3, 300))];
        raw.push(rtt(1, 80)[..20].to_vec()); // cut short: undecodable
        sinks.drain(records(&raw)).unwrap();
        sinks
            .sweep_unsent_flows(&mut kernel, &flow_ends_refused(1), 4_000)
            .unwrap();
        assert!(
            !kernel.flows.contains_key(&2),
            "a swept flow leaves the kernel table"
        );
        let end = sinks
            .finish(records(&[rtt(1, 90)]), &mut kernel, &Hooks::default())
            .unwrap();

        assert_eq!(column(dir.path(), "rtt", "srtt_us"), [50, 60, 70, 90]);
        let mut flows = column(dir.path(), "flows", "flow_id");
        flows.sort();
        assert_eq!(flows, [1, 2, 3]);
        let mut sent = column(dir.path(), "flows", "bytes_sent");
        sent.sort();
        assert_eq!(sent, [100, 200, 300]);
        assert_eq!(column(dir.path(), "capture", "flows"), [3]);
        assert_eq!(column(dir.path(), "capture", "rtt_samples"), [4]);
        assert_eq!(column(dir.path(), "capture", "decode_errors"), [1]);
        assert!(
            end.summary
                .starts_with("3 flows (1 still open), 4 RTT samples"),
            "{}",
            end.summary
        );
        // what the agent's last health files say
        let t = end.totals;
        assert_eq!((t.flows, t.rtt_samples, t.decode_errors), (3, 4, 1));
        let files = walkdir::WalkDir::new(dir.path())
            .into_iter()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("parquet".as_ref()))
            .count();
        assert_eq!(t.files_closed as usize, files);
    }

    #[test]
    fn a_flow_read_open_before_the_detach_whose_end_is_in_the_final_drain_is_written_once() {
        // The open flows are read just before the programs are detached (a flow's state goes
        // with its socket); flow 4 closed after that read and before the detach: its end is in
        // the ring, and the held copy (still open, fewer bytes) must not be written as well.
        let dir = tempfile::tempdir().unwrap();
        let sinks = per_run_sinks(dir.path());
        let mut kernel = FakeKernel::default();
        kernel.flows.insert(4, flow(4, 100));
        kernel.flows.insert(5, flow(5, 500));
        let end = sinks
            .finish(
                records(&[flow_end(flow(4, 400))]),
                &mut kernel,
                &Hooks::default(),
            )
            .unwrap();
        let mut rows: Vec<(u64, u64)> = column(dir.path(), "flows", "flow_id")
            .into_iter()
            .zip(column(dir.path(), "flows", "bytes_sent"))
            .collect();
        rows.sort();
        assert_eq!(rows, [(4, 400), (5, 500)]);
        assert!(
            end.summary.starts_with("2 flows (1 still open)"),
            "{}",
            end.summary
        );
    }

    #[test]
    fn the_flow_table_is_walked_only_after_the_ring_refused_a_flow_end() {
        const S: u64 = 1_000_000_000;
        let dir = tempfile::tempdir().unwrap();
        let mut sinks = per_run_sinks(dir.path());
        let mut kernel = FakeKernel::default();
        kernel.flows.insert(1, flow(1, 100));
        let mut sweep = |kernel: &mut FakeKernel, refused: u64, at: u64| {
            sinks
                .sweep_unsent_flows(kernel, &flow_ends_refused(refused), at)
                .unwrap();
        };
        for t in 1..4 {
            sweep(&mut kernel, 0, t * S);
        }
        assert_eq!(kernel.sweeps.get(), 0, "nothing refused: no walk");
        // the refusal is counted before the flow is marked: the first walk finds nothing, the
        // next one (still settling) finds it
        sweep(&mut kernel, 1, 10 * S);
        kernel.flows.insert(2, closed_unsent(flow(2, 200)));
        sweep(&mut kernel, 1, 11 * S);
        assert_eq!(kernel.sweeps.get(), 2);
        assert!(!kernel.flows.contains_key(&2) && kernel.flows.contains_key(&1));
        // settled: no walk; a minute later, a walk whatever the counters say
        sweep(&mut kernel, 1, 13 * S);
        assert_eq!(kernel.sweeps.get(), 2);
        sweep(&mut kernel, 1, 72 * S);
        assert_eq!(kernel.sweeps.get(), 3);
        sinks
            .finish(Vec::new(), &mut kernel, &Hooks::default())
            .unwrap();
        let mut flows = column(dir.path(), "flows", "flow_id");
        flows.sort();
        assert_eq!(flows, [1, 2]);
    }

    #[test]
    fn a_rotation_closes_the_interval_and_snapshots_what_each_open_flow_did_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut sinks = hive_sinks(dir.path());
        let mut kernel = FakeKernel::default();
        let hooks = Hooks::default();
        kernel.flows.insert(1, flow(1, 1_000));
        sinks.drain(records(&[rtt(1, 50), rtt(1, 60)])).unwrap();
        sinks
            .rotate(&KernelCounters::zero(), &hooks, &kernel)
            .unwrap();
        kernel.flows.insert(1, flow(1, 3_000));
        sinks.drain(records(&[rtt(1, 70)])).unwrap();
        sinks
            .rotate(&KernelCounters::zero(), &hooks, &kernel)
            .unwrap();
        kernel.flows.clear();
        sinks.finish(Vec::new(), &mut kernel, &hooks).unwrap();

        // one capture row per interval, each counting its own rows
        assert_eq!(column(dir.path(), "capture", "rtt_samples"), [2, 1, 0]);
        assert_eq!(column(dir.path(), "rtt", "srtt_us"), [50, 60, 70]);
        // each snapshot: the counters then, and what changed since the previous one
        assert_eq!(
            column(dir.path(), "flow_snapshots", "bytes_sent"),
            [1_000, 3_000]
        );
        assert_eq!(
            column(dir.path(), "flow_snapshots", "bytes_sent_delta"),
            [1_000, 2_000]
        );
        // a table without rows in an interval leaves no file in the agent's layout, once it
        // has one: a table that never had a row is one empty file, from the first interval
        assert_eq!(hive_files(dir.path(), "rtt"), 2);
        assert_eq!(hive_files(dir.path(), "retransmits"), 1);
        assert_eq!(hive_files(dir.path(), "qp_snapshots"), 1);
        assert_eq!(column(dir.path(), "retransmits", "flow_id"), [0u64; 0]);
    }

    /// A window of `flow` opened at `start_ns` with `bytes_acked` bytes acknowledged.
    fn with_window(mut flow: FlowStats, start_ns: u64, bytes_acked: u64) -> FlowStats {
        flow.flow_window = FlowWindow {
            start_ns,
            end_ns: start_ns + 1_000,
            opened: WindowCounters {
                bytes_acked,
                ..Default::default()
            },
            ..Default::default()
        };
        flow
    }

    #[test]
    fn each_window_is_written_once_from_the_ring_a_flow_end_or_the_end_of_the_capture() {
        let dir = tempfile::tempdir().unwrap();
        let mut sinks = per_run_sinks(dir.path());
        // flow 1: a finished window from the ring (0 -> 400 bytes), then its end carries the
        // next (400 -> its final 1,000)
        let mut sent = FlowWindowEvent {
            cookie: 1,
            window: with_window(flow(1, 0), 1_000, 0).flow_window,
            closed: WindowCounters {
                bytes_acked: 400,
                ..Default::default()
            },
            ..Default::default()
        };
        sent.header.kind = EVENT_FLOW_WINDOW;
        let raw = [
            bytes_of(&sent),
            flow_end(with_window(flow(1, 1_000), 2_000, 400)),
            // flow 3 never had an event: no window
            flow_end(flow(3, 50)),
        ];
        sinks.drain(records(&raw)).unwrap();
        // flow 2, still open at the end, with its open window (700 -> 900)
        let mut kernel = FakeKernel::default();
        kernel
            .flows
            .insert(2, with_window(flow(2, 900), 2_000, 700));
        sinks
            .finish(Vec::new(), &mut kernel, &Hooks::default())
            .unwrap();
        let ids = column(dir.path(), "flow_windows", "flow_id");
        let bytes = column(dir.path(), "flow_windows", "bytes_sent");
        let mut windows: Vec<(u64, u64)> = ids.into_iter().zip(bytes).collect();
        windows.sort();
        assert_eq!(windows, [(1, 400), (1, 600), (2, 200)]);
        assert_eq!(column(dir.path(), "flows", "flow_id").len(), 3);
    }

    #[test]
    fn a_run_that_never_rotated_still_has_every_table_of_the_agent() {
        let dir = tempfile::tempdir().unwrap();
        let sinks = hive_sinks(dir.path());
        let mut kernel = FakeKernel::default();
        sinks
            .finish(Vec::new(), &mut kernel, &Hooks::default())
            .unwrap();
        // every table but those `import` and `merge` write
        for table in crate::tables::catalog() {
            if ![
                crate::import::GpuEventRow::NAME,
                crate::tables::WindowRow::NAME,
            ]
            .contains(&table.name)
            {
                assert_eq!(hive_files(dir.path(), table.name), 1, "{}", table.name);
            }
        }
    }

    #[test]
    fn a_table_without_rows_has_a_file_again_each_day() {
        let dir = tempfile::tempdir().unwrap();
        let day = 86_400 * 1_000_000_000;
        let mut sinks = hive_sinks(dir.path());
        let kernel = FakeKernel::default();
        let counters = KernelCounters::zero();
        let hooks = Hooks::default();
        sinks.rotate(&counters, &hooks, &kernel).unwrap();
        sinks.rotate(&counters, &hooks, &kernel).unwrap();
        assert_eq!(hive_files(dir.path(), "retransmits"), 1);
        // an interval that started on the next UTC day
        sinks.interval_start_utc += day;
        sinks.rotate(&counters, &hooks, &kernel).unwrap();
        assert_eq!(hive_files(dir.path(), "retransmits"), 2);
    }

    #[test]
    fn gpu_samples_rotate_with_the_other_tables_and_every_interval_names_the_gpus() {
        let dir = tempfile::tempdir().unwrap();
        let mut sinks = hive_sinks(dir.path());
        let mut kernel = FakeKernel::default();
        let hooks = Hooks::default();
        let gpu = |index| GpuDeviceRow {
            host: "node7".into(),
            index,
            ..Default::default()
        };
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        sinks.set_gpus(vec![gpu(0), gpu(1)], dropped.clone());
        let batch = |util| crate::sources::gpu::GpuBatch {
            samples: vec![GpuSampleRow {
                sm_util_pct: Some(util),
                ..Default::default()
            }],
            processes: vec![GpuProcessRow {
                pid: util,
                ..Default::default()
            }],
        };
        sinks.push_gpu(batch(10)).unwrap();
        sinks
            .rotate(&KernelCounters::zero(), &hooks, &kernel)
            .unwrap();
        sinks.push_gpu(batch(20)).unwrap();
        sinks.push_gpu(batch(30)).unwrap();
        // the sampler dropped 3 samples in the second interval
        dropped.store(3, std::sync::atomic::Ordering::Relaxed);
        sinks.finish(Vec::new(), &mut kernel, &hooks).unwrap();
        assert_eq!(
            column(dir.path(), "gpu_samples", "sm_util_pct"),
            [10, 20, 30]
        );
        assert_eq!(column(dir.path(), "gpu_processes", "pid"), [10, 20, 30]);
        assert_eq!(hive_files(dir.path(), "gpu_samples"), 2);
        assert_eq!(column(dir.path(), "gpu_devices", "index"), [0, 1, 0, 1]);
        assert_eq!(column(dir.path(), "capture", "gpu_samples_dropped"), [0, 3]);
    }

    /// Sinks of the agent's layout, under `root`.
    fn hive_sinks(root: &Path) -> Sinks {
        sinks(Layout::Hive {
            root: root.to_path_buf(),
            host: "node7".into(),
            run_id: "run".into(),
            seq: 0,
            start_utc_ns: now_ns(libc::CLOCK_REALTIME),
        })
    }

    /// Completed files of `table` in a Hive tree.
    fn hive_files(root: &Path, table: &str) -> usize {
        walkdir::WalkDir::new(root.join(crate::layout::hive_table_dir(table)))
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_file() && e.path().extension() == Some("parquet".as_ref()))
            .count()
    }

    fn nccl_call(count: u64) -> Vec<u8> {
        let mut e = NcclCallEvent::default();
        e.header.kind = EVENT_NCCL_CALL;
        e.op = NCCL_ALL_REDUCE;
        e.count = count;
        crate::decode::bytes_of(&e)
    }

    /// A successful ibv_create_qp of QP `qp_num` (a pointer returned: not null).
    fn qp_created(qp_num: u32) -> Vec<u8> {
        let mut e = VerbsCallEvent::default();
        e.header.kind = EVENT_VERBS_CALL;
        e.op = VERBS_CREATE_QP;
        e.ret = 0x1000;
        e.qp_num = qp_num;
        crate::decode::bytes_of(&e)
    }

    #[test]
    fn each_probe_familys_records_reach_its_tables_and_the_capture_row_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut sinks = per_run_sinks(dir.path());
        let mut kernel = FakeKernel::default();
        let no_family = crate::decode::bytes_of(&EventHeader::default()); // kind 0: nobody's
        let raw = [
            nccl_call(1 << 20),
            nccl_call(7),
            qp_created(0x11),
            nccl_call(9)[..30].to_vec(), // cut short: the family cannot decode it
            no_family,
        ];
        sinks.drain(records(&raw)).unwrap();
        let end = sinks
            .finish(Vec::new(), &mut kernel, &Hooks::default())
            .unwrap();
        assert_eq!(column(dir.path(), "nccl_calls", "count"), [1 << 20, 7]);
        assert_eq!(column(dir.path(), "verbs_calls", "qp_num"), [0x11]);
        // a QP alive at the end gets its row from the family's last interval
        assert_eq!(column(dir.path(), "qps", "qp_num"), [0x11]);
        assert_eq!(column(dir.path(), "capture", "nccl_calls"), [2]);
        assert_eq!(column(dir.path(), "capture", "verbs_calls"), [1]);
        assert_eq!(column(dir.path(), "capture", "decode_errors"), [2]);
        assert!(
            end.summary.contains(
                "0 state changes, 2 nccl_calls rows, 1 qps rows, 1 verbs_calls rows, 0 events lost"
            ),
            "{}",
            end.summary
        );
    }

    #[test]
    fn a_probe_familys_rows_while_the_disk_is_full_are_counted_lost_and_it_resumes_with_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut sinks = hive_sinks(dir.path());
        let mut kernel = FakeKernel::default();
        sinks.drain(records(&[nccl_call(1)])).unwrap();
        assert!(sinks.open_bytes() > 0);
        sinks.drop_open_interval(); // its one row lost
        assert_eq!(sinks.open_bytes(), 0);
        sinks
            .drain(records(&[nccl_call(2), qp_created(5)]))
            .unwrap(); // two rows lost
        assert!(sinks.try_resume());
        sinks.drain(records(&[nccl_call(3)])).unwrap();
        sinks
            .finish(Vec::new(), &mut kernel, &Hooks::default())
            .unwrap();
        assert_eq!(column(dir.path(), "nccl_calls", "count"), [3]);
        // the QP's create was lost with its row, but the family saw it: alive at the end
        assert_eq!(column(dir.path(), "qps", "qp_num"), [5]);
        assert_eq!(
            column(dir.path(), "capture", "rows_lost_disk_full")
                .iter()
                .sum::<u64>(),
            3 // the dropped file's call, the call while no file was open, the create's call row
        );
    }

    fn partial_files(root: &Path) -> Vec<std::path::PathBuf> {
        walkdir::WalkDir::new(root)
            .into_iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_file())
            .map(|e| e.into_path())
            .filter(|p| p.to_string_lossy().ends_with(".partial"))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    #[test]
    fn an_interval_whose_files_cannot_all_be_created_leaves_none_and_the_open_one_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut sinks = hive_sinks(dir.path());
        sinks.drain(records(&[nccl_call(1), rtt(1, 4)])).unwrap();
        let open = partial_files(dir.path());
        assert_eq!(
            open.len(),
            13,
            "every table but the ones written whole: {open:?}"
        );
        // A file in the way of the next interval's `qps` file (the verbs family's second,
        // after the recorder's own files and NCCL's have been created): not ours to remove.
        let next = sinks.layout.next(sinks.interval_start_utc + 1);
        let obstacle = crate::layout::partial_path(&next.path(QpRow::NAME));
        std::fs::create_dir_all(obstacle.parent().unwrap()).unwrap();
        std::fs::write(&obstacle, "someone else's").unwrap();
        assert!(sinks.start_interval(&next).is_err());
        assert_eq!(
            std::fs::read_to_string(&obstacle).unwrap(),
            "someone else's",
            "a file this run did not make was touched"
        );
        std::fs::remove_file(&obstacle).unwrap();
        assert_eq!(
            partial_files(dir.path()),
            open,
            "new files were left behind"
        );
        // the open interval still takes rows and closes whole
        sinks.drain(records(&[nccl_call(2), rtt(1, 5)])).unwrap();
        sinks
            .finish(Vec::new(), &mut FakeKernel::default(), &Hooks::default())
            .unwrap();
        assert_eq!(column(dir.path(), "nccl_calls", "count"), [1, 2]);
        assert_eq!(column(dir.path(), "rtt", "srtt_us"), [4, 5]);
        assert_eq!(partial_files(dir.path()), Vec::<std::path::PathBuf>::new());
    }
}
