//! The tables of one run: decode events, assemble rows, write them, and at the end recover
//! every flow left in the kernel table and write the `capture` summary row.
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use scaletrace_common::*;

use super::{KernelCounters, KernelMaps};
use crate::{
    assemble::Assembler,
    clock::{now_ns, ClockOffset},
    decode::{decode, Event},
    nic::NicSampler,
    node::NodeIdentity,
    parquet_sink::TableWriter,
    probe::Hooks,
    tables::*,
};

pub struct Sinks {
    assembler: Assembler,
    node: NodeIdentity,
    run_id: String,
    out: PathBuf,
    metadata: Vec<(String, String)>,
    flows: TableWriter<FlowRow>,
    rtt: TableWriter<RttRow>,
    retransmits: TableWriter<RetransmitRow>,
    states: TableWriter<StateChangeRow>,
    nic: TableWriter<NicCounterRow>,
    nccl: TableWriter<NcclCallRow>,
    verbs: TableWriter<VerbsCallRow>,
    qps: TableWriter<QpRow>,
    completions: TableWriter<VerbsCompletionRow>,
    qp_tracker: crate::verbs::QpTracker,
    clock: ClockOffset,
    nic_sampler: Option<NicSampler>,
    interfaces: Vec<InterfaceRow>,
    pub events: u64,
    pub decode_errors: u64,
}

impl Sinks {
    pub fn create(
        out: &Path,
        run_id: &str,
        node: &NodeIdentity,
        clock: &ClockOffset,
        nic_sysfs: Option<&Path>,
        interfaces: Vec<InterfaceRow>,
    ) -> Result<Self> {
        std::fs::create_dir_all(out)
            .with_context(|| format!("--out {}: cannot create it", out.display()))?;
        let metadata = vec![
            (
                "scaletrace.version".into(),
                env!("CARGO_PKG_VERSION").into(),
            ),
            ("scaletrace.run_id".into(), run_id.into()),
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
        Ok(Sinks {
            assembler: Assembler::new(node.hostname.clone(), *clock),
            node: node.clone(),
            run_id: run_id.into(),
            out: out.into(),
            flows: TableWriter::create(out, run_id, &metadata)?,
            rtt: TableWriter::create(out, run_id, &metadata)?,
            retransmits: TableWriter::create(out, run_id, &metadata)?,
            states: TableWriter::create(out, run_id, &metadata)?,
            nic: TableWriter::create(out, run_id, &metadata)?,
            nccl: TableWriter::create(out, run_id, &metadata)?,
            verbs: TableWriter::create(out, run_id, &metadata)?,
            qps: TableWriter::create(out, run_id, &metadata)?,
            completions: TableWriter::create(out, run_id, &metadata)?,
            qp_tracker: Default::default(),
            clock: *clock,
            nic_sampler: nic_sysfs.map(|root| NicSampler::new(root, &node.hostname)),
            interfaces,
            metadata,
            events: 0,
            decode_errors: 0,
        })
    }

    /// File metadata shared by every table of the run.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    pub fn flows_written(&self) -> u64 {
        self.flows.rows()
    }
    pub fn rtt_written(&self) -> u64 {
        self.rtt.rows()
    }
    pub fn retransmits_written(&self) -> u64 {
        self.retransmits.rows()
    }

    /// Reads the NIC counters once (if enabled).
    pub fn sample_nics(&mut self) -> Result<()> {
        let Some(sampler) = self.nic_sampler.as_mut() else {
            return Ok(());
        };
        for row in sampler.sample(now_ns(libc::CLOCK_REALTIME)) {
            self.nic.push(row)?;
        }
        Ok(())
    }

    /// Removes the files of a run that never started.
    pub fn abandon(self) {
        for p in [
            self.flows.path(),
            self.rtt.path(),
            self.retransmits.path(),
            self.states.path(),
            self.nic.path(),
            self.nccl.path(),
            self.verbs.path(),
            self.qps.path(),
            self.completions.path(),
        ] {
            let _ = std::fs::remove_file(p.with_extension("parquet.partial"));
        }
    }

    fn handle(&mut self, bytes: &[u8]) -> Result<()> {
        self.events += 1;
        let event = match decode(bytes) {
            Ok(e) => e,
            Err(e) => {
                self.decode_errors += 1;
                log::debug!("undecodable record: {e}");
                return Ok(());
            }
        };
        match event {
            Event::FlowEnd(e) => {
                let row = self.assembler.flow(&e.stats, e.header.ts_ns);
                self.flows.push(row)
            }
            Event::RttSample(e) => self.rtt.push(self.assembler.rtt(&e)),
            Event::Retransmit(e) => self.retransmits.push(self.assembler.retransmit(&e)),
            Event::StateChange(e) => {
                let row = self.assembler.state_change(&e);
                self.states.push(row)
            }
            Event::VerbsCall(e) => {
                let clock = self.clock;
                let row = crate::verbs::call_row(&e, &self.node.hostname, |m| clock.to_utc_ns(m));
                if let Some(qp) = self.qp_tracker.observe(&row) {
                    self.qps.push(qp)?;
                }
                self.verbs.push(row)
            }
            Event::VerbsCompletion(e) => {
                let clock = self.clock;
                self.completions
                    .push(crate::verbs::completion_row(&e, &self.node.hostname, |m| {
                        clock.to_utc_ns(m)
                    }))
            }
            Event::NcclCall(e) => {
                let clock = self.clock;
                self.nccl
                    .push(crate::nccl::call_row(&e, &self.node.hostname, |m| {
                        clock.to_utc_ns(m)
                    }))
            }
        }
    }

    /// Consumes everything currently in the ring buffer.
    pub fn drain(&mut self, ring: &mut RingBuf<MapData>) -> Result<()> {
        while let Some(item) = ring.next() {
            let bytes: &[u8] = &item;
            // Copy out so the ring slot is released before the (possibly slow) write.
            let bytes = bytes.to_vec();
            drop(item);
            self.handle(&bytes)?;
        }
        Ok(())
    }

    /// Writes flows that closed while the ring buffer was full (the kernel kept them in the
    /// map, marked) and removes them from the kernel table.
    pub fn sweep_unsent_flows(
        &mut self,
        flows: &mut BpfHashMap<MapData, u64, FlowStats>,
        now_mono: u64,
    ) -> Result<()> {
        let unsent: Vec<(u64, FlowStats)> = flows
            .iter()
            .filter_map(|r| r.ok())
            .filter(|(_, s)| s.closed_unsent != 0)
            .collect();
        for (cookie, s) in unsent {
            let row = self.assembler.flow(&s, now_mono);
            self.flows.push(row)?;
            let _ = flows.remove(&cookie);
        }
        Ok(())
    }

    /// After detaching: drain the ring, write every flow left in the kernel table (closed but
    /// unsent, or still open), write the `capture` row and close all files.
    pub fn finish(
        mut self,
        mut ring: RingBuf<MapData>,
        maps: &mut KernelMaps,
        hooks: &Hooks,
        clock_start: &ClockOffset,
        start_utc: i64,
    ) -> Result<String> {
        let mut first_error: Option<anyhow::Error> = None;
        let mut note = |r: Result<()>| {
            if let Err(e) = r {
                first_error.get_or_insert(e);
            }
        };
        note(self.drain(&mut ring));
        // A last reading, so the counters cover the whole run.
        note(self.sample_nics());
        let end_mono = now_ns(libc::CLOCK_MONOTONIC) as u64;
        let remaining: Vec<FlowStats> = maps
            .flows
            .iter()
            .filter_map(|r| r.ok())
            .map(|(_, s)| s)
            .collect();
        for s in &remaining {
            let row = self.assembler.flow(s, end_mono);
            note(self.flows.push(row));
        }
        let counters = KernelCounters::read(&maps.stats)?;
        let clock_end = ClockOffset::measure();
        let drift = (clock_end.offset_ns - clock_start.offset_ns).abs();
        let capture = CaptureRow {
            host: self.node.hostname.clone(),
            boot_id: self.node.boot_id.clone(),
            kernel: self.node.kernel.clone(),
            run_id: self.run_id.clone(),
            start: start_utc,
            end: now_ns(libc::CLOCK_REALTIME),
            hooks_attached: hooks.attached_list(),
            hooks_missing: hooks.missing_list(),
            flows: self.flows.rows(),
            rtt_samples: self.rtt.rows(),
            retransmits: self.retransmits.rows(),
            state_changes: self.states.rows(),
            nccl_calls: self.nccl.rows(),
            verbs_calls: self.verbs.rows(),
            ring_drops_nccl: counters.get(STAT_RING_FULL + EVENT_NCCL_CALL),
            ring_drops_verbs: counters.get(STAT_RING_FULL + EVENT_VERBS_CALL),
            ring_drops: counters.ring_drops(),
            ring_drops_flow_end: counters.get(STAT_RING_FULL + EVENT_FLOW_END),
            ring_drops_rtt: counters.get(STAT_RING_FULL + EVENT_RTT_SAMPLE),
            ring_drops_retransmit: counters.get(STAT_RING_FULL + EVENT_RETRANSMIT),
            ring_drops_state: counters.get(STAT_RING_FULL + EVENT_STATE_CHANGE),
            rtt_samples_skipped_by_interval: counters.get(STAT_RATE_LIMITED + EVENT_RTT_SAMPLE),
            retransmits_over_rate: counters.get(STAT_RATE_LIMITED + EVENT_RETRANSMIT),
            flows_filtered_out: counters.get(STAT_FILTERED_FLOWS),
            flows_untracked_map_full: counters.get(STAT_FLOW_MAP_FULL),
            decode_errors: self.decode_errors,
            clock_offset_ns: clock_start.offset_ns,
            clock_error_ns: clock_start.error_ns + drift,
        };
        let summary = format!(
            "{} flows ({} still open), {} RTT samples, {} retransmits, {} state changes, {} events lost to a full ring buffer; files under {}",
            capture.flows,
            remaining.iter().filter(|s| s.end_ns == 0).count(),
            capture.rtt_samples,
            capture.retransmits,
            capture.state_changes,
            capture.ring_drops,
            self.out.display()
        );
        let end_meta = [
            (
                "scaletrace.clock.end_offset_ns",
                clock_end.offset_ns.to_string(),
            ),
            ("scaletrace.ring_drops", capture.ring_drops.to_string()),
        ];
        let mut capture_writer =
            TableWriter::<CaptureRow>::create(&self.out, &self.run_id, &self.metadata);
        if let Ok(w) = capture_writer.as_mut() {
            for (k, v) in &end_meta {
                w.append_metadata(k, v.clone());
            }
            note(w.push(capture));
        }
        // Close every file even if one fails, so one full table does not cost the others.
        macro_rules! close {
            ($w:expr) => {{
                let mut w = $w;
                for (k, v) in &end_meta {
                    w.append_metadata(k, v.clone());
                }
                note(w.close().map(|_| ()));
            }};
        }
        close!(self.flows);
        close!(self.rtt);
        close!(self.retransmits);
        close!(self.states);
        close!(self.nic);
        close!(self.nccl);
        for qp in self.qp_tracker.remaining() {
            note(self.qps.push(qp));
        }
        close!(self.verbs);
        close!(self.qps);
        close!(self.completions);
        // Per-QP data-path totals live in the kernel map until now.
        match TableWriter::<QpTrafficRow>::create(&self.out, &self.run_id, &self.metadata) {
            Ok(mut w) => {
                for (key, traffic) in maps.qp_traffic.iter().filter_map(|r| r.ok()) {
                    note(w.push(crate::verbs::traffic_row(
                        &key,
                        &traffic,
                        &self.node.hostname,
                    )));
                }
                note(w.close().map(|_| ()));
            }
            Err(e) => note(Err(e)),
        }
        match TableWriter::<InterfaceRow>::create(&self.out, &self.run_id, &self.metadata) {
            Ok(mut w) => {
                for row in std::mem::take(&mut self.interfaces) {
                    note(w.push(row));
                }
                note(w.close().map(|_| ()));
            }
            Err(e) => note(Err(e)),
        }
        match capture_writer {
            Ok(w) => note(w.close().map(|_| ())),
            Err(e) => note(Err(e)),
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }
}
