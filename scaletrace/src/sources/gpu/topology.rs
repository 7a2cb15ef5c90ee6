//! GPU-to-NIC locality from sysfs: how far apart a GPU and each NIC sit in the PCIe tree.
//! Traffic between a GPU and a NIC under one PCIe switch stays off the CPU's host bridge;
//! across NUMA nodes it crosses the inter-socket link, a common cause of slow ranks.
use std::{fs, path::Path};

/// Locality classes, named as `nvidia-smi topo -m` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Locality {
    /// Under a common PCIe switch.
    Pix,
    /// Same PCIe host bridge (root complex), no common switch.
    Phb,
    /// Different host bridges, same NUMA node.
    Node,
    /// Different NUMA nodes: traffic crosses the inter-socket link.
    Sys,
}

impl Locality {
    pub fn name(self) -> &'static str {
        match self {
            Locality::Pix => "PIX",
            Locality::Phb => "PHB",
            Locality::Node => "NODE",
            Locality::Sys => "SYS",
        }
    }
}

/// A PCI device as sysfs places it.
#[derive(Debug, Clone, PartialEq)]
pub struct PciPlace {
    /// Components of the resolved device path below /sys/devices, e.g.
    /// ["pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0"].
    pub chain: Vec<String>,
    pub numa_node: Option<i64>,
}

/// NVML spells bus ids with an 8-digit domain ("00000000:17:00.0"); sysfs with 4 ("0000:17:00.0").
pub fn sysfs_bus_id(nvml_bus_id: &str) -> String {
    let id = nvml_bus_id.to_ascii_lowercase();
    match id.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => id,
    }
}

/// Where `device_link` (a sysfs device directory or symlink to one) sits in the PCI tree.
pub fn place(device_link: &Path) -> Option<PciPlace> {
    let real = fs::canonicalize(device_link).ok()?;
    let chain: Vec<String> = real
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .skip_while(|c| !c.starts_with("pci"))
        .collect();
    if chain.is_empty() {
        return None;
    }
    let numa_node = fs::read_to_string(real.join("numa_node"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|n| *n >= 0);
    Some(PciPlace { chain, numa_node })
}

pub fn locality(a: &PciPlace, b: &PciPlace) -> Locality {
    let common = a
        .chain
        .iter()
        .zip(&b.chain)
        .take_while(|(x, y)| x == y)
        .count();
    if common == 0 {
        return match (a.numa_node, b.numa_node) {
            (Some(x), Some(y)) if x == y => Locality::Node,
            (None, _) | (_, None) => Locality::Node,
            _ => Locality::Sys,
        };
    }
    // chain[0] is the host bridge, chain[1] its root port: sharing more than those means a
    // common switch (or the same device's ports).
    if common >= 3 {
        Locality::Pix
    } else {
        Locality::Phb
    }
}

/// NICs: network interfaces and RDMA devices that are PCI devices.
pub fn nics(sysfs: &Path) -> Vec<(String, PciPlace)> {
    let mut out = Vec::new();
    for class in ["class/net", "class/infiniband"] {
        let Ok(entries) = fs::read_dir(sysfs.join(class)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(p) = place(&e.path().join("device")) {
                out.push((name, p));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The nearest NIC to a GPU, ties broken by name.
pub fn nearest_nic<'a>(
    gpu: &PciPlace,
    nics: &'a [(String, PciPlace)],
) -> Option<(&'a str, &'a PciPlace, Locality)> {
    nics.iter()
        .map(|(name, p)| (name.as_str(), p, locality(gpu, p)))
        .min_by_key(|(name, _, l)| (*l, *name))
}

pub fn gpu_place(sysfs: &Path, nvml_bus_id: &str) -> Option<PciPlace> {
    place(
        &sysfs
            .join("bus/pci/devices")
            .join(sysfs_bus_id(nvml_bus_id)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// Two sockets: GPU0 and mlx5_0 under one switch on socket 0; GPU1 on socket 0's other root
    /// complex; mlx5_1 on socket 1.
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let dev = |p: &str, numa: i64| {
            let d = root.join("devices").join(p);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("numa_node"), format!("{numa}\n")).unwrap();
            d
        };
        let gpu0 = dev(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
            0,
        );
        let nic0 = dev(
            "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0",
            0,
        );
        let gpu1 = dev("pci0000:10/0000:10:01.0/0000:11:00.0", 0);
        let nic1 = dev("pci0000:80/0000:80:01.0/0000:81:00.0", 1);
        fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
        symlink(&gpu0, root.join("bus/pci/devices/0000:03:00.0")).unwrap();
        symlink(&gpu1, root.join("bus/pci/devices/0000:11:00.0")).unwrap();
        for (class, name, target) in [("net", "ens1", &nic0), ("infiniband", "mlx5_1", &nic1)] {
            let d = root.join("class").join(class).join(name);
            fs::create_dir_all(&d).unwrap();
            symlink(target, d.join("device")).unwrap();
        }
        // A virtual interface has no PCI device and is ignored.
        fs::create_dir_all(root.join("class/net/lo")).unwrap();
        dir
    }

    #[test]
    fn bus_ids() {
        assert_eq!(sysfs_bus_id("00000000:17:00.0"), "0000:17:00.0");
        assert_eq!(sysfs_bus_id("0000:AB:00.0"), "0000:ab:00.0");
    }

    #[test]
    fn classifies_like_nvidia_smi_topo() {
        let dir = fixture();
        let sys = dir.path();
        let nics = nics(sys);
        assert_eq!(
            nics.iter().map(|n| n.0.as_str()).collect::<Vec<_>>(),
            ["ens1", "mlx5_1"]
        );
        let gpu0 = gpu_place(sys, "00000000:03:00.0").unwrap();
        let gpu1 = gpu_place(sys, "00000000:11:00.0").unwrap();
        assert_eq!(gpu0.numa_node, Some(0));
        assert_eq!(locality(&gpu0, &nics[0].1), Locality::Pix);
        assert_eq!(locality(&gpu0, &nics[1].1), Locality::Sys);
        assert_eq!(locality(&gpu1, &nics[0].1), Locality::Node);
        let (name, _, l) = nearest_nic(&gpu0, &nics).unwrap();
        assert_eq!((name, l), ("ens1", Locality::Pix));
        let (name, _, l) = nearest_nic(&gpu1, &nics).unwrap();
        assert_eq!((name, l.name()), ("ens1", "NODE"));
        assert!(gpu_place(sys, "00000000:99:00.0").is_none());
    }

    #[test]
    fn same_root_port_without_switch_is_host_bridge() {
        let a = PciPlace {
            chain: vec![
                "pci0000:00".into(),
                "0000:00:01.0".into(),
                "0000:01:00.0".into(),
            ],
            numa_node: Some(0),
        };
        let b = PciPlace {
            chain: vec![
                "pci0000:00".into(),
                "0000:00:02.0".into(),
                "0000:05:00.0".into(),
            ],
            numa_node: Some(0),
        };
        assert_eq!(locality(&a, &b), Locality::Phb);
    }
}
