//! Health of a running agent, rewritten every few seconds: `status.json` for people and
//! scripts, and `scaletrace.prom` in the Prometheus text format for node_exporter's textfile
//! collector. Both are replaced atomically.
use std::{path::Path, sync::atomic::Ordering};

use anyhow::Result;
use serde::Serialize;

use super::spool::SpoolStats;
use crate::atomic_file::write_atomically;

#[derive(Debug, Serialize, Default)]
pub struct Health {
    pub host: String,
    pub run_id: String,
    pub updated_utc: String,
    /// false in the files the agent writes as it stops: they stay behind, and node_exporter
    /// goes on exporting the last ones.
    pub running: bool,
    pub uptime_s: f64,
    pub events_total: u64,
    pub events_per_s: f64,
    pub ring_drops_total: u64,
    /// Connections not tracked because the kernel flow table was full (`--max-flows`).
    pub flows_untracked_total: u64,
    /// Rows dropped because the spool's disk was full.
    pub rows_lost_disk_full_total: u64,
    /// GPU samples the sampler dropped because the recorder had fallen behind.
    pub gpu_samples_dropped_total: u64,
    pub decode_errors_total: u64,
    pub flows_total: u64,
    pub rtt_samples_total: u64,
    pub retransmits_total: u64,
    pub files_completed_total: u64,
    pub rotations_total: u64,
    pub leftovers_removed: u64,
    pub spool_files: u64,
    pub spool_bytes: u64,
    pub upload_target: Option<String>,
    pub uploaded_files_total: u64,
    pub uploaded_bytes_total: u64,
    pub upload_failures_total: u64,
    pub evicted_files_total: u64,
    pub last_upload_utc: Option<String>,
    pub last_upload_error: Option<String>,
    /// `last_upload_utc` as UNIX ns (0: none), for the Prometheus gauge.
    #[serde(skip)]
    pub last_upload_ns: u64,
}

/// A label value escaped as the text format requires: backslash, double quote and line feed.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// UTC text of a UNIX time in ns, as in status.json.
pub fn utc_text(ns: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns)
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

impl Health {
    /// The recorder's totals so far (or the run's, at its end).
    pub fn set_totals(&mut self, t: &crate::record::RunTotals) {
        self.events_total = t.events;
        self.decode_errors_total = t.decode_errors;
        self.ring_drops_total = t.ring_drops;
        self.flows_untracked_total = t.untracked_flows;
        self.rows_lost_disk_full_total = t.rows_lost_disk_full;
        self.flows_total = t.flows;
        self.rtt_samples_total = t.rtt_samples;
        self.retransmits_total = t.retransmits;
        self.files_completed_total = t.files_closed;
    }

    pub fn add_spool(&mut self, s: &SpoolStats) {
        self.spool_files = s.spool_files.load(Ordering::Relaxed);
        self.spool_bytes = s.spool_bytes.load(Ordering::Relaxed);
        self.uploaded_files_total = s.uploaded_files.load(Ordering::Relaxed);
        self.uploaded_bytes_total = s.uploaded_bytes.load(Ordering::Relaxed);
        self.upload_failures_total = s.upload_failures.load(Ordering::Relaxed);
        self.evicted_files_total = s.evicted_files.load(Ordering::Relaxed);
        self.last_upload_ns = s.last_upload_ns.load(Ordering::Relaxed);
        self.last_upload_utc =
            (self.last_upload_ns > 0).then(|| utc_text(self.last_upload_ns as i64));
        self.last_upload_error = s.last_error.lock().unwrap().clone();
    }

    /// Prometheus text exposition (format 0.0.4): counters end in `_total`, the rest are
    /// gauges. Written here rather than with a metrics crate: node_exporter's textfile collector
    /// reads only this format (OpenMetrics, all that `prometheus-client` writes, is rejected
    /// there: node_exporter#1988), and these values are totals the recorder keeps, set each
    /// period, where a registry's counters only count up.
    pub fn prometheus(&self) -> String {
        let labels = format!("host=\"{}\"", label_value(&self.host));
        let metrics: [(&str, &str, f64, &str); 20] = [
            (
                "scaletrace_running",
                "gauge",
                f64::from(u8::from(self.running)),
                "1 while the agent records; 0 in the files it leaves when it stops.",
            ),
            (
                "scaletrace_uptime_seconds",
                "gauge",
                self.uptime_s,
                "Seconds since the agent started.",
            ),
            (
                "scaletrace_events_total",
                "counter",
                self.events_total as f64,
                "Events read from the ring buffer.",
            ),
            (
                "scaletrace_events_per_second",
                "gauge",
                self.events_per_s,
                "Events per second over the last status period.",
            ),
            (
                "scaletrace_ring_drops_total",
                "counter",
                self.ring_drops_total as f64,
                "Events lost because the ring buffer was full.",
            ),
            (
                "scaletrace_flows_untracked_total",
                "counter",
                self.flows_untracked_total as f64,
                "Connections not tracked because the kernel flow table was full (raise --max-flows).",
            ),
            (
                "scaletrace_rows_lost_disk_full_total",
                "counter",
                self.rows_lost_disk_full_total as f64,
                "Rows dropped because the spool's disk was full.",
            ),
            (
                "scaletrace_gpu_samples_dropped_total",
                "counter",
                self.gpu_samples_dropped_total as f64,
                "GPU samples dropped because the recorder had fallen behind.",
            ),
            (
                "scaletrace_decode_errors_total",
                "counter",
                self.decode_errors_total as f64,
                "Ring buffer records that could not be decoded.",
            ),
            (
                "scaletrace_flows_total",
                "counter",
                self.flows_total as f64,
                "Rows written to flows.",
            ),
            (
                "scaletrace_rtt_samples_total",
                "counter",
                self.rtt_samples_total as f64,
                "Rows written to rtt.",
            ),
            (
                "scaletrace_retransmits_total",
                "counter",
                self.retransmits_total as f64,
                "Rows written to retransmits.",
            ),
            (
                "scaletrace_files_completed_total",
                "counter",
                self.files_completed_total as f64,
                "Parquet files completed (renamed into place).",
            ),
            (
                "scaletrace_rotations_total",
                "counter",
                self.rotations_total as f64,
                "File rotations.",
            ),
            (
                "scaletrace_spool_files",
                "gauge",
                self.spool_files as f64,
                "Completed files waiting in the local spool.",
            ),
            (
                "scaletrace_spool_bytes",
                "gauge",
                self.spool_bytes as f64,
                "Bytes of those files.",
            ),
            (
                "scaletrace_uploaded_files_total",
                "counter",
                self.uploaded_files_total as f64,
                "Files uploaded and confirmed.",
            ),
            (
                "scaletrace_upload_failures_total",
                "counter",
                self.upload_failures_total as f64,
                "Failed upload attempts.",
            ),
            (
                "scaletrace_evicted_files_total",
                "counter",
                self.evicted_files_total as f64,
                "Files deleted unsent to keep the spool within its limits.",
            ),
            (
                "scaletrace_last_upload_timestamp_seconds",
                "gauge",
                self.last_upload_ns as f64 / 1e9,
                "UNIX time of the last confirmed upload (0: none).",
            ),
        ];
        let mut out = String::new();
        for (name, kind, value, help) in metrics {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {value}\n"
            ));
        }
        out
    }

    pub fn write(&self, dir: &Path) -> Result<()> {
        write_atomically(&dir.join("status.json"), &serde_json::to_vec_pretty(self)?)?;
        write_atomically(&dir.join("scaletrace.prom"), self.prometheus().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_help_type_and_labelled_samples() {
        let h = Health {
            host: "n1".into(),
            events_total: 42,
            last_upload_utc: Some("2026-12-02T22:00:00.000Z".into()),
            last_upload_ns: 1_796_248_800_000_000_000,
            ..Default::default()
        };
        let text = h.prometheus();
        assert!(text.contains(
            "# TYPE scaletrace_events_total counter\nscaletrace_events_total{host=\"n1\"} 42\n"
        ));
        assert!(text.contains("scaletrace_last_upload_timestamp_seconds{host=\"n1\"} 1796248800\n"));
        assert_eq!(text.matches("# HELP").count(), 20);
        assert!(text.contains("scaletrace_flows_untracked_total{host=\"n1\"} 0\n"));
        // a hostname is the kernel's to set: any byte but NUL may be in it
        let odd = Health {
            host: "a\"b\\c\nd".into(),
            ..Default::default()
        };
        assert!(odd
            .prometheus()
            .contains("scaletrace_events_total{host=\"a\\\"b\\\\c\\nd\"} 0\n"));
        let d = tempfile::tempdir().unwrap();
        h.write(d.path()).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path().join("status.json")).unwrap()).unwrap();
        assert_eq!(v["events_total"], 42);
        assert!(d.path().join("scaletrace.prom").exists());
    }
}
