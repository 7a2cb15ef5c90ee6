//! NCCL uprobes: one entry/return pair per API function, one event per call.
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{map, uprobe, uretprobe},
    maps::LruHashMap,
    programs::{ProbeContext, RetProbeContext},
};
use scaletrace_common::*;

use super::calls::{entry_exit_probes, hold, take};
use crate::emit::{emit, header, now_ns, read_user};

/// NCCL calls between entry and return.
#[map]
static NCCL_PENDING: LruHashMap<CallKey, NcclCallEvent> = LruHashMap::with_max_entries(16_384, 0);

#[inline(always)]
fn nccl_enter(ctx: &ProbeContext, op: u32) {
    let a = |n: usize| ctx.arg::<u64>(n).unwrap_or(0);
    let pid_tgid = bpf_get_current_pid_tgid();
    let mut e = NcclCallEvent {
        header: header(EVENT_NCCL_CALL),
        pid_tgid,
        op,
        peer: -1,
        nranks: -1,
        rank: -1,
        ..NcclCallEvent::default()
    };
    e.entry_ns = e.header.ts_ns;
    // Argument positions from nccl.h (System V ABI: the first six integer/pointer arguments).
    match op {
        NCCL_ALL_REDUCE | NCCL_REDUCE_SCATTER | NCCL_BROADCAST => {
            (e.sendbuff, e.recvbuff, e.count, e.datatype) = (a(0), a(1), a(2), a(3) as u32);
            if op == NCCL_BROADCAST {
                e.peer = a(4) as i32;
            } else {
                e.red_op = a(4) as u32;
            }
            e.comm = a(5);
        }
        NCCL_ALL_GATHER => {
            (e.sendbuff, e.recvbuff, e.count, e.datatype, e.comm) =
                (a(0), a(1), a(2), a(3) as u32, a(4));
        }
        NCCL_SEND | NCCL_RECV => {
            let buf = a(0);
            if op == NCCL_SEND {
                e.sendbuff = buf;
            } else {
                e.recvbuff = buf;
            }
            (e.count, e.datatype, e.peer, e.comm) = (a(1), a(2) as u32, a(3) as i32, a(4));
        }
        NCCL_COMM_INIT_RANK => {
            // (ncclComm_t* comm, int nranks, ncclUniqueId id, int rank): the 128-byte id goes on
            // the stack, so rank is the third register argument. `comm` holds the out-pointer
            // until the return probe reads the communicator through it.
            (e.comm, e.nranks, e.rank) = (a(0), a(1) as i32, a(2) as i32);
        }
        _ => {}
    }
    hold(&NCCL_PENDING, op, &e);
}

#[inline(always)]
fn nccl_exit(ctx: &RetProbeContext, op: u32) {
    let Some(mut e) = take(&NCCL_PENDING, op) else {
        return;
    };
    e.result = ctx.ret::<i32>();
    e.header.ts_ns = now_ns();
    if op == NCCL_COMM_INIT_RANK {
        e.comm = if e.comm == 0 {
            0
        } else {
            read_user::<u64>(e.comm).unwrap_or(0)
        };
    }
    emit(EVENT_NCCL_CALL, e);
}

entry_exit_probes! {
    nccl_enter, nccl_exit;
    nccl_all_reduce, nccl_all_reduce_ret => NCCL_ALL_REDUCE;
    nccl_all_gather, nccl_all_gather_ret => NCCL_ALL_GATHER;
    nccl_reduce_scatter, nccl_reduce_scatter_ret => NCCL_REDUCE_SCATTER;
    nccl_broadcast, nccl_broadcast_ret => NCCL_BROADCAST;
    nccl_send, nccl_send_ret => NCCL_SEND;
    nccl_recv, nccl_recv_ret => NCCL_RECV;
    nccl_group_start, nccl_group_start_ret => NCCL_GROUP_START;
    nccl_group_end, nccl_group_end_ret => NCCL_GROUP_END;
    nccl_comm_init_rank, nccl_comm_init_rank_ret => NCCL_COMM_INIT_RANK;
}
