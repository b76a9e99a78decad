//! Extended attributes of a batch of entries below a root (`scan --xattrs`; verify, diff and sync
//! compare them).
//!
//! Each entry's parent is opened relative to the root without following symlinks ([`Parents`]), and
//! the entry's attributes are read with `llistxattr`/`lgetxattr` through `/proc/self/fd/<parent>/<name>`:
//! relative to the parent's descriptor, never following the entry if it is a symlink (its own
//! attributes).  `flistxattr` on an `O_PATH` descriptor would avoid `/proc` but Linux refuses it
//! (EBADF, checked on 6.18), and opening the entry for reading would block on a FIFO and change atime.
//! A file system without attributes (ENOTSUP) gives an empty list: the entry has none.
//!
//! Per attribute: its name, `"xxh3:<hex>"` of its value (XXH3-128, as checksums), and the value
//! itself when at most [`INLINE`] bytes.  Sorted by name bytes, so two entries compare as lists.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd};

use xxhash_rust::xxh3::xxh3_128;

use crate::columns::BinaryBuilder;
use crate::errors::Cause;
use crate::names::{check_relative, push_text, split};
use crate::parents::{fan_out, Parents, Root};
use crate::sys::{self, cstring, Errno};

/// Values up to this many bytes are kept in the manifest besides their digest.
pub const INLINE: usize = 256;

/// The POSIX ACL attributes: an entry with either has an ACL beyond its mode bits.
const ACLS: [&[u8]; 2] = [b"system.posix_acl_access", b"system.posix_acl_default"];

/// One attribute of an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    pub name: Vec<u8>,
    pub digest: String,
    pub value: Option<Vec<u8>>,
}

/// An entry's attributes (sorted by name) and whether it has a POSIX ACL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs {
    pub attrs: Vec<Attr>,
    pub has_acl: bool,
}

/// The attributes of `path` itself (never a symlink's target).
pub fn of_path(path: &std::ffi::CStr) -> Result<Attrs, Errno> {
    let names = match sys::llistxattr(path) {
        Ok(n) => n,
        Err(libc::ENOTSUP) => return Ok(Attrs::default()),
        Err(e) => return Err(e),
    };
    let mut out = Attrs::default();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = cstring(name)?;
        let value = match sys::lgetxattr(path, &cname) {
            Ok(v) => v,
            Err(libc::ENODATA) => continue, // removed since the listing
            Err(e) => return Err(e),
        };
        out.has_acl |= ACLS.contains(&name);
        out.attrs.push(Attr {
            name: name.to_vec(),
            digest: format!("xxh3:{:032x}", xxh3_128(&value)),
            value: (value.len() <= INLINE).then_some(value),
        });
    }
    out.attrs.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// `/proc/self/fd/<dir>/<name>`: `name` in the directory open at `dir`, for the `l*xattr` calls.
fn at(dir: BorrowedFd<'_>, name: &[u8]) -> Result<CString, Errno> {
    let mut p = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    p.extend_from_slice(name);
    cstring(&p)
}

fn of_rel(parents: &mut Parents<'_>, rel: &[u8]) -> Result<Attrs, Cause> {
    check_relative(rel)?;
    let (dir, name) = split(rel);
    let fd = parents.dir(dir).map_err(|e| e.cause)?;
    Ok(of_path(&at(fd, name)?)?)
}

/// The attributes of the entries `rels` (exact bytes, relative to `root`; `b""`: `root` itself), in
/// order, over up to `fanout` core threads: each entry's, or why they could not be read.
pub fn xattrs_of(root: &[u8], rels: &[Vec<u8>], fanout: usize) -> Vec<Result<Attrs, Cause>> {
    let dir = Root::open_for(root, rels, None);
    fan_out(rels, fanout, |chunk, _| {
        let mut parents = match &dir {
            Some(Ok(r)) => Some(Parents::new(r)),
            _ => None,
        };
        chunk
            .iter()
            .map(|rel| {
                if rel.is_empty() {
                    return Ok(of_path(&cstring(root)?)?);
                }
                match (&mut parents, &dir) {
                    (Some(p), _) => of_rel(p, rel),
                    (None, Some(Err(e))) => Err(*e),
                    (None, _) => unreachable!("a root is opened whenever a path is below it"),
                }
            })
            .collect()
    })
}

/// The attributes of a batch as Arrow buffers (`operators.xattrs` wraps them without a Python object
/// per entry): per entry whether it was read, whether it has an ACL, and the end of its attributes
/// (list offsets); per attribute its name (text, undecodable bytes as `\xNN`), digest and value (null
/// when longer than [`INLINE`]); and the entries that failed, with why.
#[derive(Default)]
pub struct Columns {
    pub ok: Vec<u8>,
    pub acl: Vec<u8>,
    pub ends: Vec<i32>,
    pub names: BinaryBuilder,
    pub digests: BinaryBuilder,
    pub values: BinaryBuilder,
    pub failed: Vec<(usize, String)>,
}

impl Columns {
    pub fn of(results: Vec<Result<Attrs, Cause>>) -> Columns {
        let mut c = Columns {
            ends: vec![0],
            ..Columns::default()
        };
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(a) => {
                    c.ok.push(1);
                    c.acl.push(u8::from(a.has_acl));
                    for x in a.attrs {
                        push_text(&mut c.names.data, &x.name);
                        c.names.end_value(true);
                        c.digests.push(x.digest.as_bytes());
                        c.values.push_opt(x.value.as_deref());
                    }
                }
                Err(e) => {
                    c.ok.push(0);
                    c.acl.push(0);
                    c.failed.push((i, e.describe()));
                }
            }
            let n = i32::try_from(c.names.len()).expect("at most i32::MAX attributes in a batch");
            c.ends.push(n);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_attributes_sorted_with_digests() {
        let dir = std::env::temp_dir().join(format!("pfs-xattrs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("f");
        std::fs::write(&file, b"x").unwrap();
        std::os::unix::fs::symlink("f", dir.join("l")).unwrap();
        let path = cstring(file.as_os_str().as_encoded_bytes()).unwrap();
        let big = vec![7u8; INLINE + 1];
        for (n, v) in [(&b"user.b\0"[..], &b"1"[..]), (b"user.a\0", &big)] {
            // SAFETY: NUL-terminated name and path, a value of the given length.
            let rc = unsafe {
                libc::setxattr(
                    path.as_ptr(),
                    n.as_ptr().cast(),
                    v.as_ptr().cast(),
                    v.len(),
                    0,
                )
            };
            if rc != 0 {
                return; // no user xattrs on this temp file system: nothing to check here
            }
        }
        let got = xattrs_of(
            dir.as_os_str().as_encoded_bytes(),
            &[b"f".to_vec(), b"l".to_vec()],
            1,
        );
        let f = got[0].as_ref().unwrap();
        assert_eq!(
            f.attrs
                .iter()
                .map(|a| a.name.as_slice())
                .collect::<Vec<_>>(),
            [&b"user.a"[..], b"user.b"]
        );
        assert_eq!(f.attrs[0].value, None);
        assert_eq!(f.attrs[1].value.as_deref(), Some(&b"1"[..]));
        assert_eq!(f.attrs[0].digest, format!("xxh3:{:032x}", xxh3_128(&big)));
        assert!(!f.has_acl);
        assert!(got[1]
            .as_ref()
            .unwrap()
            .attrs
            .iter()
            .all(|a| !a.name.starts_with(b"user.")));
        let cols = Columns::of(got);
        assert_eq!(
            (cols.ok, cols.ends[1], cols.names.get(0)),
            (vec![1, 1], 2, &b"user.a"[..])
        );
        assert!(!cols.values.is_valid(0) && cols.values.get(1) == b"1");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
