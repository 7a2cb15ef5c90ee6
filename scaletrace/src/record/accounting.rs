//! Capture accounting: what the recorder read, kept and lost, over the run and in the open
//! interval, for the `capture` row each interval ends with (and the agent's health file). The
//! kernel's losses are the eBPF counters (`STAT_*`) read where the interval began and ended;
//! userspace's (records that did not decode, rows a full disk cost) are counted here.
use scaletrace_common::*;

use super::KernelCounters;
use crate::columns::*;
use crate::{clock::ClockOffset, hooks::Hooks, node::NodeIdentity};

table! {
    /// One row per capture run: what was attached and what was lost.
    pub struct CaptureRow in "capture" {
        description: "One row per `scaletrace record` run: node identity, hooks, event totals and every \
        kind of loss. `ring_drops = 0` means no event was lost between kernel and disk.",
        host: String => str_col("Node hostname."),
        boot_id: String => str_col("/proc/sys/kernel/random/boot_id: distinguishes reboots of one host."),
        kernel: String => str_col("Kernel release."),
        run_id: String => str_col("Identifier of the run, also in the file names."),
        start: i64 => ts_col("Capture start."),
        end: i64 => ts_col("Capture end."),
        hooks_attached: String => str_col("Comma-separated hooks that were attached."),
        hooks_missing: String => str_col("Comma-separated hooks that could not be attached, with the reason."),
        flows: u64 => u64_col("rows", "Rows written to `flows`."),
        rtt_samples: u64 => u64_col("rows", "Rows written to `rtt`."),
        retransmits: u64 => u64_col("rows", "Rows written to `retransmits`."),
        state_changes: u64 => u64_col("rows", "Rows written to `state_changes`."),
        nccl_calls: u64 => u64_col("rows", "Rows written to `nccl_calls`."),
        verbs_calls: u64 => u64_col("rows", "Rows written to `verbs_calls`."),
        ring_drops: u64 => u64_col("events", "Events lost because the ring buffer was full (sum of the `ring_drops_*` columns)."),
        ring_drops_flow_end: u64 => u64_col("events", "Flow-end records that did not fit; those flows were still recovered from the kernel's table of unsent flow ends (see `flow_ends_lost`)."),
        ring_drops_rtt: u64 => u64_col("events", "RTT samples lost."),
        ring_drops_retransmit: u64 => u64_col("events", "Retransmit events lost."),
        ring_drops_state: u64 => u64_col("events", "State changes lost."),
        ring_drops_flow_window: u64 => u64_col("events", "RTT histogram windows lost (`flow_windows`)."),
        ring_drops_nccl: u64 => u64_col("events", "NCCL calls lost."),
        ring_drops_verbs: u64 => u64_col("events", "Verbs calls lost."),
        ring_drops_verbs_completions: u64 => u64_col("events", "Sampled verbs completions lost (`verbs_completions`; `qp_traffic` still counts every one)."),
        rtt_samples_skipped_by_interval: u64 => u64_col("events", "RTT updates not sampled because of `--rtt-sample-interval` (by design, not loss)."),
        retransmits_over_rate: u64 => u64_col("events", "Retransmits not sent because of `--max-retransmit-rate` (still counted per flow)."),
        retransmits_not_sent: u64 => u64_col("events", "`tcp:tcp_retransmit_skb` hits for retransmit attempts the kernel did not send (its `err`, Linux 6.10+; typically the original still in the host's own queue behind a shaper): not recorded, since nothing went on the wire. Older kernels' tracepoint does not say whether it sent: there every hit is recorded, and this stays 0."),
        flows_filtered_out: u64 => u64_col("flows", "Connections that did not match the filters."),
        flows_untracked_map_full: u64 => u64_col("flows", "Matching connections not tracked because the kernel flow table was full (once each; `--max-flows` raises the limit)."),
        flows_untracked_no_memory: u64 => u64_col("flows", "Matching connections not tracked because the kernel had no memory for their state (in the socket's storage); like those of a full table, they get only their counters at close."),
        flow_ends_lost: u64 => u64_col("flows", "Flows that closed while the ring buffer was full and could not be kept in the kernel's table of unsent flow ends either (full, or out of memory): they have no `flows` row."),
        rows_lost_disk_full: u64 => u64_col("rows", "`agent`: rows dropped because the spool's disk was full (the open interval's files are dropped, the oldest completed files deleted, and recording goes on); includes rows of the previous interval whose files could not be finished."),
        qps_evicted: u64 => u64_col("QPs", "RDMA queue pairs whose data-path totals were evicted from the kernel's per-QP table (`--max-qps`) with their traffic; known at the end of the run, so written in its last interval only."),
        gpu_samples_dropped: u64 => u64_col("rows", "GPU samples (`gpu_samples` rows) the NVML thread dropped because the recorder had fallen thousands of `--gpu-interval` periods behind; it never waits on the writer."),
        decode_errors: u64 => u64_col("events", "Ring buffer records that could not be decoded."),
        clock_offset_ns: i64 => i64_col("ns", "UTC = kernel monotonic + this offset (see docs/schema.md, Time): the offset in use at the interval's end (a wall-clock step of 100 ms or more is followed within a second)."),
        clock_error_ns: i64 => i64_col("ns", "Bound on the conversion error: bracket half-width, plus drift of the offset until the end, plus the wall-clock steps followed in the interval (its rows before a step carry the old clock's time)."),
    }
}

/// Run totals, and where the open interval began.
#[derive(Debug)]
pub struct Accounting {
    /// Records read from the ring buffer.
    pub events: u64,
    /// Records that did not decode.
    pub decode_errors: u64,
    /// Rows dropped because the disk was full: rows of intervals whose files could not be
    /// written, and rows that arrived while no file could be opened.
    pub rows_lost_disk_full: u64,
    /// GPU samples the sampler thread dropped because the recorder had fallen behind (read
    /// from its counter as each interval closes).
    pub gpu_samples_dropped: u64,
    at_interval_start: Mark,
    /// Sum of the wall-clock steps followed in the open interval: its rows before a step were
    /// stamped by the wrong clock, by up to this much.
    clock_steps: i64,
}

/// The totals where an interval began.
#[derive(Debug)]
struct Mark {
    counters: KernelCounters,
    decode_errors: u64,
    rows_lost_disk_full: u64,
    gpu_samples_dropped: u64,
}

/// Rows each table of an interval received.
#[derive(Debug, Default, Clone, Copy)]
pub struct IntervalRows {
    pub flows: u64,
    pub rtt: u64,
    pub retransmits: u64,
    pub states: u64,
    pub nccl: u64,
    pub verbs: u64,
}

/// An interval as it ends, for its `capture` row.
pub struct IntervalEnd<'a> {
    pub node: &'a NodeIdentity,
    pub run_id: &'a str,
    pub start_utc: i64,
    pub end_utc: i64,
    pub hooks: &'a Hooks,
    pub rows: IntervalRows,
    /// The kernel's counters now.
    pub counters: &'a KernelCounters,
    pub qps_evicted: u64,
    /// The clock offset the interval's rows were converted with (the run's first, or the one
    /// adopted after a step), and the offset measured now.
    pub clock_in_use: ClockOffset,
    pub clock_now: ClockOffset,
}

impl Accounting {
    pub fn new() -> Self {
        Accounting {
            events: 0,
            decode_errors: 0,
            rows_lost_disk_full: 0,
            gpu_samples_dropped: 0,
            at_interval_start: Mark {
                counters: KernelCounters::zero(),
                decode_errors: 0,
                rows_lost_disk_full: 0,
                gpu_samples_dropped: 0,
            },
            clock_steps: 0,
        }
    }

    /// A step of the wall clock (either way) followed in the open interval.
    pub fn clock_stepped(&mut self, step_ns: i64) {
        self.clock_steps += step_ns.abs();
    }

    /// The `capture` row of the interval that ends; the next interval counts from here. Rows
    /// lost later while this interval's files close count in the next row.
    pub fn close_interval(&mut self, end: IntervalEnd<'_>) -> CaptureRow {
        let k = end.counters.since(&self.at_interval_start.counters);
        let drift = (end.clock_now.offset_ns - end.clock_in_use.offset_ns).abs();
        let row = CaptureRow {
            host: end.node.hostname.clone(),
            boot_id: end.node.boot_id.clone(),
            kernel: end.node.kernel.clone(),
            run_id: end.run_id.into(),
            start: end.start_utc,
            end: end.end_utc,
            hooks_attached: end.hooks.attached_list(),
            hooks_missing: end.hooks.missing_list(),
            flows: end.rows.flows,
            rtt_samples: end.rows.rtt,
            retransmits: end.rows.retransmits,
            state_changes: end.rows.states,
            nccl_calls: end.rows.nccl,
            verbs_calls: end.rows.verbs,
            ring_drops_nccl: k.get(STAT_RING_FULL + EVENT_NCCL_CALL),
            ring_drops_verbs: k.get(STAT_RING_FULL + EVENT_VERBS_CALL),
            ring_drops_verbs_completions: k.get(STAT_RING_FULL + EVENT_VERBS_COMPLETION),
            ring_drops: k.ring_drops(),
            ring_drops_flow_end: k.get(STAT_RING_FULL + EVENT_FLOW_END),
            ring_drops_rtt: k.get(STAT_RING_FULL + EVENT_RTT_SAMPLE),
            ring_drops_retransmit: k.get(STAT_RING_FULL + EVENT_RETRANSMIT),
            ring_drops_state: k.get(STAT_RING_FULL + EVENT_STATE_CHANGE),
            ring_drops_flow_window: k.get(STAT_RING_FULL + EVENT_FLOW_WINDOW),
            rtt_samples_skipped_by_interval: k.get(STAT_RATE_LIMITED + EVENT_RTT_SAMPLE),
            retransmits_over_rate: k.get(STAT_RATE_LIMITED + EVENT_RETRANSMIT),
            retransmits_not_sent: k.get(STAT_RETRANSMITS_NOT_SENT),
            flows_filtered_out: k.get(STAT_FILTERED_FLOWS),
            flows_untracked_map_full: k.untracked_flows(),
            flows_untracked_no_memory: k.get(STAT_FLOW_NO_MEMORY),
            flow_ends_lost: k.get(STAT_FLOW_ENDS_LOST),
            rows_lost_disk_full: self.rows_lost_disk_full
                - self.at_interval_start.rows_lost_disk_full,
            qps_evicted: end.qps_evicted,
            gpu_samples_dropped: self.gpu_samples_dropped
                - self.at_interval_start.gpu_samples_dropped,
            decode_errors: self.decode_errors - self.at_interval_start.decode_errors,
            clock_offset_ns: end.clock_in_use.offset_ns,
            clock_error_ns: end.clock_in_use.error_ns + drift + self.clock_steps,
        };
        self.at_interval_start = Mark {
            counters: end.counters.clone(),
            decode_errors: self.decode_errors,
            rows_lost_disk_full: self.rows_lost_disk_full,
            gpu_samples_dropped: self.gpu_samples_dropped,
        };
        self.clock_steps = 0;
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(ring_full_rtt: u64, filtered: u64) -> KernelCounters {
        let mut slots = vec![0; STAT_SLOTS as usize];
        slots[(STAT_RING_FULL + EVENT_RTT_SAMPLE) as usize] = ring_full_rtt;
        slots[STAT_FILTERED_FLOWS as usize] = filtered;
        KernelCounters::from_slots(slots)
    }

    fn end<'a>(
        node: &'a NodeIdentity,
        hooks: &'a Hooks,
        counters: &'a KernelCounters,
    ) -> IntervalEnd<'a> {
        IntervalEnd {
            node,
            run_id: "run",
            start_utc: 0,
            end_utc: 1,
            hooks,
            rows: IntervalRows::default(),
            counters,
            qps_evicted: 0,
            clock_in_use: ClockOffset {
                offset_ns: 1_000,
                error_ns: 5,
            },
            clock_now: ClockOffset {
                offset_ns: 1_300,
                error_ns: 5,
            },
        }
    }

    #[test]
    fn ring_drops_is_the_sum_of_the_per_kind_columns() {
        // a different count for each kind: a kind without its column (verbs completions had
        // none) leaves the sum short
        let mut slots = vec![0; STAT_SLOTS as usize];
        for kind in 1..EVENT_KINDS {
            slots[(STAT_RING_FULL + kind) as usize] = 1 << kind;
        }
        let counters = KernelCounters::from_slots(slots);
        let node = NodeIdentity {
            hostname: "n".into(),
            boot_id: "b".into(),
            kernel: "k".into(),
        };
        let hooks = Hooks::default();
        let row = Accounting::new().close_interval(end(&node, &hooks, &counters));
        let per_kind = row.ring_drops_flow_end
            + row.ring_drops_rtt
            + row.ring_drops_flow_window
            + row.ring_drops_retransmit
            + row.ring_drops_state
            + row.ring_drops_nccl
            + row.ring_drops_verbs
            + row.ring_drops_verbs_completions;
        assert_eq!(row.ring_drops, (1 << EVENT_KINDS) - 2);
        assert_eq!(per_kind, row.ring_drops);
    }

    #[test]
    fn each_interval_counts_only_its_own_losses() {
        let node = NodeIdentity {
            hostname: "n".into(),
            boot_id: "b".into(),
            kernel: "k".into(),
        };
        let hooks = Hooks::default();
        let mut a = Accounting::new();
        a.decode_errors = 2;
        a.rows_lost_disk_full = 10;
        a.gpu_samples_dropped = 5; // the sampler's counter, a run total
        a.clock_stepped(-200_000_000);
        let first = a.close_interval(end(&node, &hooks, &counters(7, 3)));
        assert_eq!(
            (
                first.ring_drops,
                first.ring_drops_rtt,
                first.flows_filtered_out
            ),
            (7, 7, 3)
        );
        assert_eq!((first.decode_errors, first.rows_lost_disk_full), (2, 10));
        assert_eq!(first.gpu_samples_dropped, 5);
        // the offset in use, its error, the drift since (300 ns) and the step followed
        assert_eq!(first.clock_offset_ns, 1_000);
        assert_eq!(first.clock_error_ns, 5 + 300 + 200_000_000);

        a.decode_errors += 1;
        a.rows_lost_disk_full += 4; // a file of the first interval failed to close
        a.gpu_samples_dropped = 8;
        let second = a.close_interval(end(&node, &hooks, &counters(9, 3)));
        assert_eq!((second.ring_drops, second.flows_filtered_out), (2, 0));
        assert_eq!((second.decode_errors, second.rows_lost_disk_full), (1, 4));
        assert_eq!(second.gpu_samples_dropped, 3);
        assert_eq!(
            second.clock_error_ns,
            5 + 300,
            "a step counts in its own interval only"
        );
        // run totals stay whole for the health file
        assert_eq!((a.decode_errors, a.rows_lost_disk_full), (3, 14));
    }
}
