//! The tables of the RDMA verbs source: calls, queue pairs, completions, per-QP traffic and
//! the kernel's per-QP counters.
use crate::columns::*;

table! {
    /// One RDMA queue pair's data-path counters at an agent rotation.
    pub struct QpSnapshotRow in "qp_snapshots" {
        description: "`agent` only: one row per RDMA queue pair in the kernel's per-QP table at each rotation, \
        with its data-path counters so far and what changed since the previous rotation (since \
        the QP's first post, in its first row). `qp_traffic` carries the totals at the end of the \
        run; these rows put a long-lived QP's traffic in the store while it runs.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("When the counters were read (the rotation)."),
        pid: u32 => u32_col("", "Process (tgid) that posted on the QP; with `qp_num` joins to `qp_traffic` and `qps`."),
        qp_num: u32 => u32_col("", "Queue pair number."),
        wrs_posted: u64 => u64_col("count", "Work requests posted so far."),
        bytes_posted: u64 => u64_col("bytes", "Bytes in the posted requests' scatter/gather lists so far."),
        completions: u64 => u64_col("count", "Completions polled so far."),
        completion_errors: u64 => u64_col("count", "Completions with an error status so far."),
        wrs_posted_delta: u64 => u64_col("count", "`wrs_posted` since the previous snapshot."),
        bytes_posted_delta: u64 => u64_col("bytes", "`bytes_posted` since the previous snapshot."),
        completions_delta: u64 => u64_col("count", "`completions` since the previous snapshot."),
        completion_errors_delta: u64 => u64_col("count", "`completion_errors` since the previous snapshot."),
    }
}

table! {
    /// One counter of one RDMA queue pair at one sample, from RDMA netlink.
    pub struct QpCounterRow in "qp_counters" {
        description: "Every RDMA queue pair of the node, read from RDMA netlink (what `rdma resource show qp` \
        and `rdma statistic qp show` use) every `--nic-interval`, with no probe on the data path: \
        its send and receive packet sequence numbers, whose progress is the QP's packet count \
        (source `psn`), and the counters of the statistic counter it is bound to where the driver \
        binds QPs (source `bound`: mlx5 with `rdma statistic qp set link DEV/PORT auto type on`; \
        soft-RoCE has none, its counters are per port in `nic_counters`). Like `nic_counters`, a \
        counter appears at its first reading and then only in samples where it or the QP's state \
        changed. Joins to `qps`/`qp_traffic` by (host, pid, qp_num).",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Sample time."),
        device: String => str_col("RDMA device, e.g. `mlx5_0`, `rxe0`."),
        port: Option<u32> => opt_u32_col("", "Device port the QP is bound to; null before its first modify."),
        netdev: Option<String> => opt_str_col("Network device of that port (RoCE, iWARP); null for InfiniBand, while the QP has no port, for a network device in another network namespace than the recorder's (the kernel leaves its name out), and where the device's ports could not be read."),
        qp_num: u32 => u32_col("", "Local QP number."),
        qp_type: &'static str => str_col("`RC`, `UC`, `UD`, `GSI`, `SMI`, `RAW_PACKET`, `XRC_INI`, `XRC_TGT`."),
        state: Option<&'static str> => opt_str_col("QP state: `RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE`, `ERR`."),
        dest_qp_num: Option<u32> => opt_u32_col("", "Remote QP number (connected QPs)."),
        pid: Option<u32> => opt_u32_col("", "Process of a user QP (in the recorder's PID namespace); null for a kernel QP."),
        comm: Option<String> => opt_str_col("Process name (`/proc/PID/comm`), or the kernel module of a kernel QP."),
        counter_id: Option<u32> => opt_u32_col("", "Statistic counter the QP is bound to (source `bound`); its values are shared by every QP bound to it."),
        source: &'static str => str_col("`psn` (packet sequence numbers) or `bound` (the bound statistic counter)."),
        counter: String => str_col("`sq_psn` (next send PSN), `rq_psn` (next expected receive PSN, connected QPs), or the driver's counter name, e.g. `out_of_sequence`, `packet_seq_err`, `local_ack_timeout_err`."),
        value: u64 => u64_col("counter units", "Value (a PSN is 24 bits)."),
        delta: Option<u64> => opt_u64_col("counter units", "Increase since the QP's previous reported value: packets for a PSN (modulo 2^24). Null at the first reading, and when it went back (a QP reset, a PSN rewound by a retry at the reading)."),
        rate_per_s: Option<f64> => opt_f64_col("units/s", "`delta` per second."),
    }
}

table! {
    /// One libibverbs control-path call.
    pub struct VerbsCallRow in "verbs_calls" {
        description: "libibverbs control-path calls (uprobes): device open, PD/MR registration, CQ and \
        QP creation, `ibv_modify_qp` state transitions with the destination QPN and GID, destroy.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Call entry."),
        dur_ns: i64 => i64_col("ns", "Entry to return."),
        pid: u32 => u32_col("", "Calling process."),
        tid: u32 => u32_col("", "Calling thread."),
        op: &'static str => str_col("`ibv_open_device`, `ibv_alloc_pd`, `ibv_reg_mr`, `ibv_reg_mr_iova2`, `ibv_create_cq`, `ibv_create_qp`, `ibv_modify_qp`, `ibv_destroy_qp`."),
        ok: bool => bool_col("The call succeeded (non-null pointer, or 0)."),
        device: Option<String> => opt_str_col("ibv_open_device: device name (first 16 characters)."),
        qp_num: Option<u32> => opt_u32_col("", "QP number (create, modify, destroy)."),
        qp_type: Option<&'static str> => opt_str_col("`RC`, `UC`, `UD`, `RAW_PACKET`, `XRC_SEND`, `XRC_RECV`, `DRIVER`."),
        qp_state: Option<&'static str> => opt_str_col("ibv_modify_qp: target state when the state bit is in the mask (`INIT`, `RTR`, `RTS`, `ERR`, ...)."),
        dest_qp_num: Option<u32> => opt_u32_col("", "ibv_modify_qp: remote QPN when IBV_QP_DEST_QPN is in the mask."),
        dgid: Option<String> => opt_str_col("ibv_modify_qp: destination GID (IPv6 text; RoCE v2 IPv4 GIDs show as ::ffff:a.b.c.d) when IBV_QP_AV is in the mask."),
        attr_mask: Option<u32> => opt_u32_col("", "ibv_modify_qp: attribute mask."),
        mr_length: Option<u64> => opt_u64_col("bytes", "Registered memory region length."),
        cqe: Option<u32> => opt_u32_col("", "Requested completion queue entries."),
    }
}

table! {
    /// A queue pair as a flow: created, connected to a remote QP, destroyed.
    pub struct QpRow in "qps" {
        description: "One row per RDMA queue pair created during the run, keyed by (local QPN, \
        remote QPN, GID): the RDMA counterpart of `flows`. Written at destroy, or at the end of \
        the capture for QPs still alive (`destroyed` null).",
        host: String => str_col("Node hostname."),
        pid: u32 => u32_col("", "Process that created the QP."),
        cgroup: Option<String> => opt_str_col("That process's cgroup v2 (read in the kernel at ibv_create_qp), as a path below the cgroup2 mount; null if the cgroup was removed before the QP was written."),
        pod_uid: Option<String> => opt_str_col("Kubernetes pod UID, from the cgroup path; null outside a pod."),
        container_id: Option<String> => opt_str_col("Container runtime's id, from the cgroup path; null outside a container."),
        slurm_job: Option<String> => opt_str_col("Slurm job id, from the cgroup path; null outside a Slurm job."),
        qp_num: u32 => u32_col("", "Local QP number."),
        qp_type: &'static str => str_col("QP type (`RC`, `UD`, ...)."),
        created: i64 => ts_col("ibv_create_qp."),
        destroyed: Option<i64> => opt_ts_col("ibv_destroy_qp; null if alive at the end."),
        dest_qp_num: Option<u32> => opt_u32_col("", "Remote QP number (last set)."),
        dgid: Option<String> => opt_str_col("Remote GID (last set)."),
        last_state: Option<&'static str> => opt_str_col("Last state requested with ibv_modify_qp."),
        rts: Option<i64> => opt_ts_col("When the QP was moved to RTS (ready to send)."),
        modify_calls: u32 => u32_col("count", "ibv_modify_qp calls."),
    }
}

table! {
    /// A sampled RDMA work completion.
    pub struct VerbsCompletionRow in "verbs_completions" {
        description: "Sampled work completions from the provider's poll_cq (uprobe): every failed \
        completion and one successful completion in `--verbs-sample-every`. All completions are \
        counted in `qp_traffic`.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("When poll_cq returned the completion."),
        pid: u32 => u32_col("", "Polling process."),
        qp_num: u32 => u32_col("", "Local QP number; joins to `qps` and `qp_traffic`."),
        wr_id: u64 => u64_col("", "Work request id chosen by the application."),
        status: String => str_col("enum ibv_wc_status name, e.g. `SUCCESS`, `RETRY_EXC_ERR`."),
        opcode: String => str_col("enum ibv_wc_opcode name, e.g. `SEND`, `RDMA_WRITE`, `RECV`."),
        byte_len: u32 => u32_col("bytes", "Bytes transferred (receive completions)."),
        latency_ns: Option<u64> => opt_u64_col("ns", "Post to completion; null when the post was not seen."),
    }
}

table! {
    /// Data-path totals of one QP over the run, aggregated in the kernel.
    pub struct QpTrafficRow in "qp_traffic" {
        description: "Per-QP data path over the whole run (provider post_send/poll_cq uprobes, \
        aggregated in a kernel map): work requests, bytes, completions, errors and post-to-completion \
        latency. Written at the end of the capture.",
        host: String => str_col("Node hostname."),
        pid: u32 => u32_col("", "Process."),
        qp_num: u32 => u32_col("", "Local QP number; joins to `qps`."),
        post_calls: u64 => u64_col("count", "post_send calls."),
        wrs_posted: u64 => u64_col("count", "Work requests posted (up to 16 followed per call)."),
        bytes_posted: u64 => u64_col("bytes", "Sum of the posted scatter/gather lengths (up to 4 SGEs per request)."),
        completions: u64 => u64_col("count", "Completions polled (up to 16 followed per poll)."),
        completion_errors: u64 => u64_col("count", "Completions with a non-success status."),
        bytes_completed: u64 => u64_col("bytes", "Sum of completion byte_len (receives)."),
        latency_count: u64 => u64_col("count", "Completions whose post was seen."),
        latency_mean_ns: Option<f64> => opt_f64_col("ns", "Mean post-to-completion latency."),
        latency_min_ns: Option<u64> => opt_u64_col("ns", "Smallest post-to-completion latency."),
        latency_max_ns: Option<u64> => opt_u64_col("ns", "Largest post-to-completion latency."),
        opcodes: String => str_col("Posted opcodes (enum ibv_wr_opcode names), comma-separated."),
    }
}
