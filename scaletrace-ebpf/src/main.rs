//! scaletrace kernel side: the programs are in `probes/`, one probe family per file (TCP
//! sock_ops, TCP tracepoints, adoption of open connections, NCCL, verbs control path, verbs data
//! path); `emit` and `filter` hold what they share.
//!
//! * `scaletrace_sockops` (sock_ops, attached to a cgroup v2): the flow table. It applies the
//!   filters once per connection, keeps per-flow aggregates in the socket's storage (so
//!   per-packet work never crosses the ring buffer), sends sampled RTT snapshots, and a flow-end
//!   record at close.
//! * `tcp_retransmit_skb` / `tcp_retransmit_synack` tracepoints: one event per retransmit,
//!   under a per-CPU token bucket.
//! * `inet_sock_set_state` tracepoint: state transitions of tracked flows with the current task,
//!   which attributes the flow to the process that closes it.
//! * `adopt_open_connections` (iter/tcp): run once per network namespace at the start, turns on
//!   the per-socket callbacks of connections opened before it, so sock_ops adopts them.
//! * `dump_open_flows` (iter/tcp): run in each network namespace when userspace reads the flows
//!   still open (a snapshot, the stop), writes their aggregates from the sockets' storage.
//!
//! Tracepoint field offsets come from userspace (`CONFIG`), read from tracefs at load time,
//! because they change between kernel versions and Rust eBPF has no CO-RE.
#![no_std]
#![no_main]

/// Reads one `CONFIG` field. Volatile: the loader rewrites this read-only global, so the
/// compiler must not fold in the defaults; per field, so no 128-byte copy lands on the stack.
macro_rules! config {
    ($($field:tt)+) => {
        // SAFETY: a field of a static, always valid; volatile only to defeat constant folding.
        unsafe { core::ptr::read_volatile(&$crate::emit::CONFIG.$($field)+) }
    };
}

mod emit;
mod filter;
mod probes;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
