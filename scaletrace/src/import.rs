//! `scaletrace import`: GPU/collective timelines (PyTorch profiler / Kineto Chrome traces) into
//! the `gpu_events` table, on the same UTC axis as the network capture.
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::Args;

use crate::columns::*;
use crate::{
    comms,
    kineto::{self, int_arg, loose_int, text_arg, TraceEvent, TraceHeader},
    node::NodeIdentity,
    parquet_sink::TableWriter,
    wording::{count, is_are},
};

table! {
    /// One complete ("X") event of an imported GPU/collective timeline.
    pub struct GpuEventRow in "gpu_events" {
        description: "Events imported by `scaletrace import` from PyTorch profiler (Kineto) Chrome \
        traces: GPU kernels, memcpy/memset, CPU ops and the rest of the complete (`ph: X`) events, \
        on the same UTC time axis as the network tables.",
        host: String => str_col("Host the trace came from (`--host`, default: this host)."),
        rank: Option<i64> => opt_i64_col("", "Distributed rank: `distributedInfo.rank` of the trace, or `--rank`."),
        ts: i64 => ts_col("Event start: `baseTimeNanoseconds + ts` of the trace (see Time)."),
        dur_ns: i64 => i64_col("ns", "Event duration."),
        category: String => str_col("Kineto `cat`: `kernel`, `gpu_memcpy`, `gpu_memset`, `cpu_op`, `cuda_runtime`, ..."),
        name: String => str_col("Kernel or operator name."),
        on_gpu: bool => bool_col("The event ran on the GPU (kernel, memcpy, memset)."),
        collective: Option<String> => opt_str_col("For communication events (see `comm_source`): the collective, `AllReduce`, `AllGather`, `ReduceScatter`, `AllToAll`, `Broadcast`, `Reduce`, `SendRecv`, `Send`, `Recv`, `Barrier`, `Gather`, `Scatter` or `Other`."),
        device: Option<i64> => opt_i64_col("", "GPU index (`args.device`)."),
        stream: Option<i64> => opt_i64_col("", "CUDA stream (`args.stream`)."),
        pid: Option<i64> => opt_i64_col("", "Trace `pid` (process, or GPU for device rows)."),
        tid: Option<i64> => opt_i64_col("", "Trace `tid` (thread, or stream for device rows)."),
        correlation: Option<i64> => opt_i64_col("", "Correlation id linking a kernel to the CUDA runtime call that launched it."),
        source: String => str_col("File the event was imported from."),
        time_aligned: bool => bool_col("`ts` is UTC. False when the trace lost its time base (`baseTimeNanoseconds` missing, e.g. a trace cut short) and its timestamps are relative: `ts` is then on the trace's own axis; import again with `--time-base` to align."),
        comm_source: Option<String> => opt_str_col("How the event was recognised as communication (null: it is not): `nccl_kernel` (NCCL/RCCL kernels), `comm_kernel` (other GPU kernels of communication libraries — DeepEP dispatch/combine, NVSHMEM, MSCCL++, userbuffers, custom all-reduce — or kernels whose name spells a collective), `c10d` (the CPU-side `c10d::<op>_` call of any backend), `backend` (the backend's annotation: `gloo:all_reduce`, `nccl:all_reduce`; for gloo it spans the transfer), `param_comms` (`record_param_comms`)."),
        process_group: Option<String> => opt_str_col("`Process Group Name` (with its description, e.g. `0 (default_pg)`) where the trace carries it."),
        group_size: Option<i64> => opt_i64_col("ranks", "`Group size` of the process group."),
        seq: Option<i64> => opt_i64_col("", "The process group's sequence number of the collective (`Seq`, newer PyTorch): the key that matches one collective across ranks."),
        msg_bytes: Option<i64> => opt_i64_col("bytes", "Message size: `In msg nelems` × the size of `dtype` (for bus bandwidth)."),
        dtype: Option<String> => opt_str_col("Element type of the message (`Float`, `BFloat16`, ...)."),
    }
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Chrome trace JSON files written by the PyTorch profiler (`.json` or `.json.gz`), or
    /// directories: every such file below them (subdirectories too) is imported, and JSON files
    /// there that are no trace (saved findings, settings) are skipped with a line saying so.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,

    /// Directory of the capture; events go to <OUT>/gpu_events/.
    #[arg(short, long, default_value = crate::layout::DEFAULT_DIR)]
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

    /// UTC nanoseconds of the trace's `ts` 0, for a trace that lost its `baseTimeNanoseconds`
    /// (Kineto writes it at the end, so a profiler killed mid-write loses it). Without it such
    /// events are kept on the trace's own axis with `time_aligned = false`.
    #[arg(long, value_name = "NS")]
    pub time_base: Option<i64>,
}

/// How a trace's `ts` becomes UTC ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceClock {
    pub base_ns: i64,
    pub offset_ns: i64,
    /// False when the trace's timestamps are relative and no base is known.
    pub aligned: bool,
}

/// Timestamps above this (in ns on the trace's axis) are absolute UNIX time (after 2001-09-09).
const UNIX_NS_THRESHOLD: i64 = 1_000_000_000_000_000_000;

impl TraceClock {
    /// Kineto writes `ts` relative to `baseTimeNanoseconds` (UNIX epoch); older traces carry
    /// absolute UNIX microseconds. A trace with neither (cut before its base) is kept unaligned
    /// unless `time_base` says where its zero is.
    pub fn for_trace(
        header: &TraceHeader,
        first_ts_ns: Option<i64>,
        offset_ns: i64,
        time_base: Option<i64>,
    ) -> Result<Self> {
        let clock = |base_ns, aligned| TraceClock {
            base_ns,
            offset_ns,
            aligned,
        };
        if let Some(base) = time_base {
            crate::trace_time::check_utc(base, "--time-base")?;
        }
        Ok(match (header.base_time_ns.or(time_base), first_ts_ns) {
            (Some(base), _) => clock(base, true),
            (None, Some(ts)) if ts > UNIX_NS_THRESHOLD => clock(0, true),
            (None, Some(_)) => clock(0, false),
            (None, None) => clock(0, true),
        })
    }

    pub fn utc_ns(&self, ts_ns: i64) -> Option<i64> {
        self.base_ns.checked_add(ts_ns)?.checked_add(self.offset_ns)
    }
}

fn is_on_gpu(category: &str) -> bool {
    matches!(
        category,
        "kernel" | "gpu_memcpy" | "gpu_memset" | "Kernel" | "Memcpy" | "Memset"
    )
}

/// A row for a complete event; None for events without a duration (metadata, instants, flows).
/// Timestamps that cannot be trace times and negative durations are errors.
pub fn event_row(
    e: TraceEvent,
    clock: &TraceClock,
    host: &str,
    rank: Option<i64>,
    source: &str,
) -> Result<Option<GpuEventRow>> {
    if e.ph != "X" {
        return Ok(None);
    }
    let (Some(ts), Some(dur)) = (e.ts_ns()?, e.dur_ns()?) else {
        return Ok(None);
    };
    if dur < 0 {
        bail!("event {:?} has a negative duration ({dur} ns)", e.name);
    }
    let utc = clock
        .utc_ns(ts)
        .ok_or_else(|| anyhow!("event {:?}: ts out of range", e.name))?;
    if clock.aligned {
        crate::trace_time::check_utc(utc, &format!("the start of event {:?}", e.name))?;
    }
    let args = e.args.unwrap_or_default();
    let on_gpu = is_on_gpu(&e.cat);
    let collective_arg = text_arg(&args.collective_name);
    let comm = comms::classify(on_gpu, &e.name, collective_arg.as_deref());
    let dtype = text_arg(&args.dtype);
    let nelems = int_arg(&args.in_msg_nelems).or_else(|| int_arg(&args.out_msg_nelems));
    let msg_bytes = nelems
        .zip(dtype.as_deref().and_then(comms::dtype_bytes))
        .and_then(|(n, size)| n.checked_mul(size));
    let process_group =
        text_arg(&args.process_group).map(|name| match text_arg(&args.process_group_desc) {
            Some(desc) => format!("{name} ({desc})"),
            None => name,
        });
    Ok(Some(GpuEventRow {
        host: host.to_string(),
        rank,
        ts: utc,
        dur_ns: dur,
        category: e.cat,
        name: e.name,
        on_gpu,
        collective: comm.map(|c| c.collective.to_string()),
        device: loose_int(&args.device),
        stream: loose_int(&args.stream),
        pid: loose_int(&e.pid),
        tid: loose_int(&e.tid),
        correlation: loose_int(&args.correlation),
        source: source.to_string(),
        time_aligned: clock.aligned,
        comm_source: comm.map(|c| c.source.to_string()),
        process_group,
        group_size: int_arg(&args.group_size),
        seq: int_arg(&args.seq),
        msg_bytes,
        dtype,
    }))
}

/// FNV-1a of the trace's absolute path: two inputs with the same file name (`a/trace.json`,
/// `b/trace.json`) get different output files, and importing the same file again replaces its
/// earlier import instead of adding a copy.
fn path_tag(path: &Path) -> String {
    let absolute = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let hash = absolute
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    format!("{:08x}", hash >> 32)
}

fn report_import(path: &Path, done: &Imported) -> Result<()> {
    eprintln!(
        "scaletrace: imported {} events from {} into {}",
        done.rows,
        path.display(),
        done.file.display()
    );
    if !done.aligned {
        eprintln!(
            "scaletrace: warning: {} has relative timestamps and no baseTimeNanoseconds: its events are on \
             the trace's own axis (time_aligned = false) and are left out of the analysis; \
             import it again with --time-base NS to align it",
            path.display()
        );
    }
    Ok(())
}

/// What one import produced.
struct Imported {
    rows: u64,
    file: PathBuf,
    aligned: bool,
}

/// A file to import, and whether it was found by searching a directory (a file named on the
/// command line was asked for by name, and one that is no trace is an error).
struct TraceFile {
    path: PathBuf,
    found: bool,
}

/// The traces the arguments name: each file as given, and for each directory every `.json`
/// and `.json.gz` file below it, in name order (as `analyze`, `merge` and `sql` search
/// directories, links followed). A directory was refused, with a hint
/// (`DIR/*.json`) that matched nothing where the traces sit in subdirectories or are gzipped.
fn trace_files(given: &[PathBuf]) -> Result<Vec<TraceFile>> {
    let mut files = Vec::new();
    for path in given {
        if !path.is_dir() {
            files.push(TraceFile {
                path: path.clone(),
                found: false,
            });
            continue;
        }
        let before = files.len();
        for entry in walkdir::WalkDir::new(path)
            .follow_links(true)
            .sort_by_file_name()
        {
            let entry = entry.with_context(|| format!("searching {}", path.display()))?;
            let name = entry.file_name().to_string_lossy();
            if entry.file_type().is_file()
                && (name.ends_with(".json") || name.ends_with(".json.gz"))
            {
                files.push(TraceFile {
                    path: entry.into_path(),
                    found: true,
                });
            }
        }
        if files.len() == before {
            bail!(
                "{} holds no trace (.json or .json.gz file), in it or below",
                path.display()
            );
        }
    }
    Ok(files)
}

fn import_one(path: &Path, args: &ImportArgs, host: &str) -> Result<Imported> {
    let scan = kineto::scan_header(path)?;
    if let Some(damage) = &scan.damage {
        // The event pass meets the same fault and reports it (as an error, or with the events it
        // kept): this line is for debugging only.
        log::debug!("{damage:#}; importing the events before it");
    }
    let header = scan.header;
    let first_ts = match header.base_time_ns {
        // A file damaged before its first event has no first timestamp.
        None => kineto::first_event_ts(path).ok().flatten(),
        Some(_) => None,
    };
    if header.base_time_ns.is_some() && args.time_base.is_some() {
        bail!(
            "{}: the trace has its own baseTimeNanoseconds; --time-base is for traces that lost it",
            path.display()
        );
    }
    let clock = TraceClock::for_trace(&header, first_ts, args.time_offset_ns, args.time_base)
        .with_context(|| path.display().to_string())?;
    let rank = header.rank.or(args.rank);
    let source = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = format!(
        "{host}-rank{}-{}-{}",
        rank.map(|r| r.to_string()).unwrap_or_else(|| "none".into()),
        source.trim_end_matches(".gz").trim_end_matches(".json"),
        path_tag(path)
    );
    let metadata = vec![
        (
            "scaletrace.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        ("scaletrace.host".to_string(), host.to_string()),
        ("scaletrace.source".to_string(), path.display().to_string()),
        (
            "scaletrace.time_base".to_string(),
            if clock.aligned { "UTC ns" } else { "trace ns (unaligned)" }.to_string(),
        ),
        (
            "scaletrace.clock.method".to_string(),
            "kineto: baseTimeNanoseconds (or --time-base) + ts(us, exact decimal) * 1000 + time_offset_ns"
                .to_string(),
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
        kineto::for_each_event(path, |e| match event_row(e, &clock, host, rank, &source)? {
            Some(row) => writer.push(row),
            None => Ok(()),
        });
    let rows = writer.rows();
    if let Err(e) = parsed {
        if rows == 0 {
            // Nothing to keep: an empty file would tell `analyze` this rank has a timeline.
            writer.abandon();
            return Err(e.context("no event could be imported"));
        }
        // Keep what was read: a valid file with the events before the error, marked incomplete.
        writer.append_metadata("scaletrace.import.incomplete", format!("{e:#}"));
        let kept = writer.close()?;
        let alignment = if clock.aligned {
            ""
        } else {
            " (on the trace's own time axis: its time base was lost; import again with --time-base NS to align)"
        };
        return Err(e.context(format!(
            "{rows} events before the error were kept in {}{alignment}",
            kept.display()
        )));
    }
    if rows == 0 {
        // An empty file would tell `analyze` this rank has a timeline with nothing in it.
        writer.abandon();
        bail!("{}: the trace holds no event to import", path.display());
    }
    Ok(Imported {
        rows,
        file: writer.close()?,
        aligned: clock.aligned,
    })
}

pub fn run(args: ImportArgs) -> Result<()> {
    let host = args
        .host
        .clone()
        .unwrap_or_else(|| NodeIdentity::current().hostname);
    let traces = trace_files(&args.traces)?;
    // once, not as each trace's own failure (created when the first trace has been read)
    crate::atomic_file::check_output_dir("--out", &args.out)?;
    // Every input is imported even when one fails: one damaged rank must not cost the others.
    if let [only] = traces.as_slice() {
        if !only.found {
            let done = import_one(&only.path, &args, &host)?;
            return report_import(&only.path, &done);
        }
    }
    // damaged traces; files named on the command line that are no trace; such files found
    // in a directory (saved findings beside the traces), skipped
    let (mut failed, mut named_not_traces, mut skipped) = (0, 0, 0);
    for trace in &traces {
        match import_one(&trace.path, &args, &host) {
            Ok(done) => report_import(&trace.path, &done)?,
            Err(e) if e.downcast_ref::<kineto::NotATrace>().is_some() => {
                if trace.found {
                    skipped += 1;
                    eprintln!("scaletrace: skipped {e:#}");
                } else {
                    named_not_traces += 1;
                    eprintln!("scaletrace: error: {e:#}");
                }
            }
            Err(e) => {
                failed += 1;
                eprintln!("scaletrace: error: {e:#}");
            }
        }
    }
    let tried = traces.len() - skipped - named_not_traces;
    if tried == 0 && named_not_traces == 0 {
        bail!(
            "none of the {} found is a profiler trace",
            count(skipped, "JSON file")
        );
    }
    let mut problems = Vec::new();
    if failed > 0 {
        problems.push(format!(
            "{failed} of {} could not be imported completely",
            count(tried, "trace")
        ));
    }
    if named_not_traces > 0 {
        problems.push(format!(
            "{} named {} no profiler trace",
            count(named_not_traces, "file"),
            is_are(named_not_traces)
        ));
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    fn raw(text: &str) -> Option<Box<RawValue>> {
        Some(RawValue::from_string(text.to_string()).unwrap())
    }

    fn event(ph: &str, cat: &str, name: &str, ts: &str, dur: &str) -> TraceEvent {
        TraceEvent {
            ph: ph.into(),
            cat: cat.into(),
            name: name.into(),
            ts: raw(ts),
            dur: raw(dur),
            ..Default::default()
        }
    }

    const BASE: i64 = 1_700_000_000_000_000_000;

    #[test]
    fn clock_from_base_time() {
        let h = TraceHeader {
            base_time_ns: Some(BASE),
            ..Default::default()
        };
        let c = TraceClock::for_trace(&h, None, 5, None).unwrap();
        assert!(c.aligned);
        assert_eq!(c.utc_ns(12_346), Some(BASE + 12_346 + 5));
    }

    #[test]
    fn clock_from_absolute_microseconds() {
        let c = TraceClock::for_trace(&TraceHeader::default(), Some(BASE), 0, None).unwrap();
        assert_eq!((c.base_ns, c.aligned), (0, true));
    }

    #[test]
    fn relative_timestamps_without_base_are_kept_unaligned_or_aligned_by_the_given_base() {
        let c = TraceClock::for_trace(&TraceHeader::default(), Some(1_234_000), 0, None).unwrap();
        assert!(!c.aligned);
        let c =
            TraceClock::for_trace(&TraceHeader::default(), Some(1_234_000), 0, Some(BASE)).unwrap();
        assert_eq!((c.base_ns, c.aligned), (BASE, true));
        assert!(TraceClock::for_trace(&TraceHeader::default(), None, 0, Some(42)).is_err());
    }

    #[test]
    fn rows_only_for_complete_events() {
        let clock = TraceClock {
            base_ns: BASE,
            offset_ns: 0,
            aligned: true,
        };
        let mut kernel = event(
            "X",
            "kernel",
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)",
            "2.0",
            "1.5",
        );
        kernel.tid = Some("stream 7".into());
        let row = event_row(kernel, &clock, "h", Some(2), "t.json")
            .unwrap()
            .unwrap();
        assert_eq!((row.ts, row.dur_ns), (BASE + 2_000, 1_500));
        assert!(row.on_gpu && row.time_aligned);
        assert_eq!(row.collective.as_deref(), Some("ReduceScatter"));
        assert_eq!(row.comm_source.as_deref(), Some("nccl_kernel"));
        assert_eq!((row.tid, row.rank), (Some(7), Some(2)));
        let cpu = event("X", "cpu_op", "ncclDevKernel_x", "1.0", "1.0");
        let row = event_row(cpu, &clock, "h", None, "t").unwrap().unwrap();
        assert!(!row.on_gpu && row.collective.is_none());
        let meta = event("M", "", "", "1", "1");
        assert!(event_row(meta, &clock, "h", None, "t").unwrap().is_none());
        let mut no_dur = event("X", "", "", "1.0", "1");
        no_dur.dur = None;
        assert!(event_row(no_dur, &clock, "h", None, "t").unwrap().is_none());
    }

    #[test]
    fn cpu_collectives_carry_group_size_and_bytes() {
        let clock = TraceClock {
            base_ns: BASE,
            offset_ns: 0,
            aligned: true,
        };
        let mut e = event("X", "cpu_op", "record_param_comms", "10", "5");
        e.args = Some(
            serde_json::from_str(
                r#"{"Collective name": "allreduce", "Process Group Name": "0",
                    "Process Group Description": "default_pg", "Group size": 2,
                    "In msg nelems": 2049000, "Out msg nelems": 2049000, "dtype": "Float", "Seq": 17}"#,
            )
            .unwrap(),
        );
        let row = event_row(e, &clock, "h", Some(0), "t").unwrap().unwrap();
        assert_eq!(row.collective.as_deref(), Some("AllReduce"));
        assert_eq!(row.comm_source.as_deref(), Some("param_comms"));
        assert_eq!(row.process_group.as_deref(), Some("0 (default_pg)"));
        assert_eq!(
            (row.group_size, row.seq, row.msg_bytes),
            (Some(2), Some(17), Some(8_196_000))
        );
        let gloo = event("X", "user_annotation", "gloo:all_reduce", "10", "5");
        let row = event_row(gloo, &clock, "h", Some(0), "t").unwrap().unwrap();
        assert_eq!(
            (row.collective.as_deref(), row.comm_source.as_deref()),
            (Some("AllReduce"), Some("backend"))
        );
    }

    #[test]
    fn nonsense_times_and_durations_are_refused() {
        let absolute = TraceClock {
            base_ns: 0,
            offset_ns: 0,
            aligned: true,
        };
        // ts 1e17 µs: far outside any trace time.
        let far = event("X", "cpu_op", "x", "1e17", "1");
        let msg = format!(
            "{:#}",
            event_row(far, &absolute, "h", None, "t").unwrap_err()
        );
        assert!(msg.contains("outside 2000..2100"), "{msg}");
        let year_5138 = event("X", "cpu_op", "x", "99999999999999999", "1");
        let msg = format!(
            "{:#}",
            event_row(year_5138, &absolute, "h", None, "t").unwrap_err()
        );
        assert!(msg.contains("outside 2000..2100"), "{msg}");
        let negative = event("X", "cpu_op", "x", "1700000000000000", "-3");
        let msg = format!(
            "{:#}",
            event_row(negative, &absolute, "h", None, "t").unwrap_err()
        );
        assert!(msg.contains("negative duration"), "{msg}");
    }

    #[test]
    fn same_file_name_in_two_directories_gets_two_tags() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            dir.path().join("a/trace.json"),
            dir.path().join("b/trace.json"),
        );
        assert_ne!(path_tag(&a), path_tag(&b));
        assert_eq!(path_tag(&a), path_tag(&a));
    }
}
