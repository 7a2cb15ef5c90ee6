//! The agent's housekeeping of a recording (`record::Housekeeping`): rotation of every file,
//! the spool worker, and periodic health files.
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::Result;

use super::{
    health::{utc_text, Health},
    spool::{self, Spool, SpoolStats},
    AgentRun, AgentSettings,
};
use crate::{
    clock::now_ns,
    hooks::Hooks,
    record::{Housekeeping, KernelCounters, KernelTables, RunTotals, Session, Sinks},
};

const HEALTH_EVERY: Duration = Duration::from_secs(2);
/// Room made on a full disk at least: the next interval's files must fit.
const MIN_FREE_BYTES: u64 = 1 << 20;

/// How often this host's own files may be deleted while its disk stays full: at once the first
/// time, then after 1 s, 2 s, 4 s ... up to a minute, until an interval is written whole again.
/// Deleting at every tick (up to 20 times a second) emptied the spool of data that space freed
/// elsewhere (an upload, an operator) would have saved.
#[derive(Debug)]
struct EvictionPace {
    next: Option<Instant>,
    wait: Duration,
}

impl EvictionPace {
    const FIRST_WAIT: Duration = Duration::from_secs(1);
    const MAX_WAIT: Duration = Duration::from_secs(60);

    fn new() -> Self {
        EvictionPace {
            next: None,
            wait: Self::FIRST_WAIT,
        }
    }

    /// Whether an eviction may run now; if so, the next one waits twice as long.
    fn due(&mut self, now: Instant) -> bool {
        if self.next.is_some_and(|t| now < t) {
            return false;
        }
        self.next = Some(now + self.wait);
        self.wait = (self.wait * 2).min(Self::MAX_WAIT);
        true
    }
}

pub struct Service {
    eviction: EvictionPace,
    settings: AgentSettings,
    spool: Spool,
    started: Instant,
    last_rotation: Instant,
    rotations: u64,
    last_health: Instant,
    last_events: u64,
    health: Health,
    /// This host's part of the spool, for evictions when its disk is full.
    spool_root: std::path::PathBuf,
    spool_host: String,
    /// The last health-file error, logged once instead of every period (a full disk).
    last_health_error: Option<String>,
    /// Held for the service's life (see `spool::lock`).
    _spool_lock: spool::SpoolLock,
}

impl Service {
    pub fn start(run: AgentRun, session: Session<'_>) -> Result<Self> {
        let Session { host, run_id } = session;
        let upload_target = run.spool.target.as_ref().map(|t| t.description.clone());
        let (spool_root, spool_host) = (run.spool.root.clone(), run.spool.host.clone());
        let spool = Spool::start(run.spool)?;
        let health = Health {
            host: host.into(),
            run_id: run_id.into(),
            leftovers_removed: run.leftovers_removed,
            upload_target,
            running: true,
            ..Default::default()
        };
        Ok(Service {
            eviction: EvictionPace::new(),
            settings: run.settings,
            spool,
            started: Instant::now(),
            last_rotation: Instant::now(),
            rotations: 0,
            last_health: Instant::now() - HEALTH_EVERY,
            last_events: 0,
            health,
            spool_root,
            spool_host,
            last_health_error: None,
            _spool_lock: run.spool_lock,
        })
    }

    fn due(&self, sinks: &Sinks) -> bool {
        let hour = |ns: i64| ns.div_euclid(3_600_000_000_000);
        self.last_rotation.elapsed() >= self.settings.rotate_interval
            || sinks.open_bytes() >= self.settings.rotate_bytes
            || hour(now_ns(libc::CLOCK_REALTIME)) != hour(sinks.interval_start())
    }

    fn update_health(&mut self, sinks: &Sinks, k: &KernelCounters, stats: &SpoolStats) {
        let h = &mut self.health;
        let dt = self.last_health.elapsed().as_secs_f64().max(1e-3);
        h.updated_utc = utc_text(now_ns(libc::CLOCK_REALTIME));
        h.uptime_s = self.started.elapsed().as_secs_f64();
        h.events_per_s = (sinks.accounting.events - self.last_events) as f64 / dt;
        h.set_totals(&sinks.totals(k));
        h.rotations_total = self.rotations;
        h.add_spool(stats);
        h.gpu_samples_dropped_total = sinks.gpu_samples_dropped();
        self.last_events = sinks.accounting.events;
        self.last_health = Instant::now();
        match h.write(&self.settings.status_dir) {
            Ok(()) => self.last_health_error = None,
            Err(e) => {
                let msg = format!("{e:#}");
                if self.last_health_error.as_ref() != Some(&msg) {
                    log::warn!("health files: {msg}");
                }
                self.last_health_error = Some(msg);
            }
        }
    }
}

impl Housekeeping for Service {
    /// Fast enough for the rotation interval.
    fn tick(&self) -> Duration {
        (self.settings.rotate_interval / 2).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    fn on_tick(
        &mut self,
        sinks: &mut Sinks,
        counters: &KernelCounters,
        maps: &dyn KernelTables,
        hooks: &Hooks,
    ) -> Result<()> {
        if sinks.waiting_for_space() {
            // space may have come back by itself (an upload, an operator): delete only when
            // it has not, and at the eviction pace
            let resumed = sinks.try_resume()
                || (self.eviction.due(Instant::now()) && {
                    spool::evict_oldest(
                        &self.spool_root,
                        &self.spool_host,
                        MIN_FREE_BYTES,
                        &self.spool.stats,
                    );
                    sinks.try_resume()
                });
            if resumed {
                log::info!(
                    "space on the spool's disk again: recording resumed ({} rows lost to the full disk so far)",
                    sinks.accounting.rows_lost_disk_full
                );
                self.last_rotation = Instant::now();
            }
        } else if self.due(sinks) {
            sinks.rotate(counters, hooks, maps)?;
            // an interval written whole: the disk has room again
            self.eviction = EvictionPace::new();
            self.rotations += 1;
            self.last_rotation = Instant::now();
        }
        if self.last_health.elapsed() >= HEALTH_EVERY {
            let stats: Arc<SpoolStats> = self.spool.stats.clone();
            self.update_health(sinks, counters, &stats);
        }
        Ok(())
    }

    /// A full spool disk: drop the open interval (its rows counted as lost), delete this host's
    /// oldest completed files to make room, and record on into new files, or as soon as there is
    /// space. Dying would lose more: the interval, and everything until someone restarts it.
    fn on_disk_full(&mut self, sinks: &mut Sinks, error: &anyhow::Error) {
        let held = sinks.drop_open_interval();
        let (files, bytes) = if self.eviction.due(Instant::now()) {
            spool::evict_oldest(
                &self.spool_root,
                &self.spool_host,
                held.max(MIN_FREE_BYTES),
                &self.spool.stats,
            )
        } else {
            (0, 0)
        };
        let resumed = sinks.try_resume();
        log::warn!(
            "the spool's disk is full ({}): dropped the open interval ({} rows lost so far, counted in capture.rows_lost_disk_full) and deleted the {files} oldest completed files ({:.1} MB); {}",
            spool::one_line_redacted(&error.root_cause().to_string()),
            sinks.accounting.rows_lost_disk_full,
            bytes as f64 / 1e6,
            if resumed {
                "recording goes on"
            } else {
                "recording resumes when there is space"
            }
        );
    }

    fn abort_handle(&self) -> Arc<tokio::sync::Notify> {
        self.spool.abort_handle()
    }

    /// Uploads what is left (up to --drain-timeout) and writes the last health files, with
    /// the run's totals and `running` off (node_exporter keeps exporting the last textfile).
    fn finish(mut self: Box<Self>, totals: Option<&RunTotals>) -> String {
        let stats = self.spool.finish(self.settings.drain_timeout);
        if let Some(t) = totals {
            self.health.set_totals(t);
        }
        self.health.running = false;
        self.health.events_per_s = 0.0;
        self.health.add_spool(&stats);
        self.health.rotations_total = self.rotations;
        self.health.uptime_s = self.started.elapsed().as_secs_f64();
        self.health.updated_utc = utc_text(now_ns(libc::CLOCK_REALTIME));
        if let Err(e) = self.health.write(&self.settings.status_dir) {
            log::warn!("health files: {e:#}");
        }
        last_line(
            self.rotations,
            &self.health,
            totals.map_or(0, |t| t.files_closed),
        )
    }
}

/// The agent's part of the last line (after the recording's, which counts the files this run
/// closed, `files_closed`): what was uploaded and what is left; without an upload target, the
/// spool's files only where they are not just this run's (earlier runs' files, or fewer after
/// the retention deleted some).
fn last_line(rotations: u64, h: &Health, files_closed: u64) -> String {
    match &h.upload_target {
        Some(t) => format!(
            "{rotations} rotations; uploaded {} files ({:.1} MB) to {t}; {} files left in the spool{}",
            h.uploaded_files_total,
            h.uploaded_bytes_total as f64 / 1e6,
            h.spool_files,
            if h.spool_files > 0 {
                " (uploaded at the next start)"
            } else {
                ""
            }
        ),
        None if h.spool_files == files_closed => format!("{rotations} rotations"),
        None => format!(
            "{rotations} rotations; {} files in the spool now",
            h.spool_files
        ),
    }
}

#[cfg(test)]
mod last_line_tests {
    use super::*;

    /// The line said "32 files under DIR; 2 rotations; 32 files in the spool" (new-user trial).
    #[test]
    fn the_spools_files_are_said_only_when_they_are_not_just_this_runs() {
        let mut h = Health {
            spool_files: 32,
            ..Default::default()
        };
        assert_eq!(last_line(2, &h, 32), "2 rotations");
        h.spool_files = 50;
        assert_eq!(
            last_line(2, &h, 32),
            "2 rotations; 50 files in the spool now"
        );
        h.upload_target = Some("s3://b/p".into());
        h.spool_files = 0;
        h.uploaded_files_total = 32;
        assert_eq!(
            last_line(2, &h, 32),
            "2 rotations; uploaded 32 files (0.0 MB) to s3://b/p; 0 files left in the spool"
        );
    }
}

#[cfg(test)]
mod eviction_pace_tests {
    use super::*;

    #[test]
    fn at_once_then_ever_more_rarely_up_to_a_minute() {
        let mut pace = EvictionPace::new();
        let t0 = Instant::now();
        assert!(pace.due(t0));
        // every tick of the next second: no more deletions
        assert!((1..20).all(|i| !pace.due(t0 + Duration::from_millis(50 * i))));
        assert!(pace.due(t0 + Duration::from_secs(1)));
        assert!(!pace.due(t0 + Duration::from_millis(2900)));
        assert!(pace.due(t0 + Duration::from_secs(3)));
        let mut t = t0 + Duration::from_secs(3);
        for _ in 0..10 {
            t += Duration::from_secs(120);
            assert!(pace.due(t));
        }
        assert_eq!(pace.wait, EvictionPace::MAX_WAIT);
        assert!(!pace.due(t + Duration::from_secs(59)));
    }
}
