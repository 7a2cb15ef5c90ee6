//! What every probe family shares: the loader's configuration, the ring buffer and the event
//! counters, and the helpers that stamp, send and count an event.
use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{bpf_ktime_get_ns, bpf_probe_read_user},
    macros::map,
    maps::{PerCpuArray, RingBuf},
};
use scaletrace_common::*;

/// Written by the loader before load (filters, tracepoint offsets, rates); read with `config!`.
#[unsafe(no_mangle)]
pub(crate) static CONFIG: Config = Config::DEFAULT;

#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(8 * 1024 * 1024, 0);

/// Per-CPU event counters (`STAT_*`): emitted, dropped on a full ring, rate-limited, filtered.
#[map]
pub(crate) static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(STAT_SLOTS, 0);

#[inline(always)]
pub(crate) fn count(slot: u32) {
    if let Some(ptr) = STATS.get_ptr_mut(slot) {
        // SAFETY: a valid, aligned u64 slot of a per-CPU array map: this CPU's copy. A nested
        // run on this CPU (a softirq's program interrupting one that runs in process context)
        // can lose an increment between the load and the store: a miscount of one, in counters
        // that report losses, never memory unsafety. (The bpfel target has no atomic
        // read-modify-write in core.)
        unsafe { *ptr += 1 };
    }
}

/// The flags of every ring buffer submit: wake the loader only once a batch waits.
///
/// By default the kernel wakes the reader whenever it has caught up, which for a loader that
/// keeps up is nearly every event, and a wakeup (an irq_work, an IPI in a VM) cost more than
/// everything else in the per-ACK program: with RTT samples every 10 ms on 8 busy flows it
/// tripled the sock_ops time per MB transferred (measured; docs/performance.md). The loader
/// drains what waits below the threshold every 100 ms, so an event waits at most that long.
#[inline(always)]
pub(crate) fn submit_flags() -> u64 {
    let threshold = config!(ring_wakeup_bytes);
    if threshold == 0 {
        0
    } else if EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= threshold {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

#[inline(always)]
pub(crate) fn header(kind: u32) -> EventHeader {
    EventHeader {
        kind,
        _pad: 0,
        ts_ns: now_ns(),
    }
}

/// Kernel monotonic time, the clock every event carries.
#[inline(always)]
pub(crate) fn now_ns() -> u64 {
    // SAFETY: reads a clock; takes no pointer.
    unsafe { bpf_ktime_get_ns() }
}

/// Writes `event` to the ring buffer, counting success or a full-ring drop for `kind`.
#[inline(always)]
pub(crate) fn emit<T: 'static>(kind: u32, event: T) -> bool {
    match EVENTS.reserve::<T>(0) {
        Some(mut entry) => {
            entry.write(event);
            entry.submit(submit_flags());
            count(STAT_EMITTED + kind);
            true
        }
        None => {
            count(STAT_RING_FULL + kind);
            false
        }
    }
}

/// Reserves a `T` in the ring buffer, lets `fill` write every field of it in place and submits
/// it, counting success or a full-ring drop for `kind`. For events too large to build on the
/// 512-byte eBPF stack, which `emit` would need to hold first.
#[inline(always)]
pub(crate) fn emit_in_place<T: 'static>(kind: u32, fill: impl FnOnce(&mut T)) -> bool {
    let Some(mut entry) = EVENTS.reserve::<T>(0) else {
        count(STAT_RING_FULL + kind);
        return false;
    };
    // SAFETY: a reserved ring buffer slot of type T, ours until submitted; every caller's
    // `fill` writes each field (or zeroes the whole slot first) before the submit below.
    fill(unsafe { &mut *entry.as_mut_ptr() });
    entry.submit(submit_flags());
    count(STAT_EMITTED + kind);
    true
}

/// A `T` at `addr` in the traced process's memory; None if it cannot be read.
#[inline(always)]
pub(crate) fn read_user<T>(addr: u64) -> Option<T> {
    if addr == 0 {
        return None;
    }
    // SAFETY: bpf_probe_read_user copies through the kernel's fault-handling user access: a bad
    // address is an error, never a fault; T is plain data valid for any bit pattern.
    unsafe { bpf_probe_read_user(addr as *const T) }.ok()
}
