//! The TCP source: sock_ops and the tcp/sock tracepoints, the flows they follow (with the
//! connections open before the start and those still open at the end), their RTT samples and
//! histogram windows, retransmits and state changes.
pub mod adopt;
pub mod assemble;
pub mod attach;
pub mod final_counters;
pub mod netns_names;
pub mod open_flows;
pub mod rtt_histogram;
pub mod tables;
