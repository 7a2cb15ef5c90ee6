//! The table of the NCCL source: one row per traced NCCL call.
use crate::columns::*;

table! {
    /// One NCCL API call seen by the uprobes.
    pub struct NcclCallRow in "nccl_calls" {
        description: "Calls into libnccl's public API (uprobe at entry, uretprobe at return): a \
        per-rank timeline of collectives as the host issues them. NCCL calls are asynchronous: \
        `dur_ns` is the time to enqueue, not the collective itself (see `gpu_events` for kernels). \
        `rank`/`nranks` come from `ncclCommInitRank`; join other calls to it on `(host, pid, comm)`.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Call entry."),
        dur_ns: i64 => i64_col("ns", "Entry to return."),
        pid: u32 => u32_col("", "Calling process."),
        tid: u32 => u32_col("", "Calling thread."),
        op: &'static str => str_col("`AllReduce`, `AllGather`, `ReduceScatter`, `Broadcast`, `Send`, `Recv`, `GroupStart`, `GroupEnd`, `CommInitRank`."),
        result: String => str_col("ncclResult_t name, e.g. `ncclSuccess`, `ncclInvalidArgument`."),
        comm: u64 => u64_col("", "Communicator address (for CommInitRank: the one created, 0 on failure)."),
        rank: Option<i64> => opt_i64_col("", "CommInitRank: this process's rank."),
        nranks: Option<i64> => opt_i64_col("", "CommInitRank: communicator size."),
        count: Option<u64> => opt_u64_col("elements", "Element count (AllGather: send count; ReduceScatter: receive count)."),
        datatype: Option<String> => opt_str_col("ncclDataType_t name, e.g. `ncclFloat32`."),
        red_op: Option<String> => opt_str_col("Reduction: `ncclSum`, `ncclProd`, `ncclMax`, `ncclMin`, `ncclAvg` (AllReduce, ReduceScatter)."),
        peer: Option<i64> => opt_i64_col("", "Send/Recv peer rank, or Broadcast root."),
        bytes: Option<u64> => opt_u64_col("bytes", "count × datatype size: this rank's buffer size for the call."),
    }
}
