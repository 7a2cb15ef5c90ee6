//! Declarative table columns: one place defines each column's name, Arrow type, unit and
//! meaning, and how to extract it from a row. The Parquet schema and `docs/schema.md` are both
//! generated from these definitions, so they cannot disagree.
use std::sync::Arc;

use arrow::{
    array::{
        ArrayRef, BooleanArray, Float64Array, Int64Array, ListBuilder, StringArray,
        TimestampNanosecondArray, UInt16Array, UInt32Array, UInt32Builder, UInt64Array,
    },
    datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit},
};

/// Builds one column's array from a slice of rows.
type BuildFn<R> = Box<dyn Fn(&[R]) -> ArrayRef + Send + Sync>;

pub struct Column<R> {
    pub name: &'static str,
    pub data_type: DataType,
    pub nullable: bool,
    pub unit: &'static str,
    pub doc: &'static str,
    build: BuildFn<R>,
}

impl<R> Column<R> {
    pub fn build(&self, rows: &[R]) -> ArrayRef {
        (self.build)(rows)
    }
}

pub fn utc_timestamp() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

macro_rules! column_kind {
    ($fn_name:ident, $opt_name:ident, $t:ty, $array:ty, $dt:expr) => {
        // Each type gets a required and a nullable variant; not every table uses both.
        #[allow(dead_code)]
        pub fn $fn_name<R: 'static>(
            name: &'static str,
            unit: &'static str,
            doc: &'static str,
            get: fn(&R) -> $t,
        ) -> Column<R> {
            Column {
                name,
                data_type: $dt,
                nullable: false,
                unit,
                doc,
                build: Box::new(move |rows| {
                    Arc::new(<$array>::from_iter_values(rows.iter().map(get))) as ArrayRef
                }),
            }
        }

        #[allow(dead_code)]
        pub fn $opt_name<R: 'static>(
            name: &'static str,
            unit: &'static str,
            doc: &'static str,
            get: fn(&R) -> Option<$t>,
        ) -> Column<R> {
            Column {
                name,
                data_type: $dt,
                nullable: true,
                unit,
                doc,
                build: Box::new(move |rows| {
                    Arc::new(rows.iter().map(get).collect::<$array>()) as ArrayRef
                }),
            }
        }
    };
}

column_kind!(u16_col, opt_u16_col, u16, UInt16Array, DataType::UInt16);
column_kind!(u32_col, opt_u32_col, u32, UInt32Array, DataType::UInt32);
column_kind!(u64_col, opt_u64_col, u64, UInt64Array, DataType::UInt64);
column_kind!(i64_col, opt_i64_col, i64, Int64Array, DataType::Int64);
column_kind!(f64_col, opt_f64_col, f64, Float64Array, DataType::Float64);

pub fn bool_col<R: 'static>(
    name: &'static str,
    doc: &'static str,
    get: fn(&R) -> bool,
) -> Column<R> {
    Column {
        name,
        data_type: DataType::Boolean,
        nullable: false,
        unit: "",
        doc,
        build: Box::new(move |rows| {
            Arc::new(rows.iter().map(|r| Some(get(r))).collect::<BooleanArray>()) as ArrayRef
        }),
    }
}

pub fn ts_col<R: 'static>(name: &'static str, doc: &'static str, get: fn(&R) -> i64) -> Column<R> {
    Column {
        name,
        data_type: utc_timestamp(),
        nullable: false,
        unit: "ns, UTC",
        doc,
        build: Box::new(move |rows| {
            Arc::new(
                TimestampNanosecondArray::from_iter_values(rows.iter().map(get))
                    .with_timezone("UTC"),
            ) as ArrayRef
        }),
    }
}

pub fn opt_ts_col<R: 'static>(
    name: &'static str,
    doc: &'static str,
    get: fn(&R) -> Option<i64>,
) -> Column<R> {
    Column {
        name,
        data_type: utc_timestamp(),
        nullable: true,
        unit: "ns, UTC",
        doc,
        build: Box::new(move |rows| {
            Arc::new(
                rows.iter()
                    .map(get)
                    .collect::<TimestampNanosecondArray>()
                    .with_timezone("UTC"),
            ) as ArrayRef
        }),
    }
}

pub fn str_col<R: 'static>(
    name: &'static str,
    doc: &'static str,
    get: fn(&R) -> &str,
) -> Column<R> {
    Column {
        name,
        data_type: DataType::Utf8,
        nullable: false,
        unit: "",
        doc,
        build: Box::new(move |rows| {
            Arc::new(StringArray::from_iter_values(rows.iter().map(get))) as ArrayRef
        }),
    }
}

pub fn opt_str_col<R: 'static>(
    name: &'static str,
    doc: &'static str,
    get: fn(&R) -> Option<&str>,
) -> Column<R> {
    Column {
        name,
        data_type: DataType::Utf8,
        nullable: true,
        unit: "",
        doc,
        build: Box::new(move |rows| {
            Arc::new(rows.iter().map(get).collect::<StringArray>()) as ArrayRef
        }),
    }
}

/// A list of u32 per row (a histogram's bucket counts), its items never null.
pub fn u32_list_col<R: 'static>(
    name: &'static str,
    unit: &'static str,
    doc: &'static str,
    get: fn(&R) -> &[u32],
) -> Column<R> {
    let item = Arc::new(Field::new("item", DataType::UInt32, false));
    Column {
        name,
        data_type: DataType::List(item.clone()),
        nullable: false,
        unit,
        doc,
        build: Box::new(move |rows| {
            let mut list = ListBuilder::with_capacity(UInt32Builder::new(), rows.len())
                .with_field(item.clone());
            for row in rows {
                list.values().append_slice(get(row));
                list.append(true);
            }
            Arc::new(list.finish()) as ArrayRef
        }),
    }
}

/// Declares a table once: the row struct, one field per column in column order, and its
/// `Table` impl (name, description, and each column's kind, unit and meaning), each column
/// reading the field of its name. A field without a column, or a column without a field, is
/// not possible: `gpu_samples` once sampled NVLink counters no column wrote.
macro_rules! table {
    (@get str_col, $field:ident) => {
        |r| &*r.$field
    };
    (@get opt_str_col, $field:ident) => {
        |r| r.$field.as_deref()
    };
    (@get u32_list_col, $field:ident) => {
        |r| &r.$field[..]
    };
    (@get $kind:ident, $field:ident) => {
        |r| r.$field
    };
    (
        $(#[$meta:meta])*
        pub struct $row:ident in $name:literal {
            description: $description:expr,
            $($field:ident: $ty:ty => $kind:ident($($spec:expr),*)),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct $row {
            $(pub $field: $ty,)+
        }

        impl Table for $row {
            const NAME: &'static str = $name;
            const DESCRIPTION: &'static str = $description;
            fn columns() -> Vec<Column<Self>> {
                vec![$($kind(stringify!($field), $($spec,)* table!(@get $kind, $field)),)+]
            }
        }
    };
}
pub(crate) use table;

/// A table: its name, what one row means, and its columns.
pub trait Table: Sized + 'static {
    const NAME: &'static str;
    const DESCRIPTION: &'static str;
    fn columns() -> Vec<Column<Self>>;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(
            Self::columns()
                .iter()
                .map(|c| Field::new(c.name, c.data_type.clone(), c.nullable))
                .collect::<Vec<_>>(),
        ))
    }
}

/// SQL-facing type name of an Arrow type, for the documentation.
pub fn sql_type(dt: &DataType) -> &'static str {
    match dt {
        DataType::UInt16 => "USMALLINT",
        DataType::UInt32 => "UINTEGER",
        DataType::UInt64 => "UBIGINT",
        DataType::Int64 => "BIGINT",
        DataType::Float64 => "DOUBLE",
        DataType::Boolean => "BOOLEAN",
        DataType::Utf8 => "VARCHAR",
        DataType::Timestamp(_, _) => "TIMESTAMP WITH TIME ZONE",
        DataType::List(item) if item.data_type() == &DataType::UInt32 => "UINTEGER[]",
        _ => "OTHER",
    }
}

/// Markdown section documenting one table.
pub fn markdown<T: Table>() -> String {
    let mut out = format!("## `{}`\n\n{}\n\n", T::NAME, T::DESCRIPTION);
    out.push_str("| column | type (DuckDB) | null | unit | meaning |\n|---|---|---|---|---|\n");
    for c in T::columns() {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            c.name,
            sql_type(&c.data_type),
            if c.nullable { "yes" } else { "no" },
            c.unit,
            c.doc
        ));
    }
    out.push('\n');
    out
}

/// A table as readers see it: name, columns with their SQL types, and its documentation.
pub struct TableInfo {
    pub name: &'static str,
    pub columns: Vec<(&'static str, &'static str)>,
    pub markdown: fn() -> String,
}

impl TableInfo {
    pub fn of<T: Table>() -> TableInfo {
        TableInfo {
            name: T::NAME,
            columns: T::columns()
                .iter()
                .map(|c| (c.name, sql_type(&c.data_type)))
                .collect(),
            markdown: markdown::<T>,
        }
    }
}

pub fn opt_bool_col<R: 'static>(
    name: &'static str,
    doc: &'static str,
    get: fn(&R) -> Option<bool>,
) -> Column<R> {
    Column {
        name,
        data_type: DataType::Boolean,
        nullable: true,
        unit: "",
        doc,
        build: Box::new(move |rows| {
            Arc::new(rows.iter().map(get).collect::<BooleanArray>()) as ArrayRef
        }),
    }
}
