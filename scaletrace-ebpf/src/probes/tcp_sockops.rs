//! sock_ops, attached to a cgroup v2: the flow table. It applies the filters once per
//! connection, keeps per-flow aggregates in the socket's own storage (`FLOW_STATE`, so
//! per-packet work never crosses the ring buffer), sends sampled RTT snapshots, and a flow-end
//! record at close.
use aya_ebpf::{
    bindings::{
        BPF_F_NO_PREALLOC, BPF_NOEXIST, BPF_SK_STORAGE_GET_F_CREATE,
        BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB, BPF_SOCK_OPS_HDR_OPT_LEN_CB,
        BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, BPF_SOCK_OPS_RETRANS_CB, BPF_SOCK_OPS_RETRANS_CB_FLAG,
        BPF_SOCK_OPS_RTO_CB, BPF_SOCK_OPS_RTO_CB_FLAG, BPF_SOCK_OPS_RTT_CB,
        BPF_SOCK_OPS_RTT_CB_FLAG, BPF_SOCK_OPS_STATE_CB, BPF_SOCK_OPS_STATE_CB_FLAG,
        BPF_SOCK_OPS_TCP_CONNECT_CB,
    },
    btf_maps::SkStorage,
    helpers::{
        bpf_get_netns_cookie, bpf_get_socket_cookie, bpf_probe_read_kernel, bpf_skc_to_tcp_sock,
        generated::{bpf_sk_storage_delete, bpf_sk_storage_get},
    },
    macros::{btf_map, map, sock_ops},
    maps::HashMap,
    programs::SockOpsContext,
    EbpfContext,
};
use aya_log_ebpf::debug;
use scaletrace_common::*;

use super::{kernel_read::kernel_u64, tcp_adopt::ITER_MARKED};
use crate::{
    emit::{count, emit_in_place, now_ns},
    filter::{cidr_matches, port_matches},
};

const TCP_CLOSE: u32 = 7;
/// A map insert's answer when the key is there already (BPF_NOEXIST).
const EEXIST: i32 = 17;

/// Each tracked socket's flow aggregate (with its open window, 632 bytes), in the socket's own
/// storage: found at every ACK from the callback's socket in one helper call (a cookie-keyed
/// hash cost a cookie call and a hash lookup there: ~110 ns against ~57, docs/per-ack-parts.md),
/// it takes kernel memory only while its socket lives and goes with it. Userspace reads the
/// open flows through `dump_open_flows` (a TCP socket iterator): socket storage has no key it
/// could look up.
#[btf_map]
pub(crate) static FLOW_STATE: SkStorage<FlowStats> = SkStorage::new();

/// Flows that closed while the ring buffer was full, by socket cookie: their storage goes with
/// the socket, so the aggregate is kept here until userspace sweeps it (no flow is lost).
#[map]
static UNSENT_ENDS: HashMap<u64, FlowStats> =
    HashMap::with_max_entries(MAX_FLOWS, BPF_F_NO_PREALLOC);

/// Tuple and network namespace of a tracked flow -> socket cookie; lets the tracepoints (which
/// see no cookie) apply exactly the filters sock_ops applied. Its size is the flow table's
/// limit (`--max-flows`): a flow is tracked only when it has an entry here, or when the
/// tracepoints cannot read namespaces and another namespace's flow holds its tuple.
#[map]
pub(crate) static TRACKED: HashMap<TrackedKey, u64> = HashMap::with_max_entries(MAX_FLOWS, 0);

/// Whether TRACKED is keyed by namespace too: only where the tracepoints can read a socket's
/// namespace cookie (the loader found `sock_common.skc_net` and `net.net_cookie` in BTF).
#[inline(always)]
pub(crate) fn netns_keyed() -> bool {
    config!(sock_net) != TracepointOffsets::ABSENT
        && config!(net_cookie) != TracepointOffsets::ABSENT
}

/// A flow's key in TRACKED: with its namespace's cookie when the tracepoints can read it.
#[inline(always)]
pub(crate) fn tracked_key(tuple: FlowTuple, netns_cookie: u64) -> TrackedKey {
    TrackedKey {
        tuple,
        netns_cookie: if netns_keyed() { netns_cookie } else { 0 },
    }
}

#[sock_ops]
pub fn scaletrace_sockops(ctx: SockOpsContext) -> u32 {
    let _ = handle_sockops(&ctx);
    1
}

#[inline(always)]
fn sockops_tuple(ops: *const aya_ebpf::bindings::bpf_sock_ops) -> FlowTuple {
    // Every ctx field is loaded unconditionally and straight from the ctx pointer: the verifier
    // rejects loads through a ctx pointer the compiler has offset and carried across a branch.
    // SAFETY: `ops` is the program's context, valid for the whole run; the verifier checks
    // each field access against the context's layout.
    let (family, local_port, remote_raw, local4, remote4, local6, remote6) = unsafe {
        (
            core::ptr::read_volatile(&(*ops).family),
            core::ptr::read_volatile(&(*ops).local_port),
            core::ptr::read_volatile(&(*ops).remote_port),
            core::ptr::read_volatile(&(*ops).local_ip4),
            core::ptr::read_volatile(&(*ops).remote_ip4),
            [
                core::ptr::read_volatile(&(*ops).local_ip6[0]),
                core::ptr::read_volatile(&(*ops).local_ip6[1]),
                core::ptr::read_volatile(&(*ops).local_ip6[2]),
                core::ptr::read_volatile(&(*ops).local_ip6[3]),
            ],
            [
                core::ptr::read_volatile(&(*ops).remote_ip6[0]),
                core::ptr::read_volatile(&(*ops).remote_ip6[1]),
                core::ptr::read_volatile(&(*ops).remote_ip6[2]),
                core::ptr::read_volatile(&(*ops).remote_ip6[3]),
            ],
        )
    };
    let mut tuple = FlowTuple {
        family: family as u16,
        local_port: local_port as u16,
        remote_port: remote_port(remote_raw),
        ..FlowTuple::default()
    };
    if tuple.family == AF_INET {
        tuple.local_addr[..4].copy_from_slice(&local4.to_ne_bytes());
        tuple.remote_addr[..4].copy_from_slice(&remote4.to_ne_bytes());
    } else {
        let mut i = 0;
        while i < 4 {
            tuple.local_addr[i * 4..i * 4 + 4].copy_from_slice(&local6[i].to_ne_bytes());
            tuple.remote_addr[i * 4..i * 4 + 4].copy_from_slice(&remote6[i].to_ne_bytes());
            i += 1;
        }
    }
    tuple
}

/// `remote_port` is network byte order; since Linux 5.? the kernel places it in the upper 16 bits
/// of the u32 (on little endian), older kernels in the lower 16 bits.
#[inline(always)]
fn remote_port(raw: u32) -> u16 {
    if raw & 0xffff == 0 {
        u32::from_be(raw) as u16
    } else {
        u16::from_be(raw as u16)
    }
}

/// The socket's cookie: the flow's id, stable for the socket's life.
#[inline(always)]
fn socket_cookie(ctx: &SockOpsContext) -> u64 {
    // SAFETY: the context of a sock_ops program, the argument this helper takes there.
    unsafe { bpf_get_socket_cookie(ctx.as_ptr()) }
}

/// The cookie of the socket's network namespace.
#[inline(always)]
fn netns_cookie(ctx: &SockOpsContext) -> u64 {
    // SAFETY: the context of a sock_ops program, the argument this helper takes there.
    unsafe { bpf_get_netns_cookie(ctx.as_ptr()) }
}

/// The callback's view of the socket (counters, RTT, state).
#[inline(always)]
fn sock_ops(ctx: &SockOpsContext) -> &aya_ebpf::bindings::bpf_sock_ops {
    // SAFETY: the program's context, valid for the whole run; the verifier checks each field
    // access against the context's layout.
    unsafe { &*ctx.ops }
}

/// The callback's socket, when it is a full one (not a request or time-wait socket).
#[inline(always)]
fn callback_socket(
    ops: *const aya_ebpf::bindings::bpf_sock_ops,
) -> *mut aya_ebpf::bindings::bpf_sock {
    // SAFETY: a ctx field load, unconditional and straight from the ctx pointer (see
    // `sockops_tuple`); the verifier types it as a socket pointer or null.
    unsafe { core::ptr::read_volatile(&(*ops).__bindgen_anon_2.sk) }
}

/// The flow's aggregate in the socket's storage, to update in place; created (all zero) when
/// `create` and there is none.
#[inline(always)]
fn flow_mut(ctx: &SockOpsContext, create: bool) -> Option<&'static mut FlowStats> {
    let sk = callback_socket(ctx.ops);
    if sk.is_null() {
        return None;
    }
    let flags = if create {
        BPF_SK_STORAGE_GET_F_CREATE as u64
    } else {
        0
    };
    // SAFETY: the map is FLOW_STATE (its address is what the loader relocates to the map) and
    // `sk` a non-null socket from the context; a null initial value creates a zeroed one.
    let flow = unsafe {
        bpf_sk_storage_get(
            core::ptr::addr_of!(FLOW_STATE).cast_mut().cast(),
            sk.cast(),
            core::ptr::null_mut(),
            flags,
        )
    } as *mut FlowStats;
    // SAFETY: the storage is this socket's: a socket's callbacks run one at a time (under its
    // lock) and the storage lives as long as the socket, so no other run writes or reuses it
    // meanwhile; userspace only reads it (through the iterator).
    unsafe { flow.as_mut() }
}

/// Frees the socket's flow aggregate (its row is sent or kept in `UNSENT_ENDS`).
#[inline(always)]
fn forget_flow(ctx: &SockOpsContext) {
    let sk = callback_socket(ctx.ops);
    if !sk.is_null() {
        // SAFETY: as in `flow_mut`.
        unsafe {
            bpf_sk_storage_delete(core::ptr::addr_of!(FLOW_STATE).cast_mut().cast(), sk.cast())
        };
    }
}

#[inline(always)]
fn handle_sockops(ctx: &SockOpsContext) -> Result<(), i64> {
    let op = ctx.op();
    let family = ctx.family() as u16;
    if family != AF_INET && family != AF_INET6 {
        return Ok(());
    }
    match op {
        BPF_SOCK_OPS_TCP_CONNECT_CB => start_flow(ctx, DIRECTION_ACTIVE, Look::First),
        BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB => {
            // Connect happened before we attached, or the flow was not created: try now.
            if flow_mut(ctx, false).is_none() {
                // A flow filtered at connect() comes here too: count it only once.
                start_flow(ctx, DIRECTION_ACTIVE, Look::Again)?;
            }
            Ok(())
        }
        BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB => start_flow(ctx, DIRECTION_PASSIVE, Look::First),
        BPF_SOCK_OPS_RTT_CB => on_rtt(ctx),
        BPF_SOCK_OPS_HDR_OPT_LEN_CB => on_next_segment(ctx),
        BPF_SOCK_OPS_RETRANS_CB => on_retransmit(ctx),
        BPF_SOCK_OPS_RTO_CB => on_rto(ctx),
        BPF_SOCK_OPS_STATE_CB => {
            if ctx.arg(1) == TCP_CLOSE {
                end_flow(ctx)
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// How a flow comes to `start_flow`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Look {
    /// connect() or the accept side's establishment: counted if filtered out
    First,
    /// establishment of an active open not seen (or not stored) at connect()
    Again,
    /// an ACK of a socket whose callbacks an earlier run enabled (an agent restart or upgrade
    /// while a job runs): the connection is older than this run
    Adopt,
}

/// The socket is sending a segment (data or an ACK: the kernel asks how much header option
/// space the program wants, and it wants none), and this run's iterator asked for this
/// callback: adopt it now. A connection that only receives (NCCL's socket transport sends each
/// way on its own connection) gets no RTT callback, so adopted at its next RTT update it was
/// never adopted: an agent restarted under a job lost the receiving side of its traffic. The
/// callback is turned off here at once, whoever adopts the socket (incoming segments were no
/// use: the kernel's fast path for in-order data skips their callback).
#[inline(always)]
fn on_next_segment(ctx: &SockOpsContext) -> Result<(), i64> {
    if callback_socket(ctx.ops).is_null() {
        // a request socket's SYN-ACK: not a connection to adopt (yet)
        return Ok(());
    }
    let cookie = socket_cookie(ctx);
    // SAFETY: only whether the entry exists is read, not the entry.
    let marked = unsafe { ITER_MARKED.get(&cookie) }.is_some();
    if flow_mut(ctx, false).is_some() {
        forget_iter_mark(ctx, cookie, OUR_CB_FLAGS);
        return Ok(());
    }
    // Unmarked: someone else's next-segment callback (an earlier run's left on, whose socket
    // went idle before it sent anything). Adopted here too when a scaletrace run turned the
    // RTT callback on, as `on_rtt` adopts it; the flag is not ours to turn off.
    if !marked && ctx.cb_flags() & BPF_SOCK_OPS_RTT_CB_FLAG == 0 {
        return Ok(());
    }
    start_flow(ctx, 0, Look::Adopt)
}

/// The iterator's work on this socket is done (adopted, or left out by the filters): its mark
/// goes, and the callback flags it turned on go off but those in `keep` (our callbacks, for a
/// socket adopted).
#[inline(always)]
fn forget_iter_mark(ctx: &SockOpsContext, cookie: u64, keep: u32) {
    // SAFETY: a 4-byte value copied out at once.
    let Some(turned_on) = unsafe { ITER_MARKED.get(&cookie) }.copied() else {
        return;
    };
    let _ = ITER_MARKED.remove(&cookie);
    let off = turned_on & !keep;
    if off != 0 {
        let _ = ctx.set_cb_flags((ctx.cb_flags() & !off) as i32);
    }
}

/// This program's per-socket callbacks.
pub(crate) const OUR_CB_FLAGS: u32 = BPF_SOCK_OPS_RTT_CB_FLAG
    | BPF_SOCK_OPS_STATE_CB_FLAG
    | BPF_SOCK_OPS_RETRANS_CB_FLAG
    | BPF_SOCK_OPS_RTO_CB_FLAG;

/// The socket's tuple and network namespace cookie when they pass this run's filters; else
/// the tuple (for the log).
#[inline(always)]
fn wanted_socket(ctx: &SockOpsContext) -> Result<(FlowTuple, u64), FlowTuple> {
    let tuple = sockops_tuple(ctx.ops);
    let netns_cookie = netns_cookie(ctx);
    let wanted_netns = config!(netns_cookie);
    if !port_matches(&tuple)
        || !cidr_matches(&tuple)
        || (wanted_netns != 0 && wanted_netns != netns_cookie)
    {
        return Err(tuple);
    }
    Ok((tuple, netns_cookie))
}

/// Names a zeroed aggregate as this socket's flow.
#[inline(always)]
fn init_flow(flow: &mut FlowStats, tuple: FlowTuple, cookie: u64, netns_cookie: u64) {
    flow.tuple = tuple;
    flow.cookie = cookie;
    flow.netns_cookie = netns_cookie;
    flow.srtt_min_us = u32::MAX;
    // not read until its first sample or its close (or the stop's sock_diag refresh)
    flow.dsack_dups = NOT_MEASURED;
    flow.reord_seen = NOT_MEASURED;
}

#[inline(always)]
fn start_flow(ctx: &SockOpsContext, direction: u8, look: Look) -> Result<(), i64> {
    let (tuple, netns_cookie) = match wanted_socket(ctx) {
        Ok(wanted) => wanted,
        Err(tuple) => {
            if look == Look::Adopt {
                // this run's iterator turned its callbacks on without knowing the filters
                forget_iter_mark(ctx, socket_cookie(ctx), 0);
            }
            // (a flow another recorder enabled, that this one's filters leave out, comes here
            // at each of its ACKs: its callbacks stay on, they are that recorder's)
            if look == Look::First {
                count(STAT_FILTERED_FLOWS);
                debug!(
                    ctx,
                    "filtered out: local port {} remote port {}",
                    tuple.local_port,
                    tuple.remote_port
                );
            }
            return Ok(());
        }
    };
    let cookie = socket_cookie(ctx);
    // The flow table's limit is TRACKED's size. Where the tracepoints cannot read namespaces,
    // another namespace's flow may hold the same tuple (two pods' loopback connections): this
    // one is tracked all the same, and only the tracepoints keep seeing the first.
    let key = tracked_key(tuple, netns_cookie);
    let indexed = match TRACKED.insert(&key, &cookie, BPF_NOEXIST as u64) {
        Ok(()) => true,
        Err(e) if e == -EEXIST => false,
        Err(_) => return track_refused(ctx, look, cookie, STAT_FLOW_MAP_FULL),
    };
    // Created zeroed, then filled in place: until then userspace sees an aggregate without a
    // cookie, and skips it (`open_flows`).
    let Some(stats) = flow_mut(ctx, true) else {
        if indexed {
            forget_tracked(&key, cookie);
        }
        return track_refused(ctx, look, cookie, STAT_FLOW_NO_MEMORY);
    };
    init_flow(stats, tuple, cookie, netns_cookie);
    stats.cgroup_id = socket_cgroup_id(ctx.ops);
    stats.start_ns = now_ns();
    stats.direction = direction;
    stats.adopted = (look == Look::Adopt) as u8;
    debug!(
        ctx,
        "tracking flow {} local port {} remote port {}",
        cookie,
        tuple.local_port,
        tuple.remote_port
    );
    if look == Look::Adopt {
        forget_iter_mark(ctx, cookie, OUR_CB_FLAGS);
    }
    // Only matching flows pay for the per-ACK callbacks.
    ctx.set_cb_flags((ctx.cb_flags() | OUR_CB_FLAGS) as i32)
        .map_err(|e| e as i64)
}

/// A matching connection that cannot be tracked (`stat` says why): only its close is
/// followed, for its counters then.
#[inline(always)]
fn track_refused(ctx: &SockOpsContext, look: Look, cookie: u64, stat: u32) -> Result<(), i64> {
    // An active open comes here at connect() and again once established (where it is
    // retried): count it at the second look only, so each connection counts once. The loader
    // warns once (naming the flag that raises the limit, when that is the reason); a warning
    // per connection here flooded the log.
    // An adopted flow retries at each ACK: it is counted by its close instead
    // (`end_untracked_flow`).
    if ctx.op() != BPF_SOCK_OPS_TCP_CONNECT_CB && look != Look::Adopt {
        count(stat);
    }
    // Its totals can still be had when it closes: the close callback reads the socket's own
    // counters (`end_untracked_flow`). Only state changes, no per-ACK callbacks (flags are only
    // ever added: another recorder may be tracking the same socket).
    let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
    if look == Look::Adopt {
        // no retry at every segment it sends: at its ACKs, as any adopted flow
        forget_iter_mark(ctx, cookie, OUR_CB_FLAGS);
    }
    Ok(())
}

/// Removes the flow's entry in TRACKED when it is this flow's (without namespaces in the key,
/// another namespace's flow with the same tuple may hold it).
#[inline(always)]
fn forget_tracked(key: &TrackedKey, cookie: u64) {
    // SAFETY: a u64 copied out at once.
    if unsafe { TRACKED.get(key) }.copied() == Some(cookie) {
        let _ = TRACKED.remove(key);
    }
}

/// Copies the socket's cumulative counters into the flow aggregate.
#[inline(always)]
fn refresh_counters(ops: &aya_ebpf::bindings::bpf_sock_ops, flow: &mut FlowStats) {
    flow.bytes_acked = ops.bytes_acked;
    flow.bytes_received = ops.bytes_received;
    flow.segs_out = ops.segs_out;
    flow.segs_in = ops.segs_in;
    flow.data_segs_out = ops.data_segs_out;
    flow.data_segs_in = ops.data_segs_in;
    flow.total_retrans = ops.total_retrans;
    flow.min_rtt_us = ops.rtt_min;
}

/// One u32 member of the socket's `struct tcp_sock` at `offset` (from the kernel's BTF);
/// `NOT_MEASURED` when this kernel has no such member, `current` if the read fails (a running
/// count must not drop to 0 and back).
#[inline(always)]
fn tcp_sock_u32(tcp_sock: *const u8, offset: u16, current: u32) -> u32 {
    if offset == TracepointOffsets::ABSENT {
        return NOT_MEASURED;
    }
    // SAFETY: a probe read: the helper checks the address and copies 4 bytes (or fails); the
    // offset lies inside a struct tcp_sock per the kernel's BTF.
    unsafe { bpf_probe_read_kernel(tcp_sock.add(offset as usize) as *const u32) }.unwrap_or(current)
}

/// Copies the socket's DSACK and reordering counters into the flow aggregate. They are not
/// in `bpf_sock_ops`: read from the kernel's `tcp_sock` through the context's socket, only
/// where a flow is written out (a sample, its close), not at every ACK.
#[inline(always)]
fn refresh_reordering(ops: *const aya_ebpf::bindings::bpf_sock_ops, flow: &mut FlowStats) {
    let (dsack_at, reord_at) = (config!(tcp_sock_dsack_dups), config!(tcp_sock_reord_seen));
    if dsack_at == TracepointOffsets::ABSENT && reord_at == TracepointOffsets::ABSENT {
        // Decided before any helper is called: the configuration is read-only data the
        // verifier sees, so on a kernel that refuses these helpers in sock_ops (the loader then
        // loads again with both offsets absent) this branch is all it checks.
        flow.dsack_dups = NOT_MEASURED;
        flow.reord_seen = NOT_MEASURED;
        return;
    }
    let tcp_sock = full_socket(ops);
    if tcp_sock.is_null() {
        return;
    }
    flow.dsack_dups = tcp_sock_u32(tcp_sock, dsack_at, flow.dsack_dups);
    flow.reord_seen = tcp_sock_u32(tcp_sock, reord_at, flow.reord_seen);
}

/// The cgroup v2 id of the socket's cgroup: the one its creator ran in (a pod's container, a
/// Slurm job step), which labels the flow with its job. Read once per flow through the kernel's
/// `sock -> cgroup -> kernfs_node` at offsets from its BTF; 0 when unknown.
#[inline(always)]
fn socket_cgroup_id(ops: *const aya_ebpf::bindings::bpf_sock_ops) -> u64 {
    let (cgroup_at, kn_at, id_at) = (
        config!(sock_cgroup),
        config!(cgroup_kn),
        config!(kernfs_node_id),
    );
    // decided before any helper call, as in `refresh_reordering`
    if cgroup_at == TracepointOffsets::ABSENT
        || kn_at == TracepointOffsets::ABSENT
        || id_at == TracepointOffsets::ABSENT
    {
        return 0;
    }
    // a tcp_sock starts with its struct sock
    let cgroup = kernel_u64(full_socket(ops), cgroup_at) as *const u8;
    let kn = kernel_u64(cgroup, kn_at) as *const u8;
    kernel_u64(kn, id_at)
}

/// The context's socket as the kernel's `struct tcp_sock` (which starts with its `struct sock`),
/// for reads at BTF offsets of what `bpf_sock_ops` does not carry; null when there is none.
#[inline(always)]
fn full_socket(ops: *const aya_ebpf::bindings::bpf_sock_ops) -> *const u8 {
    let sk = callback_socket(ops);
    if sk.is_null() {
        return core::ptr::null();
    }
    // SAFETY: the helper takes any socket pointer and returns the tcp_sock or null.
    unsafe { bpf_skc_to_tcp_sock(sk as *mut _) as *const u8 }
}

#[inline(always)]
fn on_rtt(ctx: &SockOpsContext) -> Result<(), i64> {
    let Some(flow) = flow_mut(ctx, false) else {
        // Only sockets whose callbacks a scaletrace program enabled get here: one from an
        // earlier run (the flags outlive it). Tracked from its next ACK on.
        return start_flow(ctx, 0, Look::Adopt);
    };
    let ops = sock_ops(ctx);
    let srtt_us = ops.srtt_us >> 3; // the kernel keeps srtt scaled by 8
    if srtt_us == 0 {
        // No RTT measured yet (the handshake ACK): nothing to record.
        return Ok(());
    }
    // Per ACK only what must be: the RTT aggregates and the ends of stalls. The socket's
    // cumulative counters are copied below, when a sample is due, and at close; userspace
    // reads open flows' counters from the kernel itself (sock_diag) at a snapshot or the stop.
    flow.rtt_count += 1;
    flow.srtt_sum_us += srtt_us as u64;
    flow.srtt_last_us = srtt_us;
    if srtt_us < flow.srtt_min_us {
        flow.srtt_min_us = srtt_us;
    }
    if srtt_us > flow.srtt_max_us {
        flow.srtt_max_us = srtt_us;
    }

    let cookie = flow.cookie;
    let now = now_ns();
    // (before the stall and recovery ends below: those count in the window where they end)
    if roll_flow_window(flow, ops, cookie, now, 0) {
        add_rtt(&mut flow.flow_window, srtt_us);
    }
    // An RTT sample means new data was acknowledged: a timeout stall is over.
    if flow.rto_at_ns != 0 {
        flow.rto_recovery_ns += now.saturating_sub(flow.rto_at_ns);
        flow.rto_at_ns = 0;
    }
    // ... and a loss recovery is over once no retransmitted segment is outstanding.
    if flow.recovery_at_ns != 0 && ops.retrans_out == 0 {
        flow.loss_recovery_ns += now.saturating_sub(flow.recovery_at_ns);
        flow.recovery_at_ns = 0;
    }
    if flow.last_sample_ns != 0 && now - flow.last_sample_ns < config!(rtt_sample_interval_ns) {
        count(STAT_RATE_LIMITED + EVENT_RTT_SAMPLE);
        return Ok(());
    }
    flow.last_sample_ns = now;
    refresh_counters(ops, flow);
    refresh_reordering(ctx.ops, flow);
    // Filled in place in the ring buffer, not built on the stack first; every field is written.
    emit_in_place(EVENT_RTT_SAMPLE, |e: &mut RttSampleEvent| {
        e.header = EventHeader {
            kind: EVENT_RTT_SAMPLE,
            _pad: 0,
            ts_ns: now,
        };
        e.cookie = cookie;
        e.bytes_acked = flow.bytes_acked;
        e.bytes_received = flow.bytes_received;
        e.srtt_us = srtt_us;
        e.min_rtt_us = flow.min_rtt_us;
        e.snd_cwnd = ops.snd_cwnd;
        e.snd_ssthresh = ops.snd_ssthresh;
        e.packets_out = ops.packets_out;
        e.retrans_out = ops.retrans_out;
        e.lost_out = ops.lost_out;
        e.sacked_out = ops.sacked_out;
        e.total_retrans = flow.total_retrans;
        e.mss = ops.mss_cache;
        e.rate_delivered = ops.rate_delivered;
        e.rate_interval_us = ops.rate_interval_us;
        e.dsack_dups = flow.dsack_dups;
        e.reord_seen = flow.reord_seen;
    });
    Ok(())
}

/// The flow's cumulative counters now: the socket's own from the callback's context, and
/// those the flow table keeps.
#[inline(always)]
fn counters_now(ops: &aya_ebpf::bindings::bpf_sock_ops, flow: &FlowStats) -> WindowCounters {
    WindowCounters {
        bytes_acked: ops.bytes_acked,
        bytes_received: ops.bytes_received,
        rto_recovery_ns: flow.rto_recovery_ns,
        loss_recovery_ns: flow.loss_recovery_ns,
        total_retrans: ops.total_retrans,
        retrans_events: flow.retrans_events,
        rto_count: flow.rto_count,
        _pad: 0,
    }
}

/// Makes the flow's open window the one `now` falls into: a window `now` is past is sent
/// first, with the flow's counters now, and the next one opens with them. Runs before the
/// callback counts anything, so what it counts lands in the window it happened in;
/// `retransmitted_now` are segments the kernel already counted for this callback. false:
/// windows are off (`--flow-window 0s`).
#[inline(always)]
fn roll_flow_window(
    flow: &mut FlowStats,
    ops: &aya_ebpf::bindings::bpf_sock_ops,
    cookie: u64,
    now: u64,
    retransmitted_now: u32,
) -> bool {
    let len = config!(flow_window_ns);
    if len == 0 {
        return false;
    }
    if now >= flow.flow_window.end_ns {
        let mut counters = counters_now(ops, flow);
        counters.total_retrans = counters.total_retrans.saturating_sub(retransmitted_now);
        let first = flow.flow_window.start_ns == 0;
        // A new flow's first window starts from zero, not from the counters at its first event
        // (its first ACK's bytes): so a flow's windows add up to its totals. An adopted flow's
        // counters are the socket's since before this run: its first window starts from them.
        let opened = if first && flow.adopted == 0 {
            WindowCounters::default()
        } else {
            counters
        };
        let w = &mut flow.flow_window;
        if !first {
            emit_flow_window(w, &counters, cookie, now);
        }
        // SAFETY: `w` is a valid, exclusive FlowWindow (plain integers: all-zero bytes are a
        // valid value); zeroed in place, as it does not fit the stack beside the rest.
        unsafe { core::ptr::write_bytes(w as *mut FlowWindow, 0, 1) };
        // windows on whole multiples of `len` of the wall clock (as it was at load)
        let offset = config!(flow_window_offset_ns);
        w.start_ns = ((now + offset) / len * len).wrapping_sub(offset);
        w.end_ns = w.start_ns + len;
        w.min_us = u32::MAX;
        w.opened = opened;
    }
    true
}

/// Counts an RTT update in the flow's open window.
#[inline(always)]
fn add_rtt(w: &mut FlowWindow, srtt_us: u32) {
    w.count += 1;
    w.sum_us += srtt_us as u64;
    if srtt_us < w.min_us {
        w.min_us = srtt_us;
    }
    if srtt_us > w.max_us {
        w.max_us = srtt_us;
    }
    // The compiler knows `rtt_bucket` stays below the length and drops the bounds check, but
    // the verifier cannot follow its arithmetic: read the index back through a volatile so the
    // check stays, for the verifier to see.
    let bucket = rtt_bucket(srtt_us);
    // SAFETY: a read of a local variable.
    let bucket = unsafe { core::ptr::read_volatile(&bucket) };
    if let Some(count) = w.buckets.get_mut(bucket) {
        *count += 1;
    }
}

/// Sends a finished window with the flow's counters at its end; counted and lost when the
/// ring is full.
#[inline(always)]
fn emit_flow_window(w: &FlowWindow, closed: &WindowCounters, cookie: u64, now: u64) {
    emit_in_place(EVENT_FLOW_WINDOW, |e: &mut FlowWindowEvent| {
        e.header = EventHeader {
            kind: EVENT_FLOW_WINDOW,
            _pad: 0,
            ts_ns: now,
        };
        e.cookie = cookie;
        // SAFETY: both are valid FlowWindows and do not overlap (a map value, a ring slot);
        // copied, not assigned, so no copy of it is made on the stack.
        unsafe { core::ptr::copy_nonoverlapping(w as *const FlowWindow, &mut e.window, 1) };
        e.closed = *closed;
    });
}

#[inline(always)]
fn on_retransmit(ctx: &SockOpsContext) -> Result<(), i64> {
    if let Some(flow) = flow_mut(ctx, false) {
        let (cookie, now) = (flow.cookie, now_ns());
        // The kernel adds the segments to total_retrans before this callback (when the send
        // succeeded, arg 3 = 0): leave them out of a window this retransmit closes, for the one
        // it opens.
        let segs = if ctx.arg(2) == 0 { ctx.arg(1) } else { 0 };
        roll_flow_window(flow, sock_ops(ctx), cookie, now, segs);
        flow.retrans_events += 1;
        // the first retransmit starts a loss recovery; more during it continue it
        if flow.recovery_at_ns == 0 {
            flow.recovery_at_ns = now;
        }
    }
    Ok(())
}

#[inline(always)]
fn on_rto(ctx: &SockOpsContext) -> Result<(), i64> {
    if let Some(flow) = flow_mut(ctx, false) {
        let (cookie, now) = (flow.cookie, now_ns());
        roll_flow_window(flow, sock_ops(ctx), cookie, now, 0);
        flow.rto_count += 1;
        // a timeout that repeats (backoff) continues the same stall
        if flow.rto_at_ns == 0 {
            flow.rto_at_ns = now;
        }
        // A timeout enters loss recovery even when its retransmission is deferred (the
        // original segment still queued in the host: the retransmit callback only comes with
        // a later timer), so it starts the recovery too.
        if flow.recovery_at_ns == 0 {
            flow.recovery_at_ns = now;
        }
    }
    Ok(())
}

/// A matching connection without a flow-table entry closes (the table was full when it
/// started, or its callbacks were enabled by an earlier run): its counters at close, sent as a
/// flow end marked `untracked`. Nothing to keep, so nothing to sweep if the ring is full.
#[inline(always)]
fn end_untracked_flow(ctx: &SockOpsContext, cookie: u64) -> Result<(), i64> {
    let Ok((tuple, netns_cookie)) = wanted_socket(ctx) else {
        return Ok(());
    };
    emit_in_place(EVENT_FLOW_END, |e: &mut FlowEndEvent| {
        // SAFETY: all-zero bytes are a valid FlowEndEvent (plain integers): every field the
        // lines below do not set is zero.
        unsafe { core::ptr::write_bytes(e as *mut FlowEndEvent, 0, 1) };
        let now = now_ns();
        e.header = EventHeader {
            kind: EVENT_FLOW_END,
            _pad: 0,
            ts_ns: now,
        };
        init_flow(&mut e.stats, tuple, cookie, netns_cookie);
        e.stats.untracked = 1;
        e.stats.cgroup_id = socket_cgroup_id(ctx.ops);
        refresh_counters(sock_ops(ctx), &mut e.stats);
        refresh_reordering(ctx.ops, &mut e.stats);
        e.stats.end_ns = now;
    });
    Ok(())
}

/// Sends a flow's final aggregate; false (counted) when the ring is full. Written in place: a
/// FlowEndEvent on the stack would not fit the 512-byte eBPF stack.
#[inline(always)]
fn emit_flow_end(flow: &FlowStats, now: u64) -> bool {
    emit_in_place(EVENT_FLOW_END, |e: &mut FlowEndEvent| {
        e.header = EventHeader {
            kind: EVENT_FLOW_END,
            _pad: 0,
            ts_ns: now,
        };
        // SAFETY: both are valid FlowStats and do not overlap (a map value, a ring slot).
        unsafe { core::ptr::copy_nonoverlapping(flow as *const FlowStats, &mut e.stats, 1) };
    })
}

#[inline(always)]
fn end_flow(ctx: &SockOpsContext) -> Result<(), i64> {
    let Some(flow) = flow_mut(ctx, false) else {
        return end_untracked_flow(ctx, socket_cookie(ctx));
    };
    let ops = sock_ops(ctx);
    refresh_counters(ops, flow);
    refresh_reordering(ctx.ops, flow);
    let now = now_ns();
    flow.end_ns = now;
    forget_tracked(&tracked_key(flow.tuple, flow.netns_cookie), flow.cookie);
    if !emit_flow_end(flow, now) {
        // Kept until userspace sweeps it: the socket's storage goes with the socket.
        flow.closed_unsent = 1;
        if UNSENT_ENDS.insert(flow.cookie, &*flow, 0).is_err() {
            count(STAT_FLOW_ENDS_LOST);
        }
    }
    forget_flow(ctx);
    Ok(())
}
