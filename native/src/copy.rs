//! `cp_files`: the binding of `pfs_core::copy` (status bytes as `operators.copy_ends` reads them).

use pfs_core::copy::{self, Copied, CopyJob, CopyOptions, Existing, Id, OnExist, Owners, Write};
use pfs_core::sys::{cstring, At, Follow};
use pfs_core::xattr::{self, Phase, Plan, Refused};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use std::os::fd::BorrowedFd;

use crate::{identity, names_of};

const COPIED: u8 = 0;
const SKIP: u8 = 1;
const ERROR: u8 = 2; // errno
const DIFFERS: u8 = 3; // exists and differs, and the job says error
const DST_PARENT: u8 = 4; // the destination's directory could not be opened (errno)

/// A copied file's refused metadata: its index in the call, what was refused, the errno.
type Refusal = (usize, Vec<u8>, i32);

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
/// existing-file verdict).  `on_exist`: 0 error, 1 skip identical, 2 overwrite, 3 skip anything there.
/// `uid`/`gid`: -1 leave the copier's, -2 the source's, else that id.  `xattrs`: copy extended
/// attributes and ACLs.  Returns one status byte per file (COPIED, SKIP, ERROR, DIFFERS, DST_PARENT),
/// one errno per file (0 when none), and `(index, what, errno)` for each piece of a copied file's
/// metadata the destination refused (`what`: `xattr user.foo`, `owner 1:2`).
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python API; the core takes CopyOptions
#[pyo3(signature = (src_root, dst_root, rels, outs, temps, sizes, mtimes, follow, uid, gid, xattrs, inplace, check_existing, on_exist, umask, fanout, src_root_id=None))]
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
    uid: i64,
    gid: i64,
    xattrs: bool,
    inplace: bool,
    check_existing: bool,
    on_exist: u8,
    umask: u32,
    fanout: usize,
    src_root_id: Option<(u64, u64)>,
) -> PyResult<(Py<PyBytes>, Vec<i32>, Vec<Refusal>)> {
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
        owners: Owners {
            uid: id_of(uid)?,
            gid: id_of(gid)?,
        },
        xattrs: xattrs.then(Plan::here),
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
    let mut refusals = Vec::new();
    let mut codes = Vec::with_capacity(done.len());
    let mut errnos = Vec::with_capacity(done.len());
    for (i, (c, refused)) in done.into_iter().enumerate() {
        let (code, errno) = status(c);
        codes.push(code);
        errnos.push(errno);
        refusals.extend(refused.into_iter().map(|r| (i, r.what, r.errno)));
    }
    Ok((PyBytes::new(py, &codes).unbind(), errnos, refusals))
}

fn id_of(id: i64) -> PyResult<Id> {
    match id {
        -1 => Ok(Id::Leave),
        -2 => Ok(Id::Source),
        _ => u32::try_from(id)
            .ok()
            .filter(|&i| i != u32::MAX)
            .map(Id::Set)
            .ok_or_else(|| PyValueError::new_err(format!("not a uid or gid: {id}"))),
    }
}

/// A descriptor (int) or a path (bytes, its last component never followed).
#[derive(FromPyObject)]
enum Place {
    Fd(i32),
    Path(Vec<u8>),
}

/// `p` as the core reaches it; `c` holds a path's C string for as long as the `At` lives.
fn at<'a>(p: &Place, c: &'a Option<std::ffi::CString>) -> PyResult<At<'a>> {
    match (p, c) {
        // SAFETY: the caller holds `fd` open for the duration of the call that borrows it (the GIL
        // is released, but the Python caller is blocked in that call).
        (Place::Fd(fd), _) if *fd >= 0 => Ok(At::Fd(unsafe { BorrowedFd::borrow_raw(*fd) })),
        (Place::Path(_), Some(c)) => Ok(At::Path(c.as_c_str())),
        _ => Err(PyValueError::new_err("a descriptor >= 0 or a path")),
    }
}

/// Copies the extended attributes and ACLs of `src` onto `dst` (layouts only between file systems
/// of one type; `security.*`/`trusted.*` with CAP_SYS_ADMIN); `clean` also removes those of the
/// copied kinds `dst` has and `src` lacks.  Each an open descriptor, or a path whose last component
/// is not followed (a symlink: `/proc/self/fd/<parent>/<name>`, see `pfs_core::sys::At`).
/// `phase`: `all`, `layouts` (onto a file before its data) or `rest` (all but layouts).
/// Returns what the destination refused, `(what, errno)`.
#[pyfunction]
#[pyo3(signature = (src, dst, clean, phase="all"))]
fn copy_xattrs(
    py: Python<'_>,
    src: Place,
    dst: Place,
    clean: bool,
    phase: &str,
) -> PyResult<Vec<(Vec<u8>, i32)>> {
    let phase = match phase {
        "all" => Phase::All,
        "layouts" => Phase::Layouts,
        "rest" => Phase::Rest,
        _ => {
            return Err(PyValueError::new_err(format!(
                "phase is all, layouts or rest, not {phase:?}"
            )))
        }
    };
    let path = |p: &Place| match p {
        Place::Path(b) => cstring(b).map(Some).map_err(crate::os_error),
        Place::Fd(_) => Ok(None),
    };
    let (sp, dp) = (path(&src)?, path(&dst)?);
    let (s, d) = (at(&src, &sp)?, at(&dst, &dp)?);
    let refused: Vec<Refused> =
        py.allow_threads(|| xattr::copy_attrs(s, d, Plan::here(), clean, phase));
    Ok(refused.into_iter().map(|r| (r.what, r.errno)).collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cp_files, m)?)?;
    m.add_function(wrap_pyfunction!(copy_xattrs, m)?)
}
