//! DuckDB through its C API, loaded at run time: only `analyze` and `sql --run` need it, so
//! `record` on the nodes does not depend on a 70 MB library (the `duckdb` crate links it at
//! build time, and needs another arrow major version: measured and decided in the notes of
//! issue 16). Results come back as JSON built by DuckDB itself (`to_json`), which keeps this
//! binding to a handful of functions, each looked up once when the library is loaded (`Api`).
use std::{
    ffi::{c_char, c_void, CStr, CString},
    path::{Path, PathBuf},
};

use anyhow::{anyhow, bail, Context as _, Result};
use libloading::{Library, Symbol};
use serde::de::DeserializeOwned;

/// `duckdb_result` of the C API (DuckDB 1.x): only its address is handed around, but it must
/// be allocated with the right size.
#[repr(C)]
struct RawResult {
    deprecated_column_count: u64,
    deprecated_row_count: u64,
    deprecated_rows_changed: u64,
    deprecated_columns: *mut c_void,
    deprecated_error_message: *mut c_char,
    internal_data: *mut c_void,
}

impl RawResult {
    fn empty() -> Self {
        RawResult {
            deprecated_column_count: 0,
            deprecated_row_count: 0,
            deprecated_rows_changed: 0,
            deprecated_columns: std::ptr::null_mut(),
            deprecated_error_message: std::ptr::null_mut(),
            internal_data: std::ptr::null_mut(),
        }
    }
}

type Handle = *mut c_void;
const SUCCESS: i32 = 0;

/// The C API functions this binding calls, with their types as in duckdb.h (1.x). Plain
/// function pointers: valid while `DuckDb::lib`, loaded before and dropped after them, is.
struct Api {
    query: unsafe extern "C" fn(Handle, *const c_char, *mut RawResult) -> i32,
    destroy_result: unsafe extern "C" fn(*mut RawResult),
    result_error: unsafe extern "C" fn(*mut RawResult) -> *const c_char,
    row_count: unsafe extern "C" fn(*mut RawResult) -> u64,
    value_is_null: unsafe extern "C" fn(*mut RawResult, u64, u64) -> bool,
    value_varchar: unsafe extern "C" fn(*mut RawResult, u64, u64) -> *mut c_char,
    free: unsafe extern "C" fn(*mut c_void),
    disconnect: unsafe extern "C" fn(*mut Handle),
    close: unsafe extern "C" fn(*mut Handle),
}

impl Api {
    fn load(lib: &Library) -> Result<Api> {
        // SAFETY: each type is the function's in duckdb.h (1.x).
        unsafe {
            Ok(Api {
                query: *sym(lib, b"duckdb_query\0")?,
                destroy_result: *sym(lib, b"duckdb_destroy_result\0")?,
                result_error: *sym(lib, b"duckdb_result_error\0")?,
                row_count: *sym(lib, b"duckdb_row_count\0")?,
                value_is_null: *sym(lib, b"duckdb_value_is_null\0")?,
                value_varchar: *sym(lib, b"duckdb_value_varchar\0")?,
                free: *sym(lib, b"duckdb_free\0")?,
                disconnect: *sym(lib, b"duckdb_disconnect\0")?,
                close: *sym(lib, b"duckdb_close\0")?,
            })
        }
    }
}

/// An in-memory DuckDB database with one connection.
pub struct DuckDb {
    api: Api,
    db: Handle,
    conn: Handle,
    pub library: PathBuf,
    // (last: dropped after the handles are closed through `api`)
    lib: Library,
}

/// Where the library is looked for, in order.
fn candidates(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("SCALETRACE_DUCKDB_LIB") {
        out.push(PathBuf::from(p));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        out.push(dir.join("libduckdb.so"));
        out.push(dir.join("../lib/libduckdb.so"));
    }
    out.push("/usr/local/lib/libduckdb.so".into());
    // the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache)
    out.push("libduckdb.so".into());
    out
}

impl DuckDb {
    /// Loads libduckdb and opens an in-memory database.
    pub fn open(explicit: Option<&Path>) -> Result<Self> {
        let mut tried = Vec::new();
        for path in candidates(explicit) {
            let is_bare_name = path.components().count() == 1;
            if !is_bare_name && !path.exists() {
                tried.push(path.display().to_string());
                continue;
            }
            // SAFETY: loading a library runs its initialisers; libduckdb's are benign.
            match unsafe { Library::new(&path) } {
                Ok(lib) => return Self::connect(lib, path),
                Err(e) => tried.push(format!("{} ({e})", path.display())),
            }
        }
        bail!(
            "DuckDB library not found (tried {}): run `cargo xtask setup`, or point --duckdb-lib / SCALETRACE_DUCKDB_LIB at a libduckdb.so (1.x)",
            tried.join(", ")
        )
    }

    fn connect(lib: Library, library: PathBuf) -> Result<Self> {
        let api = Api::load(&lib)?;
        let mut db: Handle = std::ptr::null_mut();
        let mut conn: Handle = std::ptr::null_mut();
        // SAFETY: signatures as in duckdb.h (1.x); out-pointers point at live locals.
        unsafe {
            let open: Symbol<unsafe extern "C" fn(*const c_char, *mut Handle) -> i32> =
                sym(&lib, b"duckdb_open\0")?;
            if open(std::ptr::null(), &mut db) != SUCCESS {
                bail!(
                    "DuckDB ({}) could not open an in-memory database",
                    library.display()
                );
            }
            let connect: Symbol<unsafe extern "C" fn(Handle, *mut Handle) -> i32> =
                sym(&lib, b"duckdb_connect\0")?;
            if connect(db, &mut conn) != SUCCESS {
                (api.close)(&mut db);
                bail!("DuckDB ({}) refused a connection", library.display());
            }
        }
        Ok(DuckDb {
            api,
            db,
            conn,
            library,
            lib,
        })
    }

    pub fn version(&self) -> String {
        // SAFETY: returns a static string.
        unsafe {
            sym::<unsafe extern "C" fn() -> *const c_char>(&self.lib, b"duckdb_library_version\0")
                .map(|f| CStr::from_ptr(f()).to_string_lossy().into_owned())
                .unwrap_or_else(|_| "unknown".into())
        }
    }

    /// Runs `sql` (any number of statements); returns the first cell of the last result as
    /// text, if there is one.
    fn run(&self, sql: &str) -> Result<Option<String>> {
        let text = CString::new(sql).context("SQL contains a NUL byte")?;
        let mut result = RawResult::empty();
        let api = &self.api;
        // SAFETY: `api` holds duckdb.h's signatures; `result` is destroyed on every path below.
        unsafe {
            let state = (api.query)(self.conn, text.as_ptr(), &mut result);
            if state != SUCCESS {
                let msg = (api.result_error)(&mut result);
                let msg = if msg.is_null() {
                    "unknown error".to_string()
                } else {
                    CStr::from_ptr(msg).to_string_lossy().into_owned()
                };
                (api.destroy_result)(&mut result);
                return Err(anyhow!("{}", msg.lines().next().unwrap_or("")));
            }
            let mut cell = None;
            if result.deprecated_column_count > 0
                && (api.row_count)(&mut result) > 0
                && !(api.value_is_null)(&mut result, 0, 0)
            {
                let p = (api.value_varchar)(&mut result, 0, 0);
                if !p.is_null() {
                    cell = Some(CStr::from_ptr(p).to_string_lossy().into_owned());
                    (api.free)(p.cast());
                }
            }
            (api.destroy_result)(&mut result);
            Ok(cell)
        }
    }

    /// Runs statements whose results are not needed.
    pub fn execute(&self, sql: &str) -> Result<()> {
        self.run(sql).map(|_| ())
    }

    /// The rows of a query, decoded from DuckDB's JSON rendering of them.
    pub fn rows<T: DeserializeOwned>(&self, query: &str) -> Result<Vec<T>> {
        let wrapped = format!("SELECT to_json(list(st_row))::VARCHAR FROM ({query}) st_row");
        match self.run(&wrapped)? {
            None => Ok(Vec::new()),
            Some(json) => serde_json::from_str(&json)
                .with_context(|| format!("decoding the result of {}", first_words(query))),
        }
    }
}

fn first_words(sql: &str) -> String {
    sql.split_whitespace().take(8).collect::<Vec<_>>().join(" ")
}

/// SAFETY: the caller states the symbol's true type.
unsafe fn sym<'l, T>(lib: &'l Library, name: &[u8]) -> Result<Symbol<'l, T>> {
    lib.get(name).with_context(|| {
        format!(
            "libduckdb lacks {} (not a DuckDB 1.x C API library?)",
            String::from_utf8_lossy(&name[..name.len() - 1])
        )
    })
}

impl Drop for DuckDb {
    fn drop(&mut self) {
        // SAFETY: handles were created by duckdb_connect/duckdb_open and are closed once.
        unsafe {
            (self.api.disconnect)(&mut self.conn);
            (self.api.close)(&mut self.db);
        }
    }
}
