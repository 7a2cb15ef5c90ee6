//! The node's interfaces and addresses, so flows can be attributed to the NIC that carried them.
use std::{fs, net::IpAddr, path::Path};

use crate::columns::*;

table! {
    /// One address of one network interface of the node, once per run.
    pub struct InterfaceRow in "interfaces" {
        description: "The node's network interfaces and their addresses (in the recorder's network \
        namespace), once per run (`agent`: once per file interval): joins a flow's `local_addr` to the \
        NIC that carried it.",
        host: String => str_col("Node hostname."),
        run_id: String => str_col("Run of `scaletrace record`."),
        name: String => str_col("Interface name, e.g. `eth0`, `ib0`."),
        family: String => str_col("`ipv4` or `ipv6`."),
        addr: String => str_col("Address, text form as in `flows.local_addr`."),
        prefix_len: u32 => u32_col("bits", "Network prefix length."),
        numa_node: Option<i64> => opt_i64_col("", "NUMA node of the interface's PCI device (sysfs); null for virtual interfaces."),
        pci_bus_id: Option<String> => opt_str_col("PCI address of the device, e.g. `0000:17:00.0`; null for virtual interfaces."),
        speed_mbps: Option<u32> => opt_u32_col("Mbit/s", "Link speed (sysfs `speed`); null when unknown."),
        mtu: Option<u32> => opt_u32_col("bytes", "MTU."),
    }
}

/// Every IPv4/IPv6 address of every interface, with the interface's PCI placement from sysfs.
pub fn list(host: &str, run_id: &str, sysfs: &Path) -> Vec<InterfaceRow> {
    let addrs = match nix::ifaddrs::getifaddrs() {
        Ok(a) => a,
        Err(e) => {
            log::warn!("listing interfaces: {e}; flows will not be attributed to interfaces");
            return Vec::new();
        }
    };
    let mut rows = Vec::new();
    for ifa in addrs {
        let Some((addr, prefix_len)) = address(&ifa) else {
            continue;
        };
        let class = sysfs.join("class/net").join(&ifa.interface_name);
        let place = crate::sources::gpu::topology::place(&class.join("device"));
        rows.push(InterfaceRow {
            host: host.into(),
            run_id: run_id.into(),
            name: ifa.interface_name.clone(),
            family: if addr.is_ipv4() { "ipv4" } else { "ipv6" }.into(),
            addr: addr.to_string(),
            prefix_len,
            numa_node: place.as_ref().and_then(|p| p.numa_node),
            pci_bus_id: place.and_then(|p| p.chain.last().cloned()),
            speed_mbps: read_number(&class.join("speed")),
            mtu: read_number(&class.join("mtu")),
        });
    }
    rows
}

fn address(ifa: &nix::ifaddrs::InterfaceAddress) -> Option<(IpAddr, u32)> {
    let addr = ifa.address.as_ref()?;
    let mask = ifa.netmask.as_ref();
    if let Some(v4) = addr.as_sockaddr_in() {
        let bits = mask
            .and_then(|m| m.as_sockaddr_in())
            .map_or(32, |m| m.ip().to_bits().count_ones());
        return Some((IpAddr::V4(v4.ip()), bits));
    }
    let v6 = addr.as_sockaddr_in6()?;
    let bits = mask
        .and_then(|m| m.as_sockaddr_in6())
        .map_or(128, |m| m.ip().to_bits().count_ones());
    Some((IpAddr::V6(v6.ip()), bits))
}

/// A sysfs number; `speed` reads -1 (or fails) on virtual and down links.
fn read_number(path: &Path) -> Option<u32> {
    fs::read_to_string(path).ok()?.trim().parse::<u32>().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_is_listed_with_its_prefix() {
        let rows = super::list("h", "r", std::path::Path::new("/sys"));
        let lo = rows
            .iter()
            .find(|r| r.addr == "127.0.0.1")
            .expect("127.0.0.1 listed");
        assert_eq!(lo.name, "lo");
        assert_eq!(lo.prefix_len, 8);
        assert_eq!(lo.family, "ipv4");
        assert_eq!(lo.pci_bus_id, None);
        assert_eq!(lo.mtu, Some(65536));
    }
}
