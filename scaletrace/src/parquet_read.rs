//! Reading scaletrace's own tables back (for `merge`): every `*.parquet` under `<dir>/<table>/`.
use std::{fs::File, path::Path};

use anyhow::{Context as _, Result};
use arrow::{
    array::{Array, AsArray},
    datatypes::{DataType, Int64Type, TimestampNanosecondType, UInt32Type, UInt64Type},
    record_batch::RecordBatch,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// All batches of one table; an empty list when the table does not exist.
pub fn read_table(dir: &Path, table: &str) -> Result<Vec<RecordBatch>> {
    let table_dir = dir.join(table);
    if !table_dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files: Vec<_> = std::fs::read_dir(&table_dir)
        .with_context(|| format!("listing {}", table_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    files.sort();
    let mut batches = Vec::new();
    for path in files {
        let file = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.build())
            .with_context(|| format!("reading {}", path.display()))?;
        for batch in reader {
            batches.push(batch.with_context(|| format!("reading {}", path.display()))?);
        }
    }
    Ok(batches)
}

fn column<'a>(batch: &'a RecordBatch, name: &str, want: &str) -> Result<&'a dyn Array> {
    batch
        .column_by_name(name)
        .map(|c| c.as_ref())
        .with_context(|| format!("column `{name}` ({want}) missing"))
}

pub fn timestamps(batch: &RecordBatch, name: &str) -> Result<Vec<i64>> {
    let c = column(batch, name, "timestamp")?;
    anyhow::ensure!(
        matches!(c.data_type(), DataType::Timestamp(_, _)),
        "column `{name}` is not a timestamp"
    );
    Ok(c.as_primitive::<TimestampNanosecondType>()
        .values()
        .to_vec())
}

pub fn strings(batch: &RecordBatch, name: &str) -> Result<Vec<String>> {
    let c = column(batch, name, "string")?;
    Ok(c.as_string::<i32>()
        .iter()
        .map(|s| s.unwrap_or_default().to_string())
        .collect())
}

pub fn u64s(batch: &RecordBatch, name: &str) -> Result<Vec<u64>> {
    Ok(column(batch, name, "u64")?
        .as_primitive::<UInt64Type>()
        .values()
        .to_vec())
}

pub fn u32s(batch: &RecordBatch, name: &str) -> Result<Vec<u32>> {
    Ok(column(batch, name, "u32")?
        .as_primitive::<UInt32Type>()
        .values()
        .to_vec())
}

pub fn i64s(batch: &RecordBatch, name: &str) -> Result<Vec<i64>> {
    Ok(column(batch, name, "i64")?
        .as_primitive::<Int64Type>()
        .values()
        .to_vec())
}

pub fn opt_i64s(batch: &RecordBatch, name: &str) -> Result<Vec<Option<i64>>> {
    Ok(column(batch, name, "i64")?
        .as_primitive::<Int64Type>()
        .iter()
        .collect())
}

pub fn bools(batch: &RecordBatch, name: &str) -> Result<Vec<bool>> {
    Ok(column(batch, name, "bool")?
        .as_boolean()
        .iter()
        .map(|b| b.unwrap_or(false))
        .collect())
}

pub fn opt_strings(batch: &RecordBatch, name: &str) -> Result<Vec<Option<String>>> {
    Ok(column(batch, name, "string")?
        .as_string::<i32>()
        .iter()
        .map(|s| s.map(str::to_string))
        .collect())
}
