//! Names for the network namespaces flows live in. Every socket carries its namespace's cookie
//! (`bpf_get_netns_cookie`); `ip netns` and the CNI plugins that set up Kubernetes pods
//! (`cni-…`) name namespaces by bind mounts under /run/netns. One recorder in the root
//! namespace sees the flows of every namespace on the node, and the name tells them apart.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::environment::netns_cookie;

/// A cookie not seen at the last scan triggers a new one at most this often (namespaces come
/// and go with pods; a flow in an unnamed namespace must not rescan for every row).
const RESCAN_EVERY: Duration = Duration::from_secs(10);

pub struct NetnsNames {
    dir: PathBuf,
    /// The recorder's own namespace: its flows need no name. Read on first use.
    own: Option<Option<u64>>,
    names: HashMap<u64, String>,
    last_scan: Option<Instant>,
}

impl NetnsNames {
    pub fn new(dir: &Path) -> Self {
        NetnsNames {
            dir: dir.to_path_buf(),
            own: None,
            names: HashMap::new(),
            last_scan: None,
        }
    }

    /// The name of the namespace with this cookie; None for the recorder's own namespace and
    /// for one that has no name under the directory.
    pub fn name(&mut self, cookie: u64) -> Option<String> {
        if cookie == 0 {
            return None;
        }
        let own = *self
            .own
            .get_or_insert_with(|| netns_cookie(Path::new("/proc/self/ns/net")).ok());
        if own == Some(cookie) {
            return None;
        }
        if !self.names.contains_key(&cookie)
            && self.last_scan.is_none_or(|t| t.elapsed() >= RESCAN_EVERY)
        {
            self.scan();
        }
        self.names.get(&cookie).cloned()
    }

    fn scan(&mut self) {
        self.last_scan = Some(Instant::now());
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Ok(cookie) = netns_cookie(&entry.path()) {
                self.names.insert(cookie, name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_name_for_no_cookie_or_an_empty_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut names = NetnsNames::new(dir.path());
        assert_eq!(names.name(0), None);
        assert_eq!(names.name(12345), None);
        // a miss does not rescan at once
        let scanned = names.last_scan;
        assert_eq!(names.name(12346), None);
        assert_eq!(names.last_scan, scanned);
    }
}
