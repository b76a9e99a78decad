//! Test helpers: temp trees removed on drop, FIFOs, file times.
#![allow(dead_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the temp dir, removed (with everything in it) on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "pfs-core-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.0.as_os_str().as_bytes().to_vec()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

pub fn mkfifo(p: &Path) {
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c(p).as_ptr(), 0o644) }, 0);
}

/// Sets `p`'s atime and mtime (not following a symlink).
pub fn set_mtime(p: &Path, sec: i64, nsec: i64) {
    let t = [
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
    ];
    // SAFETY: a NUL-terminated path and two timespecs.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c(p).as_ptr(),
            t.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

pub fn lstat(p: &Path) -> libc::stat {
    // SAFETY: all-zero is a valid stat; a NUL-terminated path.
    let mut s: libc::stat = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::lstat(c(p).as_ptr(), &mut s) }, 0);
    s
}

/// Runs `body` in a forked child and returns its exit status, or None if it did not finish within
/// `secs` (then the child is killed): a hang fails a test instead of hanging it.
pub fn in_child(secs: u64, body: impl FnOnce() -> i32) -> Option<i32> {
    // SAFETY: the child only runs `body` and exits without returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
        // SAFETY: leaving the child at once, without running the parent's atexit handlers.
        unsafe { libc::_exit(code) };
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                128 + libc::WTERMSIG(status)
            });
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
