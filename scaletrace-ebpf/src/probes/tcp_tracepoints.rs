//! TCP tracepoints: `tcp_retransmit_skb` / `tcp_retransmit_synack`, one event per retransmit
//! under a per-CPU token bucket; `inet_sock_set_state`, the state transitions of tracked flows
//! with the current task (which attributes a flow to the process that closes it). Their field
//! offsets come from tracefs through `CONFIG`: Rust eBPF has no CO-RE.
use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::{map, tracepoint},
    maps::PerCpuArray,
    programs::TracePointContext,
};
use scaletrace_common::*;

use super::{
    kernel_read::kernel_u64,
    tcp_sockops::{netns_keyed, tracked_key, TRACKED},
};
use crate::{
    emit::{count, emit, header},
    filter::{cidr_matches, port_matches},
};

const IPPROTO_TCP: u16 = 6;

#[repr(C)]
#[derive(Clone, Copy)]
struct TokenBucket {
    tokens: u64,
    last_ns: u64,
}

#[map]
static RETRANSMIT_BUCKET: PerCpuArray<TokenBucket> = PerCpuArray::with_max_entries(1, 0);

/// A field of the tracepoint's record at `offset` (from its tracefs format, via `CONFIG`).
#[inline(always)]
fn field<T>(ctx: &TracePointContext, offset: u16) -> Result<T, i64> {
    // SAFETY: read with bpf_probe_read_kernel, which fails instead of faulting; T is plain
    // data (integers, byte arrays) valid for any bit pattern.
    unsafe { ctx.read_at::<T>(offset as usize) }.map_err(|e| e as i64)
}

/// Reads the connection tuple from a tcp/sock tracepoint record.
#[inline(always)]
fn tracepoint_tuple(ctx: &TracePointContext, off: &TracepointOffsets) -> Result<FlowTuple, i64> {
    let mut tuple = FlowTuple {
        family: field(ctx, off.family)?,
        local_port: field(ctx, off.sport)?,
        remote_port: field(ctx, off.dport)?,
        ..FlowTuple::default()
    };
    if tuple.family == AF_INET {
        let s: [u8; 4] = field(ctx, off.saddr)?;
        let d: [u8; 4] = field(ctx, off.daddr)?;
        tuple.local_addr[..4].copy_from_slice(&s);
        tuple.remote_addr[..4].copy_from_slice(&d);
    } else {
        tuple.local_addr = field(ctx, off.saddr_v6)?;
        tuple.remote_addr = field(ctx, off.daddr_v6)?;
    }
    Ok(tuple)
}

/// The socket cookie of the tracked flow with this record's tuple, in the network namespace
/// of the record's socket (`skaddr`) where the config says the tracepoints can read it.
#[inline(always)]
fn tracked_cookie(
    ctx: &TracePointContext,
    off: &TracepointOffsets,
    tuple: FlowTuple,
) -> Option<u64> {
    let netns_cookie = if netns_keyed() {
        let sk: u64 = field(ctx, off.skaddr).ok()?;
        let net = kernel_u64(sk as *const u8, config!(sock_net));
        // A failed read gives 0, which no namespace has (cookies count from 1): no flow is
        // looked up under it, so its events are dropped, never put on another flow.
        match kernel_u64(net as *const u8, config!(net_cookie)) {
            0 => return None,
            cookie => cookie,
        }
    } else {
        0
    };
    // SAFETY: the cookie is copied out at once (an entry may be deleted concurrently).
    unsafe { TRACKED.get(tracked_key(tuple, netns_cookie)) }.copied()
}

/// Per-CPU token bucket for per-packet events; false means "over the rate, count and skip".
#[inline(always)]
fn take_retransmit_token(now: u64) -> bool {
    let (rate, burst) = (
        config!(retransmit_events_per_sec),
        config!(retransmit_burst),
    );
    let Some(bucket) = RETRANSMIT_BUCKET.get_ptr_mut(0) else {
        return true;
    };
    // SAFETY: this CPU's slot of a per-CPU array, not aliased while this program runs.
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
        match tracked_cookie(ctx, off, tuple) {
            Some(cookie) => cookie,
            None => return Ok(()),
        }
    };
    // The tracepoint fires for each attempt (Linux 6.10 and later say how it went): one the
    // kernel did not send, typically because the original is still in the host's own queue
    // behind a shaper, is no retransmit on the wire. Counted, not recorded.
    if off.err != TracepointOffsets::ABSENT && field::<i32>(ctx, off.err).unwrap_or(0) != 0 {
        count(STAT_RETRANSMITS_NOT_SENT);
        return Ok(());
    }
    let hdr = header(EVENT_RETRANSMIT);
    if !take_retransmit_token(hdr.ts_ns) {
        count(STAT_RATE_LIMITED + EVENT_RETRANSMIT);
        return Ok(());
    }
    let state = if off.oldstate == TracepointOffsets::ABSENT {
        0
    } else {
        field::<i32>(ctx, off.oldstate).unwrap_or(0) as u32
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
    let off = config!(retransmit_tp);
    let _ = handle_retransmit(&ctx, &off, false);
    0
}

#[tracepoint]
pub fn tcp_retransmit_synack(ctx: TracePointContext) -> u32 {
    let off = config!(synack_tp);
    let _ = handle_retransmit(&ctx, &off, true);
    0
}

#[inline(always)]
fn handle_state(ctx: &TracePointContext) -> Result<(), i64> {
    let off = config!(state_tp);
    let protocol: u16 = field(ctx, off.protocol)?;
    if protocol != IPPROTO_TCP {
        return Ok(());
    }
    let tuple = tracepoint_tuple(ctx, &off)?;
    let Some(cookie) = tracked_cookie(ctx, &off, tuple) else {
        return Ok(());
    };
    let oldstate: i32 = field(ctx, off.oldstate)?;
    let newstate: i32 = field(ctx, off.newstate)?;
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
