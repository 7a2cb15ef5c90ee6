//! GPU sampling during `record`. NVML sits behind [`GpuSource`] so the sampler logic is tested
//! with a fake; without NVML or a GPU, sampling is skipped with one notice.
pub mod nvml_source;
pub mod tables;
pub mod topology;

use std::{
    collections::HashMap,
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::Result;

use crate::{
    clock::now_ns,
    job_labels::{self, JobLabels},
};
use tables::{GpuDeviceRow, GpuProcessRow, GpuSampleRow};

/// Static facts about one GPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    pub memory_total_bytes: Option<u64>,
}

/// One reading of one GPU; None where the GPU or driver does not support the metric.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuMetrics {
    pub sm_util_pct: Option<u32>,
    pub mem_util_pct: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub power_mw: Option<u32>,
    pub temperature_c: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    pub pcie_tx_kib_per_s: Option<u32>,
    pub pcie_rx_kib_per_s: Option<u32>,
    pub throttle_reasons: Option<Vec<String>>,
    /// Cumulative NVLink data counters (all links, KiB) and error counters.
    pub nvlink_tx_kib: Option<u64>,
    pub nvlink_rx_kib: Option<u64>,
    pub nvlink_crc_errors: Option<u64>,
    pub nvlink_replay_errors: Option<u64>,
    pub nvlink_recovery_errors: Option<u64>,
}

/// Per-process utilization as NVML reports it (timestamps in µs since the epoch).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessUtil {
    pub pid: u32,
    pub timestamp_us: u64,
    pub sm_util_pct: u32,
    pub mem_util_pct: u32,
}

pub trait GpuSource {
    fn devices(&self) -> Result<Vec<GpuInfo>>;
    fn metrics(&self, index: u32) -> GpuMetrics;
    /// Samples newer than `since_us`.
    fn processes(&self, index: u32, since_us: u64) -> Vec<ProcessUtil>;
}

/// (UTC ns, NVLink tx KiB, rx KiB) of one sample.
type NvlinkReading = (i64, Option<u64>, Option<u64>);

/// Turns readings into rows; remembers per GPU the newest process sample already taken.
pub struct Sampler<S: GpuSource> {
    source: S,
    host: String,
    devices: Vec<GpuInfo>,
    last_process_us: Vec<u64>,
    /// Previous NVLink reading per GPU, to turn counters into rates.
    last_nvlink: Vec<Option<NvlinkReading>>,
    /// Job labels of the GPU processes, with when each was last in a sample (UTC ns):
    /// `/proc/PID/cgroup` is read once per process, not at every sample. NVML lists a process
    /// only in the samples where it has new utilization samples, so an idle one comes and goes;
    /// one absent for `PROCESS_JOB_KEPT_NS` is forgotten, and its pid, if reused, read again.
    process_jobs: HashMap<u32, (JobLabels, i64)>,
}

/// How long the job labels of a GPU process absent from the samples are kept.
const PROCESS_JOB_KEPT_NS: i64 = 60_000_000_000;

impl<S: GpuSource> Sampler<S> {
    pub fn new(source: S, host: &str) -> Result<Self> {
        let devices = source.devices()?;
        let now_us = (now_ns(libc::CLOCK_REALTIME) / 1000) as u64;
        Ok(Sampler {
            last_process_us: vec![now_us; devices.len()],
            last_nvlink: vec![None; devices.len()],
            process_jobs: HashMap::new(),
            source,
            host: host.into(),
            devices,
        })
    }

    pub fn devices(&self) -> &[GpuInfo] {
        &self.devices
    }

    /// The `gpu_devices` rows, with each GPU's nearest NIC found under `sysfs`.
    pub fn device_rows(&self, run_id: &str, sysfs: &Path) -> Vec<GpuDeviceRow> {
        let nics = topology::nics(sysfs);
        self.devices
            .iter()
            .map(|d| {
                let place = topology::gpu_place(sysfs, &d.pci_bus_id);
                let nearest = place.as_ref().and_then(|p| topology::nearest_nic(p, &nics));
                GpuDeviceRow {
                    host: self.host.clone(),
                    run_id: run_id.into(),
                    index: d.index,
                    uuid: d.uuid.clone(),
                    name: d.name.clone(),
                    pci_bus_id: d.pci_bus_id.clone(),
                    numa_node: place.as_ref().and_then(|p| p.numa_node),
                    memory_total_bytes: d.memory_total_bytes,
                    nearest_nic: nearest.map(|n| n.0.to_string()),
                    nic_numa_node: nearest.and_then(|n| n.1.numa_node),
                    nic_locality: nearest.map(|n| n.2.name().to_string()),
                }
            })
            .collect()
    }

    /// One sample of every GPU at UTC `now`.
    pub fn sample(&mut self, now: i64) -> (Vec<GpuSampleRow>, Vec<GpuProcessRow>) {
        let mut samples = Vec::with_capacity(self.devices.len());
        let mut processes = Vec::new();
        for (slot, d) in self.devices.iter().enumerate() {
            let m = self.source.metrics(d.index);
            let previous = self.last_nvlink[slot].replace((now, m.nvlink_tx_kib, m.nvlink_rx_kib));
            let rate = |cur: Option<u64>, prev: Option<u64>, prev_ts: i64| {
                let dt = (now - prev_ts) as f64 / 1e9;
                (dt > 0.0).then_some(())?;
                Some(cur?.checked_sub(prev?)? as f64 * 1024.0 / dt)
            };
            let (nvlink_tx, nvlink_rx) = match previous {
                Some((ts, tx, rx)) => {
                    (rate(m.nvlink_tx_kib, tx, ts), rate(m.nvlink_rx_kib, rx, ts))
                }
                None => (None, None),
            };
            samples.push(GpuSampleRow {
                host: self.host.clone(),
                ts: now,
                index: d.index,
                sm_util_pct: m.sm_util_pct,
                mem_util_pct: m.mem_util_pct,
                sm_clock_mhz: m.sm_clock_mhz,
                mem_clock_mhz: m.mem_clock_mhz,
                power_mw: m.power_mw,
                temperature_c: m.temperature_c,
                memory_used_bytes: m.memory_used_bytes,
                pcie_tx_bytes_per_s: m.pcie_tx_kib_per_s.map(|k| k as u64 * 1024),
                pcie_rx_bytes_per_s: m.pcie_rx_kib_per_s.map(|k| k as u64 * 1024),
                throttle_reasons: m.throttle_reasons.map(|r| r.join(",")),
                nvlink_tx_bytes_per_s: nvlink_tx,
                nvlink_rx_bytes_per_s: nvlink_rx,
                nvlink_crc_errors: m.nvlink_crc_errors,
                nvlink_replay_errors: m.nvlink_replay_errors,
                nvlink_recovery_errors: m.nvlink_recovery_errors,
            });
            for p in self.source.processes(d.index, self.last_process_us[slot]) {
                self.last_process_us[slot] = self.last_process_us[slot].max(p.timestamp_us);
                let (job, seen) = self
                    .process_jobs
                    .entry(p.pid)
                    .or_insert_with(|| (job_labels::of_pid(p.pid), now));
                *seen = now;
                let job = job.clone();
                processes.push(GpuProcessRow {
                    host: self.host.clone(),
                    ts: (p.timestamp_us * 1000) as i64,
                    index: d.index,
                    pid: p.pid,
                    cgroup: job.cgroup,
                    pod_uid: job.pod_uid,
                    container_id: job.container_id,
                    slurm_job: job.slurm_job,
                    sm_util_pct: p.sm_util_pct,
                    mem_util_pct: p.mem_util_pct,
                });
            }
        }
        self.process_jobs
            .retain(|_, (_, seen)| now - *seen <= PROCESS_JOB_KEPT_NS);
        (samples, processes)
    }
}

/// What the sampler thread sends the recorder each period: rows for the same sinks as every
/// other table, so they rotate, close and count with them.
#[derive(Debug, Default)]
pub struct GpuBatch {
    pub samples: Vec<GpuSampleRow>,
    pub processes: Vec<GpuProcessRow>,
}

/// Periods the recorder may fall behind before the sampler drops a batch (and counts it): at
/// 100 ms, almost 7 minutes.
const GPU_BATCHES_QUEUED: usize = 4096;

/// The GPU sampler thread of a recording: NVML calls block, so they run beside the event loop,
/// for the whole run, and send their rows over a channel.
pub struct GpuRecorder {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<String>,
}

/// A started sampler: the thread, the GPUs' static rows (written in every interval), and the
/// channel its samples arrive on.
pub struct StartedGpus {
    pub recorder: GpuRecorder,
    pub devices: Vec<GpuDeviceRow>,
    pub batches: tokio::sync::mpsc::Receiver<GpuBatch>,
    /// GPU samples dropped so far because the channel was full (`capture.gpu_samples_dropped`).
    pub dropped: Arc<AtomicU64>,
}

impl GpuRecorder {
    /// Starts sampling every `interval` in a thread, or returns the reason it cannot (no NVML,
    /// no GPU).
    pub fn start(
        host: &str,
        run_id: &str,
        interval: Duration,
        sysfs: &Path,
    ) -> Result<StartedGpus, String> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<Vec<GpuDeviceRow>, String>>();
        let (batch_tx, batches) = tokio::sync::mpsc::channel(GPU_BATCHES_QUEUED);
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = stop.clone();
        let dropped = Arc::new(AtomicU64::new(0));
        let dropped_count = dropped.clone();
        let (host, run_id, sysfs) = (host.to_string(), run_id.to_string(), sysfs.to_path_buf());
        let thread = std::thread::Builder::new()
            .name("gpu-sampler".into())
            .spawn(move || {
                // NVML handles borrow the library handle, so both live in this thread.
                let nvml = match nvml_source::NvmlSource::init() {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return String::new();
                    }
                };
                let mut sampler = match Sampler::new(nvml, &host) {
                    Ok(s) if !s.devices().is_empty() => s,
                    Ok(_) => {
                        let _ = ready_tx.send(Err("NVML found no GPU".into()));
                        return String::new();
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("{e:#}")));
                        return String::new();
                    }
                };
                let _ = ready_tx.send(Ok(sampler.device_rows(&run_id, &sysfs)));
                sample_until_stopped(
                    &mut sampler,
                    &batch_tx,
                    &stop_flag,
                    &dropped_count,
                    interval,
                )
            })
            .map_err(|e| format!("starting the GPU sampler thread: {e}"))?;
        match ready_rx.recv() {
            Ok(Ok(devices)) => Ok(StartedGpus {
                recorder: GpuRecorder { stop, thread },
                devices,
                batches,
                dropped,
            }),
            Ok(Err(why)) => {
                let _ = thread.join();
                Err(why)
            }
            Err(_) => Err("the GPU sampler thread died".into()),
        }
    }

    /// Asks the thread to stop: it ends at once unless it is inside an NVML call, and then drops
    /// its end of the channel.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
    }

    /// The thread's summary once it has ended; a thread still inside an NVML call (a driver
    /// that hangs) is left behind rather than holding the run's exit.
    pub fn finish(self) -> Result<String> {
        self.stop();
        if !self.thread.is_finished() {
            return Ok("GPU sampler left in an NVML call that did not return".into());
        }
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the GPU sampler thread panicked"))
    }
}

/// Sleeps `interval`, or less when `stop` is raised (`GpuRecorder::stop` unparks the thread):
/// a long `--gpu-interval` must not hold the end of a run.
fn sleep_unless_stopped(interval: Duration, stop: &AtomicBool) {
    let until = std::time::Instant::now() + interval;
    while !stop.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::park_timeout(left);
    }
}

/// The sampling loop: one batch per `interval` until `stop` (or until the recorder is gone);
/// returns a summary. A batch the recorder has no room for is dropped and counted: the NVML
/// thread must never wait on the writer.
pub fn sample_until_stopped<S: GpuSource>(
    sampler: &mut Sampler<S>,
    batches: &tokio::sync::mpsc::Sender<GpuBatch>,
    stop: &AtomicBool,
    dropped_samples: &AtomicU64,
    interval: Duration,
) -> String {
    let mut samples = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let (s, p) = sampler.sample(now_ns(libc::CLOCK_REALTIME));
        let n = s.len() as u64;
        match batches.try_send(GpuBatch {
            samples: s,
            processes: p,
        }) {
            Ok(()) => samples += n,
            Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                dropped_samples.fetch_add(n, Ordering::Relaxed);
            }
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => break,
        }
        sleep_unless_stopped(interval, stop);
    }
    let mut summary = format!(
        "{samples} GPU samples of {} GPU(s)",
        sampler.devices().len()
    );
    let dropped = dropped_samples.load(Ordering::Relaxed);
    if dropped > 0 {
        summary.push_str(&format!(
            " ({dropped} dropped: the recorder fell {} periods behind)",
            batches.max_capacity()
        ));
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    struct FakeGpus {
        calls: Cell<u32>,
        /// Raise this flag once this many metric reads happened: ends a recording loop
        /// after a known number of samples, whatever the machine's speed.
        stop_after: Option<(u32, Arc<AtomicBool>)>,
    }

    impl GpuSource for FakeGpus {
        fn devices(&self) -> Result<Vec<GpuInfo>> {
            Ok((0..2)
                .map(|i| GpuInfo {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    name: "Fake H200".into(),
                    pci_bus_id: format!("00000000:{:02x}:00.0", 0x10 + i),
                    memory_total_bytes: Some(141 << 30),
                })
                .collect())
        }
        fn metrics(&self, index: u32) -> GpuMetrics {
            self.calls.set(self.calls.get() + 1);
            if let Some((n, flag)) = &self.stop_after {
                if self.calls.get() >= *n {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            GpuMetrics {
                sm_util_pct: Some(90 + index),
                pcie_tx_kib_per_s: Some(2),
                // GPU 1 does not report power or throttling.
                power_mw: (index == 0).then_some(650_000),
                throttle_reasons: (index == 0).then(|| vec!["sw_power_cap".to_string()]),
                // GPU 0 moves 100 KiB over NVLink between calls; GPU 1 has no NVLink.
                nvlink_tx_kib: (index == 0).then(|| self.calls.get() as u64 * 100),
                nvlink_crc_errors: (index == 0).then_some(3),
                ..Default::default()
            }
        }
        fn processes(&self, index: u32, since_us: u64) -> Vec<ProcessUtil> {
            let p = ProcessUtil {
                pid: 4242,
                timestamp_us: since_us + 10,
                sm_util_pct: 80,
                mem_util_pct: 30,
            };
            if index == 0 {
                vec![p]
            } else {
                vec![]
            }
        }
    }

    /// A sampler of the two fake GPUs.
    fn fake_sampler(stop_after: Option<(u32, Arc<AtomicBool>)>) -> Sampler<FakeGpus> {
        let calls = Cell::new(0);
        Sampler::new(FakeGpus { calls, stop_after }, "n1").unwrap()
    }

    #[test]
    fn samples_every_gpu_with_unsupported_metrics_as_null() {
        let mut s = fake_sampler(None);
        let (rows, procs) = s.sample(123);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].ts, rows[0].sm_util_pct, rows[1].sm_util_pct),
            (123, Some(90), Some(91))
        );
        assert_eq!((rows[0].power_mw, rows[1].power_mw), (Some(650_000), None));
        assert_eq!(rows[0].pcie_tx_bytes_per_s, Some(2048));
        assert_eq!(rows[0].throttle_reasons.as_deref(), Some("sw_power_cap"));
        assert_eq!(rows[1].throttle_reasons, None);
        assert_eq!(procs.len(), 1);
        assert_eq!(procs[0].pid, 4242);
        assert_eq!(
            rows[0].nvlink_tx_bytes_per_s, None,
            "no rate before a second reading"
        );
        assert_eq!(rows[0].nvlink_crc_errors, Some(3));
        // The next sample asks only for newer process samples.
        let first_ts = procs[0].ts;
        let (rows, procs) = s.sample(123 + 1_000_000_000);
        assert!(procs[0].ts > first_ts);
        // 2 metric calls per sample (GPU 0 and 1), 100 KiB per call: 200 KiB in one second.
        assert_eq!(rows[0].nvlink_tx_bytes_per_s, Some(200.0 * 1024.0));
        assert_eq!(
            (rows[0].nvlink_rx_bytes_per_s, rows[1].nvlink_tx_bytes_per_s),
            (None, None)
        );
    }

    /// One GPU whose process list the test sets.
    struct ListedProcesses(std::cell::RefCell<Vec<u32>>);

    impl GpuSource for ListedProcesses {
        fn devices(&self) -> Result<Vec<GpuInfo>> {
            Ok(vec![GpuInfo::default()])
        }
        fn metrics(&self, _: u32) -> GpuMetrics {
            GpuMetrics::default()
        }
        fn processes(&self, _: u32, since_us: u64) -> Vec<ProcessUtil> {
            let pids = self.0.borrow();
            pids.iter()
                .map(|&pid| ProcessUtil {
                    pid,
                    timestamp_us: since_us + 1,
                    sm_util_pct: 1,
                    mem_util_pct: 1,
                })
                .collect()
        }
    }

    #[test]
    fn a_gpu_process_job_is_read_once_and_forgotten_a_minute_after_it_left() {
        let own = std::process::id();
        let second = 1_000_000_000;
        let source = ListedProcesses(std::cell::RefCell::new(vec![own]));
        let mut s = Sampler::new(source, "n1").unwrap();
        let (_, procs) = s.sample(0);
        assert_eq!(procs[0].cgroup, job_labels::of_pid(own).cgroup);
        // Later samples take the labels from the cache: a planted entry shows it is not reread.
        let planted = JobLabels {
            cgroup: Some("/planted".into()),
            ..JobLabels::default()
        };
        s.process_jobs.insert(own, (planted, 0));
        let (_, procs) = s.sample(second);
        assert_eq!(procs[0].cgroup.as_deref(), Some("/planted"));
        // An idle process missing from samples for less than a minute keeps them ...
        s.source.0.borrow_mut().clear();
        s.sample(50 * second);
        s.source.0.borrow_mut().push(own);
        let (_, procs) = s.sample(55 * second);
        assert_eq!(procs[0].cgroup.as_deref(), Some("/planted"));
        // ... and one gone for longer is forgotten: its pid, if reused, is read again.
        s.source.0.borrow_mut().clear();
        s.sample(200 * second);
        assert!(s.process_jobs.is_empty());
        s.source.0.borrow_mut().push(own);
        let (_, procs) = s.sample(201 * second);
        assert_eq!(procs[0].cgroup, job_labels::of_pid(own).cgroup);
    }

    #[test]
    fn sends_a_batch_per_period_until_stopped_and_counts_what_the_recorder_had_no_room_for() {
        let stop = Arc::new(AtomicBool::new(false));
        // Three sampling rounds of two GPUs, then the fake raises the stop flag.
        let mut s = fake_sampler(Some((6, stop.clone())));
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let dropped = AtomicU64::new(0);
        let summary = sample_until_stopped(&mut s, &tx, &stop, &dropped, Duration::from_millis(1));
        // room for two batches: the third is dropped and counted
        assert_eq!(
            summary,
            "4 GPU samples of 2 GPU(s) (2 dropped: the recorder fell 2 periods behind)"
        );
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            2,
            "the counter capture reads"
        );
        let first = rx.try_recv().unwrap();
        assert_eq!((first.samples.len(), first.processes.len()), (2, 1));
        assert_eq!(rx.try_recv().unwrap().samples.len(), 2);
        assert!(rx.try_recv().is_err());
        // a recorder that is gone ends the loop, though nothing asks it to stop
        let mut s = fake_sampler(None);
        drop(rx);
        let (never, none_dropped) = (AtomicBool::new(false), AtomicU64::new(0));
        let summary =
            sample_until_stopped(&mut s, &tx, &never, &none_dropped, Duration::from_millis(1));
        assert_eq!(summary, "0 GPU samples of 2 GPU(s)");
        assert_eq!(s.source.calls.get(), 2, "one sampling round");
    }

    #[test]
    fn stopping_cuts_the_wait_for_the_next_sample_short() {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sleeper = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            sleep_unless_stopped(Duration::from_secs(600), &flag);
            started.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
        sleeper.thread().unpark();
        assert!(sleeper.join().unwrap() < Duration::from_secs(60));
    }
}
