//! rm's calls: the binding of `pfs_core::remove` (codes as `operators.removers` reads them).

use std::os::fd::BorrowedFd;

use pfs_core::remove::{
    self, Check, ClearOptions, Devices, Done, Expect, Found, Kind, Mode, RelOptions, Status,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::{identity, names_of};

/// Problem status codes shared with Python (`operators.removers.STATUSES`).
fn status_code(s: Status) -> u8 {
    match s {
        Status::Failed => 0,
        Status::Changed => 1,
        Status::NonEmpty => 2,
    }
}

/// Kind codes shared with Python (`operators.removers.KIND_CODES`; 255: unknown).
fn kind_of(code: u8) -> Option<Kind> {
    match code {
        0 => Some(Kind::File),
        1 => Some(Kind::Directory),
        2 => Some(Kind::Symlink),
        3 => Some(Kind::Other),
        _ => None,
    }
}

fn mode(dry_run: bool) -> Mode {
    if dry_run {
        Mode::DryRun
    } else {
        Mode::Remove
    }
}

type TreeResult = (
    i32,
    usize,
    u64,
    u64,
    Vec<(Py<PyBytes>, u64)>,
    Vec<(Py<PyBytes>, i32)>,
    Vec<Py<PyBytes>>,
);

/// Empty the directory open at `dir_fd` of everything but directories, listing it in bounded
/// batches.  `names`: only these (a pruned walk's choice), else the whole listing.  Returns
/// `(listing errno or 0, entries seen, removed, bytes, [(subdir, dev)], [(name, errno)], samples)`;
/// `dev` is 0 unless `want_dev` (then every subdirectory costs an lstat).
#[pyfunction]
#[pyo3(signature = (dir_fd, dry_run, want_dev, fanout, sample_limit, names=None))]
fn rm_clear_dir(
    py: Python<'_>,
    dir_fd: i32,
    dry_run: bool,
    want_dev: bool,
    fanout: usize,
    sample_limit: usize,
    names: Option<&Bound<'_, PyList>>,
) -> PyResult<TreeResult> {
    if dir_fd < 0 {
        return Err(crate::os_error(libc::EBADF));
    }
    let given = names.map(names_of).transpose()?;
    let o = ClearOptions {
        mode: mode(dry_run),
        devices: if want_dev {
            Devices::Want
        } else {
            Devices::Skip
        },
        fanout,
        sample_limit,
    };
    // SAFETY: `dir_fd` is a descriptor the caller keeps open for this call (operators.removers holds
    // it in a context manager around the call); it is only borrowed, never closed, here.
    let dir = unsafe { BorrowedFd::borrow_raw(dir_fd) };
    let c = py.allow_threads(|| remove::clear_dir(dir, given, o));
    let bytes = |n: &[u8]| PyBytes::new(py, n).unbind();
    Ok((
        c.listing.map_or(0, |e| e.errno()),
        c.entries,
        c.removed,
        c.bytes,
        c.subdirs.iter().map(|(n, dev)| (bytes(n), *dev)).collect(),
        c.problems
            .iter()
            .map(|(n, e)| (bytes(n), e.errno()))
            .collect(),
        c.samples.iter().map(|n| bytes(n)).collect(),
    ))
}

/// `(removed, bytes, missing, [(index, status, errno, message or None)], [sample index])`.
type BatchResult = (
    u64,
    u64,
    u64,
    Vec<(usize, u8, i32, Option<String>)>,
    Vec<usize>,
);

fn batch_result(done: Vec<Done>, dry_run: bool, sample_limit: usize) -> BatchResult {
    let (mut removed, mut bytes, mut missing) = (0u64, 0u64, 0u64);
    let (mut problems, mut samples) = (Vec::new(), Vec::new());
    for (i, d) in done.into_iter().enumerate() {
        match d {
            Done::Gone => missing += 1,
            Done::Removed(size) | Done::Dir(size) => {
                removed += 1;
                bytes += size;
                if dry_run && samples.len() < sample_limit {
                    samples.push(i);
                }
            }
            Done::Problem(p) => {
                let message = p.message.or(match p.cause {
                    pfs_core::errors::Cause::Os(_) => None,
                    c => Some(c.describe()),
                });
                problems.push((i, status_code(p.status), p.cause.errno(), message))
            }
        }
    }
    (removed, bytes, missing, problems, samples)
}

/// Unlink manifest rows below `root`: `rels` (exact bytes), `kinds` (one code per row, 255:
/// unknown), `sizes`, `mtimes` in ns, `inos` and `ctimes` in ns (None: unknown).  With `check`, a
/// row whose entry is not the one the scan saw (`Expect::differs`) is skipped.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python API, kept stable; the core takes RelOptions
#[pyo3(signature = (root, rels, kinds, sizes, mtimes, check, dry_run, fanout, sample_limit, root_id=None, inos=None, ctimes=None))]
fn rm_unlink_rels(
    py: Python<'_>,
    root: &[u8],
    rels: &Bound<'_, PyList>,
    kinds: &[u8],
    sizes: Vec<Option<i64>>,
    mtimes: Vec<Option<i128>>,
    check: bool,
    dry_run: bool,
    fanout: usize,
    sample_limit: usize,
    root_id: Option<(u64, u64)>,
    inos: Option<Vec<Option<u64>>>,
    ctimes: Option<Vec<Option<i128>>>,
) -> PyResult<BatchResult> {
    let at = |v: &Option<Vec<Option<i128>>>, i: usize| {
        v.as_ref().and_then(|v| v.get(i).copied().flatten())
    };
    let rows: Vec<(Vec<u8>, Expect)> = names_of(rels)?
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let want = Expect {
                kind: kinds.get(i).copied().and_then(kind_of),
                size: sizes.get(i).copied().flatten(),
                mtime_ns: mtimes.get(i).copied().flatten(),
                ino: inos.as_ref().and_then(|v| v.get(i).copied().flatten()),
                ctime_ns: at(&ctimes, i),
            };
            (r, want)
        })
        .collect();
    let o = RelOptions {
        check: if check { Check::Recheck } else { Check::Trust },
        mode: mode(dry_run),
        fanout,
        root_id: identity(root_id),
    };
    let done = py.allow_threads(|| remove::unlink_rels(root, &rows, o));
    Ok(batch_result(done, dry_run, sample_limit))
}

/// The identity rule (`Expect::differs`) for an entry another file system reported (fsspec):
/// `want` is the manifest row's `(kind code, size, mtime ns, ino, ctime ns)`, `now` what is there;
/// None when it is the same entry, else why not.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn rm_identity_changed(
    want: (u8, Option<i64>, Option<i128>, Option<u64>, Option<i128>),
    now: (u8, Option<i64>, Option<i128>, Option<u64>, Option<i128>),
) -> Option<String> {
    let expect = Expect {
        kind: kind_of(want.0),
        size: want.1,
        mtime_ns: want.2,
        ino: want.3,
        ctime_ns: want.4,
    };
    let found = Found {
        kind: kind_of(now.0).unwrap_or_default(),
        size: now.1,
        mtime_ns: now.2,
        ino: now.3,
        ctime_ns: now.4,
    };
    expect.differs(&found)
}

/// Remove directories below `root` (`b""`: the root itself, relative to its parent); with `check`,
/// only if still directories.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python API, kept stable; the core takes RelOptions
#[pyo3(signature = (root, rels, check, dry_run, fanout, sample_limit, root_id=None))]
fn rm_rmdir_rels(
    py: Python<'_>,
    root: &[u8],
    rels: &Bound<'_, PyList>,
    check: bool,
    dry_run: bool,
    fanout: usize,
    sample_limit: usize,
    root_id: Option<(u64, u64)>,
) -> PyResult<BatchResult> {
    let rels = names_of(rels)?;
    let o = RelOptions {
        check: if check { Check::Recheck } else { Check::Trust },
        mode: mode(dry_run),
        fanout,
        root_id: identity(root_id),
    };
    let done = py.allow_threads(|| remove::rmdir_rels(root, &rels, o));
    Ok(batch_result(done, dry_run, sample_limit))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rm_clear_dir, m)?)?;
    m.add_function(wrap_pyfunction!(rm_unlink_rels, m)?)?;
    m.add_function(wrap_pyfunction!(rm_rmdir_rels, m)?)?;
    m.add_function(wrap_pyfunction!(rm_identity_changed, m)?)?;
    Ok(())
}
