//! The sources of a recording, one folder each: its attach code (`attach.rs`), its event-to-row
//! code and its tables (`tables.rs`). What the uprobe sources share is in `uprobes/`.
//!
//! A new probe family touches: its folder here (attach, rows, tables), one line below, its
//! programs in `scaletrace-ebpf/src/probes/` with its records in `scaletrace-common`, and one
//! line in each of the places that list every family: `decode.rs` (its record kinds),
//! `record/sinks.rs` (its files and its rows), `record/mod.rs` (attaching it) and
//! `tables::catalog` (its tables' documentation).
pub mod gpu;
pub mod nccl;
pub mod nic;
pub mod tcp;
pub mod uprobes;
pub mod verbs;
