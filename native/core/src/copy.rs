//! cp's hot path: a batch of small local files.
//!
//! Each file: its source opened relative to its parent (components below the root never followed)
//! and refused unless it is a regular file (a FIFO never blocks: `sys::open_regular`), its data moved
//! by the kernel (`copy_file_range`, else `sendfile`, else `pread`/`pwrite`; holes of big sparse
//! files kept), into a new temp file in the destination directory created with the source's mode,
//! ownership ([`Owners`]), extended attributes and ACLs (`crate::xattr`), times (`futimens` before
//! close), then `renameat` to its final name.  Whatever fails, the temp file is removed: a final name never holds a partial file.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::errors::{Cause, Error};
use crate::names::{check_component, check_relative, split};
use crate::parents::{fan_out, Identity, Parents, Root};
use crate::sys::{self, cstring, At, Follow};
use crate::time::Time;
use crate::xattr::{Attrs, Plan, Refused};

const SPARSE_MIN: i64 = 1 << 20;
const BLOCK: usize = 8 << 20;

/// What to do when the destination exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnExist {
    /// Report it as differing (unless identical: skipped).
    Error,
    /// Skip it when identical (size, mtime), else copy over it.
    SkipSame,
    /// Copy over it.
    Overwrite,
    /// Leave whatever is there alone (`--ignore-existing`).
    Ignore,
}

/// Where the data is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// A temp file renamed over the final name.
    Temp,
    /// The final name itself.
    InPlace,
}

/// One id of a copy's owner: left as created, the source's, or a given one (`--chown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Id {
    Leave,
    Source,
    Set(u32),
}

impl Id {
    fn pick(self, source: u32) -> Option<u32> {
        match self {
            Id::Leave => None,
            Id::Source => Some(source),
            Id::Set(id) => Some(id),
        }
    }
}

/// The owner and group a copy gets (`fchown` before `fchmod`, so set-id bits survive as with `cp -a`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owners {
    pub uid: Id,
    pub gid: Id,
}

impl Owners {
    /// The ids to `fchown` to (`u32::MAX`: unchanged), or None when nothing is to change.
    pub fn ids(&self, st: &libc::stat) -> Option<(u32, u32)> {
        match (self.uid.pick(st.st_uid), self.gid.pick(st.st_gid)) {
            (None, None) => None,
            (u, g) => Some((u.unwrap_or(u32::MAX), g.unwrap_or(u32::MAX))),
        }
    }

    pub const MINE: Owners = Owners {
        uid: Id::Leave,
        gid: Id::Leave,
    };
    pub const KEEP: Owners = Owners {
        uid: Id::Source,
        gid: Id::Source,
    };
}

/// A refused `fchown` as the failure log names it (`owner 1234:5678`, `-1` for an id left alone).
pub fn owner_refused(uid: u32, gid: u32, errno: i32) -> Refused {
    let id = |i: u32| {
        if i == u32::MAX {
            "-1".to_string()
        } else {
            i.to_string()
        }
    };
    Refused {
        what: format!("owner {}:{}", id(uid), id(gid)).into_bytes(),
        errno,
    }
}

/// Whether the destination is looked at before copying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    Check,
    Ignore,
}

#[derive(Clone, Copy, Debug)]
pub struct CopyOptions {
    pub follow: Follow,
    pub owners: Owners,
    pub write: Write,
    pub existing: Existing,
    pub on_exist: OnExist,
    pub umask: u32,
    /// Extended attributes and ACLs copied (None: `--no-xattrs`).
    pub xattrs: Option<Plan>,
}

/// One file to copy: source and destination paths and temp name (relative, exact bytes) and the
/// manifest's size and mtime (for the existing-file verdict).
#[derive(Clone, Debug, Default)]
pub struct CopyJob {
    pub rel: Vec<u8>,
    pub out: Vec<u8>,
    pub tmp: Vec<u8>,
    pub size: Option<i64>,
    pub mtime_ns: Option<i128>,
}

/// What became of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copied {
    Copied,
    /// Identical at the destination.
    Skip,
    Failed(Cause),
    /// Exists and differs, and the job says error.
    Differs,
    /// The destination's directory could not be opened (a streamed copy makes it).
    NoParent(Cause),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    CopyFileRange,
    Sendfile,
    ReadWrite,
}

impl Method {
    fn next(self) -> Method {
        match self {
            Method::CopyFileRange => Method::Sendfile,
            _ => Method::ReadWrite,
        }
    }
}

fn falls_back(e: i32) -> bool {
    matches!(
        e,
        libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP | libc::EBADF | libc::EPERM
    )
}

fn read_write(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    pos: i64,
    count: usize,
    buf: &mut Vec<u8>,
) -> Result<usize, i32> {
    buf.resize(count.min(1 << 20), 0);
    let r = sys::pread(src, buf, pos)?;
    let mut w = 0usize;
    while w < r {
        w += sys::pwrite(dst, &buf[w..r], pos + w as i64)?;
    }
    Ok(r)
}

/// Copies `[start, end)` to the same offsets with the best method that works; `method` remembers a
/// method the filesystems refused for the next file.  A method that copies nothing before `end`
/// gives way to the next (copy_file_range copies nothing on some filesystems); if plain reads find
/// nothing either, the file shrank: an error, never a short copy reported as copied.
fn extent(
    method: &mut Method,
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    start: i64,
    end: i64,
    buf: &mut Vec<u8>,
) -> Result<(), Cause> {
    let mut m = *method;
    let mut pos = start;
    while pos < end {
        let count = usize::try_from(end - pos).unwrap_or(BLOCK).min(BLOCK);
        let got = match m {
            Method::CopyFileRange => sys::copy_file_range(src, dst, pos, count),
            Method::Sendfile => sys::lseek(dst, pos, libc::SEEK_SET)
                .and_then(|_| sys::sendfile(dst, src, pos, count)),
            Method::ReadWrite => read_write(src, dst, pos, count, buf),
        };
        match got {
            Ok(0) if m == Method::ReadWrite => return Err(Cause::Shrank),
            Ok(0) => m = m.next(),
            Ok(n) => pos += n as i64,
            Err(e) if falls_back(e) && m != Method::ReadWrite => {
                m = m.next();
                *method = m;
            }
            Err(e) => return Err(Cause::Os(e)),
        }
    }
    Ok(())
}

/// The data of `src` (of `st.st_size` bytes as fstat saw it) into `dst`; only data extents when sparse.
fn copy_data(
    method: &mut Method,
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    st: &libc::stat,
    buf: &mut Vec<u8>,
) -> Result<(), Cause> {
    let size = st.st_size;
    if size >= BLOCK as i64 {
        sys::advise_sequential(src); // the larger read-ahead window, as cp asks
    }
    let sparse = size >= SPARSE_MIN && st.st_blocks * 512 < size;
    if !sparse {
        return extent(method, src, dst, 0, size, buf);
    }
    let mut pos = 0i64;
    while pos < size {
        let data = match sys::lseek(src, pos, libc::SEEK_DATA) {
            Ok(d) => d,
            Err(libc::ENXIO) => break, // only a hole left
            Err(_) => {
                extent(method, src, dst, pos, size, buf)?;
                break;
            }
        };
        if data >= size {
            break;
        }
        let stop = sys::lseek(src, data, libc::SEEK_HOLE).map_or(size, |h| h.min(size));
        extent(method, src, dst, data, stop, buf)?;
        pos = stop;
    }
    sys::ftruncate(dst, size)?;
    Ok(())
}

/// None: copy; else the verdict on what the destination holds already.
fn verdict(
    dfd: BorrowedFd<'_>,
    name: &CStr,
    job: &CopyJob,
    o: &CopyOptions,
) -> Result<Option<Copied>, Cause> {
    let st = match sys::lstat_at(dfd, name) {
        Ok(st) => st,
        Err(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(Cause::Os(e)),
    };
    let same = st.st_mode & libc::S_IFMT == libc::S_IFREG
        && Some(st.st_size) == job.size
        && job
            .mtime_ns
            .is_none_or(|m| Time::mtime(&st).micros_trunc() == m / 1000);
    Ok(match o.on_exist {
        OnExist::Ignore => Some(Copied::Skip),
        OnExist::Overwrite => None,
        _ if same => Some(Copied::Skip),
        OnExist::Error => Some(Copied::Differs),
        OnExist::SkipSame => None,
    })
}

/// Creates `tmp` in `dfd` (a leftover of an earlier attempt replaced), with `mode` where the umask allows.
fn create(dfd: BorrowedFd<'_>, tmp: &CStr, mode: u32) -> Result<OwnedFd, i32> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
    match sys::open_at(Some(dfd), tmp, flags, mode & 0o777) {
        Err(libc::EEXIST) => {
            let _ = sys::unlink_at(dfd, tmp, 0);
            sys::open_at(Some(dfd), tmp, flags, mode & 0o777)
        }
        other => other,
    }
}

/// What one file's copy needs besides its two ends: the method that last worked, the buffers.
struct Worker {
    method: Method,
    buf: Vec<u8>,
    attrs: Attrs,
}

/// Writes the file `tmp` in `dfd` from `src`: layout attributes (before any data: Lustre refuses a
/// layout after), data, owner, mode, the other attributes (after the owner: `fchown` clears
/// `security.capability`), times, then close.  A refused owner or attribute leaves the file copied
/// and is pushed to `refused`.
#[allow(clippy::too_many_arguments)]
fn fill(
    w: &mut Worker,
    src: BorrowedFd<'_>,
    st: &libc::stat,
    dfd: BorrowedFd<'_>,
    tmp: &CStr,
    o: &CopyOptions,
    clean: bool,
    refused: &mut Vec<Refused>,
) -> Result<(), Cause> {
    let mode = st.st_mode & 0o7777;
    let out = create(dfd, tmp, mode)?;
    let (from, to) = (At::Fd(src), At::Fd(out.as_fd()));
    let attrs = match o.xattrs {
        Some(plan) if w.attrs.read(from, refused) || clean => Some(plan),
        _ => None,
    };
    if attrs.is_some() {
        w.attrs.layouts(from, to, refused);
    }
    copy_data(&mut w.method, src, out.as_fd(), st, &mut w.buf)?;
    let mut chown = false;
    if let Some((uid, gid)) = o.owners.ids(st) {
        match sys::fchown(out.as_fd(), uid, gid) {
            Ok(()) => chown = true, // before chmod: chown clears set-id bits
            Err(e) => refused.push(owner_refused(uid, gid, e)),
        }
    }
    if chown || mode != (mode & 0o777 & !o.umask) {
        sys::fchmod(out.as_fd(), mode)?;
    }
    if let Some(plan) = attrs {
        w.attrs.rest(from, to, plan, clean, refused);
    }
    sys::futimens(
        out.as_fd(),
        &[Time::atime(st).timespec(), Time::mtime(st).timespec()],
    )?;
    sys::close(out)?; // NFS reports a failed write-back here
    Ok(())
}

fn copy_one(
    w: &mut Worker,
    src: &mut Parents<'_>,
    dst: &mut Parents<'_>,
    job: &CopyJob,
    o: &CopyOptions,
    refused: &mut Vec<Refused>,
) -> Copied {
    if let Err(c) = check_relative(&job.rel)
        .and(check_relative(&job.out))
        .and(check_component(&job.tmp))
    {
        return Copied::Failed(c);
    }
    let (sdir, sname) = split(&job.rel);
    let (ddir, dname) = split(&job.out);
    let (Ok(sname), Ok(dname), Ok(tmp)) = (cstring(sname), cstring(dname), cstring(&job.tmp))
    else {
        return Copied::Failed(Cause::UnsafeName);
    };
    let dfd = match dst.dir(ddir) {
        Ok(fd) => fd,
        Err(e) if e.cause == Cause::Os(libc::ENOENT) => return Copied::NoParent(e.cause),
        Err(e) => return Copied::Failed(e.cause),
    };
    if o.existing == Existing::Check {
        match verdict(dfd, &dname, job, o) {
            Ok(Some(v)) => return v,
            Ok(None) => {}
            Err(e) => return Copied::Failed(e),
        }
    }
    let nonblock = src.root().nonblock();
    let sfd = match src.dir(sdir) {
        Ok(fd) => fd,
        Err(e) => return Copied::Failed(e.cause),
    };
    let (input, st) = match sys::open_regular(Some(sfd), &sname, o.follow, nonblock) {
        Ok(x) => x,
        Err(c) => return Copied::Failed(c),
    };
    let tmp: &CStr = match o.write {
        Write::InPlace => &dname,
        Write::Temp => &tmp,
    };
    let clean = o.existing == Existing::Check; // inherited default ACLs, or attributes of a file overwritten in place
    let done =
        fill(w, input.as_fd(), &st, dfd, tmp, o, clean, refused).and_then(|()| match o.write {
            Write::InPlace => Ok(()),
            Write::Temp => sys::rename_at(dfd, tmp, &dname).map_err(Cause::Os),
        });
    match done {
        Ok(()) => Copied::Copied,
        Err(e) => {
            let _ = sys::unlink_at(dfd, tmp, 0);
            refused.clear(); // the file failed: that is its one failure
            Copied::Failed(e)
        }
    }
}

/// Every file's fate when a root cannot be opened (a missing destination root is made by Python).
fn root_failure(e: &Error, destination: bool) -> Copied {
    match e.cause {
        Cause::Os(libc::ENOENT) if destination => Copied::NoParent(e.cause),
        c => Copied::Failed(c),
    }
}

/// Copies regular files from `src_root` to `dst_root`, one outcome per job, in order, with what of
/// a copied file's metadata the destination refused (empty for most: no allocation).
pub fn cp_files(
    src_root: &[u8],
    dst_root: &[u8],
    jobs: &[CopyJob],
    o: &CopyOptions,
    fanout: usize,
) -> Vec<(Copied, Vec<Refused>)> {
    cp_files_at(src_root, None, dst_root, jobs, o, fanout)
}

/// [`cp_files`] from a source root that must still be the directory `src_id` names (every job
/// fails with ESTALE otherwise: another directory was renamed into its place since the job started).
pub fn cp_files_at(
    src_root: &[u8],
    src_id: Option<Identity>,
    dst_root: &[u8],
    jobs: &[CopyJob],
    o: &CopyOptions,
    fanout: usize,
) -> Vec<(Copied, Vec<Refused>)> {
    let src = match Root::open(src_root, src_id) {
        Ok(r) => r,
        Err(e) => {
            return jobs
                .iter()
                .map(|_| (root_failure(&e, false), Vec::new()))
                .collect()
        }
    };
    let dst = match Root::open(dst_root, None) {
        Ok(r) => r,
        Err(e) => {
            return jobs
                .iter()
                .map(|_| (root_failure(&e, true), Vec::new()))
                .collect()
        }
    };
    let (src, dst) = (&src, &dst);
    fan_out(jobs, fanout, |chunk, _| {
        let (mut s, mut d) = (Parents::new(src), Parents::new(dst));
        let mut w = Worker {
            method: Method::CopyFileRange,
            buf: Vec::new(),
            attrs: Attrs::default(),
        };
        chunk
            .iter()
            .map(|j| {
                let mut refused = Vec::new();
                let c = copy_one(&mut w, &mut s, &mut d, j, o, &mut refused);
                (c, refused)
            })
            .collect()
    })
}

/// The data of the regular file `src` into `dst`, `st` being what `fstat` said of `src` (its size is
/// what must be copied): the kernel's fastest method that works, holes kept for big sparse files.
pub fn copy_fd(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, st: &libc::stat) -> Result<(), Cause> {
    copy_data(&mut Method::CopyFileRange, src, dst, st, &mut Vec::new())
}
