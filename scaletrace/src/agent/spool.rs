//! The local spool of completed Parquet files: leftovers of a killed run are removed at start,
//! completed files are uploaded oldest first and deleted only once the store confirms them,
//! and the spool is kept within its size and age limits.
use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant, SystemTime},
};

use anyhow::{bail, Context as _, Result};

use crate::layout;

/// A completed file in the spool.
#[derive(Debug, Clone)]
pub struct SpoolFile {
    pub path: PathBuf,
    /// Path below the spool root with `/` separators: the object key below the prefix.
    pub key: String,
    pub bytes: u64,
    pub modified: SystemTime,
}

/// The regular files (never links) that this host's agents wrote under `root`, complete or
/// still being written (`extension`); nothing else in the spool is ever uploaded, evicted or
/// removed (`layout::is_hive_part_of`).
fn ours<'a>(
    root: &'a Path,
    host: &'a str,
    extension: &'a str,
) -> impl Iterator<Item = walkdir::DirEntry> + 'a {
    walkdir::WalkDir::new(root)
        .min_depth(layout::HIVE_DEPTH)
        .max_depth(layout::HIVE_DEPTH)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .filter(move |e| {
            e.path()
                .strip_prefix(root)
                .is_ok_and(|rel| layout::is_hive_part_of(rel, host, extension))
        })
}

/// An exclusive claim on this host's part of a spool, held for the agent's life: a second agent
/// (or a `record`) started on the same spool would otherwise remove the first one's open files
/// as leftovers of a crash and evict its completed ones (see [`layout::claim_output`]).
pub type SpoolLock = layout::OutputLock;

/// Takes the spool lock, or says which process holds it.
pub fn lock(root: &Path, host: &str) -> Result<SpoolLock> {
    layout::claim_output(root, host, "agent")
}

/// Removes this host's `part-*.parquet.partial` files (a killed run's open interval: without a
/// footer they cannot be read) and returns how many there were.
pub fn remove_leftovers(root: &Path, host: &str) -> u64 {
    let mut removed = 0;
    for e in ours(root, host, layout::PARTIAL_EXTENSION) {
        if std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// This host's completed table files, oldest first.
pub fn completed(root: &Path, host: &str) -> Vec<SpoolFile> {
    let mut files: Vec<SpoolFile> = ours(root, host, layout::COMPLETE_EXTENSION)
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            let rel = e.path().strip_prefix(root).ok()?;
            Some(SpoolFile {
                key: rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/"),
                path: e.path().to_path_buf(),
                bytes: meta.len(),
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            })
        })
        .collect();
    files.sort_by(|a, b| a.modified.cmp(&b.modified).then(a.key.cmp(&b.key)));
    files
}

/// Deletes a file and the partition directories it leaves empty (up to the root).
pub fn delete(root: &Path, file: &Path) -> std::io::Result<()> {
    std::fs::remove_file(file)?;
    let mut dir = file.parent();
    while let Some(d) = dir {
        if d == root || !d.starts_with(root) || std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

/// Deletes this host's oldest completed files until at least `bytes` are freed (a full disk:
/// the newest data is worth more); returns how many files and bytes.
pub fn evict_oldest(root: &Path, host: &str, bytes: u64, stats: &SpoolStats) -> (u64, u64) {
    let (mut files, mut freed) = (0, 0);
    for f in completed(root, host) {
        if freed >= bytes {
            break;
        }
        if delete(root, &f.path).is_ok() {
            files += 1;
            freed += f.bytes;
            stats.evicted_files.fetch_add(1, Ordering::Relaxed);
        }
    }
    (files, freed)
}

/// The files to drop so the spool fits `max_bytes` and nothing is older than `max_age`:
/// the oldest go first.
pub fn over_limits(
    files: &[SpoolFile],
    max_bytes: u64,
    max_age: Duration,
    now: SystemTime,
) -> Vec<SpoolFile> {
    let mut total: u64 = files.iter().map(|f| f.bytes).sum();
    let mut out = Vec::new();
    for f in files {
        let too_old = now.duration_since(f.modified).unwrap_or_default() > max_age;
        if too_old || total > max_bytes {
            total -= f.bytes;
            out.push(f.clone());
        }
    }
    out
}

/// `s3://bucket/prefix` split into bucket and prefix.
pub fn parse_s3_url(url: &str) -> Result<(String, String)> {
    let Some(rest) = url.strip_prefix("s3://") else {
        bail!("--upload {url}: expected s3://BUCKET[/PREFIX]");
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        bail!("--upload {url}: no bucket");
    }
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}

/// Counters shared with the health reporting.
#[derive(Debug, Default)]
pub struct SpoolStats {
    pub uploaded_files: AtomicU64,
    pub uploaded_bytes: AtomicU64,
    pub upload_failures: AtomicU64,
    pub evicted_files: AtomicU64,
    pub spool_files: AtomicU64,
    pub spool_bytes: AtomicU64,
    /// UTC ns of the last confirmed upload (0: none yet).
    pub last_upload_ns: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

pub struct Target {
    pub store: Arc<dyn object_store::ObjectStore>,
    pub prefix: String,
    pub description: String,
}

/// S3 (or S3-compatible) store: credentials and region from the usual AWS_* variables;
/// endpoint from `endpoint`, else AWS_ENDPOINT_URL / AWS_ENDPOINT.
pub fn s3_target(url: &str, endpoint: Option<&str>) -> Result<Target> {
    use object_store::{aws::AmazonS3Builder, RetryConfig};
    let (bucket, prefix) = parse_s3_url(url)?;
    let mut b = AmazonS3Builder::from_env().with_bucket_name(&bucket);
    let endpoint = endpoint
        .map(String::from)
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
    let mut options = object_store::ClientOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(120));
    if let Some(ep) = &endpoint {
        b = b.with_endpoint(ep).with_virtual_hosted_style_request(false);
        options = options.with_allow_http(ep.starts_with("http://"));
    }
    // Give up on a request quickly: the spool loop retries with its own backoff and keeps
    // recording meanwhile.
    let retry = RetryConfig {
        max_retries: 2,
        retry_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    let store = b
        .with_retry(retry)
        .with_client_options(options)
        .build()
        // The builder's error may quote the endpoint, password and all.
        .map_err(|e| anyhow::anyhow!(one_line_redacted(&format!("--upload {url}: {e}"))))?;
    Ok(Target {
        store: Arc::new(store),
        prefix,
        description: format!(
            "s3://{bucket}{}",
            endpoint
                .map(|e| format!(" at {}", redact_userinfo(&e)))
                .unwrap_or_default()
        ),
    })
}

/// Most characters of a store error kept for the log and `status.json`.
const ERROR_CHARS: usize = 300;

/// A store error as one line for a log and a world-readable `status.json`: the store's body
/// (multi-line XML) folded onto one line and cut, passwords in URLs replaced.
pub fn one_line_redacted(msg: &str) -> String {
    let folded = msg.split_whitespace().collect::<Vec<_>>().join(" ");
    let redacted = redact_userinfo(&folded);
    match redacted.char_indices().nth(ERROR_CHARS) {
        Some((cut, _)) => format!("{}...", &redacted[..cut]),
        None => redacted,
    }
}

/// `scheme://user:password@host` -> `scheme://***@host`, wherever a URL appears in `text`.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority_end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(tail.len());
        match tail[..authority_end].rfind('@') {
            Some(userinfo_end) => {
                out.push_str("***");
                rest = &tail[userinfo_end..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

pub struct SpoolConfig {
    pub root: PathBuf,
    /// Whose files this agent may upload and evict: its own host's partition only.
    pub host: String,
    pub target: Option<Target>,
    pub max_bytes: u64,
    pub max_age: Duration,
}

/// Uploads one file and confirms it with a HEAD of the same size.
async fn upload(target: &Target, f: &SpoolFile) -> Result<()> {
    use object_store::ObjectStoreExt as _;
    let key = if target.prefix.is_empty() {
        f.key.clone()
    } else {
        format!("{}/{}", target.prefix, f.key)
    };
    let location = object_store::path::Path::from(key.as_str());
    let data = tokio::fs::read(&f.path)
        .await
        .with_context(|| format!("reading {}", f.path.display()))?;
    let size = data.len() as u64;
    target
        .store
        .put(&location, bytes::Bytes::from(data).into())
        .await
        .with_context(|| format!("uploading {key}"))?;
    let meta = target
        .store
        .head(&location)
        .await
        .with_context(|| format!("confirming {key}"))?;
    if meta.size != size {
        bail!(
            "{key}: the store holds {} bytes, expected {size}",
            meta.size
        );
    }
    Ok(())
}

/// One pass: enforce the limits, then upload what is there (oldest first) until a failure.
/// Returns whether every file was uploaded.
async fn pass(cfg: &SpoolConfig, stats: &SpoolStats) -> bool {
    let mut files = completed(&cfg.root, &cfg.host);
    let mut evicted = Vec::new();
    for f in over_limits(&files, cfg.max_bytes, cfg.max_age, SystemTime::now()) {
        if delete(&cfg.root, &f.path).is_ok() {
            evicted.push(f.path.clone());
            stats.evicted_files.fetch_add(1, Ordering::Relaxed);
            log::warn!(
                "spool over its limits: deleted {} ({} bytes){}",
                f.key,
                f.bytes,
                if cfg.target.is_some() {
                    " without uploading it"
                } else {
                    ""
                }
            );
        }
    }
    files.retain(|f| !evicted.contains(&f.path));
    stats
        .spool_files
        .store(files.len() as u64, Ordering::Relaxed);
    stats
        .spool_bytes
        .store(files.iter().map(|f| f.bytes).sum(), Ordering::Relaxed);
    let Some(target) = &cfg.target else {
        return true;
    };
    for f in files {
        match upload(target, &f).await {
            Ok(()) => {
                if let Err(e) = delete(&cfg.root, &f.path) {
                    log::warn!("uploaded {} but could not delete it: {e}", f.key);
                }
                stats.uploaded_files.fetch_add(1, Ordering::Relaxed);
                stats.uploaded_bytes.fetch_add(f.bytes, Ordering::Relaxed);
                stats.last_upload_ns.store(
                    crate::clock::now_ns(libc::CLOCK_REALTIME) as u64,
                    Ordering::Relaxed,
                );
                stats.spool_files.fetch_sub(1, Ordering::Relaxed);
                stats.spool_bytes.fetch_sub(f.bytes, Ordering::Relaxed);
                let recovered = stats.last_error.lock().unwrap().take();
                if let Some(was) = recovered {
                    log::info!(
                        "uploads to {} work again (after: {was})",
                        target.description
                    );
                }
            }
            Err(e) => {
                stats.upload_failures.fetch_add(1, Ordering::Relaxed);
                // The store's errors repeat their chain; the context and the root cause suffice.
                let msg = one_line_redacted(&format!("{e}: {}", e.root_cause()));
                let mut last = stats.last_error.lock().unwrap();
                if last.is_none() {
                    log::warn!(
                        "upload to {} failed, keeping files in the spool and retrying: {msg}",
                        target.description
                    );
                }
                *last = Some(msg);
                return false;
            }
        }
    }
    true
}

/// The spool worker: a thread with its own runtime, so uploads never delay the ring buffer.
pub struct Spool {
    stop: Arc<AtomicBool>,
    /// How long the last pass may keep retrying after `stop` (set by `finish`).
    drain_ns: Arc<AtomicU64>,
    /// Ends the worker at once, even mid-upload (a second SIGTERM/SIGINT during the drain).
    abort: Arc<tokio::sync::Notify>,
    thread: std::thread::JoinHandle<()>,
    pub stats: Arc<SpoolStats>,
}

impl Spool {
    pub fn start(cfg: SpoolConfig) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let drain_ns = Arc::new(AtomicU64::new(0));
        let stats = Arc::new(SpoolStats::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the upload runtime")?;
        let abort = Arc::new(tokio::sync::Notify::new());
        let (stop2, stats2, drain2, abort2) =
            (stop.clone(), stats.clone(), drain_ns.clone(), abort.clone());
        let thread = std::thread::Builder::new()
            .name("spool".into())
            .spawn(move || {
                let work = async {
                    let mut backoff = Duration::from_secs(1);
                    while !stop2.load(Ordering::Relaxed) {
                        let wait = if pass(&cfg, &stats2).await {
                            backoff = Duration::from_secs(1);
                            Duration::from_secs(1)
                        } else {
                            let w = backoff;
                            backoff = (backoff * 2).min(Duration::from_secs(60));
                            w
                        };
                        let until = Instant::now() + wait;
                        while Instant::now() < until && !stop2.load(Ordering::Relaxed) {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                    // Last files of the run: keep trying until the deadline the caller set.
                    let deadline =
                        Instant::now() + Duration::from_nanos(drain2.load(Ordering::Relaxed));
                    let mut backoff = Duration::from_millis(500);
                    while !pass(&cfg, &stats2).await && Instant::now() + backoff < deadline {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                    }
                };
                // `abort` cancels an upload in flight too: dropping its future closes the request.
                runtime.block_on(async {
                    tokio::select! {
                        _ = work => {}
                        _ = abort2.notified() => {
                            log::warn!("upload stopped by a second signal: what was not uploaded stays in the spool");
                        }
                    }
                });
                // The counts the last health files report: a pass cut short (or one that began
                // before the last files were closed) saw an older spool.
                let left = completed(&cfg.root, &cfg.host);
                stats2.spool_files.store(left.len() as u64, Ordering::Relaxed);
                stats2
                    .spool_bytes
                    .store(left.iter().map(|f| f.bytes).sum(), Ordering::Relaxed);
            })
            .context("starting the spool thread")?;
        Ok(Spool {
            stop,
            drain_ns,
            abort,
            thread,
            stats,
        })
    }

    /// What `finish`'s drain can be cut short with: `notify_one` ends it at once.
    pub fn abort_handle(&self) -> Arc<tokio::sync::Notify> {
        self.abort.clone()
    }

    /// Stops after trying, for up to `drain`, to upload what is left.
    pub fn finish(self, drain: Duration) -> Arc<SpoolStats> {
        self.drain_ns
            .store(drain.as_nanos() as u64, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_urls() {
        assert_eq!(
            parse_s3_url("s3://b/p/q/").unwrap(),
            ("b".into(), "p/q".into())
        );
        assert_eq!(parse_s3_url("s3://b").unwrap(), ("b".into(), "".into()));
        assert!(parse_s3_url("http://b").is_err());
        assert!(parse_s3_url("s3:///x").is_err());
    }

    #[test]
    fn store_errors_are_one_line_without_passwords() {
        let xml = "uploading x: Error { status: 403, body: \"<?xml version=\\\"1.0\\\"?>\n<Error>\n  <Code>AccessDenied</Code>\n</Error>\" } url http://admin:s3cr3t@minio:9000/fleet/x";
        let line = one_line_redacted(xml);
        assert!(
            !line.contains('\n') && !line.contains("s3cr3t") && !line.contains("admin"),
            "{line}"
        );
        assert!(
            line.contains("<Code>AccessDenied</Code>")
                && line.contains("http://***@minio:9000/fleet/x"),
            "{line}"
        );
        assert_eq!(
            redact_userinfo("s3://b at https://h:9000"),
            "s3://b at https://h:9000"
        );
        assert_eq!(
            redact_userinfo("https://u@h/p and ftp://a:b@c"),
            "https://***@h/p and ftp://***@c"
        );
        let long = "x".repeat(1000);
        assert_eq!(one_line_redacted(&long).chars().count(), ERROR_CHARS + 3);
    }

    #[test]
    fn limits_drop_the_oldest_first() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let f = |k: &str, bytes, age| SpoolFile {
            path: k.into(),
            key: k.into(),
            bytes,
            modified: t0 - Duration::from_secs(age),
        };
        let files = vec![f("a", 50, 300), f("b", 50, 200), f("c", 50, 100)];
        let keys = |v: Vec<SpoolFile>| v.into_iter().map(|f| f.key).collect::<Vec<_>>();
        assert_eq!(
            keys(over_limits(&files, 100, Duration::from_secs(1000), t0)),
            ["a"]
        );
        assert_eq!(
            keys(over_limits(&files, 1000, Duration::from_secs(150), t0)),
            ["a", "b"]
        );
        assert!(over_limits(&files, 150, Duration::from_secs(1000), t0).is_empty());
    }

    #[test]
    fn leftovers_removed_completed_listed_with_keys_and_empty_dirs_pruned() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let p = root.join("table=rtt/date=2026-12-02/hour=22/host=h");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("part-1.parquet"), b"1234").unwrap();
        std::fs::write(p.join("part-2.parquet.partial"), b"12").unwrap();
        std::fs::write(root.join("status.json"), b"{}").unwrap();
        // files this host's agent did not write: another host's, a warehouse's, an operator's,
        // a link (one hour later, so that pruning below is seen on its own)
        let other = root.join("table=flows/date=2026-12-02/hour=22/host=h2");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("part-9.parquet"), b"x").unwrap();
        std::fs::write(other.join("part-9.parquet.partial"), b"x").unwrap();
        let warehouse = root.join("warehouse/table=events/date=2020-01-01");
        std::fs::create_dir_all(&warehouse).unwrap();
        std::fs::write(warehouse.join("old.parquet"), b"x").unwrap();
        let later = root.join("table=rtt/date=2026-12-02/hour=23/host=h");
        std::fs::create_dir_all(&later).unwrap();
        std::fs::write(later.join("notes.parquet.partial"), b"x").unwrap();
        std::os::unix::fs::symlink(
            root.join("status.json"),
            later.join("part-3.parquet.partial"),
        )
        .unwrap();
        assert_eq!(remove_leftovers(root, "h"), 1);
        assert!(other.join("part-9.parquet.partial").exists());
        assert!(later.join("notes.parquet.partial").exists());
        assert!(later.join("part-3.parquet.partial").is_symlink());
        let files = completed(root, "h");
        assert_eq!(files.len(), 1);
        assert_eq!(
            files[0].key,
            "table=rtt/date=2026-12-02/hour=22/host=h/part-1.parquet"
        );
        assert_eq!(files[0].bytes, 4);
        delete(root, &files[0].path).unwrap();
        assert!(!root.join("table=rtt/date=2026-12-02/hour=22").exists());
        assert!(later.exists());
        // another host's completed file and the warehouse's are never listed for upload or eviction
        assert!(completed(root, "h").is_empty());
        assert_eq!(completed(root, "h2").len(), 1);
        assert!(root.join("status.json").exists());
    }
}
