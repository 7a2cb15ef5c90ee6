//! `dump_open_flows` (iter/tcp): how userspace reads the flows still open. Their aggregates
//! live in the sockets' own storage (`FLOW_STATE`), which has no key userspace could look up;
//! this iterator visits a network namespace's TCP sockets and writes the aggregate of each that
//! has one. (An iterator over the storage map itself, iter/bpf_sk_storage_map, would visit
//! every namespace at once, but some kernels refuse map-element iterators: this one does.)
use aya_ebpf::helpers::{bpf_seq_write, generated::bpf_sk_storage_get};
use scaletrace_common::FlowStats;

use super::{
    tcp_iter::{tcp_socket, TcpIterContext},
    tcp_sockops::FLOW_STATE,
};

/// Writes each tracked socket's flow aggregate whole, one `FlowStats` after another.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/tcp")]
pub fn dump_open_flows(ctx: *mut TcpIterContext) -> i32 {
    // (request and time-wait sockets have no storage)
    let Some((seq, tp)) = tcp_socket(ctx) else {
        return 0;
    };
    // SAFETY: the map is FLOW_STATE (its address is what the loader relocates to the map), `tp`
    // a full socket; no flags: only read, never created.
    let flow = unsafe {
        bpf_sk_storage_get(
            core::ptr::addr_of!(FLOW_STATE).cast_mut().cast(),
            tp.cast(),
            core::ptr::null_mut(),
            0,
        )
    };
    if flow.is_null() {
        return 0;
    }
    // SAFETY: the iterator's seq_file and a whole FlowStats of this socket's storage.
    unsafe { bpf_seq_write(seq, flow.cast(), core::mem::size_of::<FlowStats>() as u32) };
    0
}
