//! `scaletrace import`: GPU/collective timelines (PyTorch profiler / Kineto Chrome traces) into
//! the `gpu_events` table, on the same UTC axis as the network capture.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use clap::Args;

use crate::{
    kineto::{self, loose_int, TraceEvent, TraceHeader},
    node::NodeIdentity,
    parquet_sink::TableWriter,
    tables::GpuEventRow,
};

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Chrome trace JSON files written by the PyTorch profiler (`.json` or `.json.gz`).
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,

    /// Directory of the capture; events go to <OUT>/gpu_events/.
    #[arg(short, long, default_value = "./traces")]
    pub out: PathBuf,

    /// Host the traces were recorded on (default: this host), to join with its network tables.
    #[arg(long)]
    pub host: Option<String>,

    /// Rank, for traces without `distributedInfo.rank`.
    #[arg(long)]
    pub rank: Option<i64>,

    /// Nanoseconds added to every timestamp, for a known offset between the traced node's clock
    /// and UTC (e.g. measured by the cluster's time sync).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub time_offset_ns: i64,
}

/// How a trace's `ts` (µs) becomes UTC ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceClock {
    pub base_ns: i64,
    pub offset_ns: i64,
}

/// Microsecond timestamps above this are absolute UNIX time (after 2001-09-09).
const UNIX_US_THRESHOLD: f64 = 1e15;

impl TraceClock {
    /// Kineto writes `ts` relative to `baseTimeNanoseconds` (UNIX epoch); traces without it carry
    /// absolute UNIX microseconds. Anything else cannot be placed on the UTC axis.
    pub fn for_trace(
        header: &TraceHeader,
        first_ts_us: Option<f64>,
        offset_ns: i64,
    ) -> Result<Self> {
        match (header.base_time_ns, first_ts_us) {
            (Some(base), _) => Ok(TraceClock { base_ns: base, offset_ns }),
            (None, Some(ts)) if ts > UNIX_US_THRESHOLD => Ok(TraceClock { base_ns: 0, offset_ns }),
            (None, Some(_)) => bail!(
                "the trace has no baseTimeNanoseconds and its timestamps are not UNIX time, so it cannot \
                 be aligned with the network capture (profile with a PyTorch that writes baseTimeNanoseconds)"
            ),
            (None, None) => Ok(TraceClock { base_ns: 0, offset_ns }),
        }
    }

    pub fn utc_ns(&self, ts_us: f64) -> i64 {
        // Whole and fractional microseconds apart: absolute UNIX µs times 1000 would exceed
        // f64's exact integer range and lose hundreds of nanoseconds.
        let whole = ts_us.trunc() as i64 * 1000;
        let frac = (ts_us.fract() * 1000.0).round() as i64;
        self.base_ns + whole + frac + self.offset_ns
    }
}

fn is_on_gpu(category: &str) -> bool {
    matches!(
        category,
        "kernel" | "gpu_memcpy" | "gpu_memset" | "Kernel" | "Memcpy" | "Memset"
    )
}

/// A row for a complete event; None for events without a duration (metadata, instants, flows).
pub fn event_row(
    e: TraceEvent,
    clock: &TraceClock,
    host: &str,
    rank: Option<i64>,
    source: &str,
) -> Option<GpuEventRow> {
    if e.ph != "X" {
        return None;
    }
    let (ts, dur) = (e.ts?, e.dur?);
    let args = e.args.unwrap_or_default();
    let on_gpu = is_on_gpu(&e.cat);
    let collective = on_gpu
        .then(|| kineto::nccl_collective(&e.name).map(str::to_string))
        .flatten();
    Some(GpuEventRow {
        host: host.to_string(),
        rank,
        ts: clock.utc_ns(ts),
        dur_ns: (dur * 1000.0).round() as i64,
        category: e.cat,
        name: e.name,
        on_gpu,
        collective,
        device: loose_int(&args.device),
        stream: loose_int(&args.stream),
        pid: loose_int(&e.pid),
        tid: loose_int(&e.tid),
        correlation: loose_int(&args.correlation),
        source: source.to_string(),
    })
}

fn import_one(path: &Path, args: &ImportArgs, host: &str) -> Result<(u64, PathBuf)> {
    let header = kineto::scan_header(path)?;
    let first_ts = match header.base_time_ns {
        None => kineto::first_event_ts(path)?,
        Some(_) => None,
    };
    let clock = TraceClock::for_trace(&header, first_ts, args.time_offset_ns)
        .with_context(|| path.display().to_string())?;
    let rank = header.rank.or(args.rank);
    let source = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = format!(
        "{host}-rank{}-{}",
        rank.map(|r| r.to_string()).unwrap_or_else(|| "none".into()),
        source.trim_end_matches(".gz").trim_end_matches(".json")
    );
    let metadata = vec![
        (
            "scaletrace.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        ("scaletrace.host".to_string(), host.to_string()),
        ("scaletrace.source".to_string(), path.display().to_string()),
        ("scaletrace.time_base".to_string(), "UTC ns".to_string()),
        (
            "scaletrace.clock.method".to_string(),
            "kineto: baseTimeNanoseconds + ts(us) * 1000 + time_offset_ns".to_string(),
        ),
        (
            "scaletrace.clock.base_ns".to_string(),
            clock.base_ns.to_string(),
        ),
        (
            "scaletrace.clock.offset_ns".to_string(),
            clock.offset_ns.to_string(),
        ),
    ];
    let mut writer = TableWriter::<GpuEventRow>::create(&args.out, &stem, &metadata)?;
    let parsed =
        kineto::for_each_event(path, |e| match event_row(e, &clock, host, rank, &source) {
            Some(row) => writer.push(row),
            None => Ok(()),
        });
    let rows = writer.rows();
    if let Err(e) = parsed {
        // Keep what was read: a valid file with the events before the error, marked incomplete.
        writer.append_metadata("scaletrace.import.incomplete", format!("{e:#}"));
        let kept = writer.close()?;
        return Err(e.context(format!(
            "{rows} events before the error were kept in {}",
            kept.display()
        )));
    }
    Ok((rows, writer.close()?))
}

pub fn run(args: ImportArgs) -> Result<()> {
    let host = args
        .host
        .clone()
        .unwrap_or_else(|| NodeIdentity::current().hostname);
    for path in &args.traces {
        let (rows, file) = import_one(path, &args, &host)?;
        eprintln!(
            "scaletrace: imported {rows} events from {} into {}",
            path.display(),
            file.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_from_base_time() {
        let h = TraceHeader {
            base_time_ns: Some(1_700_000_000_000_000_000),
            ..Default::default()
        };
        let c = TraceClock::for_trace(&h, None, 5).unwrap();
        // 12.345678 us after the base, plus the 5 ns offset
        assert_eq!(c.utc_ns(12.345678), 1_700_000_000_000_012_346 + 5);
    }

    #[test]
    fn clock_from_absolute_microseconds() {
        let c = TraceClock::for_trace(&TraceHeader::default(), Some(1.7e15), 0).unwrap();
        assert_eq!(c.utc_ns(1_700_000_000_000_000.5), 1_700_000_000_000_000_500);
    }

    #[test]
    fn relative_timestamps_without_base_are_rejected() {
        let err = TraceClock::for_trace(&TraceHeader::default(), Some(1234.0), 0).unwrap_err();
        assert!(err.to_string().contains("no baseTimeNanoseconds"));
    }

    #[test]
    fn rows_only_for_complete_events() {
        let clock = TraceClock {
            base_ns: 1_000_000,
            offset_ns: 0,
        };
        let kernel = TraceEvent {
            ph: "X".into(),
            cat: "kernel".into(),
            name: "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)".into(),
            ts: Some(2.0),
            dur: Some(1.5),
            tid: Some("stream 7".into()),
            ..Default::default()
        };
        let row = event_row(kernel, &clock, "h", Some(2), "t.json").unwrap();
        assert_eq!((row.ts, row.dur_ns), (1_002_000, 1_500));
        assert!(row.on_gpu);
        assert_eq!(row.collective.as_deref(), Some("ReduceScatter"));
        assert_eq!((row.tid, row.rank), (Some(7), Some(2)));
        let cpu = TraceEvent {
            ph: "X".into(),
            cat: "cpu_op".into(),
            name: "ncclDevKernel_x".into(),
            ts: Some(1.0),
            dur: Some(1.0),
            ..Default::default()
        };
        let row = event_row(cpu, &clock, "h", None, "t").unwrap();
        assert!(!row.on_gpu && row.collective.is_none());
        let meta = TraceEvent {
            ph: "M".into(),
            ..Default::default()
        };
        assert!(event_row(meta, &clock, "h", None, "t").is_none());
        let no_dur = TraceEvent {
            ph: "X".into(),
            ts: Some(1.0),
            ..Default::default()
        };
        assert!(event_row(no_dur, &clock, "h", None, "t").is_none());
    }
}
