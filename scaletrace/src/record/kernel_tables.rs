//! What the recorder reads from the kernel's maps besides the ring buffer: the flow table
//! (flows still open, closed flows the full ring could not carry), the per-QP data-path
//! totals and the event counters. `Sinks` reads them through `KernelTables`, so the sinks run
//! and are tested without a kernel.
use anyhow::{Context as _, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray};
use scaletrace_common::*;

use crate::sources::tcp::open_flows::OpenFlows;

/// The kernel tables as the sinks see them.
pub trait KernelTables {
    /// The flows that closed while the ring buffer was full (the kernel kept them for this).
    fn closed_unsent_flows(&self) -> Vec<(u64, FlowStats)>;
    /// How many flows the table holds.
    fn flow_count(&self) -> usize;
    /// Removes a closed flow whose final row is written.
    fn remove_flow(&mut self, cookie: u64);
    /// Every flow in the table, the open ones with their counters read from the kernel now:
    /// sock_ops copies a flow's counters into its aggregate only at an RTT sample and at close
    /// (not at every ACK), so the aggregate of an open flow holds those of its last sample.
    fn flows_now(&self) -> Vec<FlowStats>;
    /// Reads the open flows once more while the programs are still attached, for the final
    /// `flows_now` to fall back on: a flow's state lives in its socket, so one whose socket is
    /// freed between the detach and that read would otherwise have no row.
    fn hold_open_flows(&mut self) {}
    /// Every QP's data-path totals.
    fn qp_traffic(&self) -> Vec<(QpKey, QpTraffic)>;
    /// The event counters, summed over CPUs.
    fn counters(&self) -> Result<KernelCounters>;
}

/// The kernel maps userspace reads during and after the run (the programs may be gone).
pub struct KernelMaps {
    /// The open flows' aggregates (in their sockets' storage); None when sock_ops was not
    /// attached.
    pub open_flows: Option<OpenFlows>,
    /// Socket cookie -> aggregate of a flow that closed while the ring buffer was full.
    pub unsent_ends: BpfHashMap<MapData, u64, FlowStats>,
    /// Tuple and network namespace -> socket cookie of each tracked open flow.
    pub tracked: BpfHashMap<MapData, TrackedKey, u64>,
    /// The size of the flow tables (`--max-flows`): what a walk of one may have to read.
    pub max_flows: u32,
    /// The one network namespace recorded (`--netns`), else None: every namespace.
    pub netns: Option<std::path::PathBuf>,
    /// The open flows as read just before the programs were detached (`hold_open_flows`).
    pub held_open: Option<Vec<FlowStats>>,
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

/// The entries of a BPF hash map walked while the kernel inserts and deletes, each key once
/// (its latest read), in the order first read. The kernel's next-key call starts over from the
/// first key when the key it is given was deleted meanwhile (a flow that ended, an LRU
/// eviction), so a walk can return an entry twice: twice written, a flow's bytes counted twice.
fn once_per_key<K: Eq + std::hash::Hash + Copy, V>(
    entries: impl Iterator<Item = (K, V)>,
) -> Vec<(K, V)> {
    let mut at: std::collections::HashMap<K, usize> = std::collections::HashMap::new();
    let mut out: Vec<(K, V)> = Vec::new();
    for (key, value) in entries {
        match at.get(&key) {
            Some(&i) => out[i].1 = value,
            None => {
                at.insert(key, out.len());
                out.push((key, value));
            }
        }
    }
    out
}

/// Reads of one map walk at most: twice the map's capacity. A walk that keeps starting over
/// (constant churn deleting the key it stands on) stops there; what it did not reach is read
/// at the next walk.
const fn walk_cap(max_entries: u32) -> usize {
    2 * max_entries as usize
}

impl KernelMaps {
    /// Warns of the tracked flows the last read did not find: their network namespace is not
    /// one this recorder can enter (no process in it and no /run/netns name), so they have no
    /// final row.
    fn say_unread(&self, read: &[FlowStats]) {
        let found: std::collections::HashSet<u64> = read.iter().map(|f| f.cookie).collect();
        let unread = self
            .tracked
            .iter()
            .take(walk_cap(self.max_flows))
            .filter_map(|r| r.ok())
            .filter(|(_, cookie)| !found.contains(cookie))
            .count();
        if unread > 0 {
            log::warn!(
                "{unread} tracked flows could not be read at the stop: their network namespace \
                 is held by no process and no /run/netns name, or they started just before the \
                 stop and closed during it; they have no final row"
            );
        }
    }

    /// The closed flows kept for userspace, once each. (Their entries are inserted whole.)
    fn unsent_flows(&self) -> Vec<(u64, FlowStats)> {
        once_per_key(
            self.unsent_ends
                .iter()
                .take(walk_cap(self.max_flows))
                .filter_map(|r| r.ok()),
        )
    }
}

/// Raises a flow's counters to those its open window opened with. Where sock_diag could not
/// read an open flow (its socket closed after the programs were detached, its namespace gone),
/// it keeps those of its last RTT sample, which can be older than its window's opening (a
/// retransmit or a later window's first update): its last window would then close below where
/// it opened and its windows add up to more than its row.
fn at_least_the_open_window(flow: &mut FlowStats) {
    let opened = flow.flow_window.opened;
    if flow.flow_window.start_ns == 0 {
        return;
    }
    flow.bytes_acked = flow.bytes_acked.max(opened.bytes_acked);
    flow.bytes_received = flow.bytes_received.max(opened.bytes_received);
    flow.total_retrans = flow.total_retrans.max(opened.total_retrans);
}

impl KernelTables for KernelMaps {
    fn closed_unsent_flows(&self) -> Vec<(u64, FlowStats)> {
        self.unsent_flows()
    }

    fn flow_count(&self) -> usize {
        let tracked = once_per_key(
            self.tracked
                .keys()
                .take(walk_cap(self.max_flows))
                .filter_map(|r| r.ok())
                .map(|k| (k, ())),
        );
        tracked.len() + self.unsent_flows().len()
    }

    fn remove_flow(&mut self, cookie: u64) {
        let _ = self.unsent_ends.remove(&cookie);
    }

    fn hold_open_flows(&mut self) {
        if let Some(reader) = &self.open_flows {
            let namespaces = crate::sources::tcp::adopt::namespaces(self.netns.as_deref());
            self.held_open = Some(reader.read(&namespaces));
        }
    }

    fn flows_now(&self) -> Vec<FlowStats> {
        let namespaces = crate::sources::tcp::adopt::namespaces(self.netns.as_deref());
        let Some(reader) = &self.open_flows else {
            return self.unsent_flows().into_iter().map(|(_, s)| s).collect();
        };
        let held = self.held_open.iter().flatten().copied();
        let read = reader.read(&namespaces);
        // One row per flow, the latest read of it: a closed flow kept for the sweep, else the
        // flow as read now, else as held before the detach (its socket freed since). Each
        // once: a walk can meet a socket twice.
        let all = held
            .chain(read)
            .chain(self.unsent_flows().into_iter().map(|(_, s)| s));
        let mut flows: Vec<FlowStats> = once_per_key(all.map(|f| (f.cookie, f)))
            .into_iter()
            .map(|(_, f)| f)
            .collect();
        if self.held_open.is_some() {
            self.say_unread(&flows);
        }
        if let Err(e) =
            crate::sources::tcp::final_counters::refresh_open_flows(&mut flows, &namespaces)
        {
            log::warn!("open flows keep their last sampled counters: {e:#}");
        }
        for flow in &mut flows {
            at_least_the_open_window(flow);
        }
        flows
    }

    fn qp_traffic(&self) -> Vec<(QpKey, QpTraffic)> {
        once_per_key(
            self.qp_traffic
                .iter()
                .take(walk_cap(MAX_QPS))
                .filter_map(|r| r.ok()),
        )
    }

    fn counters(&self) -> Result<KernelCounters> {
        KernelCounters::read(&self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::once_per_key;

    #[test]
    fn an_open_flow_never_closes_its_window_below_where_it_opened() {
        use scaletrace_common::{FlowStats, FlowWindow, WindowCounters};
        let mut flow = FlowStats {
            bytes_acked: 1_000, // its last sample's
            total_retrans: 1,
            flow_window: FlowWindow {
                start_ns: 5,
                opened: WindowCounters {
                    bytes_acked: 4_000, // a later window's first update
                    total_retrans: 3,
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        };
        super::at_least_the_open_window(&mut flow);
        assert_eq!((flow.bytes_acked, flow.total_retrans), (4_000, 3));
        // fresher counters (from sock_diag) are kept
        flow.bytes_acked = 9_000;
        super::at_least_the_open_window(&mut flow);
        assert_eq!(flow.bytes_acked, 9_000);
    }

    #[test]
    fn a_walk_that_started_over_keeps_each_key_once_with_its_latest_value() {
        // the kernel restarted the walk after key 2 was deleted: 1, 2 | 1, 3 (1 read again, newer)
        let walked = [(1u64, "a"), (2, "b"), (1, "a2"), (3, "c")];
        assert_eq!(
            once_per_key(walked.into_iter()),
            vec![(1, "a2"), (2, "b"), (3, "c")]
        );
    }
}
