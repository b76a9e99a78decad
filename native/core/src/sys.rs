//! The system-call layer: every libc call the core makes goes through here, each retried on EINTR
//! in one place ([`retry`], as Python does since PEP 475), with descriptors as `OwnedFd`/`BorrowedFd`
//! and names as `&CStr`, so the rest of the core holds no raw descriptor and no `unsafe`.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

/// An OS error number (`libc::E*`).
pub type Errno = i32;

/// The calling thread's errno after a failed libc call.
pub fn errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A libc return value that says "failed, see errno" with -1.
pub trait Ret: Copy {
    fn failed(self) -> bool;
}

impl Ret for libc::c_int {
    fn failed(self) -> bool {
        self == -1
    }
}

impl Ret for libc::ssize_t {
    fn failed(self) -> bool {
        self == -1
    }
}

/// Runs `call` again while it fails with EINTR: its value, or the errno of any other failure.
pub fn retry<T: Ret>(mut call: impl FnMut() -> T) -> Result<T, Errno> {
    loop {
        let r = call();
        if !r.failed() {
            return Ok(r);
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// A name or path as a C string; EINVAL for an embedded NUL (a manifest could hold one).
pub fn cstring(bytes: &[u8]) -> Result<CString, Errno> {
    CString::new(bytes).map_err(|_| libc::EINVAL)
}

/// Flags of a directory opened for `*at` calls and listing.
pub const OPEN_DIR: libc::c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;

fn owned(fd: libc::c_int) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful open/openat/fcntl(F_DUPFD): it is open and owned
    // by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `openat(dir, name, flags, mode)`; `dir` None: relative to the working directory (`AT_FDCWD`).
pub fn open_at(
    dir: Option<BorrowedFd<'_>>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> Result<OwnedFd, Errno> {
    let at = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: `name` is NUL-terminated and outlives the call; `at` is AT_FDCWD or a live descriptor.
    let fd = retry(|| unsafe { libc::openat(at, name.as_ptr(), flags, libc::c_uint::from(mode)) })?;
    Ok(owned(fd))
}

/// An all-zero `stat` for the kernel to fill.
fn blank_stat() -> libc::stat {
    // SAFETY: `libc::stat` is plain integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub fn lstat_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<libc::stat, Errno> {
    let mut s = blank_stat();
    // SAFETY: `name` is NUL-terminated, `s` a writable stat, `dir` a live descriptor.
    retry(|| unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut s,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(s)
}

/// `fstat(fd)`.
pub fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat, Errno> {
    let mut s = blank_stat();
    // SAFETY: `s` is a writable stat, `fd` a live descriptor.
    retry(|| unsafe { libc::fstat(fd.as_raw_fd(), &mut s) })?;
    Ok(s)
}

/// `readlinkat(dir, name)`: a symlink's target bytes, whatever their length.
pub fn readlink_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<Vec<u8>, Errno> {
    let mut size = 256usize;
    loop {
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` has `size` writable bytes; `name` is NUL-terminated.
        let n = retry(|| unsafe {
            libc::readlinkat(
                dir.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                size,
            )
        })?;
        let n = n.unsigned_abs();
        if n < size {
            buf.truncate(n);
            return Ok(buf);
        }
        size *= 4;
    }
}

/// `unlinkat(dir, name, flags)` (`AT_REMOVEDIR` for a directory).
pub fn unlink_at(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> Result<(), Errno> {
    // SAFETY: `name` is NUL-terminated, `dir` a live descriptor.
    retry(|| unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }).map(drop)
}

/// `renameat(dir, from, dir, to)`.
pub fn rename_at(dir: BorrowedFd<'_>, from: &CStr, to: &CStr) -> Result<(), Errno> {
    let d = dir.as_raw_fd();
    // SAFETY: both names are NUL-terminated, `d` a live descriptor.
    retry(|| unsafe { libc::renameat(d, from.as_ptr(), d, to.as_ptr()) }).map(drop)
}

/// `fchown(fd, uid, gid)`.
pub fn fchown(fd: BorrowedFd<'_>, uid: libc::uid_t, gid: libc::gid_t) -> Result<(), Errno> {
    // SAFETY: plain integers on a live descriptor.
    retry(|| unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) }).map(drop)
}

/// `fchmod(fd, mode)`.
pub fn fchmod(fd: BorrowedFd<'_>, mode: libc::mode_t) -> Result<(), Errno> {
    // SAFETY: plain integers on a live descriptor.
    retry(|| unsafe { libc::fchmod(fd.as_raw_fd(), mode) }).map(drop)
}

/// `futimens(fd, [atime, mtime])`.
pub fn futimens(fd: BorrowedFd<'_>, times: &[libc::timespec; 2]) -> Result<(), Errno> {
    // SAFETY: `times` points at two timespecs, as futimens reads.
    retry(|| unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) }).map(drop)
}

/// `ftruncate(fd, size)`.
pub fn ftruncate(fd: BorrowedFd<'_>, size: i64) -> Result<(), Errno> {
    // SAFETY: plain integers on a live descriptor.
    retry(|| unsafe { libc::ftruncate(fd.as_raw_fd(), size) }).map(drop)
}

/// `lseek(fd, offset, whence)`: the new offset.
pub fn lseek(fd: BorrowedFd<'_>, offset: i64, whence: libc::c_int) -> Result<i64, Errno> {
    // SAFETY: plain integers on a live descriptor (lseek never fails with EINTR; -1 is its error).
    let r = unsafe { libc::lseek(fd.as_raw_fd(), offset, whence) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// `posix_fadvise(fd, 0, 0, SEQUENTIAL)`: a hint, its failure ignored.
pub fn advise_sequential(fd: BorrowedFd<'_>) {
    // SAFETY: plain integers on a live descriptor; the result is only a hint.
    unsafe { libc::posix_fadvise(fd.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
}

/// `read(fd, buf)`: bytes read (0 at end of file).
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: `buf` has `buf.len()` writable bytes.
    let n = retry(|| unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) })?;
    Ok(n.unsigned_abs())
}

/// `pread(fd, buf, offset)`: bytes read (0 at end of file).
pub fn pread(fd: BorrowedFd<'_>, buf: &mut [u8], offset: i64) -> Result<usize, Errno> {
    // SAFETY: `buf` has `buf.len()` writable bytes.
    let n = retry(|| unsafe {
        libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset)
    })?;
    Ok(n.unsigned_abs())
}

/// `pwrite(fd, buf, offset)`: bytes written.
pub fn pwrite(fd: BorrowedFd<'_>, buf: &[u8], offset: i64) -> Result<usize, Errno> {
    // SAFETY: `buf` has `buf.len()` readable bytes.
    let n =
        retry(|| unsafe { libc::pwrite(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), offset) })?;
    Ok(n.unsigned_abs())
}

/// `copy_file_range(src, &pos, dst, &pos, count)`: bytes copied (0: nothing more to copy here).
pub fn copy_file_range(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    pos: i64,
    count: usize,
) -> Result<usize, Errno> {
    let n = retry(|| {
        let (mut a, mut b) = (pos, pos);
        // SAFETY: `a` and `b` are writable offsets; both descriptors are live.
        unsafe { libc::copy_file_range(src.as_raw_fd(), &mut a, dst.as_raw_fd(), &mut b, count, 0) }
    })?;
    Ok(n.unsigned_abs())
}

/// `sendfile(dst, src, &pos, count)` (the destination's offset must be set first): bytes copied.
pub fn sendfile(
    dst: BorrowedFd<'_>,
    src: BorrowedFd<'_>,
    pos: i64,
    count: usize,
) -> Result<usize, Errno> {
    let n = retry(|| {
        let mut off = pos;
        // SAFETY: `off` is a writable offset; both descriptors are live.
        unsafe { libc::sendfile(dst.as_raw_fd(), src.as_raw_fd(), &mut off, count) }
    })?;
    Ok(n.unsigned_abs())
}

/// Sets or clears `O_NONBLOCK` on `fd`.
pub fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> Result<(), Errno> {
    // SAFETY: F_GETFL/F_SETFL with plain integers on a live descriptor.
    let flags = retry(|| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    let want = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    if want != flags {
        // SAFETY: as above.
        retry(|| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, want) })?;
    }
    Ok(())
}

/// A close-on-exec duplicate of `fd` (sharing its file offset).
pub fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd, Errno> {
    // SAFETY: F_DUPFD_CLOEXEC on a live descriptor.
    let d = retry(|| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) })?;
    Ok(owned(d))
}

/// Closes `fd` and reports its error (NFS reports a failed write-back here).  Never retried: on
/// Linux the descriptor is released even when close fails with EINTR, so a retry could close a
/// descriptor another thread has just been given; EINTR is therefore taken as closed.
pub fn close(fd: OwnedFd) -> Result<(), Errno> {
    let raw: RawFd = fd.into_raw_fd();
    // SAFETY: `raw` came out of an OwnedFd, so it is open and this is its only close.
    if unsafe { libc::close(raw) } == 0 {
        return Ok(());
    }
    match errno() {
        libc::EINTR => Ok(()),
        e => Err(e),
    }
}

/// The effective user is root (cp keeps owners only then).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A directory's entries read with `readdir` from a duplicate of its descriptor (the original stays
/// open and usable), from the top.
pub struct DirStream {
    dir: NonNull<libc::DIR>,
}

// SAFETY: a DIR stream is plain memory owned by this value; it is used only through `&mut self`,
// so by one thread at a time, and glibc's readdir has no thread affinity.
unsafe impl Send for DirStream {}

/// One entry of a [`DirStream`]: its name and the listing's `d_type`.
pub struct DirEntry<'a> {
    pub name: &'a CStr,
    pub d_type: u8,
}

impl DirStream {
    /// Lists the directory open at `fd` from its first entry.
    pub fn open(fd: BorrowedFd<'_>) -> Result<DirStream, Errno> {
        let dup = dup(fd)?;
        // the duplicate shares the file offset: a directory read before starts from the top again
        lseek(dup.as_fd(), 0, libc::SEEK_SET)?;
        let raw = dup.into_raw_fd();
        // SAFETY: `raw` is an open directory descriptor this function owns; on success the stream owns it.
        let dir = unsafe { libc::fdopendir(raw) };
        match NonNull::new(dir) {
            Some(dir) => Ok(DirStream { dir }),
            None => {
                let e = errno();
                drop(owned(raw));
                Err(e)
            }
        }
    }

    /// The next entry other than `.` and `..`; `Ok(None)` at the end.
    pub fn next_entry(&mut self) -> Result<Option<DirEntry<'_>>, Errno> {
        loop {
            // SAFETY: errno is thread-local; readdir reports an error only through it.
            unsafe { *libc::__errno_location() = 0 };
            // SAFETY: `self.dir` is an open stream used by this thread alone (`&mut self`).
            let ent = unsafe { libc::readdir64(self.dir.as_ptr()) };
            if ent.is_null() {
                // SAFETY: as above.
                return match unsafe { *libc::__errno_location() } {
                    0 => Ok(None),
                    libc::EINTR => continue,
                    e => Err(e),
                };
            }
            // SAFETY: a non-null entry is valid until the next readdir on this stream, which needs
            // `&mut self` again, so the borrow returned cannot outlive it; d_name is NUL-terminated.
            let (name, d_type) = unsafe { (CStr::from_ptr((*ent).d_name.as_ptr()), (*ent).d_type) };
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            return Ok(Some(DirEntry { name, d_type }));
        }
    }

    /// The stream's own descriptor (for `*at` calls on its entries).
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: `self.dir` is open; dirfd returns its descriptor, which lives as long as the stream.
        unsafe { BorrowedFd::borrow_raw(libc::dirfd(self.dir.as_ptr())) }
    }
}

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: `self.dir` is open and closed only here.
        unsafe { libc::closedir(self.dir.as_ptr()) };
    }
}

/// Every name in the directory open at `fd`, handed to `each` until it returns false.
pub fn read_dir_while(
    fd: BorrowedFd<'_>,
    mut each: impl FnMut(&CStr, u8) -> bool,
) -> Result<(), Errno> {
    let mut stream = DirStream::open(fd)?;
    while let Some(e) = stream.next_entry()? {
        if !each(e.name, e.d_type) {
            break;
        }
    }
    Ok(())
}

/// How a file about to be read is opened: its last component followed (cp `-L`) or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    Never,
    Last,
}

/// `fstatfs(fd)`: the type (`f_type` magic) of the filesystem holding `fd`.
pub fn fs_type(fd: BorrowedFd<'_>) -> Result<i64, Errno> {
    // SAFETY: `libc::statfs` is plain integers; all-zero is a valid value for the kernel to fill.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `s` is a writable statfs, `fd` a live descriptor.
    retry(|| unsafe { libc::fstatfs(fd.as_raw_fd(), &mut s) })?;
    #[allow(clippy::unnecessary_cast)] // `f_type` is i64 on x86_64 but i32/u32 elsewhere
    Ok(s.f_type as i64)
}

/// Filesystems whose regular-file reads ignore `O_NONBLOCK`: their `read_iter` goes through the
/// page cache (or the block layer) with the kiocb flags `iocb_flags()` derives from the file, and
/// those carry `O_APPEND`/`O_DIRECT`/`O_DSYNC`/`O_SYNC` only, never `IOCB_NOWAIT` (that comes from
/// `RWF_NOWAIT` or io_uring alone); mandatory locks, the one regular-file case open(2) names, were
/// removed in Linux 5.15.  Not FUSE: the kernel sends the file's `f_flags`, `O_NONBLOCK` included,
/// with every `FUSE_READ` (`fuse_read_args_fill`) and a daemon may answer EAGAIN; not NFS, CIFS,
/// overlay or anything unknown: there `O_NONBLOCK` is cleared before the first read.
fn nonblock_inert(fs: i64) -> bool {
    #[allow(clippy::unnecessary_cast)]
    let inert = [
        libc::EXT4_SUPER_MAGIC as i64, // ext2, ext3 and ext4 share it
        libc::XFS_SUPER_MAGIC as i64,
        libc::BTRFS_SUPER_MAGIC as i64,
        libc::TMPFS_MAGIC as i64,
    ];
    inert.contains(&fs)
}

/// What `open_regular` does with the `O_NONBLOCK` it opened with, once the file is known regular.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nonblock {
    /// Clear it (`F_SETFL`) before any read: the file may be on a filesystem that honours it.
    Clear,
    /// Keep it for a file on this device (`st_dev`), whose filesystem ignores it on regular files
    /// (see [`Nonblock::on`]); a file on any other device (a mount below the root) is cleared.
    KeepOn(u64),
}

impl Nonblock {
    /// The policy for files below the directory open at `dir`: keep `O_NONBLOCK` (one system call
    /// less per file) on its own device when that filesystem is known to ignore it.
    pub fn on(dir: BorrowedFd<'_>, dev: u64) -> Nonblock {
        match fs_type(dir) {
            Ok(fs) if nonblock_inert(fs) => Nonblock::KeepOn(dev),
            _ => Nonblock::Clear,
        }
    }
}

/// Opens `name` in `dir` for reading if it is a regular file, with its `fstat`.  Opened with
/// `O_NONBLOCK` so a FIFO (or a device) never blocks the open, then refused by type before any read;
/// `O_NONBLOCK` is then cleared for the reads, unless `nonblock` says this file's filesystem ignores
/// it on regular files.
pub fn open_regular(
    dir: Option<BorrowedFd<'_>>,
    name: &CStr,
    follow: Follow,
    nonblock: Nonblock,
) -> Result<(OwnedFd, libc::stat), crate::errors::Cause> {
    use crate::errors::Cause;
    let nofollow = match follow {
        Follow::Never => libc::O_NOFOLLOW,
        Follow::Last => 0,
    };
    let flags = libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK | nofollow;
    let fd = open_at(dir, name, flags, 0)?;
    let st = fstat(fd.as_fd())?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFDIR => return Err(Cause::Os(libc::EISDIR)), // as reading it would say
        _ => return Err(Cause::NotRegular),
    }
    if nonblock == Nonblock::KeepOn(st.st_dev) {
        return Ok((fd, st));
    }
    // F_SETFL with the flags it was opened with, but O_NONBLOCK: one call (F_SETFL changes only the
    // status flags, O_NONBLOCK among them), no F_GETFL per file
    let status = flags & !libc::O_NONBLOCK;
    // SAFETY: F_SETFL with plain integers on a live descriptor.
    retry(|| unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, status) })?;
    Ok((fd, st))
}

/// Where an entry's extended attributes are read or written: an open descriptor (`f*xattr`), or a
/// path whose last component is never followed (`l*xattr`).  A symlink needs the path: `f*xattr`
/// refuses the `O_PATH` descriptor that is the only one a symlink can have, and the `*xattrat`
/// calls are Linux 6.13+; callers make the path `/proc/self/fd/<parent>/<name>`, so no component
/// above the name is resolved again.
#[derive(Clone, Copy, Debug)]
pub enum At<'a> {
    Fd(BorrowedFd<'a>),
    Path(&'a CStr),
}

/// `flistxattr`/`llistxattr`: the NUL-separated names into `buf` (len 0: the size needed).
pub fn listxattr(at: At<'_>, buf: &mut [u8]) -> Result<usize, Errno> {
    let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
    // SAFETY: `buf` has `n` writable bytes; the descriptor is live or the path NUL-terminated.
    let r = retry(|| unsafe {
        match at {
            At::Fd(fd) => libc::flistxattr(fd.as_raw_fd(), p, n),
            At::Path(path) => libc::llistxattr(path.as_ptr(), p, n),
        }
    })?;
    Ok(r.unsigned_abs())
}

/// `fgetxattr`/`lgetxattr`: the value's length in `buf`.
pub fn getxattr(at: At<'_>, name: &CStr, buf: &mut [u8]) -> Result<usize, Errno> {
    let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
    // SAFETY: as listxattr; `name` is NUL-terminated.
    let r = retry(|| unsafe {
        match at {
            At::Fd(fd) => libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), p, n),
            At::Path(path) => libc::lgetxattr(path.as_ptr(), name.as_ptr(), p, n),
        }
    })?;
    Ok(r.unsigned_abs())
}

/// `llistxattr(path)`: the NUL-separated attribute names of `path` itself (a symlink's own, never
/// its target's), the buffer grown while the list grows (ERANGE).
pub fn llistxattr(path: &CStr) -> Result<Vec<u8>, Errno> {
    grown(|buf| listxattr(At::Path(path), buf))
}

/// `lgetxattr(path, name)`: one attribute's value (of `path` itself, never a symlink's target).
pub fn lgetxattr(path: &CStr, name: &CStr) -> Result<Vec<u8>, Errno> {
    grown(|buf| getxattr(At::Path(path), name, buf))
}

/// The bytes `call` writes, in a buffer grown from 256 bytes while it answers ERANGE (up to 64 MiB).
fn grown(mut call: impl FnMut(&mut [u8]) -> Result<usize, Errno>) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; 256];
    loop {
        match call(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(libc::ERANGE) if buf.len() < (1 << 26) => buf.resize(buf.len() * 16, 0),
            Err(e) => return Err(e),
        }
    }
}

/// `fsetxattr`/`lsetxattr` (created or replaced).
pub fn setxattr(at: At<'_>, name: &CStr, value: &[u8]) -> Result<(), Errno> {
    let (p, n) = (value.as_ptr().cast(), value.len());
    // SAFETY: `value` has `n` readable bytes; `name` is NUL-terminated.
    retry(|| unsafe {
        match at {
            At::Fd(fd) => libc::fsetxattr(fd.as_raw_fd(), name.as_ptr(), p, n, 0),
            At::Path(path) => libc::lsetxattr(path.as_ptr(), name.as_ptr(), p, n, 0),
        }
    })
    .map(drop)
}

/// `fremovexattr`/`lremovexattr`.
pub fn removexattr(at: At<'_>, name: &CStr) -> Result<(), Errno> {
    // SAFETY: `name` is NUL-terminated; the descriptor is live or the path NUL-terminated.
    retry(|| unsafe {
        match at {
            At::Fd(fd) => libc::fremovexattr(fd.as_raw_fd(), name.as_ptr()),
            At::Path(path) => libc::lremovexattr(path.as_ptr(), name.as_ptr()),
        }
    })
    .map(drop)
}

/// The file-system type of an entry whose attributes are copied ([`fs_type`]); None for a path (a
/// symlink, which never carries a layout) or when `fstatfs` fails.
pub fn fs_type_at(at: At<'_>) -> Option<i64> {
    match at {
        At::Fd(fd) => fs_type(fd).ok(),
        At::Path(_) => None,
    }
}

/// The process may write `security.*` and `trusted.*` attributes: CAP_SYS_ADMIN is in its
/// effective set (read once from `/proc/self/status`; root without it, as under `setpriv`, may not).
pub fn has_cap_sys_admin() -> bool {
    static CAP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << 21) != 0) // CAP_SYS_ADMIN
    })
}
