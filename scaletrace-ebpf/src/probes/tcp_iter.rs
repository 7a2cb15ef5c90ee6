//! What the iter/tcp programs share: their context (aya-ebpf has no binding) and the step each
//! starts with, from the iterator's socket to a full TCP socket.
use aya_ebpf::{bindings::seq_file, helpers::bpf_skc_to_tcp_sock};

/// `struct bpf_iter__tcp`, the context of an iter/tcp program.
#[repr(C)]
pub struct TcpIterContext {
    meta: *mut IterMeta,
    sk_common: *mut core::ffi::c_void,
    uid: u32,
}

/// `struct bpf_iter_meta`, the first member of every iterator's context.
#[repr(C)]
struct IterMeta {
    seq: *mut seq_file,
    session_id: u64,
    seq_num: u64,
}

/// The iterator's output and its socket as a full TCP socket (a trusted BTF pointer); None for
/// request and time-wait sockets, and at the end of the walk.
#[inline(always)]
pub(crate) fn tcp_socket(ctx: *mut TcpIterContext) -> Option<(*mut seq_file, *mut u8)> {
    // SAFETY: the iterator's context, valid for this run; the verifier checks the loads.
    let (meta, sk) = unsafe { ((*ctx).meta, (*ctx).sk_common) };
    if sk.is_null() || meta.is_null() {
        return None;
    }
    // SAFETY: `sk` is the iterator's socket (checked non-null); the helper checks its type.
    let tp = unsafe { bpf_skc_to_tcp_sock(sk) };
    if tp.is_null() {
        return None;
    }
    // SAFETY: the iterator's meta (checked non-null), valid for this run.
    Some((unsafe { (*meta).seq }, tp.cast()))
}
