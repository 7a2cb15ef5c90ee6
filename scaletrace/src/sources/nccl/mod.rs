//! The NCCL source: naming what the uprobes on its public API saw (attached by `attach.rs`, the
//! libraries found by `uprobes/libraries.rs`).
pub mod attach;
pub mod tables;

use anyhow::Result;
use aya::Ebpf;
use scaletrace_common::*;

use crate::{
    columns::TableInfo,
    decode::read_record,
    hooks::Hooks,
    sources::{
        family::{interval_files, AttachTarget, ProbeFamily, RowContext, Rows},
        uprobes::{attach_found, CallTiming},
    },
};
use tables::NcclCallRow;

/// The NCCL family: one row per call of NCCL's public API.
pub struct Nccl;

interval_files! {
    /// NCCL's file of one interval.
    pub struct NcclFiles {
        calls: NcclCallRow,
    }
}

impl ProbeFamily for Nccl {
    type Files = NcclFiles;
    type Record = NcclCallEvent;
    const LABEL: &'static str = "nccl";
    const RECORD_KINDS: &'static [u32] = &[EVENT_NCCL_CALL];
    const LIBRARY_FLAGS: &'static [&'static str] = &[attach::NCCL.flag];

    fn tables() -> Vec<TableInfo> {
        vec![TableInfo::of::<NcclCallRow>()]
    }

    fn attach(ebpf: &mut Ebpf, target: &AttachTarget, hooks: &mut Hooks) {
        attach_found(ebpf, &attach::NCCL, target, hooks);
    }

    fn decode(_kind: u32, bytes: &[u8]) -> Result<NcclCallEvent> {
        read_record(bytes)
    }

    fn record(
        &mut self,
        e: NcclCallEvent,
        out: &mut Rows<NcclFiles>,
        cx: &mut RowContext,
    ) -> Result<()> {
        let clock = cx.clock;
        out.push(call_row(&e, cx.host, |m| clock.to_utc_ns(m)), |f| {
            &mut f.calls
        })
    }
}

pub fn op_name(op: u32) -> &'static str {
    match op {
        NCCL_ALL_REDUCE => "AllReduce",
        NCCL_ALL_GATHER => "AllGather",
        NCCL_REDUCE_SCATTER => "ReduceScatter",
        NCCL_BROADCAST => "Broadcast",
        NCCL_SEND => "Send",
        NCCL_RECV => "Recv",
        NCCL_GROUP_START => "GroupStart",
        NCCL_GROUP_END => "GroupEnd",
        NCCL_COMM_INIT_RANK => "CommInitRank",
        _ => "Unknown",
    }
}

/// ncclDataType_t: name and element size.
pub fn datatype(dt: u32) -> Option<(&'static str, u64)> {
    Some(match dt {
        0 => ("ncclInt8", 1),
        1 => ("ncclUint8", 1),
        2 => ("ncclInt32", 4),
        3 => ("ncclUint32", 4),
        4 => ("ncclInt64", 8),
        5 => ("ncclUint64", 8),
        6 => ("ncclFloat16", 2),
        7 => ("ncclFloat32", 4),
        8 => ("ncclFloat64", 8),
        9 => ("ncclBfloat16", 2),
        10 => ("ncclFloat8e4m3", 1),
        11 => ("ncclFloat8e5m2", 1),
        _ => return None,
    })
}

pub fn red_op(op: u32) -> String {
    match op {
        0 => "ncclSum".into(),
        1 => "ncclProd".into(),
        2 => "ncclMax".into(),
        3 => "ncclMin".into(),
        4 => "ncclAvg".into(),
        other => format!("custom{other}"),
    }
}

pub fn result_name(r: i32) -> String {
    match r {
        0 => "ncclSuccess".into(),
        1 => "ncclUnhandledCudaError".into(),
        2 => "ncclSystemError".into(),
        3 => "ncclInternalError".into(),
        4 => "ncclInvalidArgument".into(),
        5 => "ncclInvalidUsage".into(),
        6 => "ncclRemoteError".into(),
        7 => "ncclInProgress".into(),
        other => format!("ncclResult{other}"),
    }
}

/// A row for one call; `utc` converts kernel monotonic ns.
pub fn call_row(e: &NcclCallEvent, host: &str, utc: impl Fn(u64) -> i64) -> NcclCallRow {
    let has_buffer = matches!(
        e.op,
        NCCL_ALL_REDUCE
            | NCCL_ALL_GATHER
            | NCCL_REDUCE_SCATTER
            | NCCL_BROADCAST
            | NCCL_SEND
            | NCCL_RECV
    );
    let dt = has_buffer.then(|| datatype(e.datatype)).flatten();
    let reduces = matches!(e.op, NCCL_ALL_REDUCE | NCCL_REDUCE_SCATTER);
    let init = e.op == NCCL_COMM_INIT_RANK;
    let call = CallTiming::new(e.entry_ns, e.header.ts_ns, e.pid_tgid, utc);
    NcclCallRow {
        host: host.into(),
        ts: call.ts,
        dur_ns: call.dur_ns,
        pid: call.pid,
        tid: call.tid,
        op: op_name(e.op),
        result: result_name(e.result),
        comm: e.comm,
        rank: init.then_some(e.rank as i64),
        nranks: init.then_some(e.nranks as i64),
        count: has_buffer.then_some(e.count),
        datatype: dt.map(|d| d.0.to_string()),
        red_op: reduces.then(|| red_op(e.red_op)),
        peer: (e.peer >= 0 && matches!(e.op, NCCL_SEND | NCCL_RECV | NCCL_BROADCAST))
            .then_some(e.peer as i64),
        bytes: dt.map(|d| e.count.saturating_mul(d.1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allreduce_row() {
        let e = NcclCallEvent {
            header: EventHeader {
                kind: EVENT_NCCL_CALL,
                _pad: 0,
                ts_ns: 1_500,
            },
            entry_ns: 1_000,
            pid_tgid: (42u64 << 32) | 43,
            comm: 0xdead,
            count: 1024,
            op: NCCL_ALL_REDUCE,
            result: 4,
            datatype: 7,
            red_op: 0,
            peer: -1,
            ..Default::default()
        };
        let r = call_row(&e, "n1", |m| m as i64 + 10);
        assert_eq!((r.ts, r.dur_ns, r.pid, r.tid), (1_010, 500, 42, 43));
        assert_eq!(
            (r.op, r.result.as_str()),
            ("AllReduce", "ncclInvalidArgument")
        );
        assert_eq!(
            (r.datatype.as_deref(), r.bytes, r.red_op.as_deref()),
            (Some("ncclFloat32"), Some(4096), Some("ncclSum"))
        );
        assert_eq!((r.peer, r.rank), (None, None));
    }

    #[test]
    fn init_and_send_rows() {
        let init = NcclCallEvent {
            op: NCCL_COMM_INIT_RANK,
            rank: 2,
            nranks: 4,
            peer: -1,
            ..Default::default()
        };
        let r = call_row(&init, "n", |m| m as i64);
        assert_eq!(
            (r.rank, r.nranks, r.count, r.bytes),
            (Some(2), Some(4), None, None)
        );
        let send = NcclCallEvent {
            op: NCCL_SEND,
            peer: 1,
            count: 10,
            datatype: 9,
            ..Default::default()
        };
        let r = call_row(&send, "n", |m| m as i64);
        assert_eq!((r.peer, r.bytes, r.red_op), (Some(1), Some(20), None));
    }
}
