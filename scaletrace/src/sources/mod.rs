//! The sources of a recording, one folder each: its attach code (`attach.rs`), its event-to-row
//! code and its tables (`tables.rs`). What the uprobe sources share is in `uprobes/`.
//!
//! A new probe family is its folder here (its `ProbeFamily`: attach, records to rows, tables)
//! and its line in `probe_families` (with its `pub mod`); the recorder (files, rotation, a full
//! disk, the run's end), the attach step and the schema catalog take it from that list. Beside
//! it: its programs in `scaletrace-ebpf/src/probes/` (a file and its `mod` line) and its record
//! layout and `EVENT_*` kind in `scaletrace-common` (both crates read it; `EVENT_KINDS` grows
//! by one). Two lists still name families, each guarded by a test: the `capture` table's
//! per-kind ring-drop columns (`record/accounting.rs`; its test fails until the new kind has
//! one), and the command-line flags that name a family's libraries (`record/args.rs`, declared
//! in `ProbeFamily::LIBRARY_FLAGS`; its test fails for a flag the command line lacks). A family
//! whose rows also come from a kernel table read at rotations and at the end (verbs' per-QP
//! totals, TCP's flow table) has that part in `record/sinks.rs` through `KernelTables`.
pub mod family;
pub mod gpu;
pub mod nccl;
pub mod nic;
pub mod tcp;
pub mod uprobes;
pub mod verbs;

use family::{register, FamilySink};

/// Every probe family, in the order their tables are documented.
pub fn probe_families() -> Vec<Box<dyn FamilySink>> {
    vec![register(nccl::Nccl), register(verbs::Verbs::default())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use scaletrace_common::*;

    /// Each record kind goes to one place: TCP's to the recorder, every other to exactly one
    /// family; and no table is defined twice in the catalog the families feed.
    #[test]
    fn every_record_kind_has_one_owner_and_every_table_one_definition() {
        for family in probe_families() {
            for &kind in family.record_kinds() {
                assert!(
                    (1..EVENT_KINDS).contains(&kind),
                    "{}: kind {kind} outside 1..EVENT_KINDS",
                    family.label()
                );
            }
        }
        let tcp = [
            EVENT_FLOW_END,
            EVENT_RTT_SAMPLE,
            EVENT_FLOW_WINDOW,
            EVENT_RETRANSMIT,
            EVENT_STATE_CHANGE,
        ];
        for kind in 1..EVENT_KINDS {
            let owners = probe_families()
                .iter()
                .filter(|f| f.record_kinds().contains(&kind))
                .count()
                + usize::from(tcp.contains(&kind));
            assert_eq!(owners, 1, "record kind {kind} has {owners} owners");
        }
        let mut names: Vec<_> = crate::tables::catalog().iter().map(|t| t.name).collect();
        let all = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all, "a table is in the catalog twice");
    }

    #[test]
    fn each_family_decodes_its_records_fields() {
        use crate::decode::bytes_of;
        use family::ProbeFamily;
        let mut nccl = NcclCallEvent::default();
        nccl.header.kind = EVENT_NCCL_CALL;
        nccl.count = 1 << 20;
        nccl.rank = 3;
        let e = nccl::Nccl::decode(EVENT_NCCL_CALL, &bytes_of(&nccl)).unwrap();
        assert_eq!((e.count, e.rank), (1 << 20, 3));
        assert!(nccl::Nccl::decode(EVENT_NCCL_CALL, &bytes_of(&nccl)[..40]).is_err());

        let mut call = VerbsCallEvent::default();
        call.header.kind = EVENT_VERBS_CALL;
        call.qp_num = 0x11;
        call.device[..4].copy_from_slice(b"rxe0");
        assert!(matches!(
            verbs::Verbs::decode(EVENT_VERBS_CALL, &bytes_of(&call)).unwrap(),
            verbs::VerbsRecord::Call(e) if e.qp_num == 0x11 && &e.device[..4] == b"rxe0"
        ));
        let mut wc = VerbsCompletionEvent::default();
        wc.header.kind = EVENT_VERBS_COMPLETION;
        wc.status = 12;
        wc.byte_len = 4096;
        assert!(matches!(
            verbs::Verbs::decode(EVENT_VERBS_COMPLETION, &bytes_of(&wc)).unwrap(),
            verbs::VerbsRecord::Completion(e) if e.status == 12 && e.byte_len == 4096
        ));
    }
}
