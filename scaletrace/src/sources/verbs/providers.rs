//! Finding the RDMA provider libraries (rdma-core's `lib<provider>-rdmav<ABI>.so`) whose
//! post_send/poll_cq the verbs data-path probes attach to.
use std::path::PathBuf;

use crate::sources::uprobes::libraries::{file_name, mapped_by};

/// Directory where rdma-core installs its provider libraries (Debian/Ubuntu on x86-64).
const PROVIDER_DIR: &str = "/usr/lib/x86_64-linux-gnu/libibverbs";

/// RDMA provider libraries: the explicit ones, else those mapped by `--pid`, else the system's.
pub fn find_providers(explicit: &[PathBuf], pid: Option<u32>) -> Vec<PathBuf> {
    if !explicit.is_empty() {
        return explicit.to_vec();
    }
    if let Some(pid) = pid {
        let libs = mapped_by(pid, is_provider);
        if !libs.is_empty() {
            return libs;
        }
    }
    let mut libs: Vec<PathBuf> = std::fs::read_dir(PROVIDER_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| file_name(p).is_some_and(is_provider))
        .collect();
    libs.sort();
    libs
}

/// rdma-core's provider file names: `lib<provider>-rdmav<ABI>.so`.
fn is_provider(name: &str) -> bool {
    name.starts_with("lib") && name.contains("-rdmav") && name.ends_with(".so")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::uprobes::libraries::mapped_libraries;

    #[test]
    fn finds_the_provider_libraries_a_process_has_mapped() {
        let maps = "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f08-7f09 r-xp 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so\n\
                    7f0a-7f0b r-xp 00000000 08:01 4 /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14\n";
        assert_eq!(
            mapped_libraries(maps, is_provider),
            vec![PathBuf::from(
                "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so"
            )]
        );
    }
}
