//! The scan's hot path: list a directory, `fstatat` its entries relative to its descriptor (never
//! following a symlink), and append manifest rows (schema v1, `operators/schema.py`) to a [`Sink`]
//! as columns, all without the interpreter lock.  Directories come back to Python one tuple each (the
//! walk queues them; their own row is written when they are listed), everything else stays in Rust
//! until the sink is taken as Arrow buffers.
//!
//! Same semantics as the Python rows (`operators/rows.py`): an entry gone since the listing has no
//! row; a failed `fstatat` is an error row typed `directory` if the listing's `d_type` said so, else
//! `other`; a failed `readlinkat` an error row typed `symlink`; times in microseconds.

use std::os::raw::c_int;
use std::sync::Mutex;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::columns::{as_bytes, BinaryBuilder, FixedBuilder};
use crate::dirfd::{cname, lstat_at, readlink_at, Fd};
use crate::errors::{describe, last_errno};
use crate::names::{join, push_text};
use crate::pool;

/// Indices into the `type` column's dictionary, in `operators.schema.TYPES` order.
const FILE: i32 = 0;
const DIRECTORY: i32 = 1;
const SYMLINK: i32 = 2;
const OTHER: i32 = 3;

/// What one `fstatat` says about an entry.
#[derive(Clone, Copy)]
struct Meta {
    mode: u32,
    size: i64,
    mtime: i64,
    atime: i64,
    ctime: i64,
    uid: u32,
    gid: u32,
    ino: u64,
    dev: u64,
    nlink: u64,
}

impl Meta {
    fn of(s: &libc::stat) -> Meta {
        let ns = |sec: i64, nsec: i64| sec * 1_000_000_000 + nsec;
        Meta {
            mode: s.st_mode,
            size: s.st_size,
            mtime: ns(s.st_mtime, s.st_mtime_nsec),
            atime: ns(s.st_atime, s.st_atime_nsec),
            ctime: ns(s.st_ctime, s.st_ctime_nsec),
            uid: s.st_uid,
            gid: s.st_gid,
            ino: s.st_ino,
            dev: s.st_dev,
            nlink: s.st_nlink,
        }
    }

    fn kind(&self) -> i32 {
        match self.mode & libc::S_IFMT {
            libc::S_IFREG => FILE,
            libc::S_IFDIR => DIRECTORY,
            libc::S_IFLNK => SYMLINK,
            _ => OTHER,
        }
    }
}

/// What became of one listed entry.
enum Outcome {
    Gone,
    Entry(Meta, Option<Vec<u8>>),
    Failed(i32, i32), // (type index, errno)
    Pruned,
}

/// The manifest columns of rows not yet taken.
#[derive(Default)]
struct Cols {
    path: BinaryBuilder,
    path_raw: BinaryBuilder,
    name: BinaryBuilder,
    parent: Vec<i32>,
    parents: BinaryBuilder,
    depth: Vec<i32>,
    kind: Vec<i32>,
    size: FixedBuilder<i64>,
    mtime: FixedBuilder<i64>,
    atime: FixedBuilder<i64>,
    ctime: FixedBuilder<i64>,
    mode: FixedBuilder<u32>,
    uid: FixedBuilder<i64>,
    gid: FixedBuilder<i64>,
    ino: FixedBuilder<u64>,
    dev: FixedBuilder<u64>,
    nlink: FixedBuilder<i64>,
    target: BinaryBuilder,
    target_raw: BinaryBuilder,
    error: BinaryBuilder,
    scratch: Vec<u8>,
}

impl Cols {
    fn len(&self) -> usize {
        self.depth.len()
    }

    /// Starts a directory's rows: its text joins the `parent` dictionary.
    fn open_parent(&mut self, rel: &[u8]) -> i32 {
        self.scratch.clear();
        push_text(&mut self.scratch, rel);
        let text = std::mem::take(&mut self.scratch);
        self.parents.push(&text);
        self.scratch = text;
        (self.parents.len() - 1) as i32
    }

    fn push_names(&mut self, rel: &[u8], name: &[u8], parent: i32, depth: i32) {
        let start = self.path.data.len();
        let full = join(rel, name);
        let valid = push_text(&mut self.path.data, &full);
        self.path.offsets.push(self.path.data.len() as i32);
        self.path.validity.push(true);
        if valid {
            self.path_raw.push_null();
        } else {
            self.path_raw.push(&full);
        }
        // the name's text is the path's text after its last '/'
        let text = &self.path.data[start..];
        let cut = text
            .iter()
            .rposition(|&b| b == b'/')
            .map(|i| i + 1)
            .unwrap_or(0);
        let tail = text[cut..].to_vec();
        self.name.push(&tail);
        self.parent.push(parent);
        self.depth.push(depth);
    }

    fn push_meta(&mut self, m: &Meta) {
        self.size.push(m.size);
        self.mtime.push(m.mtime / 1000); // truncated toward zero, as pyarrow's divide
        self.atime.push(m.atime / 1000); // truncated toward zero, as pyarrow's divide
        self.ctime.push(m.ctime / 1000); // truncated toward zero, as pyarrow's divide
        self.mode.push(m.mode);
        self.uid.push(m.uid as i64);
        self.gid.push(m.gid as i64);
        self.ino.push(m.ino);
        self.dev.push(m.dev);
        self.nlink.push(m.nlink as i64);
    }

    fn push_no_meta(&mut self) {
        self.size.push_null();
        self.mtime.push_null();
        self.atime.push_null();
        self.ctime.push_null();
        self.mode.push_null();
        self.uid.push_null();
        self.gid.push_null();
        self.ino.push_null();
        self.dev.push_null();
        self.nlink.push_null();
    }

    fn push_target(&mut self, target: Option<&[u8]>) {
        match target {
            None => {
                self.target.push_null();
                self.target_raw.push_null();
            }
            Some(t) => {
                let valid = push_text(&mut self.target.data, t);
                self.target.offsets.push(self.target.data.len() as i32);
                self.target.validity.push(true);
                if valid {
                    self.target_raw.push_null();
                } else {
                    self.target_raw.push(t);
                }
            }
        }
    }
}

/// Manifest rows collected column-wise across directories and threads, taken as Arrow buffers.
#[pyclass(module = "operators._native")]
pub struct Sink {
    cols: Mutex<Cols>,
}

fn bytes_of<'py>(py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
    PyBytes::new(py, data)
}

fn opt_bytes(py: Python<'_>, bits: Option<Vec<u8>>) -> PyObject {
    match bits {
        Some(b) => PyBytes::new(py, &b).into_any().unbind(),
        None => py.None(),
    }
}

#[pymethods]
impl Sink {
    #[new]
    fn new() -> Self {
        Sink {
            cols: Mutex::new(Cols::default()),
        }
    }

    fn __len__(&self) -> usize {
        self.cols.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Appends rows made in Python (`operators.rows` tuples, `ROW_COLUMNS` order: a directory's own row,
    /// an error row), so one buffer holds a task's rows and no Python list becomes an Arrow array.
    /// `checksum` must be None (checksums are filled in on the table).
    fn push_rows(&self, rows: &Bound<'_, PyList>) -> PyResult<()> {
        let mut cols = self.cols.lock().unwrap_or_else(|e| e.into_inner());
        for row in rows.iter() {
            let row = row.downcast::<PyTuple>()?;
            if row.len() != 17 {
                return Err(PyValueError::new_err(
                    "a row has 17 values (operators.schema.ROW_COLUMNS)",
                ));
            }
            let get = |i: usize| row.get_item(i);
            let path: String = get(0)?.extract()?;
            let raw: Option<Vec<u8>> = get(1)?.extract()?;
            let kind: String = get(2)?.extract()?;
            let kind = match kind.as_str() {
                "file" => FILE,
                "directory" => DIRECTORY,
                "symlink" => SYMLINK,
                "other" => OTHER,
                _ => return Err(PyValueError::new_err(format!("unknown type {kind:?}"))),
            };
            let int = |i: usize| -> PyResult<Option<i64>> { get(i)?.extract() };
            let uint = |i: usize| -> PyResult<Option<u64>> { get(i)?.extract() };
            let path_b = path.as_bytes();
            let (parent, name) = match path_b.iter().rposition(|&b| b == b'/') {
                Some(i) => (&path_b[..i], &path_b[i + 1..]),
                None => (&path_b[..0], path_b),
            };
            cols.path.push(path_b);
            cols.path_raw.push_opt(raw.as_deref());
            cols.name.push(name);
            cols.parents.push(parent);
            let p = (cols.parents.len() - 1) as i32;
            cols.parent.push(p);
            cols.depth
                .push(path_b.iter().filter(|&&b| b == b'/').count() as i32 + 1);
            cols.kind.push(kind);
            cols.size.push_opt(int(3)?);
            cols.mtime.push_opt(int(4)?.map(|t| t / 1000));
            cols.atime.push_opt(int(5)?.map(|t| t / 1000));
            cols.ctime.push_opt(int(6)?.map(|t| t / 1000));
            cols.mode.push_opt(get(7)?.extract::<Option<u32>>()?);
            cols.uid.push_opt(int(8)?);
            cols.gid.push_opt(int(9)?);
            cols.ino.push_opt(uint(10)?);
            cols.dev.push_opt(uint(11)?);
            cols.nlink.push_opt(int(12)?);
            let target: Option<String> = get(13)?.extract()?;
            cols.target.push_opt(target.as_deref().map(str::as_bytes));
            let target_raw: Option<Vec<u8>> = get(14)?.extract()?;
            cols.target_raw.push_opt(target_raw.as_deref());
            if !get(15)?.is_none() {
                return Err(PyValueError::new_err(
                    "a sink holds no checksums (filled in on the table)",
                ));
            }
            let error: Option<String> = get(16)?.extract()?;
            cols.error.push_opt(error.as_deref().map(str::as_bytes));
        }
        Ok(())
    }

    /// The rows so far as `(n, columns, parents)` and an empty sink: `columns` maps a column name to
    /// its buffers, `(validity or None, offsets, data)` for variable width, `(validity or None, data)`
    /// for fixed width (`parent`, `type`: int32 dictionary indices; `parents`: the parent dictionary
    /// as `(offsets, data)`).  `operators.local_scan` wraps them with `pyarrow.Array.from_buffers`.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let mut cols = {
            let mut guard = self.cols.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *guard)
        };
        let n = cols.len();
        let out = pyo3::types::PyDict::new(py);
        let var = |name: &str, b: &mut BinaryBuilder| -> PyResult<()> {
            let validity = opt_bytes(py, b.validity.take());
            out.set_item(
                name,
                (
                    validity,
                    bytes_of(py, as_bytes(&b.offsets)),
                    bytes_of(py, &b.data),
                ),
            )
        };
        var("path", &mut cols.path)?;
        var("path_raw", &mut cols.path_raw)?;
        var("name", &mut cols.name)?;
        var("link_target", &mut cols.target)?;
        var("link_target_raw", &mut cols.target_raw)?;
        var("error", &mut cols.error)?;
        macro_rules! fixed {
            ($name:expr, $b:expr) => {
                out.set_item(
                    $name,
                    (
                        opt_bytes(py, $b.validity.take()),
                        bytes_of(py, as_bytes(&$b.values)),
                    ),
                )?
            };
        }
        fixed!("size", cols.size);
        fixed!("mtime", cols.mtime);
        fixed!("atime", cols.atime);
        fixed!("ctime", cols.ctime);
        fixed!("mode", cols.mode);
        fixed!("uid", cols.uid);
        fixed!("gid", cols.gid);
        fixed!("ino", cols.ino);
        fixed!("dev", cols.dev);
        fixed!("nlink", cols.nlink);
        out.set_item("parent", (py.None(), bytes_of(py, as_bytes(&cols.parent))))?;
        out.set_item("depth", (py.None(), bytes_of(py, as_bytes(&cols.depth))))?;
        out.set_item("type", (py.None(), bytes_of(py, as_bytes(&cols.kind))))?;
        let parents = (
            cols.parents.len(),
            bytes_of(py, as_bytes(&cols.parents.offsets)),
            bytes_of(py, &cols.parents.data),
        );
        PyTuple::new(
            py,
            [
                n.into_pyobject(py)?.into_any(),
                out.into_any(),
                parents.into_pyobject(py)?.into_any(),
            ],
        )
    }
}

/// A `DIR *` read step by step; only one thread uses it at a time (the scan's mutex).
struct Stream(*mut libc::DIR);
unsafe impl Send for Stream {}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.0.is_null() {
            unsafe { libc::closedir(self.0) };
        }
    }
}

struct ScanState {
    stream: Stream,
    fd: c_int, // the stream's own descriptor (closed with it)
    done: bool,
}

/// One directory being scanned: listed and stat-ed in steps of at most `max_entries`, so a
/// directory of millions of entries is written out as it goes, never held whole.
#[pyclass(module = "operators._native")]
pub struct DirScan {
    rel: Vec<u8>,
    state: Mutex<ScanState>,
}

/// What a step found: counters, error samples, and the subdirectories (name, metadata).
#[derive(Default)]
struct Step {
    entries: u64,
    files: u64,
    symlinks: u64,
    other: u64,
    bytes: u64,
    errors: u64,
    pruned: u64,
    directories: u64,
    samples: Vec<String>,
    subdirs: Vec<(Vec<u8>, Meta)>,
    errno: i32,
    done: bool,
}

fn stat_one(fd: c_int, name: &[u8], d_type: u8) -> Outcome {
    let c = cname(name);
    match lstat_at(fd, &c) {
        Err(libc::ENOENT) => Outcome::Gone,
        Err(e) => Outcome::Failed(
            if d_type == libc::DT_DIR {
                DIRECTORY
            } else {
                OTHER
            },
            e,
        ),
        Ok(s) => {
            let meta = Meta::of(&s);
            if meta.kind() == SYMLINK {
                match readlink_at(fd, &c) {
                    Ok(t) => Outcome::Entry(meta, Some(t)),
                    Err(libc::ENOENT) => Outcome::Gone,
                    Err(e) => Outcome::Failed(SYMLINK, e),
                }
            } else {
                Outcome::Entry(meta, None)
            }
        }
    }
}

#[pymethods]
impl DirScan {
    /// Starts listing the directory open at `dir_fd` (a duplicate is kept; the caller may close its own).
    #[new]
    fn new(dir_fd: c_int, rel: &[u8]) -> PyResult<Self> {
        let dup = unsafe { libc::fcntl(dir_fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(crate::errors::to_py(last_errno(), None));
        }
        let dup = Fd(dup);
        // the duplicate shares the file offset: a directory read before starts from the top again
        unsafe { libc::lseek(dup.0, 0, libc::SEEK_SET) };
        let dir = unsafe { libc::fdopendir(dup.0) };
        if dir.is_null() {
            return Err(crate::errors::to_py(last_errno(), None));
        }
        let fd = dup.0;
        std::mem::forget(dup); // the stream owns it now
        Ok(DirScan {
            rel: rel.to_vec(),
            state: Mutex::new(ScanState {
                stream: Stream(dir),
                fd,
                done: false,
            }),
        })
    }

    /// Lists up to `max_entries` more entries, stats them in chunks of `chunk` over up to `width`
    /// threads (pool threads beside the caller's), and appends their rows to `sink`.
    ///
    /// `take_ops(n)` (the job's ops/s cap) is called before each chunk's stats, `keep(paths)` (a
    /// prune) with the text paths of a chunk's non-directories, returning which to keep.  Returns
    /// `(counts, samples, subdirs, errno, done)`: counts `(entries, files, symlinks, other, bytes,
    /// errors, pruned)` of the rows written, up to five `"path: error"` samples, subdirectories as
    /// `(path, row)` (a row like `operators.rows.row_from_stat`), the listing's errno (0: none).
    ///
    /// `descend` > 0 (only without `take_ops` and `keep`): the subdirectories found are walked in the
    /// same call, depth first, until `descend` entries are written in all; their rows (their own
    /// included) go to the sink and only the subdirectories not reached come back.  A local tree of
    /// small directories then costs Python one call per few thousand entries, not one per directory.
    #[pyo3(signature = (sink, max_entries, chunk, width, take_ops=None, keep=None, descend=0))]
    #[allow(clippy::too_many_arguments)]
    fn step<'py>(
        &self,
        py: Python<'py>,
        sink: &Sink,
        max_entries: usize,
        chunk: usize,
        width: usize,
        take_ops: Option<PyObject>,
        keep: Option<PyObject>,
        descend: usize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if chunk == 0 || max_entries == 0 {
            return Err(PyValueError::new_err(
                "chunk and max_entries must be positive",
            ));
        }
        let descend = if take_ops.is_some() || keep.is_some() {
            0
        } else {
            descend
        };
        let rel = self.rel.clone();
        let step = py.allow_threads(|| -> PyResult<Step> {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let mut step = Step::default();
            if state.done {
                step.done = true;
                return Ok(step);
            }
            // list
            let mut names: Vec<u8> = Vec::new();
            let mut offs: Vec<usize> = vec![0];
            let mut types: Vec<u8> = Vec::new();
            while types.len() < max_entries {
                unsafe { *libc::__errno_location() = 0 };
                let ent = unsafe { libc::readdir64(state.stream.0) };
                if ent.is_null() {
                    let e = unsafe { *libc::__errno_location() };
                    step.errno = e;
                    state.done = true;
                    break;
                }
                let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) }.to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                names.extend_from_slice(name);
                offs.push(names.len());
                types.push(unsafe { (*ent).d_type });
            }
            step.done = state.done;
            let fd = state.fd;
            let n = types.len();
            let name_of = |i: usize| &names[offs[i]..offs[i + 1]];
            // stat, in chunks, fanned out
            let chunks = n.div_ceil(chunk);
            let outcomes: Vec<Mutex<Vec<Outcome>>> =
                (0..chunks).map(|_| Mutex::new(Vec::new())).collect();
            let failure: Mutex<Option<PyErr>> = Mutex::new(None);
            let work = |c: usize| {
                let lo = c * chunk;
                let hi = (lo + chunk).min(n);
                if let Some(take) = take_ops.as_ref() {
                    if let Err(e) = Python::with_gil(|py| take.call1(py, (hi - lo,))) {
                        *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                        return;
                    }
                }
                let mut out: Vec<Outcome> = (lo..hi)
                    .map(|i| stat_one(fd, name_of(i), types[i]))
                    .collect();
                if let Some(keep) = keep.as_ref() {
                    let paths: Vec<(usize, String)> = out
                        .iter()
                        .enumerate()
                        .filter_map(|(j, o)| match o {
                            Outcome::Entry(m, _) if m.kind() == DIRECTORY => None,
                            Outcome::Gone | Outcome::Pruned => None,
                            Outcome::Failed(DIRECTORY, _) => None,
                            _ => {
                                let mut t = Vec::new();
                                push_text(&mut t, &join(&rel, name_of(lo + j)));
                                Some((j, String::from_utf8(t).unwrap_or_default()))
                            }
                        })
                        .collect();
                    if !paths.is_empty() {
                        let verdict = Python::with_gil(|py| -> PyResult<Vec<bool>> {
                            let texts: Vec<&str> = paths.iter().map(|(_, t)| t.as_str()).collect();
                            keep.call1(py, (PyList::new(py, texts)?,))?
                                .extract::<Vec<bool>>(py)
                        });
                        match verdict {
                            Ok(v) => {
                                for ((j, _), k) in paths.iter().zip(v) {
                                    if !k {
                                        out[*j] = Outcome::Pruned;
                                    }
                                }
                            }
                            Err(e) => {
                                *failure.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                                return;
                            }
                        }
                    }
                }
                *outcomes[c].lock().unwrap_or_else(|e| e.into_inner()) = out;
            };
            pool::for_each(chunks, width.max(1), &work);
            if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
                return Err(e);
            }
            // rows
            let mut cols = sink.cols.lock().unwrap_or_else(|e| e.into_inner());
            let all: Vec<Outcome> = outcomes
                .into_iter()
                .flat_map(|o| o.into_inner().unwrap_or_else(|e| e.into_inner()))
                .collect();
            let subdirs = write_rows(&mut cols, &rel, &names, &offs, all, &mut step);
            drop(cols);
            if descend > 0 {
                let mut budget = descend as i64 - step.entries as i64;
                let mut left = Vec::new();
                descend_into(sink, fd, subdirs, 1, &mut budget, &mut step, &mut left);
                step.subdirs = left;
            } else {
                step.subdirs = subdirs;
            }
            Ok(step)
        })?;
        let counts = (
            step.entries,
            step.files,
            step.symlinks,
            step.other,
            step.bytes,
            step.errors,
            step.pruned,
            step.directories,
        );
        let subdirs = PyList::empty(py);
        for (path, m) in &step.subdirs {
            subdirs.append((PyBytes::new(py, path), dir_row(py, path, m)?))?;
        }
        PyTuple::new(
            py,
            [
                counts.into_pyobject(py)?.into_any(),
                step.samples.into_pyobject(py)?.into_any(),
                subdirs.into_any(),
                step.errno.into_pyobject(py)?.into_any(),
                pyo3::types::PyBool::new(py, step.done)
                    .to_owned()
                    .into_any(),
            ],
        )
    }
}

/// Appends the rows of one listed directory's entries (`outcomes`, in listing order, of the names in
/// `names`/`offs`) to `cols`, counting them in `step`; returns its subdirectories (path, metadata).
fn write_rows(
    cols: &mut Cols,
    rel: &[u8],
    names: &[u8],
    offs: &[usize],
    outcomes: Vec<Outcome>,
    step: &mut Step,
) -> Vec<(Vec<u8>, Meta)> {
    let depth = if rel.is_empty() {
        1
    } else {
        rel.iter().filter(|&&b| b == b'/').count() as i32 + 2
    };
    let mut parent: Option<i32> = None;
    let mut subdirs = Vec::new();
    for (i, o) in outcomes.into_iter().enumerate() {
        let name = &names[offs[i]..offs[i + 1]];
        let (kind, meta, target, errno) = match o {
            Outcome::Gone => continue,
            Outcome::Pruned => {
                step.pruned += 1;
                continue;
            }
            Outcome::Entry(m, _) if m.kind() == DIRECTORY => {
                subdirs.push((join(rel, name), m));
                continue;
            }
            Outcome::Entry(m, t) => (m.kind(), Some(m), t, 0),
            Outcome::Failed(k, e) => (k, None, None, e),
        };
        let p = *parent.get_or_insert_with(|| cols.open_parent(rel));
        cols.push_names(rel, name, p, depth);
        push_row(
            cols,
            kind,
            meta.as_ref(),
            target.as_deref(),
            errno,
            rel,
            name,
            step,
        );
    }
    subdirs
}

/// The columns after the names of one row, and its counts.
#[allow(clippy::too_many_arguments)]
fn push_row(
    cols: &mut Cols,
    kind: i32,
    meta: Option<&Meta>,
    target: Option<&[u8]>,
    errno: i32,
    rel: &[u8],
    name: &[u8],
    step: &mut Step,
) {
    cols.kind.push(kind);
    match meta {
        Some(m) => cols.push_meta(m),
        None => cols.push_no_meta(),
    }
    cols.push_target(target);
    step.entries += 1;
    if errno != 0 {
        let text = describe(errno);
        cols.error.push(text.as_bytes());
        step.errors += 1;
        if step.samples.len() < 5 {
            let mut p = Vec::new();
            push_text(&mut p, &join(rel, name));
            step.samples
                .push(format!("{}: {}", String::from_utf8_lossy(&p), text));
        }
    } else {
        cols.error.push_null();
    }
    match kind {
        FILE => {
            step.files += 1;
            step.bytes += meta.map(|m| m.size.max(0) as u64).unwrap_or(0);
        }
        DIRECTORY => step.directories += 1,
        SYMLINK => step.symlinks += 1,
        OTHER => step.other += 1,
        _ => {}
    }
}

/// How deep one call descends below its directory (each level holds a descriptor open).
const MAX_DESCENT: usize = 16;

/// Walks `subdirs` (children of the directory open at `parent_fd`) depth first while `budget`
/// lasts: each is opened relative to its parent (never through a symlink), listed whole (one
/// bigger than the budget left is not entered), stat-ed, and written with its own row, as the
/// Python walk would (`operators.walk`: gone or no longer a directory: no row; failed to open or
/// list: its row with the error).  Directories not entered go to `left`.
fn descend_into(
    sink: &Sink,
    parent_fd: c_int,
    subdirs: Vec<(Vec<u8>, Meta)>,
    level: usize,
    budget: &mut i64,
    step: &mut Step,
    left: &mut Vec<(Vec<u8>, Meta)>,
) {
    for (path, meta) in subdirs {
        if *budget <= 0 || level > MAX_DESCENT {
            left.push((path, meta));
            continue;
        }
        let name = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => path[i + 1..].to_vec(),
            None => path.clone(),
        };
        let own_row = |errno: i32, step: &mut Step| {
            let mut cols = sink.cols.lock().unwrap_or_else(|e| e.into_inner());
            let (rel, base) = match path.iter().rposition(|&b| b == b'/') {
                Some(i) => (&path[..i], &path[i + 1..]),
                None => (&path[..0], &path[..]),
            };
            let p = cols.open_parent(rel);
            let depth = path.iter().filter(|&&b| b == b'/').count() as i32 + 1;
            cols.push_names(rel, base, p, depth);
            push_row(
                &mut cols,
                DIRECTORY,
                Some(&meta),
                None,
                errno,
                rel,
                base,
                step,
            );
        };
        let child = match crate::dirfd::open_child_dir(parent_fd, &name) {
            Ok(fd) => fd,
            Err(libc::ENOENT) | Err(libc::ENOTDIR) | Err(libc::ELOOP) => continue, // vanished: no row
            Err(e) => {
                own_row(e, step);
                *budget -= 1;
                continue;
            }
        };
        let mut names: Vec<u8> = Vec::new();
        let mut offs: Vec<usize> = vec![0];
        let mut types: Vec<u8> = Vec::new();
        let room = (*budget).max(0) as usize;
        let mut too_big = false;
        let listed = crate::dirfd::read_dir_while(child.0, |n, t| {
            if types.len() >= room {
                too_big = true;
                return false;
            }
            names.extend_from_slice(n);
            offs.push(names.len());
            types.push(t);
            true
        });
        if too_big {
            left.push((path, meta)); // the Python walk lists it in steps
            continue;
        }
        let errno = listed.err().unwrap_or(0);
        let outcomes: Vec<Outcome> = (0..types.len())
            .map(|i| stat_one(child.0, &names[offs[i]..offs[i + 1]], types[i]))
            .collect();
        let before = step.entries;
        let found = {
            let mut cols = sink.cols.lock().unwrap_or_else(|e| e.into_inner());
            write_rows(&mut cols, &path, &names, &offs, outcomes, step)
        };
        if errno != libc::ENOENT {
            own_row(errno, step);
        }
        *budget -= (step.entries - before) as i64;
        descend_into(sink, child.0, found, level + 1, budget, step, left);
    }
}

/// A directory's row as `operators.rows.row_from_stat` makes it (times in nanoseconds).
fn dir_row<'py>(py: Python<'py>, path: &[u8], m: &Meta) -> PyResult<Bound<'py, PyTuple>> {
    let mut text = Vec::new();
    let valid = push_text(&mut text, path);
    let text = String::from_utf8(text).unwrap_or_default();
    let raw: PyObject = if valid {
        py.None()
    } else {
        PyBytes::new(py, path).into_any().unbind()
    };
    let none = py.None();
    PyTuple::new(
        py,
        [
            text.into_pyobject(py)?.into_any().unbind(),
            raw,
            "directory".into_pyobject(py)?.into_any().unbind(),
            m.size.into_pyobject(py)?.into_any().unbind(),
            m.mtime.into_pyobject(py)?.into_any().unbind(),
            m.atime.into_pyobject(py)?.into_any().unbind(),
            m.ctime.into_pyobject(py)?.into_any().unbind(),
            m.mode.into_pyobject(py)?.into_any().unbind(),
            (m.uid as i64).into_pyobject(py)?.into_any().unbind(),
            (m.gid as i64).into_pyobject(py)?.into_any().unbind(),
            m.ino.into_pyobject(py)?.into_any().unbind(),
            m.dev.into_pyobject(py)?.into_any().unbind(),
            (m.nlink as i64).into_pyobject(py)?.into_any().unbind(),
            none.clone_ref(py),
            none.clone_ref(py),
            none.clone_ref(py),
            none,
        ],
    )
}

/// Threads the core's pool has started in this process.
#[pyfunction]
pub fn pool_threads() -> usize {
    pool::threads()
}
