//! Connections opened before the recorder started. sock_ops calls a socket's program only for
//! events after the socket's callbacks are turned on, and a connection that was established
//! before the program was attached never turns them on: a job that runs for days over
//! connections opened at its start would be invisible to an agent restarted or upgraded under
//! it. At the start, the `adopt_open_connections` iter/tcp program is run once in every network
//! namespace the recorder watches; it turns the callbacks on, and sock_ops adopts each
//! connection at its next segment (a connection that only receives included), with the
//! filters and the socket's totals so far (`flows.adopted`).
use std::{
    collections::HashSet,
    io::Read as _,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use aya::{programs::Iter, Btf, Ebpf};

/// What the iterator did, over every namespace it ran in.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Adoption {
    pub namespaces: usize,
    /// Connections whose callbacks it turned on.
    pub connections: u64,
    /// Connections the kernel would not turn them on for (before Linux 6.12,
    /// bpf_setsockopt has no TCP_BPF_SOCK_OPS_CB_FLAGS).
    pub refused: u64,
    /// Namespaces it could not enter or read, with why (a namespace gone meanwhile).
    pub failed: Vec<(PathBuf, String)>,
}

impl Adoption {
    /// Adds one namespace's iterator output: a byte per connection tried.
    fn count(&mut self, output: &[u8]) {
        self.namespaces += 1;
        self.connections += output.iter().filter(|b| **b == b'a').count() as u64;
        self.refused += output.iter().filter(|b| **b == b'r').count() as u64;
    }
}

/// The network namespaces to look in: the one named by `--netns`, else every namespace on the
/// machine that a process or an `ip netns`/CNI bind mount holds (the recorder's own included),
/// each once.
pub fn namespaces(netns: Option<&Path>) -> Vec<PathBuf> {
    if let Some(path) = netns {
        return vec![path.to_path_buf()];
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut add = |path: PathBuf| {
        // an nsfs inode names the namespace, whichever file or process holds it
        if let Ok(meta) = std::fs::metadata(&path) {
            if seen.insert((meta.dev(), meta.ino())) {
                out.push(path);
            }
        }
    };
    add(PathBuf::from("/proc/self/ns/net"));
    if let Ok(entries) = std::fs::read_dir("/run/netns") {
        for entry in entries.flatten() {
            // bind mounts are files; a link there is not one `ip netns` made
            if entry.file_type().is_ok_and(|t| t.is_file()) {
                add(entry.path());
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
            {
                add(entry.path().join("ns/net"));
            }
        }
    }
    out
}

/// Loads the iterator and runs it in each namespace. An error means it could not run at all
/// (no BTF, a kernel without iter/tcp); per-namespace failures are in `Adoption::failed`.
pub fn adopt_open_connections(ebpf: &mut Ebpf, namespaces: &[PathBuf]) -> Result<Adoption> {
    let btf = Btf::from_sys_fs().context("reading the kernel's BTF")?;
    let iter: &mut Iter = ebpf
        .program_mut("adopt_open_connections")
        .context("program adopt_open_connections missing from the object")?
        .try_into()?;
    iter.load("tcp", &btf)
        .context("the verifier rejected the iter/tcp program")?;
    let mut adoption = Adoption::default();
    for ns in namespaces {
        match run_in(iter, ns) {
            Ok(output) => adoption.count(&output),
            Err(e) => adoption.failed.push((ns.clone(), format!("{e:#}"))),
        }
    }
    Ok(adoption)
}

/// Runs the iterator over the TCP sockets of the namespace at `ns`: an iterator walks the
/// namespace of the task that creates it, so a thread enters the namespace first.
fn run_in(iter: &mut Iter, ns: &Path) -> Result<Vec<u8>> {
    crate::environment::in_netns(ns, || {
        let id = iter.attach().context("attaching the iterator")?;
        let link = iter.take_link(id).context("taking the iterator link")?;
        let mut output = Vec::new();
        link.into_file()
            .context("creating the iterator")?
            .read_to_end(&mut output)
            .context("reading the iterator")?;
        Ok(output)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_outcome_and_namespace() {
        let mut a = Adoption::default();
        a.count(b"aar");
        a.count(b"");
        assert_eq!((a.namespaces, a.connections, a.refused), (2, 2, 1));
    }

    #[test]
    fn every_namespace_once_and_the_named_one_alone() {
        let all = namespaces(None);
        assert_eq!(all[0], Path::new("/proc/self/ns/net"));
        // our own namespace is also held by /proc/<our pid>: listed once
        let own = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        let same = all
            .iter()
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.ino() == own))
            .count();
        assert_eq!(same, 1, "{all:?}");
        let one = namespaces(Some(Path::new("/run/netns/x")));
        assert_eq!(one, vec![PathBuf::from("/run/netns/x")]);
    }
}
