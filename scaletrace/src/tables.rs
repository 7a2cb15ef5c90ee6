//! The Parquet tables written by `scaletrace record`. `docs/schema.md` is generated from here
//! (`scaletrace schema`), and a test keeps the committed file in sync.
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
        tracked: bool => bool_col("false: the kernel flow table was full when the connection started (`capture.flows_untracked_map_full`); only its counters at close are known, so `start` is its close time, `duration_ns` 0 and it has no RTT samples."),
        adopted: bool => bool_col("The connection was open before this run started (an agent started, restarted or upgraded under a running job): `start` is when this run adopted it (its first ACK in this run), the counters are the socket's totals since it opened, direction is `unknown`."),
        bytes_sent: u64 => u64_col("bytes", "Bytes acknowledged by the peer (tcp_sock.bytes_acked)."),
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
    /// One RDMA queue pair's data-path counters at an agent rotation.
    pub struct QpSnapshotRow in "qp_snapshots" {
        description: "`agent` only: one row per RDMA queue pair in the kernel's per-QP table at each rotation, \
        with its data-path counters so far and what changed since the previous rotation (since \
        the QP's first post, in its first row). `qp_traffic` carries the totals at the end of the \
        run; these rows put a long-lived QP's traffic in the store while it runs.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("When the counters were read (the rotation)."),
        pid: u32 => u32_col("", "Process (tgid) that posted on the QP; with `qp_num` joins to `qp_traffic` and `qps`."),
        qp_num: u32 => u32_col("", "Queue pair number."),
        wrs_posted: u64 => u64_col("count", "Work requests posted so far."),
        bytes_posted: u64 => u64_col("bytes", "Bytes in the posted requests' scatter/gather lists so far."),
        completions: u64 => u64_col("count", "Completions polled so far."),
        completion_errors: u64 => u64_col("count", "Completions with an error status so far."),
        wrs_posted_delta: u64 => u64_col("count", "`wrs_posted` since the previous snapshot."),
        bytes_posted_delta: u64 => u64_col("bytes", "`bytes_posted` since the previous snapshot."),
        completions_delta: u64 => u64_col("count", "`completions` since the previous snapshot."),
        completion_errors_delta: u64 => u64_col("count", "`completion_errors` since the previous snapshot."),
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
        ring_drops_flow_end: u64 => u64_col("events", "Flow-end records that did not fit; those flows were still recovered from the kernel flow table."),
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
        rows_lost_disk_full: u64 => u64_col("rows", "`agent`: rows dropped because the spool's disk was full (the open interval's files are dropped, the oldest completed files deleted, and recording goes on); includes rows of the previous interval whose files could not be finished."),
        qps_evicted: u64 => u64_col("QPs", "RDMA queue pairs whose data-path totals were evicted from the kernel's per-QP table (`--max-qps`) with their traffic; known at the end of the run, so written in its last interval only."),
        gpu_samples_dropped: u64 => u64_col("rows", "GPU samples (`gpu_samples` rows) the NVML thread dropped because the recorder had fallen thousands of `--gpu-interval` periods behind; it never waits on the writer."),
        decode_errors: u64 => u64_col("events", "Ring buffer records that could not be decoded."),
        clock_offset_ns: i64 => i64_col("ns", "UTC = kernel monotonic + this offset (see docs/schema.md, Time): the offset in use at the interval's end (a wall-clock step of 100 ms or more is followed within a second)."),
        clock_error_ns: i64 => i64_col("ns", "Bound on the conversion error: bracket half-width, plus drift of the offset until the end, plus the wall-clock steps followed in the interval (its rows before a step carry the old clock's time)."),
    }
}

table! {
    /// One complete ("X") event of an imported GPU/collective timeline.
    pub struct GpuEventRow in "gpu_events" {
        description: "Events imported by `scaletrace import` from PyTorch profiler (Kineto) Chrome \
        traces: GPU kernels, memcpy/memset, CPU ops and the rest of the complete (`ph: X`) events, \
        on the same UTC time axis as the network tables.",
        host: String => str_col("Host the trace came from (`--host`, default: this host)."),
        rank: Option<i64> => opt_i64_col("", "Distributed rank: `distributedInfo.rank` of the trace, or `--rank`."),
        ts: i64 => ts_col("Event start: `baseTimeNanoseconds + ts` of the trace (see Time)."),
        dur_ns: i64 => i64_col("ns", "Event duration."),
        category: String => str_col("Kineto `cat`: `kernel`, `gpu_memcpy`, `gpu_memset`, `cpu_op`, `cuda_runtime`, ..."),
        name: String => str_col("Kernel or operator name."),
        on_gpu: bool => bool_col("The event ran on the GPU (kernel, memcpy, memset)."),
        collective: Option<String> => opt_str_col("For communication events (see `comm_source`): the collective, `AllReduce`, `AllGather`, `ReduceScatter`, `AllToAll`, `Broadcast`, `Reduce`, `SendRecv`, `Send`, `Recv`, `Barrier`, `Gather`, `Scatter` or `Other`."),
        device: Option<i64> => opt_i64_col("", "GPU index (`args.device`)."),
        stream: Option<i64> => opt_i64_col("", "CUDA stream (`args.stream`)."),
        pid: Option<i64> => opt_i64_col("", "Trace `pid` (process, or GPU for device rows)."),
        tid: Option<i64> => opt_i64_col("", "Trace `tid` (thread, or stream for device rows)."),
        correlation: Option<i64> => opt_i64_col("", "Correlation id linking a kernel to the CUDA runtime call that launched it."),
        source: String => str_col("File the event was imported from."),
        time_aligned: bool => bool_col("`ts` is UTC. False when the trace lost its time base (`baseTimeNanoseconds` missing, e.g. a trace cut short) and its timestamps are relative: `ts` is then on the trace's own axis; import again with `--time-base` to align."),
        comm_source: Option<String> => opt_str_col("How the event was recognised as communication (null: it is not): `nccl_kernel` (NCCL/RCCL kernels), `comm_kernel` (other GPU kernels of communication libraries — DeepEP dispatch/combine, NVSHMEM, MSCCL++, userbuffers, custom all-reduce — or kernels whose name spells a collective), `c10d` (the CPU-side `c10d::<op>_` call of any backend), `backend` (the backend's annotation: `gloo:all_reduce`, `nccl:all_reduce`; for gloo it spans the transfer), `param_comms` (`record_param_comms`)."),
        process_group: Option<String> => opt_str_col("`Process Group Name` (with its description, e.g. `0 (default_pg)`) where the trace carries it."),
        group_size: Option<i64> => opt_i64_col("ranks", "`Group size` of the process group."),
        seq: Option<i64> => opt_i64_col("", "The process group's sequence number of the collective (`Seq`, newer PyTorch): the key that matches one collective across ranks."),
        msg_bytes: Option<i64> => opt_i64_col("bytes", "Message size: `In msg nelems` × the size of `dtype` (for bus bandwidth)."),
        dtype: Option<String> => opt_str_col("Element type of the message (`Float`, `BFloat16`, ...)."),
    }
}

table! {
    /// One time window of one host (and rank): timeline and network side by side.
    pub struct WindowRow in "windows" {
        description: "Written by `scaletrace merge` from the analysis view `st_window` (one definition for \
        `merge` and `analyze`): for each window and host, and each rank traced there, how the \
        rank's traced time was spent and the host's network in the same window. Timeline shares are \
        of the time the rank was traced in the window, not of the whole window; a window outside \
        every trace of a rank has no row for it (null timeline columns on the host's network-only row).",
        window_start: i64 => ts_col("Window start (windows are aligned to multiples of the window length since the UNIX epoch)."),
        window_ns: i64 => i64_col("ns", "Window length."),
        host: String => str_col("Host."),
        rank: Option<i64> => opt_i64_col("", "Traced rank; null on the row of the host's network alone (windows where no rank of it was traced)."),
        device: Option<String> => opt_str_col("What the rank's timeline shows: `gpu` (it has GPU kernels) or `cpu` (CPU operators only, e.g. gloo jobs)."),
        traced_ns: Option<i64> => opt_i64_col("ns", "Time of the window covered by the rank's trace(s): the denominator of every share below."),
        busy_frac: Option<f64> => opt_f64_col("fraction", "Share of the traced time with compute or communication running (union of intervals)."),
        compute_frac: Option<f64> => opt_f64_col("fraction", "Share with compute running: GPU kernels/memcpy/memset that are not communication; on `cpu` ranks, CPU operators that are not communication, waits or synchronizations."),
        comm_frac: Option<f64> => opt_f64_col("fraction", "Share with a collective running, from the rank's communication layer (NCCL kernels, other communication kernels, backend annotations such as `gloo:all_reduce`, or `c10d::` calls — the first the trace has)."),
        overlap_frac: Option<f64> => opt_f64_col("fraction", "Share with compute and communication at once (communication hidden behind compute)."),
        idle_frac: Option<f64> => opt_f64_col("fraction", "Share with neither."),
        collective_ops: Option<u64> => opt_u64_col("count", "Collective operations starting in the window."),
        waiting_on_collectives: Option<bool> => opt_bool_col("`comm_frac` ≥ `idle_collective_fraction` (0.5) and `compute_frac` ≤ `idle_compute_fraction` (0.25): the rank mostly waited on communication. The same rule as `analyze`'s GPU-idle diagnosis."),
        net_bytes: Option<u64> => opt_u64_col("bytes", "Bytes acknowledged or received on the host's flows in the window (from successive `rtt` samples of each flow)."),
        net_throughput_bps: Option<f64> => opt_f64_col("bit/s", "`net_bytes` × 8 / window length."),
        rtt_samples: Option<u64> => opt_u64_col("count", "RTT samples of the host in the window."),
        rtt_p50_us: Option<f64> => opt_f64_col("µs", "Median smoothed RTT of those samples."),
        rtt_p99_us: Option<f64> => opt_f64_col("µs", "99th percentile smoothed RTT."),
        retransmits: Option<u64> => opt_u64_col("count", "Retransmitted segments (`retransmits` rows of kind `retransmit`) of the host in the window."),
    }
}

table! {
    /// One GPU of the node, recorded once per run or file interval, with its nearest NIC.
    pub struct GpuDeviceRow in "gpu_devices" {
        description: "The node's GPUs (NVML), once per run (`agent`: once per file interval, so every \
        hour partition has them), with the NIC nearest to each in the PCIe tree: GPU-NIC locality \
        is a classic cause of one slow rank. Empty where NVML found no GPU.",
        host: String => str_col("Node hostname."),
        run_id: String => str_col("Run of `scaletrace record`."),
        index: u32 => u32_col("", "NVML device index."),
        uuid: String => str_col("GPU UUID."),
        name: String => str_col("Product name."),
        pci_bus_id: String => str_col("PCI bus id as NVML reports it."),
        numa_node: Option<i64> => opt_i64_col("", "NUMA node of the GPU (sysfs)."),
        memory_total_bytes: Option<u64> => opt_u64_col("bytes", "GPU memory."),
        nearest_nic: Option<String> => opt_str_col("Nearest network or RDMA device (sysfs class/net, class/infiniband)."),
        nic_numa_node: Option<i64> => opt_i64_col("", "NUMA node of that NIC."),
        nic_locality: Option<String> => opt_str_col("`PIX` (common PCIe switch), `PHB` (same host bridge), `NODE` (same NUMA node), `SYS` (across NUMA nodes), as in `nvidia-smi topo -m`."),
    }
}

table! {
    /// One NVML sample of one GPU. Metrics the GPU does not support are null.
    pub struct GpuSampleRow in "gpu_samples" {
        description: "NVML samples of every GPU at `--gpu-interval` (default 100 ms) during `record`.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Sample time."),
        index: u32 => u32_col("", "NVML device index; joins to `gpu_devices.index`."),
        sm_util_pct: Option<u32> => opt_u32_col("%", "Share of the last sample period with a kernel running."),
        mem_util_pct: Option<u32> => opt_u32_col("%", "Share of the period with device memory being read or written."),
        sm_clock_mhz: Option<u32> => opt_u32_col("MHz", "SM clock."),
        mem_clock_mhz: Option<u32> => opt_u32_col("MHz", "Memory clock."),
        power_mw: Option<u32> => opt_u32_col("mW", "Power draw."),
        temperature_c: Option<u32> => opt_u32_col("°C", "GPU temperature."),
        memory_used_bytes: Option<u64> => opt_u64_col("bytes", "Device memory in use."),
        pcie_tx_bytes_per_s: Option<u64> => opt_u64_col("bytes/s", "PCIe transmit throughput (NVML, 20 ms window)."),
        pcie_rx_bytes_per_s: Option<u64> => opt_u64_col("bytes/s", "PCIe receive throughput."),
        throttle_reasons: Option<String> => opt_str_col("Active clock throttle reasons, comma-separated; empty when none."),
        nvlink_tx_bytes_per_s: Option<f64> => opt_f64_col("bytes/s", "NVLink data transmitted over all links since the device's previous sample (NVML field 138); null without NVLink and in a device's first sample."),
        nvlink_rx_bytes_per_s: Option<f64> => opt_f64_col("bytes/s", "NVLink data received over all links since the previous sample (NVML field 139)."),
        nvlink_crc_errors: Option<u64> => opt_u64_col("count", "NVLink CRC (flit) errors over all links since the driver loaded (NVML field 45): a count that rises is a bad link."),
        nvlink_replay_errors: Option<u64> => opt_u64_col("count", "NVLink replays over all links since the driver loaded (NVML field 52)."),
        nvlink_recovery_errors: Option<u64> => opt_u64_col("count", "NVLink recoveries over all links since the driver loaded (NVML field 59)."),
    }
}

table! {
    /// Per-process GPU utilization, keyed by pid so it joins to `flows.pid`.
    pub struct GpuProcessRow in "gpu_processes" {
        description: "Per-process utilization samples where NVML offers them (`nvmlDeviceGetProcessUtilization`).",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Sample time (NVML's own timestamp of the sample)."),
        index: u32 => u32_col("", "NVML device index."),
        pid: u32 => u32_col("", "Process id; joins to `flows.pid`."),
        cgroup: Option<String> => opt_str_col("The process's cgroup v2 path (`/proc/PID/cgroup` at the sample); null if it is not visible to the recorder."),
        pod_uid: Option<String> => opt_str_col("Kubernetes pod UID, from the cgroup path; null outside a pod."),
        container_id: Option<String> => opt_str_col("Container runtime's id, from the cgroup path; null outside a container."),
        slurm_job: Option<String> => opt_str_col("Slurm job id, from the cgroup path; null outside a Slurm job."),
        sm_util_pct: u32 => u32_col("%", "SM utilization by this process."),
        mem_util_pct: u32 => u32_col("%", "Memory utilization by this process."),
    }
}

table! {
    /// A NIC counter reading: first reading of each counter, then only when it changed.
    pub struct NicCounterRow in "nic_counters" {
        description: "sysfs NIC counters sampled every `--nic-interval` during `record`: interface \
        statistics, InfiniBand/RoCE port counters and hardware counters (retransmits, \
        out-of-sequence, congestion notifications) that offloaded RDMA never shows the kernel. \
        A counter appears at its first reading and then only in samples where it changed.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Sample time."),
        source: &'static str => str_col("`net` (class/net/DEV/statistics), `ib` (ports/N/counters) or `ib_hw` (ports/N/hw_counters)."),
        device: String => str_col("Interface or RDMA device name."),
        port: Option<u32> => opt_u32_col("", "RDMA port; null for `net`."),
        counter: String => str_col("Counter file name, e.g. `tx_bytes`, `out_of_sequence`, `np_cnp_sent`."),
        value: u64 => u64_col("counter units", "Counter value."),
        delta: Option<u64> => opt_u64_col("counter units", "Increase since the previous reported value; null at the first reading and after a counter reset."),
        rate_per_s: Option<f64> => opt_f64_col("units/s", "`delta` per second."),
    }
}

table! {
    /// One counter of one RDMA queue pair at one sample, from RDMA netlink.
    pub struct QpCounterRow in "qp_counters" {
        description: "Every RDMA queue pair of the node, read from RDMA netlink (what `rdma resource show qp` \
        and `rdma statistic qp show` use) every `--nic-interval`, with no probe on the data path: \
        its send and receive packet sequence numbers, whose progress is the QP's packet count \
        (source `psn`), and the counters of the statistic counter it is bound to where the driver \
        binds QPs (source `bound`: mlx5 with `rdma statistic qp set link DEV/PORT auto type on`; \
        soft-RoCE has none, its counters are per port in `nic_counters`). Like `nic_counters`, a \
        counter appears at its first reading and then only in samples where it or the QP's state \
        changed. Joins to `qps`/`qp_traffic` by (host, pid, qp_num).",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Sample time."),
        device: String => str_col("RDMA device, e.g. `mlx5_0`, `rxe0`."),
        port: Option<u32> => opt_u32_col("", "Device port the QP is bound to; null before its first modify."),
        netdev: Option<String> => opt_str_col("Network device of that port (RoCE, iWARP); null for InfiniBand."),
        qp_num: u32 => u32_col("", "Local QP number."),
        qp_type: &'static str => str_col("`RC`, `UC`, `UD`, `GSI`, `SMI`, `RAW_PACKET`, `XRC_INI`, `XRC_TGT`."),
        state: Option<&'static str> => opt_str_col("QP state: `RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`."),
        dest_qp_num: Option<u32> => opt_u32_col("", "Remote QP number (connected QPs)."),
        pid: Option<u32> => opt_u32_col("", "Process of a user QP (in the recorder's PID namespace); null for a kernel QP."),
        comm: Option<String> => opt_str_col("Process name (`/proc/PID/comm`), or the kernel module of a kernel QP."),
        counter_id: Option<u32> => opt_u32_col("", "Statistic counter the QP is bound to (source `bound`); its values are shared by every QP bound to it."),
        source: &'static str => str_col("`psn` (packet sequence numbers) or `bound` (the bound statistic counter)."),
        counter: String => str_col("`sq_psn` (next send PSN), `rq_psn` (next expected receive PSN, connected QPs), or the driver's counter name, e.g. `out_of_sequence`, `packet_seq_err`, `local_ack_timeout_err`."),
        value: u64 => u64_col("counter units", "Value (a PSN is 24 bits)."),
        delta: Option<u64> => opt_u64_col("counter units", "Increase since the QP's previous reported value: packets for a PSN (modulo 2^24). Null at the first reading, and when it went back (a QP reset, a PSN rewound by a retry at the reading)."),
        rate_per_s: Option<f64> => opt_f64_col("units/s", "`delta` per second."),
    }
}

table! {
    /// One NCCL API call seen by the uprobes.
    pub struct NcclCallRow in "nccl_calls" {
        description: "Calls into libnccl's public API (uprobe at entry, uretprobe at return): a \
        per-rank timeline of collectives as the host issues them. NCCL calls are asynchronous: \
        `dur_ns` is the time to enqueue, not the collective itself (see `gpu_events` for kernels). \
        `rank`/`nranks` come from `ncclCommInitRank`; join other calls to it on `(host, pid, comm)`.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Call entry."),
        dur_ns: i64 => i64_col("ns", "Entry to return."),
        pid: u32 => u32_col("", "Calling process."),
        tid: u32 => u32_col("", "Calling thread."),
        op: &'static str => str_col("`AllReduce`, `AllGather`, `ReduceScatter`, `Broadcast`, `Send`, `Recv`, `GroupStart`, `GroupEnd`, `CommInitRank`."),
        result: String => str_col("ncclResult_t name, e.g. `ncclSuccess`, `ncclInvalidArgument`."),
        comm: u64 => u64_col("", "Communicator address (for CommInitRank: the one created, 0 on failure)."),
        rank: Option<i64> => opt_i64_col("", "CommInitRank: this process's rank."),
        nranks: Option<i64> => opt_i64_col("", "CommInitRank: communicator size."),
        count: Option<u64> => opt_u64_col("elements", "Element count (AllGather: send count; ReduceScatter: receive count)."),
        datatype: Option<String> => opt_str_col("ncclDataType_t name, e.g. `ncclFloat32`."),
        red_op: Option<String> => opt_str_col("Reduction: `ncclSum`, `ncclProd`, `ncclMax`, `ncclMin`, `ncclAvg` (AllReduce, ReduceScatter)."),
        peer: Option<i64> => opt_i64_col("", "Send/Recv peer rank, or Broadcast root."),
        bytes: Option<u64> => opt_u64_col("bytes", "count × datatype size: this rank's buffer size for the call."),
    }
}

table! {
    /// One libibverbs control-path call.
    pub struct VerbsCallRow in "verbs_calls" {
        description: "libibverbs control-path calls (uprobes): device open, PD/MR registration, CQ and \
        QP creation, `ibv_modify_qp` state transitions with the destination QPN and GID, destroy.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Call entry."),
        dur_ns: i64 => i64_col("ns", "Entry to return."),
        pid: u32 => u32_col("", "Calling process."),
        tid: u32 => u32_col("", "Calling thread."),
        op: &'static str => str_col("`ibv_open_device`, `ibv_alloc_pd`, `ibv_reg_mr`, `ibv_reg_mr_iova2`, `ibv_create_cq`, `ibv_create_qp`, `ibv_modify_qp`, `ibv_destroy_qp`."),
        ok: bool => bool_col("The call succeeded (non-null pointer, or 0)."),
        device: Option<String> => opt_str_col("ibv_open_device: device name (first 16 characters)."),
        qp_num: Option<u32> => opt_u32_col("", "QP number (create, modify, destroy)."),
        qp_type: Option<&'static str> => opt_str_col("`RC`, `UC`, `UD`, `RAW_PACKET`, `XRC_SEND`, `XRC_RECV`, `DRIVER`."),
        qp_state: Option<&'static str> => opt_str_col("ibv_modify_qp: target state when the state bit is in the mask (`INIT`, `RTR`, `RTS`, `ERR`, ...)."),
        dest_qp_num: Option<u32> => opt_u32_col("", "ibv_modify_qp: remote QPN when IBV_QP_DEST_QPN is in the mask."),
        dgid: Option<String> => opt_str_col("ibv_modify_qp: destination GID (IPv6 text; RoCE v2 IPv4 GIDs show as ::ffff:a.b.c.d) when IBV_QP_AV is in the mask."),
        attr_mask: Option<u32> => opt_u32_col("", "ibv_modify_qp: attribute mask."),
        mr_length: Option<u64> => opt_u64_col("bytes", "Registered memory region length."),
        cqe: Option<u32> => opt_u32_col("", "Requested completion queue entries."),
    }
}

table! {
    /// A queue pair as a flow: created, connected to a remote QP, destroyed.
    pub struct QpRow in "qps" {
        description: "One row per RDMA queue pair created during the run, keyed by (local QPN, \
        remote QPN, GID): the RDMA counterpart of `flows`. Written at destroy, or at the end of \
        the capture for QPs still alive (`destroyed` null).",
        host: String => str_col("Node hostname."),
        pid: u32 => u32_col("", "Process that created the QP."),
        cgroup: Option<String> => opt_str_col("That process's cgroup v2 (read in the kernel at ibv_create_qp), as a path below the cgroup2 mount; null if the cgroup was removed before the QP was written."),
        pod_uid: Option<String> => opt_str_col("Kubernetes pod UID, from the cgroup path; null outside a pod."),
        container_id: Option<String> => opt_str_col("Container runtime's id, from the cgroup path; null outside a container."),
        slurm_job: Option<String> => opt_str_col("Slurm job id, from the cgroup path; null outside a Slurm job."),
        qp_num: u32 => u32_col("", "Local QP number."),
        qp_type: &'static str => str_col("QP type (`RC`, `UD`, ...)."),
        created: i64 => ts_col("ibv_create_qp."),
        destroyed: Option<i64> => opt_ts_col("ibv_destroy_qp; null if alive at the end."),
        dest_qp_num: Option<u32> => opt_u32_col("", "Remote QP number (last set)."),
        dgid: Option<String> => opt_str_col("Remote GID (last set)."),
        last_state: Option<&'static str> => opt_str_col("Last state requested with ibv_modify_qp."),
        rts: Option<i64> => opt_ts_col("When the QP was moved to RTS (ready to send)."),
        modify_calls: u32 => u32_col("count", "ibv_modify_qp calls."),
    }
}

table! {
    /// A sampled RDMA work completion.
    pub struct VerbsCompletionRow in "verbs_completions" {
        description: "Sampled work completions from the provider's poll_cq (uprobe): every failed \
        completion and one successful completion in `--verbs-sample-every`. All completions are \
        counted in `qp_traffic`.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("When poll_cq returned the completion."),
        pid: u32 => u32_col("", "Polling process."),
        qp_num: u32 => u32_col("", "Local QP number; joins to `qps` and `qp_traffic`."),
        wr_id: u64 => u64_col("", "Work request id chosen by the application."),
        status: String => str_col("enum ibv_wc_status name, e.g. `SUCCESS`, `RETRY_EXC_ERR`."),
        opcode: String => str_col("enum ibv_wc_opcode name, e.g. `SEND`, `RDMA_WRITE`, `RECV`."),
        byte_len: u32 => u32_col("bytes", "Bytes transferred (receive completions)."),
        latency_ns: Option<u64> => opt_u64_col("ns", "Post to completion; null when the post was not seen."),
    }
}

table! {
    /// Data-path totals of one QP over the run, aggregated in the kernel.
    pub struct QpTrafficRow in "qp_traffic" {
        description: "Per-QP data path over the whole run (provider post_send/poll_cq uprobes, \
        aggregated in a kernel map): work requests, bytes, completions, errors and post-to-completion \
        latency. Written at the end of the capture.",
        host: String => str_col("Node hostname."),
        pid: u32 => u32_col("", "Process."),
        qp_num: u32 => u32_col("", "Local QP number; joins to `qps`."),
        post_calls: u64 => u64_col("count", "post_send calls."),
        wrs_posted: u64 => u64_col("count", "Work requests posted (up to 16 followed per call)."),
        bytes_posted: u64 => u64_col("bytes", "Sum of the posted scatter/gather lengths (up to 4 SGEs per request)."),
        completions: u64 => u64_col("count", "Completions polled (up to 16 followed per poll)."),
        completion_errors: u64 => u64_col("count", "Completions with a non-success status."),
        bytes_completed: u64 => u64_col("bytes", "Sum of completion byte_len (receives)."),
        latency_count: u64 => u64_col("count", "Completions whose post was seen."),
        latency_mean_ns: Option<f64> => opt_f64_col("ns", "Mean post-to-completion latency."),
        latency_min_ns: Option<u64> => opt_u64_col("ns", "Smallest post-to-completion latency."),
        latency_max_ns: Option<u64> => opt_u64_col("ns", "Largest post-to-completion latency."),
        opcodes: String => str_col("Posted opcodes (enum ibv_wr_opcode names), comma-separated."),
    }
}

table! {
    /// One address of one network interface of the node, once per run.
    pub struct InterfaceRow in "interfaces" {
        description: "The node's network interfaces and their addresses (in the recorder's network \
        namespace), once per run (`agent`: once per file interval): joins a flow's `local_addr` to the \
        NIC that carried it.",
        host: String => str_col("Node hostname."),
        run_id: String => str_col("Run of `scaletrace record`."),
        name: String => str_col("Interface name, e.g. `eth0`, `ib0`."),
        family: String => str_col("`ipv4` or `ipv6`."),
        addr: String => str_col("Address, text form as in `flows.local_addr`."),
        prefix_len: u32 => u32_col("bits", "Network prefix length."),
        numa_node: Option<i64> => opt_i64_col("", "NUMA node of the interface's PCI device (sysfs); null for virtual interfaces."),
        pci_bus_id: Option<String> => opt_str_col("PCI address of the device, e.g. `0000:17:00.0`; null for virtual interfaces."),
        speed_mbps: Option<u32> => opt_u32_col("Mbit/s", "Link speed (sysfs `speed`); null when unknown."),
        mtu: Option<u32> => opt_u32_col("bytes", "MTU."),
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
        info::<FlowWindowRow>(),
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
