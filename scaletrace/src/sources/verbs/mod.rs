//! The RDMA verbs source: naming what the libibverbs probes saw, and following each QP as a
//! flow; the kernel's per-QP counters (`qp_counters.rs`).
pub mod attach;
pub mod providers;
pub mod qp_counters;
pub mod tables;

use std::{collections::HashMap, net::Ipv6Addr};

use anyhow::{bail, Result};
use aya::Ebpf;
use scaletrace_common::{verbs_abi, *};

use crate::{
    columns::TableInfo,
    decode::{comm_string, read_record},
    hooks::Hooks,
    sources::{
        family::{interval_files, AttachTarget, ProbeFamily, RowContext, Rows},
        uprobes::{attach_found, CallTiming},
    },
};
use tables::{QpRow, QpSnapshotRow, QpTrafficRow, VerbsCallRow, VerbsCompletionRow};

/// The verbs family: libibverbs' control path (calls, and each QP followed as a flow) and the
/// providers' data path (sampled completions). Its per-QP totals live in a kernel table the
/// recorder reads at rotations and at the end (`qp_snapshots`, `qp_traffic`).
#[derive(Default)]
pub struct Verbs {
    qps: QpTracker,
}

interval_files! {
    /// The verbs files of one interval.
    pub struct VerbsFiles {
        calls: VerbsCallRow,
        qps: QpRow,
        completions: VerbsCompletionRow,
    }
}

/// A decoded verbs record.
pub enum VerbsRecord {
    Call(VerbsCallEvent),
    Completion(VerbsCompletionEvent),
}

impl ProbeFamily for Verbs {
    type Files = VerbsFiles;
    type Record = VerbsRecord;
    const LABEL: &'static str = "verbs";
    const RECORD_KINDS: &'static [u32] = &[EVENT_VERBS_CALL, EVENT_VERBS_COMPLETION];
    const LIBRARY_FLAGS: &'static [&'static str] = &[attach::VERBS.flag, attach::PROVIDER_FLAG];

    fn tables() -> Vec<TableInfo> {
        vec![
            TableInfo::of::<VerbsCallRow>(),
            TableInfo::of::<QpRow>(),
            TableInfo::of::<QpTrafficRow>(),
            TableInfo::of::<QpSnapshotRow>(),
            TableInfo::of::<VerbsCompletionRow>(),
        ]
    }

    fn attach(ebpf: &mut Ebpf, target: &AttachTarget, hooks: &mut Hooks) {
        attach_found(ebpf, &attach::VERBS, target, hooks);
        let explicit = target.libraries(attach::PROVIDER_FLAG);
        let providers = providers::find_providers(&explicit, target.pid);
        let providers = crate::sources::uprobes::libraries::each_file_once(providers);
        attach::attach_verbs_providers(ebpf, &providers, !explicit.is_empty(), target.pid, hooks);
    }

    fn decode(kind: u32, bytes: &[u8]) -> Result<VerbsRecord> {
        Ok(match kind {
            EVENT_VERBS_CALL => VerbsRecord::Call(read_record(bytes)?),
            EVENT_VERBS_COMPLETION => VerbsRecord::Completion(read_record(bytes)?),
            other => bail!("event kind {other} is not a verbs record"),
        })
    }

    fn record(
        &mut self,
        record: VerbsRecord,
        out: &mut Rows<VerbsFiles>,
        cx: &mut RowContext,
    ) -> Result<()> {
        let clock = cx.clock;
        match record {
            VerbsRecord::Call(e) => {
                let row = call_row(&e, cx.host, |m| clock.to_utc_ns(m));
                if let Some(qp) = self.qps.observe(&row, || (cx.job)(e.cgroup_id)) {
                    out.push(qp, |f| &mut f.qps)?;
                }
                out.push(row, |f| &mut f.calls)
            }
            VerbsRecord::Completion(e) => {
                let row = completion_row(&e, cx.host, |m| clock.to_utc_ns(m));
                out.push(row, |f| &mut f.completions)
            }
        }
    }

    /// QPs still alive at the end get their row (without a destroy time); one that cannot be
    /// written does not cost the others (the first error is returned).
    fn last_interval(&mut self, out: &mut Rows<VerbsFiles>) -> Result<()> {
        let mut result = Ok(());
        for qp in self.qps.remaining() {
            if let Err(e) = out.push(qp, |f| &mut f.qps) {
                result = result.and(Err(e));
            }
        }
        result
    }
}

pub fn op_name(op: u32) -> &'static str {
    VERBS_FUNCTIONS
        .iter()
        .find(|(o, _)| *o == op)
        .map(|(_, name)| *name)
        .unwrap_or("unknown")
}

/// enum ibv_qp_state.
pub fn qp_state(s: u32) -> &'static str {
    match s {
        0 => "RESET",
        1 => "INIT",
        2 => "RTR",
        3 => "RTS",
        4 => "SQD",
        5 => "SQE",
        6 => "ERR",
        _ => "UNKNOWN",
    }
}

/// enum ibv_qp_type.
pub fn qp_type(t: u32) -> &'static str {
    match t {
        2 => "RC",
        3 => "UC",
        4 => "UD",
        8 => "RAW_PACKET",
        9 => "XRC_SEND",
        10 => "XRC_RECV",
        0xff => "DRIVER",
        _ => "UNKNOWN",
    }
}

fn returns_pointer(op: u32) -> bool {
    !matches!(op, VERBS_MODIFY_QP | VERBS_DESTROY_QP)
}

pub fn call_row(e: &VerbsCallEvent, host: &str, utc: impl Fn(u64) -> i64) -> VerbsCallRow {
    let ok = if returns_pointer(e.op) {
        e.ret != 0
    } else {
        e.ret as i32 == 0
    };
    let modify = e.op == VERBS_MODIFY_QP;
    let has_qp = matches!(e.op, VERBS_CREATE_QP | VERBS_MODIFY_QP | VERBS_DESTROY_QP);
    let call = CallTiming::new(e.entry_ns, e.header.ts_ns, e.pid_tgid, utc);
    VerbsCallRow {
        host: host.into(),
        ts: call.ts,
        dur_ns: call.dur_ns,
        pid: call.pid,
        tid: call.tid,
        op: op_name(e.op),
        ok,
        device: (e.op == VERBS_OPEN_DEVICE).then(|| comm_string(&e.device)),
        qp_num: (has_qp && (ok || e.op != VERBS_CREATE_QP)).then_some(e.qp_num),
        qp_type: (ok && matches!(e.op, VERBS_CREATE_QP | VERBS_DESTROY_QP))
            .then(|| qp_type(e.qp_type)),
        qp_state: (modify && e.attr_mask & verbs_abi::MASK_STATE != 0)
            .then(|| qp_state(e.qp_state)),
        dest_qp_num: (modify && e.attr_mask & verbs_abi::MASK_DEST_QPN != 0)
            .then_some(e.dest_qp_num),
        dgid: (modify && e.attr_mask & verbs_abi::MASK_AV != 0)
            .then(|| Ipv6Addr::from(e.dgid).to_string()),
        attr_mask: modify.then_some(e.attr_mask),
        mr_length: matches!(e.op, VERBS_REG_MR | VERBS_REG_MR_IOVA2).then_some(e.length),
        cqe: (e.op == VERBS_CREATE_CQ).then_some(e.cqe),
    }
}

/// Follows QPs from create to destroy.
#[derive(Default)]
pub struct QpTracker {
    live: HashMap<(u32, u32), QpRow>,
}

impl QpTracker {
    /// Updates the QP the call concerns; returns a finished row at a successful destroy. `job`
    /// gives the creating process's job labels (asked for at a successful create only).
    pub fn observe(
        &mut self,
        row: &VerbsCallRow,
        job: impl FnOnce() -> crate::job_labels::JobLabels,
    ) -> Option<QpRow> {
        let key = (row.pid, row.qp_num?);
        match row.op {
            "ibv_create_qp" if row.ok => {
                let job = job();
                self.live.insert(
                    key,
                    QpRow {
                        host: row.host.clone(),
                        pid: row.pid,
                        cgroup: job.cgroup,
                        pod_uid: job.pod_uid,
                        container_id: job.container_id,
                        slurm_job: job.slurm_job,
                        qp_num: key.1,
                        qp_type: row.qp_type.unwrap_or("UNKNOWN"),
                        created: row.ts,
                        ..Default::default()
                    },
                );
                None
            }
            "ibv_modify_qp" if row.ok => {
                let qp = self.live.get_mut(&key)?;
                qp.modify_calls += 1;
                if let Some(state) = row.qp_state {
                    qp.last_state = Some(state);
                    if state == "RTS" {
                        qp.rts = Some(row.ts);
                    }
                }
                if row.dest_qp_num.is_some() {
                    qp.dest_qp_num = row.dest_qp_num;
                }
                if row.dgid.is_some() {
                    qp.dgid = row.dgid.clone();
                }
                None
            }
            "ibv_destroy_qp" if row.ok => {
                let mut qp = self.live.remove(&key)?;
                qp.destroyed = Some(row.ts);
                Some(qp)
            }
            _ => None,
        }
    }

    /// QPs still alive at the end of the capture.
    pub fn remaining(&mut self) -> Vec<QpRow> {
        let mut rows: Vec<QpRow> = self.live.drain().map(|(_, r)| r).collect();
        rows.sort_by_key(|r| (r.pid, r.qp_num));
        rows
    }
}

/// enum ibv_wc_status.
pub fn wc_status(s: u32) -> String {
    const NAMES: [&str; 23] = [
        "SUCCESS",
        "LOC_LEN_ERR",
        "LOC_QP_OP_ERR",
        "LOC_EEC_OP_ERR",
        "LOC_PROT_ERR",
        "WR_FLUSH_ERR",
        "MW_BIND_ERR",
        "BAD_RESP_ERR",
        "LOC_ACCESS_ERR",
        "REM_INV_REQ_ERR",
        "REM_ACCESS_ERR",
        "REM_OP_ERR",
        "RETRY_EXC_ERR",
        "RNR_RETRY_EXC_ERR",
        "LOC_RDD_VIOL_ERR",
        "REM_INV_RD_REQ_ERR",
        "REM_ABORT_ERR",
        "INV_EECN_ERR",
        "INV_EEC_STATE_ERR",
        "FATAL_ERR",
        "RESP_TIMEOUT_ERR",
        "GENERAL_ERR",
        "TM_ERR",
    ];
    NAMES
        .get(s as usize)
        .map(|n| n.to_string())
        .unwrap_or_else(|| format!("STATUS{s}"))
}

/// enum ibv_wc_opcode.
pub fn wc_opcode(op: u32) -> String {
    match op {
        0 => "SEND".into(),
        1 => "RDMA_WRITE".into(),
        2 => "RDMA_READ".into(),
        3 => "COMP_SWAP".into(),
        4 => "FETCH_ADD".into(),
        5 => "BIND_MW".into(),
        6 => "LOCAL_INV".into(),
        7 => "TSO".into(),
        128 => "RECV".into(),
        129 => "RECV_RDMA_WITH_IMM".into(),
        other => format!("OPCODE{other}"),
    }
}

/// Names of the posted opcodes in a bit set (enum ibv_wr_opcode).
pub fn wr_opcodes(bits: u64) -> String {
    const NAMES: [&str; 11] = [
        "RDMA_WRITE",
        "RDMA_WRITE_WITH_IMM",
        "SEND",
        "SEND_WITH_IMM",
        "RDMA_READ",
        "ATOMIC_CMP_AND_SWP",
        "ATOMIC_FETCH_AND_ADD",
        "LOCAL_INV",
        "BIND_MW",
        "SEND_WITH_INV",
        "TSO",
    ];
    (0..64)
        .filter(|b| bits & (1 << b) != 0)
        .map(|b| {
            NAMES
                .get(b)
                .map(|n| n.to_string())
                .unwrap_or_else(|| format!("OPCODE{b}"))
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub fn completion_row(
    e: &VerbsCompletionEvent,
    host: &str,
    utc: impl Fn(u64) -> i64,
) -> VerbsCompletionRow {
    VerbsCompletionRow {
        host: host.into(),
        ts: utc(e.header.ts_ns),
        pid: e.tgid,
        qp_num: e.qp_num,
        wr_id: e.wr_id,
        status: wc_status(e.status),
        opcode: wc_opcode(e.opcode),
        byte_len: e.byte_len,
        latency_ns: (e.latency_ns > 0).then_some(e.latency_ns),
    }
}

pub fn traffic_row(key: &QpKey, t: &QpTraffic, host: &str) -> QpTrafficRow {
    let measured = t.latency_count > 0;
    QpTrafficRow {
        host: host.into(),
        pid: key.tgid,
        qp_num: key.qp_num,
        post_calls: t.post_calls,
        wrs_posted: t.wrs_posted,
        bytes_posted: t.bytes_posted,
        completions: t.completions,
        completion_errors: t.completion_errors,
        bytes_completed: t.bytes_completed,
        latency_count: t.latency_count,
        latency_mean_ns: measured.then(|| t.latency_sum_ns as f64 / t.latency_count as f64),
        latency_min_ns: measured.then_some(t.latency_min_ns),
        latency_max_ns: measured.then_some(t.latency_max_ns),
        opcodes: wr_opcodes(t.opcodes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_labels::JobLabels;

    fn event(op: u32) -> VerbsCallEvent {
        VerbsCallEvent {
            header: EventHeader {
                kind: EVENT_VERBS_CALL,
                _pad: 0,
                ts_ns: 20,
            },
            entry_ns: 10,
            pid_tgid: 7 << 32 | 8,
            op,
            ..Default::default()
        }
    }

    #[test]
    fn a_qp_from_create_to_destroy() {
        let utc = |m: u64| m as i64;
        let mut t = QpTracker::default();
        let create = call_row(
            &VerbsCallEvent {
                ret: 0xabc,
                qp_num: 0x1234,
                qp_type: 2,
                ..event(VERBS_CREATE_QP)
            },
            "h",
            utc,
        );
        assert_eq!(
            (create.ok, create.qp_num, create.qp_type),
            (true, Some(0x1234), Some("RC"))
        );
        assert!(t.observe(&create, JobLabels::default).is_none());
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 0, 0, 2]);
        let rtr = call_row(
            &VerbsCallEvent {
                ret: 0,
                qp_num: 0x1234,
                qp_state: 2,
                dest_qp_num: 0x5678,
                dgid: gid,
                attr_mask: verbs_abi::MASK_STATE | verbs_abi::MASK_AV | verbs_abi::MASK_DEST_QPN,
                ..event(VERBS_MODIFY_QP)
            },
            "h",
            utc,
        );
        assert_eq!(
            (rtr.qp_state, rtr.dest_qp_num, rtr.dgid.as_deref()),
            (Some("RTR"), Some(0x5678), Some("::ffff:10.0.0.2"))
        );
        t.observe(&rtr, JobLabels::default);
        let rts = call_row(
            &VerbsCallEvent {
                qp_num: 0x1234,
                qp_state: 3,
                attr_mask: verbs_abi::MASK_STATE,
                ..event(VERBS_MODIFY_QP)
            },
            "h",
            utc,
        );
        assert_eq!(
            (rts.dest_qp_num, rts.dgid.as_deref()),
            (None, None),
            "fields outside the mask are not reported"
        );
        t.observe(&rts, JobLabels::default);
        let failed = call_row(
            &VerbsCallEvent {
                ret: u64::MAX,
                qp_num: 0x1234,
                ..event(VERBS_DESTROY_QP)
            },
            "h",
            utc,
        );
        assert!(!failed.ok && t.observe(&failed, JobLabels::default).is_none());
        let destroy = call_row(
            &VerbsCallEvent {
                ret: 0,
                qp_num: 0x1234,
                ..event(VERBS_DESTROY_QP)
            },
            "h",
            utc,
        );
        let qp = t.observe(&destroy, JobLabels::default).unwrap();
        assert_eq!(
            (qp.pid, qp.qp_num, qp.dest_qp_num, qp.last_state),
            (7, 0x1234, Some(0x5678), Some("RTS"))
        );
        assert_eq!(
            (qp.created, qp.rts, qp.destroyed, qp.modify_calls),
            (10, Some(10), Some(10), 2)
        );
        assert!(t.remaining().is_empty());
    }

    #[test]
    fn data_path_rows() {
        let t = QpTraffic {
            post_calls: 2,
            wrs_posted: 3,
            bytes_posted: 3000,
            completions: 3,
            completion_errors: 1,
            latency_count: 2,
            latency_sum_ns: 300,
            latency_min_ns: 100,
            latency_max_ns: 200,
            opcodes: 1 << 2 | 1,
            ..Default::default()
        };
        let r = traffic_row(
            &QpKey {
                tgid: 9,
                qp_num: 0x44,
            },
            &t,
            "h",
        );
        assert_eq!(
            (r.latency_mean_ns, r.latency_min_ns, r.opcodes.as_str()),
            (Some(150.0), Some(100), "RDMA_WRITE,SEND")
        );
        let none = traffic_row(
            &QpKey::default(),
            &QpTraffic {
                latency_min_ns: u64::MAX,
                ..Default::default()
            },
            "h",
        );
        assert_eq!((none.latency_mean_ns, none.latency_min_ns), (None, None));
        let c = completion_row(
            &VerbsCompletionEvent {
                status: 12,
                opcode: 128,
                latency_ns: 0,
                ..Default::default()
            },
            "h",
            |m| m as i64,
        );
        assert_eq!(
            (c.status.as_str(), c.opcode.as_str(), c.latency_ns),
            ("RETRY_EXC_ERR", "RECV", None)
        );
    }

    #[test]
    fn failed_create_and_other_calls() {
        let utc = |m: u64| m as i64;
        let failed = call_row(
            &VerbsCallEvent {
                ret: 0,
                ..event(VERBS_CREATE_QP)
            },
            "h",
            utc,
        );
        assert_eq!((failed.ok, failed.qp_num), (false, None));
        let mut dev = [0u8; 16];
        dev[..6].copy_from_slice(b"mlx5_0");
        let open = call_row(
            &VerbsCallEvent {
                ret: 1,
                device: dev,
                ..event(VERBS_OPEN_DEVICE)
            },
            "h",
            utc,
        );
        assert_eq!(
            (open.device.as_deref(), open.dur_ns, open.pid, open.tid),
            (Some("mlx5_0"), 10, 7, 8)
        );
        let mr = call_row(
            &VerbsCallEvent {
                ret: 1,
                length: 1 << 20,
                ..event(VERBS_REG_MR)
            },
            "h",
            utc,
        );
        assert_eq!(mr.mr_length, Some(1 << 20));
        let mut t = QpTracker::default();
        t.observe(
            &call_row(
                &VerbsCallEvent {
                    ret: 1,
                    qp_num: 5,
                    qp_type: 4,
                    ..event(VERBS_CREATE_QP)
                },
                "h",
                utc,
            ),
            JobLabels::default,
        );
        let left = t.remaining();
        assert_eq!(
            (left.len(), left[0].qp_type, left[0].destroyed),
            (1, "UD", None)
        );
    }
}
