//! The flows still open, read from the kernel: sock_ops keeps each flow's aggregate in its
//! socket's storage (`FLOW_STATE`), which userspace cannot look up by key, so the
//! `dump_open_flows` iterator (iter/tcp) writes the aggregate of every tracked socket of a
//! network namespace, run in each namespace as the start's adoption runs. The iterator is
//! linked here with the two bpf() commands it takes (aya's own link needs the eBPF object,
//! which is gone by the final read).
use std::{
    fs::File,
    io::Read as _,
    os::fd::{AsFd, AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use aya::{
    programs::{Iter, ProgramFd},
    Btf, Ebpf,
};
use scaletrace_common::FlowStats;

/// The iterator program in the eBPF object.
const PROGRAM: &str = "dump_open_flows";

/// Loads the iterator and links it once here (a kernel that refuses it says so now, not at the
/// stop). It needs the kernel's BTF and iter/tcp (Linux 5.9).
pub fn load(ebpf: &mut Ebpf) -> Result<()> {
    let btf = Btf::from_sys_fs().context("reading the kernel's BTF")?;
    let iter: &mut Iter = ebpf
        .program_mut(PROGRAM)
        .with_context(|| format!("program {PROGRAM} missing from the object"))?
        .try_into()?;
    iter.load("tcp", &btf)
        .context("the verifier rejected the iter/tcp program that reads open flows")?;
    // (unloaded when it cannot be linked: `OpenFlows::take` finds no reader then)
    if let Err(e) = iterator(iter.fd()?.as_fd()) {
        let _ = iter.unload();
        return Err(e);
    }
    Ok(())
}

/// Reads the open flows' aggregates, during the run and after it (it holds its own reference
/// to the program: the eBPF object may be gone).
pub struct OpenFlows {
    program: ProgramFd,
}

impl OpenFlows {
    /// The reader for a loaded iterator; None when it was not loaded (sock_ops not attached:
    /// no flow has an aggregate).
    pub fn take(ebpf: &Ebpf) -> Result<Option<Self>> {
        let Some(Ok(fd)) = ebpf.program(PROGRAM).map(|p| p.fd()) else {
            return Ok(None);
        };
        let program = fd.try_clone().context("duplicating the iterator's fd")?;
        Ok(Some(OpenFlows { program }))
    }

    /// Every tracked socket's aggregate in the namespaces at `namespaces`, filled in (one whose
    /// flow is being created has no cookie yet and is left out: it is read whole at the next
    /// look). A namespace that cannot be entered is skipped (gone meanwhile: its sockets too).
    pub fn read(&self, namespaces: &[PathBuf]) -> Vec<FlowStats> {
        let mut flows = Vec::new();
        for ns in namespaces {
            match self.read_in(ns) {
                Ok(found) => flows.extend(found),
                Err(e) => log::debug!("open flows of {}: {e:#}", ns.display()),
            }
        }
        flows
    }

    fn read_in(&self, ns: &Path) -> Result<Vec<FlowStats>> {
        let program = self.program.as_fd();
        crate::environment::in_netns(ns, || {
            let mut bytes = Vec::new();
            iterator(program)?
                .read_to_end(&mut bytes)
                .context("reading the open flows' iterator")?;
            Ok(parse(&bytes))
        })
    }
}

/// The aggregates the iterator wrote, one `FlowStats` after another.
fn parse(bytes: &[u8]) -> Vec<FlowStats> {
    bytes
        .chunks_exact(size_of::<FlowStats>())
        // SAFETY: a chunk holds exactly one FlowStats, written by the kernel from a value of
        // the same layout (size asserted on both sides); plain integers, any bytes are valid.
        .map(|chunk| unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<FlowStats>()) })
        .filter(|flow| flow.cookie != 0)
        .collect()
}

/// `BPF_LINK_CREATE` and `BPF_ITER_CREATE` (uapi/linux/bpf.h), and the iterator attach type.
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_TRACE_ITER: u32 = 28;

/// A new run of the iterator over the TCP sockets of this thread's network namespace: a file
/// whose contents are what it writes.
fn iterator(program: BorrowedFd) -> Result<File> {
    // bpf_attr.link_create: prog_fd, target_fd (none), attach_type; the rest of the attr zero,
    // as the kernel requires
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(program.as_raw_fd() as u32).to_ne_bytes());
    attr[8..12].copy_from_slice(&BPF_TRACE_ITER.to_ne_bytes());
    let link = bpf(BPF_LINK_CREATE, &attr).context("attaching the open flows' iterator")?;
    // bpf_attr.iter_create: link_fd, flags
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(link.as_raw_fd() as u32).to_ne_bytes());
    let iter = bpf(BPF_ITER_CREATE, &attr).context("creating the open flows' iterator")?;
    Ok(File::from(iter))
}

/// One bpf() call that returns a new fd.
fn bpf(cmd: libc::c_long, attr: &[u8; 128]) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is a bpf_attr-sized buffer laid out for `cmd` (no pointers in it); the
    // kernel returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_ptr(), attr.len() as u32) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_whole_aggregates_and_skips_one_not_filled_in() {
        let filled = FlowStats {
            cookie: 7,
            bytes_acked: 1_000,
            ..Default::default()
        };
        let mut bytes = Vec::new();
        for flow in [filled, FlowStats::default()] {
            bytes.extend(crate::decode::bytes_of(&flow));
        }
        let flows = parse(&bytes);
        assert_eq!(flows.len(), 1);
        assert_eq!((flows[0].cookie, flows[0].bytes_acked), (7, 1_000));
    }
}
