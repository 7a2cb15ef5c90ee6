//! Reading scaletrace's own tables back in unit tests: every `*.parquet` under `<dir>/<table>/`.
//! (`merge` and `analyze` read through DuckDB.)
use std::{fs::File, path::Path};

use anyhow::{Context as _, Result};
use arrow::record_batch::RecordBatch;
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
