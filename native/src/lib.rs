//! `operators._native`: the Python binding of pfs's compiled core (`native/core`, crate `pfs_core`).
//!
//! Each entry point converts its arguments, runs a core job without the interpreter lock, and
//! returns columnar buffers or small tuples, never a Python object per entry.  A panic in the core
//! is caught by pyo3 at this boundary and raised as `pyo3_runtime.PanicException` (the core's pool
//! re-raises a helper's panic on the caller's thread after every helper has left, so it never hangs).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

mod checksum;
mod copy;
mod remove;
mod scan;
mod xattrs;

/// A Python list of `bytes` (names or paths, exact) as owned byte strings.
/// A root's `(device, inode)` from Python as the core's `Identity`.
pub(crate) fn identity(id: Option<(u64, u64)>) -> Option<pfs_core::parents::Identity> {
    id.map(|(dev, ino)| pfs_core::parents::Identity { dev, ino })
}

pub(crate) fn names_of(list: &Bound<'_, PyList>) -> PyResult<Vec<Vec<u8>>> {
    list.iter()
        .map(|o| Ok(o.downcast::<PyBytes>()?.as_bytes().to_vec()))
        .collect()
}

/// A Python `OSError` subclass for `errno` (Python maps the number to the subclass itself).
pub(crate) fn os_error(errno: i32) -> PyErr {
    pyo3::exceptions::PyOSError::new_err((errno, pfs_core::errors::strerror(errno)))
}

/// The core's version, so Python can tell a stale build (`scripts/setup.sh` rebuilds on change).
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The text a row's `error` column holds for `errno` (`"PermissionError: [Errno 13] ..."`).
#[pyfunction]
fn describe_errno(errno: i32) -> String {
    pfs_core::errors::describe(errno)
}

/// Runs `n` chunks over `width` core threads and panics in chunk `panic_at` (tests: a panic in the
/// core becomes a Python exception, and the pool still works after it).
#[pyfunction]
#[pyo3(signature = (n, width, panic_at=None))]
fn _pool_selftest(py: Python<'_>, n: usize, width: usize, panic_at: Option<usize>) -> usize {
    py.allow_threads(|| {
        let done = std::sync::atomic::AtomicUsize::new(0);
        pfs_core::pool::for_each(n, width, &|i| {
            assert!(Some(i) != panic_at, "chunk {i} panicked on purpose");
            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        done.into_inner()
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(describe_errno, m)?)?;
    m.add_function(wrap_pyfunction!(_pool_selftest, m)?)?;
    remove::register(m)?;
    copy::register(m)?;
    checksum::register(m)?;
    scan::register(m)?;
    xattrs::register(m)?;
    Ok(())
}
