//! `scaletrace agent`: `record` as a node service. Runs until stopped, rotates its files into a
//! Hive-partitioned spool (`table=…/date=…/hour=…/host=…/part-….parquet`), uploads completed
//! files to S3-compatible storage, keeps the spool within limits, and reports its health.
pub mod config;
pub mod health;
mod service;
pub mod spool;

use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Result};
use clap::Args;

use crate::record::RecordArgs;

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub record: RecordArgs,

    /// Read flags from this TOML file: keys are the long flag names (`rotate_interval = "5m"`,
    /// `port = "29500-29600"`, `no_gpu = true`, lists for repeatable flags). Flags given on the
    /// command line win over the file (repeatable ones add to it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Close the files and start new ones this often (also at every UTC hour, so each file
    /// belongs to one hour partition).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub rotate_interval: Duration,

    /// ... or as soon as the open files reach this size.
    #[arg(long, default_value_t = 256, value_name = "MB", value_parser = clap::value_parser!(u64).range(1..))]
    pub rotate_size_mb: u64,

    /// Upload completed files to this S3 bucket and prefix (s3://BUCKET/PREFIX); credentials and
    /// region come from the usual AWS_* environment variables. Without it files stay in --out.
    #[arg(long, value_name = "s3://BUCKET/PREFIX")]
    pub upload: Option<String>,

    /// Endpoint of an S3-compatible store (MinIO, Ceph, ...); default $AWS_ENDPOINT_URL or AWS.
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,

    /// Most the local spool may hold; beyond it the oldest files are deleted (uploaded or not).
    #[arg(long, default_value_t = 10240, value_name = "MB", value_parser = clap::value_parser!(u64).range(1..))]
    pub spool_max_mb: u64,

    /// Files older than this are deleted from the spool (uploaded or not).
    #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
    pub retain_max_age: Duration,

    /// Where status.json and scaletrace.prom (Prometheus textfile) go; default: --out.
    #[arg(long, value_name = "DIR")]
    pub status_dir: Option<PathBuf>,

    /// At shutdown, keep trying to upload the last files for this long.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
}

/// How the agent rotates, reports and stops.
pub struct AgentSettings {
    pub rotate_interval: Duration,
    pub rotate_bytes: u64,
    pub status_dir: PathBuf,
    pub drain_timeout: Duration,
}

/// What the agent's housekeeping of a recording needs (`service::Service`).
pub struct AgentRun {
    pub settings: AgentSettings,
    pub spool: spool::SpoolConfig,
    pub leftovers_removed: u64,
    /// Held until the run ends: no second agent touches this host's spool meanwhile.
    pub spool_lock: spool::SpoolLock,
}

pub fn run(args: AgentArgs) -> Result<()> {
    if args.rotate_interval < Duration::from_millis(100) {
        bail!("--rotate-interval must be at least 100ms");
    }
    if args.record.bench_source_pid.is_some() {
        // a node service must never turn a process's syscalls into fake RTT samples
        bail!("--bench-source-pid is for benchmarks with `scaletrace record`, not for the agent");
    }
    // before anything is created: an agent started without root must leave nothing behind
    crate::environment::check_privileges()?;
    let out = args.record.out.clone();
    crate::atomic_file::create_output_dir("--out", &out)?;
    let target = args
        .upload
        .as_deref()
        .map(|url| spool::s3_target(url, args.s3_endpoint.as_deref()))
        .transpose()?;
    // the same name `record` files this node's data under
    let host = crate::node::NodeIdentity::current().hostname;
    let spool_lock = spool::lock(&out, &host)?;
    let leftovers_removed = spool::remove_leftovers(&out, &host);
    if leftovers_removed > 0 {
        log::warn!(
            "removed {leftovers_removed} unfinished file(s) left in {} by a previous run that did not stop cleanly",
            out.display()
        );
    }
    let status_dir = args.status_dir.clone().unwrap_or_else(|| out.clone());
    std::fs::create_dir_all(&status_dir).map_err(|e| {
        anyhow::anyhow!(
            "--status-dir {}: cannot create it: {e}",
            status_dir.display()
        )
    })?;
    crate::atomic_file::warn_if_writable_by_others(&out, "--out");
    if status_dir != out {
        crate::atomic_file::warn_if_writable_by_others(&status_dir, "--status-dir");
    }
    match &target {
        Some(t) => log::info!("uploading completed files to {}", t.description),
        None => log::info!("no --upload: completed files stay in {}", out.display()),
    }
    let agent = AgentRun {
        settings: AgentSettings {
            rotate_interval: args.rotate_interval,
            rotate_bytes: args.rotate_size_mb << 20,
            status_dir,
            drain_timeout: args.drain_timeout,
        },
        spool: spool::SpoolConfig {
            root: out,
            host,
            target,
            max_bytes: args.spool_max_mb << 20,
            max_age: args.retain_max_age,
        },
        leftovers_removed,
        spool_lock,
    };
    let start: crate::record::StartHousekeeping = Box::new(move |session| {
        Ok(Box::new(service::Service::start(agent, session)?)
            as Box<dyn crate::record::Housekeeping>)
    });
    crate::record::run_with(args.record, Some(start))
}
