//! The verbs data path: the provider's post_send and poll_cq, aggregated per QP in the kernel
//! (`QP_TRAFFIC`), with a sample of completions sent as events.
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{map, uprobe, uretprobe},
    maps::LruHashMap,
    programs::{ProbeContext, RetProbeContext},
};
use scaletrace_common::*;

use crate::emit::{count, emit, now_ns, read_user};

#[map]
static QP_TRAFFIC: LruHashMap<QpKey, QpTraffic> = LruHashMap::with_max_entries(MAX_QPS, 0);

/// Post time of each work request in flight, for completion latency.
#[map]
static WR_POSTED: LruHashMap<WrKey, u64> = LruHashMap::with_max_entries(65_536, 0);

/// The wc array of a poll_cq call in progress, by thread.
#[map]
static POLL_PENDING: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16_384, 0);

#[inline(always)]
fn qp_traffic(key: &QpKey) -> Option<&'static mut QpTraffic> {
    if let Some(t) = QP_TRAFFIC.get_ptr_mut(key) {
        // SAFETY: a valid element of the map. Two threads of a process posting on one QP at
        // once may lose an increment, and a table full of QPs may recycle this element for
        // another QP (the loader reports evictions): counters, not invariants.
        return Some(unsafe { &mut *t });
    }
    let fresh = QpTraffic {
        latency_min_ns: u64::MAX,
        ..QpTraffic::default()
    };
    QP_TRAFFIC.insert(key, &fresh, 0).ok()?;
    // LRU: a full table evicts the least recently used QP, traffic and all; the loader tells
    // how many from this count and what is left at the end.
    count(STAT_QP_TRACKED);
    // SAFETY: as above.
    QP_TRAFFIC.get_ptr_mut(key).map(|t| unsafe { &mut *t })
}

#[inline(always)]
fn post_send(ctx: &ProbeContext) {
    let (qp, first_wr) = (
        ctx.arg::<u64>(0).unwrap_or(0),
        ctx.arg::<u64>(1).unwrap_or(0),
    );
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let Some(qp_num) = read_user::<u32>(qp + verbs_abi::QP_QP_NUM) else {
        return;
    };
    let key = QpKey { tgid, qp_num };
    let Some(traffic) = qp_traffic(&key) else {
        return;
    };
    let now = now_ns();
    traffic.post_calls += 1;
    let mut wr = first_wr;
    let mut i = 0;
    while i < verbs_abi::MAX_WRS {
        if wr == 0 {
            break;
        }
        let wr_id: u64 = read_user(wr + verbs_abi::WR_ID).unwrap_or(0);
        let sg_list: u64 = read_user(wr + verbs_abi::WR_SG_LIST).unwrap_or(0);
        let num_sge: i32 = read_user(wr + verbs_abi::SEND_WR_NUM_SGE).unwrap_or(0);
        let opcode: u32 = read_user(wr + verbs_abi::SEND_WR_OPCODE).unwrap_or(0);
        let mut j = 0;
        while j < verbs_abi::MAX_SGES {
            if j as i32 >= num_sge {
                break;
            }
            let len: u32 =
                read_user(sg_list + j * verbs_abi::SGE_SIZE + verbs_abi::SGE_LENGTH).unwrap_or(0);
            traffic.bytes_posted += len as u64;
            j += 1;
        }
        traffic.wrs_posted += 1;
        if opcode < 64 {
            traffic.opcodes |= 1 << opcode;
        }
        let _ = WR_POSTED.insert(
            &WrKey {
                tgid,
                qp_num,
                wr_id,
            },
            &now,
            0,
        );
        wr = read_user(wr + verbs_abi::WR_NEXT).unwrap_or(0);
        i += 1;
    }
}

#[inline(always)]
fn poll_cq_exit(ctx: &RetProbeContext) {
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: copied out at once; keyed by this thread.
    let Some(wc_base) = (unsafe { POLL_PENDING.get(&pid_tgid) }).copied() else {
        return;
    };
    let _ = POLL_PENDING.remove(&pid_tgid);
    let polled = ctx.ret::<i32>();
    let tgid = (pid_tgid >> 32) as u32;
    let now = now_ns();
    let every = config!(verbs_sample_every).max(1);
    let mut i = 0u64;
    while i < verbs_abi::MAX_WCS {
        if i as i32 >= polled {
            break;
        }
        let wc = wc_base + i * verbs_abi::WC_SIZE;
        i += 1;
        let wr_id: u64 = read_user(wc + verbs_abi::WC_WR_ID).unwrap_or(0);
        let status: u32 = read_user(wc + verbs_abi::WC_STATUS).unwrap_or(0);
        let opcode: u32 = read_user(wc + verbs_abi::WC_OPCODE).unwrap_or(0);
        let byte_len: u32 = read_user(wc + verbs_abi::WC_BYTE_LEN).unwrap_or(0);
        let qp_num: u32 = read_user(wc + verbs_abi::WC_QP_NUM).unwrap_or(0);
        let Some(traffic) = qp_traffic(&QpKey { tgid, qp_num }) else {
            continue;
        };
        traffic.completions += 1;
        traffic.bytes_completed += byte_len as u64;
        if status != 0 {
            traffic.completion_errors += 1;
        }
        let wr_key = WrKey {
            tgid,
            qp_num,
            wr_id,
        };
        // SAFETY: the post time is copied out at once (another CPU may evict the entry).
        let latency = match unsafe { WR_POSTED.get(&wr_key) } {
            Some(posted) => now.saturating_sub(*posted),
            None => 0,
        };
        if latency > 0 {
            let _ = WR_POSTED.remove(&wr_key);
            traffic.latency_count += 1;
            traffic.latency_sum_ns += latency;
            if latency < traffic.latency_min_ns {
                traffic.latency_min_ns = latency;
            }
            if latency > traffic.latency_max_ns {
                traffic.latency_max_ns = latency;
            }
        }
        // Errors are always sent; successes one in `every`.
        if status == 0 && traffic.completions % every != 0 {
            count(STAT_RATE_LIMITED + EVENT_VERBS_COMPLETION);
            continue;
        }
        emit(
            EVENT_VERBS_COMPLETION,
            VerbsCompletionEvent {
                header: EventHeader {
                    kind: EVENT_VERBS_COMPLETION,
                    _pad: 0,
                    ts_ns: now,
                },
                wr_id,
                latency_ns: latency,
                tgid,
                qp_num,
                status,
                opcode,
                byte_len,
                _pad: 0,
            },
        );
    }
}

#[uprobe]
pub fn verbs_post_send(ctx: ProbeContext) -> u32 {
    post_send(&ctx);
    0
}

#[uprobe]
pub fn verbs_poll_cq(ctx: ProbeContext) -> u32 {
    let wc = ctx.arg::<u64>(2).unwrap_or(0);
    let _ = POLL_PENDING.insert(&bpf_get_current_pid_tgid(), &wc, 0);
    0
}

#[uretprobe]
pub fn verbs_poll_cq_ret(ctx: RetProbeContext) -> u32 {
    poll_cq_exit(&ctx);
    0
}
