//! rm's hot path: unlink and rmdir relative to directory descriptors, without the GIL.
//!
//! Three calls, one per kind of `pfs rm` work (`operators.removers` drives them):
//! - `rm_clear_dir`: a tree walk's directory: list it, `unlinkat` every non-directory, hand the
//!   subdirectories back to the walk (never opened here: the walk opens them relative to this one
//!   with `O_NOFOLLOW`, so a directory swapped for a symlink is not followed).
//! - `rm_unlink_rels`: manifest rows, looked at again (type, size, mtime) unless changes are
//!   ignored, then unlinked relative to their parent, opened component by component.
//! - `rm_rmdir_rels`: directories, `unlinkat(AT_REMOVEDIR)` relative to their parent.
//!
//! Vanished entries are counted as already gone; every other problem is returned per entry
//! (errno, or a message), never raised.  Work fans out to `fanout` threads of the core.

use crate::names::names_of;
use crate::relpath::{cstr, errno, fan_out, fan_out_under, lstat_at, split, Parents};
use libc::c_int;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

pub const FAILED: u8 = 0;
pub const CHANGED: u8 = 1;
pub const NONEMPTY: u8 = 2;

/// What happened to one entry.
enum Done {
    Gone,         // vanished before we got to it: skipped_missing (manifest) or nothing (tree)
    Removed(u64), // unlinked (or would be, in a dry run), with its size
    Dir(u64),     // a directory (tree mode): back to the walk, with its device
    Problem(u8, i32, Option<String>),
}

fn unlink_at(dir: c_int, name: &[u8], flags: c_int) -> Result<(), i32> {
    let c = cstr(name)?;
    if unsafe { libc::unlinkat(dir, c.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Every name in the directory `fd`, with whether `d_type` says directory.
fn list_names(fd: c_int) -> Result<Vec<(Vec<u8>, bool)>, i32> {
    let mut out = Vec::new();
    crate::dirfd::read_dir(fd, |name, d_type| {
        out.push((name.to_vec(), d_type == libc::DT_DIR))
    })?;
    Ok(out)
}

fn clear_one(fd: c_int, name: &[u8], is_dir: bool, dry_run: bool, want_dev: bool) -> Done {
    if is_dir && !want_dev {
        return Done::Dir(0);
    }
    let st = match lstat_at(fd, name) {
        Ok(st) => st,
        Err(libc::ENOENT) => return Done::Gone,
        Err(e) => {
            return if is_dir {
                Done::Dir(0)
            } else {
                Done::Problem(FAILED, e, None)
            }
        }
    };
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        return Done::Dir(st.st_dev);
    }
    if dry_run {
        return Done::Removed(st.st_size as u64);
    }
    match unlink_at(fd, name, 0) {
        Ok(()) => Done::Removed(st.st_size as u64),
        Err(libc::ENOENT) => Done::Gone,
        Err(e) => Done::Problem(FAILED, e, None),
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

/// Empty the directory open at `dir_fd` of everything but directories.
///
/// `names`: only these (a pruned walk's choice), else the whole listing.  Returns
/// `(listing errno or 0, entries seen, removed, bytes, [(subdir, dev)], [(name, errno)], samples)`;
/// `dev` is 0 unless `want_dev` (then every subdirectory costs an lstat).
#[pyfunction]
#[pyo3(signature = (dir_fd, dry_run, want_dev, fanout, sample_limit, names=None))]
fn rm_clear_dir(
    py: Python<'_>,
    dir_fd: c_int,
    dry_run: bool,
    want_dev: bool,
    fanout: usize,
    sample_limit: usize,
    names: Option<&Bound<'_, PyList>>,
) -> PyResult<TreeResult> {
    let given = match names {
        Some(list) => Some(names_of(list)?),
        None => None,
    };
    let (list_err, entries, done) = py.allow_threads(|| {
        let (list_err, entries) = match given {
            Some(n) => (0, n.into_iter().map(|n| (n, false)).collect()),
            None => match list_names(dir_fd) {
                Ok(e) => (0, e),
                Err(e) => (e, Vec::new()),
            },
        };
        let done = fan_out(&entries, fanout, |chunk, _| {
            chunk
                .iter()
                .map(|(n, d)| clear_one(dir_fd, n, *d, dry_run, want_dev))
                .collect()
        });
        (list_err, entries, done)
    });
    let (mut removed, mut bytes) = (0u64, 0u64);
    let (mut subdirs, mut problems, mut samples) = (Vec::new(), Vec::new(), Vec::new());
    for ((name, _), d) in entries.iter().zip(done) {
        match d {
            Done::Gone => {}
            Done::Removed(size) => {
                removed += 1;
                bytes += size;
                if dry_run && samples.len() < sample_limit {
                    samples.push(PyBytes::new(py, name).unbind());
                }
            }
            Done::Dir(dev) => subdirs.push((PyBytes::new(py, name).unbind(), dev)),
            Done::Problem(_, e, _) => problems.push((PyBytes::new(py, name).unbind(), e)),
        }
    }
    Ok((
        list_err,
        entries.len(),
        removed,
        bytes,
        subdirs,
        problems,
        samples,
    ))
}

/// Kind codes shared with Python (`operators.removers.KIND_CODES`).
fn kind_code(mode: libc::mode_t) -> u8 {
    match mode & libc::S_IFMT {
        libc::S_IFREG => 0,
        libc::S_IFDIR => 1,
        libc::S_IFLNK => 2,
        _ => 3,
    }
}

const KIND_NAMES: [&str; 4] = ["file", "directory", "symlink", "other"];

/// Why a parent could not be opened, as a problem of the entry below it.
fn parent_problem(e: crate::relpath::ParentError) -> Done {
    match e.errno {
        libc::ENOENT => Done::Gone,
        libc::ELOOP | libc::ENOTDIR if !e.component.is_empty() => Done::Problem(
            FAILED,
            e.errno,
            Some(format!(
                "ancestor '{}' is a symlink or no longer a directory: not followed",
                String::from_utf8_lossy(&e.component)
            )),
        ),
        err => Done::Problem(FAILED, err, None),
    }
}

/// Manifest expectations of one row: kind code (255: unknown), size, mtime in ns (None: unknown).
type Expect = (u8, Option<i64>, Option<i64>);

fn changed(want: &Expect, st: &libc::stat) -> Option<String> {
    let kind = kind_code(st.st_mode);
    if want.0 != 255 && want.0 != kind {
        return Some(format!(
            "type {} -> {}",
            KIND_NAMES[want.0.min(3) as usize],
            KIND_NAMES[kind as usize]
        ));
    }
    if let Some(size) = want.1 {
        if size != st.st_size {
            return Some(format!("size {} -> {}", size, st.st_size));
        }
    }
    if let Some(mtime) = want.2 {
        let now = st.st_mtime * 1_000_000_000 + st.st_mtime_nsec;
        if mtime.div_euclid(1000) != now.div_euclid(1000) {
            return Some("mtime differs from the manifest".to_string());
        }
    }
    None
}

fn unlink_rel(
    parents: &mut Parents,
    rel: &[u8],
    want: &Expect,
    check: bool,
    dry_run: bool,
) -> Done {
    let (dir, name) = split(rel);
    let fd = match parents.dir(dir) {
        Ok(fd) => fd,
        Err(e) => return parent_problem(e),
    };
    let mut size = want.1.unwrap_or(0).max(0) as u64;
    if check {
        let st = match lstat_at(fd, name) {
            Ok(st) => st,
            Err(libc::ENOENT) => return Done::Gone,
            Err(e) => return Done::Problem(FAILED, e, None),
        };
        if let Some(why) = changed(want, &st) {
            return Done::Problem(CHANGED, 0, Some(why));
        }
        size = st.st_size as u64;
    }
    if dry_run {
        return Done::Removed(size);
    }
    match unlink_at(fd, name, 0) {
        Ok(()) => Done::Removed(size),
        Err(libc::ENOENT) => Done::Gone,
        Err(e) => Done::Problem(FAILED, e, None),
    }
}

fn rmdir_rel(root: &[u8], parents: &mut Parents, rel: &[u8], check: bool, dry_run: bool) -> Done {
    let (fd, name): (c_int, &[u8]) = if rel.is_empty() {
        (libc::AT_FDCWD, root) // the root itself, by the path the user gave
    } else {
        let (dir, name) = split(rel);
        match parents.dir(dir) {
            Ok(fd) => (fd, name),
            Err(e) => return parent_problem(e),
        }
    };
    if check {
        match lstat_at(fd, name) {
            Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => {
                return Done::Problem(CHANGED, libc::ENOTDIR, Some("no longer a directory".into()))
            }
            Ok(_) => {}
            Err(libc::ENOENT) => return Done::Gone,
            Err(e) => return Done::Problem(FAILED, e, None),
        }
    }
    if dry_run {
        return Done::Removed(0);
    }
    match unlink_at(fd, name, libc::AT_REMOVEDIR) {
        Ok(()) => Done::Removed(0),
        Err(libc::ENOENT) => Done::Gone,
        Err(e @ (libc::ENOTEMPTY | libc::EEXIST)) => Done::Problem(
            NONEMPTY,
            e,
            Some("directory not empty: left in place".into()),
        ),
        Err(libc::ENOTDIR) => {
            Done::Problem(CHANGED, libc::ENOTDIR, Some("no longer a directory".into()))
        }
        Err(e) => Done::Problem(FAILED, e, None),
    }
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
            Done::Problem(status, e, msg) => problems.push((i, status, e, msg)),
        }
    }
    (removed, bytes, missing, problems, samples)
}

/// Unlink manifest rows below `root`: `rels` (exact bytes), `kinds` (one code per row, 255:
/// unknown), `sizes` and `mtimes` (None: unknown).  With `check`, a row whose type, size or mtime
/// (to the microsecond) changed since the scan is skipped.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn rm_unlink_rels(
    py: Python<'_>,
    root: &[u8],
    rels: &Bound<'_, PyList>,
    kinds: &[u8],
    sizes: Vec<Option<i64>>,
    mtimes: Vec<Option<i64>>,
    check: bool,
    dry_run: bool,
    fanout: usize,
    sample_limit: usize,
) -> PyResult<BatchResult> {
    let rels = names_of(rels)?;
    let rows: Vec<(Vec<u8>, Expect)> = rels
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            (
                r,
                (
                    kinds.get(i).copied().unwrap_or(255),
                    sizes.get(i).copied().flatten(),
                    mtimes.get(i).copied().flatten(),
                ),
            )
        })
        .collect();
    let root = root.to_vec();
    let done = py.allow_threads(|| {
        fan_out_under(&root, &rows, fanout, |parents, (rel, want)| {
            unlink_rel(parents, rel, want, check, dry_run)
        })
    });
    Ok(batch_result(done, dry_run, sample_limit))
}

/// Remove directories below `root` (`b""`: the root itself); with `check`, only if still directories.
#[pyfunction]
fn rm_rmdir_rels(
    py: Python<'_>,
    root: &[u8],
    rels: &Bound<'_, PyList>,
    check: bool,
    dry_run: bool,
    fanout: usize,
    sample_limit: usize,
) -> PyResult<BatchResult> {
    let rels = names_of(rels)?;
    let root = root.to_vec();
    let done = py.allow_threads(|| {
        fan_out_under(&root, &rels, fanout, |parents, rel| {
            rmdir_rel(&root, parents, rel, check, dry_run)
        })
    });
    Ok(batch_result(done, dry_run, sample_limit))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(rm_clear_dir, m)?)?;
    m.add_function(wrap_pyfunction!(rm_unlink_rels, m)?)?;
    m.add_function(wrap_pyfunction!(rm_rmdir_rels, m)?)?;
    Ok(())
}
