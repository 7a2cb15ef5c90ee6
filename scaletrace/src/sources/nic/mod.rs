//! NIC counters from sysfs: what offloaded RDMA hides from the kernel's TCP paths.
//!
//! Sampled files, each a decimal counter:
//! * `class/net/<dev>/statistics/*` (source `net`): bytes, packets, drops, errors;
//! * `class/infiniband/<dev>/ports/<port>/counters/*` (source `ib`): IB port counters;
//! * `class/infiniband/<dev>/ports/<port>/hw_counters/*` (source `ib_hw`): RoCE/IB transport
//!   counters such as `out_of_sequence`, `packet_seq_err`, `local_ack_timeout_err`,
//!   `np_cnp_sent`, `rp_cnp_handled`, `np_ecn_marked_roce_packets`.
pub mod tables;

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
};

use tables::NicCounterRow;

/// One counter file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CounterId {
    pub source: &'static str,
    pub device: String,
    pub port: Option<u32>,
    pub counter: String,
}

fn entries(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .collect();
    v.sort();
    v
}

/// Every counter file under a sysfs root.
pub fn discover(sysfs: &Path) -> Vec<(CounterId, PathBuf)> {
    let mut out = Vec::new();
    for (device, dev_path) in entries(&sysfs.join("class/net")) {
        for (counter, path) in entries(&dev_path.join("statistics")) {
            out.push((
                CounterId {
                    source: "net",
                    device: device.clone(),
                    port: None,
                    counter,
                },
                path,
            ));
        }
    }
    for (device, dev_path) in entries(&sysfs.join("class/infiniband")) {
        for (port, port_path) in entries(&dev_path.join("ports")) {
            let Ok(port) = port.parse::<u32>() else {
                continue;
            };
            for (source, sub) in [("ib", "counters"), ("ib_hw", "hw_counters")] {
                for (counter, path) in entries(&port_path.join(sub)) {
                    out.push((
                        CounterId {
                            source,
                            device: device.clone(),
                            port: Some(port),
                            counter,
                        },
                        path,
                    ));
                }
            }
        }
    }
    out
}

fn read_counter(path: &Path) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Reads counters each tick and turns them into deltas and rates.
pub struct NicSampler {
    sysfs: PathBuf,
    host: String,
    /// Last (value, UTC ns) per counter.
    last: HashMap<CounterId, (u64, i64)>,
}

impl NicSampler {
    pub fn new(sysfs: &Path, host: &str) -> Self {
        NicSampler {
            sysfs: sysfs.into(),
            host: host.into(),
            last: HashMap::new(),
        }
    }

    /// Rows for counters seen for the first time and for counters that changed; devices that
    /// appear later (a new veth, a hot-plugged port) are picked up on the next tick.
    pub fn sample(&mut self, now: i64) -> Vec<NicCounterRow> {
        let mut rows = Vec::new();
        for (id, path) in discover(&self.sysfs) {
            let Some(value) = read_counter(&path) else {
                continue;
            };
            let previous = self.last.insert(id.clone(), (value, now));
            let (delta, rate) = match previous {
                Some((old, _)) if old == value => continue,
                // A counter that went backwards was reset (driver reload): report the new value.
                Some((old, _)) if value < old => (None, None),
                Some((old, ts)) => {
                    let d = value - old;
                    let dt = (now - ts) as f64 / 1e9;
                    (Some(d), (dt > 0.0).then(|| d as f64 / dt))
                }
                None => (None, None),
            };
            rows.push(NicCounterRow {
                host: self.host.clone(),
                ts: now,
                source: id.source,
                device: id.device,
                port: id.port,
                counter: id.counter,
                value,
                delta,
                rate_per_s: rate,
            });
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, v: u64) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, format!("{v}\n")).unwrap();
    }

    #[test]
    fn deltas_and_rates_from_a_prepared_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "class/net/eth0/statistics/tx_bytes", 1000);
        write(root, "class/net/eth0/statistics/rx_dropped", 0);
        write(
            root,
            "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data",
            50,
        );
        write(
            root,
            "class/infiniband/mlx5_0/ports/1/hw_counters/out_of_sequence",
            2,
        );
        write(
            root,
            "class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent",
            7,
        );
        fs::create_dir_all(root.join("class/infiniband/mlx5_0/ports/notaport")).unwrap();

        let mut s = NicSampler::new(root, "n1");
        let first = s.sample(0);
        assert_eq!(first.len(), 5, "every counter is reported once at start");
        assert!(first.iter().all(|r| r.delta.is_none()));
        let oos = first
            .iter()
            .find(|r| r.counter == "out_of_sequence")
            .unwrap();
        assert_eq!(
            (oos.source, oos.device.as_str(), oos.port, oos.value),
            ("ib_hw", "mlx5_0", Some(1), 2)
        );

        write(root, "class/net/eth0/statistics/tx_bytes", 3000);
        write(
            root,
            "class/infiniband/mlx5_0/ports/1/hw_counters/out_of_sequence",
            5,
        );
        write(
            root,
            "class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent",
            3,
        ); // reset
        write(root, "class/net/veth9/statistics/tx_bytes", 10); // appeared
        let second = s.sample(500_000_000);
        let by_name: HashMap<_, _> = second
            .iter()
            .map(|r| ((r.device.as_str(), r.counter.as_str()), r))
            .collect();
        assert_eq!(
            second.len(),
            4,
            "unchanged counters are not repeated: {second:?}"
        );
        let tx = by_name[&("eth0", "tx_bytes")];
        assert_eq!((tx.delta, tx.rate_per_s), (Some(2000), Some(4000.0)));
        assert_eq!(by_name[&("mlx5_0", "out_of_sequence")].delta, Some(3));
        let reset = by_name[&("mlx5_0", "np_cnp_sent")];
        assert_eq!((reset.value, reset.delta), (3, None));
        assert_eq!(by_name[&("veth9", "tx_bytes")].delta, None);
    }

    #[test]
    fn missing_root_gives_nothing() {
        assert!(NicSampler::new(Path::new("/nonexistent-sysfs"), "n")
            .sample(0)
            .is_empty());
    }
}
