//! Every table scaletrace writes, each defined (with `table!`) by the module that fills it: a
//! source's in its `tables.rs`, `capture` by the recorder's accounting, `interfaces` beside the
//! interface list, `gpu_events` by `import`, `windows` by `merge`. `docs/schema.md` is generated
//! from this catalog (`scaletrace schema`), and a test keeps the committed file in sync.
use crate::{
    columns::Table,
    import::GpuEventRow,
    interfaces::InterfaceRow,
    merge::WindowRow,
    record::accounting::CaptureRow,
    sources::{gpu::tables::*, nccl::tables::*, nic::tables::*, tcp::tables::*, verbs::tables::*},
};

/// A table as readers see it: name, columns with their SQL types, and its documentation.
pub struct TableInfo {
    pub name: &'static str,
    pub columns: Vec<(&'static str, &'static str)>,
    pub markdown: fn() -> String,
}

fn info<T: Table>() -> TableInfo {
    TableInfo {
        name: T::NAME,
        columns: T::columns()
            .iter()
            .map(|c| (c.name, crate::columns::sql_type(&c.data_type)))
            .collect(),
        markdown: crate::columns::markdown::<T>,
    }
}

/// Every table scaletrace writes, in documentation order.
pub fn catalog() -> Vec<TableInfo> {
    vec![
        info::<FlowRow>(),
        info::<FlowSnapshotRow>(),
        info::<RttRow>(),
        info::<FlowWindowRow>(),
        info::<RetransmitRow>(),
        info::<StateChangeRow>(),
        info::<CaptureRow>(),
        info::<NicCounterRow>(),
        info::<QpCounterRow>(),
        info::<InterfaceRow>(),
        info::<NcclCallRow>(),
        info::<VerbsCallRow>(),
        info::<QpRow>(),
        info::<QpTrafficRow>(),
        info::<QpSnapshotRow>(),
        info::<VerbsCompletionRow>(),
        info::<GpuDeviceRow>(),
        info::<GpuSampleRow>(),
        info::<GpuProcessRow>(),
        info::<GpuEventRow>(),
        info::<WindowRow>(),
    ]
}
