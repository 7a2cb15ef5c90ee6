//! The on-disk layout, written and read here only: where a table's file goes (one file per
//! table and run for `record`, or the Hive-partitioned tree of `agent`,
//! `table=…/date=…/hour=…/host=…/part-….parquet`, that DuckDB, Spark and Trino read with one
//! glob and prune by partition), the `.partial` name of a file still being written, and how the
//! spool and `analyze` recognise a table's files.
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub enum Layout {
    /// `OUT/<table>/<run_id>.parquet`
    PerRun { out: PathBuf, run_id: String },
    /// `ROOT/table=<t>/date=<YYYY-MM-DD>/hour=<0-23>/host=<host>/part-<run_id>-<seq>.parquet`,
    /// dated by the start of the interval (UTC).
    Hive {
        root: PathBuf,
        host: String,
        run_id: String,
        seq: u64,
        start_utc_ns: i64,
    },
}

impl Layout {
    /// The directory everything goes under (`--out`).
    pub fn root(&self) -> &Path {
        match self {
            Layout::PerRun { out, .. } => out,
            Layout::Hive { root, .. } => root,
        }
    }

    pub fn run_id(&self) -> &str {
        match self {
            Layout::PerRun { run_id, .. } | Layout::Hive { run_id, .. } => run_id,
        }
    }

    pub fn path(&self, table: &str) -> PathBuf {
        match self {
            Layout::PerRun { out, run_id } => out.join(table).join(format!("{run_id}.parquet")),
            Layout::Hive {
                root,
                host,
                run_id,
                seq,
                start_utc_ns,
            } => {
                let t = chrono::DateTime::from_timestamp_nanos(*start_utc_ns);
                root.join(hive_table_dir(table))
                    .join(format!("date={}", t.format("%Y-%m-%d")))
                    // Unpadded: DuckDB infers `hour=05` as text but `hour=22` as a number, so a
                    // fleet's hours would not compare with `hour = 5`.
                    .join(format!("hour={}", t.format("%-H")))
                    .join(format!("host={}", partition_value(host)))
                    .join(format!("part-{run_id}-{seq:06}.parquet"))
            }
        }
    }

    /// The same layout for the next interval.
    pub fn next(&self, start_utc_ns: i64) -> Layout {
        match self {
            Layout::PerRun { .. } => self.clone(),
            Layout::Hive {
                root,
                host,
                run_id,
                seq,
                ..
            } => Layout::Hive {
                root: root.clone(),
                host: host.clone(),
                run_id: run_id.clone(),
                seq: seq + 1,
                start_utc_ns,
            },
        }
    }
}

/// A table's file while it is written: `<name>.parquet.partial` beside where it will be (it
/// has no footer yet; readers never match it).
pub fn partial_path(final_path: &Path) -> PathBuf {
    final_path.with_extension(&PARTIAL_EXTENSION[1..])
}

/// Where `record` and `import` write and `analyze`, `sql` and `merge` read when given no path.
pub const DEFAULT_DIR: &str = "./traces";

/// The file name ending of a table's file being written.
pub const PARTIAL_EXTENSION: &str = ".parquet.partial";
/// ... and of a complete one.
pub const COMPLETE_EXTENSION: &str = ".parquet";

/// A table's top directory in the Hive layout.
pub fn hive_table_dir(table: &str) -> String {
    format!("table={table}")
}

/// The table a path component names in the Hive layout (`table=rtt` -> `rtt`).
pub fn hive_table_name(component: &str) -> Option<&str> {
    component.strip_prefix("table=")
}

/// Whether `rel` (a path below a spool root) is a part file `host`'s agent wrote in the Hive
/// layout, `table=…/date=…/hour=…/host=<host>/part-…<extension>`. Anything else in a spool
/// (another host's files on shared storage, a warehouse that also uses `table=` directories,
/// an operator's files) is not.
pub fn is_hive_part_of(rel: &Path, host: &str, extension: &str) -> bool {
    let parts: Vec<_> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect();
    parts.len() == HIVE_DEPTH
        && hive_table_name(&parts[0]).is_some()
        && parts[1].starts_with("date=")
        && parts[2].starts_with("hour=")
        && parts[3] == format!("host={}", partition_value(host))
        && parts[4].starts_with("part-")
        && parts[4].ends_with(extension)
}

/// How deep a part file sits below the spool root in the Hive layout.
pub const HIVE_DEPTH: usize = 5;

/// A directory claimed for one recorder of a host (`claim_output`), held for the process's life.
#[derive(Debug)]
pub struct OutputLock {
    _locks: Vec<crate::atomic_file::DirLock>,
}

/// Claims `dir` for one recorder of `host`, `record` or `agent` (`who`): one lock name for
/// both, because two recorders of one host writing one directory (two runs of `record`, an
/// agent's spool and a `record --out` into it) record the same flows, NIC counters and GPU
/// samples twice, and `analyze` would count them all twice; an agent would also remove the
/// other's open files as a crash's leftovers. Fails naming the holder.
pub fn claim_output(dir: &Path, host: &str, who: &str) -> anyhow::Result<OutputLock> {
    let busy = |holder: &str| {
        let holder = describe_holder(holder);
        format!(
            "another scaletrace {holder} is writing to {} for host {host}: both would record the same flows twice; stop it or give this one another --out",
            dir.display()
        )
    };
    let lock_names = lock_names(host);
    let mut locks = vec![crate::atomic_file::DirLock::take(
        dir,
        &lock_names[0],
        who,
        busy,
    )?];
    // Versions before this one each locked a name of their own: held too (nothing written
    // into them), so that an agent or a record of an older version still running here during
    // an upgrade is not joined by this one.
    for old in &lock_names[1..] {
        locks.push(crate::atomic_file::DirLock::hold(dir, old, busy)?);
    }
    if let Some(nested) = nested_claim(dir, &lock_names) {
        let here = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        let (outer, inner) = if nested.above {
            (&nested.dir, &here)
        } else {
            (&here, &nested.dir)
        };
        let problem = format!(
            "another scaletrace {} is writing to {} for host {host}, and {} is inside {}: a query or `analyze` over {} would count this host's flows twice",
            describe_holder(&nested.holder),
            nested.dir.display(),
            inner.display(),
            outer.display(),
            outer.display()
        );
        // An agent is a service: a debug `record` inside its spool must not keep it down
        // (systemd restarting it in vain); it says so, and the record is the one refused.
        if who == "agent" {
            log::warn!("{problem} until it ends");
        } else {
            anyhow::bail!(
                "{problem}; stop it or give this one an --out that neither contains {} nor lies inside it",
                nested.dir.display()
            );
        }
    }
    Ok(OutputLock { _locks: locks })
}

/// The lock files a recorder of `host` holds in its output directory: this version's first,
/// then the names earlier versions locked.
pub fn lock_names(host: &str) -> [String; 3] {
    let host_part = partition_value(host);
    [
        format!(".scaletrace.{host_part}.lock"),
        format!(".scaletrace-agent.{host_part}.lock"),
        format!(".scaletrace-record.{host_part}.lock"),
    ]
}

/// The holder a lock file names: it says `<pid> <record|agent>` (an older version's, its pid
/// alone; a lock held only for older versions, nothing).
fn describe_holder(holder: &str) -> String {
    match holder.split_once(' ') {
        Some((pid, what)) => format!("{what} (pid {pid})"),
        None if !holder.is_empty() => format!("recorder (pid {holder})"),
        None => "recorder".to_string(),
    }
}

/// How deep below an output directory another recorder's claim is looked for: a recording
/// nested in a spool sits at its top (`SPOOL/debug`) or a few levels below; the walk stops
/// there (and after `NESTED_SCAN_LIMIT` entries) so that `--out` over a large tree starts fast.
const NESTED_SCAN_DEPTH: usize = 3;
const NESTED_SCAN_LIMIT: usize = 100_000;

/// Another live recorder's claim on a directory above or below one being claimed.
struct NestedClaim {
    dir: PathBuf,
    /// what its lock file says
    holder: String,
    above: bool,
}

/// Another live recorder of the same host claiming a directory above `dir` or below it: their
/// files would be read together by a query over the outer one. A lock file this user cannot
/// open is looked up in `/proc/locks` (`held_by_another`).
fn nested_claim(dir: &Path, lock_names: &[String]) -> Option<NestedClaim> {
    let dir = dir.canonicalize().ok()?;
    let claim = |d: &Path, above| {
        Some(NestedClaim {
            holder: claimed(d, lock_names)?,
            dir: d.to_path_buf(),
            above,
        })
    };
    if let Some(found) = dir.ancestors().skip(1).find_map(|a| claim(a, true)) {
        return Some(found);
    }
    // Not across mounts (a hung network mount below `--out` must not hang the start), nor
    // into a spool's own partitions (no output is ever nested there).
    let mut seen = 0;
    let found = walkdir::WalkDir::new(&dir)
        .min_depth(1)
        .max_depth(NESTED_SCAN_DEPTH)
        .follow_links(false)
        .same_file_system(true)
        .into_iter()
        .filter_entry(|e| {
            !e.file_name().to_str().is_some_and(|n| {
                ["table=", "date=", "hour=", "host="]
                    .iter()
                    .any(|p| n.starts_with(p))
            })
        })
        .take(NESTED_SCAN_LIMIT)
        .inspect(|_| seen += 1)
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_dir())
        .find_map(|e| claim(e.path(), false));
    if found.is_none() && seen >= NESTED_SCAN_LIMIT {
        log::warn!(
            "{}: looked for another scaletrace output in its first {NESTED_SCAN_LIMIT} entries only",
            dir.display()
        );
    }
    found
}

/// What the lock file of a live recorder of `dir` says (the current name first: the names kept
/// for older versions hold nothing).
fn claimed(dir: &Path, lock_names: &[String]) -> Option<String> {
    lock_names
        .iter()
        .find_map(|name| held_by_another(&dir.join(name)))
}

/// What the lock file at `path` says, if a live process holds it. Opened read-only, without
/// following a link or blocking on a FIFO, and locked shared for an instant: a held exclusive
/// lock refuses that (a recorder taking its lock meanwhile retries, `DirLock`). A lock file
/// this user cannot open (another user's, mode 0600) is looked up in `/proc/locks` instead.
fn held_by_another(path: &Path) -> Option<String> {
    use std::{io::Read as _, os::unix::fs::OpenOptionsExt as _};
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let mut file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return flock_holder(path).map(|pid| pid.to_string());
        }
        Err(_) => return None,
    };
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    match file.try_lock_shared() {
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            Some(holder.trim().to_string())
        }
        _ => None,
    }
}

/// The pid holding a `flock` on the regular file at `path`, from `/proc/locks` (which names
/// each lock's file by device and inode): needs no permission on the file itself.
fn flock_holder(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    flock_holder_in(
        &locks,
        libc::major(meta.dev()),
        libc::minor(meta.dev()),
        meta.ino(),
    )
}

/// `/proc/locks` lines read `1: FLOCK  ADVISORY  WRITE 1234 fd:01:123456 0 EOF` (major and
/// minor in hex); a waiting lock's line has `->` after the number.
fn flock_holder_in(locks: &str, major: u32, minor: u32, inode: u64) -> Option<u32> {
    let file = format!("{major:02x}:{minor:02x}:{inode}");
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, "FLOCK", _, _, pid, id, ..] if *id == file => pid.parse().ok(),
            _ => None,
        }
    })
}

/// Hive partition values cannot hold `/` or `=`; hostnames normally have neither.
pub fn partition_value(v: &str) -> String {
    v.chars()
        .map(|c| {
            if matches!(c, '/' | '=' | '\\') {
                '_'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_recorder_per_host_and_directory_whatever_its_version() {
        let dir = tempfile::tempdir().unwrap();
        // an agent of the previous version: its own lock name, its pid alone in the file
        let legacy = dir.path().join(".scaletrace-agent.h.lock");
        std::fs::write(&legacy, "4242\n").unwrap();
        let old_agent =
            crate::atomic_file::DirLock::hold(dir.path(), ".scaletrace-agent.h.lock", |_| {
                String::new()
            })
            .unwrap();
        let e = claim_output(dir.path(), "h", "record").unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "another scaletrace recorder (pid 4242) is writing to {} for host h",
                dir.path().display()
            )),
            "{e}"
        );
        drop(old_agent);
        // this version: refused whichever kind comes second, naming the holder's kind
        let agent = claim_output(dir.path(), "h", "agent").unwrap();
        let e = claim_output(dir.path(), "h", "record").unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "another scaletrace agent (pid {})",
                std::process::id()
            )),
            "{e}"
        );
        // the legacy file keeps what its version wrote; another host's claim is free
        assert_eq!(std::fs::read_to_string(&legacy).unwrap(), "4242\n");
        claim_output(dir.path(), "other", "record").unwrap();
        drop(agent);
        claim_output(dir.path(), "h", "record").unwrap();
    }

    #[test]
    fn no_recorder_of_a_host_inside_another_ones_directory_or_around_it() {
        let root = tempfile::tempdir().unwrap();
        let spool = root.path().join("spool");
        let inner = spool.join("debug/run1");
        std::fs::create_dir_all(&inner).unwrap();
        let agent = claim_output(&spool, "h", "agent").unwrap();
        // a record into a directory of the agent's spool: both files would be read by one query
        let e = claim_output(&inner, "h", "record").unwrap_err().to_string();
        let spool_real = spool.canonicalize().unwrap();
        assert!(
            e.starts_with(&format!(
                "another scaletrace agent (pid {}) is writing to {} for host h, and {} is inside {}",
                std::process::id(),
                spool_real.display(),
                inner.display(),
                spool_real.display()
            )),
            "{e}"
        );
        // another host's recorder may (its flows are its own)
        drop(claim_output(&inner, "other", "record").unwrap());
        drop(agent);
        // the other way round: a record on a directory holding a running record's output is
        // refused; an agent (a service) starts, saying so
        let record = claim_output(&inner, "h", "record").unwrap();
        let e = claim_output(&spool, "h", "record").unwrap_err().to_string();
        let inner_real = inner.canonicalize().unwrap();
        assert!(
            e.starts_with(&format!(
                "another scaletrace record (pid {}) is writing to {} for host h, and {} is inside {}",
                std::process::id(),
                inner_real.display(),
                inner_real.display(),
                spool_real.display()
            )),
            "{e}"
        );
        assert!(
            e.ends_with(&format!(
                "give this one an --out that neither contains {} nor lies inside it",
                inner_real.display()
            )),
            "{e}"
        );
        drop(claim_output(&spool, "h", "agent").unwrap());
        drop(record);
        // lock files left by finished runs are no claim
        drop(claim_output(&spool, "h", "agent").unwrap());
        drop(claim_output(&inner, "h", "record").unwrap());
    }

    #[test]
    fn a_lock_is_found_in_proc_locks_by_device_and_inode() {
        let locks = "1: POSIX  ADVISORY  WRITE 99 fd:01:77 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4242 fd:01:123456 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 4243 fd:01:123456 0 EOF\n";
        assert_eq!(flock_holder_in(locks, 0xfd, 1, 123456), Some(4242));
        assert_eq!(flock_holder_in(locks, 0xfd, 1, 77), None);
        assert_eq!(flock_holder_in(locks, 0xfd, 2, 123456), None);
        // a file this process holds, as the kernel lists it
        let dir = tempfile::tempdir().unwrap();
        let held = crate::atomic_file::DirLock::take(dir.path(), "l.lock", "t", |_| String::new())
            .unwrap();
        assert_eq!(
            flock_holder(&dir.path().join("l.lock")),
            Some(std::process::id())
        );
        drop(held);
        assert_eq!(flock_holder(&dir.path().join("l.lock")), None);
    }

    #[test]
    fn hive_paths_are_partitioned_by_table_date_hour_host() {
        let l = Layout::Hive {
            root: "/spool".into(),
            host: "gpu-07".into(),
            run_id: "gpu-07-20261202T220000Z-42".into(),
            seq: 3,
            // 2026-12-02 22:59:59.5 UTC
            start_utc_ns: 1_796_252_399_500_000_000,
        };
        assert_eq!(
            l.path("rtt").display().to_string(),
            "/spool/table=rtt/date=2026-12-02/hour=22/host=gpu-07/part-gpu-07-20261202T220000Z-42-000003.parquet"
        );
        let n = l.next(1_796_252_400_000_000_000);
        assert!(n
            .path("rtt")
            .display()
            .to_string()
            .contains("hour=23/host=gpu-07/part-gpu-07-20261202T220000Z-42-000004"));
        let early = l.next(1_796_173_200_000_000_000); // 2026-12-02 01:00 UTC
        assert!(early
            .path("rtt")
            .display()
            .to_string()
            .contains("/hour=1/host=gpu-07/"));
        let r = Layout::PerRun {
            out: "/o".into(),
            run_id: "r".into(),
        };
        assert_eq!(r.path("flows"), PathBuf::from("/o/flows/r.parquet"));
        assert_eq!(partition_value("a/b=c"), "a_b_c");
    }

    #[test]
    fn recognises_only_this_hosts_part_files() {
        let l = Layout::Hive {
            root: "/spool".into(),
            host: "gpu/07".into(),
            run_id: "r".into(),
            seq: 0,
            start_utc_ns: 1_796_252_399_500_000_000,
        };
        let complete = l.path("rtt");
        let rel = complete.strip_prefix("/spool").unwrap();
        assert!(is_hive_part_of(rel, "gpu/07", COMPLETE_EXTENSION));
        assert!(!is_hive_part_of(rel, "gpu-08", COMPLETE_EXTENSION));
        let partial = partial_path(&complete);
        assert!(partial
            .to_string_lossy()
            .ends_with("-000000.parquet.partial"));
        let rel = partial.strip_prefix("/spool").unwrap();
        assert!(is_hive_part_of(rel, "gpu/07", PARTIAL_EXTENSION));
        assert!(!is_hive_part_of(rel, "gpu/07", COMPLETE_EXTENSION));
        for other in [
            "warehouse/table=rtt/date=x/hour=1/host=gpu_07/part-1.parquet",
            "table=rtt/date=x/hour=1/host=gpu_07/notes.parquet",
            "rtt/date=x/hour=1/host=gpu_07/part-1.parquet",
        ] {
            assert!(
                !is_hive_part_of(Path::new(other), "gpu/07", COMPLETE_EXTENSION),
                "{other}"
            );
        }
        assert_eq!(hive_table_name(&hive_table_dir("flows")), Some("flows"));
    }
}
