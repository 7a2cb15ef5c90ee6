//! What the API-call probe families (NCCL, the verbs control path) share: a call's event held
//! per thread and function between the function's entry and its return, and the uprobe and
//! uretprobe pair of each traced function.
use aya_ebpf::{helpers::bpf_get_current_pid_tgid, maps::LruHashMap};
use scaletrace_common::*;

/// This thread's call of function `op`.
#[inline(always)]
pub(crate) fn call_key(op: u32) -> CallKey {
    CallKey {
        pid_tgid: bpf_get_current_pid_tgid(),
        op,
        _pad: 0,
    }
}

/// Holds a call's event from its entry to its return.
#[inline(always)]
pub(crate) fn hold<T>(pending: &LruHashMap<CallKey, T>, op: u32, event: &T) {
    let _ = pending.insert(&call_key(op), event, 0);
}

/// The event this thread's entry into `op` held, taken out of the map.
#[inline(always)]
pub(crate) fn take<T: Copy>(pending: &LruHashMap<CallKey, T>, op: u32) -> Option<T> {
    let key = call_key(op);
    let held = pending.get_ptr_mut(&key)?;
    // SAFETY: a valid element of the map. Copied out at once: an LRU map under pressure may
    // recycle an element for another key, on any CPU.
    let event = unsafe { *held };
    let _ = pending.remove(&key);
    Some(event)
}

/// An entry probe and a return probe per function: `$enter_fn(&ctx, op)` and
/// `$exit_fn(&ctx, op)` for each `entry, return => op` line.
macro_rules! entry_exit_probes {
    ($enter_fn:ident, $exit_fn:ident; $($enter:ident, $exit:ident => $op:expr;)+) => {$(
        #[uprobe]
        pub fn $enter(ctx: ProbeContext) -> u32 {
            $enter_fn(&ctx, $op);
            0
        }

        #[uretprobe]
        pub fn $exit(ctx: RetProbeContext) -> u32 {
            $exit_fn(&ctx, $op);
            0
        }
    )+};
}
pub(crate) use entry_exit_probes;
