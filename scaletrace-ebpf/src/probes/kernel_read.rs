//! Reading the kernel's own structs at offsets the loader took from BTF (what a program's
//! context does not carry), shared by the TCP programs.
use aya_ebpf::helpers::bpf_probe_read_kernel;

/// The u64 at `offset` in the kernel struct at `base` (a pointer or an id); 0 when `base` is
/// null or the read fails.
#[inline(always)]
pub(crate) fn kernel_u64(base: *const u8, offset: u16) -> u64 {
    if base.is_null() {
        return 0;
    }
    // SAFETY: a probe read: the helper checks the address and copies 8 bytes or fails; the
    // offset lies inside the struct per the kernel's BTF.
    unsafe { bpf_probe_read_kernel(base.add(offset as usize) as *const u64) }.unwrap_or(0)
}
