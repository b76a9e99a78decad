//! pfs's compiled core as a plain Rust library: the POSIX hot paths of scan, rm, cp and checksums.
//!
//! Layers, bottom up (modelled on walkdir/ignore, fd and uutils' safe traversal):
//! - `sys`: every system call, with `OwnedFd`/`BorrowedFd` and `&CStr`, retried on EINTR in one place;
//! - `errors`, `names`, `time`, `columns`: error text and the core's error type, manifest names,
//!   overflow-free times, Arrow buffers with checked offsets, `order` (a part's rows in path order);
//! - `pool`: the core's I/O threads (sound for borrowed work, panics and forks);
//! - `parents`: a job's pinned root and the chain of open parents below it;
//! - the jobs: `scan`, `remove`, `copy`, `checksum`, `xattrs`.
//!
//! `native/src` binds it for Python (`operators._native`); nothing here knows Python.

pub mod checksum;
pub mod columns;
pub mod copy;
pub mod errors;
pub mod names;
pub mod order;
pub mod parents;
pub mod pool;
pub mod remove;
pub mod scan;
pub mod sys;
pub mod time;
pub mod xattr;
pub mod xattrs;
