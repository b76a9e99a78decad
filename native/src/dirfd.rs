//! Directory descriptors: opened relative to a parent, never through a symlink, closed on drop;
//! `fstatat`/`readlinkat` relative to them; the entries of a directory read with `getdents64`
//! (through `fdopendir` on a duplicate, so the caller's descriptor stays open and usable).

use std::ffi::CStr;
use std::os::raw::c_int;

use crate::errors::last_errno;

pub const OPEN_DIR: c_int = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;

/// An owned descriptor, closed when dropped.
pub struct Fd(pub c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        if self.0 >= 0 {
            unsafe { libc::close(self.0) };
        }
    }
}

/// A NUL-terminated copy of a name for the libc calls (names never hold NUL: the kernel forbids it).
pub fn cname(name: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(name.len() + 1);
    v.extend_from_slice(name);
    v.push(0);
    v
}

/// `openat(dir_fd, name, O_DIRECTORY|O_NOFOLLOW)`: a child directory, never through a symlink.
pub fn open_child_dir(dir_fd: c_int, name: &[u8]) -> Result<Fd, i32> {
    let c = cname(name);
    let fd = unsafe {
        libc::openat(
            dir_fd,
            c.as_ptr() as *const libc::c_char,
            OPEN_DIR | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        Err(last_errno())
    } else {
        Ok(Fd(fd))
    }
}

/// `fstatat(dir_fd, name, AT_SYMLINK_NOFOLLOW)`.
pub fn lstat_at(dir_fd: c_int, cname: &[u8]) -> Result<libc::stat, i32> {
    let mut s: libc::stat = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::fstatat(
            dir_fd,
            cname.as_ptr() as *const libc::c_char,
            &mut s,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc < 0 {
        Err(last_errno())
    } else {
        Ok(s)
    }
}

/// `readlinkat(dir_fd, name)`: a symlink's target bytes, whatever their length.
pub fn readlink_at(dir_fd: c_int, cname: &[u8]) -> Result<Vec<u8>, i32> {
    let mut size = 256usize;
    loop {
        let mut buf = vec![0u8; size];
        let n = unsafe {
            libc::readlinkat(
                dir_fd,
                cname.as_ptr() as *const libc::c_char,
                buf.as_mut_ptr() as *mut libc::c_char,
                size,
            )
        };
        if n < 0 {
            return Err(last_errno());
        }
        let n = n as usize;
        if n < size {
            buf.truncate(n);
            return Ok(buf);
        }
        size *= 4;
    }
}

/// One directory entry as the listing gave it: its name and whether `d_type` said directory.
pub struct Entry {
    pub name: Vec<u8>,
    pub d_type: u8,
}

/// The entries of the directory open at `dir_fd` (without `.` and `..`), in listing order,
/// handed to `each` so a huge directory is never held twice.  The descriptor stays open.
pub fn read_dir(dir_fd: c_int, mut each: impl FnMut(&[u8], u8)) -> Result<(), i32> {
    read_dir_while(dir_fd, |name, d_type| {
        each(name, d_type);
        true
    })
}

/// [`read_dir`] that stops as soon as `each` returns false.
pub fn read_dir_while(dir_fd: c_int, mut each: impl FnMut(&[u8], u8) -> bool) -> Result<(), i32> {
    let dup = unsafe { libc::fcntl(dir_fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(last_errno());
    }
    let dir = unsafe { libc::fdopendir(dup) };
    if dir.is_null() {
        let e = last_errno();
        unsafe { libc::close(dup) };
        return Err(e);
    }
    // A duplicate shares the file offset: start from the top even if the descriptor was read before.
    unsafe { libc::rewinddir(dir) };
    let mut result = Ok(());
    loop {
        unsafe { *libc::__errno_location() = 0 };
        let ent = unsafe { libc::readdir64(dir) };
        if ent.is_null() {
            let e = unsafe { *libc::__errno_location() };
            if e != 0 {
                result = Err(e);
            }
            break;
        }
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if !each(name, unsafe { (*ent).d_type }) {
            break;
        }
    }
    unsafe { libc::closedir(dir) };
    result
}
