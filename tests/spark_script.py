"""Running the script of `scaletrace sql --dialect spark` as docs/queries.md tells users to, on
stores written as the recorder writes them, and comparing its findings with DuckDB's."""
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def spark_statements(script):
    """The script's statements for `spark.sql` (one at a time): split at each `;` that ends a
    line, as docs/queries.md says; chunks of comments alone left out."""
    return [s for s in re.split(r";\n", script) if re.sub(r"--[^\n]*", "", s).strip()]


def nanosecond_timestamps(store):
    """Rewrites a generated store's files with the nanosecond timestamps scaletrace writes
    (DuckDB's COPY writes microseconds), a row group at a time."""
    for path in Path(store).rglob("*.parquet"):
        source = pq.ParquetFile(path)
        schema = pa.schema([f.with_type(pa.timestamp("ns", tz="UTC")) if pa.types.is_timestamp(f.type) else f
                            for f in source.schema_arrow])
        rewritten = path.with_name(path.name + ".ns")
        with pq.ParquetWriter(rewritten, schema) as out:
            for i in range(source.num_row_groups):
                out.write_table(source.read_row_group(i).cast(schema))
        rewritten.replace(path)


def comparable(rows):
    """Rows as sorted JSON text, floats to 6 digits (the engines' last digits differ)."""
    def value(v):
        if isinstance(v, float):
            return round(v, 6)
        if isinstance(v, (list, tuple)):
            return [value(x) for x in v]
        return v
    return sorted(json.dumps({k: value(v) for k, v in r.items()}, sort_keys=True, default=str) for r in rows)
