//! Content checksums of a batch of files below a root (verify, sync and `scan --checksum`).
//!
//! Each file is opened relative to its parent (`relpath::Parents`: every component below the
//! root opened with `O_NOFOLLOW`, the file itself too, so a symlink is never followed: ELOOP),
//! read in large blocks into one buffer per thread and hashed, without the interpreter lock and
//! with no Python object per block or file.  The digests are the ones `xxhash` and `hashlib` give
//! (`xxh3` is XXH3-128 as big-endian hex), stored as `"<algorithm>:<hex>"`.  A file that cannot be
//! read gets the text of its error instead, never an exception.  Work fans out to `fanout` threads
//! of the core; a bandwidth cap is taken by the caller per batch (`operators.checksum`).

use crate::errors::describe;
use crate::names::names_of;
use crate::relpath::{errno, fan_out, open_at, split, Parents};
use md5::Md5;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::Xxh3;

/// Bytes read per `read(2)`: big enough that a large file costs few calls.
const BLOCK: usize = 4 << 20;

#[derive(Clone, Copy)]
enum Algorithm {
    Xxh3,
    Sha256,
    Md5,
}

impl Algorithm {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "xxh3" => Some(Algorithm::Xxh3),
            "sha256" => Some(Algorithm::Sha256),
            "md5" => Some(Algorithm::Md5),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
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

/// Hash everything readable from `fd`; Err(errno) on a read error.  `buf` starts small (a batch
/// of small files never needs more) and grows to :data:`BLOCK` once a file fills it.
fn hash_fd(fd: libc::c_int, a: Algorithm, buf: &mut Vec<u8>) -> Result<String, i32> {
    unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
    let mut h = Hasher::new(a);
    loop {
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Ok(format!("{}:{}", a.name(), h.hex()));
        }
        h.update(&buf[..n as usize]);
        if n as usize == buf.len() && buf.len() < BLOCK {
            buf.resize(BLOCK, 0);
        }
    }
}

fn checksum_rel(
    parents: &mut Parents,
    rel: &[u8],
    a: Algorithm,
    buf: &mut Vec<u8>,
) -> Result<String, i32> {
    // a manifest row is a path below the root: `..`, `.` or an empty component never leaves it
    if rel
        .split(|&b| b == b'/')
        .any(|c| c.is_empty() || c == b".." || c == b".")
    {
        return Err(libc::EINVAL);
    }
    let (dir, name) = split(rel);
    let at = parents.dir(dir).map_err(|e| e.errno)?;
    let fd = open_at(
        at,
        name,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        0,
    )?;
    hash_fd(fd.0, a, buf)
}

/// Checksums of the files `rels` (exact bytes, relative to `root`; `b""`: `root` itself is the
/// file) with `algorithm` (`xxh3`, `sha256`, `md5`): per file `(True, "<algorithm>:<hex>")` or
/// `(False, "<error text>")`, in order.
#[pyfunction]
fn checksum_files(
    py: Python<'_>,
    root: &[u8],
    rels: &Bound<'_, PyList>,
    algorithm: &str,
    fanout: usize,
) -> PyResult<Vec<(bool, String)>> {
    let a = Algorithm::parse(algorithm).ok_or_else(|| {
        PyValueError::new_err(format!("unknown checksum algorithm {algorithm:?}"))
    })?;
    let rels = names_of(rels)?;
    let root = root.to_vec();
    let done = py.allow_threads(|| {
        fan_out(&rels, fanout, |chunk, _| {
            let mut buf = vec![0u8; 1 << 16];
            let mut parents = Parents::new(&root);
            chunk
                .iter()
                .map(|rel| {
                    let got = if rel.is_empty() {
                        open_at(
                            libc::AT_FDCWD,
                            &root,
                            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                            0,
                        )
                        .and_then(|fd| hash_fd(fd.0, a, &mut buf))
                    } else {
                        checksum_rel(&mut parents, rel, a, &mut buf)
                    };
                    match got {
                        Ok(sum) => (true, sum),
                        Err(e) => (false, describe(e)),
                    }
                })
                .collect()
        })
    });
    Ok(done)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(checksum_files, m)?)
}
