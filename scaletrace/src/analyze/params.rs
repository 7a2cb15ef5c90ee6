//! The thresholds of the diagnoses, as one DuckDB view (`st_params`) the queries join, so a
//! notebook can change them with one `CREATE OR REPLACE VIEW`.
use anyhow::{bail, Result};

/// (name, default, meaning)
const DEFAULTS: [(&str, f64, &str); 36] = [
    (
        "degraded_rtt_inflation",
        2.0,
        "a flow window is degraded when its median RTT is this many times the flow's base RTT",
    ),
    (
        "min_window_activity",
        0.25,
        "... judged on RTT only when it holds this share of the flow's usual RTT samples per window",
    ),
    (
        "collapse_throughput_ratio",
        0.5,
        "... or when its throughput falls below this share of the flow's median",
    ),
    (
        "min_retransmits",
        20.0,
        "retransmit hot spots need at least this many retransmits (RDMA: sequence errors and retries)",
    ),
    (
        "min_retrans_ratio",
        0.001,
        "... and this share of data segments (RDMA: of packets) (or a throughput collapse with them)",
    ),
    (
        "burst_min_retransmits",
        20.0,
        "a loss burst is a window with at least this many retransmits on a host",
    ),
    (
        "burst_peak_ratio",
        10.0,
        "... and this many times the host's mean window (+1)",
    ),
    (
        "min_rtt_samples",
        20.0,
        "flows with fewer RTT samples are not judged on latency",
    ),
    (
        "tail_outlier_ratio",
        3.0,
        "a flow's RTT p99 this many times the fleet median p99 is an outlier",
    ),
    (
        "min_together_windows",
        3.0,
        "flows sharing a NIC or peer must degrade together in this many windows",
    ),
    (
        "min_spread_us",
        1000.0,
        "collective steps whose arrival spread is below this (µs) are in sync",
    ),
    (
        "min_spread_fraction",
        0.1,
        "... or below this share of the median step",
    ),
    (
        "min_straggler_steps",
        3.0,
        "a straggler arrives last (and late) in at least this many steps",
    ),
    (
        "min_straggler_share",
        0.25,
        "... and in this share of all steps (at least 2/ranks)",
    ),
    (
        "sync_wait_fraction",
        0.3,
        "a collective amplifies when its fastest rank waits this share of each step",
    ),
    (
        "idle_collective_fraction",
        0.5,
        "a GPU window is waiting on collectives when they fill this share of it",
    ),
    (
        "idle_compute_fraction",
        0.25,
        "... and other kernels fill at most this share",
    ),
    (
        "min_queueing_us",
        200.0,
        "queueing: a flow's median RTT must exceed its base RTT by at least this (µs) ...",
    ),
    (
        "queueing_vs_fleet",
        3.0,
        "... and by this many times the fleet's usual queueing (median over the flows)",
    ),
    (
        "min_flow_bytes",
        1048576.0,
        "flows that moved fewer bytes (control connections) are not judged on latency",
    ),
    (
        "min_flow_bps",
        1e6,
        "a throughput collapse counts only for flows whose median rate is at least this (bit/s)",
    ),
    (
        "min_excess_us",
        5000.0,
        "a collective step is slow when it took this much (µs) longer than its healthy duration ...",
    ),
    (
        "min_excess_fraction",
        0.5,
        "... and this share of the healthy duration longer",
    ),
    (
        "min_occurrences",
        5.0,
        "a healthy duration needs the operation at least this many times",
    ),
    (
        "min_step_retransmits",
        1.0,
        "a slow step is blamed on the network with at least this many retransmits during it",
    ),
    (
        "min_spurious_share",
        0.5,
        "... and called reordering or jitter, not loss, when the receivers already had this share of the segments resent on its links (DSACK)",
    ),
    (
        "min_step_queued_samples",
        3.0,
        "... else on queueing with this many RTT samples queued above the fleet's usual on one node",
    ),
    (
        "queueing_contrast",
        2.0,
        "... and its links queued this many times as often as the other flows while it lasted",
    ),
    (
        "min_persistent_share",
        0.5,
        "a slow link from the first step: the most queued node in this share of all collective steps and of the queued ones",
    ),
    (
        "min_healthy_iterations",
        5.0,
        "time lost is priced against the healthy step time when this many iterations are healthy ...",
    ),
    (
        "min_healthy_share",
        0.2,
        "... and this share of all (else it is the evidence's own duration)",
    ),
    (
        "quiet_slower_z",
        2.33,
        "steps without evidence between a culprit's first and last are charged to it when slower than the healthy ones by a rank-sum test at this z (2.33: one-sided 1 %)",
    ),
    (
        "min_culprit_steps",
        3.0,
        "a culprit must have slowed at least this many steps",
    ),
    (
        "min_lost_s",
        0.2,
        "... cost the job at least this many seconds",
    ),
    (
        "min_lost_fraction",
        0.05,
        "... and this share of the traced time",
    ),
    (
        "min_idle_windows",
        2.0,
        "ranks waiting on collectives in fewer windows are not reported",
    ),
];

#[derive(Debug, Clone)]
pub struct Params {
    pub window_us: i64,
    values: Vec<(&'static str, f64)>,
}

/// The longest analysis window: a day. A window is a row per host (and rank) in every per-window
/// view; one longer than any capture makes each of them one row, and at 10,000,000 h its
/// nanoseconds overflowed the views' 64-bit integers (a DuckDB error instead of this line).
const LONGEST_WINDOW: std::time::Duration = std::time::Duration::from_secs(86_400);

/// `--window` of `analyze`, `sql` and `merge`: 1ms to 1d.
pub fn parse_window(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    check_window(d)?;
    Ok(d)
}

/// The window's bounds, for the command line (`parse_window`) and for callers that build
/// `Params` from a duration. The message does not repeat the value: clap's own line names it.
fn check_window(d: std::time::Duration) -> Result<(), String> {
    if d < std::time::Duration::from_millis(1) || d > LONGEST_WINDOW {
        return Err("a window is from 1ms to 1d".into());
    }
    Ok(())
}

impl Params {
    /// Defaults, the window, and `name=value` overrides.
    pub fn new(window: std::time::Duration, overrides: &[String]) -> Result<Self> {
        if let Err(e) = check_window(window) {
            bail!("--window {}: {e}", humantime::format_duration(window));
        }
        let window_us = window.as_micros() as i64;
        let mut values: Vec<(&'static str, f64)> =
            DEFAULTS.iter().map(|(n, v, _)| (*n, *v)).collect();
        for o in overrides {
            let Some((name, value)) = o.split_once('=') else {
                bail!("--set {o}: expected NAME=VALUE");
            };
            // 1e400 parses as infinity: a threshold must be a finite number
            let Some(value) = value.trim().parse::<f64>().ok().filter(|v| v.is_finite()) else {
                bail!("--set {o}: {value} is not a finite number");
            };
            // every threshold is a count, a duration, a ratio or a share: a negative one would
            // silently let everything through
            if value < 0.0 {
                bail!("--set {o}: a threshold cannot be negative");
            }
            match values.iter_mut().find(|(n, _)| *n == name.trim()) {
                Some(slot) => slot.1 = value,
                None => bail!(
                    "--set {o}: unknown threshold; known: {}",
                    DEFAULTS.map(|d| d.0).join(", ")
                ),
            }
        }
        Ok(Params { window_us, values })
    }

    pub fn sql(&self) -> String {
        let mut out = String::from("-- Thresholds (scaletrace analyze --set NAME=VALUE)\n");
        out.push_str(&format!(
            "CREATE OR REPLACE VIEW st_params AS SELECT\n    {}::BIGINT AS window_us,\n",
            self.window_us
        ));
        let last = self.values.len() - 1;
        for (i, ((name, value), (_, _, doc))) in self.values.iter().zip(DEFAULTS.iter()).enumerate()
        {
            let end = if i == last { ";" } else { "," };
            out.push_str(&format!("    {value:?}::DOUBLE AS {name}{end} -- {doc}\n"));
        }
        out
    }

    /// Help text listing every threshold.
    pub fn help() -> String {
        DEFAULTS
            .iter()
            .map(|(n, v, d)| format!("  {n} = {v}: {d}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn overrides_and_errors() {
        let p = Params::new(Duration::from_millis(500), &["min_retransmits=5".into()]).unwrap();
        let sql = p.sql();
        assert!(sql.contains("500000::BIGINT AS window_us"));
        assert!(sql.contains("5.0::DOUBLE AS min_retransmits"));
        assert!(sql.contains("2.0::DOUBLE AS degraded_rtt_inflation"));
        let e = Params::new(Duration::from_secs(1), &["nope=1".into()]).unwrap_err();
        assert!(e.to_string().contains("unknown threshold"), "{e}");
        for bad in ["x", "nan", "inf", "-inf", "1e400", ""] {
            let e = Params::new(Duration::from_secs(1), &[format!("min_retransmits={bad}")])
                .unwrap_err();
            assert!(e.to_string().contains("not a finite number"), "{bad}: {e}");
        }
        let e = Params::new(Duration::from_secs(1), &["min_lost_s=-1".into()]).unwrap_err();
        assert!(e.to_string().contains("cannot be negative"), "{e}");
        assert!(DEFAULTS.iter().all(|(_, v, _)| *v >= 0.0));
        assert!(Params::new(Duration::from_micros(10), &[]).is_err());
    }
}
