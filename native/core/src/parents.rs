//! Paths for rm, cp and checksums: paths relative to a root, opened one component at a time.
//!
//! The root is opened once per job call ([`Root`]: followed, as the path the user named, then pinned
//! by its descriptor and its (device, inode), checked against the identity the caller expects). That
//! identity is this host's: a device number is per host, so the caller (`operators/root_identity.py`)
//! checks its own mount of the root against the job's host-independent identity and passes its own.
//! Every component below it is opened relative to the one above with `O_NOFOLLOW | O_DIRECTORY`,
//! so a directory swapped for a symlink is refused (ELOOP or ENOTDIR) instead of followed out of the
//! tree, and a component that is `..`, `.` or empty is refused before any system call.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};

use crate::errors::{Cause, Error};
use crate::names::{check_component, split};
use crate::sys::{self, cstring, Nonblock, OPEN_DIR};

/// A directory's identity: (device, inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
}

impl Identity {
    pub fn of(st: &libc::stat) -> Identity {
        Identity {
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

/// A job's root directory, open for the whole call, and the directories below it that the call
/// opened (shared by all its fan-out slices: see [`Parents`]).
pub struct Root {
    path: Vec<u8>,
    fd: OwnedFd,
    id: Identity,
    nonblock: Nonblock,
    dirs: Mutex<HashMap<Vec<u8>, Slot>>,
}

/// One directory below the root, opened once by whichever slice needs it first (the others wait
/// for that open instead of making their own); a failed open is not kept.
type Slot = Arc<OnceLock<Result<Arc<OwnedFd>, Error>>>;

/// Most directories a call keeps open for its slices; past it, a directory not open yet is opened
/// for the slice that needs it (from its deepest open ancestor) and closed when the slice moves on.
const MAX_SHARED: usize = 256;

impl Root {
    /// The root of a call over `rels` (each relative to `path`), opened once: None when every rel
    /// is the root itself (a root that is a file, reached by its own path), else [`Root::open`].
    pub fn open_for(
        path: &[u8],
        rels: &[Vec<u8>],
        expect: Option<Identity>,
    ) -> Option<Result<Root, Cause>> {
        rels.iter()
            .any(|r| !r.is_empty())
            .then(|| Root::open(path, expect).map_err(|e| e.cause))
    }

    /// Opens the directory `path`; ESTALE if it is not the directory `expect` names (replaced since
    /// the caller looked at it).
    pub fn open(path: &[u8], expect: Option<Identity>) -> Result<Root, Error> {
        let err = |cause: Cause| Error::new(cause, b"");
        let c = cstring(path).map_err(|e| err(e.into()))?;
        let fd = sys::open_at(None, &c, OPEN_DIR, 0).map_err(|e| err(e.into()))?;
        let id = Identity::of(&sys::fstat(fd.as_fd()).map_err(|e| err(e.into()))?);
        if expect.is_some_and(|want| want != id) {
            return Err(err(Cause::Os(libc::ESTALE)));
        }
        let nonblock = Nonblock::on(fd.as_fd(), id.dev);
        Ok(Root {
            path: path.to_vec(),
            fd,
            id,
            nonblock,
            dirs: Mutex::new(HashMap::new()),
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn id(&self) -> Identity {
        self.id
    }

    pub fn path(&self) -> &[u8] {
        &self.path
    }

    /// What `sys::open_regular` does with `O_NONBLOCK` for the files below this root.
    pub fn nonblock(&self) -> Nonblock {
        self.nonblock
    }

    /// The root's parent directory (opened by path) and the root's name in it, once that name is
    /// checked to still be this root (same device and inode, not a symlink): for removing the root
    /// itself relative to its parent, not by a path that could have been swapped meanwhile.
    pub fn parent(&self) -> Result<(OwnedFd, CString), Error> {
        let err = |cause: Cause| Error::new(cause, b"");
        let trimmed = match self.path.iter().rposition(|&b| b != b'/') {
            Some(i) => &self.path[..=i],
            None => return Err(err(Cause::UnsafeName)), // "/" has no parent to remove it from
        };
        let (dir, name) = split(trimmed);
        check_component(name).map_err(err)?;
        let dir: &[u8] = match (dir.is_empty(), trimmed.starts_with(b"/")) {
            (true, true) => b"/",
            (true, false) => b".",
            _ => dir,
        };
        let parent = sys::open_at(None, &cstring(dir).map_err(|e| err(e.into()))?, OPEN_DIR, 0)
            .map_err(|e| err(e.into()))?;
        let cname = cstring(name).map_err(|e| err(e.into()))?;
        let st = sys::lstat_at(parent.as_fd(), &cname).map_err(|e| err(e.into()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR || Identity::of(&st) != self.id {
            return Err(err(Cause::Os(libc::ESTALE)));
        }
        Ok((parent, cname))
    }

    /// The directory `rel` (`ends[target]` ends its last component; every component checked), opened
    /// relative to its parent without following symlinks, once per call: the slices of a fan-out cut
    /// one sorted batch, so they share its directories and always its ancestors, and on network
    /// storage every open is a lookup and an open on the server.
    ///
    /// A loop, not a recursion, down from the deepest ancestor already open (`known`: the caller's
    /// own, else one the call shares): a tree 10,000 levels deep costs no stack, and a directory
    /// below one already open costs one open, however deep (past [`MAX_SHARED`] directories, the
    /// chain of a deep tree is the caller's `known`, not one open per level per directory).
    fn shared_dir(
        &self,
        rel: &[u8],
        ends: &[usize],
        target: usize,
        known: Option<(usize, Arc<OwnedFd>)>,
    ) -> Result<Arc<OwnedFd>, Error> {
        let mut from = known;
        {
            let dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
            let floor = from.as_ref().map_or(0, |(level, _)| level + 1);
            for level in (floor..=target).rev() {
                if let Some(Some(Ok(fd))) = dirs.get(&rel[..ends[level]]).map(|slot| slot.get()) {
                    from = Some((level, fd.clone()));
                    break;
                }
            }
        }
        let start = from.as_ref().map_or(0, |(level, _)| level + 1);
        let mut fd = from.map(|(_, fd)| fd);
        for level in start..=target {
            fd = Some(self.shared_level(rel, ends, level, fd.as_deref())?);
        }
        Ok(fd.expect("the target itself was found open, or the loop opened it"))
    }

    /// The directory `rel[..ends[level]]` opened relative to `parent` (None: the root) once per call
    /// (shared while fewer than [`MAX_SHARED`] are), or for the caller alone.
    fn shared_level(
        &self,
        rel: &[u8],
        ends: &[usize],
        level: usize,
        parent: Option<&OwnedFd>,
    ) -> Result<Arc<OwnedFd>, Error> {
        let path = &rel[..ends[level]];
        let slot = {
            let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
            match dirs.get(path) {
                Some(slot) => Some(slot.clone()),
                None if dirs.len() < MAX_SHARED => {
                    let slot = Slot::default();
                    dirs.insert(path.to_vec(), slot.clone());
                    Some(slot)
                }
                None => None,
            }
        };
        let open = || -> Result<Arc<OwnedFd>, Error> {
            let start = if level == 0 { 0 } else { ends[level - 1] + 1 };
            let err = |e: i32| Error::new(e, path);
            let name = cstring(&rel[start..ends[level]]).map_err(err)?;
            let at = parent.map_or(self.fd(), |fd| fd.as_fd());
            let fd = sys::open_at(Some(at), &name, OPEN_DIR | libc::O_NOFOLLOW, 0).map_err(err)?;
            Ok(Arc::new(fd))
        };
        let Some(slot) = slot else {
            return open(); // past MAX_SHARED: this slice's own
        };
        let got = slot.get_or_init(open).clone();
        if got.is_err() {
            // not kept: a later item retries (the waiters of this open share its error)
            let mut dirs = self.dirs.lock().unwrap_or_else(|e| e.into_inner());
            if dirs.get(path).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                dirs.remove(path);
            }
        }
        got
    }
}

/// The parent directory of each path of a batch, for one fan-out slice.  Directories come from the
/// call's [`Root`], which opens each once for all slices; the slice keeps the last one it used, so
/// consecutive items of one directory (manifest chunks are sorted by path) take no lock.
pub struct Parents<'r> {
    root: &'r Root,
    /// The last directory used: (its path below the root, its descriptor).
    last: Option<(Vec<u8>, Arc<OwnedFd>)>,
}

impl<'r> Parents<'r> {
    pub fn new(root: &'r Root) -> Self {
        Parents { root, last: None }
    }

    pub fn root(&self) -> &'r Root {
        self.root
    }

    /// The descriptor of directory `rel_dir` (`b""`: the root), each component opened relative to
    /// the one above without following symlinks; an error names the component that failed.
    pub fn dir(&mut self, rel_dir: &[u8]) -> Result<BorrowedFd<'_>, Error> {
        if rel_dir.is_empty() {
            return Ok(self.root.fd());
        }
        if !matches!(&self.last, Some((path, _)) if path.as_slice() == rel_dir) {
            // (end of each component in rel_dir): the path of level i is rel_dir[..ends[i]]
            let mut ends = Vec::new();
            let mut at = 0usize;
            for part in rel_dir.split(|&b| b == b'/') {
                check_component(part).map_err(|c| Error::new(c, &rel_dir[..at + part.len()]))?;
                at += part.len();
                ends.push(at);
                at += 1;
            }
            // the last directory, when it is an ancestor (a sorted batch of a deep tree: the parent)
            let known = self.last.take().and_then(|(path, fd)| {
                let level = ends.iter().position(|&end| end == path.len())?;
                (level + 1 < ends.len() && rel_dir.starts_with(&path)).then_some((level, fd))
            });
            let fd = self
                .root
                .shared_dir(rel_dir, &ends, ends.len() - 1, known)?;
            self.last = Some((rel_dir.to_vec(), fd));
        }
        Ok(match &self.last {
            Some((_, fd)) => fd.as_fd(),
            None => self.root.fd(),
        })
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
/// with a `Parents` of its own (the chain's descriptors are not shared between the core's threads).
pub fn fan_out_under<T: Sync, R: Send>(
    root: &Root,
    items: &[T],
    fanout: usize,
    work: impl Fn(&mut Parents<'_>, &T) -> R + Sync,
) -> Vec<R> {
    fan_out(items, fanout, |chunk, _| {
        let mut parents = Parents::new(root);
        chunk.iter().map(|item| work(&mut parents, item)).collect()
    })
}
