//! Identity of the node a capture ran on, stored in every Parquet file's metadata.
use std::fs;

#[derive(Debug, Clone)]
pub struct NodeIdentity {
    pub hostname: String,
    pub boot_id: String,
    pub kernel: String,
}

impl NodeIdentity {
    pub fn current() -> Self {
        let read = |p: &str| fs::read_to_string(p).map(|s| s.trim().to_string()).ok();
        let uts = nix::sys::utsname::uname().ok();
        let hostname = uts
            .as_ref()
            .map(|u| u.nodename().to_string_lossy().into_owned())
            .or_else(|| read("/proc/sys/kernel/hostname"))
            .unwrap_or_else(|| "unknown".into());
        let kernel = uts
            .as_ref()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_else(|| "unknown".into());
        let boot_id = read("/proc/sys/kernel/random/boot_id").unwrap_or_else(|| "unknown".into());
        NodeIdentity {
            hostname,
            boot_id,
            kernel,
        }
    }
}
