//! Turning kernel events into table rows: timestamps to UTC, tuples to text, and attributing
//! flows to the process that closed them.
use std::collections::HashMap;

use scaletrace_common::*;

use super::tables::*;
use crate::{
    clock::ClockOffset,
    decode::{addr_string, comm_string, tcp_state_name},
};

/// TCP states entered by close() in process context: the current task owns the socket.
const TCP_FIN_WAIT1: u32 = 4;
const TCP_LAST_ACK: u32 = 9;

pub struct Assembler {
    /// Shared by the rows of the high-rate tables (`rtt`, `retransmits`): a `String` per row
    /// was an allocation and a free per event (6 % of the loader at 1 M events/s).
    host: std::sync::Arc<str>,
    clock: ClockOffset,
    /// Socket cookie -> (pid, comm) of the process that closed it.
    owners: HashMap<u64, (u32, String)>,
    netns: super::netns_names::NetnsNames,
    cgroups: crate::job_labels::CgroupPaths,
}

fn family_name(family: u16) -> &'static str {
    if family == AF_INET6 {
        // IPv4-mapped peers on a dual-stack socket are IPv4 traffic.
        "ipv6"
    } else {
        "ipv4"
    }
}

/// Family as the user sees it: an AF_INET6 socket talking to a v4-mapped peer is IPv4.
fn tuple_family(t: &FlowTuple) -> &'static str {
    if t.family == AF_INET6 && addr_string(t.family, &t.remote_addr).contains('.') {
        "ipv4"
    } else {
        family_name(t.family)
    }
}

/// When a flow ended (monotonic ns): its close, or the capture's end for a flow still open.
fn end_mono(s: &FlowStats, capture_end_mono: u64) -> u64 {
    if s.end_ns != 0 {
        s.end_ns
    } else {
        capture_end_mono
    }
}

/// A flow's timeout-stall and loss-recovery time at its end (`end_mono`): a stall or
/// recovery still open counts up to that end.
fn recovery_at_end(s: &FlowStats, capture_end_mono: u64) -> (u64, u64) {
    let end_mono = end_mono(s, capture_end_mono);
    let open_since = |at: u64| {
        if at != 0 {
            end_mono.saturating_sub(at)
        } else {
            0
        }
    };
    (
        s.rto_recovery_ns + open_since(s.rto_at_ns),
        s.loss_recovery_ns + open_since(s.recovery_at_ns),
    )
}

/// The counters a flow's last window closes with: the flow's final ones (read at its close,
/// or from the kernel at the end of the capture), as its `flows` row has them.
pub fn counters_at_end(s: &FlowStats, capture_end_mono: u64) -> WindowCounters {
    let (rto_recovery_ns, loss_recovery_ns) = recovery_at_end(s, capture_end_mono);
    WindowCounters {
        bytes_acked: s.bytes_acked,
        bytes_received: s.bytes_received,
        rto_recovery_ns,
        loss_recovery_ns,
        total_retrans: s.total_retrans,
        retrans_events: s.retrans_events,
        rto_count: s.rto_count,
        _pad: 0,
    }
}

/// A kernel counter, or null where this kernel does not give it.
fn measured(value: u32) -> Option<u32> {
    (value != NOT_MEASURED).then_some(value)
}

impl Assembler {
    pub fn new(host: String, clock: ClockOffset) -> Self {
        Assembler {
            host: host.into(),
            clock,
            owners: HashMap::new(),
            netns: super::netns_names::NetnsNames::new(std::path::Path::new("/run/netns")),
            cgroups: crate::job_labels::CgroupPaths::new(),
        }
    }

    /// The job labels of the cgroup v2 with this id (0: unknown, no labels).
    pub fn job(&mut self, cgroup_id: u64) -> crate::job_labels::JobLabels {
        self.cgroups.labels(cgroup_id)
    }

    /// Converts with `clock` from now on (the wall clock was stepped).
    pub fn set_clock(&mut self, clock: ClockOffset) {
        self.clock = clock;
    }

    fn utc(&self, mono_ns: u64) -> i64 {
        self.clock.to_utc_ns(mono_ns)
    }

    /// A flow from the kernel table. `capture_end_mono` is used for flows still open.
    pub fn flow(&mut self, s: &FlowStats, capture_end_mono: u64) -> FlowRow {
        let closed = s.end_ns != 0;
        let end_mono = end_mono(s, capture_end_mono);
        let owner = if closed {
            self.owners.remove(&s.cookie)
        } else {
            self.owners.get(&s.cookie).cloned()
        };
        let has_rtt = s.rtt_count > 0;
        let job = self.cgroups.labels(s.cgroup_id);
        let (rto_recovery_ns, loss_recovery_ns) = recovery_at_end(s, capture_end_mono);
        FlowRow {
            host: self.host.to_string(),
            flow_id: s.cookie,
            netns_cookie: s.netns_cookie,
            netns: self.netns.name(s.netns_cookie),
            cgroup: job.cgroup,
            pod_uid: job.pod_uid,
            container_id: job.container_id,
            slurm_job: job.slurm_job,
            family: tuple_family(&s.tuple),
            local_addr: addr_string(s.tuple.family, &s.tuple.local_addr),
            local_port: s.tuple.local_port,
            remote_addr: addr_string(s.tuple.family, &s.tuple.remote_addr),
            remote_port: s.tuple.remote_port,
            direction: match s.direction {
                DIRECTION_PASSIVE => "passive",
                DIRECTION_ACTIVE => "active",
                // an untracked connection: the close callback does not say who opened it
                _ => "unknown",
            },
            pid: owner.as_ref().map(|o| o.0),
            comm: owner.map(|o| o.1),
            // an untracked connection's start was never seen: its close stands for it
            start: self.utc(if s.untracked != 0 {
                s.end_ns
            } else {
                s.start_ns
            }),
            end: closed.then(|| self.utc(s.end_ns)),
            duration_ns: if s.untracked != 0 {
                0
            } else {
                end_mono.saturating_sub(s.start_ns) as i64
            },
            open_at_end: !closed,
            tracked: s.untracked == 0,
            adopted: s.adopted != 0,
            bytes_sent: s.bytes_acked,
            bytes_received: s.bytes_received,
            segs_out: s.segs_out,
            segs_in: s.segs_in,
            data_segs_out: s.data_segs_out,
            data_segs_in: s.data_segs_in,
            total_retrans: s.total_retrans,
            retransmit_events: s.retrans_events,
            rto_count: s.rto_count,
            rto_recovery_ns,
            loss_recovery_ns,
            dsack_dups: measured(s.dsack_dups),
            reord_seen: measured(s.reord_seen),
            rtt_updates: s.rtt_count,
            srtt_min_us: has_rtt.then_some(s.srtt_min_us),
            srtt_mean_us: has_rtt.then(|| s.srtt_sum_us as f64 / s.rtt_count as f64),
            srtt_max_us: has_rtt.then_some(s.srtt_max_us),
            srtt_last_us: has_rtt.then_some(s.srtt_last_us),
            // The kernel reports ~0 (u32::MAX) until the first RTT measurement.
            min_rtt_us: (s.min_rtt_us != u32::MAX && s.min_rtt_us != 0).then_some(s.min_rtt_us),
        }
    }

    pub fn rtt(&self, e: &RttSampleEvent) -> RttRow {
        let in_flight = (e.packets_out + e.retrans_out).saturating_sub(e.sacked_out + e.lost_out);
        RttRow {
            host: self.host.clone(),
            ts: self.utc(e.header.ts_ns),
            flow_id: e.cookie,
            srtt_us: e.srtt_us,
            min_rtt_us: e.min_rtt_us,
            snd_cwnd: e.snd_cwnd,
            snd_ssthresh: e.snd_ssthresh,
            packets_out: e.packets_out,
            retrans_out: e.retrans_out,
            lost_out: e.lost_out,
            sacked_out: e.sacked_out,
            packets_in_flight: in_flight,
            total_retrans: e.total_retrans,
            dsack_dups: measured(e.dsack_dups),
            reord_seen: measured(e.reord_seen),
            mss: e.mss,
            bytes_acked: e.bytes_acked,
            bytes_received: e.bytes_received,
            delivery_rate_bps: (e.rate_interval_us > 0).then(|| {
                e.rate_delivered as f64 * e.mss as f64 * 8.0 / (e.rate_interval_us as f64 / 1e6)
            }),
        }
    }

    /// A flow's window as a row, with the flow's counters at its end; `None` for a window that
    /// never opened (a flow without an RTT update, retransmit or timeout yet, or windows off).
    pub fn flow_window(
        &self,
        cookie: u64,
        w: &FlowWindow,
        closed: &WindowCounters,
    ) -> Option<FlowWindowRow> {
        if w.start_ns == 0 {
            return None;
        }
        let window_ns = w.end_ns.saturating_sub(w.start_ns);
        // The kernel's windows are whole multiples of the window of UTC as the clock was at the
        // start; after a step of the wall clock, the start is put on the nearest one of now.
        let start = self.utc(w.start_ns);
        let ts = match window_ns as i64 {
            0 => start,
            len => (start + len / 2).div_euclid(len) * len,
        };
        let has_rtt = w.count > 0;
        let quantile = |q| crate::sources::tcp::rtt_histogram::quantile_us(w, q);
        let opened = &w.opened;
        Some(FlowWindowRow {
            host: self.host.to_string(),
            ts,
            flow_id: cookie,
            window_ns,
            rtt_updates: w.count,
            srtt_min_us: has_rtt.then_some(w.min_us),
            srtt_mean_us: has_rtt.then(|| w.sum_us as f64 / w.count as f64),
            srtt_max_us: has_rtt.then_some(w.max_us),
            srtt_p50_us: quantile(0.5),
            srtt_p90_us: quantile(0.9),
            srtt_p99_us: quantile(0.99),
            rtt_buckets: w.buckets.to_vec(),
            bytes_sent: closed.bytes_acked.saturating_sub(opened.bytes_acked),
            bytes_received: closed.bytes_received.saturating_sub(opened.bytes_received),
            retrans_segments: closed.total_retrans.saturating_sub(opened.total_retrans),
            retransmit_events: closed.retrans_events.saturating_sub(opened.retrans_events),
            rto_count: closed.rto_count.saturating_sub(opened.rto_count),
            rto_recovery_ns: closed
                .rto_recovery_ns
                .saturating_sub(opened.rto_recovery_ns),
            loss_recovery_ns: closed
                .loss_recovery_ns
                .saturating_sub(opened.loss_recovery_ns),
        })
    }

    pub fn retransmit(&self, e: &RetransmitEvent) -> RetransmitRow {
        let t = &e.tuple;
        RetransmitRow {
            host: self.host.clone(),
            ts: self.utc(e.header.ts_ns),
            flow_id: (e.cookie != 0).then_some(e.cookie),
            kind: if e.synack != 0 {
                "synack"
            } else {
                "retransmit"
            },
            family: tuple_family(t),
            local_addr: addr_string(t.family, &t.local_addr),
            local_port: t.local_port,
            remote_addr: addr_string(t.family, &t.remote_addr),
            remote_port: t.remote_port,
            state: tcp_state_name(e.state),
        }
    }

    /// Converts a state change and remembers the owner when it ran in process context.
    pub fn state_change(&mut self, e: &StateChangeEvent) -> StateChangeRow {
        let comm = comm_string(&e.comm);
        if e.cookie != 0
            && (e.newstate == TCP_FIN_WAIT1 || e.newstate == TCP_LAST_ACK)
            && e.pid != 0
        {
            self.owners.insert(e.cookie, (e.pid, comm.clone()));
        }
        let t = &e.tuple;
        StateChangeRow {
            host: self.host.to_string(),
            ts: self.utc(e.header.ts_ns),
            flow_id: (e.cookie != 0).then_some(e.cookie),
            local_addr: addr_string(t.family, &t.local_addr),
            local_port: t.local_port,
            remote_addr: addr_string(t.family, &t.remote_addr),
            remote_port: t.remote_port,
            old_state: tcp_state_name(e.oldstate),
            new_state: tcp_state_name(e.newstate),
            pid: e.pid,
            comm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_tuple() -> FlowTuple {
        let mut t = FlowTuple {
            family: AF_INET,
            local_port: 40000,
            remote_port: 5201,
            ..Default::default()
        };
        t.local_addr[..4].copy_from_slice(&[10, 0, 0, 1]);
        t.remote_addr[..4].copy_from_slice(&[10, 0, 0, 2]);
        t
    }

    fn asm() -> Assembler {
        Assembler::new(
            "n1".into(),
            ClockOffset {
                offset_ns: 1_000_000_000,
                error_ns: 1,
            },
        )
    }

    #[test]
    fn a_window_row_has_what_changed_in_it_and_no_rtt_without_an_update() {
        let a = asm();
        let mut w = FlowWindow {
            // a 250 ms window; the clock's offset (1 s) puts its start on a whole multiple
            start_ns: 4_250_000_000,
            end_ns: 4_500_000_000,
            min_us: u32::MAX,
            opened: WindowCounters {
                bytes_acked: 1_000,
                total_retrans: 2,
                rto_count: 1,
                loss_recovery_ns: 7,
                ..Default::default()
            },
            ..Default::default()
        };
        let closed = WindowCounters {
            bytes_acked: 51_000,
            total_retrans: 5,
            rto_count: 1,
            loss_recovery_ns: 907,
            ..Default::default()
        };
        // opened by a retransmit: no RTT update in it
        let row = a.flow_window(9, &w, &closed).unwrap();
        assert_eq!((row.ts, row.window_ns), (5_250_000_000, 250_000_000));
        assert_eq!(
            (row.bytes_sent, row.retrans_segments, row.rto_count),
            (50_000, 3, 0)
        );
        assert_eq!(row.loss_recovery_ns, 900);
        assert_eq!(
            (row.rtt_updates, row.srtt_min_us, row.srtt_p50_us),
            (0, None, None)
        );
        for srtt in [100, 120, 4_000] {
            w.count += 1;
            w.sum_us += srtt as u64;
            w.min_us = w.min_us.min(srtt);
            w.max_us = w.max_us.max(srtt);
            w.buckets[rtt_bucket(srtt)] += 1;
        }
        let row = a.flow_window(9, &w, &closed).unwrap();
        assert_eq!((row.srtt_min_us, row.srtt_max_us), (Some(100), Some(4_000)));
        assert_eq!(row.srtt_mean_us, Some(1_406.666_666_666_666_7));
        assert_eq!(row.rtt_buckets.iter().sum::<u32>(), 3);
        // a window that never opened is no row
        assert!(a.flow_window(9, &FlowWindow::default(), &closed).is_none());
    }

    #[test]
    fn closed_flow_gets_owner_from_its_close_transition() {
        let mut a = asm();
        let close = StateChangeEvent {
            header: EventHeader {
                kind: EVENT_STATE_CHANGE,
                _pad: 0,
                ts_ns: 50,
            },
            tuple: v4_tuple(),
            cookie: 9,
            oldstate: 1,
            newstate: TCP_FIN_WAIT1,
            pid: 1234,
            _pad: 0,
            comm: *b"client\0\0\0\0\0\0\0\0\0\0",
        };
        let row = a.state_change(&close);
        assert_eq!((row.old_state, row.new_state), ("ESTABLISHED", "FIN_WAIT1"));
        assert_eq!(row.ts, 1_000_000_050);
        let stats = FlowStats {
            tuple: v4_tuple(),
            cookie: 9,
            start_ns: 10,
            end_ns: 110,
            bytes_acked: 5000,
            rtt_count: 4,
            srtt_sum_us: 400,
            srtt_min_us: 50,
            srtt_max_us: 200,
            srtt_last_us: 60,
            min_rtt_us: 40,
            direction: DIRECTION_ACTIVE,
            ..Default::default()
        };
        let flow = a.flow(&stats, 999);
        assert_eq!(flow.pid, Some(1234));
        assert_eq!(flow.comm.as_deref(), Some("client"));
        assert_eq!(flow.start, 1_000_000_010);
        assert_eq!(flow.end, Some(1_000_000_110));
        assert_eq!(flow.duration_ns, 100);
        assert!(!flow.open_at_end);
        assert_eq!(flow.srtt_mean_us, Some(100.0));
        assert_eq!(flow.min_rtt_us, Some(40));
        assert_eq!(
            (flow.local_addr.as_str(), flow.remote_port),
            ("10.0.0.1", 5201)
        );
        assert_eq!(flow.direction, "active");
        // The owner entry is consumed with the closed flow.
        assert!(a.owners.is_empty());
    }

    #[test]
    fn open_flow_uses_capture_end_and_has_no_rtt_stats_without_updates() {
        let mut a = asm();
        let stats = FlowStats {
            tuple: v4_tuple(),
            cookie: 1,
            start_ns: 100,
            srtt_min_us: u32::MAX,
            min_rtt_us: u32::MAX,
            direction: DIRECTION_PASSIVE,
            ..Default::default()
        };
        let flow = a.flow(&stats, 600);
        assert!(flow.open_at_end);
        assert_eq!(flow.end, None);
        assert_eq!(flow.duration_ns, 500);
        assert_eq!(flow.srtt_min_us, None);
        assert_eq!(flow.min_rtt_us, None);
        assert_eq!(flow.pid, None);
        assert_eq!(flow.direction, "passive");
    }

    #[test]
    fn softirq_transitions_do_not_set_the_owner() {
        let mut a = asm();
        let mut e = StateChangeEvent {
            cookie: 3,
            newstate: 5,
            pid: 77,
            ..Default::default()
        };
        e.tuple = v4_tuple();
        a.state_change(&e);
        assert!(a.owners.is_empty());
    }

    #[test]
    fn rtt_row_derives_in_flight_and_delivery_rate() {
        let a = asm();
        let e = RttSampleEvent {
            header: EventHeader {
                kind: EVENT_RTT_SAMPLE,
                _pad: 0,
                ts_ns: 5,
            },
            cookie: 2,
            packets_out: 10,
            retrans_out: 2,
            sacked_out: 3,
            lost_out: 1,
            mss: 1000,
            rate_delivered: 125,
            rate_interval_us: 1000,
            ..Default::default()
        };
        let r = a.rtt(&e);
        assert_eq!(r.packets_in_flight, 8);
        // 125 segments * 1000 B * 8 bit / 1 ms = 1 Gbit/s
        assert_eq!(r.delivery_rate_bps, Some(1e9));
        assert_eq!(r.ts, 1_000_000_005);
        let idle = a.rtt(&RttSampleEvent {
            rate_interval_us: 0,
            ..e
        });
        assert_eq!(idle.delivery_rate_bps, None);
    }

    #[test]
    fn retransmit_rows_name_kind_and_state() {
        let a = asm();
        let e = RetransmitEvent {
            tuple: v4_tuple(),
            cookie: 0,
            state: 3,
            synack: 1,
            ..Default::default()
        };
        let r = a.retransmit(&e);
        assert_eq!((r.kind, r.state, r.flow_id), ("synack", "SYN_RECV", None));
        let e = RetransmitEvent {
            cookie: 8,
            state: 1,
            synack: 0,
            ..e
        };
        let r = a.retransmit(&e);
        assert_eq!(
            (r.kind, r.state, r.flow_id),
            ("retransmit", "ESTABLISHED", Some(8))
        );
        assert_eq!(r.family, "ipv4");
    }
}
