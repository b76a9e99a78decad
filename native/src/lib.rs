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

/// Buffers of 1 MiB and more (a flush's columns, their copies as Python bytes) are mapped and unmapped
/// on their own, instead of glibc's default, which raises this threshold each time such a block is
/// freed and from then on serves them from per-thread heaps that keep freed memory: the core's steps
/// run on many pool threads, and a 1,000,000-entry directory peaked at 231-292 MB against 196-203 with
/// this (2,000,000 entries: 266-316 against 201-222; `benchmarks/RESULTS.md`, "Native core: peak RSS").
fn map_big_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    map_big_buffers();
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
