//! Decoding ring buffer records: TCP's into typed events; a probe family's are handed to the
//! family as they came (`sources::family`), which decodes its own.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::{bail, Result};
use scaletrace_common::*;

/// The two records that carry a whole flow window (648 and 496 bytes, a few per flow) are
/// boxed: every event moves by value, and the enum is as large as its largest variant, so
/// unboxed they would make each of the millions of RTT samples a 600-byte copy.
#[derive(Debug, Clone)]
pub enum Event {
    FlowEnd(Box<FlowEndEvent>),
    RttSample(RttSampleEvent),
    FlowWindow(Box<FlowWindowEvent>),
    Retransmit(RetransmitEvent),
    StateChange(StateChangeEvent),
    /// A record of another kind: a probe family's.
    Probe(ProbeRecord),
}

/// A probe family's record, its bytes copied out of the ring.
#[derive(Debug, Clone)]
pub struct ProbeRecord {
    pub kind: u32,
    pub bytes: Vec<u8>,
}

/// The record in `bytes` as its event struct (`T`, one of scaletrace-common's).
pub fn read_record<T: Copy>(bytes: &[u8]) -> Result<T> {
    if bytes.len() < std::mem::size_of::<T>() {
        bail!(
            "record of {} bytes is shorter than {} ({} bytes)",
            bytes.len(),
            std::any::type_name::<T>(),
            std::mem::size_of::<T>()
        );
    }
    // SAFETY: length checked; T is repr(C) plain data valid for any bit pattern; the ring buffer
    // gives only 8-byte alignment guarantees, hence read_unaligned.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// Decodes one ring buffer record. Unknown kinds are an error: the object and the loader are
/// built together, so one would mean memory corruption, not version skew (a kind below
/// `EVENT_KINDS` that no family claims is found where the families are: `record/sinks.rs`).
pub fn decode(bytes: &[u8]) -> Result<Event> {
    let header: EventHeader = read_record(bytes)?;
    Ok(match header.kind {
        EVENT_FLOW_END => Event::FlowEnd(Box::new(read_record(bytes)?)),
        EVENT_RTT_SAMPLE => Event::RttSample(read_record(bytes)?),
        EVENT_FLOW_WINDOW => Event::FlowWindow(Box::new(read_record(bytes)?)),
        EVENT_RETRANSMIT => Event::Retransmit(read_record(bytes)?),
        EVENT_STATE_CHANGE => Event::StateChange(read_record(bytes)?),
        kind if kind < EVENT_KINDS => Event::Probe(ProbeRecord {
            kind,
            bytes: bytes.to_vec(),
        }),
        other => bail!("unknown event kind {other}"),
    })
}

/// Address of one side of a tuple.
pub fn ip_addr(family: u16, bytes: &[u8; 16]) -> Option<IpAddr> {
    match family {
        AF_INET => Some(IpAddr::V4(Ipv4Addr::new(
            bytes[0], bytes[1], bytes[2], bytes[3],
        ))),
        AF_INET6 => {
            let v6 = Ipv6Addr::from(*bytes);
            // Dual-stack sockets carry IPv4 peers as ::ffff:a.b.c.d; show them as IPv4 so one
            // flow has one spelling whichever socket family carried it.
            Some(match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6(v6),
            })
        }
        _ => None,
    }
}

pub fn addr_string(family: u16, bytes: &[u8; 16]) -> String {
    ip_addr(family, bytes)
        .map(|a| a.to_string())
        .unwrap_or_else(|| format!("family{family}"))
}

/// A NUL-padded kernel `comm` as text.
pub fn comm_string(comm: &[u8; 16]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// TCP state names, include/net/tcp_states.h numbering.
pub fn tcp_state_name(state: u32) -> &'static str {
    match state {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        12 => "NEW_SYN_RECV",
        13 => "BOUND_INACTIVE",
        _ => "UNKNOWN",
    }
}

/// An event as the ring buffer carries it: its bytes (tests).
#[cfg(test)]
pub fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: T is one of the repr(C) plain-data events: all of its bytes are initialised.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
        .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_kind() {
        let mut rtt = RttSampleEvent::default();
        rtt.header.kind = EVENT_RTT_SAMPLE;
        rtt.header.ts_ns = 42;
        rtt.srtt_us = 1234;
        rtt.cookie = 7;
        match decode(&bytes_of(&rtt)).unwrap() {
            Event::RttSample(e) => {
                assert_eq!(e.header.ts_ns, 42);
                assert_eq!(e.srtt_us, 1234);
                assert_eq!(e.cookie, 7);
            }
            other => panic!("wrong kind {other:?}"),
        }
        let mut rt = RetransmitEvent::default();
        rt.header.kind = EVENT_RETRANSMIT;
        rt.tuple.local_port = 5201;
        assert!(
            matches!(decode(&bytes_of(&rt)).unwrap(), Event::Retransmit(e) if e.tuple.local_port == 5201)
        );
        let mut end = FlowEndEvent::default();
        end.header.kind = EVENT_FLOW_END;
        end.stats.bytes_acked = 99;
        assert!(
            matches!(decode(&bytes_of(&end)).unwrap(), Event::FlowEnd(e) if e.stats.bytes_acked == 99)
        );
        let mut hist = FlowWindowEvent::default();
        hist.header.kind = EVENT_FLOW_WINDOW;
        hist.cookie = 5;
        hist.window.buckets[RTT_HIST_BUCKETS - 1] = 3;
        assert!(
            matches!(decode(&bytes_of(&hist)).unwrap(), Event::FlowWindow(e) if e.cookie == 5 && e.window.buckets[RTT_HIST_BUCKETS - 1] == 3)
        );
        let mut st = StateChangeEvent::default();
        st.header.kind = EVENT_STATE_CHANGE;
        st.newstate = 4;
        assert!(
            matches!(decode(&bytes_of(&st)).unwrap(), Event::StateChange(e) if e.newstate == 4)
        );
        // every other kind is a probe family's, handed over as it came
        for kind in (0..EVENT_KINDS).filter(|k| {
            ![
                EVENT_FLOW_END,
                EVENT_RTT_SAMPLE,
                EVENT_FLOW_WINDOW,
                EVENT_RETRANSMIT,
                EVENT_STATE_CHANGE,
            ]
            .contains(k)
        }) {
            let mut nccl = NcclCallEvent::default();
            nccl.header.kind = kind;
            nccl.count = 1 << 20;
            let bytes = bytes_of(&nccl);
            assert!(
                matches!(decode(&bytes).unwrap(), Event::Probe(r) if r.kind == kind && r.bytes == bytes)
            );
        }
    }

    #[test]
    fn rejects_short_and_unknown_records() {
        assert!(decode(&[1, 0, 0]).is_err());
        let mut rtt = RttSampleEvent::default();
        rtt.header.kind = EVENT_RTT_SAMPLE;
        let b = bytes_of(&rtt);
        assert!(decode(&b[..40])
            .unwrap_err()
            .to_string()
            .contains("shorter"));
        let h = EventHeader {
            kind: 99,
            ..Default::default()
        };
        assert!(decode(&bytes_of(&h))
            .unwrap_err()
            .to_string()
            .contains("unknown event kind 99"));
    }

    #[test]
    fn formats_addresses() {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[10, 0, 0, 1]);
        assert_eq!(addr_string(AF_INET, &a), "10.0.0.1");
        let mapped: [u8; 16] = "::ffff:192.168.1.2".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(addr_string(AF_INET6, &mapped), "192.168.1.2");
        let v6: [u8; 16] = "fd00::1".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(addr_string(AF_INET6, &v6), "fd00::1");
        assert_eq!(comm_string(b"iperf3\0\0\0\0\0\0\0\0\0\0"), "iperf3");
        assert_eq!(tcp_state_name(1), "ESTABLISHED");
    }
}
