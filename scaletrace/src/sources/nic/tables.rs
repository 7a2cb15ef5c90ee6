//! The table of the NIC counters source.
use crate::columns::*;

table! {
    /// A NIC counter reading: first reading of each counter, then only when it changed.
    pub struct NicCounterRow in "nic_counters" {
        description: "sysfs NIC counters sampled every `--nic-interval` during `record`: interface \
        statistics, InfiniBand/RoCE port counters and hardware counters (retransmits, \
        out-of-sequence, congestion notifications) that offloaded RDMA never shows the kernel. \
        A counter appears at its first reading and then only in samples where it changed.",
        host: String => str_col("Node hostname."),
        ts: i64 => ts_col("Sample time."),
        source: &'static str => str_col("`net` (class/net/DEV/statistics), `ib` (ports/N/counters) or `ib_hw` (ports/N/hw_counters)."),
        device: String => str_col("Interface or RDMA device name."),
        port: Option<u32> => opt_u32_col("", "RDMA port; null for `net`."),
        counter: String => str_col("Counter file name, e.g. `tx_bytes`, `out_of_sequence`, `np_cnp_sent`."),
        value: u64 => u64_col("counter units", "Counter value."),
        delta: Option<u64> => opt_u64_col("counter units", "Increase since the previous reported value; null at the first reading and after a counter reset."),
        rate_per_s: Option<f64> => opt_f64_col("units/s", "`delta` per second."),
    }
}
