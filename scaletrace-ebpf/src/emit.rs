//! What every probe family shares: the loader's configuration, the ring buffer and the event
//! counters, and the helpers that stamp, send and count an event.
use aya_ebpf::{
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
        unsafe { *ptr += 1 };
    }
}

#[inline(always)]
pub(crate) fn header(kind: u32) -> EventHeader {
    EventHeader {
        kind,
        _pad: 0,
        ts_ns: unsafe { bpf_ktime_get_ns() },
    }
}

/// Writes `event` to the ring buffer, counting success or a full-ring drop for `kind`.
#[inline(always)]
pub(crate) fn emit<T: 'static>(kind: u32, event: T) -> bool {
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
pub(crate) fn read_user<T>(addr: u64) -> Option<T> {
    if addr == 0 {
        return None;
    }
    unsafe { bpf_probe_read_user(addr as *const T) }.ok()
}
