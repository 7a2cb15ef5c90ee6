//! `scaletrace merge`: one row per time window and host (and rank) with GPU and network side by
//! side, from the tables of any number of nodes under one directory.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::PathBuf,
    time::Duration,
};

use anyhow::{bail, Result};
use clap::Args;

use crate::{parquet_read as pr, parquet_sink::TableWriter, tables::WindowRow};

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Directory holding the tables (`flows/`, `rtt/`, `retransmits/`, `gpu_events/`, ...) of
    /// one or many nodes.
    #[arg(default_value = "./traces")]
    pub dir: PathBuf,

    /// Window length (e.g. 100ms, 1s).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub window: Duration,
}

/// A half-open interval [start, end) in UTC ns.
pub type Interval = (i64, i64);

/// Sorts and merges overlapping intervals, so time covered twice counts once.
pub fn union(mut intervals: Vec<Interval>) -> Vec<Interval> {
    intervals.retain(|(s, e)| e > s);
    intervals.sort_unstable();
    let mut out: Vec<Interval> = Vec::with_capacity(intervals.len());
    for (s, e) in intervals {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

pub fn window_of(ts: i64, window: i64) -> i64 {
    ts.div_euclid(window) * window
}

/// Nanoseconds of `intervals` (already merged) inside each window they touch.
pub fn coverage(intervals: &[Interval], window: i64) -> HashMap<i64, i64> {
    let mut out = HashMap::new();
    for &(s, e) in intervals {
        let mut w = window_of(s, window);
        while w < e {
            let overlap = e.min(w + window) - s.max(w);
            if overlap > 0 {
                *out.entry(w).or_insert(0) += overlap;
            }
            w += window;
        }
    }
    out
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// GPU observations of one host, by rank.
pub type HostGpus = BTreeMap<Option<i64>, RankGpu>;

/// Network observations of one host.
#[derive(Default)]
pub struct HostNet {
    /// (flow_id, ts, srtt_us, bytes_acked)
    pub rtt: Vec<(u64, i64, u32, u64)>,
    pub retransmit_ts: Vec<i64>,
}

/// GPU observations of one (host, rank).
#[derive(Default)]
pub struct RankGpu {
    pub gpu: Vec<Interval>,
    pub collective: Vec<Interval>,
}

struct NetWindows {
    bytes: HashMap<i64, u64>,
    srtts: HashMap<i64, Vec<f64>>,
    retransmits: HashMap<i64, u64>,
}

fn net_windows(net: &HostNet, window: i64) -> NetWindows {
    let mut rtt = net.rtt.clone();
    rtt.sort_unstable_by_key(|r| (r.0, r.1));
    let mut bytes = HashMap::new();
    let mut srtts: HashMap<i64, Vec<f64>> = HashMap::new();
    for (i, &(flow, ts, srtt, acked)) in rtt.iter().enumerate() {
        let w = window_of(ts, window);
        srtts.entry(w).or_default().push(srtt as f64);
        // Bytes acknowledged since the flow's previous sample land in this sample's window.
        if i > 0 && rtt[i - 1].0 == flow {
            *bytes.entry(w).or_insert(0) += acked.saturating_sub(rtt[i - 1].3);
        }
    }
    for v in srtts.values_mut() {
        v.sort_by(f64::total_cmp);
    }
    let mut retransmits = HashMap::new();
    for &ts in &net.retransmit_ts {
        *retransmits.entry(window_of(ts, window)).or_insert(0) += 1;
    }
    NetWindows {
        bytes,
        srtts,
        retransmits,
    }
}

/// Builds the window rows of one host: one per window in its time range and per rank.
pub fn host_windows(
    host: &str,
    net: &HostNet,
    ranks: &BTreeMap<Option<i64>, RankGpu>,
    window: i64,
) -> Vec<WindowRow> {
    let times = net
        .rtt
        .iter()
        .map(|r| r.1)
        .chain(net.retransmit_ts.iter().copied())
        .chain(
            ranks
                .values()
                .flat_map(|g| g.gpu.iter().flat_map(|&(s, e)| [s, e - 1])),
        );
    let (Some(first), Some(last)) = times.clone().min().zip(times.max()).unzip() else {
        return Vec::new();
    };
    let n = net_windows(net, window);
    let empty = BTreeMap::from([(None, RankGpu::default())]);
    let ranks = if ranks.is_empty() { &empty } else { ranks };
    let mut rows = Vec::new();
    for (rank, gpu) in ranks {
        let has_gpu = !gpu.gpu.is_empty();
        let busy = coverage(&union(gpu.gpu.clone()), window);
        let collective = coverage(&union(gpu.collective.clone()), window);
        // Non-collective GPU work: busy time minus collective time is not right when they
        // overlap on different streams, so compute the union of the non-NCCL intervals directly.
        let compute_intervals: Vec<Interval> =
            subtract(&union(gpu.gpu.clone()), &union(gpu.collective.clone()));
        let compute = coverage(&compute_intervals, window);
        let mut collective_kernels: HashMap<i64, u64> = HashMap::new();
        for &(s, e) in &gpu.collective {
            let mut w = window_of(s, window);
            while w < e.max(s + 1) {
                *collective_kernels.entry(w).or_insert(0) += 1;
                w += window;
            }
        }
        let mut w = window_of(first, window);
        while w <= last {
            let frac = |m: &HashMap<i64, i64>| {
                has_gpu.then(|| *m.get(&w).unwrap_or(&0) as f64 / window as f64)
            };
            let kernels = *collective_kernels.get(&w).unwrap_or(&0);
            let compute_frac = frac(&compute);
            let net_bytes = *n.bytes.get(&w).unwrap_or(&0);
            let srtts = n.srtts.get(&w).map(Vec::as_slice).unwrap_or(&[]);
            rows.push(WindowRow {
                window_start: w,
                window_ns: window,
                host: host.to_string(),
                rank: *rank,
                gpu_busy_frac: frac(&busy),
                compute_frac,
                collective_frac: frac(&collective),
                collective_kernels: kernels,
                gpu_idle_in_collective_window: compute_frac.map(|c| kernels > 0 && c < 0.5),
                net_bytes_sent: net_bytes,
                net_throughput_bps: net_bytes as f64 * 8.0 / (window as f64 / 1e9),
                rtt_samples: srtts.len() as u64,
                rtt_p50_us: percentile(srtts, 50.0),
                rtt_p99_us: percentile(srtts, 99.0),
                retransmits: *n.retransmits.get(&w).unwrap_or(&0),
            });
            w += window;
        }
    }
    rows
}

/// `a` minus `b`, both merged and sorted.
pub fn subtract(a: &[Interval], b: &[Interval]) -> Vec<Interval> {
    let mut out = Vec::new();
    let mut j = 0;
    for &(mut s, e) in a {
        while j < b.len() && b[j].1 <= s {
            j += 1;
        }
        let mut k = j;
        while k < b.len() && b[k].0 < e {
            if b[k].0 > s {
                out.push((s, b[k].0));
            }
            s = s.max(b[k].1);
            k += 1;
        }
        if s < e {
            out.push((s, e));
        }
    }
    out
}

fn load(dir: &std::path::Path) -> Result<(BTreeMap<String, HostNet>, BTreeMap<String, HostGpus>)> {
    let mut nets: BTreeMap<String, HostNet> = BTreeMap::new();
    for b in pr::read_table(dir, "rtt")? {
        let (hosts, flows, ts, srtt, acked) = (
            pr::strings(&b, "host")?,
            pr::u64s(&b, "flow_id")?,
            pr::timestamps(&b, "ts")?,
            pr::u32s(&b, "srtt_us")?,
            pr::u64s(&b, "bytes_acked")?,
        );
        for i in 0..b.num_rows() {
            nets.entry(hosts[i].clone())
                .or_default()
                .rtt
                .push((flows[i], ts[i], srtt[i], acked[i]));
        }
    }
    for b in pr::read_table(dir, "retransmits")? {
        let (hosts, ts) = (pr::strings(&b, "host")?, pr::timestamps(&b, "ts")?);
        for i in 0..b.num_rows() {
            nets.entry(hosts[i].clone())
                .or_default()
                .retransmit_ts
                .push(ts[i]);
        }
    }
    let mut gpus: BTreeMap<String, HostGpus> = BTreeMap::new();
    for b in pr::read_table(dir, "gpu_events")? {
        let (hosts, ranks, ts, dur, on_gpu, coll) = (
            pr::strings(&b, "host")?,
            pr::opt_i64s(&b, "rank")?,
            pr::timestamps(&b, "ts")?,
            pr::i64s(&b, "dur_ns")?,
            pr::bools(&b, "on_gpu")?,
            pr::opt_strings(&b, "collective")?,
        );
        for i in 0..b.num_rows() {
            if !on_gpu[i] {
                continue;
            }
            let g = gpus
                .entry(hosts[i].clone())
                .or_default()
                .entry(ranks[i])
                .or_default();
            let iv = (ts[i], ts[i] + dur[i].max(0));
            g.gpu.push(iv);
            if coll[i].is_some() {
                g.collective.push(iv);
            }
        }
    }
    Ok((nets, gpus))
}

pub fn run(args: MergeArgs) -> Result<()> {
    let window = args.window.as_nanos();
    if window == 0 || window > i64::MAX as u128 {
        bail!("--window must be positive");
    }
    let window = window as i64;
    let (nets, gpus) = load(&args.dir)?;
    let hosts: BTreeSet<&String> = nets.keys().chain(gpus.keys()).collect();
    if hosts.is_empty() {
        bail!(
            "no rtt, retransmits or gpu_events tables under {}: record (`scaletrace record --out {0}`) or import first",
            args.dir.display()
        );
    }
    let stem = format!("window-{}", humantime::format_duration(args.window));
    let metadata = vec![
        (
            "scaletrace.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        ("scaletrace.window_ns".to_string(), window.to_string()),
    ];
    let mut writer = TableWriter::<WindowRow>::create(&args.dir, &stem, &metadata)?;
    let no_net = HostNet::default();
    let no_gpu = BTreeMap::new();
    for host in &hosts {
        let rows = host_windows(
            host,
            nets.get(*host).unwrap_or(&no_net),
            gpus.get(*host).unwrap_or(&no_gpu),
            window,
        );
        for row in rows {
            writer.push(row)?;
        }
    }
    let rows = writer.rows();
    let path = writer.close()?;
    eprintln!(
        "scaletrace: {rows} windows for {} host(s) written to {}",
        hosts.len(),
        path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn union_merges_overlaps_and_drops_empty() {
        assert_eq!(
            union(vec![(5, 7), (1, 3), (2, 4), (8, 8)]),
            vec![(1, 4), (5, 7)]
        );
    }

    #[test]
    fn coverage_splits_across_windows() {
        let c = coverage(&[(S / 2, 2 * S + S / 4)], S);
        assert_eq!(c[&0], S / 2);
        assert_eq!(c[&S], S);
        assert_eq!(c[&(2 * S)], S / 4);
    }

    #[test]
    fn subtract_removes_collective_time() {
        assert_eq!(
            subtract(&[(0, 10), (20, 30)], &[(2, 4), (8, 22)]),
            vec![(0, 2), (4, 8), (22, 30)]
        );
        assert_eq!(subtract(&[(0, 10)], &[]), vec![(0, 10)]);
        assert_eq!(subtract(&[(0, 10)], &[(0, 10)]), vec![]);
    }

    #[test]
    fn percentiles_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn windows_put_gpu_and_network_side_by_side() {
        let base = 1_700_000_000 * S; // aligned to the second
        let net = HostNet {
            // flow 1: 1000 bytes acked during second 0, 3000 during second 1
            rtt: vec![
                (1, base + 100, 50, 0),
                (1, base + S / 2, 60, 1000),
                (1, base + S + 10, 500, 4000),
            ],
            retransmit_ts: vec![base + S + 20, base + S + 30],
        };
        let mut ranks = BTreeMap::new();
        ranks.insert(
            Some(0),
            RankGpu {
                // compute for all of second 0; in second 1 only an NCCL kernel for 0.8 s
                gpu: vec![(base, base + S), (base + S, base + S + 8 * S / 10)],
                collective: vec![(base + S, base + S + 8 * S / 10)],
            },
        );
        let rows = host_windows("n1", &net, &ranks, S);
        assert_eq!(rows.len(), 2);
        let (w0, w1) = (&rows[0], &rows[1]);
        assert_eq!((w0.window_start, w1.window_start), (base, base + S));
        assert_eq!(w0.gpu_busy_frac, Some(1.0));
        assert_eq!(w0.collective_frac, Some(0.0));
        assert_eq!(w0.gpu_idle_in_collective_window, Some(false));
        assert_eq!(w1.collective_frac, Some(0.8));
        assert_eq!(w1.compute_frac, Some(0.0));
        assert_eq!(w1.collective_kernels, 1);
        assert_eq!(w1.gpu_idle_in_collective_window, Some(true));
        assert_eq!((w0.net_bytes_sent, w1.net_bytes_sent), (1000, 3000));
        assert_eq!(w1.net_throughput_bps, 24_000.0);
        assert_eq!(
            (w0.rtt_samples, w0.rtt_p50_us, w1.rtt_p99_us),
            (2, Some(50.0), Some(500.0))
        );
        assert_eq!((w0.retransmits, w1.retransmits), (0, 2));
    }

    #[test]
    fn host_without_gpu_events_gets_null_gpu_columns() {
        let net = HostNet {
            rtt: vec![(1, 5, 10, 0)],
            retransmit_ts: vec![],
        };
        let rows = host_windows("n2", &net, &BTreeMap::new(), S);
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (
                rows[0].rank,
                rows[0].gpu_busy_frac,
                rows[0].gpu_idle_in_collective_window
            ),
            (None, None, None)
        );
        assert!(host_windows("n3", &HostNet::default(), &BTreeMap::new(), S).is_empty());
    }
}
