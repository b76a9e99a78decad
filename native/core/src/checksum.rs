//! Content checksums of a batch of files below a root (verify, sync and `scan --checksum`).
//!
//! Each file is opened relative to its parent ([`Parents`]: every component below the root opened
//! with `O_NOFOLLOW`, the file itself too, so a symlink is never followed: ELOOP), refused unless it
//! is a regular file (a FIFO never blocks: `sys::open_regular`), read in large blocks into one
//! buffer per thread and hashed.  The digests are the ones `xxhash` and `hashlib` give (`xxh3` is
//! XXH3-128 as big-endian hex), as `"<algorithm>:<hex>"`.  Work fans out to `fanout` core threads.

use std::os::fd::{AsFd, BorrowedFd};

use md5::Md5;
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::Xxh3;

use crate::errors::Cause;
use crate::names::{check_relative, split};
use crate::parents::{fan_out, Identity, Parents, Root};
use crate::sys::{self, cstring, Follow, Nonblock};

/// Bytes read per `read(2)`: big enough that a large file costs few calls.
const BLOCK: usize = 4 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Xxh3,
    Sha256,
    Md5,
}

impl Algorithm {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "xxh3" => Some(Algorithm::Xxh3),
            "sha256" => Some(Algorithm::Sha256),
            "md5" => Some(Algorithm::Md5),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Xxh3 => "xxh3",
            Algorithm::Sha256 => "sha256",
            Algorithm::Md5 => "md5",
        }
    }
}

enum Hasher {
    Xxh3(Box<Xxh3>),
    Sha256(Sha256),
    Md5(Md5),
}

impl Hasher {
    fn new(a: Algorithm) -> Self {
        match a {
            Algorithm::Xxh3 => Hasher::Xxh3(Box::new(Xxh3::new())),
            Algorithm::Sha256 => Hasher::Sha256(Sha256::new()),
            Algorithm::Md5 => Hasher::Md5(Md5::new()),
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Xxh3(h) => h.update(data),
            Hasher::Sha256(h) => h.update(data),
            Hasher::Md5(h) => h.update(data),
        }
    }

    fn hex(self) -> String {
        match self {
            Hasher::Xxh3(h) => format!("{:032x}", h.digest128()),
            Hasher::Sha256(h) => hex(&h.finalize()),
            Hasher::Md5(h) => hex(&h.finalize()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hash everything readable from `fd`, `st` being its `fstat`.  `buf` starts small (a batch of
/// small files never needs more) and grows to [`BLOCK`] once a file fills it.  A file that fits in
/// `buf` costs one read: a short read that ends at the size `fstat` gave is its end (a file grown
/// since reads on, as it would past its end), and needs no read-ahead hint.
fn hash_fd(
    fd: BorrowedFd<'_>,
    st: &libc::stat,
    a: Algorithm,
    buf: &mut Vec<u8>,
) -> Result<String, Cause> {
    let size = usize::try_from(st.st_size).unwrap_or(0);
    if size >= buf.len() {
        sys::advise_sequential(fd);
    }
    let mut h = Hasher::new(a);
    let mut total = 0usize;
    loop {
        let n = sys::read(fd, buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        total += n;
        if n < buf.len() && total == size {
            break;
        }
        if n == buf.len() && buf.len() < BLOCK {
            buf.resize(BLOCK, 0);
        }
    }
    Ok(format!("{}:{}", a.name(), h.hex()))
}

fn checksum_rel(
    parents: &mut Parents<'_>,
    rel: &[u8],
    a: Algorithm,
    buf: &mut Vec<u8>,
) -> Result<String, Cause> {
    check_relative(rel)?;
    let (dir, name) = split(rel);
    let nonblock = parents.root().nonblock();
    let at = parents.dir(dir).map_err(|e| e.cause)?;
    let (fd, st) = sys::open_regular(Some(at), &cstring(name)?, Follow::Never, nonblock)?;
    hash_fd(fd.as_fd(), &st, a, buf)
}

/// Checksums of the files `rels` (exact bytes, relative to `root`; `b""`: `root` itself is the
/// file), in order: the `"<algorithm>:<hex>"` or why not.
pub fn checksum_files(
    root: &[u8],
    rels: &[Vec<u8>],
    a: Algorithm,
    fanout: usize,
) -> Vec<Result<String, Cause>> {
    checksum_files_at(root, None, rels, a, fanout)
}

/// [`checksum_files`] below a root that must still be the directory `expect` names (ESTALE for
/// every file otherwise: another directory was renamed into its place since the job started).
pub fn checksum_files_at(
    root: &[u8],
    expect: Option<Identity>,
    rels: &[Vec<u8>],
    a: Algorithm,
    fanout: usize,
) -> Vec<Result<String, Cause>> {
    let dir = Root::open_for(root, rels, expect);
    fan_out(rels, fanout, |chunk, _| {
        let mut buf = vec![0u8; 1 << 16];
        let mut parents = match &dir {
            Some(Ok(r)) => Some(Parents::new(r)),
            _ => None,
        };
        chunk
            .iter()
            .map(|rel| {
                if rel.is_empty() {
                    let c = cstring(root)?;
                    let (fd, st) = sys::open_regular(None, &c, Follow::Never, Nonblock::Clear)?;
                    return hash_fd(fd.as_fd(), &st, a, &mut buf);
                }
                match (&mut parents, &dir) {
                    (Some(p), _) => checksum_rel(p, rel, a, &mut buf),
                    (None, Some(Err(e))) => Err(*e),
                    (None, _) => unreachable!("a root is opened whenever a path is below it"),
                }
            })
            .collect()
    })
}
