//! Which job a flow belongs to. sock_ops reads each socket's cgroup v2 id (the cgroup its
//! creator ran in); here the id becomes the cgroup's path, found by walking the cgroup2 mount
//! (a cgroup's id is its directory's inode number), and the path becomes the labels
//! orchestrators encode in it: the Kubernetes pod UID and container id (systemd and cgroupfs
//! drivers alike) and the Slurm job id.
use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// When the kernel cannot open a cgroup by its id (no file handle support), the tree is
/// walked instead: an id not found triggers a new walk at most this often, and never one
/// already older than the newest id the last walk saw (ids only grow: such a cgroup is gone).
const REWALK_EVERY: Duration = Duration::from_secs(10);
/// Bounds on one walk: a node with many thousands of cgroups is walked in part, not for ever.
const MAX_DEPTH: usize = 16;
const MAX_CGROUPS: usize = 200_000;
/// Paths kept; beyond it the cache starts again (pods and job steps come and go).
const MAX_CACHED: usize = 65_536;
/// `FILEID_KERNFS` (include/linux/exportfs.h): a cgroup2 directory's file handle is its id.
const FILEID_KERNFS: i32 = 0xfe;

/// A flow's cgroup and the job labels its path carries.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct JobLabels {
    /// Path below the cgroup2 mount, starting with `/`.
    pub cgroup: Option<String>,
    /// Kubernetes pod UID, with dashes (the systemd driver writes it with underscores).
    pub pod_uid: Option<String>,
    /// The container runtime's id of the container (64 hex digits).
    pub container_id: Option<String>,
    /// Slurm job id.
    pub slurm_job: Option<String>,
}

/// Cgroup ids to paths: each opened by its file handle (the id) on the cgroup2 mount, where the
/// kernel allows it (cgroup2 exports its directories; root has CAP_DAC_READ_SEARCH), else by
/// walking the mount.
pub struct CgroupPaths {
    /// The cgroup2 mount; found on first use.
    root: Option<Option<PathBuf>>,
    paths: HashMap<u64, String>,
    last_walk: Option<Instant>,
    /// The newest id the last walk saw.
    walked_up_to: u64,
}

impl CgroupPaths {
    pub fn new() -> Self {
        CgroupPaths {
            root: None,
            paths: HashMap::new(),
            last_walk: None,
            walked_up_to: 0,
        }
    }

    /// Paths below `root` instead of the cgroup2 mount (tests).
    #[cfg(test)]
    pub fn at(root: &Path) -> Self {
        CgroupPaths {
            root: Some(Some(root.to_path_buf())),
            ..Self::new()
        }
    }

    fn root(&mut self) -> Option<PathBuf> {
        self.root
            .get_or_insert_with(|| {
                let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
                crate::environment::find_cgroup2_mount(&mounts)
            })
            .clone()
    }

    /// The labels of the cgroup with this id; empty for 0 (unknown) and for a cgroup that no
    /// longer exists (removed before its flow was written).
    pub fn labels(&mut self, id: u64) -> JobLabels {
        if id == 0 {
            return JobLabels::default();
        }
        if !self.paths.contains_key(&id) {
            if self.paths.len() >= MAX_CACHED {
                self.paths.clear();
            }
            match self.root().and_then(|root| path_by_handle(&root, id)) {
                Some(path) => {
                    self.paths.insert(id, path);
                }
                None if id > self.walked_up_to
                    && self.last_walk.is_none_or(|t| t.elapsed() >= REWALK_EVERY) =>
                {
                    self.walk()
                }
                None => {}
            }
        }
        match self.paths.get(&id) {
            Some(path) => labels_of(path),
            None => JobLabels::default(),
        }
    }

    fn walk(&mut self) {
        self.last_walk = Some(Instant::now());
        let Some(root) = self.root() else {
            return;
        };
        let Ok(root_meta) = std::fs::symlink_metadata(&root) else {
            return;
        };
        let mut stack = vec![(root.clone(), 0usize)];
        let mut seen = 0;
        while let Some((dir, depth)) = stack.pop() {
            // symlink_metadata: a link is never followed (cgroupfs has none; anything else
            // under the mount is not ours to walk into); another device is another mount,
            // whose inode numbers are not cgroup ids
            let Ok(meta) = std::fs::symlink_metadata(&dir) else {
                continue;
            };
            if !meta.is_dir() || meta.dev() != root_meta.dev() {
                continue;
            }
            let relative = dir.strip_prefix(&root).unwrap_or(Path::new(""));
            self.paths
                .insert(meta.ino(), format!("/{}", relative.display()));
            self.walked_up_to = self.walked_up_to.max(meta.ino());
            seen += 1;
            if seen >= MAX_CGROUPS || depth >= MAX_DEPTH {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((entry.path(), depth + 1));
                }
            }
        }
    }
}

/// The path below `root` (the cgroup2 mount) of the cgroup with this id, opened by its file
/// handle: one syscall instead of a walk, and it finds a cgroup made a moment ago. None where
/// the kernel or the filesystem refuses (not cgroup2, no CAP_DAC_READ_SEARCH, gone).
fn path_by_handle(root: &Path, id: u64) -> Option<String> {
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};

    /// `struct file_handle` with its 8 bytes of handle.
    #[repr(C)]
    struct KernfsHandle {
        handle_bytes: u32,
        handle_type: i32,
        id: u64,
    }
    let mount = std::fs::File::open(root).ok()?;
    let mut handle = KernfsHandle {
        handle_bytes: 8,
        handle_type: FILEID_KERNFS,
        id,
    };
    // SAFETY: `handle` is a file_handle header followed by the `handle_bytes` it announces,
    // alive for the call; the mount fd is open.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount.as_raw_fd(),
            (&mut handle as *mut KernfsHandle).cast::<libc::file_handle>(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor the call just opened, owned here alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let target = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    let relative = target.strip_prefix(root).ok()?;
    Some(format!("/{}", relative.display()))
}

/// The labels of a live process's cgroup v2 (the `0::` line of `/proc/PID/cgroup`): for GPU
/// processes, which NVML lists while they run (sockets and QPs carry the id the kernel gave
/// the event instead: a process may be gone when the loader reads it); empty when the process
/// is gone. The path is as the recorder's cgroup namespace shows it: in the host's (the
/// DaemonSet has host PID and the host's cgroup tree) it is the path from the root.
pub fn of_pid(pid: u32) -> JobLabels {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()
        .and_then(|text| cgroup_v2_path(&text).map(labels_of))
        .unwrap_or_default()
}

/// The v2 entry (`0::/path`) of a /proc/PID/cgroup file.
pub fn cgroup_v2_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))
}

/// The job labels a cgroup path carries.
///
/// Shapes (from the kubelet's and Slurm's own code and documentation):
/// - Kubernetes, systemd driver: `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope`
///   (`kubepods-pod<uid>.slice` for Guaranteed pods; `crio-<id>.scope`, `docker-<id>.scope`);
/// - Kubernetes, cgroupfs driver: `/kubepods/burstable/pod<uid>/<id>` (`/kubepods/pod<uid>/<id>`);
///   either below another cgroup when the kubelet itself runs in a container (kind, k3d);
/// - Slurm on cgroup v2: `/system.slice/slurmstepd.scope/job_<id>/step_<n>/user/task_<n>`
///   (`<node>_slurmstepd.scope` with several slurmd per host); the v1 layout,
///   `/slurm/uid_<uid>/job_<id>/step_<n>/task_<n>`, is read the same way, but a socket's or
///   a task's id is always its v2 cgroup's: on a node whose Slurm uses cgroup v1 only, the v2
///   path (`/system.slice/slurmd.service`) names no job.
pub fn labels_of(path: &str) -> JobLabels {
    let mut labels = JobLabels {
        cgroup: Some(path.to_string()),
        ..JobLabels::default()
    };
    // The kubelet's tree need not start at the root: under kind or k3d (a kubelet in a
    // container) it is `/system.slice/docker-<id>.scope/kubelet.slice/kubelet-kubepods.slice/...`.
    let mut in_kubepods = false;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if part == "kubepods" || part.ends_with("kubepods.slice") {
            in_kubepods = true;
            continue;
        }
        if in_kubepods {
            if let Some(uid) = pod_uid(part) {
                labels.pod_uid = Some(uid);
                continue;
            }
            if labels.pod_uid.is_some() {
                if let Some(id) = container_id(part) {
                    labels.container_id = Some(id);
                }
            }
        }
        if let Some(job) = part.strip_prefix("job_") {
            if !job.is_empty() && job.bytes().all(|b| b.is_ascii_digit()) {
                labels.slurm_job = Some(job.to_string());
            }
        }
    }
    labels
}

/// `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid with _>.slice` (systemd).
fn pod_uid(part: &str) -> Option<String> {
    let part = part.strip_suffix(".slice").unwrap_or(part);
    let at = part.rfind("pod")?;
    let uid = part[at + 3..].replace('_', "-");
    let prefix = &part[..at];
    let prefix_ok = prefix.is_empty() || (prefix.contains("kubepods") && prefix.ends_with('-'));
    (prefix_ok && is_uuid(&uid)).then_some(uid)
}

/// `<runtime>-<64 hex>.scope` (systemd) or `<64 hex>` (cgroupfs).
fn container_id(part: &str) -> Option<String> {
    let part = part.strip_suffix(".scope").unwrap_or(part);
    let id = part.rsplit('-').next()?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
}

/// A pod UID: a UUID, or for a static (mirror) pod the 32 hex digits of its config hash.
fn is_uuid(s: &str) -> bool {
    if s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return true;
    }
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d6e";
    const CID: &str = "4f3a9c1e2b7d8a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f";

    #[test]
    fn kubernetes_pods_under_either_cgroup_driver() {
        let systemd = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{CID}.scope",
            UID.replace('-', "_")
        );
        let guaranteed = format!(
            "/kubepods.slice/kubepods-pod{}.slice/crio-{CID}.scope",
            UID.replace('-', "_")
        );
        let cgroupfs = format!("/kubepods/besteffort/pod{UID}/{CID}");
        let kind = format!(
            "/system.slice/docker-{CID}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{}.slice/cri-containerd-{CID}.scope",
            UID.replace('-', "_")
        );
        for path in [&systemd, &guaranteed, &cgroupfs, &kind] {
            let l = labels_of(path);
            assert_eq!(l.pod_uid.as_deref(), Some(UID), "{path}");
            assert_eq!(l.container_id.as_deref(), Some(CID), "{path}");
            assert_eq!(l.slurm_job, None);
            assert_eq!(l.cgroup.as_deref(), Some(path.as_str()));
        }
        // a static pod's UID is its config hash
        let hash = "6b5e3c2a9f8d7e6c5b4a3f2e1d0c9b8a";
        let static_pod = labels_of(&format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{hash}.slice"
        ));
        assert_eq!(static_pod.pod_uid.as_deref(), Some(hash));
        // the pod's own cgroup (its pause container's parent): a pod, no container
        let pod_only = labels_of(&format!("/kubepods/burstable/pod{UID}"));
        assert_eq!(pod_only.pod_uid.as_deref(), Some(UID));
        assert_eq!(pod_only.container_id, None);
    }

    #[test]
    fn slurm_jobs_on_cgroup_v2_and_v1() {
        for path in [
            "/system.slice/slurmstepd.scope/job_4121/step_0/user/task_0",
            "/system.slice/node07_slurmstepd.scope/job_4121/step_batch/user/task_0",
            "/slurm/uid_1000/job_4121/step_0/task_1",
        ] {
            let l = labels_of(path);
            assert_eq!(l.slurm_job.as_deref(), Some("4121"), "{path}");
            assert_eq!((l.pod_uid, l.container_id), (None, None));
        }
    }

    #[test]
    fn other_cgroups_carry_only_their_path() {
        for path in [
            "/",
            "/user.slice/user-1000.slice/session-3.scope",
            "/system.slice/docker-0123.scope",
            "/system.slice/job_x.service",
            // a pod-like name outside kubepods is not a pod
            &format!("/system.slice/pod{UID}"),
        ] {
            let l = labels_of(path);
            assert_eq!(l.cgroup.as_deref(), Some(path), "{path}");
            assert_eq!(
                (l.pod_uid, l.container_id, l.slurm_job),
                (None, None, None),
                "{path}"
            );
        }
    }

    /// The running kernel's cgroup2, as root: a cgroup made a moment ago is found by its id at
    /// once, without a walk.
    #[test]
    fn a_new_cgroup_is_opened_by_its_id() {
        let Some(root) = std::fs::read_to_string("/proc/self/mounts")
            .ok()
            .and_then(|m| crate::environment::find_cgroup2_mount(&m))
        else {
            eprintln!("skipped: no cgroup2 mount");
            return;
        };
        let dir = root.join(format!("scaletrace-unit-{}", std::process::id()));
        if std::fs::create_dir(&dir).is_err() {
            eprintln!("skipped: cannot make a cgroup (not root?)");
            return;
        }
        let id = std::fs::metadata(&dir).unwrap().ino();
        let found = path_by_handle(&root, id);
        let mut paths = CgroupPaths::at(&root);
        let labelled = paths.labels(id);
        std::fs::remove_dir(&dir).unwrap();
        let expected = format!("/scaletrace-unit-{}", std::process::id());
        assert_eq!(found.as_deref(), Some(expected.as_str()));
        assert_eq!(labelled.cgroup.as_deref(), Some(expected.as_str()));
        assert!(paths.last_walk.is_none(), "found without a walk");
    }

    #[test]
    fn reads_cgroup_v2_entry() {
        assert_eq!(
            cgroup_v2_path("12:cpu:/a\n0::/system.slice/job.service\n"),
            Some("/system.slice/job.service")
        );
        assert_eq!(cgroup_v2_path("12:cpu:/a\n"), None);
    }

    #[test]
    fn a_process_has_its_own_cgroup_and_a_gone_one_none() {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let Some(path) = cgroup_v2_path(&own) else {
            eprintln!("skipped: no cgroup v2 line (a cgroup v1-only host)");
            return;
        };
        assert_eq!(of_pid(std::process::id()).cgroup.as_deref(), Some(path));
        assert_eq!(of_pid(u32::MAX), JobLabels::default());
    }

    #[test]
    fn ids_are_the_directories_inode_numbers_and_unknown_ids_are_empty() {
        let root = tempfile::tempdir().unwrap();
        let job = root
            .path()
            .join("system.slice/slurmstepd.scope/job_77/step_0");
        std::fs::create_dir_all(&job).unwrap();
        let mut paths = CgroupPaths::at(root.path());
        let id = std::fs::metadata(&job).unwrap().ino();
        let l = paths.labels(id);
        assert_eq!(
            l.cgroup.as_deref(),
            Some("/system.slice/slurmstepd.scope/job_77/step_0")
        );
        assert_eq!(l.slurm_job.as_deref(), Some("77"));
        assert_eq!(paths.labels(0), JobLabels::default());
        // a directory made after the walk is found at the next one (a temporary directory
        // has no file handles by cgroup id: the walk is all there is), not at once
        let later = root.path().join("later");
        std::fs::create_dir(&later).unwrap();
        let later_id = std::fs::metadata(&later).unwrap().ino();
        paths.walked_up_to = later_id - 1; // as cgroup ids, which only grow
        assert_eq!(paths.labels(later_id), JobLabels::default());
        paths.last_walk = None;
        assert_eq!(paths.labels(later_id).cgroup.as_deref(), Some("/later"));
        // an id no newer than the last walk saw is a cgroup since removed: no walk for it
        paths.last_walk = None;
        paths.walked_up_to = u64::MAX;
        assert_eq!(paths.labels(u64::MAX - 1), JobLabels::default());
        assert!(paths.last_walk.is_none());
    }
}
