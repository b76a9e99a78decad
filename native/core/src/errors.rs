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
    // SAFETY: the XSI strerror_r (the libc crate binds __xpg_strerror_r on glibc) writes at most
    // `buf.len()` bytes, NUL-terminated, into `buf` and returns 0.
    let rc = unsafe { libc::strerror_r(errno, buf.as_mut_ptr(), buf.len()) };
    if rc != 0 {
        return format!("Unknown error {errno}");
    }
    CStr::from_bytes_until_nul(bytemuck_chars(&buf))
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("Unknown error {errno}"))
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

/// `c_char`s as bytes (`c_char` is `i8` or `u8`, one byte either way).
fn bytemuck_chars(buf: &[libc::c_char]) -> &[u8] {
    // SAFETY: c_char and u8 have the same size and alignment and every bit pattern is valid for both.
    unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), buf.len()) }
}

/// Why an operation on one entry failed: the OS error, or a refusal of the core's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A system call failed with this errno.
    Os(i32),
    /// Not a regular file (a FIFO, socket or device): never opened for reading.
    NotRegular,
    /// A name component that could leave the root (`..`, `.`, empty, or holding NUL).
    UnsafeName,
    /// The file held less than its size when copied (it shrank meanwhile).
    Shrank,
}

impl Cause {
    /// The errno Python is given for it (the core's own refusals map to the closest one).
    pub fn errno(self) -> i32 {
        match self {
            Cause::Os(e) => e,
            Cause::NotRegular | Cause::UnsafeName => libc::EINVAL,
            Cause::Shrank => libc::EIO,
        }
    }

    /// The text of a row's `error`.
    pub fn describe(self) -> String {
        match self {
            Cause::Os(e) => describe(e),
            Cause::NotRegular => format!(
                "{}: not a regular file (never opened)",
                describe(libc::EINVAL)
            ),
            Cause::UnsafeName => describe(libc::EINVAL), // as operators.checksum's refusal reads
            Cause::Shrank => format!(
                "{}: the file shrank while it was copied",
                describe(libc::EIO)
            ),
        }
    }
}

impl From<i32> for Cause {
    fn from(e: i32) -> Self {
        Cause::Os(e)
    }
}

/// An error with the path (relative to the job's root) it happened on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub cause: Cause,
    pub path: Vec<u8>,
}

impl Error {
    pub fn new(cause: impl Into<Cause>, path: &[u8]) -> Self {
        Error {
            cause: cause.into(),
            path: path.to_vec(),
        }
    }

    pub fn errno(&self) -> i32 {
        self.cause.errno()
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}",
            String::from_utf8_lossy(&self.path),
            self.cause.describe()
        )
    }
}

impl std::error::Error for Error {}
