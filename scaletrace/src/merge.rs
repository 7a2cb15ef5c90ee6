//! `scaletrace merge`: one row per time window, host and traced rank with the timeline and the
//! network side by side: the `st_window` view of the analysis, written as the `windows` table,
//! so `merge` and `analyze` share one definition of every share and read the same inputs (any
//! number of directories, files or globs; per-node output, fleet trees, the agent's spool).
use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde::Deserialize;

use crate::columns::*;
use crate::{analyze, parquet_sink::TableWriter};

table! {
    /// One time window of one host (and rank): timeline and network side by side.
    pub struct WindowRow in "windows" {
        description: "Written by `scaletrace merge` from the analysis view `st_window` (one definition for \
        `merge` and `analyze`): for each window and host, and each rank traced there, how the \
        rank's traced time was spent and the host's network in the same window. Timeline shares are \
        of the time the rank was traced in the window, not of the whole window; a window outside \
        every trace of a rank has no row for it (null timeline columns on the host's network-only row).",
        window_start: i64 => ts_col("Window start (windows are aligned to multiples of the window length since the UNIX epoch)."),
        window_ns: i64 => i64_col("ns", "Window length."),
        host: String => str_col("Host."),
        rank: Option<i64> => opt_i64_col("", "Traced rank; null on the row of the host's network alone (windows where no rank of it was traced)."),
        device: Option<String> => opt_str_col("What the rank's timeline shows: `gpu` (it has GPU kernels) or `cpu` (CPU operators only, e.g. gloo jobs)."),
        traced_ns: Option<i64> => opt_i64_col("ns", "Time of the window covered by the rank's trace(s): the denominator of every share below."),
        busy_frac: Option<f64> => opt_f64_col("fraction", "Share of the traced time with compute or communication running (union of intervals)."),
        compute_frac: Option<f64> => opt_f64_col("fraction", "Share with compute running: GPU kernels/memcpy/memset that are not communication; on `cpu` ranks, CPU operators that are not communication, waits or synchronizations."),
        comm_frac: Option<f64> => opt_f64_col("fraction", "Share with a collective running, from the rank's communication layer (NCCL kernels, other communication kernels, backend annotations such as `gloo:all_reduce`, or `c10d::` calls — the first the trace has)."),
        overlap_frac: Option<f64> => opt_f64_col("fraction", "Share with compute and communication at once (communication hidden behind compute)."),
        idle_frac: Option<f64> => opt_f64_col("fraction", "Share with neither."),
        collective_ops: Option<u64> => opt_u64_col("count", "Collective operations starting in the window."),
        waiting_on_collectives: Option<bool> => opt_bool_col("`comm_frac` ≥ `idle_collective_fraction` (0.5) and `compute_frac` ≤ `idle_compute_fraction` (0.25): the rank mostly waited on communication. The same rule as `analyze`'s GPU-idle diagnosis."),
        net_bytes: Option<u64> => opt_u64_col("bytes", "Bytes acknowledged or received on the host's flows in the window (from successive `rtt` samples of each flow)."),
        net_throughput_bps: Option<f64> => opt_f64_col("bit/s", "`net_bytes` × 8 / window length."),
        rtt_samples: Option<u64> => opt_u64_col("count", "RTT samples of the host in the window."),
        rtt_p50_us: Option<f64> => opt_f64_col("µs", "Median smoothed RTT of those samples."),
        rtt_p99_us: Option<f64> => opt_f64_col("µs", "99th percentile smoothed RTT."),
        retransmits: Option<u64> => opt_u64_col("count", "Retransmitted segments (`retransmits` rows of kind `retransmit`) of the host in the window."),
    }
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Directories (searched recursively), Parquet files or glob patterns, as for `analyze`.
    #[arg(default_value = crate::layout::DEFAULT_DIR, num_args = 1..)]
    pub paths: Vec<String>,

    /// Window length (e.g. 100ms, 1s).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub window: Duration,

    /// Directory to write `windows/` into (default: the first path, when it is a directory).
    #[arg(long)]
    pub out: Option<PathBuf>,

    /// libduckdb.so to use, as for `analyze`.
    #[arg(long)]
    pub duckdb_lib: Option<PathBuf>,
}

/// One row of `st_window`, as DuckDB renders it in JSON.
#[derive(Debug, Deserialize)]
struct WindowJson {
    window_start_ns: i64,
    host: String,
    rank: Option<i64>,
    device: Option<String>,
    traced_us: Option<f64>,
    busy_frac: Option<f64>,
    compute_frac: Option<f64>,
    comm_frac: Option<f64>,
    overlap_frac: Option<f64>,
    idle_frac: Option<f64>,
    collective_ops: Option<u64>,
    waiting_on_collectives: Option<bool>,
    net_bytes: Option<u64>,
    net_throughput_bps: Option<f64>,
    rtt_samples: Option<u64>,
    rtt_p50_us: Option<f64>,
    rtt_p99_us: Option<f64>,
    retransmits: Option<u64>,
}

impl WindowJson {
    fn into_row(self, window_ns: i64) -> WindowRow {
        WindowRow {
            window_start: self.window_start_ns,
            window_ns,
            host: self.host,
            rank: self.rank,
            device: self.device,
            traced_ns: self.traced_us.map(|us| (us * 1000.0).round() as i64),
            busy_frac: self.busy_frac,
            compute_frac: self.compute_frac,
            comm_frac: self.comm_frac,
            overlap_frac: self.overlap_frac,
            idle_frac: self.idle_frac,
            collective_ops: self.collective_ops,
            waiting_on_collectives: self.waiting_on_collectives,
            net_bytes: self.net_bytes,
            net_throughput_bps: self.net_throughput_bps,
            rtt_samples: self.rtt_samples,
            rtt_p50_us: self.rtt_p50_us,
            rtt_p99_us: self.rtt_p99_us,
            retransmits: self.retransmits,
        }
    }
}

const WINDOWS_SQL: &str = "SELECT w * (SELECT window_us FROM st_params) * 1000 AS window_start_ns,
    host, rank, device, traced_us, busy_frac, compute_frac, comm_frac, overlap_frac, idle_frac,
    collective_ops, waiting_on_collectives, net_bytes, net_throughput_bps, rtt_samples,
    rtt_p50_us, rtt_p99_us, retransmits
FROM st_window ORDER BY host, rank NULLS FIRST, w";

pub fn run(args: MergeArgs) -> Result<()> {
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => {
            let first = PathBuf::from(&args.paths[0]);
            if !first.is_dir() {
                bail!(
                    "{} is not a directory: say where `windows/` goes with --out DIR",
                    first.display()
                );
            }
            first
        }
    };
    let window_ns = i64::try_from(args.window.as_nanos()).context("--window is too long")?;
    if window_ns < 1_000 {
        bail!("--window must be at least 1 µs");
    }
    let (db, sources) = analyze::prepare(
        &args.paths,
        args.window,
        &[],
        args.duckdb_lib.as_deref(),
        &Default::default(),
        None,
    )?;
    if !["rtt", "retransmits", "gpu_events"]
        .iter()
        .any(|t| sources.has(t))
    {
        bail!(
            "no rtt, retransmits or gpu_events tables under {}: record (`scaletrace record --out DIR`) or import first",
            args.paths.join(", ")
        );
    }
    let rows: Vec<WindowJson> = db.rows(WINDOWS_SQL).context("computing the windows")?;
    let stem = format!("window-{}", humantime::format_duration(args.window));
    let metadata = vec![
        (
            "scaletrace.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        ("scaletrace.window_ns".to_string(), window_ns.to_string()),
        ("scaletrace.sources".to_string(), args.paths.join(" ")),
    ];
    let mut writer = TableWriter::<WindowRow>::create(&out, &stem, &metadata)?;
    let hosts: std::collections::BTreeSet<String> = rows.iter().map(|r| r.host.clone()).collect();
    for row in rows {
        writer.push(row.into_row(window_ns))?;
    }
    let written = writer.rows();
    let path = writer.close()?;
    eprintln!(
        "scaletrace: {written} windows for {} host(s) written to {}",
        hosts.len(),
        path.display()
    );
    analyze::report_refusals(&db);
    Ok(())
}
