//! OS errors as pfs reports them: errno plus the text Python's `describe_error` would give,
//! `"PermissionError: [Errno 13] Permission denied"`, so a row written by the core reads the same
//! as one written by Python (and tests can match on the class name).

use std::ffi::CStr;

/// The name of the Python exception class that `OSError(errno, ...)` becomes.
pub fn class_name(errno: i32) -> &'static str {
    match errno {
        libc::EACCES | libc::EPERM => "PermissionError",
        libc::ENOENT => "FileNotFoundError",
        libc::EEXIST => "FileExistsError",
        libc::ENOTDIR => "NotADirectoryError",
        libc::EISDIR => "IsADirectoryError",
        libc::EINTR => "InterruptedError",
        libc::EAGAIN | libc::EALREADY | libc::EINPROGRESS => "BlockingIOError",
        libc::ECHILD => "ChildProcessError",
        libc::EPIPE | libc::ESHUTDOWN => "BrokenPipeError",
        libc::ECONNABORTED => "ConnectionAbortedError",
        libc::ECONNREFUSED => "ConnectionRefusedError",
        libc::ECONNRESET => "ConnectionResetError",
        libc::ETIMEDOUT => "TimeoutError",
        libc::ESRCH => "ProcessLookupError",
        _ => "OSError",
    }
}

/// `strerror(errno)`, thread-safe.
pub fn strerror(errno: i32) -> String {
    let mut buf = [0 as libc::c_char; 256];
    // The XSI strerror_r (libc crate binds __xpg_strerror_r on glibc) fills buf and returns 0.
    let rc = unsafe { libc::strerror_r(errno, buf.as_mut_ptr(), buf.len()) };
    if rc != 0 {
        return format!("Unknown error {errno}");
    }
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The row text of an error: `"<Class>: [Errno <n>] <strerror>"`.
pub fn describe(errno: i32) -> String {
    format!(
        "{}: [Errno {}] {}",
        class_name(errno),
        errno,
        strerror(errno)
    )
}

/// The calling thread's errno after a failed libc call.
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A Python `OSError` subclass for `errno` (Python maps the number to the subclass itself).
pub fn to_py(errno: i32, filename: Option<&[u8]>) -> pyo3::PyErr {
    use pyo3::exceptions::PyOSError;
    let msg = strerror(errno);
    match filename {
        Some(name) => PyOSError::new_err((errno, msg, String::from_utf8_lossy(name).into_owned())),
        None => PyOSError::new_err((errno, msg)),
    }
}
