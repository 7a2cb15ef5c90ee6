//! `scaletrace merge`: one row per time window, host and traced rank with the timeline and the
//! network side by side: the `st_window` view of the analysis, written as the `windows` table,
//! so `merge` and `analyze` share one definition of every share and read the same inputs (any
//! number of directories, files or globs; per-node output, fleet trees, the agent's spool).
use std::{path::PathBuf, time::Duration};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde::Deserialize;

use crate::{analyze, parquet_sink::TableWriter, tables::WindowRow};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Directories (searched recursively), Parquet files or glob patterns, as for `analyze`.
    #[arg(default_value = crate::layout::DEFAULT_DIR, num_args = 1..)]
    pub paths: Vec<String>,

    /// Window length (e.g. 100ms, 1s; 1ms to 1d).
    #[arg(long, default_value = "1s", value_parser = crate::analyze::params::parse_window)]
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
    // (1ms to 1d: `parse_window`)
    let window_ns = args.window.as_nanos() as i64;
    let spinner = analyze::Spinner::on_terminal();
    let (db, sources) = analyze::prepare(
        &args.paths,
        args.window,
        &[],
        args.duckdb_lib.as_deref(),
        &Default::default(),
        None,
        &|m| spinner.show(m),
    )?;
    spinner.show("computing the windows");
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
    spinner.hide();
    eprintln!(
        "scaletrace: {written} windows for {} host(s) written to {}",
        hosts.len(),
        path.display()
    );
    let others = other_window_files(&path);
    if !others.is_empty() {
        eprintln!(
            "scaletrace: note: {} also holds {} (other window lengths): a query over every file there mixes them; read {} alone or filter on window_ns = {window_ns}",
            path.parent().unwrap_or(&out).display(),
            others.join(", "),
            path.display()
        );
    }
    analyze::report_refusals(&db);
    Ok(())
}

/// The other `window-*.parquet` files beside `written` (merges with other `--window`s).
fn other_window_files(written: &std::path::Path) -> Vec<String> {
    let Some(dir) = written.parent() else {
        return Vec::new();
    };
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("window-") && n.ends_with(".parquet"))
        .filter(|n| Some(n.as_str()) != written.file_name().and_then(|f| f.to_str()))
        .collect();
    names.sort();
    names
}
