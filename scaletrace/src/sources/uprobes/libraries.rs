//! Finding the shared libraries to probe with uprobes (libnccl, libibverbs): those given on the
//! command line, else those the `--pid` process has mapped, else the system's (the RDMA
//! provider libraries are found by the verbs source, `verbs/providers.rs`).
use std::path::{Path, PathBuf};

/// Libraries to probe, and where they came from: the explicit paths, else those the `--pid`
/// process has mapped whose file name starts with `prefix`, else the dynamic linker cache's
/// `soname`.
pub fn find_libraries(
    explicit: &[PathBuf],
    pid: Option<u32>,
    prefix: &str,
    soname: &str,
) -> (Vec<PathBuf>, String) {
    if !explicit.is_empty() {
        return (explicit.to_vec(), "flags".into());
    }
    if let Some(pid) = pid {
        let libs = mapped_by(pid, |name| name.starts_with(prefix));
        if !libs.is_empty() {
            return (libs, format!("/proc/{pid}/maps"));
        }
    }
    let ldconfig = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    match library_from_ldconfig(&ldconfig, soname) {
        Some(lib) => (vec![lib], "ldconfig".into()),
        None => (Vec::new(), "not found".into()),
    }
}

/// `libs` without a second path to a file already listed (the same path twice, a link to it):
/// each would attach the family's probes again, to fire twice per call for nothing, and name
/// the library twice in `hooks_attached`.
pub fn each_file_once(libs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = std::collections::HashSet::new();
    libs.into_iter()
        .filter(|lib| seen.insert(std::fs::canonicalize(lib).unwrap_or_else(|_| lib.clone())))
        .collect()
}

pub fn file_name(path: &Path) -> Option<&str> {
    path.file_name().and_then(|n| n.to_str())
}

/// The libraries process `pid` has mapped whose file name is `wanted` (none if it is gone).
pub fn mapped_by(pid: u32, wanted: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    mapped_libraries(&maps, wanted)
}

/// The files of a `/proc/PID/maps` text whose file name is `wanted`, sorted, each once.
pub fn mapped_libraries(maps: &str, wanted: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut libs: Vec<PathBuf> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(PathBuf::from)
        .filter(|p| file_name(p).is_some_and(&wanted))
        .collect();
    libs.sort();
    libs.dedup();
    libs
}

/// A library in the dynamic linker's cache (`ldconfig -p`).
pub fn library_from_ldconfig(ldconfig_output: &str, soname: &str) -> Option<PathBuf> {
    ldconfig_output
        .lines()
        .filter(|l| l.trim_start().starts_with(soname))
        .filter_map(|l| l.rsplit("=> ").next())
        .map(|p| PathBuf::from(p.trim()))
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_named_twice_or_through_a_link_is_probed_once() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnccl.so.2");
        std::fs::write(&lib, b"x").unwrap();
        let link = dir.path().join("libnccl.so");
        std::os::unix::fs::symlink(&lib, &link).unwrap();
        let other = dir.path().join("missing.so");
        assert_eq!(
            each_file_once(vec![lib.clone(), link, lib.clone(), other.clone()]),
            [lib, other]
        );
    }

    #[test]
    fn finds_libraries_mapped_or_in_the_linker_cache() {
        let maps = "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f02-7f03 r-xp 00000000 08:01 2 /opt/venv/nvidia/nccl/lib/libnccl.so.2\n\
                    7f04-7f05 r--p 00010000 08:01 2 /opt/venv/nvidia/nccl/lib/libnccl.so.2\n\
                    7f08-7f09 r-xp 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so\n\
                    7f06-7f07 rw-p 00000000 00:00 0\n";
        assert_eq!(
            mapped_libraries(maps, |n| n.starts_with("libnccl.so")),
            vec![PathBuf::from("/opt/venv/nvidia/nccl/lib/libnccl.so.2")]
        );
        assert!(mapped_libraries(maps, |n| n.starts_with("libibverbs.so")).is_empty());
        let ld = "\t2 libs found in cache\n\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n";
        assert_eq!(
            library_from_ldconfig(ld, "libnccl.so"),
            Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so.2"))
        );
        assert_eq!(library_from_ldconfig("0 libs found", "libnccl.so"), None);
    }
}
