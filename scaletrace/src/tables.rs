//! The Parquet tables written by `scaletrace record`. `docs/schema.md` is generated from here
//! (`scaletrace schema`), and a test keeps the committed file in sync.
use crate::columns::*;

/// One TCP connection seen by the sock_ops flow table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowRow {
    pub host: String,
    pub flow_id: u64,
    pub netns_cookie: u64,
    pub netns: Option<String>,
    pub family: &'static str,
    pub local_addr: String,
    pub local_port: u16,
    pub remote_addr: String,
    pub remote_port: u16,
    pub direction: &'static str,
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub start: i64,
    pub end: Option<i64>,
    pub duration_ns: i64,
    pub open_at_end: bool,
    pub tracked: bool,
    pub adopted: bool,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub data_segs_out: u32,
    pub data_segs_in: u32,
    pub total_retrans: u32,
    pub retransmit_events: u32,
    pub rto_count: u32,
    pub rto_recovery_ns: u64,
    pub loss_recovery_ns: u64,
    pub rtt_updates: u32,
    pub srtt_min_us: Option<u32>,
    pub srtt_mean_us: Option<f64>,
    pub srtt_max_us: Option<u32>,
    pub srtt_last_us: Option<u32>,
    pub min_rtt_us: Option<u32>,
}

impl Table for FlowRow {
    const NAME: &'static str = "flows";
    const DESCRIPTION: &'static str =
        "One row per TCP connection that passed the filters: written when it closes, or \
        at the end of the capture (`open_at_end = true`) with its counters at that moment. \
        Counters are the kernel's own per-socket counters, read in the kernel at each RTT \
        update and at close.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            u64_col("flow_id", "", "Kernel socket cookie: unique per socket until reboot; joins to `rtt`, `retransmits`, `state_changes`.", |r| r.flow_id),
            u64_col("netns_cookie", "", "Network namespace cookie of the socket.", |r| r.netns_cookie),
            opt_str_col("netns", "Name of the socket's network namespace under /run/netns (`ip netns`, CNI's `cni-…` for Kubernetes pods); null for the recorder's own namespace and for one without a name there.", |r| r.netns.as_deref()),
            str_col("family", "`ipv4` or `ipv6` (IPv4-mapped IPv6 peers are shown as IPv4).", |r| r.family),
            str_col("local_addr", "Local IP address, text form.", |r| &r.local_addr),
            u16_col("local_port", "", "Local TCP port.", |r| r.local_port),
            str_col("remote_addr", "Peer IP address, text form.", |r| &r.remote_addr),
            u16_col("remote_port", "", "Peer TCP port.", |r| r.remote_port),
            str_col("direction", "`active` (this side connected), `passive` (accepted), or `unknown` (a connection seen only at its close, `tracked = false`, or adopted).", |r| r.direction),
            opt_u32_col("pid", "", "Process (tgid) that closed the socket, from `sock:inet_sock_set_state` in process context; null if not seen.", |r| r.pid),
            opt_str_col("comm", "Command name of that process.", |r| r.comm.as_deref()),
            ts_col("start", "connect() for active flows, establishment for passive ones.", |r| r.start),
            opt_ts_col("end", "Transition to CLOSE; null when still open at the end of the capture.", |r| r.end),
            i64_col("duration_ns", "ns", "`end - start`, or capture end - start for open flows.", |r| r.duration_ns),
            bool_col("open_at_end", "The flow was still open when the capture stopped.", |r| r.open_at_end),
            bool_col("tracked", "false: the kernel flow table was full when the connection started (`capture.flows_untracked_map_full`); only its counters at close are known, so `start` is its close time, `duration_ns` 0 and it has no RTT samples.", |r| r.tracked),
            bool_col("adopted", "The connection was open before this run started (an agent started, restarted or upgraded under a running job): `start` is when this run adopted it (its first ACK in this run), the counters are the socket's totals since it opened, direction is `unknown`.", |r| r.adopted),
            u64_col("bytes_sent", "bytes", "Bytes acknowledged by the peer (tcp_sock.bytes_acked).", |r| r.bytes_sent),
            u64_col("bytes_received", "bytes", "Bytes received in order (tcp_sock.bytes_received).", |r| r.bytes_received),
            u32_col("segs_out", "segments", "Segments sent, including retransmits.", |r| r.segs_out),
            u32_col("segs_in", "segments", "Segments received.", |r| r.segs_in),
            u32_col("data_segs_out", "segments", "Segments with payload sent.", |r| r.data_segs_out),
            u32_col("data_segs_in", "segments", "Segments with payload received.", |r| r.data_segs_in),
            u32_col("total_retrans", "segments", "Retransmitted segments (tcp_sock.total_retrans).", |r| r.total_retrans),
            u32_col("retransmit_events", "count", "Retransmit callbacks (BPF_SOCK_OPS_RETRANS_CB), counted in the kernel.", |r| r.retransmit_events),
            u32_col("rto_count", "count", "Retransmit timeouts (BPF_SOCK_OPS_RTO_CB): losses recovered only after the retransmission timer fired (at least 200 ms on Linux), not by fast retransmit.", |r| r.rto_count),
            u64_col("rto_recovery_ns", "ns", "Time from the first timeout of each stall to the next ACK of new data (an RTT sample), summed; the wait for the timer itself comes before it. A stall still open at the end counts up to the flow's end.", |r| r.rto_recovery_ns),
            u64_col("loss_recovery_ns", "ns", "Time in loss recovery, fast retransmits and timeouts alike: from the first retransmit or retransmit timeout of each recovery (a timeout whose retransmission the kernel defers starts it too) to the first ACK of new data that leaves no retransmitted segment outstanding, summed (the time to detect the loss comes before it). A recovery still open at the end counts up to the flow's end.", |r| r.loss_recovery_ns),
            u32_col("rtt_updates", "count", "RTT updates seen (one per ACK that produced an RTT sample).", |r| r.rtt_updates),
            opt_u32_col("srtt_min_us", "µs", "Smallest smoothed RTT over the flow.", |r| r.srtt_min_us),
            opt_f64_col("srtt_mean_us", "µs", "Mean smoothed RTT over all RTT updates.", |r| r.srtt_mean_us),
            opt_u32_col("srtt_max_us", "µs", "Largest smoothed RTT.", |r| r.srtt_max_us),
            opt_u32_col("srtt_last_us", "µs", "Smoothed RTT at the last update.", |r| r.srtt_last_us),
            opt_u32_col("min_rtt_us", "µs", "Kernel windowed minimum RTT (tcp_min_rtt), the path's base latency.", |r| r.min_rtt_us),
        ]
    }
}

/// One open flow's counters at an agent rotation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowSnapshotRow {
    pub host: String,
    pub ts: i64,
    pub flow_id: u64,
    pub local_addr: String,
    pub local_port: u16,
    pub remote_addr: String,
    pub remote_port: u16,
    pub direction: &'static str,
    pub start: i64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub total_retrans: u32,
    pub rto_count: u32,
    pub bytes_sent_delta: u64,
    pub bytes_received_delta: u64,
    pub retrans_delta: u32,
    pub srtt_last_us: Option<u32>,
    pub min_rtt_us: Option<u32>,
}

impl Table for FlowSnapshotRow {
    const NAME: &'static str = "flow_snapshots";
    const DESCRIPTION: &'static str =
        "`agent` only: one row per flow still open at each rotation, with its counters so far \
        and what changed since the previous rotation (or since the flow started, in its first \
        row). A training job's connections live for days and reach `flows` only when they close \
        or the agent stops; these rows put their traffic in the store while they run. The flow's \
        final row in `flows` carries its totals: do not add snapshots to it.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "When the counters were read (the rotation).", |r| {
                r.ts
            }),
            u64_col(
                "flow_id",
                "",
                "Kernel socket cookie; joins to `flows`, `rtt`, `retransmits`.",
                |r| r.flow_id,
            ),
            str_col("local_addr", "Local IP address, text form.", |r| {
                &r.local_addr
            }),
            u16_col("local_port", "", "Local TCP port.", |r| r.local_port),
            str_col("remote_addr", "Peer IP address, text form.", |r| {
                &r.remote_addr
            }),
            u16_col("remote_port", "", "Peer TCP port.", |r| r.remote_port),
            str_col("direction", "`active` or `passive`, as in `flows`.", |r| {
                r.direction
            }),
            ts_col("start", "When the flow started, as in `flows`.", |r| {
                r.start
            }),
            u64_col(
                "bytes_sent",
                "bytes",
                "Bytes acknowledged by the peer so far.",
                |r| r.bytes_sent,
            ),
            u64_col(
                "bytes_received",
                "bytes",
                "Bytes received in order so far.",
                |r| r.bytes_received,
            ),
            u32_col(
                "total_retrans",
                "segments",
                "Retransmitted segments so far.",
                |r| r.total_retrans,
            ),
            u32_col("rto_count", "count", "Retransmit timeouts so far.", |r| {
                r.rto_count
            }),
            u64_col(
                "bytes_sent_delta",
                "bytes",
                "`bytes_sent` since the flow's previous snapshot (since its start in its first).",
                |r| r.bytes_sent_delta,
            ),
            u64_col(
                "bytes_received_delta",
                "bytes",
                "`bytes_received` since the previous snapshot.",
                |r| r.bytes_received_delta,
            ),
            u32_col(
                "retrans_delta",
                "segments",
                "`total_retrans` since the previous snapshot.",
                |r| r.retrans_delta,
            ),
            opt_u32_col(
                "srtt_last_us",
                "µs",
                "Smoothed RTT at the flow's last RTT update.",
                |r| r.srtt_last_us,
            ),
            opt_u32_col("min_rtt_us", "µs", "Kernel windowed minimum RTT.", |r| {
                r.min_rtt_us
            }),
        ]
    }
}

/// One RDMA queue pair's data-path counters at an agent rotation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QpSnapshotRow {
    pub host: String,
    pub ts: i64,
    pub pid: u32,
    pub qp_num: u32,
    pub wrs_posted: u64,
    pub bytes_posted: u64,
    pub completions: u64,
    pub completion_errors: u64,
    pub wrs_posted_delta: u64,
    pub bytes_posted_delta: u64,
    pub completions_delta: u64,
    pub completion_errors_delta: u64,
}

impl Table for QpSnapshotRow {
    const NAME: &'static str = "qp_snapshots";
    const DESCRIPTION: &'static str =
        "`agent` only: one row per RDMA queue pair in the kernel's per-QP table at each rotation, \
        with its data-path counters so far and what changed since the previous rotation (since \
        the QP's first post, in its first row). `qp_traffic` carries the totals at the end of the \
        run; these rows put a long-lived QP's traffic in the store while it runs.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "When the counters were read (the rotation).", |r| r.ts),
            u32_col("pid", "", "Process (tgid) that posted on the QP; with `qp_num` joins to `qp_traffic` and `qps`.", |r| r.pid),
            u32_col("qp_num", "", "Queue pair number.", |r| r.qp_num),
            u64_col("wrs_posted", "count", "Work requests posted so far.", |r| r.wrs_posted),
            u64_col("bytes_posted", "bytes", "Bytes in the posted requests' scatter/gather lists so far.", |r| r.bytes_posted),
            u64_col("completions", "count", "Completions polled so far.", |r| r.completions),
            u64_col("completion_errors", "count", "Completions with an error status so far.", |r| r.completion_errors),
            u64_col("wrs_posted_delta", "count", "`wrs_posted` since the previous snapshot.", |r| r.wrs_posted_delta),
            u64_col("bytes_posted_delta", "bytes", "`bytes_posted` since the previous snapshot.", |r| r.bytes_posted_delta),
            u64_col("completions_delta", "count", "`completions` since the previous snapshot.", |r| r.completions_delta),
            u64_col("completion_errors_delta", "count", "`completion_errors` since the previous snapshot.", |r| r.completion_errors_delta),
        ]
    }
}

/// A sampled RTT/congestion-state snapshot of one flow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RttRow {
    pub host: String,
    pub ts: i64,
    pub flow_id: u64,
    pub srtt_us: u32,
    pub min_rtt_us: u32,
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
    pub packets_out: u32,
    pub retrans_out: u32,
    pub lost_out: u32,
    pub sacked_out: u32,
    pub packets_in_flight: u32,
    pub total_retrans: u32,
    pub mss: u32,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub delivery_rate_bps: Option<f64>,
}

impl Table for RttRow {
    const NAME: &'static str = "rtt";
    const DESCRIPTION: &'static str =
        "Per-flow latency samples from the sock_ops RTT callback, at most one per flow \
        per `--rtt-sample-interval` (every update still feeds the `flows` aggregates).";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "Time of the RTT update.", |r| r.ts),
            u64_col("flow_id", "", "Joins to `flows.flow_id`.", |r| r.flow_id),
            u32_col("srtt_us", "µs", "Smoothed RTT (RFC 6298 SRTT) after this update.", |r| r.srtt_us),
            u32_col("min_rtt_us", "µs", "Windowed minimum RTT; `srtt_us - min_rtt_us` estimates queueing delay.", |r| r.min_rtt_us),
            u32_col("snd_cwnd", "segments", "Congestion window.", |r| r.snd_cwnd),
            u32_col("snd_ssthresh", "segments", "Slow-start threshold.", |r| r.snd_ssthresh),
            u32_col("packets_out", "segments", "Segments sent and not yet acknowledged.", |r| r.packets_out),
            u32_col("retrans_out", "segments", "Retransmitted segments in flight.", |r| r.retrans_out),
            u32_col("lost_out", "segments", "Segments marked lost.", |r| r.lost_out),
            u32_col("sacked_out", "segments", "Segments selectively acknowledged.", |r| r.sacked_out),
            u32_col("packets_in_flight", "segments", "packets_out - (sacked_out + lost_out) + retrans_out, as tcp_packets_in_flight().", |r| r.packets_in_flight),
            u32_col("total_retrans", "segments", "Cumulative retransmitted segments of the flow.", |r| r.total_retrans),
            u32_col("mss", "bytes", "Current MSS.", |r| r.mss),
            u64_col("bytes_acked", "bytes", "Cumulative bytes acknowledged (sent side).", |r| r.bytes_acked),
            u64_col("bytes_received", "bytes", "Cumulative bytes received.", |r| r.bytes_received),
            opt_f64_col("delivery_rate_bps", "bit/s", "Kernel delivery-rate estimate (rate_delivered × mss / rate_interval); null before the first estimate.", |r| r.delivery_rate_bps),
        ]
    }
}

/// One retransmitted segment (or SYN-ACK).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RetransmitRow {
    pub host: String,
    pub ts: i64,
    pub flow_id: Option<u64>,
    pub kind: &'static str,
    pub family: &'static str,
    pub local_addr: String,
    pub local_port: u16,
    pub remote_addr: String,
    pub remote_port: u16,
    pub state: &'static str,
}

impl Table for RetransmitRow {
    const NAME: &'static str = "retransmits";
    const DESCRIPTION: &'static str = "One row per `tcp:tcp_retransmit_skb` (tracked flows) or \
        `tcp:tcp_retransmit_synack` (port/CIDR filters only) hit, under the \
        `--max-retransmit-rate` token bucket; events over the rate are counted in `capture`.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "Time of the retransmit.", |r| r.ts),
            opt_u64_col("flow_id", "", "Joins to `flows.flow_id`; null for SYN-ACKs and flows not tracked.", |r| r.flow_id),
            str_col("kind", "`retransmit` or `synack`.", |r| r.kind),
            str_col("family", "`ipv4` or `ipv6`.", |r| r.family),
            str_col("local_addr", "Local IP address.", |r| &r.local_addr),
            u16_col("local_port", "", "Local TCP port.", |r| r.local_port),
            str_col("remote_addr", "Peer IP address.", |r| &r.remote_addr),
            u16_col("remote_port", "", "Peer TCP port.", |r| r.remote_port),
            str_col("state", "TCP state of the socket (e.g. ESTABLISHED); UNKNOWN when the kernel does not report it.", |r| r.state),
        ]
    }
}

/// One TCP state transition of a tracked flow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StateChangeRow {
    pub host: String,
    pub ts: i64,
    pub flow_id: Option<u64>,
    pub local_addr: String,
    pub local_port: u16,
    pub remote_addr: String,
    pub remote_port: u16,
    pub old_state: &'static str,
    pub new_state: &'static str,
    pub pid: u32,
    pub comm: String,
}

impl Table for StateChangeRow {
    const NAME: &'static str = "state_changes";
    const DESCRIPTION: &'static str =
        "`sock:inet_sock_set_state` transitions of tracked flows, with the task that was \
        current. The task is meaningful for transitions made in process context (close(): \
        ESTABLISHED→FIN_WAIT1, CLOSE_WAIT→LAST_ACK); others run in softirq context and show \
        whatever task was interrupted.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "Time of the transition.", |r| r.ts),
            opt_u64_col("flow_id", "", "Joins to `flows.flow_id`.", |r| r.flow_id),
            str_col("local_addr", "Local IP address.", |r| &r.local_addr),
            u16_col("local_port", "", "Local TCP port.", |r| r.local_port),
            str_col("remote_addr", "Peer IP address.", |r| &r.remote_addr),
            u16_col("remote_port", "", "Peer TCP port.", |r| r.remote_port),
            str_col("old_state", "State before.", |r| r.old_state),
            str_col("new_state", "State after.", |r| r.new_state),
            u32_col("pid", "", "Current task's tgid.", |r| r.pid),
            str_col("comm", "Current task's command name.", |r| &r.comm),
        ]
    }
}

/// One row per capture run: what was attached and what was lost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CaptureRow {
    pub host: String,
    pub boot_id: String,
    pub kernel: String,
    pub run_id: String,
    pub start: i64,
    pub end: i64,
    pub hooks_attached: String,
    pub hooks_missing: String,
    pub flows: u64,
    pub rtt_samples: u64,
    pub retransmits: u64,
    pub state_changes: u64,
    pub nccl_calls: u64,
    pub verbs_calls: u64,
    pub ring_drops: u64,
    pub ring_drops_flow_end: u64,
    pub ring_drops_rtt: u64,
    pub ring_drops_retransmit: u64,
    pub ring_drops_state: u64,
    pub ring_drops_nccl: u64,
    pub ring_drops_verbs: u64,
    pub rtt_samples_skipped_by_interval: u64,
    pub retransmits_over_rate: u64,
    pub flows_filtered_out: u64,
    pub flows_untracked_map_full: u64,
    pub rows_lost_disk_full: u64,
    pub qps_evicted: u64,
    pub decode_errors: u64,
    pub clock_offset_ns: i64,
    pub clock_error_ns: i64,
}

impl Table for CaptureRow {
    const NAME: &'static str = "capture";
    const DESCRIPTION: &'static str =
        "One row per `scaletrace record` run: node identity, hooks, event totals and every \
        kind of loss. `ring_drops = 0` means no event was lost between kernel and disk.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            str_col("boot_id", "/proc/sys/kernel/random/boot_id: distinguishes reboots of one host.", |r| &r.boot_id),
            str_col("kernel", "Kernel release.", |r| &r.kernel),
            str_col("run_id", "Identifier of the run, also in the file names.", |r| &r.run_id),
            ts_col("start", "Capture start.", |r| r.start),
            ts_col("end", "Capture end.", |r| r.end),
            str_col("hooks_attached", "Comma-separated hooks that were attached.", |r| &r.hooks_attached),
            str_col("hooks_missing", "Comma-separated hooks that could not be attached, with the reason.", |r| &r.hooks_missing),
            u64_col("flows", "rows", "Rows written to `flows`.", |r| r.flows),
            u64_col("rtt_samples", "rows", "Rows written to `rtt`.", |r| r.rtt_samples),
            u64_col("retransmits", "rows", "Rows written to `retransmits`.", |r| r.retransmits),
            u64_col("state_changes", "rows", "Rows written to `state_changes`.", |r| r.state_changes),
            u64_col("nccl_calls", "rows", "Rows written to `nccl_calls`.", |r| r.nccl_calls),
            u64_col("verbs_calls", "rows", "Rows written to `verbs_calls`.", |r| r.verbs_calls),
            u64_col("ring_drops", "events", "Events lost because the ring buffer was full (sum of the `ring_drops_*` columns).", |r| r.ring_drops),
            u64_col("ring_drops_flow_end", "events", "Flow-end records that did not fit; those flows were still recovered from the kernel flow table.", |r| r.ring_drops_flow_end),
            u64_col("ring_drops_rtt", "events", "RTT samples lost.", |r| r.ring_drops_rtt),
            u64_col("ring_drops_retransmit", "events", "Retransmit events lost.", |r| r.ring_drops_retransmit),
            u64_col("ring_drops_state", "events", "State changes lost.", |r| r.ring_drops_state),
            u64_col("ring_drops_nccl", "events", "NCCL calls lost.", |r| r.ring_drops_nccl),
            u64_col("ring_drops_verbs", "events", "Verbs calls lost.", |r| r.ring_drops_verbs),
            u64_col("rtt_samples_skipped_by_interval", "events", "RTT updates not sampled because of `--rtt-sample-interval` (by design, not loss).", |r| r.rtt_samples_skipped_by_interval),
            u64_col("retransmits_over_rate", "events", "Retransmits not sent because of `--max-retransmit-rate` (still counted per flow).", |r| r.retransmits_over_rate),
            u64_col("flows_filtered_out", "flows", "Connections that did not match the filters.", |r| r.flows_filtered_out),
            u64_col("flows_untracked_map_full", "flows", "Matching connections not tracked because the kernel flow table was full (once each; `--max-flows` raises the limit).", |r| r.flows_untracked_map_full),
            u64_col("rows_lost_disk_full", "rows", "`agent`: rows dropped because the spool's disk was full (the open interval's files are dropped, the oldest completed files deleted, and recording goes on); includes rows of the previous interval whose files could not be finished.", |r| r.rows_lost_disk_full),
            u64_col("qps_evicted", "QPs", "RDMA queue pairs whose data-path totals were evicted from the kernel's per-QP table (`--max-qps`) with their traffic; known at the end of the run, so written in its last interval only.", |r| r.qps_evicted),
            u64_col("decode_errors", "events", "Ring buffer records that could not be decoded.", |r| r.decode_errors),
            i64_col("clock_offset_ns", "ns", "UTC = kernel monotonic + this offset (see docs/schema.md, Time): the offset in use at the interval's end (a wall-clock step of 100 ms or more is followed within a second).", |r| r.clock_offset_ns),
            i64_col("clock_error_ns", "ns", "Bound on the conversion error: bracket half-width, plus drift of the offset until the end, plus the wall-clock steps followed in the interval (its rows before a step carry the old clock's time).", |r| r.clock_error_ns),
        ]
    }
}

/// One complete ("X") event of an imported GPU/collective timeline.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuEventRow {
    pub host: String,
    pub rank: Option<i64>,
    pub ts: i64,
    pub dur_ns: i64,
    pub category: String,
    pub name: String,
    pub on_gpu: bool,
    pub collective: Option<String>,
    pub device: Option<i64>,
    pub stream: Option<i64>,
    pub pid: Option<i64>,
    pub tid: Option<i64>,
    pub correlation: Option<i64>,
    pub source: String,
    pub time_aligned: bool,
    pub comm_source: Option<String>,
    pub process_group: Option<String>,
    pub group_size: Option<i64>,
    pub seq: Option<i64>,
    pub msg_bytes: Option<i64>,
    pub dtype: Option<String>,
}

impl Table for GpuEventRow {
    const NAME: &'static str = "gpu_events";
    const DESCRIPTION: &'static str =
        "Events imported by `scaletrace import` from PyTorch profiler (Kineto) Chrome \
        traces: GPU kernels, memcpy/memset, CPU ops and the rest of the complete (`ph: X`) events, \
        on the same UTC time axis as the network tables.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Host the trace came from (`--host`, default: this host).", |r| &r.host),
            opt_i64_col("rank", "", "Distributed rank: `distributedInfo.rank` of the trace, or `--rank`.", |r| r.rank),
            ts_col("ts", "Event start: `baseTimeNanoseconds + ts` of the trace (see Time).", |r| r.ts),
            i64_col("dur_ns", "ns", "Event duration.", |r| r.dur_ns),
            str_col("category", "Kineto `cat`: `kernel`, `gpu_memcpy`, `gpu_memset`, `cpu_op`, `cuda_runtime`, ...", |r| &r.category),
            str_col("name", "Kernel or operator name.", |r| &r.name),
            bool_col("on_gpu", "The event ran on the GPU (kernel, memcpy, memset).", |r| r.on_gpu),
            opt_str_col("collective", "For communication events (see `comm_source`): the collective, `AllReduce`, `AllGather`, `ReduceScatter`, `AllToAll`, `Broadcast`, `Reduce`, `SendRecv`, `Send`, `Recv`, `Barrier`, `Gather`, `Scatter` or `Other`.", |r| r.collective.as_deref()),
            opt_i64_col("device", "", "GPU index (`args.device`).", |r| r.device),
            opt_i64_col("stream", "", "CUDA stream (`args.stream`).", |r| r.stream),
            opt_i64_col("pid", "", "Trace `pid` (process, or GPU for device rows).", |r| r.pid),
            opt_i64_col("tid", "", "Trace `tid` (thread, or stream for device rows).", |r| r.tid),
            opt_i64_col("correlation", "", "Correlation id linking a kernel to the CUDA runtime call that launched it.", |r| r.correlation),
            str_col("source", "File the event was imported from.", |r| &r.source),
            bool_col("time_aligned", "`ts` is UTC. False when the trace lost its time base (`baseTimeNanoseconds` missing, e.g. a trace cut short) and its timestamps are relative: `ts` is then on the trace's own axis; import again with `--time-base` to align.", |r| r.time_aligned),
            opt_str_col("comm_source", "How the event was recognised as communication (null: it is not): `nccl_kernel` (NCCL/RCCL kernels), `comm_kernel` (other GPU kernels of communication libraries — DeepEP dispatch/combine, NVSHMEM, MSCCL++, userbuffers, custom all-reduce — or kernels whose name spells a collective), `c10d` (the CPU-side `c10d::<op>_` call of any backend), `backend` (the backend's annotation: `gloo:all_reduce`, `nccl:all_reduce`; for gloo it spans the transfer), `param_comms` (`record_param_comms`).", |r| r.comm_source.as_deref()),
            opt_str_col("process_group", "`Process Group Name` (with its description, e.g. `0 (default_pg)`) where the trace carries it.", |r| r.process_group.as_deref()),
            opt_i64_col("group_size", "ranks", "`Group size` of the process group.", |r| r.group_size),
            opt_i64_col("seq", "", "The process group's sequence number of the collective (`Seq`, newer PyTorch): the key that matches one collective across ranks.", |r| r.seq),
            opt_i64_col("msg_bytes", "bytes", "Message size: `In msg nelems` × the size of `dtype` (for bus bandwidth).", |r| r.msg_bytes),
            opt_str_col("dtype", "Element type of the message (`Float`, `BFloat16`, ...).", |r| r.dtype.as_deref()),
        ]
    }
}

/// One time window of one host (and rank): timeline and network side by side.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowRow {
    pub window_start: i64,
    pub window_ns: i64,
    pub host: String,
    pub rank: Option<i64>,
    pub device: Option<String>,
    pub traced_ns: Option<i64>,
    pub busy_frac: Option<f64>,
    pub compute_frac: Option<f64>,
    pub comm_frac: Option<f64>,
    pub overlap_frac: Option<f64>,
    pub idle_frac: Option<f64>,
    pub collective_ops: Option<u64>,
    pub waiting_on_collectives: Option<bool>,
    pub net_bytes: Option<u64>,
    pub net_throughput_bps: Option<f64>,
    pub rtt_samples: Option<u64>,
    pub rtt_p50_us: Option<f64>,
    pub rtt_p99_us: Option<f64>,
    pub retransmits: Option<u64>,
}

impl Table for WindowRow {
    const NAME: &'static str = "windows";
    const DESCRIPTION: &'static str =
        "Written by `scaletrace merge` from the analysis view `st_window` (one definition for \
        `merge` and `analyze`): for each window and host, and each rank traced there, how the \
        rank's traced time was spent and the host's network in the same window. Timeline shares are \
        of the time the rank was traced in the window, not of the whole window; a window outside \
        every trace of a rank has no row for it (null timeline columns on the host's network-only row).";
    fn columns() -> Vec<Column<Self>> {
        vec![
            ts_col("window_start", "Window start (windows are aligned to multiples of the window length since the UNIX epoch).", |r| r.window_start),
            i64_col("window_ns", "ns", "Window length.", |r| r.window_ns),
            str_col("host", "Host.", |r| &r.host),
            opt_i64_col("rank", "", "Traced rank; null on the row of the host's network alone (windows where no rank of it was traced).", |r| r.rank),
            opt_str_col("device", "What the rank's timeline shows: `gpu` (it has GPU kernels) or `cpu` (CPU operators only, e.g. gloo jobs).", |r| r.device.as_deref()),
            opt_i64_col("traced_ns", "ns", "Time of the window covered by the rank's trace(s): the denominator of every share below.", |r| r.traced_ns),
            opt_f64_col("busy_frac", "fraction", "Share of the traced time with compute or communication running (union of intervals).", |r| r.busy_frac),
            opt_f64_col("compute_frac", "fraction", "Share with compute running: GPU kernels/memcpy/memset that are not communication; on `cpu` ranks, CPU operators that are not communication, waits or synchronizations.", |r| r.compute_frac),
            opt_f64_col("comm_frac", "fraction", "Share with a collective running, from the rank's communication layer (NCCL kernels, other communication kernels, backend annotations such as `gloo:all_reduce`, or `c10d::` calls — the first the trace has).", |r| r.comm_frac),
            opt_f64_col("overlap_frac", "fraction", "Share with compute and communication at once (communication hidden behind compute).", |r| r.overlap_frac),
            opt_f64_col("idle_frac", "fraction", "Share with neither.", |r| r.idle_frac),
            opt_u64_col("collective_ops", "count", "Collective operations starting in the window.", |r| r.collective_ops),
            opt_bool_col("waiting_on_collectives", "`comm_frac` ≥ `idle_collective_fraction` (0.5) and `compute_frac` ≤ `idle_compute_fraction` (0.25): the rank mostly waited on communication. The same rule as `analyze`'s GPU-idle diagnosis.", |r| r.waiting_on_collectives),
            opt_u64_col("net_bytes", "bytes", "Bytes acknowledged or received on the host's flows in the window (from successive `rtt` samples of each flow).", |r| r.net_bytes),
            opt_f64_col("net_throughput_bps", "bit/s", "`net_bytes` × 8 / window length.", |r| r.net_throughput_bps),
            opt_u64_col("rtt_samples", "count", "RTT samples of the host in the window.", |r| r.rtt_samples),
            opt_f64_col("rtt_p50_us", "µs", "Median smoothed RTT of those samples.", |r| r.rtt_p50_us),
            opt_f64_col("rtt_p99_us", "µs", "99th percentile smoothed RTT.", |r| r.rtt_p99_us),
            opt_u64_col("retransmits", "count", "Retransmitted segments (`retransmits` rows of kind `retransmit`) of the host in the window.", |r| r.retransmits),
        ]
    }
}

/// One GPU of the node, recorded once per run, with its nearest NIC.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuDeviceRow {
    pub host: String,
    pub run_id: String,
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    pub numa_node: Option<i64>,
    pub memory_total_bytes: Option<u64>,
    pub nearest_nic: Option<String>,
    pub nic_numa_node: Option<i64>,
    pub nic_locality: Option<String>,
}

impl Table for GpuDeviceRow {
    const NAME: &'static str = "gpu_devices";
    const DESCRIPTION: &'static str =
        "The node's GPUs (NVML), once per run, with the NIC nearest to each in the PCIe \
        tree: GPU-NIC locality is a classic cause of one slow rank.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            str_col("run_id", "Run of `scaletrace record`.", |r| &r.run_id),
            u32_col("index", "", "NVML device index.", |r| r.index),
            str_col("uuid", "GPU UUID.", |r| &r.uuid),
            str_col("name", "Product name.", |r| &r.name),
            str_col("pci_bus_id", "PCI bus id as NVML reports it.", |r| &r.pci_bus_id),
            opt_i64_col("numa_node", "", "NUMA node of the GPU (sysfs).", |r| r.numa_node),
            opt_u64_col("memory_total_bytes", "bytes", "GPU memory.", |r| r.memory_total_bytes),
            opt_str_col("nearest_nic", "Nearest network or RDMA device (sysfs class/net, class/infiniband).", |r| r.nearest_nic.as_deref()),
            opt_i64_col("nic_numa_node", "", "NUMA node of that NIC.", |r| r.nic_numa_node),
            opt_str_col("nic_locality", "`PIX` (common PCIe switch), `PHB` (same host bridge), `NODE` (same NUMA node), `SYS` (across NUMA nodes), as in `nvidia-smi topo -m`.", |r| r.nic_locality.as_deref()),
        ]
    }
}

/// One NVML sample of one GPU. Metrics the GPU does not support are null.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuSampleRow {
    pub host: String,
    pub ts: i64,
    pub index: u32,
    pub sm_util_pct: Option<u32>,
    pub mem_util_pct: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub power_mw: Option<u32>,
    pub temperature_c: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    pub pcie_tx_bytes_per_s: Option<u64>,
    pub pcie_rx_bytes_per_s: Option<u64>,
    pub throttle_reasons: Option<String>,
    pub nvlink_tx_bytes_per_s: Option<f64>,
    pub nvlink_rx_bytes_per_s: Option<f64>,
    pub nvlink_crc_errors: Option<u64>,
    pub nvlink_replay_errors: Option<u64>,
    pub nvlink_recovery_errors: Option<u64>,
}

impl Table for GpuSampleRow {
    const NAME: &'static str = "gpu_samples";
    const DESCRIPTION: &'static str =
        "NVML samples of every GPU at `--gpu-interval` (default 100 ms) during `record`.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "Sample time.", |r| r.ts),
            u32_col(
                "index",
                "",
                "NVML device index; joins to `gpu_devices.index`.",
                |r| r.index,
            ),
            opt_u32_col(
                "sm_util_pct",
                "%",
                "Share of the last sample period with a kernel running.",
                |r| r.sm_util_pct,
            ),
            opt_u32_col(
                "mem_util_pct",
                "%",
                "Share of the period with device memory being read or written.",
                |r| r.mem_util_pct,
            ),
            opt_u32_col("sm_clock_mhz", "MHz", "SM clock.", |r| r.sm_clock_mhz),
            opt_u32_col("mem_clock_mhz", "MHz", "Memory clock.", |r| r.mem_clock_mhz),
            opt_u32_col("power_mw", "mW", "Power draw.", |r| r.power_mw),
            opt_u32_col("temperature_c", "°C", "GPU temperature.", |r| {
                r.temperature_c
            }),
            opt_u64_col("memory_used_bytes", "bytes", "Device memory in use.", |r| {
                r.memory_used_bytes
            }),
            opt_u64_col(
                "pcie_tx_bytes_per_s",
                "bytes/s",
                "PCIe transmit throughput (NVML, 20 ms window).",
                |r| r.pcie_tx_bytes_per_s,
            ),
            opt_u64_col(
                "pcie_rx_bytes_per_s",
                "bytes/s",
                "PCIe receive throughput.",
                |r| r.pcie_rx_bytes_per_s,
            ),
            opt_str_col(
                "throttle_reasons",
                "Active clock throttle reasons, comma-separated; empty when none.",
                |r| r.throttle_reasons.as_deref(),
            ),
            opt_f64_col(
                "nvlink_tx_bytes_per_s",
                "bytes/s",
                "NVLink data transmitted over all links since the device's previous sample (NVML field 138); null without NVLink and in a device's first sample.",
                |r| r.nvlink_tx_bytes_per_s,
            ),
            opt_f64_col(
                "nvlink_rx_bytes_per_s",
                "bytes/s",
                "NVLink data received over all links since the previous sample (NVML field 139).",
                |r| r.nvlink_rx_bytes_per_s,
            ),
            opt_u64_col(
                "nvlink_crc_errors",
                "count",
                "NVLink CRC (flit) errors over all links since the driver loaded (NVML field 45): a count that rises is a bad link.",
                |r| r.nvlink_crc_errors,
            ),
            opt_u64_col(
                "nvlink_replay_errors",
                "count",
                "NVLink replays over all links since the driver loaded (NVML field 52).",
                |r| r.nvlink_replay_errors,
            ),
            opt_u64_col(
                "nvlink_recovery_errors",
                "count",
                "NVLink recoveries over all links since the driver loaded (NVML field 59).",
                |r| r.nvlink_recovery_errors,
            ),
        ]
    }
}

/// Per-process GPU utilization, keyed by pid so it joins to `flows.pid`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuProcessRow {
    pub host: String,
    pub ts: i64,
    pub index: u32,
    pub pid: u32,
    pub sm_util_pct: u32,
    pub mem_util_pct: u32,
}

impl Table for GpuProcessRow {
    const NAME: &'static str = "gpu_processes";
    const DESCRIPTION: &'static str = "Per-process utilization samples where NVML offers them (`nvmlDeviceGetProcessUtilization`).";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col(
                "ts",
                "Sample time (NVML's own timestamp of the sample).",
                |r| r.ts,
            ),
            u32_col("index", "", "NVML device index.", |r| r.index),
            u32_col("pid", "", "Process id; joins to `flows.pid`.", |r| r.pid),
            u32_col("sm_util_pct", "%", "SM utilization by this process.", |r| {
                r.sm_util_pct
            }),
            u32_col(
                "mem_util_pct",
                "%",
                "Memory utilization by this process.",
                |r| r.mem_util_pct,
            ),
        ]
    }
}

/// A NIC counter reading: first reading of each counter, then only when it changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NicCounterRow {
    pub host: String,
    pub ts: i64,
    pub source: &'static str,
    pub device: String,
    pub port: Option<u32>,
    pub counter: String,
    pub value: u64,
    pub delta: Option<u64>,
    pub rate_per_s: Option<f64>,
}

impl Table for NicCounterRow {
    const NAME: &'static str = "nic_counters";
    const DESCRIPTION: &'static str =
        "sysfs NIC counters sampled every `--nic-interval` during `record`: interface \
        statistics, InfiniBand/RoCE port counters and hardware counters (retransmits, \
        out-of-sequence, congestion notifications) that offloaded RDMA never shows the kernel. \
        A counter appears at its first reading and then only in samples where it changed.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "Sample time.", |r| r.ts),
            str_col("source", "`net` (class/net/DEV/statistics), `ib` (ports/N/counters) or `ib_hw` (ports/N/hw_counters).", |r| r.source),
            str_col("device", "Interface or RDMA device name.", |r| &r.device),
            opt_u32_col("port", "", "RDMA port; null for `net`.", |r| r.port),
            str_col("counter", "Counter file name, e.g. `tx_bytes`, `out_of_sequence`, `np_cnp_sent`.", |r| &r.counter),
            u64_col("value", "counter units", "Counter value.", |r| r.value),
            opt_u64_col("delta", "counter units", "Increase since the previous reported value; null at the first reading and after a counter reset.", |r| r.delta),
            opt_f64_col("rate_per_s", "units/s", "`delta` per second.", |r| r.rate_per_s),
        ]
    }
}

/// One counter of one RDMA queue pair at one sample, from RDMA netlink.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QpCounterRow {
    pub host: String,
    pub ts: i64,
    pub device: String,
    pub port: Option<u32>,
    pub netdev: Option<String>,
    pub qp_num: u32,
    pub qp_type: &'static str,
    pub state: Option<&'static str>,
    pub dest_qp_num: Option<u32>,
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub counter_id: Option<u32>,
    pub source: &'static str,
    pub counter: String,
    pub value: u64,
    pub delta: Option<u64>,
    pub rate_per_s: Option<f64>,
}

impl Table for QpCounterRow {
    const NAME: &'static str = "qp_counters";
    const DESCRIPTION: &'static str =
        "Every RDMA queue pair of the node, read from RDMA netlink (what `rdma resource show qp` \
        and `rdma statistic qp show` use) every `--nic-interval`, with no probe on the data path: \
        its send and receive packet sequence numbers, whose progress is the QP's packet count \
        (source `psn`), and the counters of the statistic counter it is bound to where the driver \
        binds QPs (source `bound`: mlx5 with `rdma statistic qp set link DEV/PORT auto type on`; \
        soft-RoCE has none, its counters are per port in `nic_counters`). Like `nic_counters`, a \
        counter appears at its first reading and then only in samples where it or the QP's state \
        changed. Joins to `qps`/`qp_traffic` by (host, pid, qp_num).";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "Sample time.", |r| r.ts),
            str_col("device", "RDMA device, e.g. `mlx5_0`, `rxe0`.", |r| &r.device),
            opt_u32_col("port", "", "Device port the QP is bound to; null before its first modify.", |r| r.port),
            opt_str_col("netdev", "Network device of that port (RoCE, iWARP); null for InfiniBand.", |r| r.netdev.as_deref()),
            u32_col("qp_num", "", "Local QP number.", |r| r.qp_num),
            str_col("qp_type", "`RC`, `UC`, `UD`, `GSI`, `SMI`, `RAW_PACKET`, `XRC_INI`, `XRC_TGT`.", |r| r.qp_type),
            opt_str_col("state", "QP state: `RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`.", |r| r.state),
            opt_u32_col("dest_qp_num", "", "Remote QP number (connected QPs).", |r| r.dest_qp_num),
            opt_u32_col("pid", "", "Process of a user QP (in the recorder's PID namespace); null for a kernel QP.", |r| r.pid),
            opt_str_col("comm", "Process name (`/proc/PID/comm`), or the kernel module of a kernel QP.", |r| r.comm.as_deref()),
            opt_u32_col("counter_id", "", "Statistic counter the QP is bound to (source `bound`); its values are shared by every QP bound to it.", |r| r.counter_id),
            str_col("source", "`psn` (packet sequence numbers) or `bound` (the bound statistic counter).", |r| r.source),
            str_col("counter", "`sq_psn` (next send PSN), `rq_psn` (next expected receive PSN, connected QPs), or the driver's counter name, e.g. `out_of_sequence`, `packet_seq_err`, `local_ack_timeout_err`.", |r| &r.counter),
            u64_col("value", "counter units", "Value (a PSN is 24 bits).", |r| r.value),
            opt_u64_col("delta", "counter units", "Increase since the QP's previous reported value: packets for a PSN (modulo 2^24). Null at the first reading, and when it went back (a QP reset, a PSN rewound by a retry at the reading).", |r| r.delta),
            opt_f64_col("rate_per_s", "units/s", "`delta` per second.", |r| r.rate_per_s),
        ]
    }
}

/// One NCCL API call seen by the uprobes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NcclCallRow {
    pub host: String,
    pub ts: i64,
    pub dur_ns: i64,
    pub pid: u32,
    pub tid: u32,
    pub op: &'static str,
    pub result: String,
    pub comm: u64,
    pub rank: Option<i64>,
    pub nranks: Option<i64>,
    pub count: Option<u64>,
    pub datatype: Option<String>,
    pub red_op: Option<String>,
    pub peer: Option<i64>,
    pub bytes: Option<u64>,
}

impl Table for NcclCallRow {
    const NAME: &'static str = "nccl_calls";
    const DESCRIPTION: &'static str = "Calls into libnccl's public API (uprobe at entry, uretprobe at return): a \
        per-rank timeline of collectives as the host issues them. NCCL calls are asynchronous: \
        `dur_ns` is the time to enqueue, not the collective itself (see `gpu_events` for kernels). \
        `rank`/`nranks` come from `ncclCommInitRank`; join other calls to it on `(host, pid, comm)`.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "Call entry.", |r| r.ts),
            i64_col("dur_ns", "ns", "Entry to return.", |r| r.dur_ns),
            u32_col("pid", "", "Calling process.", |r| r.pid),
            u32_col("tid", "", "Calling thread.", |r| r.tid),
            str_col("op", "`AllReduce`, `AllGather`, `ReduceScatter`, `Broadcast`, `Send`, `Recv`, `GroupStart`, `GroupEnd`, `CommInitRank`.", |r| r.op),
            str_col("result", "ncclResult_t name, e.g. `ncclSuccess`, `ncclInvalidArgument`.", |r| &r.result),
            u64_col("comm", "", "Communicator address (for CommInitRank: the one created, 0 on failure).", |r| r.comm),
            opt_i64_col("rank", "", "CommInitRank: this process's rank.", |r| r.rank),
            opt_i64_col("nranks", "", "CommInitRank: communicator size.", |r| r.nranks),
            opt_u64_col("count", "elements", "Element count (AllGather: send count; ReduceScatter: receive count).", |r| r.count),
            opt_str_col("datatype", "ncclDataType_t name, e.g. `ncclFloat32`.", |r| r.datatype.as_deref()),
            opt_str_col("red_op", "Reduction: `ncclSum`, `ncclProd`, `ncclMax`, `ncclMin`, `ncclAvg` (AllReduce, ReduceScatter).", |r| r.red_op.as_deref()),
            opt_i64_col("peer", "", "Send/Recv peer rank, or Broadcast root.", |r| r.peer),
            opt_u64_col("bytes", "bytes", "count × datatype size: this rank's buffer size for the call.", |r| r.bytes),
        ]
    }
}

/// One libibverbs control-path call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerbsCallRow {
    pub host: String,
    pub ts: i64,
    pub dur_ns: i64,
    pub pid: u32,
    pub tid: u32,
    pub op: &'static str,
    pub ok: bool,
    pub device: Option<String>,
    pub qp_num: Option<u32>,
    pub qp_type: Option<&'static str>,
    pub qp_state: Option<&'static str>,
    pub dest_qp_num: Option<u32>,
    pub dgid: Option<String>,
    pub attr_mask: Option<u32>,
    pub mr_length: Option<u64>,
    pub cqe: Option<u32>,
}

impl Table for VerbsCallRow {
    const NAME: &'static str = "verbs_calls";
    const DESCRIPTION: &'static str =
        "libibverbs control-path calls (uprobes): device open, PD/MR registration, CQ and \
        QP creation, `ibv_modify_qp` state transitions with the destination QPN and GID, destroy.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "Call entry.", |r| r.ts),
            i64_col("dur_ns", "ns", "Entry to return.", |r| r.dur_ns),
            u32_col("pid", "", "Calling process.", |r| r.pid),
            u32_col("tid", "", "Calling thread.", |r| r.tid),
            str_col("op", "`ibv_open_device`, `ibv_alloc_pd`, `ibv_reg_mr`, `ibv_reg_mr_iova2`, `ibv_create_cq`, `ibv_create_qp`, `ibv_modify_qp`, `ibv_destroy_qp`.", |r| r.op),
            bool_col("ok", "The call succeeded (non-null pointer, or 0).", |r| r.ok),
            opt_str_col("device", "ibv_open_device: device name (first 16 characters).", |r| r.device.as_deref()),
            opt_u32_col("qp_num", "", "QP number (create, modify, destroy).", |r| r.qp_num),
            opt_str_col("qp_type", "`RC`, `UC`, `UD`, `RAW_PACKET`, `XRC_SEND`, `XRC_RECV`, `DRIVER`.", |r| r.qp_type),
            opt_str_col("qp_state", "ibv_modify_qp: target state when the state bit is in the mask (`INIT`, `RTR`, `RTS`, `ERR`, ...).", |r| r.qp_state),
            opt_u32_col("dest_qp_num", "", "ibv_modify_qp: remote QPN when IBV_QP_DEST_QPN is in the mask.", |r| r.dest_qp_num),
            opt_str_col("dgid", "ibv_modify_qp: destination GID (IPv6 text; RoCE v2 IPv4 GIDs show as ::ffff:a.b.c.d) when IBV_QP_AV is in the mask.", |r| r.dgid.as_deref()),
            opt_u32_col("attr_mask", "", "ibv_modify_qp: attribute mask.", |r| r.attr_mask),
            opt_u64_col("mr_length", "bytes", "Registered memory region length.", |r| r.mr_length),
            opt_u32_col("cqe", "", "Requested completion queue entries.", |r| r.cqe),
        ]
    }
}

/// A queue pair as a flow: created, connected to a remote QP, destroyed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QpRow {
    pub host: String,
    pub pid: u32,
    pub qp_num: u32,
    pub qp_type: &'static str,
    pub created: i64,
    pub destroyed: Option<i64>,
    pub dest_qp_num: Option<u32>,
    pub dgid: Option<String>,
    pub last_state: Option<&'static str>,
    pub rts: Option<i64>,
    pub modify_calls: u32,
}

impl Table for QpRow {
    const NAME: &'static str = "qps";
    const DESCRIPTION: &'static str =
        "One row per RDMA queue pair created during the run, keyed by (local QPN, \
        remote QPN, GID): the RDMA counterpart of `flows`. Written at destroy, or at the end of \
        the capture for QPs still alive (`destroyed` null).";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            u32_col("pid", "", "Process that created the QP.", |r| r.pid),
            u32_col("qp_num", "", "Local QP number.", |r| r.qp_num),
            str_col("qp_type", "QP type (`RC`, `UD`, ...).", |r| r.qp_type),
            ts_col("created", "ibv_create_qp.", |r| r.created),
            opt_ts_col(
                "destroyed",
                "ibv_destroy_qp; null if alive at the end.",
                |r| r.destroyed,
            ),
            opt_u32_col("dest_qp_num", "", "Remote QP number (last set).", |r| {
                r.dest_qp_num
            }),
            opt_str_col("dgid", "Remote GID (last set).", |r| r.dgid.as_deref()),
            opt_str_col(
                "last_state",
                "Last state requested with ibv_modify_qp.",
                |r| r.last_state,
            ),
            opt_ts_col(
                "rts",
                "When the QP was moved to RTS (ready to send).",
                |r| r.rts,
            ),
            u32_col("modify_calls", "count", "ibv_modify_qp calls.", |r| {
                r.modify_calls
            }),
        ]
    }
}

/// A sampled RDMA work completion.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerbsCompletionRow {
    pub host: String,
    pub ts: i64,
    pub pid: u32,
    pub qp_num: u32,
    pub wr_id: u64,
    pub status: String,
    pub opcode: String,
    pub byte_len: u32,
    pub latency_ns: Option<u64>,
}

impl Table for VerbsCompletionRow {
    const NAME: &'static str = "verbs_completions";
    const DESCRIPTION: &'static str =
        "Sampled work completions from the provider's poll_cq (uprobe): every failed \
        completion and one successful completion in `--verbs-sample-every`. All completions are \
        counted in `qp_traffic`.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            ts_col("ts", "When poll_cq returned the completion.", |r| r.ts),
            u32_col("pid", "", "Polling process.", |r| r.pid),
            u32_col(
                "qp_num",
                "",
                "Local QP number; joins to `qps` and `qp_traffic`.",
                |r| r.qp_num,
            ),
            u64_col(
                "wr_id",
                "",
                "Work request id chosen by the application.",
                |r| r.wr_id,
            ),
            str_col(
                "status",
                "enum ibv_wc_status name, e.g. `SUCCESS`, `RETRY_EXC_ERR`.",
                |r| &r.status,
            ),
            str_col(
                "opcode",
                "enum ibv_wc_opcode name, e.g. `SEND`, `RDMA_WRITE`, `RECV`.",
                |r| &r.opcode,
            ),
            u32_col(
                "byte_len",
                "bytes",
                "Bytes transferred (receive completions).",
                |r| r.byte_len,
            ),
            opt_u64_col(
                "latency_ns",
                "ns",
                "Post to completion; null when the post was not seen.",
                |r| r.latency_ns,
            ),
        ]
    }
}

/// Data-path totals of one QP over the run, aggregated in the kernel.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QpTrafficRow {
    pub host: String,
    pub pid: u32,
    pub qp_num: u32,
    pub post_calls: u64,
    pub wrs_posted: u64,
    pub bytes_posted: u64,
    pub completions: u64,
    pub completion_errors: u64,
    pub bytes_completed: u64,
    pub latency_count: u64,
    pub latency_mean_ns: Option<f64>,
    pub latency_min_ns: Option<u64>,
    pub latency_max_ns: Option<u64>,
    pub opcodes: String,
}

impl Table for QpTrafficRow {
    const NAME: &'static str = "qp_traffic";
    const DESCRIPTION: &'static str = "Per-QP data path over the whole run (provider post_send/poll_cq uprobes, \
        aggregated in a kernel map): work requests, bytes, completions, errors and post-to-completion \
        latency. Written at the end of the capture.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            u32_col("pid", "", "Process.", |r| r.pid),
            u32_col("qp_num", "", "Local QP number; joins to `qps`.", |r| {
                r.qp_num
            }),
            u64_col("post_calls", "count", "post_send calls.", |r| r.post_calls),
            u64_col(
                "wrs_posted",
                "count",
                "Work requests posted (up to 16 followed per call).",
                |r| r.wrs_posted,
            ),
            u64_col(
                "bytes_posted",
                "bytes",
                "Sum of the posted scatter/gather lengths (up to 4 SGEs per request).",
                |r| r.bytes_posted,
            ),
            u64_col(
                "completions",
                "count",
                "Completions polled (up to 16 followed per poll).",
                |r| r.completions,
            ),
            u64_col(
                "completion_errors",
                "count",
                "Completions with a non-success status.",
                |r| r.completion_errors,
            ),
            u64_col(
                "bytes_completed",
                "bytes",
                "Sum of completion byte_len (receives).",
                |r| r.bytes_completed,
            ),
            u64_col(
                "latency_count",
                "count",
                "Completions whose post was seen.",
                |r| r.latency_count,
            ),
            opt_f64_col(
                "latency_mean_ns",
                "ns",
                "Mean post-to-completion latency.",
                |r| r.latency_mean_ns,
            ),
            opt_u64_col(
                "latency_min_ns",
                "ns",
                "Smallest post-to-completion latency.",
                |r| r.latency_min_ns,
            ),
            opt_u64_col(
                "latency_max_ns",
                "ns",
                "Largest post-to-completion latency.",
                |r| r.latency_max_ns,
            ),
            str_col(
                "opcodes",
                "Posted opcodes (enum ibv_wr_opcode names), comma-separated.",
                |r| &r.opcodes,
            ),
        ]
    }
}

/// One address of one network interface of the node, once per run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InterfaceRow {
    pub host: String,
    pub run_id: String,
    pub name: String,
    pub family: String,
    pub addr: String,
    pub prefix_len: u32,
    pub numa_node: Option<i64>,
    pub pci_bus_id: Option<String>,
    pub speed_mbps: Option<u32>,
    pub mtu: Option<u32>,
}

impl Table for InterfaceRow {
    const NAME: &'static str = "interfaces";
    const DESCRIPTION: &'static str =
        "The node's network interfaces and their addresses (in the recorder's network \
        namespace), once per run: joins a flow's `local_addr` to the NIC that carried it.";
    fn columns() -> Vec<Column<Self>> {
        vec![
            str_col("host", "Node hostname.", |r| &r.host),
            str_col("run_id", "Run of `scaletrace record`.", |r| &r.run_id),
            str_col("name", "Interface name, e.g. `eth0`, `ib0`.", |r| &r.name),
            str_col("family", "`ipv4` or `ipv6`.", |r| &r.family),
            str_col(
                "addr",
                "Address, text form as in `flows.local_addr`.",
                |r| &r.addr,
            ),
            u32_col("prefix_len", "bits", "Network prefix length.", |r| {
                r.prefix_len
            }),
            opt_i64_col(
                "numa_node",
                "",
                "NUMA node of the interface's PCI device (sysfs); null for virtual interfaces.",
                |r| r.numa_node,
            ),
            opt_str_col(
                "pci_bus_id",
                "PCI address of the device, e.g. `0000:17:00.0`; null for virtual interfaces.",
                |r| r.pci_bus_id.as_deref(),
            ),
            opt_u32_col(
                "speed_mbps",
                "Mbit/s",
                "Link speed (sysfs `speed`); null when unknown.",
                |r| r.speed_mbps,
            ),
            opt_u32_col("mtu", "bytes", "MTU.", |r| r.mtu),
        ]
    }
}

/// A table as readers see it: name, columns with their SQL types, and its documentation.
pub struct TableInfo {
    pub name: &'static str,
    pub columns: Vec<(&'static str, &'static str)>,
    pub markdown: fn() -> String,
}

fn info<T: Table>() -> TableInfo {
    TableInfo {
        name: T::NAME,
        columns: T::columns()
            .iter()
            .map(|c| (c.name, crate::columns::sql_type(&c.data_type)))
            .collect(),
        markdown: crate::columns::markdown::<T>,
    }
}

/// Every table scaletrace writes, in documentation order.
pub fn catalog() -> Vec<TableInfo> {
    vec![
        info::<FlowRow>(),
        info::<FlowSnapshotRow>(),
        info::<RttRow>(),
        info::<RetransmitRow>(),
        info::<StateChangeRow>(),
        info::<CaptureRow>(),
        info::<NicCounterRow>(),
        info::<QpCounterRow>(),
        info::<InterfaceRow>(),
        info::<NcclCallRow>(),
        info::<VerbsCallRow>(),
        info::<QpRow>(),
        info::<QpTrafficRow>(),
        info::<QpSnapshotRow>(),
        info::<VerbsCompletionRow>(),
        info::<GpuDeviceRow>(),
        info::<GpuSampleRow>(),
        info::<GpuProcessRow>(),
        info::<GpuEventRow>(),
        info::<WindowRow>(),
    ]
}
