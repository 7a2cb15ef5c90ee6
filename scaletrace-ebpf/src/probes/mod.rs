//! The programs, one probe family per file. A new family is a file here, its line below, and
//! its attach code in the loader.
mod bench_source;
mod calls;
mod kernel_read;
mod nccl;
mod tcp_adopt;
mod tcp_flow_dump;
mod tcp_iter;
mod tcp_sockops;
mod tcp_tracepoints;
mod verbs_control;
mod verbs_data;
