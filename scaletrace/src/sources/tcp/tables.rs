//! The tables of the TCP source: flows, their RTT samples and windows, retransmits and state
//! changes (sock_ops and the tcp/sock tracepoints).
use crate::columns::*;

table! {
    /// One TCP connection seen by the sock_ops flow table.
    pub struct FlowRow in "flows" {
        description: "One row per TCP connection that passed the filters: written when it closes, or \
        at the end of the capture (`open_at_end = true`) with its counters at that moment. \
        Counters are the kernel's own per-socket counters: read at close, and for a flow \
        still open at the end from the kernel at that moment (sock_diag, as `ss -i`).",
        host: String => str_col("Node hostname."),
        flow_id: u64 => u64_col("", "Kernel socket cookie: unique per socket until reboot; joins to `rtt`, `retransmits`, `state_changes`."),
        netns_cookie: u64 => u64_col("", "Network namespace cookie of the socket."),
        netns: Option<String> => opt_str_col("Name of the socket's network namespace under /run/netns (`ip netns`, CNI's `cni-…` for Kubernetes pods); null for the recorder's own namespace and for one without a name there."),
        cgroup: Option<String> => opt_str_col("The socket's cgroup v2 (where the process that created it ran), as a path below the cgroup2 mount; null where the kernel's BTF does not give the way to it (`capture.hooks_missing` lists `sock:cgroup_id`) or the cgroup was removed before the flow was written."),
        pod_uid: Option<String> => opt_str_col("Kubernetes pod UID, from the cgroup path (systemd or cgroupfs cgroup driver); null outside a pod."),
        container_id: Option<String> => opt_str_col("Container runtime's id (64 hex digits), from the cgroup path; null outside a container."),
        slurm_job: Option<String> => opt_str_col("Slurm job id, from the cgroup path (`job_<id>` of slurmstepd's cgroup v2 tree; a Slurm that uses cgroup v1 only leaves no job in the v2 path); null outside a Slurm job."),
        family: &'static str => str_col("`ipv4` or `ipv6` (IPv4-mapped IPv6 peers are shown as IPv4)."),
        local_addr: String => str_col("Local IP address, text form."),
        local_port: u16 => u16_col("", "Local TCP port."),
        remote_addr: String => str_col("Peer IP address, text form."),
        remote_port: u16 => u16_col("", "Peer TCP port."),
        direction: &'static str => str_col("`active` (this side connected), `passive` (accepted), or `unknown` (a connection seen only at its close, `tracked = false`, or adopted)."),
        pid: Option<u32> => opt_u32_col("", "Process (tgid) that closed the socket, from `sock:inet_sock_set_state` in process context; null if not seen."),
        comm: Option<String> => opt_str_col("Command name of that process."),
        start: i64 => ts_col("connect() for active flows, establishment for passive ones."),
        end: Option<i64> => opt_ts_col("Transition to CLOSE; null when still open at the end of the capture."),
        duration_ns: i64 => i64_col("ns", "`end - start`, or capture end - start for open flows."),
        open_at_end: bool => bool_col("The flow was still open when the capture stopped."),
        tracked: bool => bool_col("false: the kernel flow table was full when the connection started (`capture.flows_untracked_map_full`), or the kernel had no memory for its state (`capture.flows_untracked_no_memory`); only its counters at close are known, so `start` is its close time, `duration_ns` 0 and it has no RTT samples."),
        adopted: bool => bool_col("The connection was open before this run started (an agent started, restarted or upgraded under a running job): `start` is when this run adopted it (its first segment in this run, data or ACK), the counters are the socket's totals since it opened, direction is `unknown`."),
        bytes_sent: u64 => u64_col("bytes", "Bytes acknowledged by the peer (tcp_sock.bytes_acked), in sequence space: the payload plus 1 for the SYN and 1 for the FIN once acknowledged (a connection that sent 20,000,000 bytes and closed shows 20,000,002)."),
        bytes_received: u64 => u64_col("bytes", "Bytes received in order (tcp_sock.bytes_received)."),
        segs_out: u32 => u32_col("segments", "Segments sent, including retransmits."),
        segs_in: u32 => u32_col("segments", "Segments received."),
        data_segs_out: u32 => u32_col("segments", "Segments with payload sent."),
        data_segs_in: u32 => u32_col("segments", "Segments with payload received."),
        total_retrans: u32 => u32_col("segments", "Retransmitted segments (tcp_sock.total_retrans)."),
        retransmit_events: u32 => u32_col("count", "Retransmit callbacks (BPF_SOCK_OPS_RETRANS_CB), counted in the kernel."),
        rto_count: u32 => u32_col("count", "Retransmit timeouts (BPF_SOCK_OPS_RTO_CB): losses recovered only after the retransmission timer fired (at least 200 ms on Linux), not by fast retransmit."),
        rto_recovery_ns: u64 => u64_col("ns", "Time from the first timeout of each stall to the next ACK of new data (an RTT sample), summed; the wait for the timer itself comes before it. A stall still open at the end counts up to the flow's end."),
        loss_recovery_ns: u64 => u64_col("ns", "Time in loss recovery, fast retransmits and timeouts alike: from the first retransmit or retransmit timeout of each recovery (a timeout whose retransmission the kernel defers starts it too) to the first ACK of new data that leaves no retransmitted segment outstanding, summed (the time to detect the loss comes before it). A recovery still open at the end counts up to the flow's end."),
        dsack_dups: Option<u32> => opt_u32_col("segments", "Retransmits the peer reported as duplicates with a DSACK (tcp_sock.dsack_dups): spurious, the original had only arrived late (reordering, delay variation), not been lost. Null on a kernel whose BTF does not place the member (`capture.hooks_missing`)."),
        reord_seen: Option<u32> => opt_u32_col("count", "Reordering events the sender detected (tcp_sock.reord_seen); null as `dsack_dups`."),
        rtt_updates: u32 => u32_col("count", "RTT updates seen (one per ACK that produced an RTT sample)."),
        srtt_min_us: Option<u32> => opt_u32_col("µs", "Smallest smoothed RTT over the flow."),
        srtt_mean_us: Option<f64> => opt_f64_col("µs", "Mean smoothed RTT over all RTT updates."),
        srtt_max_us: Option<u32> => opt_u32_col("µs", "Largest smoothed RTT."),
        srtt_last_us: Option<u32> => opt_u32_col("µs", "Smoothed RTT at the last update."),
        min_rtt_us: Option<u32> => opt_u32_col("µs", "Kernel windowed minimum RTT (tcp_min_rtt), the path's base latency."),
    }
}

table! {
    /// One open flow's counters at an agent rotation.
    pub struct FlowSnapshotRow in "flow_snapshots" {
        description: "`agent` only: one row per flow still open at each rotation, with its counters so far \
        and what changed since the previous rotation (or since the flow started, in its first \
        row). A training job's connections live for days and reach `flows` only when they close \
        or the agent stops; these rows put their traffic in the store while they run. The flow's \
        final row in `flows` carries its totals: do not add snapshots to it.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("When the counters were read (the rotation)."),
        flow_id: u64 => u64_col("", "Kernel socket cookie; joins to `flows`, `rtt`, `retransmits`."),
        local_addr: String => str_col("Local IP address, text form."),
        local_port: u16 => u16_col("", "Local TCP port."),
        remote_addr: String => str_col("Peer IP address, text form."),
        remote_port: u16 => u16_col("", "Peer TCP port."),
        direction: &'static str => str_col("`active` or `passive`, as in `flows`."),
        start: i64 => ts_col("When the flow started, as in `flows`."),
        bytes_sent: u64 => u64_col("bytes", "Bytes acknowledged by the peer so far."),
        bytes_received: u64 => u64_col("bytes", "Bytes received in order so far."),
        total_retrans: u32 => u32_col("segments", "Retransmitted segments so far."),
        rto_count: u32 => u32_col("count", "Retransmit timeouts so far."),
        bytes_sent_delta: u64 => u64_col("bytes", "`bytes_sent` since the flow's previous snapshot (since its start in its first)."),
        bytes_received_delta: u64 => u64_col("bytes", "`bytes_received` since the previous snapshot."),
        retrans_delta: u32 => u32_col("segments", "`total_retrans` since the previous snapshot."),
        srtt_last_us: Option<u32> => opt_u32_col("µs", "Smoothed RTT at the flow's last RTT update."),
        min_rtt_us: Option<u32> => opt_u32_col("µs", "Kernel windowed minimum RTT."),
    }
}

table! {
    /// A sampled RTT/congestion-state snapshot of one flow.
    pub struct RttRow in "rtt" {
        description: "Per-flow latency samples from the sock_ops RTT callback, at most one per flow \
        per `--rtt-sample-interval` (every update still feeds the `flows` aggregates).",
        host: std::sync::Arc<str> => str_col("Node hostname."),
        ts: i64 => ts_col("Time of the RTT update."),
        flow_id: u64 => u64_col("", "Joins to `flows.flow_id`."),
        srtt_us: u32 => u32_col("µs", "Smoothed RTT (RFC 6298 SRTT) after this update."),
        min_rtt_us: u32 => u32_col("µs", "Windowed minimum RTT; `srtt_us - min_rtt_us` estimates queueing delay."),
        snd_cwnd: u32 => u32_col("segments", "Congestion window."),
        snd_ssthresh: u32 => u32_col("segments", "Slow-start threshold."),
        packets_out: u32 => u32_col("segments", "Segments sent and not yet acknowledged."),
        retrans_out: u32 => u32_col("segments", "Retransmitted segments in flight."),
        lost_out: u32 => u32_col("segments", "Segments marked lost."),
        sacked_out: u32 => u32_col("segments", "Segments selectively acknowledged."),
        packets_in_flight: u32 => u32_col("segments", "packets_out - (sacked_out + lost_out) + retrans_out, as tcp_packets_in_flight()."),
        total_retrans: u32 => u32_col("segments", "Cumulative retransmitted segments of the flow."),
        dsack_dups: Option<u32> => opt_u32_col("segments", "Cumulative spurious retransmits of the flow, reported by the peer's DSACKs (as `flows.dsack_dups`)."),
        reord_seen: Option<u32> => opt_u32_col("count", "Cumulative reordering events of the flow (as `flows.reord_seen`)."),
        mss: u32 => u32_col("bytes", "Current MSS."),
        bytes_acked: u64 => u64_col("bytes", "Cumulative bytes acknowledged (sent side)."),
        bytes_received: u64 => u64_col("bytes", "Cumulative bytes received."),
        delivery_rate_bps: Option<f64> => opt_f64_col("bit/s", "Kernel delivery-rate estimate (rate_delivered × mss / rate_interval); null before the first estimate."),
    }
}

table! {
    /// One flow in one window: its RTT histogram and what it moved.
    pub struct FlowWindowRow in "flow_windows" {
        description: "One flow in one window of `--flow-window` (1 s by default), aggregated in \
        the kernel: every RTT update (each ACK that carried an RTT measurement, not only the \
        sampled ones of `rtt`) counted into a log-linear histogram, so counts and tails are \
        exact within a bucket, and the flow's bytes, retransmits and timeouts in the window. \
        The windows of a flow add up to its `flows` totals (`rtt_updates`, `bytes_sent`, \
        `total_retrans`, ...), except where a window was lost (`capture.ring_drops_flow_window`) \
        and for a flow adopted from an earlier run, whose first window starts from the counters \
        it was adopted with. A window opens at the flow's first RTT update, retransmit or \
        timeout in it, events of the sending side: a connection that only receives has no window \
        after its handshake's, so its received bytes land there (its peer's windows, where it \
        is recorded, have them as sent); one row per window that opened. Its counters run from that first event \
        to the first event of the flow's next window (or its end), so what happens while no \
        window is open (an idle flow's last ACKs, a stall without retransmits) counts in the \
        window before it, and a stall's recovery time counts where the stall ends. A window is \
        written when the next one opens, when the flow closes or at the end of the capture: \
        select by `ts`, not by file. Bucket `i` holds the smoothed RTTs from `lower(i)` to \
        below `lower(i + 1)` µs, where `lower(i) = i` for `i < 4` and \
        `(4 + i % 4) * 2^(i / 4 - 1)` above (four buckets per power of two); the last bucket \
        (83) holds 3.67 s and more. Percentiles are read from the buckets: the middle of the \
        bucket that holds the rank, within 12.5 % of the exact value, kept within the window's \
        exact minimum and maximum.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Start of the window: a whole multiple of `window_ns` of UTC (as the clock was when the capture started)."),
        flow_id: u64 => u64_col("", "Joins to `flows.flow_id`."),
        window_ns: u64 => u64_col("ns", "Length of the window (`--flow-window`)."),
        rtt_updates: u32 => u32_col("count", "RTT updates in the window (the sum of `rtt_buckets`)."),
        srtt_min_us: Option<u32> => opt_u32_col("µs", "Smallest smoothed RTT in the window (exact); null without an RTT update."),
        srtt_mean_us: Option<f64> => opt_f64_col("µs", "Mean smoothed RTT (exact)."),
        srtt_max_us: Option<u32> => opt_u32_col("µs", "Largest smoothed RTT (exact)."),
        srtt_p50_us: Option<f64> => opt_f64_col("µs", "Median smoothed RTT, from the buckets (within 12.5 % below 3.67 s; above, the maximum)."),
        srtt_p90_us: Option<f64> => opt_f64_col("µs", "90th percentile, from the buckets (within 12.5 % below 3.67 s; above, the maximum)."),
        srtt_p99_us: Option<f64> => opt_f64_col("µs", "99th percentile, from the buckets (within 12.5 % below 3.67 s; above, the maximum)."),
        rtt_buckets: Vec<u32> => u32_list_col("count", "RTT updates per bucket, 84 buckets (bounds in the table's description)."),
        bytes_sent: u64 => u64_col("bytes", "Bytes the peer acknowledged in the window (growth of tcp_sock.bytes_acked)."),
        bytes_received: u64 => u64_col("bytes", "Bytes received in order."),
        retrans_segments: u32 => u32_col("segments", "Segments retransmitted (growth of tcp_sock.total_retrans)."),
        retransmit_events: u32 => u32_col("count", "Retransmit callbacks, as `flows.retransmit_events`."),
        rto_count: u32 => u32_col("count", "Retransmit timeouts, as `flows.rto_count`."),
        rto_recovery_ns: u64 => u64_col("ns", "Timeout stall time of the stalls that ended in the window, as `flows.rto_recovery_ns`."),
        loss_recovery_ns: u64 => u64_col("ns", "Loss recovery time of the recoveries that ended in the window, as `flows.loss_recovery_ns`."),
    }
}

table! {
    /// One retransmitted segment (or SYN-ACK).
    pub struct RetransmitRow in "retransmits" {
        description: "One row per `tcp:tcp_retransmit_skb` (tracked flows) or \
        `tcp:tcp_retransmit_synack` (port/CIDR filters only) hit, under the \
        `--max-retransmit-rate` token bucket; events over the rate are counted in `capture`.",
        host: std::sync::Arc<str> => str_col("Node hostname."),
        ts: i64 => ts_col("Time of the retransmit."),
        flow_id: Option<u64> => opt_u64_col("", "Joins to `flows.flow_id`; null for SYN-ACKs and flows not tracked."),
        kind: &'static str => str_col("`retransmit` or `synack`."),
        family: &'static str => str_col("`ipv4` or `ipv6`."),
        local_addr: String => str_col("Local IP address."),
        local_port: u16 => u16_col("", "Local TCP port."),
        remote_addr: String => str_col("Peer IP address."),
        remote_port: u16 => u16_col("", "Peer TCP port."),
        state: &'static str => str_col("TCP state of the socket (e.g. ESTABLISHED); UNKNOWN when the kernel does not report it."),
    }
}

table! {
    /// One TCP state transition of a tracked flow.
    pub struct StateChangeRow in "state_changes" {
        description: "`sock:inet_sock_set_state` transitions of tracked flows, with the task that was \
        current. The task is meaningful for transitions made in process context (close(): \
        ESTABLISHED→FIN_WAIT1, CLOSE_WAIT→LAST_ACK); others run in softirq context and show \
        whatever task was interrupted.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Time of the transition."),
        flow_id: Option<u64> => opt_u64_col("", "Joins to `flows.flow_id`."),
        local_addr: String => str_col("Local IP address."),
        local_port: u16 => u16_col("", "Local TCP port."),
        remote_addr: String => str_col("Peer IP address."),
        remote_port: u16 => u16_col("", "Peer TCP port."),
        old_state: &'static str => str_col("State before."),
        new_state: &'static str => str_col("State after."),
        pid: u32 => u32_col("", "Current task's tgid."),
        comm: String => str_col("Current task's command name."),
    }
}
