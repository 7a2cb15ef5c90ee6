//! scaletrace kernel side.
//!
//! * `scaletrace_sockops` (sock_ops, attached to a cgroup v2): the flow table. It applies the
//!   filters once per connection, keeps per-flow aggregates in `FLOWS` (so per-packet work never
//!   crosses the ring buffer), sends sampled RTT snapshots, and a flow-end record at close.
//! * `tcp_retransmit_skb` / `tcp_retransmit_synack` tracepoints: one event per retransmit,
//!   under a per-CPU token bucket.
//! * `inet_sock_set_state` tracepoint: state transitions of tracked flows with the current task,
//!   which attributes the flow to the process that closes it.
//! * `adopt_open_connections` (iter/tcp): run once per network namespace at the start, turns on
//!   the per-socket callbacks of connections opened before it, so sock_ops adopts them.
//!
//! Tracepoint field offsets come from userspace (`CONFIG`), read from tracefs at load time,
//! because they change between kernel versions and Rust eBPF has no CO-RE.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::{
        BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB,
        BPF_SOCK_OPS_RETRANS_CB, BPF_SOCK_OPS_RETRANS_CB_FLAG, BPF_SOCK_OPS_RTO_CB,
        BPF_SOCK_OPS_RTO_CB_FLAG, BPF_SOCK_OPS_RTT_CB, BPF_SOCK_OPS_RTT_CB_FLAG,
        BPF_SOCK_OPS_STATE_CB, BPF_SOCK_OPS_STATE_CB_FLAG, BPF_SOCK_OPS_TCP_CONNECT_CB,
    },
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_netns_cookie,
        bpf_get_socket_cookie, bpf_getsockopt, bpf_ktime_get_ns, bpf_probe_read_user,
        bpf_seq_write, bpf_setsockopt, bpf_skc_to_tcp_sock,
    },
    macros::{map, sock_ops, tracepoint, uprobe, uretprobe},
    maps::{HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::{ProbeContext, RetProbeContext, SockOpsContext, TracePointContext},
    EbpfContext,
};
use aya_log_ebpf::debug;
use scaletrace_common::*;

const TCP_CLOSE: u32 = 7;
const IPPROTO_TCP: u16 = 6;

#[unsafe(no_mangle)]
static CONFIG: Config = Config::DEFAULT;

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(8 * 1024 * 1024, 0);

/// Socket cookie -> per-flow aggregate.
#[map]
static FLOWS: HashMap<u64, FlowStats> = HashMap::with_max_entries(MAX_FLOWS, 0);

/// Tuple of a tracked flow -> socket cookie; lets the tracepoints (which see no cookie and no
/// namespace) apply exactly the filters sock_ops applied.
#[map]
static TRACKED: HashMap<FlowTuple, u64> = HashMap::with_max_entries(MAX_FLOWS, 0);

/// Per-CPU scratch space for building a flow entry: a FlowStats does not fit on the stack next
/// to everything else the sock_ops program keeps there.
#[map]
static SCRATCH_FLOW: PerCpuArray<FlowStats> = PerCpuArray::with_max_entries(1, 0);

#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(STAT_SLOTS, 0);

/// Sockets whose callbacks `adopt_open_connections` turned on, until sock_ops has seen them:
/// those this run's filters leave out get them turned off again there (the iterator cannot
/// apply the filters: a sock_common's IPv6 addresses have no fixed offset).
#[map]
static ITER_MARKED: LruHashMap<u64, u8> = LruHashMap::with_max_entries(MAX_FLOWS, 0);

#[repr(C)]
#[derive(Clone, Copy)]
struct TokenBucket {
    tokens: u64,
    last_ns: u64,
}

#[map]
static RETRANSMIT_BUCKET: PerCpuArray<TokenBucket> = PerCpuArray::with_max_entries(1, 0);

/// Reads one `CONFIG` field. Volatile: the loader rewrites this read-only global, so the
/// compiler must not fold in the defaults; per field, so no 128-byte copy lands on the stack.
macro_rules! cfg {
    ($($field:tt)+) => {
        unsafe { core::ptr::read_volatile(&CONFIG.$($field)+) }
    };
}

#[inline(always)]
fn count(slot: u32) {
    if let Some(ptr) = STATS.get_ptr_mut(slot) {
        unsafe { *ptr += 1 };
    }
}

#[inline(always)]
fn header(kind: u32) -> EventHeader {
    EventHeader {
        kind,
        _pad: 0,
        ts_ns: unsafe { bpf_ktime_get_ns() },
    }
}

/// Writes `event` to the ring buffer, counting success or a full-ring drop for `kind`.
#[inline(always)]
fn emit<T: 'static>(kind: u32, event: T) -> bool {
    match EVENTS.reserve::<T>(0) {
        Some(mut entry) => {
            entry.write(event);
            entry.submit(0);
            count(STAT_EMITTED + kind);
            true
        }
        None => {
            count(STAT_RING_FULL + kind);
            false
        }
    }
}

#[inline(always)]
fn port_matches(tuple: &FlowTuple) -> bool {
    let (lo, hi) = (cfg!(port_min), cfg!(port_max));
    let in_range = |p: u16| p >= lo && p <= hi;
    in_range(tuple.local_port) || in_range(tuple.remote_port)
}

/// `::ffff:a.b.c.d`: how a dual-stack (AF_INET6) socket holds an IPv4 address.
#[inline(always)]
fn is_v4_mapped(addr: &[u8; 16]) -> bool {
    addr[..10].iter().all(|b| *b == 0) && addr[10] == 0xff && addr[11] == 0xff
}

#[inline(always)]
fn addr_in_cidr(family: u16, addr: &[u8; 16]) -> bool {
    // An IPv4 CIDR also matches IPv4 peers of dual-stack sockets (PyTorch's TCPStore and many
    // servers listen on `::`): their last four bytes are the IPv4 address.
    let offset = if family == cfg!(cidr_family) {
        0
    } else if family == AF_INET6 && cfg!(cidr_family) == AF_INET && is_v4_mapped(addr) {
        12
    } else {
        return false;
    };
    let bits = cfg!(cidr_prefix_len) as usize;
    let mut i = 0;
    while i + offset < 16 {
        let start = i * 8;
        if start >= bits {
            break;
        }
        let mask: u8 = if bits - start >= 8 {
            0xff
        } else {
            0xffu8 << (8 - (bits - start))
        };
        if (addr[i + offset] ^ cfg!(cidr_addr[i])) & mask != 0 {
            return false;
        }
        i += 1;
    }
    true
}

#[inline(always)]
fn cidr_matches(tuple: &FlowTuple) -> bool {
    cfg!(cidr_family) == 0
        || addr_in_cidr(tuple.family, &tuple.local_addr)
        || addr_in_cidr(tuple.family, &tuple.remote_addr)
}

// ---------------------------------------------------------------------------------------------
// sock_ops: the flow table
// ---------------------------------------------------------------------------------------------

#[sock_ops]
pub fn scaletrace_sockops(ctx: SockOpsContext) -> u32 {
    let _ = handle_sockops(&ctx);
    1
}

#[inline(always)]
fn sockops_tuple(ops: *const aya_ebpf::bindings::bpf_sock_ops) -> FlowTuple {
    // Every ctx field is loaded unconditionally and straight from the ctx pointer: the verifier
    // rejects loads through a ctx pointer the compiler has offset and carried across a branch.
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
            let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
            if unsafe { FLOWS.get(cookie) }.is_none() {
                // A flow filtered at connect() comes here too: count it only once.
                start_flow(ctx, DIRECTION_ACTIVE, Look::Again)?;
            }
            Ok(())
        }
        BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB => start_flow(ctx, DIRECTION_PASSIVE, Look::First),
        BPF_SOCK_OPS_RTT_CB => on_rtt(ctx),
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

/// This program's per-socket callbacks.
const OUR_CB_FLAGS: u32 = BPF_SOCK_OPS_RTT_CB_FLAG
    | BPF_SOCK_OPS_STATE_CB_FLAG
    | BPF_SOCK_OPS_RETRANS_CB_FLAG
    | BPF_SOCK_OPS_RTO_CB_FLAG;

/// The socket's tuple and network namespace cookie when they pass this run's filters; else
/// the tuple (for the log).
#[inline(always)]
fn wanted_socket(ctx: &SockOpsContext) -> Result<(FlowTuple, u64), FlowTuple> {
    let tuple = sockops_tuple(ctx.ops);
    let netns_cookie = unsafe { bpf_get_netns_cookie(ctx.as_ptr()) };
    let wanted_netns = cfg!(netns_cookie);
    if !port_matches(&tuple)
        || !cidr_matches(&tuple)
        || (wanted_netns != 0 && wanted_netns != netns_cookie)
    {
        return Err(tuple);
    }
    Ok((tuple, netns_cookie))
}

/// The per-CPU scratch aggregate, reset for a new flow: the slot still holds the previous flow
/// of this CPU, and a FlowStats does not fit the 512-byte eBPF stack.
#[inline(always)]
fn fresh_flow(tuple: FlowTuple, cookie: u64, netns_cookie: u64) -> Option<&'static mut FlowStats> {
    let scratch = SCRATCH_FLOW.get_ptr_mut(0)?;
    unsafe { core::ptr::write_bytes(scratch, 0, 1) };
    let flow = unsafe { &mut *scratch };
    flow.tuple = tuple;
    flow.cookie = cookie;
    flow.netns_cookie = netns_cookie;
    flow.srtt_min_us = u32::MAX;
    Some(flow)
}

#[inline(always)]
fn start_flow(ctx: &SockOpsContext, direction: u8, look: Look) -> Result<(), i64> {
    let (tuple, netns_cookie) = match wanted_socket(ctx) {
        Ok(wanted) => wanted,
        Err(tuple) => {
            if look == Look::Adopt {
                // this run's iterator turned its callbacks on without knowing the filters
                let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
                if unsafe { ITER_MARKED.get(&cookie) }.is_some() {
                    let _ = ITER_MARKED.remove(&cookie);
                    let _ = ctx.set_cb_flags((ctx.cb_flags() & !OUR_CB_FLAGS) as i32);
                }
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
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let Some(stats) = fresh_flow(tuple, cookie, netns_cookie) else {
        return Ok(());
    };
    stats.start_ns = unsafe { bpf_ktime_get_ns() };
    stats.direction = direction;
    stats.adopted = (look == Look::Adopt) as u8;
    if FLOWS.insert(cookie, &*stats, 0).is_err() {
        // An active open comes here at connect() and again once established (where it is
        // retried): count it at the second look only, so each connection counts once. The
        // loader warns once and names the flag that raises the limit; a warning per connection
        // here flooded the log.
        // An adopted flow retries at each ACK while the table is full: it is counted by its
        // close instead (`end_untracked_flow`).
        if ctx.op() != BPF_SOCK_OPS_TCP_CONNECT_CB && look != Look::Adopt {
            count(STAT_FLOW_MAP_FULL);
        }
        // Its totals can still be had when it closes: the close callback reads the socket's
        // own counters (`end_untracked_flow`). Only state changes, no per-ACK callbacks (flags
        // are only ever added: another recorder may be tracking the same socket).
        let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
        return Ok(());
    }
    debug!(
        ctx,
        "tracking flow {} local port {} remote port {}",
        cookie,
        tuple.local_port,
        tuple.remote_port
    );
    let _ = TRACKED.insert(tuple, cookie, 0);
    if look == Look::Adopt {
        let _ = ITER_MARKED.remove(&cookie);
    }
    // Only matching flows pay for the per-ACK callbacks.
    ctx.set_cb_flags((ctx.cb_flags() | OUR_CB_FLAGS) as i32)
        .map_err(|e| e as i64)
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

#[inline(always)]
fn on_rtt(ctx: &SockOpsContext) -> Result<(), i64> {
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let Some(flow) = FLOWS.get_ptr_mut(cookie) else {
        // Only sockets whose callbacks a scaletrace program enabled get here: one from an
        // earlier run (the flags outlive it). Tracked from its next ACK on.
        return start_flow(ctx, 0, Look::Adopt);
    };
    let flow = unsafe { &mut *flow };
    let ops = unsafe { &*ctx.ops };
    let srtt_us = ops.srtt_us >> 3; // the kernel keeps srtt scaled by 8
    if srtt_us == 0 {
        // No RTT measured yet (the handshake ACK): nothing to record.
        return Ok(());
    }
    refresh_counters(ops, flow);
    flow.rtt_count += 1;
    flow.srtt_sum_us += srtt_us as u64;
    flow.srtt_last_us = srtt_us;
    if srtt_us < flow.srtt_min_us {
        flow.srtt_min_us = srtt_us;
    }
    if srtt_us > flow.srtt_max_us {
        flow.srtt_max_us = srtt_us;
    }

    let now = unsafe { bpf_ktime_get_ns() };
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
    if flow.last_sample_ns != 0 && now - flow.last_sample_ns < cfg!(rtt_sample_interval_ns) {
        count(STAT_RATE_LIMITED + EVENT_RTT_SAMPLE);
        return Ok(());
    }
    flow.last_sample_ns = now;
    // Filled in place in the ring buffer, not built on the stack first.
    let Some(mut entry) = EVENTS.reserve::<RttSampleEvent>(0) else {
        count(STAT_RING_FULL + EVENT_RTT_SAMPLE);
        return Ok(());
    };
    let e = unsafe { &mut *entry.as_mut_ptr() };
    e.header = EventHeader {
        kind: EVENT_RTT_SAMPLE,
        _pad: 0,
        ts_ns: now,
    };
    e.cookie = cookie;
    e.bytes_acked = ops.bytes_acked;
    e.bytes_received = ops.bytes_received;
    e.srtt_us = srtt_us;
    e.min_rtt_us = ops.rtt_min;
    e.snd_cwnd = ops.snd_cwnd;
    e.snd_ssthresh = ops.snd_ssthresh;
    e.packets_out = ops.packets_out;
    e.retrans_out = ops.retrans_out;
    e.lost_out = ops.lost_out;
    e.sacked_out = ops.sacked_out;
    e.total_retrans = ops.total_retrans;
    e.mss = ops.mss_cache;
    e.rate_delivered = ops.rate_delivered;
    e.rate_interval_us = ops.rate_interval_us;
    entry.submit(0);
    count(STAT_EMITTED + EVENT_RTT_SAMPLE);
    Ok(())
}

#[inline(always)]
fn on_retransmit(ctx: &SockOpsContext) -> Result<(), i64> {
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    if let Some(flow) = FLOWS.get_ptr_mut(cookie) {
        let flow = unsafe { &mut *flow };
        flow.retrans_events += 1;
        // the first retransmit starts a loss recovery; more during it continue it
        if flow.recovery_at_ns == 0 {
            flow.recovery_at_ns = unsafe { bpf_ktime_get_ns() };
        }
    }
    Ok(())
}

#[inline(always)]
fn on_rto(ctx: &SockOpsContext) -> Result<(), i64> {
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    if let Some(flow) = FLOWS.get_ptr_mut(cookie) {
        let flow = unsafe { &mut *flow };
        flow.rto_count += 1;
        let now = unsafe { bpf_ktime_get_ns() };
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
    let Some(flow) = fresh_flow(tuple, cookie, netns_cookie) else {
        return Ok(());
    };
    flow.untracked = 1;
    refresh_counters(unsafe { &*ctx.ops }, flow);
    let now = unsafe { bpf_ktime_get_ns() };
    flow.end_ns = now;
    emit_flow_end(flow, now);
    Ok(())
}

/// Sends a flow's final aggregate; false (counted) when the ring is full. Written in place: a
/// FlowEndEvent on the stack would not fit the 512-byte eBPF stack.
#[inline(always)]
fn emit_flow_end(flow: &FlowStats, now: u64) -> bool {
    let Some(mut entry) = EVENTS.reserve::<FlowEndEvent>(0) else {
        count(STAT_RING_FULL + EVENT_FLOW_END);
        return false;
    };
    let event = entry.as_mut_ptr();
    unsafe {
        (*event).header = EventHeader {
            kind: EVENT_FLOW_END,
            _pad: 0,
            ts_ns: now,
        };
        core::ptr::copy_nonoverlapping(flow as *const FlowStats, &mut (*event).stats, 1);
    }
    entry.submit(0);
    count(STAT_EMITTED + EVENT_FLOW_END);
    true
}

#[inline(always)]
fn end_flow(ctx: &SockOpsContext) -> Result<(), i64> {
    let cookie = unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let Some(flow) = FLOWS.get_ptr_mut(cookie) else {
        return end_untracked_flow(ctx, cookie);
    };
    let flow = unsafe { &mut *flow };
    let ops = unsafe { &*ctx.ops };
    refresh_counters(ops, flow);
    let now = unsafe { bpf_ktime_get_ns() };
    flow.end_ns = now;
    let _ = TRACKED.remove(flow.tuple);
    if emit_flow_end(flow, now) {
        let _ = FLOWS.remove(cookie);
    } else {
        // Keep it: userspace sweeps closed flows from the map, so no flow is lost.
        flow.closed_unsent = 1;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// tracepoints
// ---------------------------------------------------------------------------------------------

/// Reads the connection tuple from a tcp/sock tracepoint record.
#[inline(always)]
fn tracepoint_tuple(ctx: &TracePointContext, off: &TracepointOffsets) -> Result<FlowTuple, i64> {
    let read_u16 = |o: u16| -> Result<u16, i64> {
        unsafe { ctx.read_at::<u16>(o as usize) }.map_err(|e| e as i64)
    };
    let mut tuple = FlowTuple {
        family: read_u16(off.family)?,
        local_port: read_u16(off.sport)?,
        remote_port: read_u16(off.dport)?,
        ..FlowTuple::default()
    };
    if tuple.family == AF_INET {
        let s: [u8; 4] = unsafe { ctx.read_at(off.saddr as usize) }.map_err(|e| e as i64)?;
        let d: [u8; 4] = unsafe { ctx.read_at(off.daddr as usize) }.map_err(|e| e as i64)?;
        tuple.local_addr[..4].copy_from_slice(&s);
        tuple.remote_addr[..4].copy_from_slice(&d);
    } else {
        tuple.local_addr = unsafe { ctx.read_at(off.saddr_v6 as usize) }.map_err(|e| e as i64)?;
        tuple.remote_addr = unsafe { ctx.read_at(off.daddr_v6 as usize) }.map_err(|e| e as i64)?;
    }
    Ok(tuple)
}

/// Per-CPU token bucket for per-packet events; false means "over the rate, count and skip".
#[inline(always)]
fn take_retransmit_token(now: u64) -> bool {
    let (rate, burst) = (cfg!(retransmit_events_per_sec), cfg!(retransmit_burst));
    let Some(bucket) = RETRANSMIT_BUCKET.get_ptr_mut(0) else {
        return true;
    };
    let bucket = unsafe { &mut *bucket };
    let elapsed = now.saturating_sub(bucket.last_ns);
    let refill = elapsed / 1_000 * rate / 1_000_000;
    if refill > 0 || bucket.last_ns == 0 {
        let tokens = bucket.tokens + refill;
        bucket.tokens = if tokens > burst || bucket.last_ns == 0 {
            burst
        } else {
            tokens
        };
        bucket.last_ns = now;
    }
    if bucket.tokens == 0 {
        return false;
    }
    bucket.tokens -= 1;
    true
}

#[inline(always)]
fn handle_retransmit(
    ctx: &TracePointContext,
    off: &TracepointOffsets,
    synack: bool,
) -> Result<(), i64> {
    let tuple = tracepoint_tuple(ctx, off)?;
    // A SYN-ACK precedes establishment, so the flow cannot be tracked yet: apply the static
    // filters instead (the namespace filter cannot apply here).
    let cookie = if synack {
        if !(port_matches(&tuple) && cidr_matches(&tuple)) {
            return Ok(());
        }
        0
    } else {
        match unsafe { TRACKED.get(tuple) } {
            Some(cookie) => *cookie,
            None => return Ok(()),
        }
    };
    let hdr = header(EVENT_RETRANSMIT);
    if !take_retransmit_token(hdr.ts_ns) {
        count(STAT_RATE_LIMITED + EVENT_RETRANSMIT);
        return Ok(());
    }
    let state = if off.oldstate == TracepointOffsets::ABSENT {
        0
    } else {
        unsafe { ctx.read_at::<i32>(off.oldstate as usize) }.unwrap_or(0) as u32
    };
    emit(
        EVENT_RETRANSMIT,
        RetransmitEvent {
            header: hdr,
            tuple,
            cookie,
            state,
            synack: synack as u32,
        },
    );
    Ok(())
}

#[tracepoint]
pub fn tcp_retransmit_skb(ctx: TracePointContext) -> u32 {
    let off = cfg!(retransmit_tp);
    let _ = handle_retransmit(&ctx, &off, false);
    0
}

#[tracepoint]
pub fn tcp_retransmit_synack(ctx: TracePointContext) -> u32 {
    let off = cfg!(synack_tp);
    let _ = handle_retransmit(&ctx, &off, true);
    0
}

#[inline(always)]
fn handle_state(ctx: &TracePointContext) -> Result<(), i64> {
    let off = cfg!(state_tp);
    let protocol = unsafe { ctx.read_at::<u16>(off.protocol as usize) }.map_err(|e| e as i64)?;
    if protocol != IPPROTO_TCP {
        return Ok(());
    }
    let tuple = tracepoint_tuple(ctx, &off)?;
    let Some(cookie) = (unsafe { TRACKED.get(tuple) }).copied() else {
        return Ok(());
    };
    let oldstate = unsafe { ctx.read_at::<i32>(off.oldstate as usize) }.map_err(|e| e as i64)?;
    let newstate = unsafe { ctx.read_at::<i32>(off.newstate as usize) }.map_err(|e| e as i64)?;
    emit(
        EVENT_STATE_CHANGE,
        StateChangeEvent {
            header: header(EVENT_STATE_CHANGE),
            tuple,
            cookie,
            oldstate: oldstate as u32,
            newstate: newstate as u32,
            pid: (bpf_get_current_pid_tgid() >> 32) as u32,
            _pad: 0,
            comm: bpf_get_current_comm().unwrap_or([0; 16]),
        },
    );
    Ok(())
}

#[tracepoint]
pub fn inet_sock_set_state(ctx: TracePointContext) -> u32 {
    let _ = handle_state(&ctx);
    0
}

// ---------------------------------------------------------------------------------------------
// NCCL uprobes: one entry/return pair per API function
// ---------------------------------------------------------------------------------------------

/// NCCL calls between entry and return.
#[map]
static NCCL_PENDING: LruHashMap<CallKey, NcclCallEvent> = LruHashMap::with_max_entries(16_384, 0);

#[inline(always)]
fn nccl_enter(ctx: &ProbeContext, op: u32) {
    let a = |n: usize| ctx.arg::<u64>(n).unwrap_or(0);
    let pid_tgid = bpf_get_current_pid_tgid();
    let mut e = NcclCallEvent {
        header: header(EVENT_NCCL_CALL),
        pid_tgid,
        op,
        peer: -1,
        nranks: -1,
        rank: -1,
        ..NcclCallEvent::default()
    };
    e.entry_ns = e.header.ts_ns;
    // Argument positions from nccl.h (System V ABI: the first six integer/pointer arguments).
    match op {
        NCCL_ALL_REDUCE | NCCL_REDUCE_SCATTER | NCCL_BROADCAST => {
            (e.sendbuff, e.recvbuff, e.count, e.datatype) = (a(0), a(1), a(2), a(3) as u32);
            if op == NCCL_BROADCAST {
                e.peer = a(4) as i32;
            } else {
                e.red_op = a(4) as u32;
            }
            e.comm = a(5);
        }
        NCCL_ALL_GATHER => {
            (e.sendbuff, e.recvbuff, e.count, e.datatype, e.comm) =
                (a(0), a(1), a(2), a(3) as u32, a(4));
        }
        NCCL_SEND | NCCL_RECV => {
            let buf = a(0);
            if op == NCCL_SEND {
                e.sendbuff = buf;
            } else {
                e.recvbuff = buf;
            }
            (e.count, e.datatype, e.peer, e.comm) = (a(1), a(2) as u32, a(3) as i32, a(4));
        }
        NCCL_COMM_INIT_RANK => {
            // (ncclComm_t* comm, int nranks, ncclUniqueId id, int rank): the 128-byte id goes on
            // the stack, so rank is the third register argument. `comm` holds the out-pointer
            // until the return probe reads the communicator through it.
            (e.comm, e.nranks, e.rank) = (a(0), a(1) as i32, a(2) as i32);
        }
        _ => {}
    }
    let key = CallKey {
        pid_tgid,
        op,
        _pad: 0,
    };
    let _ = NCCL_PENDING.insert(&key, &e, 0);
}

#[inline(always)]
fn nccl_exit(ctx: &RetProbeContext, op: u32) {
    let key = CallKey {
        pid_tgid: bpf_get_current_pid_tgid(),
        op,
        _pad: 0,
    };
    let Some(pending) = NCCL_PENDING.get_ptr_mut(&key) else {
        return;
    };
    let e = unsafe { &mut *pending };
    e.result = ctx.ret::<i32>();
    e.header.ts_ns = unsafe { bpf_ktime_get_ns() };
    if op == NCCL_COMM_INIT_RANK {
        e.comm = if e.comm == 0 {
            0
        } else {
            unsafe { bpf_probe_read_user(e.comm as *const u64) }.unwrap_or(0)
        };
    }
    emit(EVENT_NCCL_CALL, *e);
    let _ = NCCL_PENDING.remove(&key);
}

macro_rules! nccl_probes {
    ($($enter:ident, $exit:ident => $op:expr;)+) => {$(
        #[uprobe]
        pub fn $enter(ctx: ProbeContext) -> u32 {
            nccl_enter(&ctx, $op);
            0
        }

        #[uretprobe]
        pub fn $exit(ctx: RetProbeContext) -> u32 {
            nccl_exit(&ctx, $op);
            0
        }
    )+};
}

nccl_probes! {
    nccl_all_reduce, nccl_all_reduce_ret => NCCL_ALL_REDUCE;
    nccl_all_gather, nccl_all_gather_ret => NCCL_ALL_GATHER;
    nccl_reduce_scatter, nccl_reduce_scatter_ret => NCCL_REDUCE_SCATTER;
    nccl_broadcast, nccl_broadcast_ret => NCCL_BROADCAST;
    nccl_send, nccl_send_ret => NCCL_SEND;
    nccl_recv, nccl_recv_ret => NCCL_RECV;
    nccl_group_start, nccl_group_start_ret => NCCL_GROUP_START;
    nccl_group_end, nccl_group_end_ret => NCCL_GROUP_END;
    nccl_comm_init_rank, nccl_comm_init_rank_ret => NCCL_COMM_INIT_RANK;
}

// ---------------------------------------------------------------------------------------------
// libibverbs uprobes: the control path that makes a QP (a "flow" of RDMA traffic)
// ---------------------------------------------------------------------------------------------

#[map]
static VERBS_PENDING: LruHashMap<CallKey, VerbsCallEvent> = LruHashMap::with_max_entries(16_384, 0);

#[inline(always)]
fn read_user<T>(addr: u64) -> Option<T> {
    if addr == 0 {
        return None;
    }
    unsafe { bpf_probe_read_user(addr as *const T) }.ok()
}

#[inline(always)]
fn verbs_enter(ctx: &ProbeContext, op: u32) {
    let a = |n: usize| ctx.arg::<u64>(n).unwrap_or(0);
    let pid_tgid = bpf_get_current_pid_tgid();
    let mut e = VerbsCallEvent {
        header: header(EVENT_VERBS_CALL),
        pid_tgid,
        op,
        obj: a(0),
        ..VerbsCallEvent::default()
    };
    e.entry_ns = e.header.ts_ns;
    match op {
        VERBS_OPEN_DEVICE => {
            e.device = read_user(a(0) + verbs_abi::DEVICE_NAME).unwrap_or([0; 16]);
        }
        VERBS_REG_MR | VERBS_REG_MR_IOVA2 => e.length = a(2),
        VERBS_CREATE_CQ => e.cqe = a(1) as u32,
        VERBS_MODIFY_QP => {
            let (qp, attr) = (a(0), a(1));
            e.attr_mask = a(2) as u32;
            e.qp_num = read_user(qp + verbs_abi::QP_QP_NUM).unwrap_or(0);
            e.qp_state = read_user(attr + verbs_abi::QP_ATTR_QP_STATE).unwrap_or(0);
            e.dest_qp_num = read_user(attr + verbs_abi::QP_ATTR_DEST_QP_NUM).unwrap_or(0);
            e.dgid = read_user(attr + verbs_abi::QP_ATTR_DGID).unwrap_or([0; 16]);
        }
        VERBS_DESTROY_QP => {
            e.qp_num = read_user(a(0) + verbs_abi::QP_QP_NUM).unwrap_or(0);
            e.qp_type = read_user(a(0) + verbs_abi::QP_QP_TYPE).unwrap_or(0);
        }
        _ => {}
    }
    let key = CallKey {
        pid_tgid,
        op,
        _pad: 0,
    };
    let _ = VERBS_PENDING.insert(&key, &e, 0);
}

#[inline(always)]
fn verbs_exit(ctx: &RetProbeContext, op: u32) {
    let key = CallKey {
        pid_tgid: bpf_get_current_pid_tgid(),
        op,
        _pad: 0,
    };
    let Some(pending) = VERBS_PENDING.get_ptr_mut(&key) else {
        return;
    };
    let e = unsafe { &mut *pending };
    e.ret = ctx.ret::<u64>();
    e.header.ts_ns = unsafe { bpf_ktime_get_ns() };
    if op == VERBS_CREATE_QP {
        e.qp_num = read_user(e.ret + verbs_abi::QP_QP_NUM).unwrap_or(0);
        e.qp_type = read_user(e.ret + verbs_abi::QP_QP_TYPE).unwrap_or(0);
    }
    emit(EVENT_VERBS_CALL, *e);
    let _ = VERBS_PENDING.remove(&key);
}

macro_rules! verbs_probes {
    ($($enter:ident, $exit:ident => $op:expr;)+) => {$(
        #[uprobe]
        pub fn $enter(ctx: ProbeContext) -> u32 {
            verbs_enter(&ctx, $op);
            0
        }

        #[uretprobe]
        pub fn $exit(ctx: RetProbeContext) -> u32 {
            verbs_exit(&ctx, $op);
            0
        }
    )+};
}

verbs_probes! {
    ibv_open_device, ibv_open_device_ret => VERBS_OPEN_DEVICE;
    ibv_alloc_pd, ibv_alloc_pd_ret => VERBS_ALLOC_PD;
    ibv_reg_mr, ibv_reg_mr_ret => VERBS_REG_MR;
    ibv_reg_mr_iova2, ibv_reg_mr_iova2_ret => VERBS_REG_MR_IOVA2;
    ibv_create_cq, ibv_create_cq_ret => VERBS_CREATE_CQ;
    ibv_create_qp, ibv_create_qp_ret => VERBS_CREATE_QP;
    ibv_modify_qp, ibv_modify_qp_ret => VERBS_MODIFY_QP;
    ibv_destroy_qp, ibv_destroy_qp_ret => VERBS_DESTROY_QP;
}

// ---------------------------------------------------------------------------------------------
// Verbs data path: provider post_send / poll_cq, aggregated per QP in the kernel
// ---------------------------------------------------------------------------------------------

#[map]
static QP_TRAFFIC: LruHashMap<QpKey, QpTraffic> = LruHashMap::with_max_entries(MAX_QPS, 0);

/// Post time of each work request in flight, for completion latency.
#[map]
static WR_POSTED: LruHashMap<WrKey, u64> = LruHashMap::with_max_entries(65_536, 0);

/// The wc array of a poll_cq call in progress, by thread.
#[map]
static POLL_PENDING: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16_384, 0);

#[inline(always)]
fn qp_traffic(key: &QpKey) -> Option<&'static mut QpTraffic> {
    if let Some(t) = QP_TRAFFIC.get_ptr_mut(key) {
        return Some(unsafe { &mut *t });
    }
    let fresh = QpTraffic {
        latency_min_ns: u64::MAX,
        ..QpTraffic::default()
    };
    QP_TRAFFIC.insert(key, &fresh, 0).ok()?;
    // LRU: a full table evicts the least recently used QP, traffic and all; the loader tells
    // how many from this count and what is left at the end.
    count(STAT_QP_TRACKED);
    QP_TRAFFIC.get_ptr_mut(key).map(|t| unsafe { &mut *t })
}

#[inline(always)]
fn post_send(ctx: &ProbeContext) {
    let (qp, first_wr) = (
        ctx.arg::<u64>(0).unwrap_or(0),
        ctx.arg::<u64>(1).unwrap_or(0),
    );
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let Some(qp_num) = read_user::<u32>(qp + verbs_abi::QP_QP_NUM) else {
        return;
    };
    let key = QpKey { tgid, qp_num };
    let Some(traffic) = qp_traffic(&key) else {
        return;
    };
    let now = unsafe { bpf_ktime_get_ns() };
    traffic.post_calls += 1;
    let mut wr = first_wr;
    let mut i = 0;
    while i < verbs_abi::MAX_WRS {
        if wr == 0 {
            break;
        }
        let wr_id: u64 = read_user(wr + verbs_abi::WR_ID).unwrap_or(0);
        let sg_list: u64 = read_user(wr + verbs_abi::WR_SG_LIST).unwrap_or(0);
        let num_sge: i32 = read_user(wr + verbs_abi::SEND_WR_NUM_SGE).unwrap_or(0);
        let opcode: u32 = read_user(wr + verbs_abi::SEND_WR_OPCODE).unwrap_or(0);
        let mut j = 0;
        while j < verbs_abi::MAX_SGES {
            if j as i32 >= num_sge {
                break;
            }
            let len: u32 =
                read_user(sg_list + j * verbs_abi::SGE_SIZE + verbs_abi::SGE_LENGTH).unwrap_or(0);
            traffic.bytes_posted += len as u64;
            j += 1;
        }
        traffic.wrs_posted += 1;
        if opcode < 64 {
            traffic.opcodes |= 1 << opcode;
        }
        let _ = WR_POSTED.insert(
            &WrKey {
                tgid,
                qp_num,
                wr_id,
            },
            &now,
            0,
        );
        wr = read_user(wr + verbs_abi::WR_NEXT).unwrap_or(0);
        i += 1;
    }
}

#[inline(always)]
fn poll_cq_exit(ctx: &RetProbeContext) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(wc_base) = (unsafe { POLL_PENDING.get(&pid_tgid) }).copied() else {
        return;
    };
    let _ = POLL_PENDING.remove(&pid_tgid);
    let polled = ctx.ret::<i32>();
    let tgid = (pid_tgid >> 32) as u32;
    let now = unsafe { bpf_ktime_get_ns() };
    let every = cfg!(verbs_sample_every).max(1);
    let mut i = 0u64;
    while i < verbs_abi::MAX_WCS {
        if i as i32 >= polled {
            break;
        }
        let wc = wc_base + i * verbs_abi::WC_SIZE;
        i += 1;
        let wr_id: u64 = read_user(wc + verbs_abi::WC_WR_ID).unwrap_or(0);
        let status: u32 = read_user(wc + verbs_abi::WC_STATUS).unwrap_or(0);
        let opcode: u32 = read_user(wc + verbs_abi::WC_OPCODE).unwrap_or(0);
        let byte_len: u32 = read_user(wc + verbs_abi::WC_BYTE_LEN).unwrap_or(0);
        let qp_num: u32 = read_user(wc + verbs_abi::WC_QP_NUM).unwrap_or(0);
        let Some(traffic) = qp_traffic(&QpKey { tgid, qp_num }) else {
            continue;
        };
        traffic.completions += 1;
        traffic.bytes_completed += byte_len as u64;
        if status != 0 {
            traffic.completion_errors += 1;
        }
        let wr_key = WrKey {
            tgid,
            qp_num,
            wr_id,
        };
        let latency = match unsafe { WR_POSTED.get(&wr_key) } {
            Some(posted) => now.saturating_sub(*posted),
            None => 0,
        };
        if latency > 0 {
            let _ = WR_POSTED.remove(&wr_key);
            traffic.latency_count += 1;
            traffic.latency_sum_ns += latency;
            if latency < traffic.latency_min_ns {
                traffic.latency_min_ns = latency;
            }
            if latency > traffic.latency_max_ns {
                traffic.latency_max_ns = latency;
            }
        }
        // Errors are always sent; successes one in `every`.
        if status == 0 && traffic.completions % every != 0 {
            count(STAT_RATE_LIMITED + EVENT_VERBS_COMPLETION);
            continue;
        }
        emit(
            EVENT_VERBS_COMPLETION,
            VerbsCompletionEvent {
                header: EventHeader {
                    kind: EVENT_VERBS_COMPLETION,
                    _pad: 0,
                    ts_ns: now,
                },
                wr_id,
                latency_ns: latency,
                tgid,
                qp_num,
                status,
                opcode,
                byte_len,
                _pad: 0,
            },
        );
    }
}

#[uprobe]
pub fn verbs_post_send(ctx: ProbeContext) -> u32 {
    post_send(&ctx);
    0
}

#[uprobe]
pub fn verbs_poll_cq(ctx: ProbeContext) -> u32 {
    let wc = ctx.arg::<u64>(2).unwrap_or(0);
    let _ = POLL_PENDING.insert(&bpf_get_current_pid_tgid(), &wc, 0);
    0
}

#[uretprobe]
pub fn verbs_poll_cq_ret(ctx: RetProbeContext) -> u32 {
    poll_cq_exit(&ctx);
    0
}

/// `struct bpf_iter__tcp`, the context of an iter/tcp program (aya-ebpf has no binding).
#[repr(C)]
pub struct TcpIterContext {
    meta: *mut IterMeta,
    sk_common: *mut core::ffi::c_void,
    uid: u32,
}

/// `struct bpf_iter_meta`
#[repr(C)]
struct IterMeta {
    seq: *mut aya_ebpf::bindings::seq_file,
    session_id: u64,
    seq_num: u64,
}

const SOL_TCP: i32 = 6;
/// bpf_setsockopt's option for a socket's sock_ops callback flags (Linux 6.12).
const TCP_BPF_SOCK_OPS_CB_FLAGS: i32 = 1008;
const TCP_ESTABLISHED: u8 = 1;
/// `sock_common.skc_state`: after the addresses (8 bytes), the hash (4) and the ports (4), and
/// the family (2); unchanged since Linux 2.6.
const SKC_STATE_OFFSET: usize = 18;

/// Connections opened before this run get no sock_ops callback until something turns their
/// callbacks on. Read once per network namespace at the start, this turns ours on for every
/// established connection that has none (one tracked by another run keeps its own), and writes
/// one byte per connection it tried: `a` turned on, `r` refused (a kernel before 6.12 has no
/// TCP_BPF_SOCK_OPS_CB_FLAGS in bpf_setsockopt). sock_ops adopts each at its next ACK, with the
/// filters (`start_flow`, Look::Adopt). Listeners are left alone: their children would inherit
/// the flags, filtered out or not.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/tcp")]
pub fn adopt_open_connections(ctx: *mut TcpIterContext) -> i32 {
    let (meta, sk) = unsafe { ((*ctx).meta, (*ctx).sk_common) };
    if sk.is_null() || meta.is_null() {
        return 0;
    }
    // null for request and time-wait sockets
    let tp = unsafe { bpf_skc_to_tcp_sock(sk) };
    if tp.is_null() {
        return 0;
    }
    if unsafe { *(tp as *const u8).add(SKC_STATE_OFFSET) } != TCP_ESTABLISHED {
        return 0;
    }
    let mut flags: i32 = 0;
    let read = unsafe {
        bpf_getsockopt(
            tp.cast(),
            SOL_TCP,
            TCP_BPF_SOCK_OPS_CB_FLAGS,
            (&mut flags as *mut i32).cast(),
            4,
        )
    };
    let outcome: u8 = if read != 0 {
        b'r'
    } else if flags as u32 & BPF_SOCK_OPS_RTT_CB_FLAG != 0 {
        return 0;
    } else {
        let mut wanted = (flags as u32 | OUR_CB_FLAGS) as i32;
        let set = unsafe {
            bpf_setsockopt(
                tp.cast(),
                SOL_TCP,
                TCP_BPF_SOCK_OPS_CB_FLAGS,
                (&mut wanted as *mut i32).cast(),
                4,
            )
        };
        if set == 0 {
            let cookie = unsafe { bpf_get_socket_cookie(tp.cast()) };
            let _ = ITER_MARKED.insert(&cookie, &1, 0);
            b'a'
        } else {
            b'r'
        }
    };
    unsafe { bpf_seq_write((*meta).seq, (&outcome as *const u8).cast(), 1) };
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
