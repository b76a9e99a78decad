//! `cp_files`: the binding of `pfs_core::copy` (status bytes as `operators.copy_ends` reads them).

use pfs_core::copy::{self, Copied, CopyJob, CopyOptions, Existing, OnExist, Owners, Write};
use pfs_core::sys::{is_root, Follow};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::{identity, names_of};

const COPIED: u8 = 0;
const SKIP: u8 = 1;
const ERROR: u8 = 2; // errno
const DIFFERS: u8 = 3; // exists and differs, and the job says error
const DST_PARENT: u8 = 4; // the destination's directory could not be opened (errno)

fn status(c: Copied) -> (u8, i32) {
    match c {
        Copied::Copied => (COPIED, 0),
        Copied::Skip => (SKIP, 0),
        Copied::Differs => (DIFFERS, 0),
        Copied::Failed(cause) => (ERROR, cause.errno()),
        Copied::NoParent(cause) => (DST_PARENT, cause.errno()),
    }
}

/// Copy regular files from `src_root` to `dst_root`: per file its source path, destination path
/// and temp name (relative, exact bytes) and the manifest's size and mtime in ns (for the
/// existing-file verdict).  `on_exist`: 0 error, 1 skip identical, 2 overwrite, 3 skip anything there.  Returns one status
/// byte per file (COPIED, SKIP, ERROR, DIFFERS, DST_PARENT) and one errno per file (0 when none).
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python API, kept stable; the core takes CopyOptions
#[pyo3(signature = (src_root, dst_root, rels, outs, temps, sizes, mtimes, follow, preserve, inplace, check_existing, on_exist, umask, fanout, src_root_id=None))]
fn cp_files(
    py: Python<'_>,
    src_root: &[u8],
    dst_root: &[u8],
    rels: &Bound<'_, PyList>,
    outs: &Bound<'_, PyList>,
    temps: &Bound<'_, PyList>,
    sizes: Vec<Option<i64>>,
    mtimes: Vec<Option<i128>>,
    follow: bool,
    preserve: bool,
    inplace: bool,
    check_existing: bool,
    on_exist: u8,
    umask: u32,
    fanout: usize,
    src_root_id: Option<(u64, u64)>,
) -> PyResult<(Py<PyBytes>, Vec<i32>)> {
    let (rels, outs, temps) = (names_of(rels)?, names_of(outs)?, names_of(temps)?);
    let jobs: Vec<CopyJob> = rels
        .into_iter()
        .zip(outs)
        .zip(temps)
        .enumerate()
        .map(|(i, ((rel, out), tmp))| CopyJob {
            rel,
            out,
            tmp,
            size: sizes.get(i).copied().flatten(),
            mtime_ns: mtimes.get(i).copied().flatten(),
        })
        .collect();
    let o = CopyOptions {
        follow: if follow { Follow::Last } else { Follow::Never },
        owners: if preserve && is_root() {
            Owners::Keep
        } else {
            Owners::Mine
        },
        write: if inplace { Write::InPlace } else { Write::Temp },
        existing: if check_existing {
            Existing::Check
        } else {
            Existing::Ignore
        },
        on_exist: match on_exist {
            0 => OnExist::Error,
            1 => OnExist::SkipSame,
            2 => OnExist::Overwrite,
            3 => OnExist::Ignore,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "on_exist is 0, 1, 2 or 3, not {on_exist}"
                )))
            }
        },
        umask,
    };
    let done = py.allow_threads(|| {
        copy::cp_files_at(src_root, identity(src_root_id), dst_root, &jobs, &o, fanout)
    });
    let (codes, errnos): (Vec<u8>, Vec<i32>) = done.into_iter().map(status).unzip();
    Ok((PyBytes::new(py, &codes).unbind(), errnos))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cp_files, m)?)
}
