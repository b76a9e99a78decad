//! cp's hot path: a batch of small local files copied without the GIL.
//!
//! Each file: its source opened relative to its parent (components below the root never
//! followed), its data moved by the kernel (`copy_file_range`, else `sendfile`, else
//! `read`/`write`; holes of big sparse files kept), into a new temp file in the destination
//! directory created with the source's mode, ownership (root with `preserve`), then after close
//! its times, then `renameat` to its final name.  Whatever fails, the temp file is removed: a
//! final name never holds a partial file.  Per-file problems come back as errno (or a verdict),
//! never raised.  The batch fans out to `fanout` threads of the core.

use crate::names::names_of;
use crate::relpath::{cstr, errno, fan_out, lstat_at, open_at, split, Fd, Parents};
use libc::c_int;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

pub const COPIED: u8 = 0;
pub const SKIP: u8 = 1;
pub const ERROR: u8 = 2; // errno
pub const DIFFERS: u8 = 3; // exists and differs, and the job says error
pub const DST_PARENT: u8 = 4; // the destination's directory could not be opened (errno): a streamed copy makes it

const SPARSE_MIN: i64 = 1 << 20;
const BLOCK: usize = 8 << 20;

#[derive(Clone, Copy)]
struct Options {
    follow: bool,
    preserve: bool,
    inplace: bool,
    check_existing: bool,
    overwrite: bool,
    skip_same: bool,
    ignore_existing: bool,
    umask: u32,
    root: bool,
}

struct Job {
    rel: Vec<u8>,
    out: Vec<u8>,
    tmp: Vec<u8>,
    size: Option<i64>,
    mtime: Option<i64>,
}

#[derive(Clone, Copy, PartialEq)]
enum Method {
    CopyFileRange,
    Sendfile,
    ReadWrite,
}

fn falls_back(e: i32) -> bool {
    matches!(
        e,
        libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP | libc::EBADF | libc::EPERM
    )
}

/// Copy `[start, end)` to the same offsets with `method`; bytes copied, or errno.
fn extent_with(
    method: Method,
    src: c_int,
    dst: c_int,
    start: i64,
    end: i64,
    buf: &mut Vec<u8>,
) -> Result<i64, i32> {
    let mut pos = start;
    while pos < end {
        let count = ((end - pos) as usize).min(BLOCK);
        let n = match method {
            Method::CopyFileRange => {
                let (mut a, mut b) = (pos as libc::loff_t, pos as libc::loff_t);
                unsafe { libc::copy_file_range(src, &mut a, dst, &mut b, count, 0) as i64 }
            }
            Method::Sendfile => {
                if unsafe { libc::lseek(dst, pos, libc::SEEK_SET) } < 0 {
                    return Err(errno());
                }
                let mut off = pos as libc::off_t;
                unsafe { libc::sendfile(dst, src, &mut off, count) as i64 }
            }
            Method::ReadWrite => {
                buf.resize(count.min(1 << 20), 0);
                let r = unsafe { libc::pread(src, buf.as_mut_ptr() as *mut _, buf.len(), pos) };
                if r > 0 {
                    let mut w = 0isize;
                    while w < r {
                        let k = unsafe {
                            libc::pwrite(
                                dst,
                                buf.as_ptr().add(w as usize) as *const _,
                                (r - w) as usize,
                                pos + w as i64,
                            )
                        };
                        if k < 0 {
                            let e = errno();
                            if e == libc::EINTR {
                                continue;
                            }
                            return Err(e);
                        }
                        w += k;
                    }
                }
                r as i64
            }
        };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            if pos > start && method != Method::ReadWrite && falls_back(e) {
                return Ok(pos - start); // the caller goes on from here with the next method
            }
            return Err(e);
        }
        if n == 0 {
            break; // the file shrank: copy what there is (the size is fixed with the fstat size by the caller)
        }
        pos += n;
    }
    Ok(pos - start)
}

/// Copy `[start, end)` with the best method that works; `method` remembers it for the next file.
fn extent(
    method: &mut Method,
    src: c_int,
    dst: c_int,
    start: i64,
    end: i64,
    buf: &mut Vec<u8>,
) -> Result<(), i32> {
    let mut pos = start;
    loop {
        match extent_with(*method, src, dst, pos, end, buf) {
            Ok(n) => {
                pos += n;
                if pos >= end || n == 0 && *method == Method::ReadWrite {
                    return Ok(());
                }
                if n == 0 {
                    return Ok(()); // end of file before `end`
                }
                // stopped early on a fallback errno: next method
                *method = if *method == Method::CopyFileRange {
                    Method::Sendfile
                } else {
                    Method::ReadWrite
                };
            }
            Err(e) if falls_back(e) && *method != Method::ReadWrite => {
                *method = if *method == Method::CopyFileRange {
                    Method::Sendfile
                } else {
                    Method::ReadWrite
                };
            }
            Err(e) => return Err(e),
        }
    }
}

/// The data of `src` (of `size` bytes as fstat saw it) into `dst`; only data extents when sparse.
fn copy_data(
    method: &mut Method,
    src: c_int,
    dst: c_int,
    st: &libc::stat,
    buf: &mut Vec<u8>,
) -> Result<(), i32> {
    let size = st.st_size;
    if size >= BLOCK as i64 {
        // the larger read-ahead window, as cp asks (operators.copy_local measured it for big files)
        unsafe { libc::posix_fadvise(src, 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
    }
    let sparse = size >= SPARSE_MIN && (st.st_blocks as i64) * 512 < size;
    if !sparse {
        return extent(method, src, dst, 0, size, buf);
    }
    let mut pos = 0i64;
    while pos < size {
        let data = unsafe { libc::lseek(src, pos, libc::SEEK_DATA) };
        if data < 0 {
            let e = errno();
            if e == libc::ENXIO {
                break; // only a hole left
            }
            extent(method, src, dst, pos, size, buf)?;
            break;
        }
        if data >= size {
            break;
        }
        let hole = unsafe { libc::lseek(src, data, libc::SEEK_HOLE) };
        let stop = if hole < 0 { size } else { hole.min(size) };
        extent(method, src, dst, data, stop, buf)?;
        pos = stop;
    }
    if unsafe { libc::ftruncate(dst, size) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// `"copy"`, or the verdict on what the destination holds already.
fn verdict(dfd: c_int, name: &[u8], job: &Job, o: &Options) -> Result<Option<u8>, i32> {
    let st = match lstat_at(dfd, name) {
        Ok(st) => st,
        Err(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    if o.ignore_existing {
        return Ok(Some(SKIP));
    }
    let same = st.st_mode & libc::S_IFMT == libc::S_IFREG
        && Some(st.st_size) == job.size
        && job.mtime.is_none_or(|m| {
            (st.st_mtime * 1_000_000_000 + st.st_mtime_nsec).div_euclid(1000) == m.div_euclid(1000)
        });
    if same && !o.overwrite {
        return Ok(Some(SKIP));
    }
    if !o.overwrite && !o.skip_same {
        return Ok(Some(DIFFERS));
    }
    Ok(None)
}

/// Create `tmp` in `dfd` (a leftover of an earlier attempt replaced), with `mode` where the umask allows.
fn create(dfd: c_int, tmp: &[u8], mode: u32) -> Result<Fd, i32> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
    match open_at(dfd, tmp, flags, (mode & 0o777) as libc::mode_t) {
        Err(libc::EEXIST) => {
            let c = cstr(tmp)?;
            unsafe { libc::unlinkat(dfd, c.as_ptr(), 0) };
            open_at(dfd, tmp, flags, (mode & 0o777) as libc::mode_t)
        }
        other => other,
    }
}

fn fill(
    method: &mut Method,
    sfd: c_int,
    dfd: c_int,
    tmp: &[u8],
    o: &Options,
    buf: &mut Vec<u8>,
) -> Result<libc::stat, i32> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(sfd, &mut st) } != 0 {
        return Err(errno());
    }
    let mode = st.st_mode & 0o7777;
    let out = create(dfd, tmp, mode)?;
    copy_data(method, sfd, out.0, &st, buf)?;
    let chown = o.preserve && o.root;
    if chown && unsafe { libc::fchown(out.0, st.st_uid, st.st_gid) } != 0 {
        return Err(errno()); // before chmod: chown clears set-id bits
    }
    if (chown || mode != (mode & 0o777 & !o.umask)) && unsafe { libc::fchmod(out.0, mode) } != 0 {
        return Err(errno());
    }
    if unsafe { libc::close(out.0) } != 0 {
        std::mem::forget(out);
        return Err(errno()); // NFS reports a failed write-back here
    }
    std::mem::forget(out);
    Ok(st)
}

fn copy_one(
    method: &mut Method,
    src: &mut Parents,
    dst: &mut Parents,
    job: &Job,
    o: &Options,
    buf: &mut Vec<u8>,
) -> (u8, i32) {
    let (sdir, sname) = split(&job.rel);
    let (ddir, dname) = split(&job.out);
    let dfd = match dst.dir(ddir) {
        Ok(fd) => fd,
        Err(e) if e.errno == libc::ENOENT => return (DST_PARENT, e.errno),
        Err(e) => return (ERROR, e.errno),
    };
    if o.check_existing {
        match verdict(dfd, dname, job, o) {
            Ok(Some(v)) => return (v, 0),
            Ok(None) => {}
            Err(e) => return (ERROR, e),
        }
    }
    let sfd = match src.dir(sdir) {
        Ok(fd) => fd,
        Err(e) => return (ERROR, e.errno),
    };
    let flags = libc::O_RDONLY
        | libc::O_CLOEXEC
        | libc::O_NOCTTY
        | if o.follow { 0 } else { libc::O_NOFOLLOW };
    let input = match open_at(sfd, sname, flags, 0) {
        Ok(fd) => fd,
        Err(e) => return (ERROR, e),
    };
    let tmp: &[u8] = if o.inplace { dname } else { &job.tmp };
    let done = fill(method, input.0, dfd, tmp, o, buf).and_then(|st| {
        let times = [
            libc::timespec {
                tv_sec: st.st_atime,
                tv_nsec: st.st_atime_nsec,
            },
            libc::timespec {
                tv_sec: st.st_mtime,
                tv_nsec: st.st_mtime_nsec,
            },
        ];
        let t = cstr(tmp)?;
        if unsafe { libc::utimensat(dfd, t.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) }
            != 0
        {
            return Err(errno());
        }
        if !o.inplace {
            let f = cstr(dname)?;
            if unsafe { libc::renameat(dfd, t.as_ptr(), dfd, f.as_ptr()) } != 0 {
                return Err(errno());
            }
        }
        Ok(())
    });
    match done {
        Ok(()) => (COPIED, 0),
        Err(e) => {
            if let Ok(t) = cstr(tmp) {
                unsafe { libc::unlinkat(dfd, t.as_ptr(), 0) };
            }
            (ERROR, e)
        }
    }
}

/// Copy regular files from `src_root` to `dst_root`: per file its source path, destination path
/// and temp name (relative, exact bytes) and the manifest's size and mtime (for the existing-file
/// verdict).  `on_exist`: 0 error, 1 skip identical, 2 overwrite, 3 skip anything there.  Returns one status byte per file
/// (COPIED, SKIP, ERROR, DIFFERS, DST_PARENT) and one errno per file (0 when none).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (src_root, dst_root, rels, outs, temps, sizes, mtimes, follow, preserve, inplace, check_existing, on_exist, umask, fanout))]
fn cp_files(
    py: Python<'_>,
    src_root: &[u8],
    dst_root: &[u8],
    rels: &Bound<'_, PyList>,
    outs: &Bound<'_, PyList>,
    temps: &Bound<'_, PyList>,
    sizes: Vec<Option<i64>>,
    mtimes: Vec<Option<i64>>,
    follow: bool,
    preserve: bool,
    inplace: bool,
    check_existing: bool,
    on_exist: u8,
    umask: u32,
    fanout: usize,
) -> PyResult<(Py<PyBytes>, Vec<i32>)> {
    let (rels, outs, temps) = (names_of(rels)?, names_of(outs)?, names_of(temps)?);
    let jobs: Vec<Job> = rels
        .into_iter()
        .zip(outs)
        .zip(temps)
        .enumerate()
        .map(|(i, ((rel, out), tmp))| Job {
            rel,
            out,
            tmp,
            size: sizes.get(i).copied().flatten(),
            mtime: mtimes.get(i).copied().flatten(),
        })
        .collect();
    let o = Options {
        follow,
        preserve,
        inplace,
        check_existing,
        overwrite: on_exist == 2,
        skip_same: on_exist == 1,
        ignore_existing: on_exist == 3,
        umask,
        root: unsafe { libc::geteuid() } == 0,
    };
    let (src_root, dst_root) = (src_root.to_vec(), dst_root.to_vec());
    let done: Vec<(u8, i32)> = py.allow_threads(|| {
        fan_out(&jobs, fanout, |chunk, _| {
            let (mut src, mut dst) = (Parents::new(&src_root), Parents::new(&dst_root));
            let mut method = Method::CopyFileRange;
            let mut buf = Vec::new();
            chunk
                .iter()
                .map(|j| copy_one(&mut method, &mut src, &mut dst, j, &o, &mut buf))
                .collect()
        })
    });
    let status: Vec<u8> = done.iter().map(|d| d.0).collect();
    Ok((
        PyBytes::new(py, &status).unbind(),
        done.into_iter().map(|d| d.1).collect(),
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cp_files, m)?)?;
    Ok(())
}
