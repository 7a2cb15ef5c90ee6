//! The sources of a recording, one folder each: its attach code (`attach.rs`), its event-to-row
//! code and its tables (`tables.rs`). What the uprobe sources share is in `uprobes/`.
//!
//! A new probe family is its folder here (its `ProbeFamily`: attach, records to rows, tables)
//! and its line in `probe_families` (with its `pub mod`), beside its programs in
//! `scaletrace-ebpf/src/probes/` and its record layout in `scaletrace-common` (both crates read
//! it). The recorder, the capture accounting and the schema catalog take it from that list.
//! A family with a command-line flag of its own (a library to probe) also declares the flag in
//! `record/args.rs`, which hands it over by name (`AttachTarget::explicit_libraries`).
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
