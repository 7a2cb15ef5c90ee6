//! `scaletrace analyze` and `scaletrace sql`: the diagnoses of docs/queries.md, run in DuckDB
//! over the Parquet of any number of nodes, as a ranked terminal summary and an HTML report.
mod baseline;
mod duckdb;
pub mod params;
mod report;
mod sources;
mod spark;
mod svg;
mod triage;

use std::{io::Write as _, path::PathBuf, time::Duration};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

pub use self::duckdb::DuckDb;
use crate::atomic_file::write_atomically;
use crate::wording::count;
use baseline::Baseline;
use params::Params;
pub use sources::Sources;

/// The analysis views; `scaletrace sql` prints them after the table views and st_params.
pub const VIEWS_SQL: &str = include_str!("views.sql");

#[derive(Debug, Args)]
#[command(after_help = format!("Thresholds (--set NAME=VALUE):\n{}", Params::help()))]
pub struct AnalyzeArgs {
    /// Directories (searched recursively), Parquet files or glob patterns: the output of
    /// `record`/`import` on one node, or a whole fleet's tree.
    #[arg(default_value = crate::layout::DEFAULT_DIR, num_args = 1..)]
    pub paths: Vec<String>,

    /// Window length (1ms to 1d) for time-based diagnoses (bursts, co-degradation, GPU idle). Flows
    /// recorded with a `--flow-window` of this length or one that divides it (1s is both
    /// defaults; 1s windows serve 10s or 1min) are read from their kernel windows, the others
    /// from their raw RTT samples (slower, more memory)
    #[arg(long, default_value = "1s", value_parser = params::parse_window)]
    pub window: Duration,

    /// Where to write the HTML report.
    #[arg(long, default_value = "scaletrace-report.html")]
    pub report: PathBuf,

    /// Do not write the HTML report.
    #[arg(long, conflicts_with = "report")]
    pub no_report: bool,

    /// Also write every finding as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Findings shown per category in the terminal (all of them are in the report).
    #[arg(long, default_value_t = 3, value_parser = parse_top)]
    pub top: usize,

    /// Change a threshold, e.g. --set min_retransmits=50 (repeatable; list below).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,

    /// A run of the same job without the problem (its fleet tree or files, as PATHS; repeatable):
    /// what a culprit cost is priced against its step time when this run has too few healthy
    /// training steps of its own (a fault present from the first step).
    #[arg(long, value_name = "PATH")]
    pub baseline: Vec<String>,

    /// libduckdb.so to use (default: $SCALETRACE_DUCKDB_LIB, next to this binary,
    /// /usr/local/lib, then the loader's search path).
    #[arg(long)]
    pub duckdb_lib: Option<PathBuf>,

    /// On a large fleet, first name the suspect nodes and ranks from the kernel's per-flow
    /// windows (queueing needs them: `record --flow-window`, on by default), the flows'
    /// retransmits and stalls, and each rank's compute and collective time per minute (no raw
    /// RTT sample), then run the exact analysis on their hosts, the peers that recorded evidence
    /// on their links and two reference hosts only: one hour of 1,000 nodes took about a minute
    /// (docs/fleet-hour.md). The findings, their costs and the fleet's usual are then those of
    /// the hosts read. `auto` triages stores of more than 64 hosts; the lines before the
    /// findings say what the triage saw and which hosts were read.
    #[arg(long, value_enum, default_value_t = triage::Mode::Auto)]
    pub triage: triage::Mode,

    #[command(flatten)]
    pub resources: Resources,
}

/// How much of the machine DuckDB may use: a fleet's hour of data does not fit in memory.
#[derive(Debug, Args, Default, Clone)]
pub struct Resources {
    /// Most memory DuckDB may use, e.g. 8GB (default: 80 % of RAM). Beyond it, it spills to
    /// --temp-dir.
    #[arg(long, value_name = "SIZE")]
    pub memory_limit: Option<String>,

    /// Where DuckDB spills what does not fit in memory (default: .tmp in the current
    /// directory). Give it a disk with room.
    #[arg(long, value_name = "DIR")]
    pub temp_dir: Option<PathBuf>,
}

impl Resources {
    fn settings_sql(&self) -> String {
        let mut sql = String::new();
        if let Some(limit) = &self.memory_limit {
            sql.push_str(&format!("SET memory_limit = {};\n", sources::quote(limit)));
        }
        if let Some(dir) = &self.temp_dir {
            sql.push_str(&format!(
                "SET temp_directory = {};\n",
                sources::quote(&dir.display().to_string())
            ));
        }
        sql
    }

    /// An out-of-memory error of DuckDB's, with what to do about it; other errors unchanged.
    fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        if !e.chain().any(|c| c.to_string().contains("Out of Memory")) {
            return e;
        }
        anyhow::anyhow!(
            "DuckDB ran out of memory ({}): raise --memory-limit, or give --temp-dir a disk with room to spill to (DuckDB: {})",
            self.memory_limit
                .as_deref()
                .map_or("its default limit, 80 % of RAM".to_string(), |l| format!("--memory-limit {l}")),
            e.root_cause().to_string().lines().next().unwrap_or("")
        )
    }
}

#[derive(Debug, Args)]
pub struct SqlArgs {
    /// Directories, Parquet files or glob patterns, as for `analyze`.
    #[arg(default_value = crate::layout::DEFAULT_DIR, num_args = 1..)]
    pub paths: Vec<String>,

    /// Window length (1ms to 1d) written into st_params.
    #[arg(long, default_value = "1s", value_parser = params::parse_window)]
    pub window: Duration,

    /// Change a threshold, as for `analyze`.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,

    /// A run of the same job without the problem, as for `analyze` (needs DuckDB to read it).
    #[arg(long, value_name = "PATH")]
    pub baseline: Vec<String>,

    /// The SQL engine the script is for: duckdb (the engine `analyze` runs), or spark (Spark
    /// SQL 4: `spark-sql -f`, or one statement at a time from PySpark), for a store too large
    /// for one machine.
    #[arg(long, value_enum, default_value_t = Dialect::Duckdb)]
    pub dialect: Dialect,

    /// Refused (kept so that scripts that pass it get the reason): it printed the views
    /// without the building blocks computed once, and neither engine could create them: each
    /// binds a view again wherever it is used, and the verdict's views reach the same blocks
    /// along many paths. On the 4-node test store, Python's DuckDB 2.0.1 took 73 s and 7.5 GB
    /// to create one view and ran out of memory at the next; PySpark 4.3 took 24-28 s per view
    /// from the culprits' on and ran out of a 6 GB heap.
    #[arg(long, hide = true)]
    pub views_only: bool,

    /// Spark only: the directory (a URI the whole cluster reads, e.g. hdfs://…, s3a://…)
    /// where the building blocks' tables are written, one subdirectory each, overwritten at
    /// each run. Two analyses at once need a directory each. Default: a directory per store
    /// and settings analyzed in the session's warehouse
    /// (`${spark.sql.warehouse.dir}/scaletrace-CHECKSUM`).
    #[arg(long, value_name = "URI")]
    pub spark_tables: Option<String>,
}

/// `--top`: at least one finding per category (the others are counted, and all are in the report).
fn parse_top(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => {
            Err("that would show no finding: give 1 or more (the report has all of them)".into())
        }
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dialect {
    Duckdb,
    Spark,
}

/// One row of the `findings` view.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    pub category: String,
    pub scope: String,
    pub rank_in_scope: i64,
    pub subject: String,
    pub host: Option<String>,
    /// The jobs the host's data flows belong to ("job 4121", "pod <uid>"; from their sockets'
    /// cgroups), also at the start of `summary`.
    #[serde(default)]
    pub job: Option<String>,
    pub rank: Option<i64>,
    pub score: Option<f64>,
    /// Estimated job time this cost (the `slowdown` verdicts).
    pub time_lost_s: Option<f64>,
    pub summary: String,
    /// When a verdict's culprit began to hold the job up (the first evidence in its onset step,
    /// `first_step`) and the last moment it did (ISO 8601, UTC).
    #[serde(default)]
    pub first_seen: Option<String>,
    #[serde(default)]
    pub last_seen: Option<String>,
    /// The training step (ProfilerStep#N) it began at: where its held-up steps begin to
    /// outnumber the healthy ones.
    #[serde(default)]
    pub first_step: Option<i64>,
    /// The same for people, with the training steps and the traced span.
    #[serde(default)]
    pub seen_when: Option<String>,
    /// Where to look next for this kind of culprit.
    #[serde(default)]
    pub next_check: Option<String>,
    /// Why `st_finding` holds this back (evidence that stood out on a job that lost no time,
    /// a rank that arrived last while held up by something else): shown as such, never a
    /// finding (not in `--json`).
    #[serde(default, skip_serializing)]
    pub withheld: Option<String>,
}

impl Finding {
    /// A verdict's lines under its summary: when, and where to look next.
    pub fn details(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [("when", &self.seen_when), ("next", &self.next_check)]
            .into_iter()
            .filter_map(|(label, value)| value.as_deref().map(|v| (label, v)))
    }
}

/// A culprit with evidence whose cost stays below the verdict's floors (`st_below_floors`).
#[derive(Debug, Clone, Deserialize)]
pub struct BelowFloors {
    pub cause: String,
    pub culprit: String,
    pub slow_steps: i64,
    pub time_lost_s: f64,
    pub lost_fraction: f64,
    pub traced_s: f64,
    /// Which floors it missed, e.g. "less than 0.20 s, less than 5% of the traced time".
    pub below: String,
}

impl BelowFloors {
    pub const SQL: &'static str =
        "SELECT cause, culprit, slow_steps, time_lost_s, lost_fraction, traced_s, below
        FROM st_below_floors ORDER BY time_lost_s DESC, culprit";

    /// "rank 1 (node1), a straggler: 0.15 s lost (2.2% of 7.0 s traced) in 118 collective
    /// steps: less than 0.20 s, less than 5% of the traced time"
    pub fn describe(&self) -> String {
        let what = match self.cause.as_str() {
            "network" => "losing packets",
            "queueing" => "a slow, congested or delayed link",
            "straggler" => "a straggler",
            other => other,
        };
        format!(
            "{}, {what}: {:.2} s lost ({:.1}% of {:.1} s traced) in {} collective steps: {}",
            self.culprit,
            self.time_lost_s,
            100.0 * self.lost_fraction,
            self.traced_s,
            self.slow_steps,
            self.below
        )
    }
}

/// What each category is about and the tables it needs (any one of a group).
pub const CATEGORIES: [(&str, &str, &[&[&str]]); 10] = [
    (
        "slowdown",
        "Verdict: what slowed the job, where, and how much it cost",
        &[&["gpu_events", "nccl_calls"]],
    ),
    (
        "retransmits",
        "Retransmit hot spots (per peer, interface, flow)",
        &[&["flows"]],
    ),
    (
        "rdma_retransmits",
        "RDMA retransmit hot spots (per device, from the NIC's own counters)",
        &[&["nic_counters"]],
    ),
    (
        "loss_burst",
        "Loss bursts",
        &[&["retransmits"], &["rtt", "flow_windows"]],
    ),
    (
        "latency",
        "Latency: tail outliers and queueing",
        &[&["rtt"], &["flows"]],
    ),
    (
        "contention",
        "Contention: flows sharing a NIC or peer degrading together",
        &[&["rtt", "flow_windows"], &["flows"]],
    ),
    (
        "straggler",
        "Straggler ranks",
        &[&["gpu_events", "nccl_calls"]],
    ),
    (
        "sync_amplification",
        "Synchronization amplification",
        &[&["gpu_events", "nccl_calls"]],
    ),
    (
        "locality",
        "GPU-NIC locality",
        &[&["gpu_events"], &["gpu_devices"]],
    ),
    (
        "gpu_idle",
        "GPU idle while collectives run, with the network at the time",
        &[&["gpu_events"]],
    ),
];

/// Categories read from matched collective operations.
const COLLECTIVE_CATEGORIES: [&str; 3] = ["slowdown", "straggler", "sync_amplification"];

/// Categories that compare ranks with each other.
const CROSS_RANK_CATEGORIES: [&str; 2] = ["straggler", "sync_amplification"];

/// Broadest first: a peer or NIC explains its flows.
const SCOPE_ORDER: [&str; 11] = [
    "node",
    "link",
    "peer",
    "interface",
    "device",
    "flow",
    "window",
    "tail_outlier",
    "queueing",
    "rank",
    "collective",
];

/// Why a category cannot be analyzed, if it cannot.
fn missing_tables(sources: &Sources, needs: &[&[&str]]) -> Option<String> {
    let missing: Vec<String> = needs
        .iter()
        .filter(|group| !group.iter().any(|t| sources.has(t)))
        .map(|group| group.join(" or "))
        .collect();
    (!missing.is_empty()).then(|| format!("no {} table", missing.join(", no ")))
}

/// The whole DuckDB script for these sources: table views, thresholds, analysis views, and
/// the building blocks computed once right after their definitions. There is no DuckDB script
/// of views alone: DuckDB binds a view's query again in every view that reads it, so the
/// verdict's views, which reach the same building blocks along many paths, bind trees that
/// grow with the number of paths. Measured in Python's DuckDB 2.0.1 on the test fleet (any
/// data: it is the plan, not the rows): `st_iteration` took 19 s and 2.6 GB to create,
/// `st_culprit_cost` 73 s and 7.5 GB, and the next view ran out of memory.
pub fn script(sources: &Sources, params: &Params, baseline: Option<&Baseline>) -> Result<String> {
    let plain = format!(
        "-- generated by scaletrace {} (`scaletrace sql`)\nSET TimeZone = 'UTC';\n\n-- Tables\n{}\n{}\n{}\n{}",
        env!("CARGO_PKG_VERSION"),
        sources::views_sql(sources),
        params.sql(),
        baseline::sql(baseline, sources::quote),
        VIEWS_SQL
    );
    materialized(&plain)
}

/// The script `scaletrace sql` prints.
pub fn sql(args: SqlArgs) -> Result<String> {
    if args.spark_tables.is_some() && args.dialect != Dialect::Spark {
        bail!(
            "--spark-tables is for --dialect spark (DuckDB's building blocks are temporary tables)"
        );
    }
    if args.views_only {
        bail!("--views-only is gone: DuckDB and Spark bind a view again wherever it is used, and the verdict's plain views ran out of memory while they were created; for files that keep changing, run the printed script again (it reads them anew)");
    }
    if let Some(dir) = &args.spark_tables {
        spark::check_tables_dir(dir)?;
    }
    let sources = sources::discover(&args.paths)?;
    let params = Params::new(args.window, &args.set)?;
    let spinner = Spinner::on_terminal();
    let baseline = read_baseline(
        &args.baseline,
        args.window,
        &args.set,
        None,
        &Resources::default(),
        &|m| spinner.show(&format!("baseline: {m}")),
    )?;
    spinner.hide();
    let text = match args.dialect {
        Dialect::Duckdb => script(&sources, &params, baseline.as_ref())?,
        Dialect::Spark => spark::script(
            &sources,
            &params,
            baseline.as_ref(),
            match &args.spark_tables {
                Some(dir) => spark::BuildingBlocks::At(dir),
                None => spark::BuildingBlocks::InWarehouse,
            },
        )?,
    };
    Ok(text)
}

/// The baseline run's step time, analyzed with the same window and thresholds; None without
/// `--baseline`.
fn read_baseline(
    paths: &[String],
    window: Duration,
    set: &[String],
    duckdb_lib: Option<&std::path::Path>,
    resources: &Resources,
    progress: &dyn Fn(&str),
) -> Result<Option<Baseline>> {
    if paths.is_empty() {
        return Ok(None);
    }
    let label = paths.join(" ");
    let (db, _) = prepare(paths, window, set, duckdb_lib, resources, None, progress)
        .with_context(|| format!("--baseline {label}"))?;
    Baseline::read(&db, &label).map(Some)
}

#[derive(Debug, Deserialize)]
pub struct Overview {
    pub hosts: i64,
    pub flows: i64,
    pub rtt_samples: i64,
    /// Retransmitted segments: per flow the kernel's count, or the traced events when more (the
    /// same count the retransmit findings use).
    pub retransmitted_segments: i64,
    /// Retransmit tracepoint events read (one per retransmitted skb, which may hold several
    /// segments; flows the capture missed included).
    pub retransmits: i64,
    /// Ranks analyzed as one job.
    pub ranks: i64,
    /// Trace files left out as not of that job (`st_rank_refused`).
    pub refused_traces: i64,
    pub collective_ops: i64,
    pub gpu_events: i64,
    /// RDMA devices with port or hardware counters in `nic_counters`.
    pub rdma_devices: i64,
    /// Rows of `gpu_devices`: a node where NVML found no GPU writes the table empty.
    pub gpu_devices: i64,
    pub first: Option<String>,
    pub last: Option<String>,
}

impl Overview {
    /// "4 hosts, 16 flows, ... 2026-01-01 00:00:00 .. 2026-01-01 00:00:29 UTC"
    pub fn describe(&self) -> String {
        format!(
            "{}, {}, {}, {} ({}), {}{}, {}, {}; {} .. {} UTC",
            count(self.hosts, "host"),
            count(self.flows, "flow"),
            count(self.rtt_samples, "RTT sample"),
            count(self.retransmitted_segments, "retransmitted segment"),
            count(self.retransmits, "retransmit event"),
            count(self.ranks, "rank"),
            match self.refused_traces {
                0 => String::new(),
                n => format!(
                    " ({} not of this job left out: `not matched` on standard error)",
                    count(n, "trace")
                ),
            },
            count(self.collective_ops, "collective operation"),
            count(self.gpu_events, "timeline event"),
            self.first.as_deref().unwrap_or("?"),
            self.last.as_deref().unwrap_or("?"),
        )
    }
}

const OVERVIEW_SQL: &str = "SELECT
    -- the timelines of the job: traces of other runs are refused (`not matched`), and their
    -- hosts, events and times counted here made the line describe what was not analyzed
    (SELECT count(DISTINCT host) FROM (SELECT host FROM flows UNION SELECT host FROM rtt UNION SELECT host FROM st_event UNION SELECT host FROM nccl_calls)) AS hosts,
    (SELECT count(*) FROM flows) AS flows,
    (SELECT count(*) FROM rtt) AS rtt_samples,
    (SELECT coalesce(sum(retransmits), 0) FROM st_retrans_flow)::BIGINT AS retransmitted_segments,
    (SELECT count(*) FROM retransmits) AS retransmits,
    -- the ranks analyzed as one job; traces of other runs are refused and said
    (SELECT count(*) FROM (SELECT host, rank FROM st_rank_trace WHERE (host, rank, import_file) NOT IN (SELECT (host, rank, import_file) FROM st_rank_refused)
                           UNION SELECT host, rank FROM st_collective_op)) AS ranks,
    (SELECT count(*) FROM st_rank_refused) AS refused_traces,
    (SELECT count(*) FROM st_collective_op) AS collective_ops,
    (SELECT count(*) FROM st_event) AS gpu_events,
    (SELECT count(*) FROM (SELECT DISTINCT host, device FROM nic_counters WHERE source IN ('ib', 'ib_hw'))) AS rdma_devices,
    (SELECT count(*) FROM gpu_devices) AS gpu_devices,
    (SELECT strftime(min(t), '%Y-%m-%d %H:%M:%S') FROM (SELECT min(ts) AS t FROM rtt UNION ALL SELECT min(start) FROM flows UNION ALL SELECT to_timestamp(min(start_us) / 1e6) FROM st_event)) AS first,
    (SELECT strftime(max(t), '%Y-%m-%d %H:%M:%S') FROM (SELECT max(ts) AS t FROM rtt UNION ALL SELECT max(\"end\") FROM flows UNION ALL SELECT to_timestamp(max(start_us) / 1e6) FROM st_event)) AS last";

/// Finds the tables under `paths`, opens DuckDB and creates every view: what `analyze` and
/// `merge` both start from.
pub fn prepare(
    paths: &[String],
    window: Duration,
    set: &[String],
    duckdb_lib: Option<&std::path::Path>,
    resources: &Resources,
    baseline: Option<&Baseline>,
    progress: &dyn Fn(&str),
) -> Result<(DuckDb, Sources)> {
    let sources = sources::discover(paths)?;
    let params = Params::new(window, set)?;
    let db = prepare_sources(&sources, &params, duckdb_lib, resources, baseline, progress)?;
    Ok((db, sources))
}

/// `prepare` for sources already found (and perhaps narrowed to a triage's hosts).
fn prepare_sources(
    sources: &Sources,
    params: &Params,
    duckdb_lib: Option<&std::path::Path>,
    resources: &Resources,
    baseline: Option<&Baseline>,
    progress: &dyn Fn(&str),
) -> Result<DuckDb> {
    let db = DuckDb::open(duckdb_lib)?;
    log::debug!("DuckDB {} from {}", db.version(), db.library.display());
    db.execute(&resources.settings_sql())
        .context("--memory-limit / --temp-dir")?;
    let script = script(sources, params, baseline)?;
    let steps = building_block_steps(&script);
    for (i, (block, sql)) in steps.iter().enumerate() {
        let started = std::time::Instant::now();
        if let Some(block) = block {
            progress(&format!(
                "computing {block} ({} of {})",
                i + 1,
                MATERIALIZED.len()
            ));
        }
        db.execute(sql).context("creating the analysis views")?;
        if let Some(block) = block {
            log::debug!(
                "{block} computed in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(db)
}

/// Views that many diagnoses read, in dependency order. DuckDB inlines a view wherever it is
/// used, so the findings would compute each of these again for every diagnosis that reads it
/// (30 s instead of under 1 s on the 4-node test fleet), and binding a view that nests the
/// whole tree several times took 28 s by itself; `analyze` and `merge` compute each once, right
/// after its definition, into a temporary table behind the same name, so the views after it
/// bind against the table. `scaletrace sql` prints the same script.
/// The views that read raw RTT samples and that several others read (the per-window RTT, each
/// flow's RTT over the capture, the fleet's usual queueing, the healthy steps' queueing, the culprits' step windows and queued
/// samples) are among them, and each rank's windows (the GPU-idle views read them four times:
/// 5.7 s of the findings' 11 s for 64 nodes' 10 minutes): inlined, `findings` read the `rtt` files 102 times, and for 64 nodes' 2 minutes
/// at 64 flows each (49 M samples, bench/fleet.py) it spilled past 50 GB without finishing.
/// The queued samples too: the step attribution and the culprits' counts each read them from
/// the raw samples (10 of 71 s on 64 nodes' 10 minutes went to the second reading).
/// The span of each flow's kernel windows too, small as it is: the per-window RTT reads it three
/// times, and grouped again each time it took 0.76 of that view's 2.58 s on 64 nodes' 10
/// minutes (2.5 M windows, bench/fleet.py).
const MATERIALIZED: [&str; 26] = [
    "st_windowed_flow",
    "st_event",
    "st_rank_trace",
    "st_collective_op",
    "st_collective_rank_step",
    "st_lane_interval",
    "st_rank_window",
    "st_flow_raw_rtt",
    "st_rtt_window",
    "st_flow_baseline",
    "st_fleet_queueing",
    "st_flow_window",
    "st_latency_flow",
    "st_collective_excess",
    "st_healthy_queueing",
    "st_queued_sample",
    "st_step_queueing",
    "st_slow_step_cause",
    "st_culprit_iteration",
    "st_culprit",
    "st_iteration",
    "st_slowdown",
    "st_culprit_when",
    "st_culprit_step_window",
    "st_culprit_queued_samples",
    "st_persistent_queueing",
];

/// A spinner with a message on stderr while the analysis runs, when stderr is a terminal
/// (nothing in a pipe or a log). It appears at the first message and is cleared by `hide`
/// (and when dropped): a line printed while it spins would start on the spinner's line, so the
/// caller hides it before anything that may print (the warnings of discovering a store's
/// files, the baseline's description), and it stays off when debug logging prints a line per
/// building block.
pub struct Spinner {
    enabled: bool,
    bar: std::cell::RefCell<Option<indicatif::ProgressBar>>,
}

impl Spinner {
    pub fn on_terminal() -> Self {
        Spinner {
            enabled: std::io::IsTerminal::is_terminal(&std::io::stderr())
                && !log::log_enabled!(log::Level::Debug),
            bar: Default::default(),
        }
    }

    pub fn show(&self, message: &str) {
        if !self.enabled {
            return;
        }
        let mut bar = self.bar.borrow_mut();
        let bar = bar.get_or_insert_with(|| {
            let s = indicatif::ProgressBar::new_spinner();
            s.enable_steady_tick(Duration::from_millis(120));
            s
        });
        bar.set_message(message.to_string());
    }

    pub fn hide(&self) {
        if let Some(bar) = self.bar.borrow_mut().take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.hide();
    }
}

/// The materialized script in pieces, each but the last ending with one building block
/// computed (its name beside it): on a fleet they take most of a minute, and a user waiting
/// should see which one runs.
fn building_block_steps(script: &str) -> Vec<(Option<&'static str>, &str)> {
    // where each block is computed, in the script's order (MATERIALIZED's is by dependency,
    // not position)
    let mut ends: Vec<(usize, &'static str)> = MATERIALIZED
        .iter()
        .filter_map(|v| {
            let end = view_over_computed(v);
            script.find(&end).map(|at| (at + end.len(), *v))
        })
        .collect();
    ends.sort();
    let mut steps = Vec::new();
    let mut from = 0;
    for (end, v) in ends {
        steps.push((Some(v), &script[from..end]));
        from = end;
    }
    steps.push((None, &script[from..]));
    steps
}

/// The statement that ends a building block's computation in the DuckDB script: the view,
/// redefined over its table (where `building_block_steps` cuts the script).
fn view_over_computed(v: &str) -> String {
    format!("CREATE OR REPLACE VIEW {v} AS SELECT * FROM {v}__computed;\n")
}

fn materialized(script: &str) -> Result<String> {
    after_each_building_block(script, "CREATE OR REPLACE VIEW", |v| {
        format!(
            "CREATE OR REPLACE TEMP TABLE {v}__computed AS SELECT * FROM {v};\n{}",
            view_over_computed(v)
        )
    })
}

/// `script` with `after(view)` inserted after the definition of each of the `MATERIALIZED`
/// views, whose definition begins with `create` and the view's name.
fn after_each_building_block(
    script: &str,
    create: &str,
    after: impl Fn(&str) -> String,
) -> Result<String> {
    let mut out = script.to_string();
    for v in MATERIALIZED {
        let Some(start) = out.find(&format!("{create} {v} AS")) else {
            bail!("internal: view {v} is not in the analysis script");
        };
        // the statement ends at the first `;` that ends a line (no view has one inside)
        let Some(len) = out[start..].find(";\n") else {
            bail!("internal: the definition of {v} does not end");
        };
        out.insert_str(start + len + 2, &after(v));
    }
    Ok(out)
}

#[derive(Deserialize)]
struct Refusal {
    what: String,
}

/// Says what the analysis refused to match (traces of other jobs, collectives missing on some
/// ranks or not overlapping in time), so a number that is absent is not a surprise.
pub fn report_refusals(db: &DuckDb) {
    let refusals: Vec<Refusal> = db.rows(REFUSALS_SQL).unwrap_or_default();
    for r in refusals {
        eprintln!("scaletrace: not matched: {}", r.what);
    }
}

pub const REFUSALS_SQL: &str = "SELECT printf('%s rank %d: %s%s', host, rank, reason,
              CASE WHEN count(*) > 1 THEN printf(' (%d traces)', count(*)) ELSE '' END) AS what
FROM st_rank_refused GROUP BY host, rank, reason
UNION ALL
SELECT printf('%d %s operations (%s): %d not on every rank, %d more than once on a rank, %d whose ranks'' operations do not overlap in time',
              steps, collective, source, not_on_every_rank, repeated, not_overlapping)
FROM st_collective_refused
-- a trace cut at its edges leaves a partial step or two: not worth a line
WHERE not_on_every_rank > 2 OR repeated > 0 OR not_overlapping > 0
UNION ALL
SELECT printf('the timelines (%s .. %s UTC) and the network capture (%s .. %s UTC) do not overlap in time: no network observation can be tied to a training step (a trace and a capture of different runs?)',
              strftime(timeline_first, '%Y-%m-%d %H:%M:%S'), strftime(timeline_last, '%Y-%m-%d %H:%M:%S'),
              strftime(network_first, '%Y-%m-%d %H:%M:%S'), strftime(network_last, '%Y-%m-%d %H:%M:%S'))
FROM st_timeline_network_apart";

/// The first `top` findings with their position, and how many more the report has.
fn print_ranked(out: &mut impl std::io::Write, ranked: &[(i64, &Finding)], top: usize, what: &str) {
    let line = |(position, f): &(i64, &Finding)| {
        let mut text = format!("  {position}. [{}] {}", f.scope, f.summary);
        for (label, value) in f.details() {
            text.push_str(&format!("\n     {label}: {value}"));
        }
        text
    };
    print_top(out, ranked, top, line, "     ", what);
}

/// A category's findings: the verdict as one ranking across nodes, links and ranks (by the
/// time each cost), the evidence ranked within each scope.
fn print_category(out: &mut impl std::io::Write, title: &str, of: &[&Finding], top: usize) {
    if of.is_empty() {
        let _ = writeln!(out, "\n{title}: nothing found");
        return;
    }
    let _ = writeln!(out, "\n{title}: {} finding(s)", of.len());
    if of[0].category == "slowdown" {
        let ranked: Vec<(i64, &Finding)> = (1..).zip(of.iter().copied()).collect();
        print_ranked(out, &ranked, top, "");
        let _ = writeln!(
            out,
            "  (traced: from the first to the last collective matched on every rank; a healthy step: the median training step no culprit impaired, or the --baseline run's)"
        );
        return;
    }
    let mut scopes: Vec<&str> = of.iter().map(|f| f.scope.as_str()).collect();
    scopes.sort_by_key(|s| SCOPE_ORDER.iter().position(|o| o == s));
    scopes.dedup();
    for scope in scopes {
        let ranked: Vec<(i64, &Finding)> = of
            .iter()
            .filter(|f| f.scope == scope)
            .map(|f| (f.rank_in_scope, *f))
            .collect();
        print_ranked(out, &ranked, top, &format!(" {scope} findings"));
    }
}

/// Under an empty verdict: what came closest, so that "nothing found" on a job that did get
/// slower says how much each suspect cost and which floor kept it out.
fn print_below_floors(out: &mut impl std::io::Write, below: &[BelowFloors], top: usize) {
    if below.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  below the floors (not findings; thresholds: --help):"
    );
    print_top(
        out,
        below,
        top,
        |b| format!("  - {}", b.describe()),
        "    ",
        "",
    );
}

/// What a category held back, by reason (`Finding::withheld`): said, so that "nothing found"
/// does not hide it, and said not to be a finding.
fn print_withheld(out: &mut impl std::io::Write, withheld: &[&Finding], top: usize) {
    for (reason, of) in withheld_by_reason(withheld) {
        let _ = writeln!(out, "  {reason} (not findings):");
        print_top(
            out,
            &of,
            top,
            |f| format!("  - [{}] {}", f.scope, f.summary),
            "    ",
            "",
        );
    }
}

/// Withheld rows grouped by their reason, in the order the reasons first appear.
pub fn withheld_by_reason<'a>(withheld: &[&'a Finding]) -> Vec<(&'a str, Vec<&'a Finding>)> {
    let mut groups: Vec<(&str, Vec<&Finding>)> = Vec::new();
    for f in withheld {
        let reason = f.withheld.as_deref().unwrap_or_default();
        match groups.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, of)) => of.push(f),
            None => groups.push((reason, vec![f])),
        }
    }
    groups
}

/// The first `top` items (at least one), one line each, then how many more the report holds.
fn print_top<T>(
    out: &mut impl std::io::Write,
    items: &[T],
    top: usize,
    line: impl Fn(&T) -> String,
    more_indent: &str,
    what: &str,
) {
    let top = top.max(1);
    for item in items.iter().take(top) {
        let _ = writeln!(out, "{}", line(item));
    }
    if items.len() > top {
        let more = items.len() - top;
        let _ = writeln!(
            out,
            "{more_indent}... {more} more{what}: --top {} shows them all",
            items.len()
        );
    }
}

pub fn run(args: AnalyzeArgs) -> Result<()> {
    let resources = args.resources.clone();
    analyze(args).map_err(|e| resources.explain(e))
}

fn analyze(args: AnalyzeArgs) -> Result<()> {
    let started = std::time::Instant::now();
    // Before the analysis, which can take minutes on a fleet: a report that cannot be written
    // would waste them.
    let outputs = args
        .json
        .iter()
        .chain((!args.no_report).then_some(&args.report));
    for path in outputs {
        crate::atomic_file::check_writable(path)?;
    }
    // A fleet's worth of Parquet takes minutes: show what is being computed.
    let spinner = Spinner::on_terminal();
    let baseline = read_baseline(
        &args.baseline,
        args.window,
        &args.set,
        args.duckdb_lib.as_deref(),
        &args.resources,
        &|m| spinner.show(&format!("baseline: {m}")),
    )?;
    spinner.hide();
    let mut sources = sources::discover(&args.paths)?;
    let params = Params::new(args.window, &args.set)?;
    spinner.show("triage: which hosts to analyze");
    let triage = triage::run(
        args.triage,
        &sources,
        &params,
        args.duckdb_lib.as_deref(),
        &args.resources,
    )
    .context("--triage")?;
    if let Some(t) = &triage {
        sources.hosts = Some(t.drill.clone());
        log::debug!("triage took {:.1} s", t.seconds);
    }
    let db = prepare_sources(
        &sources,
        &params,
        args.duckdb_lib.as_deref(),
        &args.resources,
        baseline.as_ref(),
        &|m| spinner.show(m),
    )?;
    spinner.hide();
    // The findings are the command's output (stdout: `analyze ... > findings.txt`, `| less`),
    // written once they are all known and after the JSON and the report, so that a full disk
    // or a reader that went away loses neither; warnings, where the report went and how long
    // it took are about the run (stderr).
    let mut out: Vec<u8> = Vec::new();
    // printed first, and at the top of the report
    let triage_lines = triage.as_ref().map(|t| t.describe());
    if let Some(lines) = &triage_lines {
        let _ = write!(out, "{lines}");
    }
    if let Some(b) = &baseline {
        match &triage {
            Some(t) => b.check_ranks(t.ranks_in_store)?,
            None => b.check_same_job(&db)?,
        }
        // what the findings were priced against
        let _ = writeln!(out, "scaletrace analyze: {}", b.describe());
    }
    spinner.show(&format!(
        "running the diagnoses over {} files with DuckDB {}",
        sources.total_files(),
        db.version()
    ));
    let overview: Overview = db
        .rows(OVERVIEW_SQL)
        .context("reading the tables")?
        .into_iter()
        .next()
        .context("empty overview")?;
    let (withheld, findings): (Vec<Finding>, Vec<Finding>) = db
        .rows::<Finding>("SELECT * FROM st_finding")
        .context("running the diagnoses")?
        .into_iter()
        .partition(|f| f.withheld.is_some());

    let below_floors: Vec<BelowFloors> = if overview.collective_ops > 0 {
        db.rows(BelowFloors::SQL)
            .context("reading the culprits below the floors")?
    } else {
        Vec::new()
    };

    spinner.hide();
    report_refusals(&db);
    let _ = writeln!(
        out,
        "scaletrace analyze: {}{}{}",
        count(sources.total_files() as i64, "file"),
        if triage.is_some() {
            " in the store; read: "
        } else {
            ", "
        },
        overview.describe()
    );
    let mut not_analyzed = Vec::new();
    for (category, title, needs) in CATEGORIES {
        let why = missing_tables(&sources, needs).or_else(|| {
            // Timelines without any collective cannot say anything about collectives.
            (COLLECTIVE_CATEGORIES.contains(&category) && overview.collective_ops == 0)
                .then(|| "no collective operations in the timelines or NCCL calls".to_string())
        });
        let why = why.or_else(|| {
            // comparing ranks takes two: one rank's timeline "found nothing" only because
            // there was nothing to compare it with
            (CROSS_RANK_CATEGORIES.contains(&category) && overview.ranks < 2).then(|| {
                format!(
                    "{} in the timelines: it takes two or more to compare",
                    count(overview.ranks, "rank")
                )
            })
        });
        let why = why.or_else(|| {
            // an empty gpu_devices: the recorders sampled no GPU (no NVML, or no NVIDIA
            // runtime in the agent's container), which says nothing about locality
            (category == "locality" && overview.gpu_devices == 0)
                .then(|| "no GPU in gpu_devices: the recorders' NVML sampled none".to_string())
        });
        let why = why.or_else(|| {
            // NIC counters of a node without RDMA devices say nothing about RDMA
            (category == "rdma_retransmits" && overview.rdma_devices == 0).then(|| {
                "no RDMA device counters (nic_counters has no ib/ib_hw source)".to_string()
            })
        });
        if let Some(why) = why {
            not_analyzed.push((category, why));
            continue;
        }
        let of: Vec<&Finding> = findings.iter().filter(|f| f.category == category).collect();
        print_category(&mut out, title, &of, args.top);
        if of.is_empty() && category == "slowdown" {
            print_below_floors(&mut out, &below_floors, args.top);
        }
        let held: Vec<&Finding> = withheld.iter().filter(|f| f.category == category).collect();
        print_withheld(&mut out, &held, args.top);
    }
    if !not_analyzed.is_empty() {
        let _ = writeln!(out);
        for (category, why) in &not_analyzed {
            let _ = writeln!(out, "not analyzed: {category} ({why})");
        }
    }
    if let Some(path) = &args.json {
        write_atomically(path, serde_json::to_string_pretty(&findings)?.as_bytes())?;
    }
    if !args.no_report {
        let outcome = report::Outcome {
            overview: &overview,
            findings: &findings,
            withheld: &withheld,
            below_floors: &below_floors,
            not_analyzed: &not_analyzed,
            triage: triage_lines.as_deref(),
        };
        let html = report::render(&db, outcome, &args).context("building the report")?;
        write_atomically(&args.report, html.as_bytes())?;
    }
    // (a reader that stops early is no error; a full disk is)
    crate::to_stdout(&String::from_utf8_lossy(&out))
        .context("writing the findings to standard output")?;
    let mut err = std::io::stderr().lock();
    if !args.no_report {
        let _ = writeln!(err, "\nreport: {}", args.report.display());
    }
    let _ = writeln!(
        err,
        "{} findings in {:.1} s",
        findings.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod materialization_tests {
    use super::*;

    #[test]
    fn every_building_block_is_computed_right_after_its_definition() {
        let script = materialized(VIEWS_SQL).unwrap();
        for v in MATERIALIZED {
            let table = format!("CREATE OR REPLACE TEMP TABLE {v}__computed AS SELECT * FROM {v};");
            let at = script
                .find(&table)
                .unwrap_or_else(|| panic!("{v} not computed"));
            let defined = script
                .find(&format!("CREATE OR REPLACE VIEW {v} AS"))
                .unwrap();
            // right after its own definition: before any view defined later reads it
            let next_view = script[defined + 1..]
                .find("CREATE OR REPLACE VIEW")
                .unwrap()
                + defined
                + 1;
            assert!(
                defined < at && at < next_view,
                "{v} not computed right after its definition"
            );
        }
        assert!(materialized("SELECT 1;\n").is_err());
    }

    #[test]
    fn the_script_runs_in_steps_that_each_end_with_one_block_computed() {
        let script = materialized(VIEWS_SQL).unwrap();
        let steps = building_block_steps(&script);
        // nothing lost or repeated, and every block named once, in the order computed
        assert_eq!(steps.iter().map(|(_, s)| *s).collect::<String>(), script);
        let mut named: Vec<&str> = steps.iter().filter_map(|(v, _)| *v).collect();
        assert_eq!(steps.len(), MATERIALIZED.len() + 1);
        for (v, step) in steps.iter().filter_map(|(v, s)| v.map(|v| (v, s))) {
            assert!(step.ends_with(&format!("FROM {v}__computed;\n")), "{v}");
        }
        named.sort();
        let mut all = MATERIALIZED.to_vec();
        all.sort();
        assert_eq!(named, all);
    }
}
