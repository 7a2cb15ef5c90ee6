//! Every table scaletrace writes, each defined once (with `table!`), by the module that fills
//! it: a source's in its `tables.rs`, `capture` by the recorder's accounting, `interfaces`
//! beside the interface list, `gpu_events` by `import`; `windows` here. `docs/schema.md` is
//! generated from this catalog (`scaletrace schema`), and a test keeps the committed file in sync.
use crate::{
    columns::*,
    import::GpuEventRow,
    interfaces::InterfaceRow,
    record::accounting::CaptureRow,
    sources::{
        gpu::tables::*, nic::tables::*, probe_families, tcp::tables::*, verbs::tables::QpCounterRow,
    },
};

pub use crate::columns::TableInfo;

// Written by `merge` from the analysis's `st_window` view. Defined here, not in `merge` or
// `analyze`: the analysis reads this catalog, so either place would make them import each other.
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

/// Every table scaletrace writes, in documentation order.
/// (The probe families' tables come from their own definitions, `sources::probe_families`.)
pub fn catalog() -> Vec<TableInfo> {
    let mut tables = vec![
        TableInfo::of::<FlowRow>(),
        TableInfo::of::<FlowSnapshotRow>(),
        TableInfo::of::<RttRow>(),
        TableInfo::of::<FlowWindowRow>(),
        TableInfo::of::<RetransmitRow>(),
        TableInfo::of::<StateChangeRow>(),
        TableInfo::of::<CaptureRow>(),
        TableInfo::of::<NicCounterRow>(),
        TableInfo::of::<QpCounterRow>(),
        TableInfo::of::<InterfaceRow>(),
    ];
    tables.extend(probe_families().iter().flat_map(|f| f.tables()));
    tables.extend([
        TableInfo::of::<GpuDeviceRow>(),
        TableInfo::of::<GpuSampleRow>(),
        TableInfo::of::<GpuProcessRow>(),
        TableInfo::of::<GpuEventRow>(),
        TableInfo::of::<WindowRow>(),
    ]);
    tables
}
