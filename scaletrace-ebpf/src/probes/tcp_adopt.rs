//! `adopt_open_connections` (iter/tcp): run once per network namespace at the start, turns on
//! the per-socket callbacks of connections opened before it, so sock_ops adopts them.
use aya_ebpf::{
    bindings::{seq_file, BPF_SOCK_OPS_RTT_CB_FLAG, BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG},
    helpers::{bpf_get_socket_cookie, bpf_getsockopt, bpf_seq_write, bpf_setsockopt},
    macros::map,
    maps::LruHashMap,
};
use scaletrace_common::*;

use super::{
    tcp_iter::{tcp_socket, TcpIterContext},
    tcp_sockops::OUR_CB_FLAGS,
};

/// Sockets `adopt_open_connections` turned callbacks on for, until sock_ops has seen them,
/// with exactly the callback flags it turned on (those already on were someone else's and stay
/// as they are): where this run's filters leave the socket out, sock_ops turns them off again
/// (the iterator cannot apply the filters: a sock_common's IPv6 addresses have no fixed
/// offset); where it adopts the socket, it turns off the next-segment callback only.
#[map]
pub(crate) static ITER_MARKED: LruHashMap<u64, u32> = LruHashMap::with_max_entries(MAX_FLOWS, 0);

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
/// TCP_BPF_SOCK_OPS_CB_FLAGS in bpf_setsockopt). sock_ops adopts each at the next segment it
/// sends, data or ACK (`on_next_segment`), or at its next RTT update, with the filters
/// (`start_flow`, Look::Adopt). Listeners are left alone: their children would inherit
/// the flags, filtered out or not.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/tcp")]
pub fn adopt_open_connections(ctx: *mut TcpIterContext) -> i32 {
    let Some((seq, tp)) = tcp_socket(ctx) else {
        return 0;
    };
    // SAFETY: a tcp_sock the helper returned (a trusted BTF pointer, non-null): the verifier
    // allows the load and bounds it by the struct's size.
    if unsafe { *(tp as *const u8).add(SKC_STATE_OFFSET) } != TCP_ESTABLISHED {
        return 0;
    }
    let mut flags: i32 = 0;
    // SAFETY: a TCP socket locked by the iterator; `flags` is a 4-byte local.
    let read = unsafe {
        bpf_getsockopt(
            tp.cast(),
            SOL_TCP,
            TCP_BPF_SOCK_OPS_CB_FLAGS,
            (&mut flags as *mut i32).cast(),
            4,
        )
    };
    if read != 0 {
        return write_outcome(seq, b'r');
    }
    // Callbacks on already (an earlier run's, or another recorder's): they stay as they are;
    // else ours go on. Either way the callback of the next segment the socket sends (data or
    // ACK) is asked for, so that a connection that only receives is adopted too (it gets no
    // RTT callback); unless someone has it on already (it is theirs, and calls us anyway).
    let flags = flags as u32;
    let mut wanted = flags | BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG;
    if flags & BPF_SOCK_OPS_RTT_CB_FLAG == 0 {
        wanted |= OUR_CB_FLAGS;
    }
    let turned_on = wanted & !flags;
    if turned_on == 0 {
        return 0;
    }
    // SAFETY: a socket pointer, the argument this helper takes.
    let cookie = unsafe { bpf_get_socket_cookie(tp.cast()) };
    // The mark first: a flag turned on without one could never be turned off again.
    if ITER_MARKED.insert(&cookie, &turned_on, 0).is_err() {
        return 0;
    }
    let mut wanted = wanted as i32;
    // SAFETY: as for bpf_getsockopt above; `wanted` is a 4-byte local.
    let set = unsafe {
        bpf_setsockopt(
            tp.cast(),
            SOL_TCP,
            TCP_BPF_SOCK_OPS_CB_FLAGS,
            (&mut wanted as *mut i32).cast(),
            4,
        )
    };
    if set != 0 {
        let _ = ITER_MARKED.remove(&cookie);
    }
    // (counted: the connections whose callbacks were off)
    match (turned_on & BPF_SOCK_OPS_RTT_CB_FLAG, set) {
        (0, _) => 0,
        (_, 0) => write_outcome(seq, b'a'),
        _ => write_outcome(seq, b'r'),
    }
}

/// One byte per connection the iterator tried: `a` turned on, `r` refused.
#[inline(always)]
fn write_outcome(seq: *mut seq_file, outcome: u8) -> i32 {
    // SAFETY: the iterator's seq_file and one byte of a local.
    unsafe { bpf_seq_write(seq, (&outcome as *const u8).cast(), 1) };
    0
}
