//! What the host must offer before anything is loaded: privileges, BTF, cgroup v2, and the
//! namespace a `--netns` filter names. Each check fails with one line that says what is missing.
use std::{
    fs,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _, Result};

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability mask from /proc/self/status.
fn effective_caps(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

/// Names of the capabilities `record` needs that the mask lacks. CAP_SYS_ADMIN covers BPF and
/// PERFMON on every kernel; CAP_BPF+CAP_PERFMON suffice on 5.8+.
pub fn missing_capabilities(caps: u64) -> Vec<&'static str> {
    let has = |bit: u32| caps & (1u64 << bit) != 0;
    let mut missing = Vec::new();
    if !has(CAP_SYS_ADMIN) {
        if !has(CAP_BPF) {
            missing.push("CAP_BPF");
        }
        if !has(CAP_PERFMON) {
            missing.push("CAP_PERFMON");
        }
        // Attaching sock_ops to a cgroup and mounting tracefs.
        missing.push("CAP_SYS_ADMIN");
    }
    if !has(CAP_NET_ADMIN) {
        missing.push("CAP_NET_ADMIN");
    }
    missing
}

pub fn check_privileges() -> Result<()> {
    let status = fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let caps = effective_caps(&status).context("no CapEff line in /proc/self/status")?;
    let missing = missing_capabilities(caps);
    if !missing.is_empty() {
        bail!(
            "scaletrace needs root (or {}) to load eBPF programs; run it with sudo",
            missing.join(", ")
        );
    }
    Ok(())
}

/// Kernel BTF is not needed by these programs (they read tracepoint layouts from tracefs), but
/// its absence is worth one line because later hooks (fentry, tp_btf) will need it.
pub fn btf_available() -> bool {
    Path::new("/sys/kernel/btf/vmlinux").exists()
}

/// The cgroup v2 hierarchy to attach sock_ops to: `requested`, or the mounted unified
/// hierarchy, mounting one under /run/scaletrace when the host has none.
pub fn cgroup2_root(requested: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = requested {
        if !path.is_dir() {
            bail!("--cgroup {}: no such cgroup directory", path.display());
        }
        return Ok(path.to_path_buf());
    }
    let mounts = fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    if let Some(path) = find_cgroup2_mount(&mounts) {
        return Ok(path);
    }
    let target = PathBuf::from("/run/scaletrace/cgroup2");
    fs::create_dir_all(&target).with_context(|| format!("creating {}", target.display()))?;
    nix::mount::mount(
        Some("cgroup2"),
        &target,
        Some("cgroup2"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .context("no cgroup v2 hierarchy is mounted and mounting one failed")?;
    Ok(target)
}

pub fn find_cgroup2_mount(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        let (_, dir, fstype) = (parts.next()?, parts.next()?, parts.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(dir))
    })
}

/// Resolves `--netns`: a name from `ip netns` (/run/netns/NAME) or a path such as
/// /proc/PID/ns/net.
pub fn netns_path(spec: &str) -> Result<PathBuf> {
    let path = if spec.contains('/') {
        PathBuf::from(spec)
    } else {
        Path::new("/run/netns").join(spec)
    };
    if !path.exists() {
        bail!("--netns {spec}: {} does not exist", path.display());
    }
    Ok(path)
}

/// Runs `f` in the network namespace at `path`, on a short-lived thread: a namespace is a
/// property of the thread that enters it, so the caller's own stays as it was. Sockets and BPF
/// iterators `f` creates belong to that namespace.
pub fn in_netns<T: Send>(path: &Path, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    let file = fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    std::thread::scope(|scope| {
        scope
            .spawn(move || -> Result<T> {
                nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                    .with_context(|| format!("entering network namespace {}", path.display()))?;
                f()
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the thread in {} panicked", path.display()))?
    })
}

/// The kernel's cookie for the network namespace at `path` (what bpf_get_netns_cookie returns),
/// read through SO_NETNS_COOKIE on a socket created inside it.
pub fn netns_cookie(path: &Path) -> Result<u64> {
    let shown = path.display().to_string();
    in_netns(path, || {
        // SAFETY: plain socket(2); the fd is owned right away.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        if fd < 0 {
            bail!(
                "creating a socket in {shown}: {}",
                std::io::Error::last_os_error()
            );
        }
        let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let mut cookie: u64 = 0;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        const SO_NETNS_COOKIE: libc::c_int = 71;
        // SAFETY: valid fd and out-pointers of the right size.
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_NETNS_COOKIE,
                (&mut cookie as *mut u64).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            bail!("this kernel does not report network namespace cookies (SO_NETNS_COOKIE needs Linux 5.14+), so --netns cannot be used");
        }
        Ok(cookie)
    })
}

/// Lets older kernels (before memcg accounting of BPF memory, 5.11) create the maps.
pub fn raise_memlock_limit() {
    let rlim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall with a valid struct; failure only matters on old kernels, where map
    // creation then reports the problem itself.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_capability_mask() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_caps(status), Some(0x1ff_ffff_ffff));
        assert!(missing_capabilities(0x1ff_ffff_ffff).is_empty());
        assert_eq!(effective_caps("nothing"), None);
    }

    #[test]
    fn names_missing_capabilities() {
        assert_eq!(
            missing_capabilities(0),
            vec!["CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN", "CAP_NET_ADMIN"]
        );
        let sys_admin_only = 1u64 << CAP_SYS_ADMIN;
        assert_eq!(missing_capabilities(sys_admin_only), vec!["CAP_NET_ADMIN"]);
    }

    #[test]
    fn finds_cgroup2_in_hybrid_layout() {
        let mounts = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            find_cgroup2_mount(mounts),
            Some("/sys/fs/cgroup/unified".into())
        );
        assert_eq!(find_cgroup2_mount("proc /proc proc rw 0 0\n"), None);
    }

    #[test]
    fn unknown_netns_is_a_clear_error() {
        let err = netns_path("no-such-namespace-xyz").unwrap_err();
        assert!(err
            .to_string()
            .contains("/run/netns/no-such-namespace-xyz does not exist"));
    }
}
