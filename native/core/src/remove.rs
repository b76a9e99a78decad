//! rm's hot path: unlink and rmdir relative to directory descriptors.
//!
//! Three jobs, one per kind of `pfs rm` work (`operators.removers` drives them through the binding):
//! - [`clear_dir`]: a tree walk's directory: listed in bounded batches (memory flat in directory size,
//!   as coreutils' fts), every non-directory `unlinkat`-ed, the subdirectories handed back to the walk
//!   (never opened here: the walk opens them relative to this one with `O_NOFOLLOW`).
//! - [`unlink_rels`]: manifest rows, looked at again ([`Expect::differs`]: type, size, mtime, inode,
//!   ctime, from the one `lstat` made anyway) unless changes are trusted,
//!   then unlinked relative to their parent, opened component by component.
//! - [`rmdir_rels`]: directories, `unlinkat(AT_REMOVEDIR)` relative to their parent; the root
//!   itself relative to its own parent, once checked to be the directory pinned at the start.
//!
//! Vanished entries are counted as already gone; every other problem is returned per entry.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd};

use crate::errors::{Cause, Error};
use crate::names::{check_component, split};
use crate::parents::{fan_out, fan_out_under, Identity, Parents, Root};
use crate::sys::{self, cstring, DirStream};
use crate::time::Time;

/// Names listed and handled per batch by [`clear_dir`]: bounds its memory whatever the directory's size.
pub const CLEAR_BATCH: usize = 4096;

/// Removing for real, or only counting what would go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Remove,
    DryRun,
}

/// Whether a manifest row is looked at again before it is removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    Recheck,
    Trust,
}

/// Whether a tree walk wants each subdirectory's device (`--one-file-system`: an lstat each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Devices {
    Skip,
    Want,
}

/// An entry's type, as manifests name them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    File,
    Directory,
    Symlink,
    #[default]
    Other,
}

impl Kind {
    pub fn of(mode: libc::mode_t) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Directory,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Directory => "directory",
            Kind::Symlink => "symlink",
            Kind::Other => "other",
        }
    }
}

/// How a problem is counted (`operators.removers.STATUSES`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Failed,
    Changed,
    NonEmpty,
}

/// A problem with one entry: how it counts, why, and a message when the errno alone does not say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub status: Status,
    pub cause: Cause,
    pub message: Option<String>,
}

impl Problem {
    fn failed(cause: impl Into<Cause>) -> Done {
        Done::Problem(Problem {
            status: Status::Failed,
            cause: cause.into(),
            message: None,
        })
    }

    fn changed(errno: i32, why: String) -> Done {
        Done::Problem(Problem {
            status: Status::Changed,
            cause: Cause::Os(errno),
            message: Some(why),
        })
    }
}

/// What happened to one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// Vanished before we got to it.
    Gone,
    /// Unlinked (or would be, in a dry run), with its size.
    Removed(u64),
    /// A directory (tree mode): back to the walk, with its device (0 unless wanted).
    Dir(u64),
    Problem(Problem),
}

fn unlink(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> Result<(), i32> {
    sys::unlink_at(dir, name, flags)
}

fn clear_one(
    dir: BorrowedFd<'_>,
    name: &[u8],
    listed_dir: bool,
    mode: Mode,
    devices: Devices,
) -> Done {
    if listed_dir && devices == Devices::Skip {
        return Done::Dir(0);
    }
    if let Err(c) = check_component(name) {
        return Problem::failed(c);
    }
    let Ok(c) = cstring(name) else {
        return Problem::failed(Cause::UnsafeName);
    };
    let st = match sys::lstat_at(dir, &c) {
        Ok(st) => st,
        Err(libc::ENOENT) => return Done::Gone,
        Err(_) if listed_dir => return Done::Dir(0),
        Err(e) => return Problem::failed(e),
    };
    if Kind::of(st.st_mode) == Kind::Directory {
        return Done::Dir(st.st_dev);
    }
    let size = st.st_size.max(0).unsigned_abs();
    if mode == Mode::DryRun {
        return Done::Removed(size);
    }
    match unlink(dir, &c, 0) {
        Ok(()) => Done::Removed(size),
        Err(libc::ENOENT) => Done::Gone,
        Err(e) => Problem::failed(e),
    }
}

/// What [`clear_dir`] did.
#[derive(Debug, Default)]
pub struct Cleared {
    /// Why the listing stopped early, if it did.
    pub listing: Option<Cause>,
    pub entries: usize,
    pub removed: u64,
    pub bytes: u64,
    /// Subdirectories (name, device) for the walk.
    pub subdirs: Vec<(Vec<u8>, u64)>,
    pub problems: Vec<(Vec<u8>, Cause)>,
    /// Names removed in a dry run, up to the sample limit.
    pub samples: Vec<Vec<u8>>,
}

impl Cleared {
    fn add(
        &mut self,
        batch: Vec<(Vec<u8>, bool)>,
        done: Vec<Done>,
        mode: Mode,
        sample_limit: usize,
    ) {
        self.entries += batch.len();
        for ((name, _), d) in batch.into_iter().zip(done) {
            match d {
                Done::Gone => {}
                Done::Removed(size) => {
                    self.removed += 1;
                    self.bytes += size;
                    if mode == Mode::DryRun && self.samples.len() < sample_limit {
                        self.samples.push(name);
                    }
                }
                Done::Dir(dev) => self.subdirs.push((name, dev)),
                Done::Problem(p) => self.problems.push((name, p.cause)),
            }
        }
    }
}

/// How [`clear_dir`] works.
#[derive(Clone, Copy, Debug)]
pub struct ClearOptions {
    pub mode: Mode,
    pub devices: Devices,
    pub fanout: usize,
    pub sample_limit: usize,
}

/// Empties the directory open at `dir` of everything but directories: `names` only (a pruned walk's
/// choice), else the whole listing, read and handled [`CLEAR_BATCH`] names at a time.
pub fn clear_dir(dir: BorrowedFd<'_>, names: Option<Vec<Vec<u8>>>, o: ClearOptions) -> Cleared {
    let mut out = Cleared::default();
    let run = |batch: Vec<(Vec<u8>, bool)>, out: &mut Cleared| {
        let done = fan_out(&batch, o.fanout, |chunk, _| {
            chunk
                .iter()
                .map(|(n, d)| clear_one(dir, n, *d, o.mode, o.devices))
                .collect()
        });
        out.add(batch, done, o.mode, o.sample_limit);
    };
    if let Some(names) = names {
        run(names.into_iter().map(|n| (n, false)).collect(), &mut out);
        return out;
    }
    let mut stream = match DirStream::open(dir) {
        Ok(s) => s,
        Err(e) => {
            out.listing = Some(Cause::Os(e));
            return out;
        }
    };
    loop {
        let mut batch = Vec::with_capacity(CLEAR_BATCH.min(64));
        let mut end = false;
        while batch.len() < CLEAR_BATCH {
            match stream.next_entry() {
                Ok(Some(e)) => batch.push((e.name.to_bytes().to_vec(), e.d_type == libc::DT_DIR)),
                Ok(None) => {
                    end = true;
                    break;
                }
                Err(e) => {
                    out.listing = Some(Cause::Os(e));
                    end = true;
                    break;
                }
            }
        }
        if !batch.is_empty() {
            run(batch, &mut out);
        }
        if end {
            return out;
        }
    }
}

/// What a manifest row says an entry was (None: unknown).  `ino` and `ctime_ns` are what tell a file
/// replaced since the scan by another of the same type, size and mtime (`cp -p`, `rsync -a`, a
/// restore): a new inode, a new ctime.  The device is not part of it: `st_dev` is per host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expect {
    pub kind: Option<Kind>,
    pub size: Option<i64>,
    pub mtime_ns: Option<i128>,
    pub ino: Option<u64>,
    pub ctime_ns: Option<i128>,
}

/// What is there now, as [`Expect::differs`] compares it (from the `lstat` the removal makes anyway,
/// or from what another file system reports: `operators.remove.backends`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub kind: Kind,
    pub size: Option<i64>,
    pub mtime_ns: Option<i128>,
    pub ino: Option<u64>,
    pub ctime_ns: Option<i128>,
}

impl Found {
    pub fn of(st: &libc::stat) -> Found {
        Found {
            kind: Kind::of(st.st_mode),
            size: Some(st.st_size),
            mtime_ns: Some(Time::mtime(st).nanos()),
            ino: Some(st.st_ino),
            ctime_ns: Some(Time::ctime(st).nanos()),
        }
    }
}

impl Expect {
    /// The one identity rule of every removal of a manifest row (rm --manifest, sync --delete, the
    /// Airflow remove operator; local in the core, other file systems through `rm_identity_changed`):
    /// why the entry there now is not the one the manifest saw, or None.  Type, size, mtime and ctime
    /// (to the microsecond, the manifest's precision) and inode number; what either side does not
    /// know is not compared.
    pub fn differs(&self, now: &Found) -> Option<String> {
        if let Some(k) = self.kind {
            if k != now.kind {
                return Some(format!("type {} -> {}", k.name(), now.kind.name()));
            }
        }
        if let (Some(want), Some(size)) = (self.size, now.size) {
            if want != size {
                return Some(format!("size {want} -> {size}"));
            }
        }
        // truncated toward zero, as the manifest's microseconds are (rounding down made every time before
        // 1970 look changed since the scan)
        let micros = |ns: i128| ns / 1000;
        if let (Some(want), Some(mtime)) = (self.mtime_ns, now.mtime_ns) {
            if micros(want) != micros(mtime) {
                return Some("mtime differs from the manifest".to_string());
            }
        }
        if let (Some(want), Some(ino)) = (self.ino, now.ino) {
            if want != ino {
                return Some(format!("inode {want} -> {ino}: replaced since the scan"));
            }
        }
        if let (Some(want), Some(ctime)) = (self.ctime_ns, now.ctime_ns) {
            if micros(want) != micros(ctime) {
                return Some("ctime differs from the manifest: changed since the scan".to_string());
            }
        }
        None
    }
}

fn changed(want: &Expect, st: &libc::stat) -> Option<String> {
    want.differs(&Found::of(st))
}

/// Why a parent could not be opened, as the fate of the entry below it.
fn parent_problem(e: Error) -> Done {
    match e.cause {
        Cause::Os(libc::ENOENT) => Done::Gone,
        Cause::Os(errno @ (libc::ELOOP | libc::ENOTDIR)) if !e.path.is_empty() => {
            Done::Problem(Problem {
                status: Status::Failed,
                cause: Cause::Os(errno),
                message: Some(format!(
                    "ancestor '{}' is a symlink or no longer a directory: not followed",
                    String::from_utf8_lossy(&e.path)
                )),
            })
        }
        cause => Problem::failed(cause),
    }
}

/// The parent of `rel` and its last name, checked.
fn locate<'p>(
    parents: &'p mut Parents<'_>,
    rel: &[u8],
) -> Result<(BorrowedFd<'p>, std::ffi::CString), Done> {
    let (dir, name) = split(rel);
    check_component(name).map_err(Problem::failed)?;
    let c = cstring(name).map_err(|_| Problem::failed(Cause::UnsafeName))?;
    let fd = parents.dir(dir).map_err(parent_problem)?;
    Ok((fd, c))
}

fn unlink_rel(
    parents: &mut Parents<'_>,
    rel: &[u8],
    want: &Expect,
    check: Check,
    mode: Mode,
) -> Done {
    let (fd, name) = match locate(parents, rel) {
        Ok(x) => x,
        Err(d) => return d,
    };
    let mut size = want.size.unwrap_or(0).max(0).unsigned_abs();
    if check == Check::Recheck {
        let st = match sys::lstat_at(fd, &name) {
            Ok(st) => st,
            Err(libc::ENOENT) => return Done::Gone,
            Err(e) => return Problem::failed(e),
        };
        if let Some(why) = changed(want, &st) {
            return Problem::changed(0, why);
        }
        size = st.st_size.max(0).unsigned_abs();
    }
    if mode == Mode::DryRun {
        return Done::Removed(size);
    }
    match unlink(fd, &name, 0) {
        Ok(()) => Done::Removed(size),
        Err(libc::ENOENT) => Done::Gone,
        Err(e) => Problem::failed(e),
    }
}

fn rmdir_at(fd: BorrowedFd<'_>, name: &CStr, check: Check, mode: Mode) -> Done {
    if check == Check::Recheck {
        match sys::lstat_at(fd, name) {
            Ok(st) if Kind::of(st.st_mode) != Kind::Directory => {
                return Problem::changed(libc::ENOTDIR, "no longer a directory".into())
            }
            Ok(_) => {}
            Err(libc::ENOENT) => return Done::Gone,
            Err(e) => return Problem::failed(e),
        }
    }
    if mode == Mode::DryRun {
        return Done::Removed(0);
    }
    match unlink(fd, name, libc::AT_REMOVEDIR) {
        Ok(()) => Done::Removed(0),
        Err(libc::ENOENT) => Done::Gone,
        Err(e @ (libc::ENOTEMPTY | libc::EEXIST)) => Done::Problem(Problem {
            status: Status::NonEmpty,
            cause: Cause::Os(e),
            message: Some("directory not empty: left in place".into()),
        }),
        Err(libc::ENOTDIR) => Problem::changed(libc::ENOTDIR, "no longer a directory".into()),
        Err(e) => Problem::failed(e),
    }
}

fn rmdir_rel(root: &Root, parents: &mut Parents<'_>, rel: &[u8], check: Check, mode: Mode) -> Done {
    if rel.is_empty() {
        // the root itself: relative to its parent, and only if that name is still the pinned root
        return match root.parent() {
            Ok((parent, name)) => rmdir_at(parent.as_fd(), &name, check, mode),
            Err(e) if e.cause == Cause::Os(libc::ESTALE) => Problem::changed(
                libc::ESTALE,
                "the root was replaced since the job began: left in place".into(),
            ),
            Err(e) => parent_problem(Error::new(e.cause, b"")),
        };
    }
    match locate(parents, rel) {
        Ok((fd, name)) => rmdir_at(fd, &name, check, mode),
        Err(d) => d,
    }
}

/// How the manifest jobs work.
#[derive(Clone, Copy, Debug)]
pub struct RelOptions {
    pub check: Check,
    pub mode: Mode,
    pub fanout: usize,
    /// The root's (device, inode) when the job started: another directory renamed into its place
    /// since is refused (ESTALE for every row), never worked in.
    pub root_id: Option<Identity>,
}

/// Every row's fate when the root itself cannot be opened.
fn without_root<T>(items: &[T], e: Error) -> Vec<Done> {
    items.iter().map(|_| parent_problem(e.clone())).collect()
}

/// Unlinks manifest rows `(rel, expect)` below `root` (a row whose entry is not the one the scan saw,
/// [`Expect::differs`], is skipped when `check` is `Recheck`).
pub fn unlink_rels(root: &[u8], rows: &[(Vec<u8>, Expect)], o: RelOptions) -> Vec<Done> {
    match Root::open(root, o.root_id) {
        Ok(r) => fan_out_under(&r, rows, o.fanout, |parents, (rel, want)| {
            unlink_rel(parents, rel, want, o.check, o.mode)
        }),
        Err(e) => without_root(rows, e),
    }
}

/// Removes directories below `root` (`b""`: the root itself); with `Recheck`, only if still directories.
pub fn rmdir_rels(root: &[u8], rels: &[Vec<u8>], o: RelOptions) -> Vec<Done> {
    match Root::open(root, o.root_id) {
        Ok(r) => fan_out_under(&r, rels, o.fanout, |parents, rel| {
            rmdir_rel(&r, parents, rel, o.check, o.mode)
        }),
        Err(e) => without_root(rels, e),
    }
}
