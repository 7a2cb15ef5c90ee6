//! The counters of connections still open when the recorder stops, read from the kernel at that
//! moment. sock_ops refreshes a flow's counters at each RTT sample, and an ACK that acknowledges
//! only retransmitted data gives none (Karn's rule): after a retransmit near the end, the last
//! bytes a flow sent were missing from its row (seen in the VM lab: 94 % and 79 % of a megabyte
//! acknowledged before the stop). So at the stop each open flow is looked up by its exact tuple
//! and socket cookie through NETLINK_SOCK_DIAG (what `ss -i` uses), in its own network namespace,
//! and its `tcp_info` totals replace the last sampled ones. A socket gone meanwhile keeps them.
use std::{collections::HashMap, path::PathBuf};

use anyhow::{bail, Context as _, Result};
use scaletrace_common::FlowStats;

use crate::{
    environment::{in_netns, netns_cookie},
    netlink,
};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const INET_DIAG_INFO: u16 = 2;
/// struct inet_diag_req_v2: family, protocol, ext, pad, states, then inet_diag_sockid (48 bytes).
const REQ_LEN: usize = 8 + 48;
/// struct inet_diag_msg before its attributes.
const DIAG_MSG_LEN: usize = 72;

/// The totals of one socket, from `struct tcp_info` (include/uapi/linux/tcp.h; its layout only
/// grows at the end, so these offsets hold on every kernel that has the fields: 4.6 and later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpTotals {
    pub total_retrans: u32,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub min_rtt_us: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    /// `tcpi_dsack_dups` and `tcpi_reord_seen` (Linux 5.0 and later; `None` before).
    pub dsack_dups: Option<u32>,
    pub reord_seen: Option<u32>,
}

impl TcpTotals {
    /// Reads the fields from a `tcp_info` attribute; `None` when it is too short to hold them
    /// (a kernel older than 4.6).
    fn parse(info: &[u8]) -> Option<Self> {
        let u32_at = |o: usize| Some(u32::from_ne_bytes(info.get(o..o + 4)?.try_into().ok()?));
        let u64_at = |o: usize| Some(u64::from_ne_bytes(info.get(o..o + 8)?.try_into().ok()?));
        Some(Self {
            total_retrans: u32_at(100)?,
            bytes_acked: u64_at(120)?,
            bytes_received: u64_at(128)?,
            segs_out: u32_at(136)?,
            segs_in: u32_at(140)?,
            min_rtt_us: u32_at(148)?,
            data_segs_in: u32_at(152)?,
            data_segs_out: u32_at(156)?,
            dsack_dups: u32_at(216),
            reord_seen: u32_at(220),
        })
    }

    fn apply(&self, flow: &mut FlowStats) {
        // counters only grow: a smaller value would be another socket's, never an update
        if self.bytes_acked < flow.bytes_acked || self.segs_out < flow.segs_out {
            return;
        }
        flow.bytes_acked = self.bytes_acked;
        flow.bytes_received = self.bytes_received;
        flow.segs_out = self.segs_out;
        flow.segs_in = self.segs_in;
        flow.data_segs_out = self.data_segs_out;
        flow.data_segs_in = self.data_segs_in;
        flow.total_retrans = self.total_retrans;
        if let (Some(dsack_dups), Some(reord_seen)) = (self.dsack_dups, self.reord_seen) {
            flow.dsack_dups = dsack_dups;
            flow.reord_seen = reord_seen;
        }
        if self.min_rtt_us != 0 && self.min_rtt_us != u32::MAX {
            flow.min_rtt_us = self.min_rtt_us;
        }
    }
}

/// The SOCK_DIAG_BY_FAMILY request for one TCP socket, by its exact tuple and cookie.
fn request(flow: &FlowStats, seq: u32) -> Vec<u8> {
    let t = &flow.tuple;
    // struct inet_diag_req_v2
    let mut req = Vec::with_capacity(REQ_LEN);
    req.push(t.family as u8);
    req.push(libc::IPPROTO_TCP as u8);
    req.push(1 << (INET_DIAG_INFO - 1)); // ext: tcp_info
    req.push(0);
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // states: any
                                                    // inet_diag_sockid: ports in network order, addresses as the socket keeps them
    req.extend_from_slice(&t.local_port.to_be_bytes());
    req.extend_from_slice(&t.remote_port.to_be_bytes());
    req.extend_from_slice(&t.local_addr);
    req.extend_from_slice(&t.remote_addr);
    req.extend_from_slice(&0u32.to_ne_bytes()); // interface: any
    req.extend_from_slice(&(flow.cookie as u32).to_ne_bytes());
    req.extend_from_slice(&((flow.cookie >> 32) as u32).to_ne_bytes());
    netlink::Request::new(SOCK_DIAG_BY_FAMILY, 0, seq)
        .raw(&req)
        .bytes()
}

/// The `tcp_info` of a reply: `Ok(None)` when the kernel has no such socket (closed meanwhile).
fn parse_reply(
    reply: std::result::Result<Vec<netlink::Message>, i32>,
) -> Result<Option<TcpTotals>> {
    let messages = match reply {
        Ok(m) => m,
        Err(libc::ENOENT) => return Ok(None),
        Err(errno) => bail!("sock_diag: {}", std::io::Error::from_raw_os_error(errno)),
    };
    let Some(msg) = messages.first() else {
        return Ok(None);
    };
    if msg.kind != SOCK_DIAG_BY_FAMILY {
        bail!("sock_diag: unexpected reply type {}", msg.kind);
    }
    Ok(msg
        .payload
        .get(DIAG_MSG_LEN..)
        .and_then(|attrs| netlink::attribute(attrs, INET_DIAG_INFO))
        .and_then(TcpTotals::parse))
}

/// Looks each flow up in the current thread's network namespace.
fn read_here(flows: &mut [&mut FlowStats]) -> Result<usize> {
    let mut sock =
        netlink::Socket::open(libc::NETLINK_SOCK_DIAG).context("opening a sock_diag socket")?;
    let mut refreshed = 0;
    for (seq, flow) in flows.iter_mut().enumerate() {
        if let Some(totals) = parse_reply(sock.request(&request(flow, seq as u32))?)? {
            totals.apply(flow);
            refreshed += 1;
        }
    }
    Ok(refreshed)
}

/// Refreshes the open flows among `flows` (those with no end) from the kernel, each in its
/// network namespace (`namespaces`: the paths that hold them). Returns how many were refreshed;
/// flows in a namespace no path holds any more keep their last sampled counters.
pub fn refresh_open_flows(flows: &mut [FlowStats], namespaces: &[PathBuf]) -> Result<usize> {
    let mut by_netns: HashMap<u64, Vec<&mut FlowStats>> = HashMap::new();
    for flow in flows.iter_mut().filter(|f| f.end_ns == 0 && f.cookie != 0) {
        by_netns.entry(flow.netns_cookie).or_default().push(flow);
    }
    if by_netns.is_empty() {
        return Ok(0);
    }
    let mut refreshed = 0;
    for ns in namespaces {
        let Ok(cookie) = netns_cookie(ns) else {
            continue;
        };
        let Some(mut open) = by_netns.remove(&cookie) else {
            continue;
        };
        refreshed += in_netns(ns, || read_here(&mut open))?;
        if by_netns.is_empty() {
            break;
        }
    }
    Ok(refreshed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd as _;

    fn socket_cookie(stream: &TcpStream) -> u64 {
        let mut cookie = 0u64;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        // SAFETY: SO_COOKIE writes a u64 into the buffer we own.
        let r = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_COOKIE,
                &mut cookie as *mut u64 as *mut libc::c_void,
                &mut len,
            )
        };
        assert_eq!(r, 0);
        cookie
    }

    fn flow_of(stream: &TcpStream) -> FlowStats {
        let (local, remote) = (stream.local_addr().unwrap(), stream.peer_addr().unwrap());
        let mut flow = FlowStats::default();
        flow.tuple.family = libc::AF_INET as u16;
        flow.tuple.local_port = local.port();
        flow.tuple.remote_port = remote.port();
        let (std::net::IpAddr::V4(l), std::net::IpAddr::V4(r)) = (local.ip(), remote.ip()) else {
            panic!("loopback v4 expected");
        };
        flow.tuple.local_addr[..4].copy_from_slice(&l.octets());
        flow.tuple.remote_addr[..4].copy_from_slice(&r.octets());
        flow.cookie = socket_cookie(stream);
        flow
    }

    /// A real connection on loopback: its totals come back by tuple and cookie, and a wrong
    /// cookie finds nothing.
    #[test]
    fn reads_a_live_sockets_totals_by_tuple_and_cookie() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.write_all(&[7u8; 100_000]).unwrap();
        let mut got = vec![0u8; 100_000];
        server.read_exact(&mut got).unwrap();
        server.write_all(b"ok").unwrap();
        let mut ok = [0u8; 2];
        client.read_exact(&mut ok).unwrap();

        let mut flow = flow_of(&client);
        let mut open = vec![&mut flow];
        assert_eq!(read_here(&mut open).unwrap(), 1);
        // 100,000 bytes and the SYN acknowledged; 2 bytes received
        assert_eq!(flow.bytes_acked, 100_001);
        assert_eq!(flow.bytes_received, 2);
        assert!(flow.segs_out >= 2 && flow.data_segs_out >= 1, "{flow:?}");

        let mut wrong = flow_of(&client);
        wrong.cookie ^= 1;
        let mut open = vec![&mut wrong];
        assert_eq!(read_here(&mut open).unwrap(), 0);
        assert_eq!(wrong.bytes_acked, 0);
    }

    #[test]
    fn counters_never_go_back() {
        let mut flow = FlowStats {
            bytes_acked: 500,
            segs_out: 10,
            ..Default::default()
        };
        let older = TcpTotals {
            total_retrans: 0,
            bytes_acked: 400,
            bytes_received: 0,
            segs_out: 9,
            segs_in: 0,
            min_rtt_us: 5,
            data_segs_in: 0,
            data_segs_out: 0,
            dsack_dups: Some(3),
            reord_seen: Some(1),
        };
        older.apply(&mut flow);
        assert_eq!((flow.bytes_acked, flow.segs_out), (500, 10));
        assert_eq!((flow.dsack_dups, flow.reord_seen), (0, 0));
    }
}
