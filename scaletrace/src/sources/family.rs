//! What the recorder asks of a probe family (NCCL, verbs, and the next one): attach its
//! programs, turn its ring buffer records into rows of its own tables, and name those tables
//! for the catalog. A family implements `ProbeFamily` in its folder and is listed once, in
//! `sources::probe_families`; the recorder (`record/sinks.rs`) drives every listed family the
//! same way: it opens each one's files with every interval, hands it the records of its kinds,
//! and closes, drops or abandons its files with the other tables'.
//!
//! TCP is not one of them: its rows also come from the kernel's flow table (sweeps of unsent
//! flow ends, snapshots at rotations, the flows left at the end), which the recorder walks.
//! Nor are the NIC counters and GPU samples, which are sampled, not sent through the ring.
use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use anyhow::Result;
use aya::Ebpf;

use crate::{
    clock::ClockOffset, columns::TableInfo, hooks::Hooks, job_labels::JobLabels,
    parquet_sink::OpenTable,
};

/// Where an interval's files go: the same root, layout and file metadata for every table.
pub struct TableFiles<'a> {
    pub root: &'a Path,
    /// The file of a table in this interval.
    pub path: &'a dyn Fn(&str) -> PathBuf,
    pub metadata: &'a [(String, String)],
}

/// What a family may look up while it makes rows.
pub struct RowContext<'a> {
    pub host: &'a str,
    pub clock: ClockOffset,
    /// The job labels of a cgroup v2 id (0: none), read once per cgroup by the recorder.
    pub job: &'a mut dyn FnMut(u64) -> JobLabels,
}

/// What a family's programs attach to.
pub struct AttachTarget<'a> {
    /// `--pid`: the one process to probe (None: every process that maps the library).
    pub pid: Option<u32>,
    /// The libraries given with each family's library flags (`ProbeFamily::LIBRARY_FLAGS`).
    pub explicit_libraries: &'a HashMap<&'static str, Vec<PathBuf>>,
}

impl AttachTarget<'_> {
    /// The libraries named with `--<flag>`; none when it was not given.
    pub fn libraries(&self, flag: &str) -> Vec<PathBuf> {
        match self.explicit_libraries.get(flag) {
            Some(libs) => libs.clone(),
            None => {
                // a family reading a flag it does not declare in LIBRARY_FLAGS: a bug of the
                // build; its libraries are then found as if the flag was not given
                log::error!("--{flag} is not among the probe families' library flags");
                Vec::new()
            }
        }
    }
}

/// One interval's open files of a family (declared with `interval_files!`).
pub trait IntervalFiles: Sized {
    fn create(files: &TableFiles) -> Result<Self>;
    fn files(&self) -> Vec<&dyn OpenTable>;
    fn into_files(self) -> Vec<Box<dyn OpenTable>>;
}

/// Declares a struct with a typed file per table and its `IntervalFiles`.
macro_rules! interval_files {
    ($(#[$doc:meta])* $vis:vis struct $name:ident { $($field:ident: $row:ty),* $(,)? }) => {
        $(#[$doc])*
        $vis struct $name {
            $($vis $field: $crate::parquet_sink::TableWriter<$row>,)*
        }

        impl $crate::sources::family::IntervalFiles for $name {
            /// All of them or none: when one cannot be created, those made before it are
            /// removed (a retry of the same interval would find them in its way).
            fn create(files: &$crate::sources::family::TableFiles) -> anyhow::Result<Self> {
                use $crate::columns::Table as _;
                let mut made: Vec<std::path::PathBuf> = Vec::new();
                let mut create_all = || -> anyhow::Result<Self> {
                    Ok($name {
                        $($field: {
                            let path = (files.path)(<$row>::NAME);
                            let file = $crate::parquet_sink::TableWriter::create_at(
                                files.root,
                                path.clone(),
                                files.metadata,
                            )?;
                            made.push(path);
                            file
                        },)*
                    })
                };
                let created = create_all();
                if created.is_err() {
                    for path in made {
                        // (files this call created, each a plain file: `create_at` refuses links)
                        let _ = std::fs::remove_file($crate::layout::partial_path(&path));
                    }
                }
                created
            }

            fn files(&self) -> Vec<&dyn $crate::parquet_sink::OpenTable> {
                vec![$(&self.$field as &dyn $crate::parquet_sink::OpenTable),*]
            }

            fn into_files(self) -> Vec<Box<dyn $crate::parquet_sink::OpenTable>> {
                vec![$(Box::new(self.$field) as Box<dyn $crate::parquet_sink::OpenTable>),*]
            }
        }
    };
}
pub(crate) use interval_files;

/// A probe family, as its folder defines it.
pub trait ProbeFamily {
    /// Its files of one interval.
    type Files: IntervalFiles;
    /// Its records, decoded.
    type Record;
    /// Its name in logs.
    const LABEL: &'static str;
    /// The ring buffer record kinds its programs send (`EVENT_*` of scaletrace-common, each
    /// below `EVENT_KINDS` and sent by no other family).
    const RECORD_KINDS: &'static [u32];
    /// The command-line flags that name libraries for it (without `--`), declared in
    /// `record/args.rs` and handed over through `AttachTarget::explicit_libraries`.
    const LIBRARY_FLAGS: &'static [&'static str] = &[];

    /// Its tables, in documentation order (those it writes through the ring and any others it
    /// defines).
    fn tables() -> Vec<TableInfo>;
    /// Attaches its programs to the loaded object; each hook that fails is named in `hooks`.
    fn attach(ebpf: &mut Ebpf, target: &AttachTarget, hooks: &mut Hooks);
    /// One record of its kinds (`kind`, the record's bytes as the ring held them), decoded.
    /// An error here is counted in `capture.decode_errors`, not a failure of the run.
    fn decode(kind: u32, bytes: &[u8]) -> Result<Self::Record>;
    /// The rows of one decoded record.
    fn record(
        &mut self,
        record: Self::Record,
        out: &mut Rows<Self::Files>,
        cx: &mut RowContext,
    ) -> Result<()>;
    /// The run's last interval ends: rows of what is still open go into its files.
    fn last_interval(&mut self, _out: &mut Rows<Self::Files>) -> Result<()> {
        Ok(())
    }
}

/// Where a family's rows go: its open files, or, while a full disk leaves none, nowhere (each
/// row counted as lost; the family still sees every record, so its state stays whole).
pub struct Rows<'a, Fs> {
    files: Option<&'a mut Fs>,
    lost: &'a mut u64,
}

impl<Fs> Rows<'_, Fs> {
    /// Pushes `row` into the file `file` picks.
    pub fn push<R: crate::columns::Table>(
        &mut self,
        row: R,
        file: impl FnOnce(&mut Fs) -> &mut crate::parquet_sink::TableWriter<R>,
    ) -> Result<()> {
        match self.files.as_deref_mut() {
            Some(files) => file(files).push(row),
            None => {
                *self.lost += 1;
                Ok(())
            }
        }
    }
}

/// What became of a record handed to a family.
pub enum Handled {
    /// Its rows went to the open files (or were counted as lost while the disk is full).
    Done,
    Undecodable(anyhow::Error),
}

/// A listed family as the recorder drives it: the family's state across the run and its open
/// interval's files (none while the disk is full, or once the run is over).
pub trait FamilySink {
    fn label(&self) -> &'static str;
    fn record_kinds(&self) -> &'static [u32];
    fn library_flags(&self) -> &'static [&'static str];
    fn tables(&self) -> Vec<TableInfo>;
    fn attach(&self, ebpf: &mut Ebpf, target: &AttachTarget, hooks: &mut Hooks);
    /// Creates the next interval's files, kept aside until `start_next`.
    fn prepare_next(&mut self, files: &TableFiles) -> Result<()>;
    /// Drops the files `prepare_next` made (another family's could not be created).
    fn discard_next(&mut self);
    /// The prepared files become the open ones; returns the ones they replace, to be closed.
    fn start_next(&mut self) -> Vec<Box<dyn OpenTable>>;
    /// The open files, closed over (without opening new ones): the run's end, a full disk.
    fn take_open(&mut self) -> Vec<Box<dyn OpenTable>>;
    fn open_files(&self) -> Vec<&dyn OpenTable>;
    /// One record of its kinds into the open files (none open: its rows are counted in
    /// `rows_lost`).
    fn record(
        &mut self,
        kind: u32,
        bytes: &[u8],
        cx: &mut RowContext,
        rows_lost: &mut u64,
    ) -> Result<Handled>;
    fn last_interval(&mut self, rows_lost: &mut u64) -> Result<()>;
}

/// A family with its files: how `probe_families` lists one.
pub struct Registered<F: ProbeFamily> {
    family: F,
    open: Option<F::Files>,
    next: Option<F::Files>,
}

pub fn register<F: ProbeFamily + 'static>(family: F) -> Box<dyn FamilySink> {
    Box::new(Registered {
        family,
        open: None,
        next: None,
    })
}

impl<F: ProbeFamily> FamilySink for Registered<F> {
    fn label(&self) -> &'static str {
        F::LABEL
    }
    fn record_kinds(&self) -> &'static [u32] {
        F::RECORD_KINDS
    }
    fn library_flags(&self) -> &'static [&'static str] {
        F::LIBRARY_FLAGS
    }
    fn tables(&self) -> Vec<TableInfo> {
        F::tables()
    }
    fn attach(&self, ebpf: &mut Ebpf, target: &AttachTarget, hooks: &mut Hooks) {
        F::attach(ebpf, target, hooks)
    }
    fn prepare_next(&mut self, files: &TableFiles) -> Result<()> {
        self.discard_next();
        self.next = Some(F::Files::create(files)?);
        Ok(())
    }
    fn discard_next(&mut self) {
        for f in self
            .next
            .take()
            .map(F::Files::into_files)
            .unwrap_or_default()
        {
            f.abandon();
        }
    }
    fn start_next(&mut self) -> Vec<Box<dyn OpenTable>> {
        let old = std::mem::replace(&mut self.open, self.next.take());
        old.map(F::Files::into_files).unwrap_or_default()
    }
    fn take_open(&mut self) -> Vec<Box<dyn OpenTable>> {
        self.open
            .take()
            .map(F::Files::into_files)
            .unwrap_or_default()
    }
    fn open_files(&self) -> Vec<&dyn OpenTable> {
        self.open.as_ref().map(F::Files::files).unwrap_or_default()
    }
    fn record(
        &mut self,
        kind: u32,
        bytes: &[u8],
        cx: &mut RowContext,
        rows_lost: &mut u64,
    ) -> Result<Handled> {
        let record = match F::decode(kind, bytes) {
            Ok(r) => r,
            Err(e) => return Ok(Handled::Undecodable(e)),
        };
        let mut out = Rows {
            files: self.open.as_mut(),
            lost: rows_lost,
        };
        self.family.record(record, &mut out, cx)?;
        Ok(Handled::Done)
    }
    fn last_interval(&mut self, rows_lost: &mut u64) -> Result<()> {
        let mut out = Rows {
            files: self.open.as_mut(),
            lost: rows_lost,
        };
        self.family.last_interval(&mut out)
    }
}
