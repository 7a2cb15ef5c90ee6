//! Types shared by the eBPF programs and the userspace loader.
//!
//! Everything here is `#[repr(C)]` plain data: the kernel writes these bytes into maps and the
//! ring buffer, userspace reads them back. Change a layout on both sides at once (they are built
//! from this one crate, so they cannot drift).
#![no_std]

/// `AF_INET` / `AF_INET6` as the kernel reports them.
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;

/// Ring buffer record kinds; every record starts with an [`EventHeader`].
pub const EVENT_FLOW_END: u32 = 1;
pub const EVENT_RTT_SAMPLE: u32 = 2;
pub const EVENT_RETRANSMIT: u32 = 3;
pub const EVENT_STATE_CHANGE: u32 = 4;
pub const EVENT_NCCL_CALL: u32 = 5;
pub const EVENT_VERBS_CALL: u32 = 6;
pub const EVENT_VERBS_COMPLETION: u32 = 7;
pub const EVENT_FLOW_WINDOW: u32 = 8;
/// Number of event kinds plus one (index 0 unused), sizing the per-kind counters.
pub const EVENT_KINDS: u32 = 9;

/// Per-CPU counter slots in the `STATS` map: `base + kind`.
pub const STAT_EMITTED: u32 = 0;
pub const STAT_RING_FULL: u32 = EVENT_KINDS;
pub const STAT_RATE_LIMITED: u32 = 2 * EVENT_KINDS;
/// Flows that did not pass the filters (counted once per connection).
pub const STAT_FILTERED_FLOWS: u32 = 3 * EVENT_KINDS;
/// Connections that could not be tracked because the flow table was full (`TRACKED`, sized by
/// `--max-flows`; counted once each, when established).
pub const STAT_FLOW_MAP_FULL: u32 = 3 * EVENT_KINDS + 1;
/// QPs given an entry in the per-QP data-path table (`QP_TRAFFIC`, an LRU map): those no longer
/// in it at the end were evicted with their traffic.
pub const STAT_QP_TRACKED: u32 = 3 * EVENT_KINDS + 2;
/// tcp_retransmit_skb hits for attempts the kernel did not send (`err` != 0: the original
/// still in the host's queue, no memory): not retransmits on the wire, so not recorded.
pub const STAT_RETRANSMITS_NOT_SENT: u32 = 3 * EVENT_KINDS + 3;
/// Connections that could not be tracked because the kernel had no memory for their state in
/// the socket's storage (counted once each, as `STAT_FLOW_MAP_FULL`).
pub const STAT_FLOW_NO_MEMORY: u32 = 3 * EVENT_KINDS + 4;
/// Flows that closed while the ring buffer was full and could not be kept for userspace's
/// sweep either (`UNSENT_ENDS` full or out of memory): lost.
pub const STAT_FLOW_ENDS_LOST: u32 = 3 * EVENT_KINDS + 5;
pub const STAT_SLOTS: u32 = 3 * EVENT_KINDS + 6;

/// Default capacity of the per-QP data-path table (`record --max-qps` sets it at load time).
pub const MAX_QPS: u32 = 16_384;

/// Default capacity of the in-kernel flow table (`record --max-flows` sets it at load time).
pub const MAX_FLOWS: u32 = 65_536;

/// Flow direction, from the sock_ops callback that opened it.
pub const DIRECTION_ACTIVE: u8 = 1;
pub const DIRECTION_PASSIVE: u8 = 2;

/// A counter this kernel does not give (`FlowStats::dsack_dups` where the kernel's BTF has
/// no such member): written as null, not 0.
pub const NOT_MEASURED: u32 = u32::MAX;

/// Field offsets of a TCP/sock tracepoint record, read from tracefs `format` files at load time
/// because they differ between kernel versions. `ABSENT` marks a field the kernel lacks.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracepointOffsets {
    pub oldstate: u16,
    pub newstate: u16,
    pub sport: u16,
    pub dport: u16,
    pub family: u16,
    pub protocol: u16,
    pub saddr: u16,
    pub daddr: u16,
    pub saddr_v6: u16,
    pub daddr_v6: u16,
    /// tcp_retransmit_skb's `err` (Linux 6.10+): the tracepoint fires for every attempt, and
    /// one the kernel did not send (the original still queued in the host: -EBUSY) is no
    /// retransmit on the wire.
    pub err: u16,
    /// The tracepoint's `skaddr`, the socket: its network namespace tells apart flows with the
    /// same tuple in two namespaces (`TrackedKey`).
    pub skaddr: u16,
}

impl TracepointOffsets {
    pub const ABSENT: u16 = u16::MAX;
    pub const NONE: Self = Self {
        oldstate: Self::ABSENT,
        newstate: Self::ABSENT,
        sport: Self::ABSENT,
        dport: Self::ABSENT,
        family: Self::ABSENT,
        protocol: Self::ABSENT,
        saddr: Self::ABSENT,
        daddr: Self::ABSENT,
        saddr_v6: Self::ABSENT,
        daddr_v6: Self::ABSENT,
        err: Self::ABSENT,
        skaddr: Self::ABSENT,
    };
}

/// Capture configuration, written into the eBPF object's `CONFIG` global before load.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Only flows with the local or the remote port in `[port_min, port_max]`.
    pub port_min: u16,
    pub port_max: u16,
    /// CIDR filter on the local or remote address; `cidr_family == 0` disables it.
    pub cidr_family: u16,
    pub cidr_prefix_len: u16,
    pub cidr_addr: [u8; 16],
    /// Only flows in this network namespace (its cookie); 0 = any namespace.
    pub netns_cookie: u64,
    /// Minimum spacing of RTT samples sent to userspace per flow; every RTT update is still
    /// aggregated in the kernel flow table.
    pub rtt_sample_interval_ns: u64,
    /// Send one verbs completion in every N to userspace (all are aggregated per QP).
    pub verbs_sample_every: u64,
    /// Per-CPU token bucket for per-packet events (retransmits): refill rate and burst.
    pub retransmit_events_per_sec: u64,
    pub retransmit_burst: u64,
    pub retransmit_tp: TracepointOffsets,
    pub synack_tp: TracepointOffsets,
    pub state_tp: TracepointOffsets,
    /// Byte offsets in the kernel's `struct tcp_sock` of `dsack_dups` and `reord_seen` (from
    /// its BTF, since the layout changes between kernels); `TracepointOffsets::ABSENT` when
    /// this kernel has no such member (the counters are then `NOT_MEASURED`, written as null).
    pub tcp_sock_dsack_dups: u16,
    pub tcp_sock_reord_seen: u16,
    pub _pad: [u8; 4],
    /// Wake the loader only once this many bytes wait in the ring buffer; it drains the rest
    /// on a timer (`RING_DRAIN_INTERVAL`). 0 = the kernel's default, a wakeup whenever the
    /// loader has caught up, which is nearly every event.
    pub ring_wakeup_bytes: u64,
    /// The process whose getppid() calls the benchmark's synthetic source turns into events
    /// (`--bench-source-pid`); 0 = none (the source is then not attached either).
    pub bench_source_tgid: u32,
    /// Offsets (from the kernel's BTF) on the way from a socket to its cgroup v2 id: the
    /// `struct cgroup *` in `struct sock` (`sk_cgrp_data.cgroup`), `kn` in `struct cgroup`, `id`
    /// in `struct kernfs_node`; `TracepointOffsets::ABSENT` when one is missing (the flow's
    /// cgroup is then unknown, 0).
    pub sock_cgroup: u16,
    pub cgroup_kn: u16,
    pub kernfs_node_id: u16,
    /// Offsets (from the kernel's BTF) from a socket to its network namespace's cookie: the
    /// `struct net *` in `struct sock_common` (`skc_net`) and `net_cookie` in `struct net`.
    /// `TracepointOffsets::ABSENT` when one is missing or a tracepoint in use has no `skaddr`:
    /// flows are then indexed by tuple alone (`TrackedKey::netns_cookie` 0).
    pub sock_net: u16,
    pub net_cookie: u16,
    pub _pad2: [u8; 2],
    /// Length of a flow's RTT histogram window (`FlowWindow`), ns.
    pub flow_window_ns: u64,
    /// Wall clock minus kernel monotonic clock at load, ns: windows start on whole multiples
    /// of `flow_window_ns` of UTC (as the clock was at load), so every node's line up.
    pub flow_window_offset_ns: u64,
}

impl Config {
    pub const DEFAULT: Self = Self {
        port_min: 0,
        port_max: u16::MAX,
        cidr_family: 0,
        cidr_prefix_len: 0,
        cidr_addr: [0; 16],
        netns_cookie: 0,
        rtt_sample_interval_ns: 10_000_000,
        verbs_sample_every: 16,
        retransmit_events_per_sec: 100_000,
        retransmit_burst: 10_000,
        retransmit_tp: TracepointOffsets::NONE,
        synack_tp: TracepointOffsets::NONE,
        state_tp: TracepointOffsets::NONE,
        tcp_sock_dsack_dups: TracepointOffsets::ABSENT,
        tcp_sock_reord_seen: TracepointOffsets::ABSENT,
        _pad: [0; 4],
        ring_wakeup_bytes: 0,
        bench_source_tgid: 0,
        sock_cgroup: TracepointOffsets::ABSENT,
        cgroup_kn: TracepointOffsets::ABSENT,
        kernfs_node_id: TracepointOffsets::ABSENT,
        sock_net: TracepointOffsets::ABSENT,
        net_cookie: TracepointOffsets::ABSENT,
        _pad2: [0; 2],
        flow_window_ns: 1_000_000_000,
        flow_window_offset_ns: 0,
    };
}

/// A tracked flow's entry in the tracepoints' index (`TRACKED`): its tuple and its network
/// namespace's cookie (0 where the tracepoints cannot read it), since two namespaces can hold
/// connections with the same tuple (two pods' loopback connections).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TrackedKey {
    pub tuple: FlowTuple,
    pub netns_cookie: u64,
}

/// A TCP connection seen from the local socket. IPv4 addresses sit in the first 4 bytes of the
/// address arrays; the rest is zero so the struct can be a hash key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowTuple {
    pub family: u16,
    pub local_port: u16,
    pub remote_port: u16,
    pub _pad: u16,
    pub local_addr: [u8; 16],
    pub remote_addr: [u8; 16],
}

/// Buckets of a flow's RTT histogram (`FlowWindow::buckets`): log-linear, four per power of two
/// (bucket `i` holds `[rtt_bucket_lower_us(i), rtt_bucket_lower_us(i + 1))` µs), exact below
/// 4 µs, the last open-ended from 3.67 s up. A value stands for its bucket within 12.5 %.
pub const RTT_HIST_BUCKETS: usize = 84;

/// The bucket of a smoothed RTT of `us` microseconds. Shared by the kernel (at every RTT
/// update) and userspace; written without a count-leading-zeros instruction, which BPF lacks.
#[inline(always)]
pub fn rtt_bucket(us: u32) -> usize {
    if us < 4 {
        return us as usize;
    }
    // e = floor(log2(us)), by halving the range five times
    let (mut x, mut e) = (us, 0u32);
    if x >= 1 << 16 {
        x >>= 16;
        e += 16;
    }
    if x >= 1 << 8 {
        x >>= 8;
        e += 8;
    }
    if x >= 1 << 4 {
        x >>= 4;
        e += 4;
    }
    if x >= 1 << 2 {
        x >>= 2;
        e += 2;
    }
    if x >= 1 << 1 {
        e += 1;
    }
    // the two bits below the leading one pick one of four sub-buckets of [2^e, 2^(e+1))
    let i = (4 * (e - 1) + ((us >> (e - 2)) & 3)) as usize;
    if i >= RTT_HIST_BUCKETS {
        RTT_HIST_BUCKETS - 1
    } else {
        i
    }
}

/// The smallest RTT (µs) that falls into bucket `i`.
pub const fn rtt_bucket_lower_us(i: usize) -> u32 {
    if i < 4 {
        i as u32
    } else {
        ((4 + i % 4) as u32) << (i / 4 - 1)
    }
}

/// A flow's cumulative counters at one moment: at a window's opening, and at its end.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowCounters {
    pub bytes_acked: u64,
    pub bytes_received: u64,
    /// `FlowStats::rto_recovery_ns` and `loss_recovery_ns`: a stall or recovery counts when
    /// it ends.
    pub rto_recovery_ns: u64,
    pub loss_recovery_ns: u64,
    pub total_retrans: u32,
    pub retrans_events: u32,
    pub rto_count: u32,
    pub _pad: u32,
}

/// One flow in one window of `Config::flow_window_ns`: every RTT update (not only the sampled
/// ones of `--rtt-sample-interval`) in a log-linear histogram, so its tails are exact within
/// a bucket, and the flow's counters when the window opened. A window opens at the flow's
/// first RTT update, retransmit or timeout in it and is sent at the first one in a later
/// window (or with the flow's end): what happens while no window is open (an idle flow, a
/// stall without retransmits) counts in the window before.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FlowWindow {
    /// Kernel monotonic ns at which the window starts; 0 before the flow's first window.
    pub start_ns: u64,
    /// Kernel monotonic ns at which it ends.
    pub end_ns: u64,
    /// Sum of the window's smoothed RTTs, µs.
    pub sum_us: u64,
    /// RTT updates in the window (the buckets' sum).
    pub count: u32,
    pub min_us: u32,
    pub max_us: u32,
    pub _pad: u32,
    pub buckets: [u32; RTT_HIST_BUCKETS],
    /// The flow's counters when the window opened.
    pub opened: WindowCounters,
}

impl Default for FlowWindow {
    fn default() -> Self {
        // SAFETY: plain integers: all-zero bytes are a valid value.
        unsafe { core::mem::zeroed() }
    }
}

/// A flow's finished window, with its counters at the end (the opening of the next one).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowWindowEvent {
    pub header: EventHeader,
    pub cookie: u64,
    pub window: FlowWindow,
    pub closed: WindowCounters,
}

/// Per-flow aggregate kept in the socket's own storage (`FLOW_STATE`), so that every RTT update
/// and retransmit is counted without crossing the ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowStats {
    pub tuple: FlowTuple,
    pub cookie: u64,
    pub netns_cookie: u64,
    /// Kernel monotonic ns of connect() (active) or of the accept-side establishment (passive).
    pub start_ns: u64,
    /// Kernel monotonic ns of the transition to CLOSE; 0 while open.
    pub end_ns: u64,
    /// Last RTT sample sent to userspace, for per-flow sampling.
    pub last_sample_ns: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub srtt_sum_us: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub data_segs_out: u32,
    pub data_segs_in: u32,
    pub total_retrans: u32,
    /// Retransmit callbacks seen for this flow (each a retransmitted segment batch).
    pub retrans_events: u32,
    pub rtt_count: u32,
    pub srtt_min_us: u32,
    pub srtt_max_us: u32,
    pub srtt_last_us: u32,
    pub min_rtt_us: u32,
    /// Retransmit timeouts (BPF_SOCK_OPS_RTO_CB): the loss recovery that stalls a flow for at
    /// least the minimum RTO (200 ms on Linux), unlike fast retransmits.
    pub rto_count: u32,
    pub direction: u8,
    /// 1 when the flow closed but its end event could not be sent: userspace sweeps these.
    pub closed_unsent: u8,
    /// 1 for a matching connection that could not be tracked (the flow table full, or no
    /// kernel memory for its state): only its counters at close (sent straight from the close
    /// callback).
    pub untracked: u8,
    /// 1 for a connection that was open before this run (its callbacks were enabled by an
    /// earlier run): tracked from its first segment in this run, with the socket's
    /// totals so far.
    pub adopted: u8,
    pub _pad: [u8; 4],
    /// Kernel monotonic ns of the first timeout of the current stall; 0 when none is pending.
    pub rto_at_ns: u64,
    /// Sum over stalls of the time from their first timeout to the next ACK that carried an
    /// RTT sample (new data acknowledged): the part of each stall after the timer fired.
    pub rto_recovery_ns: u64,
    /// Kernel monotonic ns of the first retransmit of the current loss recovery (fast or after
    /// a timeout); 0 when no retransmitted segment is outstanding.
    pub recovery_at_ns: u64,
    /// Sum over loss recoveries of the time from their first retransmit to the first ACK that
    /// leaves no retransmitted segment outstanding.
    pub loss_recovery_ns: u64,
    /// Duplicate segments the peer reported with a DSACK (tcp_sock.dsack_dups): retransmits
    /// that were spurious, the original having arrived late (reordering, delay variation), not
    /// lost. Read where the kernel's BTF gives its offset.
    pub dsack_dups: u32,
    /// Reordering events the sender detected (tcp_sock.reord_seen).
    pub reord_seen: u32,
    /// The cgroup v2 id of the socket's cgroup (where the process that created it ran: a pod's
    /// container, a Slurm job step), read once at the flow's start; 0 when unknown.
    pub cgroup_id: u64,
    /// The window now open; sent when an RTT update, retransmit or timeout falls into a later
    /// window, and with the flow's end.
    pub flow_window: FlowWindow,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct EventHeader {
    pub kind: u32,
    pub _pad: u32,
    /// Kernel monotonic ns (bpf_ktime_get_ns).
    pub ts_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowEndEvent {
    pub header: EventHeader,
    pub stats: FlowStats,
}

/// A sampled RTT/congestion snapshot from the sock_ops RTT callback.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RttSampleEvent {
    pub header: EventHeader,
    pub cookie: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub srtt_us: u32,
    pub min_rtt_us: u32,
    pub snd_cwnd: u32,
    pub snd_ssthresh: u32,
    pub packets_out: u32,
    pub retrans_out: u32,
    pub lost_out: u32,
    pub sacked_out: u32,
    pub total_retrans: u32,
    pub mss: u32,
    pub rate_delivered: u32,
    pub rate_interval_us: u32,
    /// The flow's `FlowStats::dsack_dups` and `reord_seen` so far.
    pub dsack_dups: u32,
    pub reord_seen: u32,
}

/// One `tcp:tcp_retransmit_skb` or `tcp:tcp_retransmit_synack` hit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RetransmitEvent {
    pub header: EventHeader,
    pub tuple: FlowTuple,
    /// Socket cookie of the tracked flow; 0 when the flow is not tracked (SYN-ACKs).
    pub cookie: u64,
    /// TCP state (include/net/tcp_states.h numbering); 0 when the tracepoint has none.
    pub state: u32,
    /// 1 for a SYN-ACK retransmit.
    pub synack: u32,
}

/// One `sock:inet_sock_set_state` transition of a tracked TCP flow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StateChangeEvent {
    pub header: EventHeader,
    pub tuple: FlowTuple,
    /// Socket cookie of the tracked flow.
    pub cookie: u64,
    pub oldstate: u32,
    pub newstate: u32,
    /// Current task when the transition ran; meaningful only in process context (connect,
    /// close), where userspace uses it to attribute the flow.
    pub pid: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
}

/// NCCL API functions traced with uprobes; the value is `NcclCallEvent::op`.
pub const NCCL_ALL_REDUCE: u32 = 0;
pub const NCCL_ALL_GATHER: u32 = 1;
pub const NCCL_REDUCE_SCATTER: u32 = 2;
pub const NCCL_BROADCAST: u32 = 3;
pub const NCCL_SEND: u32 = 4;
pub const NCCL_RECV: u32 = 5;
pub const NCCL_GROUP_START: u32 = 6;
pub const NCCL_GROUP_END: u32 = 7;
pub const NCCL_COMM_INIT_RANK: u32 = 8;
/// (op, exported symbol) of every traced NCCL function.
pub const NCCL_FUNCTIONS: [(u32, &str); 9] = [
    (NCCL_ALL_REDUCE, "ncclAllReduce"),
    (NCCL_ALL_GATHER, "ncclAllGather"),
    (NCCL_REDUCE_SCATTER, "ncclReduceScatter"),
    (NCCL_BROADCAST, "ncclBroadcast"),
    (NCCL_SEND, "ncclSend"),
    (NCCL_RECV, "ncclRecv"),
    (NCCL_GROUP_START, "ncclGroupStart"),
    (NCCL_GROUP_END, "ncclGroupEnd"),
    (NCCL_COMM_INIT_RANK, "ncclCommInitRank"),
];

/// One NCCL API call: arguments at entry, result and time at return.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NcclCallEvent {
    /// `ts_ns` is the return time.
    pub header: EventHeader,
    pub entry_ns: u64,
    pub pid_tgid: u64,
    /// The communicator (for ncclCommInitRank: the one it created, 0 if it failed).
    pub comm: u64,
    pub count: u64,
    pub sendbuff: u64,
    pub recvbuff: u64,
    pub op: u32,
    pub result: i32,
    pub datatype: u32,
    pub red_op: u32,
    /// Send/Recv peer, or Broadcast root; -1 when not applicable.
    pub peer: i32,
    pub nranks: i32,
    pub rank: i32,
    pub _pad: u32,
}

/// Key of a traced library call in flight (NCCL, libibverbs): one per thread and function,
/// from its entry probe to its return probe.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallKey {
    pub pid_tgid: u64,
    pub op: u32,
    pub _pad: u32,
}

/// libibverbs control-path functions traced with uprobes; the value is `VerbsCallEvent::op`.
pub const VERBS_OPEN_DEVICE: u32 = 0;
pub const VERBS_ALLOC_PD: u32 = 1;
pub const VERBS_REG_MR: u32 = 2;
pub const VERBS_REG_MR_IOVA2: u32 = 3;
pub const VERBS_CREATE_CQ: u32 = 4;
pub const VERBS_CREATE_QP: u32 = 5;
pub const VERBS_MODIFY_QP: u32 = 6;
pub const VERBS_DESTROY_QP: u32 = 7;
pub const VERBS_FUNCTIONS: [(u32, &str); 8] = [
    (VERBS_OPEN_DEVICE, "ibv_open_device"),
    (VERBS_ALLOC_PD, "ibv_alloc_pd"),
    (VERBS_REG_MR, "ibv_reg_mr"),
    (VERBS_REG_MR_IOVA2, "ibv_reg_mr_iova2"),
    (VERBS_CREATE_CQ, "ibv_create_cq"),
    (VERBS_CREATE_QP, "ibv_create_qp"),
    (VERBS_MODIFY_QP, "ibv_modify_qp"),
    (VERBS_DESTROY_QP, "ibv_destroy_qp"),
];

/// Offsets into libibverbs structs (infiniband/verbs.h; part of its stable ABI).
pub mod verbs_abi {
    pub const DEVICE_NAME: u64 = 24;
    pub const QP_QP_NUM: u64 = 52;
    pub const QP_QP_TYPE: u64 = 60;
    pub const QP_ATTR_QP_STATE: u64 = 0;
    pub const QP_ATTR_DEST_QP_NUM: u64 = 28;
    pub const QP_ATTR_DGID: u64 = 56;
    /// ibv_qp_attr_mask bits.
    pub const MASK_STATE: u32 = 1;
    pub const MASK_AV: u32 = 1 << 7;
    pub const MASK_DEST_QPN: u32 = 1 << 20;
    /// struct ibv_send_wr / ibv_recv_wr
    pub const WR_ID: u64 = 0;
    pub const WR_NEXT: u64 = 8;
    pub const WR_SG_LIST: u64 = 16;
    pub const SEND_WR_NUM_SGE: u64 = 24;
    pub const SEND_WR_OPCODE: u64 = 28;
    /// struct ibv_sge
    pub const SGE_LENGTH: u64 = 8;
    pub const SGE_SIZE: u64 = 16;
    /// struct ibv_wc
    pub const WC_WR_ID: u64 = 0;
    pub const WC_STATUS: u64 = 8;
    pub const WC_OPCODE: u64 = 12;
    pub const WC_BYTE_LEN: u64 = 20;
    pub const WC_QP_NUM: u64 = 28;
    pub const WC_SIZE: u64 = 48;
    /// Work requests followed per ibv_post_send call, SGEs per request, completions per poll.
    pub const MAX_WRS: u64 = 16;
    pub const MAX_SGES: u64 = 4;
    pub const MAX_WCS: u64 = 16;
}

/// Provider data-path functions (ibv_post_send / ibv_poll_cq are inline in verbs.h and call
/// these through the context's ops table), tried with each provider prefix.
pub const VERBS_PROVIDER_PREFIXES: [&str; 10] = [
    "mlx5", "mlx4", "rxe", "siw", "efa", "bnxt_re", "hns", "irdma", "qedr", "mana",
];

/// (tgid, local QPN): the data-path aggregation key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QpKey {
    pub tgid: u32,
    pub qp_num: u32,
}

/// A work request in flight: its QP and caller-chosen id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WrKey {
    pub tgid: u32,
    pub qp_num: u32,
    pub wr_id: u64,
}

/// Per-QP data-path aggregate, kept in the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct QpTraffic {
    pub post_calls: u64,
    pub wrs_posted: u64,
    pub bytes_posted: u64,
    pub completions: u64,
    pub completion_errors: u64,
    pub bytes_completed: u64,
    pub latency_count: u64,
    pub latency_sum_ns: u64,
    pub latency_min_ns: u64,
    pub latency_max_ns: u64,
    /// Bit n set: opcode n was posted (enum ibv_wr_opcode).
    pub opcodes: u64,
}

/// One sampled work completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VerbsCompletionEvent {
    pub header: EventHeader,
    pub wr_id: u64,
    /// Post to completion; 0 when the post was not seen.
    pub latency_ns: u64,
    pub tgid: u32,
    pub qp_num: u32,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub _pad: u32,
}

/// One libibverbs control-path call: arguments at entry, result at return.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VerbsCallEvent {
    /// `ts_ns` is the return time.
    pub header: EventHeader,
    pub entry_ns: u64,
    pub pid_tgid: u64,
    /// Returned pointer (0 = failure) or integer result.
    pub ret: u64,
    /// The first pointer argument (context, PD or QP).
    pub obj: u64,
    /// Memory region length.
    pub length: u64,
    pub op: u32,
    pub qp_num: u32,
    pub dest_qp_num: u32,
    pub qp_state: u32,
    pub attr_mask: u32,
    pub qp_type: u32,
    pub cqe: u32,
    pub _pad: u32,
    pub dgid: [u8; 16],
    /// First 16 bytes of the device name (ibv_open_device).
    pub device: [u8; 16],
    /// The calling task's cgroup v2 id (its job: `qps.pod_uid`, `qps.slurm_job`), read in the
    /// kernel at the call, so a process that exits before the loader reads the event keeps it.
    pub cgroup_id: u64,
}

// The sizes the kernel and userspace exchange, byte for byte (each struct's padding is written
// out as fields). Checked at compile time, so a field added to one struct fails the eBPF build
// and the loader's alike until its size here is updated on purpose.
macro_rules! assert_size {
    ($($t:ty => $n:expr,)+) => {$(
        const _: () = assert!(core::mem::size_of::<$t>() == $n, concat!("size of ", stringify!($t)));
    )+};
}

assert_size! {
    TracepointOffsets => 24,
    Config => 184,
    FlowTuple => 40,
    TrackedKey => 48,
    FlowStats => 632,
    EventHeader => 16,
    WindowCounters => 48,
    FlowWindow => 424,
    FlowWindowEvent => 496,
    RttSampleEvent => 96,
    RetransmitEvent => 72,
    StateChangeEvent => 96,
    FlowEndEvent => 648,
    NcclCallEvent => 96,
    CallKey => 16,
    VerbsCallEvent => 128,
    QpKey => 8,
    QpTraffic => 88,
    VerbsCompletionEvent => 56,
    WrKey => 16,
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: all are repr(C) plain data with explicit padding fields and no invalid bit patterns.
    unsafe impl aya::Pod for Config {}
    unsafe impl aya::Pod for FlowTuple {}
    unsafe impl aya::Pod for TrackedKey {}
    unsafe impl aya::Pod for FlowStats {}
    unsafe impl aya::Pod for QpKey {}
    unsafe impl aya::Pod for QpTraffic {}
}
