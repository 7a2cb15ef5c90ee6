//! A synthetic event source for the benchmark, never attached otherwise: the
//! `syscalls:sys_enter_getppid` tracepoint, filtered to the one process the loader names
//! (`--bench-source-pid`), sends one RTT sample per call. A syscall from a tight loop costs a
//! few hundred nanoseconds where a uprobe costs ~20 µs, so this is the source that can push the
//! ring buffer and the loader past 1 M events/s; RTT samples are the commonest event, so the
//! loader does its usual work for each.
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext,
};
use scaletrace_common::*;

use crate::emit::{emit_in_place, now_ns};

#[tracepoint]
pub fn bench_source(_ctx: TracePointContext) -> u32 {
    let tgid = config!(bench_source_tgid);
    if tgid == 0 || (bpf_get_current_pid_tgid() >> 32) as u32 != tgid {
        return 0;
    }
    emit_in_place(EVENT_RTT_SAMPLE, |e: &mut RttSampleEvent| {
        // SAFETY: all-zero bytes are a valid RttSampleEvent (plain integers): every field the
        // lines below do not set is zero.
        unsafe { core::ptr::write_bytes(e as *mut RttSampleEvent, 0, 1) };
        let now = now_ns();
        e.header = EventHeader {
            kind: EVENT_RTT_SAMPLE,
            _pad: 0,
            ts_ns: now,
        };
        // values that vary, as a real flow's do: 64 flows, RTT and counters from the clock
        e.cookie = 1 + (now >> 7) % 64;
        e.srtt_us = 50 + ((now >> 10) % 4096) as u32;
        e.min_rtt_us = 40;
        e.bytes_acked = now >> 4;
        e.snd_cwnd = 10 + ((now >> 13) % 200) as u32;
        e.mss = 1448;
        e.dsack_dups = NOT_MEASURED;
        e.reord_seen = NOT_MEASURED;
    });
    0
}
