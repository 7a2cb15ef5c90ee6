//! What a recorder that runs for days does besides recording, supplied by its caller: `agent`
//! rotates the files into its spool, uploads them and writes health files; plain `record` has
//! none. The recorder calls it from its event loop without knowing what it does, so `record`
//! never imports the agent that wraps it.
use std::{sync::Arc, time::Duration};

use anyhow::Result;
use aya::maps::{MapData, RingBuf};

use super::{
    sinks::{ring_records, RunTotals, Sinks},
    KernelCounters, KernelTables,
};
use crate::hooks::Hooks;

/// Who is recording: what housekeeping needs to start, known once the recorder has named its
/// run.
pub struct Session<'a> {
    pub host: &'a str,
    pub run_id: &'a str,
}

pub trait Housekeeping: Send {
    /// How often `on_tick` runs.
    fn tick(&self) -> Duration;

    /// Periodic work (rotation of the files, health reports).
    fn on_tick(
        &mut self,
        sinks: &mut Sinks,
        counters: &KernelCounters,
        maps: &dyn KernelTables,
        hooks: &Hooks,
    ) -> Result<()>;

    /// A write failed on a full disk; the recorder stops on an error only.
    fn on_disk_full(&mut self, sinks: &mut Sinks, error: &anyhow::Error);

    /// Notified to cut `finish` short (a second signal during the last uploads).
    fn abort_handle(&self) -> Arc<tokio::sync::Notify>;

    /// After the last files are written (`totals`: what the run wrote and lost, none when
    /// finishing failed): what is left to do (uploads), and a summary for the run's last line.
    fn finish(self: Box<Self>, totals: Option<&RunTotals>) -> String;
}

/// Starts the housekeeping of a run, once the recorder knows its session. A recorder with
/// housekeeping writes the Hive layout (files rotate into hour partitions).
pub type StartHousekeeping = Box<dyn FnOnce(Session<'_>) -> Result<Box<dyn Housekeeping>>>;

/// What the event loop needs for its housekeeping; a plain `record` has none and never rotates.
pub struct Rotation<'a> {
    pub housekeeping: Option<&'a mut (dyn Housekeeping + 'static)>,
    pub hooks: &'a Hooks,
}

impl Rotation<'_> {
    /// A recorder with housekeeping survives a full disk (it makes room); `record`, and every
    /// other error, still ends the run.
    pub fn survive_disk_full(&mut self, sinks: &mut Sinks, result: Result<()>) -> Result<()> {
        let Err(e) = result else {
            return Ok(());
        };
        match self.housekeeping.as_deref_mut() {
            Some(h) if crate::parquet_sink::is_disk_full(&e) => {
                h.on_disk_full(sinks, &e);
                Ok(())
            }
            _ => Err(e),
        }
    }

    /// Everything waiting in the ring into the sinks (a full disk survived as above).
    pub fn drain_ring(&mut self, sinks: &mut Sinks, ring: &mut RingBuf<MapData>) -> Result<()> {
        let drained = sinks.drain(ring_records(ring));
        self.survive_disk_full(sinks, drained)
    }

    /// One period of GPU samples into the sinks (a full disk survived as above).
    pub fn push_gpu(
        &mut self,
        sinks: &mut Sinks,
        batch: crate::sources::gpu::GpuBatch,
    ) -> Result<()> {
        let pushed = sinks.push_gpu(batch);
        self.survive_disk_full(sinks, pushed)
    }

    /// The housekeeping period.
    pub fn tick(&self) -> Duration {
        self.housekeeping
            .as_deref()
            .map_or(Duration::from_secs(1), |h| h.tick())
    }

    pub fn on_tick(
        &mut self,
        sinks: &mut Sinks,
        counters: &KernelCounters,
        maps: &dyn KernelTables,
    ) -> Result<()> {
        match self.housekeeping.as_deref_mut() {
            Some(h) => h.on_tick(sinks, counters, maps, self.hooks),
            None => Ok(()),
        }
    }
}
