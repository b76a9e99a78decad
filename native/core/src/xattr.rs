//! Extended attributes from a source entry to its copy; POSIX ACLs are the `system.posix_acl_*` ones.
//!
//! What is copied (`cp -a`/`rsync -aAX` as root): `user.*` and the ACLs always; `security.*` and
//! `trusted.*` only with CAP_SYS_ADMIN (the kernel refuses them otherwise); layout attributes
//! (`lustre.lov`, `ceph.file.layout`, `ceph.dir.layout`) only between file systems of the same type,
//! and before any data is written ([`Attrs::layouts`]: Lustre refuses a layout on a file with data).
//! Other `system.*`, `lustre.*` and `ceph.*` names are the file system's own (NFSv4 ACLs, Ceph's
//! statistics) and are left alone.  A value the destination refuses is a [`Refused`] for the caller
//! to report, never silent.  The fast path: an entry without attributes costs one `flistxattr`.

use std::ffi::CString;

use crate::sys::{self, At, Errno};

const VALUE_MAX: usize = 1 << 16; // XATTR_SIZE_MAX: no value is longer

/// Which attributes are copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// `security.*` and `trusted.*` too.
    pub privileged: bool,
}

impl Plan {
    /// What this process may copy.
    pub fn here() -> Plan {
        Plan {
            privileged: sys::has_cap_sys_admin(),
        }
    }
}

/// Something of an entry's metadata the destination refused: `what` names it for the failure log
/// (`xattr user.foo`, `owner 1234:5678`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub what: Vec<u8>,
    pub errno: Errno,
}

impl Refused {
    fn xattr(name: &[u8], errno: Errno) -> Refused {
        let mut what = b"xattr ".to_vec();
        what.extend_from_slice(name);
        Refused { what, errno }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Always,
    Privileged,
    Layout,
    Skip,
}

fn class(name: &[u8]) -> Class {
    match name {
        b"system.posix_acl_access" | b"system.posix_acl_default" => Class::Always,
        b"lustre.lov" | b"ceph.file.layout" | b"ceph.dir.layout" => Class::Layout,
        n if n.starts_with(b"user.") => Class::Always,
        n if n.starts_with(b"security.") || n.starts_with(b"trusted.") => Class::Privileged,
        _ => Class::Skip,
    }
}

fn wanted(c: Class, plan: Plan) -> bool {
    c == Class::Always || (c == Class::Privileged && plan.privileged)
}

/// One thread's buffers (reused from entry to entry: no allocation per file).
#[derive(Default)]
pub struct Attrs {
    names: Vec<u8>,
    theirs: Vec<u8>,
    value: Vec<u8>,
}

/// The NUL-separated names of `at` into `buf`; empty when it has none or its file system has none.
fn list(at: At<'_>, buf: &mut Vec<u8>) -> Result<(), Errno> {
    if buf.len() < 1024 {
        buf.resize(1024, 0);
    }
    loop {
        match sys::listxattr(at, buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(());
            }
            Err(libc::ERANGE) => {
                let need = sys::listxattr(at, &mut [])?;
                buf.resize(need.max(buf.len() * 2), 0);
            }
            Err(libc::ENOTSUP) => {
                buf.clear();
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
}

fn names(buf: &[u8]) -> impl Iterator<Item = &[u8]> {
    buf.split(|&b| b == 0).filter(|n| !n.is_empty())
}

impl Attrs {
    /// Lists the source's attribute names: false when it has none (nothing more to do for a new
    /// file).  A listing that fails is refused as `xattr *`.
    pub fn read(&mut self, src: At<'_>, refused: &mut Vec<Refused>) -> bool {
        match list(src, &mut self.names) {
            Ok(()) => !self.names.is_empty(),
            Err(e) => {
                self.names.clear();
                refused.push(Refused::xattr(b"*", e));
                false
            }
        }
    }

    /// The layout attributes read by [`Attrs::read`], onto `dst` (still empty), when both are on
    /// file systems of the same type.
    pub fn layouts(&mut self, src: At<'_>, dst: At<'_>, refused: &mut Vec<Refused>) {
        let mut same: Option<bool> = None;
        let listed = std::mem::take(&mut self.names);
        for name in names(&listed).filter(|n| class(n) == Class::Layout) {
            if !*same.get_or_insert_with(|| {
                let t = sys::fs_type_at(src);
                t.is_some() && t == sys::fs_type_at(dst)
            }) {
                break;
            }
            self.copy_one(name, src, dst, refused);
        }
        self.names = listed;
    }

    /// Every other attribute read by [`Attrs::read`] onto `dst`; with `clean` (a destination that
    /// may hold attributes already), those of the kinds copied that the source lacks are removed.
    pub fn rest(
        &mut self,
        src: At<'_>,
        dst: At<'_>,
        plan: Plan,
        clean: bool,
        refused: &mut Vec<Refused>,
    ) {
        let listed = std::mem::take(&mut self.names);
        for name in names(&listed).filter(|n| wanted(class(n), plan)) {
            self.copy_one(name, src, dst, refused);
        }
        if clean {
            let mut theirs = std::mem::take(&mut self.theirs);
            match list(dst, &mut theirs) {
                Ok(()) => {
                    for name in names(&theirs) {
                        if wanted(class(name), plan) && !names(&listed).any(|n| n == name) {
                            remove(name, dst, refused);
                        }
                    }
                }
                Err(e) => refused.push(Refused::xattr(b"*", e)),
            }
            self.theirs = theirs;
        }
        self.names = listed;
    }

    fn copy_one(&mut self, name: &[u8], src: At<'_>, dst: At<'_>, refused: &mut Vec<Refused>) {
        let Ok(cname) = CString::new(name) else {
            return;
        };
        if self.value.len() < VALUE_MAX {
            self.value.resize(VALUE_MAX, 0);
        }
        let done = sys::getxattr(src, &cname, &mut self.value)
            .and_then(|n| sys::setxattr(dst, &cname, &self.value[..n]));
        match done {
            Ok(()) | Err(libc::ENODATA) => {} // removed from the source since it was listed
            Err(e) => refused.push(Refused::xattr(name, e)),
        }
    }
}

fn remove(name: &[u8], dst: At<'_>, refused: &mut Vec<Refused>) {
    let Ok(cname) = CString::new(name) else {
        return;
    };
    match sys::removexattr(dst, &cname) {
        Ok(()) | Err(libc::ENODATA) => {}
        Err(e) => refused.push(Refused::xattr(name, e)),
    }
}

/// Which attributes a call of [`copy_attrs`] copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Layouts, then the rest.
    All,
    /// Layouts only: onto a file before any of its data (a big file's first byte range).
    Layouts,
    /// All but layouts: the file's data is written.
    Rest,
}

/// Copies the attributes of `src` onto `dst` (both of one entry): those of `phase`.  For
/// directories, symlinks and files written outside [`crate::copy::cp_files`].
pub fn copy_attrs(src: At<'_>, dst: At<'_>, plan: Plan, clean: bool, phase: Phase) -> Vec<Refused> {
    let mut refused = Vec::new();
    let mut attrs = Attrs::default();
    if attrs.read(src, &mut refused) || clean {
        if phase != Phase::Rest {
            attrs.layouts(src, dst, &mut refused);
        }
        if phase != Phase::Layouts {
            attrs.rest(src, dst, plan, clean, &mut refused);
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(class(b"user.a"), Class::Always);
        assert_eq!(class(b"system.posix_acl_access"), Class::Always);
        assert_eq!(class(b"system.posix_acl_default"), Class::Always);
        assert_eq!(class(b"system.nfs4_acl"), Class::Skip);
        assert_eq!(class(b"security.selinux"), Class::Privileged);
        assert_eq!(class(b"trusted.x"), Class::Privileged);
        assert_eq!(class(b"lustre.lov"), Class::Layout);
        assert_eq!(class(b"ceph.dir.layout"), Class::Layout);
        assert_eq!(class(b"ceph.dir.rbytes"), Class::Skip);
        let p = Plan { privileged: false };
        assert!(
            !wanted(Class::Privileged, p) && wanted(Class::Always, p) && !wanted(Class::Layout, p)
        );
    }
}
