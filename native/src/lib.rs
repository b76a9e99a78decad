//! `operators._native`: pfs's compiled core for the POSIX hot paths.
//!
//! Each entry point takes a batch of work (a directory to list and stat, ...), runs it without the
//! interpreter lock, and returns columnar buffers that Python wraps as Arrow arrays without a
//! Python object per entry.  Shared pieces live in their own modules: `errors` (errno -> the text
//! of a row's error), `dirfd` (descriptors, `*at` calls, listing), `columns` (buffer builders).
//! A new job's module (`remove.rs`, `copy.rs`) goes beside them with one `add` line below.

use pyo3::prelude::*;

pub mod checksum;
pub mod columns;
pub mod copy;
pub mod dirfd;
pub mod errors;
pub mod names;
pub mod pool;
pub mod relpath;
pub mod remove;
pub mod scan;

/// The core's version, so Python can tell a stale build (`scripts/setup.sh` rebuilds on change).
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The text a row's `error` column holds for `errno` (`"PermissionError: [Errno 13] ..."`).
#[pyfunction]
fn describe_errno(errno: i32) -> String {
    errors::describe(errno)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(describe_errno, m)?)?;
    remove::register(m)?;
    copy::register(m)?;
    checksum::register(m)?;
    m.add_class::<scan::Sink>()?;
    m.add_class::<scan::DirScan>()?;
    m.add_function(wrap_pyfunction!(scan::pool_threads, m)?)?;
    Ok(())
}
