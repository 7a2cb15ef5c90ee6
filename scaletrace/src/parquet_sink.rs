//! Writing one table to one Parquet file.
//!
//! Rows are buffered and converted to Arrow batches; the file is written under a `.partial`
//! name and renamed when closed, so a reader never picks up a file without its footer.
use std::{
    fs::File,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use arrow::record_batch::RecordBatch;
use parquet::{
    arrow::ArrowWriter,
    basic::{Compression, ZstdLevel},
    file::{metadata::KeyValue, properties::WriterProperties},
};

use crate::{
    atomic_file::{create_dir_safely, create_new},
    columns::Table,
};

/// Rows per Arrow batch handed to the writer.
const BATCH_ROWS: usize = 8192;
/// Rows per Parquet row group: large enough for good compression and few footers entries,
/// small enough that a reader can skip by time.
const ROW_GROUP_ROWS: usize = 128 * 1024;

/// A column's dictionary stops growing here and the rest of its row group is written plain.
/// parquet's default (1 MiB) never stopped one within a row group: a column unique per row
/// (cumulative bytes acked) was hashed into a dictionary 128 Ki entries long, as large as
/// its data, at every row. At 64 KiB such a column falls back after 8 Ki values, while the
/// low-cardinality ones (flow ids, ports, RTTs in µs) keep theirs. Measured (five pairs,
/// binaries alternated, synthetic source at 1 M events/s): 1.07x the loader's events per CPU
/// second (1.01-1.12); real RTT samples (bench/storage.py's 64 flows, both binaries
/// recording at once): the same bytes, 4.88 per `rtt` row.
const DICTIONARY_PAGE_BYTES: usize = 64 * 1024;

pub struct TableWriter<T: Table> {
    final_path: PathBuf,
    partial_path: PathBuf,
    writer: Option<ArrowWriter<File>>,
    pending: Vec<T>,
    rows_written: u64,
}

impl<T: Table> TableWriter<T> {
    /// Creates `<dir>/<table>/<file_stem>.parquet` (via a `.partial` file): `record`'s layout.
    pub fn create(dir: &Path, file_stem: &str, metadata: &[(String, String)]) -> Result<Self> {
        let layout = crate::layout::Layout::PerRun {
            out: dir.to_path_buf(),
            run_id: file_stem.to_string(),
        };
        Self::create_at(dir, layout.path(T::NAME), metadata)
    }

    /// Creates `final_path` below the output directory `root` (via `<final_path>.partial`, in
    /// the same directory). Neither the directories below `root` nor the partial file may be
    /// links: as root, a link planted there would redirect the write (see `atomic_file`).
    pub fn create_at(
        root: &Path,
        final_path: PathBuf,
        metadata: &[(String, String)],
    ) -> Result<Self> {
        let table_dir = final_path
            .parent()
            .context("a table file needs a directory")?
            .to_path_buf();
        create_dir_safely(root, &table_dir)?;
        let partial_path = crate::layout::partial_path(&final_path);
        let file = create_new(&partial_path)?;
        let writer = Self::writer(file, metadata).inspect_err(|_| {
            // (the file this call just created: no half-made table left behind)
            let _ = std::fs::remove_file(&partial_path);
        });
        let writer = writer
            .with_context(|| format!("opening Parquet writer for {}", partial_path.display()))?;
        Ok(TableWriter {
            final_path,
            partial_path,
            writer: Some(writer),
            pending: Vec::with_capacity(BATCH_ROWS),
            rows_written: 0,
        })
    }

    /// The Parquet writer of a new file: its compression, dictionaries and encodings.
    fn writer(file: File, metadata: &[(String, String)]) -> Result<ArrowWriter<File>> {
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
            .set_max_row_group_size(ROW_GROUP_ROWS)
            .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
            .set_key_value_metadata(Some(
                metadata
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                    .collect(),
            ));
        // No dictionary for timestamps: nearly every value is new, so a dictionary is built,
        // rehashed as it grows and abandoned in every column chunk (perf at 1 M events/s: a
        // third of the loader's time in hash tables). They compress as deltas instead.
        // The other numbers keep theirs: without them the loader did 1.18x the events per CPU
        // second, but real RTT samples (bench/storage.py, 64 flows) took 24 % more bytes
        // (143 -> 178 MB per node-hour, same moment), and storage is paid at every sample.
        for field in T::schema().fields() {
            if matches!(field.data_type(), arrow::datatypes::DataType::Timestamp(..)) {
                let column = parquet::schema::types::ColumnPath::from(field.name().as_str());
                props = props
                    .set_column_dictionary_enabled(column.clone(), false)
                    .set_column_encoding(column, parquet::basic::Encoding::DELTA_BINARY_PACKED);
            }
        }
        Ok(ArrowWriter::try_new(
            file,
            T::schema(),
            Some(props.build()),
        )?)
    }

    pub fn push(&mut self, row: T) -> Result<()> {
        self.pending.push(row);
        if self.pending.len() >= BATCH_ROWS {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Rows accepted so far (written or buffered).
    pub fn rows(&self) -> u64 {
        self.rows_written + self.pending.len() as u64
    }

    /// Bytes written so far plus those buffered in the open row group (an estimate of the
    /// file's size, for size-based rotation).
    pub fn bytes(&self) -> u64 {
        self.writer
            .as_ref()
            .map_or(0, |w| (w.bytes_written() + w.in_progress_size()) as u64)
    }

    /// Removes the `.partial` file of a writer that is not going to be closed.
    pub fn abandon(self) {
        drop(self.writer);
        let _ = std::fs::remove_file(&self.partial_path);
    }

    fn write_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let batch = to_batch(&self.pending)?;
        let writer = self.writer.as_mut().context("writer already closed")?;
        writer
            .write(&batch)
            .with_context(|| format!("writing {}", self.partial_path.display()))?;
        self.rows_written += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Adds metadata known only at the end (clock drift, totals) to the footer.
    pub fn append_metadata(&mut self, key: &str, value: String) {
        if let Some(w) = self.writer.as_mut() {
            w.append_key_value_metadata(KeyValue::new(key.to_string(), value));
        }
    }

    /// Writes the remaining rows and the footer, then gives the file its final name. When that
    /// fails (a full disk) the torn `.partial` file is removed: without its footer no reader
    /// could use it, and it would hold the space the next interval needs.
    pub fn close(mut self) -> Result<PathBuf> {
        let partial = self.partial_path.clone();
        self.finish_file().inspect_err(|_| {
            let _ = std::fs::remove_file(&partial);
        })
    }

    fn finish_file(&mut self) -> Result<PathBuf> {
        self.write_pending()?;
        let writer = self.writer.take().context("writer already closed")?;
        let file = writer
            .into_inner()
            .with_context(|| format!("finishing {}", self.partial_path.display()))?;
        file.sync_all()
            .with_context(|| format!("syncing {}", self.partial_path.display()))?;
        std::fs::rename(&self.partial_path, &self.final_path)
            .with_context(|| format!("renaming {} into place", self.partial_path.display()))?;
        // The rename itself must survive a crash too: sync the directory entry.
        if let Some(dir) = self.final_path.parent() {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(self.final_path.clone())
    }
}

/// A table's open file, whatever its rows: what the end of an interval does with every file
/// (count, stamp, close or drop it), so that a recording lists its files once.
pub trait OpenTable {
    /// The table's name (`table=` in the Hive layout).
    fn table(&self) -> &'static str;
    fn rows(&self) -> u64;
    fn bytes(&self) -> u64;
    fn append_metadata(&mut self, key: &str, value: String);
    fn close(self: Box<Self>) -> Result<PathBuf>;
    fn abandon(self: Box<Self>);
}

impl<T: Table> OpenTable for TableWriter<T> {
    fn table(&self) -> &'static str {
        T::NAME
    }
    fn rows(&self) -> u64 {
        TableWriter::rows(self)
    }
    fn bytes(&self) -> u64 {
        TableWriter::bytes(self)
    }
    fn append_metadata(&mut self, key: &str, value: String) {
        TableWriter::append_metadata(self, key, value)
    }
    fn close(self: Box<Self>) -> Result<PathBuf> {
        TableWriter::close(*self)
    }
    fn abandon(self: Box<Self>) {
        TableWriter::abandon(*self)
    }
}

/// Whether an error comes from a full disk (ENOSPC, or a quota: EDQUOT) anywhere in its chain.
pub fn is_disk_full(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .and_then(|io| io.raw_os_error())
            .is_some_and(|code| code == libc::ENOSPC || code == libc::EDQUOT)
            // parquet and arrow wrap the io::Error in their own without a source
            || c.to_string().contains("No space left on device")
    })
}

pub fn to_batch<T: Table>(rows: &[T]) -> Result<RecordBatch> {
    let columns = T::columns().iter().map(|c| c.build(rows)).collect();
    RecordBatch::try_new(T::schema(), columns)
        .with_context(|| format!("building a {} batch", T::NAME))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        record::accounting::CaptureRow,
        sources::{gpu::tables::GpuSampleRow, tcp::tables::*},
    };
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    fn sample_flow(id: u64) -> FlowRow {
        FlowRow {
            host: "node1".into(),
            flow_id: id,
            family: "ipv4",
            local_addr: "10.0.0.1".into(),
            local_port: 40000,
            remote_addr: "10.0.0.2".into(),
            remote_port: 5201,
            direction: "active",
            pid: Some(42),
            comm: Some("python".into()),
            start: 1_700_000_000_000_000_000,
            end: None,
            duration_ns: 5,
            open_at_end: true,
            bytes_sent: 1 << 40,
            srtt_mean_us: Some(12.5),
            ..Default::default()
        }
    }

    #[test]
    fn writes_a_readable_file_with_schema_and_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let meta = vec![("scaletrace.host".to_string(), "node1".to_string())];
        let mut w = TableWriter::<FlowRow>::create(dir.path(), "run1", &meta).unwrap();
        for i in 0..(BATCH_ROWS as u64 + 10) {
            w.push(sample_flow(i)).unwrap();
        }
        assert_eq!(w.rows(), BATCH_ROWS as u64 + 10);
        assert!(dir.path().join("flows/run1.parquet.partial").exists());
        w.append_metadata("scaletrace.clock.end_offset_ns", "7".into());
        let path = w.close().unwrap();
        assert_eq!(path, dir.path().join("flows/run1.parquet"));
        assert!(!dir.path().join("flows/run1.parquet.partial").exists());

        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        let kv = reader
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .unwrap()
            .clone();
        assert!(kv
            .iter()
            .any(|k| k.key == "scaletrace.host" && k.value.as_deref() == Some("node1")));
        assert!(kv.iter().any(|k| k.key == "scaletrace.clock.end_offset_ns"));
        assert_eq!(reader.schema().fields().len(), FlowRow::columns().len());
        let rows: usize = reader.build().unwrap().map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, BATCH_ROWS + 10);
    }

    #[test]
    fn batches_match_the_declared_schema_for_every_table() {
        // RecordBatch::try_new checks each array against the schema field (type, nullability).
        to_batch(&[sample_flow(1), FlowRow::default()]).unwrap();
        to_batch(&[
            RttRow::default(),
            RttRow {
                delivery_rate_bps: Some(1.0),
                ..Default::default()
            },
        ])
        .unwrap();
        to_batch(&[
            RetransmitRow::default(),
            RetransmitRow {
                flow_id: Some(3),
                ..Default::default()
            },
        ])
        .unwrap();
        to_batch(&[StateChangeRow::default()]).unwrap();
        to_batch(&[CaptureRow::default()]).unwrap();
    }

    #[test]
    fn gpu_samples_keep_their_nvlink_counters() {
        // The sampler filled NVLink throughput and error counters that no column wrote.
        let row = GpuSampleRow {
            nvlink_tx_bytes_per_s: Some(2048.0),
            nvlink_crc_errors: Some(3),
            nvlink_recovery_errors: Some(1),
            ..Default::default()
        };
        let batch = to_batch(&[row]).unwrap();
        for column in [
            "nvlink_tx_bytes_per_s",
            "nvlink_rx_bytes_per_s",
            "nvlink_crc_errors",
            "nvlink_replay_errors",
            "nvlink_recovery_errors",
        ] {
            assert!(batch.column_by_name(column).is_some(), "no column {column}");
        }
        let crc = batch.column_by_name("nvlink_crc_errors").unwrap();
        let crc = crc
            .as_any()
            .downcast_ref::<arrow::array::UInt64Array>()
            .unwrap();
        assert_eq!(crc.value(0), 3);
    }

    #[test]
    fn unwritable_directory_is_a_clear_error() {
        let err = TableWriter::<FlowRow>::create(Path::new("/proc/definitely/not"), "x", &[])
            .err()
            .unwrap();
        assert!(
            // The output directory itself is the first thing that cannot be created.
            format!("{err:#}").contains("creating /proc/definitely/not"),
            "{err:#}"
        );
    }
}
