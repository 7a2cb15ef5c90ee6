//! RDMA queue pairs from the kernel's RDMA netlink (`nldev`: what `rdma resource show qp` and
//! `rdma statistic qp show` read), sampled with the NIC counters: every QP of every device with
//! its type, state, process and packet sequence numbers, and the counters of the statistic
//! counter the QP is bound to, where the driver binds them. Nothing runs on the data path: an
//! RDMA NIC moves packets without the kernel, and its send and receive PSNs are how far each
//! connection got (one PSN per packet, 24 bits), so their progress between samples is the
//! connection's packet count.
//!
//! What drivers give (checked against the kernel's nldev.c and the drivers' `counter_*` ops):
//! every driver lists its QPs with PSNs (they come from `ib_query_qp`); per-QP counters need
//! `counter_bind_qp`/`counter_update_stats`, which mlx5 implements (`rdma statistic qp set link
//! mlx5_0/1 auto type on` binds new QPs; counters such as `out_of_sequence`, `packet_seq_err`,
//! `local_ack_timeout_err`, `duplicate_request`) and soft-RoCE (rxe) does not: its counters are
//! per port only (`nic_counters`, source `ib_hw`).
use std::collections::HashMap;

use super::tables::QpCounterRow;
use crate::netlink::{self, attr_str, attr_u32, attr_u8, attribute, attributes, Message, Socket};

const NETLINK_RDMA: libc::c_int = 20;
const RDMA_NL_NLDEV: u16 = 5;
const CMD_GET: u16 = 1;
const CMD_PORT_GET: u16 = 5;
const CMD_RES_QP_GET: u16 = 10;
const CMD_STAT_GET: u16 = 17;

const ATTR_DEV_INDEX: u16 = 1;
const ATTR_DEV_NAME: u16 = 2;
const ATTR_PORT_INDEX: u16 = 3;
const ATTR_RES_QP: u16 = 19;
const ATTR_RES_QP_ENTRY: u16 = 20;
const ATTR_RES_LQPN: u16 = 21;
const ATTR_RES_RQPN: u16 = 22;
const ATTR_RES_RQ_PSN: u16 = 23;
const ATTR_RES_SQ_PSN: u16 = 24;
const ATTR_RES_TYPE: u16 = 26;
const ATTR_RES_STATE: u16 = 27;
const ATTR_RES_PID: u16 = 28;
const ATTR_RES_KERN_NAME: u16 = 29;
const ATTR_NDEV_NAME: u16 = 51;
const ATTR_STAT_RES: u16 = 75;
const ATTR_STAT_COUNTER: u16 = 77;
const ATTR_STAT_COUNTER_ENTRY: u16 = 78;
const ATTR_STAT_COUNTER_ID: u16 = 79;
const ATTR_STAT_HWCOUNTERS: u16 = 80;
const ATTR_STAT_HWCOUNTER_ENTRY: u16 = 81;
const ATTR_STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
const ATTR_STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;

const PSN_MODULUS: u32 = 1 << 24;

const fn nldev(cmd: u16) -> u16 {
    (RDMA_NL_NLDEV << 10) + cmd
}

/// enum ib_qp_type (include/rdma/ib_verbs.h)
fn qp_type_name(t: u8) -> &'static str {
    match t {
        0 => "SMI",
        1 => "GSI",
        2 => "RC",
        3 => "UC",
        4 => "UD",
        5 => "RAW_IPV6",
        6 => "RAW_ETHERTYPE",
        8 => "RAW_PACKET",
        9 => "XRC_INI",
        10 => "XRC_TGT",
        _ => "OTHER",
    }
}

/// One RDMA device of a `CMD_GET` dump.
#[derive(Debug, Clone, PartialEq)]
struct Device {
    index: u32,
    name: String,
}

/// One QP of a `RES_QP_GET` dump.
#[derive(Debug, Clone, Default, PartialEq)]
struct QpEntry {
    port: Option<u32>,
    qp_num: u32,
    dest_qp_num: Option<u32>,
    sq_psn: Option<u32>,
    rq_psn: Option<u32>,
    qp_type: Option<u8>,
    state: Option<u8>,
    pid: Option<u32>,
    kern_name: Option<String>,
}

/// One statistic counter of a `STAT_GET` dump: the QPs bound to it and its values.
#[derive(Debug, Clone, Default, PartialEq)]
struct BoundCounter {
    port: Option<u32>,
    id: u32,
    qps: Vec<u32>,
    values: Vec<(String, u64)>,
}

fn parse_devices(messages: &[Message]) -> Vec<Device> {
    messages
        .iter()
        .filter_map(|m| {
            Some(Device {
                index: attribute(&m.payload, ATTR_DEV_INDEX).and_then(attr_u32)?,
                name: attr_str(attribute(&m.payload, ATTR_DEV_NAME)?),
            })
        })
        .collect()
}

/// port -> network device, from a `PORT_GET` dump: every port listed, with the network device
/// RoCE and iWARP ports have (none for InfiniBand), so a port missing here is one the dump did
/// not list rather than one without a network device.
fn parse_port_netdevs(messages: &[Message]) -> HashMap<u32, Option<String>> {
    messages
        .iter()
        .filter_map(|m| {
            let port = attribute(&m.payload, ATTR_PORT_INDEX).and_then(attr_u32)?;
            Some((port, attribute(&m.payload, ATTR_NDEV_NAME).map(attr_str)))
        })
        .collect()
}

/// The entries of every `table`/`entry` nest in the messages (the kernel splits a long table
/// over several messages of one dump).
fn table_entries(messages: &[Message], table: u16, entry: u16) -> Vec<&[u8]> {
    messages
        .iter()
        .flat_map(|m| attributes(&m.payload))
        .filter(|(kind, _)| *kind == table)
        .flat_map(|(_, nest)| attributes(nest))
        .filter(|(kind, _)| *kind == entry)
        .map(|(_, e)| e)
        .collect()
}

fn parse_qps(messages: &[Message]) -> Vec<QpEntry> {
    table_entries(messages, ATTR_RES_QP, ATTR_RES_QP_ENTRY)
        .into_iter()
        .filter_map(|e| {
            let mut qp = QpEntry::default();
            let mut qp_num = None;
            for (kind, value) in attributes(e) {
                match kind {
                    ATTR_PORT_INDEX => qp.port = attr_u32(value),
                    ATTR_RES_LQPN => qp_num = attr_u32(value),
                    ATTR_RES_RQPN => qp.dest_qp_num = attr_u32(value),
                    ATTR_RES_SQ_PSN => qp.sq_psn = attr_u32(value),
                    ATTR_RES_RQ_PSN => qp.rq_psn = attr_u32(value),
                    ATTR_RES_TYPE => qp.qp_type = attr_u8(value),
                    ATTR_RES_STATE => qp.state = attr_u8(value),
                    ATTR_RES_PID => qp.pid = attr_u32(value),
                    ATTR_RES_KERN_NAME => qp.kern_name = Some(attr_str(value)),
                    _ => {}
                }
            }
            qp.qp_num = qp_num?;
            Some(qp)
        })
        .collect()
}

fn parse_counters(messages: &[Message]) -> Vec<BoundCounter> {
    table_entries(messages, ATTR_STAT_COUNTER, ATTR_STAT_COUNTER_ENTRY)
        .into_iter()
        .filter_map(|e| {
            let mut c = BoundCounter::default();
            let mut id = None;
            for (kind, value) in attributes(e) {
                match kind {
                    ATTR_PORT_INDEX => c.port = attr_u32(value),
                    ATTR_STAT_COUNTER_ID => id = attr_u32(value),
                    ATTR_RES_QP => {
                        c.qps = attributes(value)
                            .filter(|(k, _)| *k == ATTR_RES_QP_ENTRY)
                            .flat_map(|(_, qp)| attributes(qp))
                            .filter(|(k, _)| *k == ATTR_RES_LQPN)
                            .filter_map(|(_, v)| attr_u32(v))
                            .collect()
                    }
                    ATTR_STAT_HWCOUNTERS => {
                        c.values = attributes(value)
                            .filter(|(k, _)| *k == ATTR_STAT_HWCOUNTER_ENTRY)
                            .filter_map(|(_, entry)| {
                                let name = attribute(entry, ATTR_STAT_HWCOUNTER_ENTRY_NAME)?;
                                let v = attribute(entry, ATTR_STAT_HWCOUNTER_ENTRY_VALUE)
                                    .and_then(netlink::attr_u64)?;
                                Some((attr_str(name), v))
                            })
                            .collect()
                    }
                    _ => {}
                }
            }
            c.id = id?;
            Some(c)
        })
        .collect()
}

/// Packets between two readings of a 24-bit PSN; `None` when it went back (the QP was reset
/// and reused, or a go-back-N retry rewound it at the reading), and across a state change: the
/// move to RTR or RTS sets the PSNs to the connection's random start (a first real run counted
/// the jump from 0 to it, 7.9 M "packets").
fn psn_progress(old: u32, old_state: Option<u8>, new: u32, new_state: Option<u8>) -> Option<u64> {
    if old_state != new_state {
        return None;
    }
    let d = new.wrapping_sub(old) % PSN_MODULUS;
    (d < PSN_MODULUS / 2).then_some(d as u64)
}

/// A counter of one QP: (device, QP, counter name).
type Key = (String, u32, String);

/// What the previous sample saw of a counter.
#[derive(Debug, Clone, Copy)]
struct Last {
    value: u64,
    ts: i64,
    state: Option<u8>,
}

/// A device's ports as last read, and when.
#[derive(Default)]
struct KnownPorts {
    /// port -> network device
    ports: HashMap<u32, Option<String>>,
    read_at: i64,
}

/// How often a device's ports are read again while a QP names one they lack (a port the
/// kernel never lists must not cost a dump every sample).
const PORTS_REREAD_NS: i64 = 10_000_000_000;

/// Whether to read a device's ports (again): never read, or a QP names a port missing from
/// them and the last reading is old enough.
fn ports_to_read(known: Option<&KnownPorts>, qps: &[QpEntry], now: i64) -> bool {
    match known {
        None => true,
        Some(k) => {
            now - k.read_at >= PORTS_REREAD_NS
                && qps
                    .iter()
                    .any(|qp| qp.port.is_some_and(|p| !k.ports.contains_key(&p)))
        }
    }
}

/// One QP's readings in a sample, before they become rows.
struct Reading<'a> {
    device: &'a str,
    netdev: Option<&'a String>,
    qp: &'a QpEntry,
    counter_id: Option<u32>,
    source: &'static str,
    counter: &'a str,
    value: u64,
}

/// Reads the QPs each tick and turns their PSNs and bound counters into rows.
pub struct QpSampler {
    host: String,
    socket: Option<Socket>,
    seq: u32,
    /// (device index, name) -> its ports: read when a device first appears and again when a
    /// QP names a port they lack (a failed dump, a port added since); a device removed and
    /// created again gets a new index, so it is read afresh (and the old entry dropped).
    netdevs: HashMap<(u32, String), KnownPorts>,
    last: HashMap<Key, Last>,
}

impl QpSampler {
    /// A sampler; on a kernel without RDMA netlink (no `ib_core`) it samples nothing, and says
    /// so once.
    pub fn new(host: &str) -> Self {
        let socket = match Socket::open(NETLINK_RDMA) {
            Ok(s) => Some(s),
            Err(e) => {
                log::info!(
                    "qp_counters: no RDMA netlink on this kernel ({e}); the table stays empty"
                );
                None
            }
        };
        QpSampler {
            host: host.into(),
            socket,
            seq: 0,
            netdevs: HashMap::new(),
            last: HashMap::new(),
        }
    }

    fn dump(&mut self, cmd: u16, attrs: &[(u16, u32)]) -> anyhow::Result<Vec<Message>> {
        let Some(socket) = self.socket.as_mut() else {
            return Ok(Vec::new());
        };
        self.seq = self.seq.wrapping_add(1);
        let mut request = netlink::Request::new(nldev(cmd), netlink::NLM_F_DUMP, self.seq);
        for (kind, value) in attrs {
            request = request.attr_u32(*kind, *value);
        }
        match socket.dump(&request.bytes())? {
            Ok(messages) => Ok(messages),
            Err(errno) => anyhow::bail!(
                "RDMA netlink command {cmd}: {}",
                std::io::Error::from_raw_os_error(errno)
            ),
        }
    }

    /// The device's ports and their network devices, read again when a QP names a port the last
    /// reading lacks (at most every `PORTS_REREAD_NS`); a failed reading keeps the previous one.
    fn port_netdevs(
        &mut self,
        device: &Device,
        qps: &[QpEntry],
        now: i64,
    ) -> &HashMap<u32, Option<String>> {
        let key = (device.index, device.name.clone());
        if ports_to_read(self.netdevs.get(&key), qps, now) {
            let reading = self
                .dump(CMD_PORT_GET, &[(ATTR_DEV_INDEX, device.index)])
                .map(|m| parse_port_netdevs(&m));
            let known = self.netdevs.entry(key.clone()).or_default();
            known.read_at = now;
            match reading {
                Ok(ports) => known.ports = ports,
                Err(e) => log::debug!("qp_counters: ports of {}: {e:#}", device.name),
            }
        }
        &self.netdevs[&key].ports
    }

    /// Rows for QP counters seen for the first time and for those that changed (value or QP
    /// state) since the previous sample. A device whose dump fails is skipped this time.
    pub fn sample(&mut self, now: i64) -> Vec<QpCounterRow> {
        if self.socket.is_none() {
            return Vec::new();
        }
        let devices = match self.dump(CMD_GET, &[]) {
            Ok(m) => parse_devices(&m),
            Err(e) => {
                log::warn!("qp_counters: listing RDMA devices: {e:#}");
                return Vec::new();
            }
        };
        let mut rows = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut listed = std::collections::HashSet::new();
        for device in devices {
            let qps = match self.dump(CMD_RES_QP_GET, &[(ATTR_DEV_INDEX, device.index)]) {
                Ok(m) => parse_qps(&m),
                Err(e) => {
                    log::warn!("qp_counters: QPs of {}: {e:#}", device.name);
                    continue;
                }
            };
            // A kernel or driver without per-QP counters answers with nothing or an error.
            let counters = self
                .dump(
                    CMD_STAT_GET,
                    &[
                        (ATTR_DEV_INDEX, device.index),
                        (ATTR_STAT_RES, ATTR_RES_QP as u32),
                    ],
                )
                .map(|m| parse_counters(&m))
                .unwrap_or_default();
            listed.insert((device.index, device.name.clone()));
            let netdevs = self.port_netdevs(&device, &qps, now).clone();
            let mut readings = Vec::new();
            for qp in &qps {
                // A QP has no port until its move to INIT binds one (the kernel lists none
                // before), so its first rows may name no network device.
                let netdev = qp.port.and_then(|p| netdevs.get(&p)?.as_ref());
                let common = |source, counter, value, counter_id| Reading {
                    device: &device.name,
                    netdev,
                    qp,
                    counter_id,
                    source,
                    counter,
                    value,
                };
                if let Some(psn) = qp.sq_psn {
                    readings.push(common("psn", "sq_psn", psn as u64, None));
                }
                if let Some(psn) = qp.rq_psn {
                    readings.push(common("psn", "rq_psn", psn as u64, None));
                }
                for c in counters.iter().filter(|c| c.qps.contains(&qp.qp_num)) {
                    for (name, value) in &c.values {
                        readings.push(common("bound", name, *value, Some(c.id)));
                    }
                }
            }
            for r in readings {
                let key = (r.device.to_string(), r.qp.qp_num, r.counter.to_string());
                seen.insert(key.clone());
                let previous = self.last.insert(
                    key,
                    Last {
                        value: r.value,
                        ts: now,
                        state: r.qp.state,
                    },
                );
                let delta = match previous {
                    Some(p) if p.value == r.value && p.state == r.qp.state => continue,
                    Some(p) if r.source == "psn" => {
                        psn_progress(p.value as u32, p.state, r.value as u32, r.qp.state)
                            .map(|d| (d, p.ts))
                    }
                    Some(p) if r.value >= p.value => Some((r.value - p.value, p.ts)),
                    _ => None,
                };
                rows.push(QpCounterRow {
                    host: self.host.clone(),
                    ts: now,
                    device: r.device.to_string(),
                    port: r.qp.port,
                    netdev: r.netdev.cloned(),
                    qp_num: r.qp.qp_num,
                    qp_type: r.qp.qp_type.map(qp_type_name).unwrap_or("OTHER"),
                    // enum ib_qp_state numbers its states as verbs does
                    state: r
                        .qp
                        .state
                        .map(|s| crate::sources::verbs::qp_state(s.into())),
                    dest_qp_num: r.qp.dest_qp_num,
                    pid: r.qp.pid,
                    comm: r
                        .qp
                        .kern_name
                        .clone()
                        .or_else(|| r.qp.pid.and_then(process_name)),
                    counter_id: r.counter_id,
                    source: r.source,
                    counter: r.counter.to_string(),
                    value: r.value,
                    delta: delta.map(|(d, _)| d),
                    rate_per_s: delta.and_then(|(d, ts)| {
                        let dt = (now - ts) as f64 / 1e9;
                        (dt > 0.0).then(|| d as f64 / dt)
                    }),
                });
            }
        }
        // QPs destroyed since: forget them, so a reused QP number starts afresh
        self.last.retain(|k, _| seen.contains(k));
        // devices removed since (a device created again has a new index)
        self.netdevs.retain(|k, _| listed.contains(k));
        rows
    }
}

/// The command name of a process (the kernel reports user QPs by pid only).
fn process_name(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attribute list as the kernel lays it out (4-byte aligned, nests flagged).
    #[derive(Default)]
    struct Attrs(Vec<u8>);

    impl Attrs {
        fn put(mut self, kind: u16, value: &[u8]) -> Self {
            let len = 4 + value.len();
            self.0.extend_from_slice(&(len as u16).to_ne_bytes());
            self.0.extend_from_slice(&kind.to_ne_bytes());
            self.0.extend_from_slice(value);
            self.0.resize((self.0.len() + 3) & !3, 0);
            self
        }
        fn u32(self, kind: u16, v: u32) -> Self {
            self.put(kind, &v.to_ne_bytes())
        }
        fn u8(self, kind: u16, v: u8) -> Self {
            self.put(kind, &[v])
        }
        /// nla_put_u64_64bit: a zero-length pad attribute (type 0) may come first
        fn u64(self, kind: u16, v: u64) -> Self {
            self.put(0, &[]).put(kind, &v.to_ne_bytes())
        }
        fn str(self, kind: u16, s: &str) -> Self {
            let mut b = s.as_bytes().to_vec();
            b.push(0);
            self.put(kind, &b)
        }
        fn nest(self, kind: u16, inner: Attrs) -> Self {
            self.put(kind | 0x8000, &inner.0)
        }
        fn message(self) -> Message {
            Message {
                kind: nldev(CMD_RES_QP_GET),
                payload: self.0,
            }
        }
    }

    #[test]
    fn qps_are_read_from_a_dump_split_over_messages() {
        let rc = Attrs::default()
            .u32(ATTR_PORT_INDEX, 1)
            .u32(ATTR_RES_LQPN, 17)
            .u32(ATTR_RES_PID, 4242)
            .u32(ATTR_RES_RQPN, 18)
            .u32(ATTR_RES_RQ_PSN, 0x00ab_cdef)
            .u32(ATTR_RES_SQ_PSN, 12)
            .u8(25, 2) // path migration state: ignored
            .u8(ATTR_RES_TYPE, 2)
            .u8(ATTR_RES_STATE, 3);
        let gsi = Attrs::default()
            .u32(ATTR_PORT_INDEX, 1)
            .u32(ATTR_RES_LQPN, 1)
            .str(ATTR_RES_KERN_NAME, "ib_core")
            .u32(ATTR_RES_SQ_PSN, 0)
            .u8(ATTR_RES_TYPE, 1)
            .u8(ATTR_RES_STATE, 3);
        let head = || {
            Attrs::default()
                .u32(ATTR_DEV_INDEX, 3)
                .str(ATTR_DEV_NAME, "rxe0")
        };
        let first = head()
            .nest(ATTR_RES_QP, Attrs::default().nest(ATTR_RES_QP_ENTRY, gsi))
            .message();
        let second = head()
            .nest(ATTR_RES_QP, Attrs::default().nest(ATTR_RES_QP_ENTRY, rc))
            .message();
        let qps = parse_qps(&[first, second]);
        assert_eq!(qps.len(), 2);
        assert_eq!(
            (qps[0].qp_num, qps[0].qp_type, qps[0].kern_name.as_deref()),
            (1, Some(1), Some("ib_core"))
        );
        assert_eq!(
            qps[1],
            QpEntry {
                port: Some(1),
                qp_num: 17,
                dest_qp_num: Some(18),
                sq_psn: Some(12),
                rq_psn: Some(0x00ab_cdef),
                qp_type: Some(2),
                state: Some(3),
                pid: Some(4242),
                kern_name: None,
            }
        );
        assert_eq!(
            parse_devices(&[head().message()]),
            vec![Device {
                index: 3,
                name: "rxe0".into()
            }]
        );
    }

    /// The layout of fill_res_counter_entry: port, id, mode, the bound QPs, the hw counters
    /// (each u64 preceded by a pad attribute, as nla_put_u64_64bit writes it on x86).
    #[test]
    fn a_bound_counter_lists_its_qps_and_values() {
        let hw = |name: &str, v: u64| {
            Attrs::default()
                .str(ATTR_STAT_HWCOUNTER_ENTRY_NAME, name)
                .u64(ATTR_STAT_HWCOUNTER_ENTRY_VALUE, v)
        };
        let entry = Attrs::default()
            .u32(ATTR_PORT_INDEX, 1)
            .u32(ATTR_STAT_COUNTER_ID, 5)
            .u32(74, 1) // mode: auto
            .u8(ATTR_RES_TYPE, 2)
            .nest(
                ATTR_RES_QP,
                Attrs::default()
                    .nest(ATTR_RES_QP_ENTRY, Attrs::default().u32(ATTR_RES_LQPN, 17))
                    .nest(ATTR_RES_QP_ENTRY, Attrs::default().u32(ATTR_RES_LQPN, 19)),
            )
            .nest(
                ATTR_STAT_HWCOUNTERS,
                Attrs::default()
                    .nest(ATTR_STAT_HWCOUNTER_ENTRY, hw("out_of_sequence", 7))
                    .nest(
                        ATTR_STAT_HWCOUNTER_ENTRY,
                        hw("local_ack_timeout_err", 1 << 40),
                    ),
            );
        let msg = Attrs::default()
            .u32(ATTR_DEV_INDEX, 0)
            .str(ATTR_DEV_NAME, "mlx5_0")
            .nest(
                ATTR_STAT_COUNTER,
                Attrs::default().nest(ATTR_STAT_COUNTER_ENTRY, entry),
            )
            .message();
        assert_eq!(
            parse_counters(&[msg]),
            vec![BoundCounter {
                port: Some(1),
                id: 5,
                qps: vec![17, 19],
                values: vec![
                    ("out_of_sequence".into(), 7),
                    ("local_ack_timeout_err".into(), 1 << 40)
                ],
            }]
        );
    }

    #[test]
    fn psn_progress_wraps_at_24_bits_and_refuses_to_go_back() {
        let rts = Some(3);
        assert_eq!(psn_progress(10, rts, 110, rts), Some(100));
        assert_eq!(psn_progress(0xff_fff0, rts, 0x10, rts), Some(0x20));
        assert_eq!(psn_progress(500, rts, 400, rts), None);
    }

    #[test]
    fn the_psn_set_when_a_qp_connects_is_not_progress() {
        // INIT (PSN 0) -> RTS at the connection's random start PSN
        assert_eq!(psn_progress(0, Some(1), 7_930_369, Some(3)), None);
    }

    #[test]
    fn port_netdevs() {
        let msg = Attrs::default()
            .u32(ATTR_DEV_INDEX, 3)
            .u32(ATTR_PORT_INDEX, 1)
            .u32(50, 9)
            .str(ATTR_NDEV_NAME, "strxe0")
            .message();
        assert_eq!(
            parse_port_netdevs(&[msg]),
            HashMap::from([(1, Some("strxe0".to_string()))])
        );
        // an InfiniBand port: listed, without a network device
        let ib = Attrs::default()
            .u32(ATTR_DEV_INDEX, 3)
            .u32(ATTR_PORT_INDEX, 2)
            .message();
        assert_eq!(parse_port_netdevs(&[ib]), HashMap::from([(2, None)]));
    }

    #[test]
    fn ports_are_read_again_for_a_port_they_lack_at_most_every_ten_seconds() {
        let qp = |port| QpEntry {
            port,
            ..Default::default()
        };
        let known = KnownPorts {
            ports: HashMap::from([(1, Some("eth0".to_string())), (2, None)]),
            read_at: 100,
        };
        assert!(ports_to_read(None, &[], 0));
        let later = 100 + PORTS_REREAD_NS;
        // a QP without a port yet, on a listed port, on an InfiniBand port: nothing to read
        assert!(!ports_to_read(
            Some(&known),
            &[qp(None), qp(Some(1)), qp(Some(2))],
            later
        ));
        // a port the last reading lacks: read again, but not twice within ten seconds
        assert!(ports_to_read(Some(&known), &[qp(Some(3))], later));
        assert!(!ports_to_read(Some(&known), &[qp(Some(3))], later - 1));
    }
}
