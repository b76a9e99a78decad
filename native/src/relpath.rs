//! Paths for rm and cp (`dirfd` has the descriptors): paths relative to a root, opened one component at a time.
//!
//! Every component below the root is opened relative to the one above with
//! `O_NOFOLLOW | O_DIRECTORY`, so a directory swapped for a symlink is refused (ELOOP or
//! ENOTDIR) instead of followed out of the tree.  The root itself is followed, as a full path
//! would be (the user named it).

use libc::c_int;
use std::ffi::CString;
use std::sync::Mutex;

pub use crate::dirfd::Fd;
use crate::dirfd::OPEN_DIR;
pub use crate::errors::last_errno as errno;

/// A name or path as a C string; EINVAL for an embedded NUL (a manifest could hold one).
pub fn cstr(bytes: &[u8]) -> Result<CString, i32> {
    CString::new(bytes).map_err(|_| libc::EINVAL)
}

/// `name` opened relative to `dir` with `flags`, retried on EINTR.
pub fn open_at(dir: c_int, name: &[u8], flags: c_int, mode: libc::mode_t) -> Result<Fd, i32> {
    let c = cstr(name)?;
    loop {
        let fd = unsafe { libc::openat(dir, c.as_ptr(), flags, mode as libc::c_uint) };
        if fd >= 0 {
            return Ok(Fd(fd));
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// `lstat` of `name` relative to `dir` (`dirfd::lstat_at` on a checked C string).
pub fn lstat_at(dir: c_int, name: &[u8]) -> Result<libc::stat, i32> {
    crate::dirfd::lstat_at(dir, cstr(name)?.as_bytes_with_nul())
}

/// Split `a/b/c` into (`a/b`, `c`); a top-level name has the parent `b""`.
pub fn split(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&rel[..0], rel),
    }
}

/// Why a parent could not be opened: the errno, and the component that failed.
pub struct ParentError {
    pub errno: i32,
    pub component: Vec<u8>,
}

/// How many levels below the root a `Parents` keeps open (a deeper parent is opened from the
/// deepest of them, and only it is kept): bounds the descriptors a batch holds per core thread.
const MAX_CHAIN: usize = 32;

/// The parent directory of each path of a batch.  The directories from the root down to the last
/// parent stay open, so the next parent opens only the components it does not share with it:
/// manifest chunks are sorted by path, so siblings and cousins come together, and on network
/// storage every component opened is a lookup and an open on the server.
pub struct Parents {
    root: Vec<u8>,
    root_fd: Option<Fd>,
    /// Open directories below the root, outermost first: (the path up to it, its descriptor).
    chain: Vec<(Vec<u8>, Fd)>,
    /// A parent deeper than `MAX_CHAIN` levels (its path, its descriptor).
    deep: Option<(Vec<u8>, Fd)>,
}

impl Parents {
    pub fn new(root: &[u8]) -> Self {
        Parents {
            root: root.to_vec(),
            root_fd: None,
            chain: Vec::new(),
            deep: None,
        }
    }

    fn root(&mut self) -> Result<c_int, ParentError> {
        if self.root_fd.is_none() {
            let c = cstr(&self.root).map_err(|e| ParentError {
                errno: e,
                component: Vec::new(),
            })?;
            let fd = unsafe { libc::open(c.as_ptr(), OPEN_DIR) };
            if fd < 0 {
                return Err(ParentError {
                    errno: errno(),
                    component: Vec::new(),
                });
            }
            self.root_fd = Some(Fd(fd));
        }
        Ok(self.root_fd.as_ref().unwrap().0)
    }

    /// The descriptor of directory `rel_dir` (`b""`: the root), each component opened
    /// relative to the one above without following symlinks.
    pub fn dir(&mut self, rel_dir: &[u8]) -> Result<c_int, ParentError> {
        if rel_dir.is_empty() {
            return self.root();
        }
        if let Some((path, fd)) = self.deep.as_ref().or(self.chain.last()) {
            if path.as_slice() == rel_dir {
                return Ok(fd.0);
            }
        }
        self.deep = None;
        let root = self.root()?;
        // (end of each component in rel_dir): the path of level i is rel_dir[..ends[i]]
        let mut ends = Vec::new();
        let mut at = 0usize;
        for part in rel_dir.split(|&b| b == b'/') {
            at += part.len();
            ends.push(at);
            at += 1;
        }
        let held = ends.len().min(MAX_CHAIN);
        let shared = self
            .chain
            .iter()
            .zip(&ends[..held])
            .take_while(|((path, _), &end)| path.as_slice() == &rel_dir[..end])
            .count();
        self.chain.truncate(shared);
        let mut opened: Option<Fd> = None;
        for (level, &end) in ends.iter().enumerate().skip(shared) {
            let start = if level == 0 { 0 } else { ends[level - 1] + 1 };
            let parent = match (&opened, self.chain.last()) {
                (Some(fd), _) => fd.0,
                (None, Some((_, fd))) => fd.0,
                (None, None) => root,
            };
            let fd = open_at(parent, &rel_dir[start..end], OPEN_DIR | libc::O_NOFOLLOW, 0)
                .map_err(|e| ParentError {
                    errno: e,
                    component: rel_dir[..end].to_vec(),
                })?;
            if level < held {
                self.chain.push((rel_dir[..end].to_vec(), fd));
            } else {
                opened = Some(fd); // below the kept levels: only the last one is kept
            }
        }
        if let Some(fd) = opened {
            let raw = fd.0;
            self.deep = Some((rel_dir.to_vec(), fd));
            return Ok(raw);
        }
        Ok(self.chain.last().map(|(_, fd)| fd.0).unwrap_or(root))
    }
}

/// Fewest items a core thread is given: a hand-over costs about as much CPU as a few local
/// unlinks, so small batches stay on the caller's thread.
const MIN_PER_THREAD: usize = 8;

/// Run `work` over `items` split into at most `fanout` contiguous slices on the core's thread pool
/// (`pool::for_each`, the caller's thread among them); each slice keeps its own state (open
/// parents), and results come back in item order.
pub fn fan_out<T: Sync, R: Send>(
    items: &[T],
    fanout: usize,
    work: impl Fn(&[T], usize) -> Vec<R> + Sync,
) -> Vec<R> {
    let n = fanout
        .max(1)
        .min(items.len().div_ceil(MIN_PER_THREAD).max(1));
    if n <= 1 {
        return work(items, 0);
    }
    let per = items.len().div_ceil(n);
    let chunks: Vec<(usize, &[T])> = items
        .chunks(per)
        .enumerate()
        .map(|(i, c)| (i * per, c))
        .collect();
    let slots: Vec<Mutex<Vec<R>>> = chunks.iter().map(|_| Mutex::new(Vec::new())).collect();
    crate::pool::for_each(chunks.len(), chunks.len(), &|i| {
        let (start, chunk) = chunks[i];
        let out = work(chunk, start);
        *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = out;
    });
    slots
        .into_iter()
        .flat_map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

/// `fan_out` of a batch of paths below `root` done one item at a time: each slice opens its parents
/// with a `Parents` of its own (descriptors are not shared between the core's threads).
pub fn fan_out_under<T: Sync, R: Send>(
    root: &[u8],
    items: &[T],
    fanout: usize,
    work: impl Fn(&mut Parents, &T) -> R + Sync,
) -> Vec<R> {
    fan_out(items, fanout, |chunk, _| {
        let mut parents = Parents::new(root);
        chunk.iter().map(|item| work(&mut parents, item)).collect()
    })
}
