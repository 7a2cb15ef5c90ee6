//! What the recorder reads from the kernel's maps besides the ring buffer: the flow table
//! (flows still open, closed flows the full ring could not carry), the per-QP data-path
//! totals and the event counters. `Sinks` reads them through `KernelTables`, so the sinks run
//! and are tested without a kernel.
use anyhow::{Context as _, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray};
use scaletrace_common::*;

/// The kernel tables as the sinks see them.
pub trait KernelTables {
    /// Every entry of the flow table: socket cookie and aggregate.
    fn flows(&self) -> Vec<(u64, FlowStats)>;
    /// The flows that closed while the ring buffer was full (the kernel kept them, marked),
    /// without copying the rest of the table.
    fn closed_unsent_flows(&self) -> Vec<(u64, FlowStats)>;
    /// How many flows the table holds.
    fn flow_count(&self) -> usize;
    /// Removes a flow whose final row is written.
    fn remove_flow(&mut self, cookie: u64);
    /// Every flow left at the end of the run, the open ones with their counters read from the
    /// kernel now (an open flow's aggregate holds those of its last RTT sample).
    fn flows_at_end(&self) -> Vec<FlowStats>;
    /// Every QP's data-path totals.
    fn qp_traffic(&self) -> Vec<(QpKey, QpTraffic)>;
    /// The event counters, summed over CPUs.
    fn counters(&self) -> Result<KernelCounters>;
}

/// The kernel maps userspace reads during and after the run (the programs may be gone).
pub struct KernelMaps {
    /// Socket cookie -> per-flow aggregate.
    pub flows: BpfHashMap<MapData, u64, FlowStats>,
    /// (tgid, QPN) -> RDMA data-path aggregate.
    pub qp_traffic: BpfHashMap<MapData, QpKey, QpTraffic>,
    /// Per-CPU event counters (`STAT_*`).
    pub stats: PerCpuArray<MapData, u64>,
}

/// Kernel-side counters summed over CPUs, indexed like `STAT_*`.
#[derive(Debug, Clone)]
pub struct KernelCounters(Vec<u64>);

impl KernelCounters {
    pub fn zero() -> Self {
        KernelCounters(vec![0; STAT_SLOTS as usize])
    }
    /// Counters with these values, indexed like `STAT_*` (tests).
    #[cfg(test)]
    pub fn from_slots(slots: Vec<u64>) -> Self {
        KernelCounters(slots)
    }
    /// Counts since `base` (an earlier reading).
    pub fn since(&self, base: &KernelCounters) -> KernelCounters {
        KernelCounters(
            self.0
                .iter()
                .zip(&base.0)
                .map(|(now, then)| now.saturating_sub(*then))
                .collect(),
        )
    }
    pub fn read(map: &PerCpuArray<MapData, u64>) -> Result<Self> {
        let mut sums = vec![0u64; STAT_SLOTS as usize];
        for (slot, sum) in sums.iter_mut().enumerate() {
            let values = map.get(&(slot as u32), 0).context("reading STATS")?;
            *sum = values.iter().sum();
        }
        Ok(KernelCounters(sums))
    }
    pub fn get(&self, slot: u32) -> u64 {
        self.0.get(slot as usize).copied().unwrap_or(0)
    }
    pub fn ring_drops(&self) -> u64 {
        (1..EVENT_KINDS).map(|k| self.get(STAT_RING_FULL + k)).sum()
    }
    /// Connections not tracked because the kernel flow table was full (once each).
    pub fn untracked_flows(&self) -> u64 {
        self.get(STAT_FLOW_MAP_FULL)
    }
}

impl KernelTables for KernelMaps {
    fn flows(&self) -> Vec<(u64, FlowStats)> {
        // A new flow's entry is inserted empty and filled in place: one read in between has
        // no cookie yet and is skipped (it is read whole at the next look).
        self.flows
            .iter()
            .filter_map(|r| r.ok())
            .filter(|(cookie, s)| s.cookie == *cookie)
            .collect()
    }

    fn closed_unsent_flows(&self) -> Vec<(u64, FlowStats)> {
        self.flows
            .iter()
            .filter_map(|r| r.ok())
            .filter(|(cookie, s)| s.cookie == *cookie && s.closed_unsent != 0)
            .collect()
    }

    fn flow_count(&self) -> usize {
        self.flows.keys().count()
    }

    fn remove_flow(&mut self, cookie: u64) {
        let _ = self.flows.remove(&cookie);
    }

    fn flows_at_end(&self) -> Vec<FlowStats> {
        let mut flows: Vec<FlowStats> = self.flows().into_iter().map(|(_, s)| s).collect();
        let namespaces = crate::adopt::namespaces(None);
        if let Err(e) = crate::final_counters::refresh_open_flows(&mut flows, &namespaces) {
            log::warn!("open flows keep their last sampled counters: {e:#}");
        }
        flows
    }

    fn qp_traffic(&self) -> Vec<(QpKey, QpTraffic)> {
        self.qp_traffic.iter().filter_map(|r| r.ok()).collect()
    }

    fn counters(&self) -> Result<KernelCounters> {
        KernelCounters::read(&self.stats)
    }
}
