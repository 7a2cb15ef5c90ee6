//! libibverbs uprobes on the control path that makes a QP (a "flow" of RDMA traffic): device,
//! protection domain, memory registration, CQ and QP creation, state changes, destruction.
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::{map, uprobe, uretprobe},
    maps::LruHashMap,
    programs::{ProbeContext, RetProbeContext},
};
use scaletrace_common::*;

use super::calls::{entry_exit_probes, hold, take};
use crate::emit::{emit, header, now_ns, read_user};

#[map]
static VERBS_PENDING: LruHashMap<CallKey, VerbsCallEvent> = LruHashMap::with_max_entries(16_384, 0);

#[inline(always)]
fn verbs_enter(ctx: &ProbeContext, op: u32) {
    let a = |n: usize| ctx.arg::<u64>(n).unwrap_or(0);
    let pid_tgid = bpf_get_current_pid_tgid();
    let mut e = VerbsCallEvent {
        header: header(EVENT_VERBS_CALL),
        pid_tgid,
        op,
        obj: a(0),
        // SAFETY: reads the current task's cgroup; takes no pointer.
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        ..VerbsCallEvent::default()
    };
    e.entry_ns = e.header.ts_ns;
    match op {
        VERBS_OPEN_DEVICE => {
            e.device = read_user(a(0) + verbs_abi::DEVICE_NAME).unwrap_or([0; 16]);
        }
        VERBS_REG_MR | VERBS_REG_MR_IOVA2 => e.length = a(2),
        VERBS_CREATE_CQ => e.cqe = a(1) as u32,
        VERBS_MODIFY_QP => {
            let (qp, attr) = (a(0), a(1));
            e.attr_mask = a(2) as u32;
            e.qp_num = read_user(qp + verbs_abi::QP_QP_NUM).unwrap_or(0);
            e.qp_state = read_user(attr + verbs_abi::QP_ATTR_QP_STATE).unwrap_or(0);
            e.dest_qp_num = read_user(attr + verbs_abi::QP_ATTR_DEST_QP_NUM).unwrap_or(0);
            e.dgid = read_user(attr + verbs_abi::QP_ATTR_DGID).unwrap_or([0; 16]);
        }
        VERBS_DESTROY_QP => {
            e.qp_num = read_user(a(0) + verbs_abi::QP_QP_NUM).unwrap_or(0);
            e.qp_type = read_user(a(0) + verbs_abi::QP_QP_TYPE).unwrap_or(0);
        }
        _ => {}
    }
    hold(&VERBS_PENDING, op, &e);
}

#[inline(always)]
fn verbs_exit(ctx: &RetProbeContext, op: u32) {
    let Some(mut e) = take(&VERBS_PENDING, op) else {
        return;
    };
    e.ret = ctx.ret::<u64>();
    e.header.ts_ns = now_ns();
    if op == VERBS_CREATE_QP {
        e.qp_num = read_user(e.ret + verbs_abi::QP_QP_NUM).unwrap_or(0);
        e.qp_type = read_user(e.ret + verbs_abi::QP_QP_TYPE).unwrap_or(0);
    }
    emit(EVENT_VERBS_CALL, e);
}

entry_exit_probes! {
    verbs_enter, verbs_exit;
    ibv_open_device, ibv_open_device_ret => VERBS_OPEN_DEVICE;
    ibv_alloc_pd, ibv_alloc_pd_ret => VERBS_ALLOC_PD;
    ibv_reg_mr, ibv_reg_mr_ret => VERBS_REG_MR;
    ibv_reg_mr_iova2, ibv_reg_mr_iova2_ret => VERBS_REG_MR_IOVA2;
    ibv_create_cq, ibv_create_cq_ret => VERBS_CREATE_CQ;
    ibv_create_qp, ibv_create_qp_ret => VERBS_CREATE_QP;
    ibv_modify_qp, ibv_modify_qp_ret => VERBS_MODIFY_QP;
    ibv_destroy_qp, ibv_destroy_qp_ret => VERBS_DESTROY_QP;
}
