//! The scan's Python classes: `Sink` (manifest rows as columns, taken as Arrow buffers) and
//! `DirScan` (a directory listed in steps), binding `pfs_core::scan`.

use std::os::fd::BorrowedFd;
use std::sync::Mutex;

use pfs_core::columns::{as_bytes, BinaryBuilder};
use pfs_core::names::push_text;
use pfs_core::remove::Kind;
use pfs_core::scan::{self, Cols, Hooks, Meta, Row, StepError, StepOptions};
use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// Buffers of 1 MiB and more (a flush's columns, their copies as Python bytes) are mapped and unmapped
/// on their own, instead of glibc's default, which raises this threshold each time such a block is
/// freed and from then on serves them from per-thread heaps that keep freed memory: the core's steps
/// run on many pool threads, and a 1,000,000-entry directory peaked at 231-292 MB against 196-203 with
/// this (`benchmarks/RESULTS.md`, "Native core: peak RSS").  Process-wide by nature (glibc has one
/// threshold), so scoped to the processes that need it: set when the first `Sink` is made (a process
/// that scans with the core), never at import (rm, cp, checksums and every other importer keep
/// glibc's default).
fn map_big_buffers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    ONCE.call_once(|| {
        // SAFETY: mallopt only sets an allocator parameter; glibc serialises it with its own locks.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20) };
    });
}

/// Manifest rows collected column-wise across directories and threads, taken as Arrow buffers.
#[pyclass(module = "operators._native")]
pub struct Sink {
    cols: Mutex<Cols>,
}

fn full() -> PyErr {
    PyOverflowError::new_err(
        "the sink's columns would pass 2 GiB: take() its rows first (nothing was added)",
    )
}

/// Nanoseconds (any size: a Python int) as the manifest's microseconds, truncated toward zero.
fn micros(ns: Option<i128>) -> PyResult<Option<i64>> {
    ns.map(|t| {
        i64::try_from(t / 1000).map_err(|_| PyOverflowError::new_err("a time past ±292,000 years"))
    })
    .transpose()
}

#[pymethods]
impl Sink {
    #[new]
    fn new() -> Self {
        map_big_buffers();
        Sink {
            cols: Mutex::new(Cols::default()),
        }
    }

    fn __len__(&self) -> usize {
        self.cols.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The rows so far in a new sink, this one empty (nothing is copied): a part's rows go to a
    /// writer thread while the walk fills this sink again.
    fn detach(&self) -> Sink {
        let cols = self.cols.lock().unwrap_or_else(|e| e.into_inner()).take();
        Sink {
            cols: Mutex::new(cols),
        }
    }

    /// Appends rows made in Python (`operators.rows` tuples, `ROW_COLUMNS` order: a directory's own row,
    /// an error row), so one buffer holds a task's rows and no Python list becomes an Arrow array.
    /// `checksum` must be None (checksums are filled in on the table).  OverflowError, with nothing
    /// added, when the rows would not fit the columns' int32 offsets.
    fn push_rows(&self, rows: &Bound<'_, PyList>) -> PyResult<()> {
        struct Owned {
            path: String,
            raw: Option<Vec<u8>>,
            kind: Kind,
            ints: [Option<i64>; 7],
            mode: Option<u32>,
            ids: [Option<u64>; 2],
            target: Option<String>,
            target_raw: Option<Vec<u8>>,
            error: Option<String>,
        }
        // first the most bytes the rows can add (text: 4 bytes a character), before copying any
        let mut need = 0usize;
        for row in rows.iter() {
            let row = row.downcast::<PyTuple>()?;
            for (i, per) in [(0, 8), (1, 1), (13, 4), (14, 1), (16, 4)] {
                if let Ok(item) = row.get_item(i) {
                    need = need.saturating_add(per * item.len().unwrap_or(0));
                }
            }
        }
        if need > self.cols.lock().unwrap_or_else(|e| e.into_inner()).room() {
            return Err(full());
        }
        let mut parsed = Vec::with_capacity(rows.len());
        for row in rows.iter() {
            let row = row.downcast::<PyTuple>()?;
            if row.len() != 17 {
                return Err(PyValueError::new_err(
                    "a row has 17 values (operators.schema.ROW_COLUMNS)",
                ));
            }
            let get = |i: usize| row.get_item(i);
            let kind: String = get(2)?.extract()?;
            let kind = match kind.as_str() {
                "file" => Kind::File,
                "directory" => Kind::Directory,
                "symlink" => Kind::Symlink,
                "other" => Kind::Other,
                _ => return Err(PyValueError::new_err(format!("unknown type {kind:?}"))),
            };
            let int = |i: usize| -> PyResult<Option<i64>> { get(i)?.extract() };
            let ns = |i: usize| -> PyResult<Option<i64>> { micros(get(i)?.extract()?) };
            let uint = |i: usize| -> PyResult<Option<u64>> { get(i)?.extract() };
            if !get(15)?.is_none() {
                return Err(PyValueError::new_err(
                    "a sink holds no checksums (filled in on the table)",
                ));
            }
            parsed.push(Owned {
                path: get(0)?.extract()?,
                raw: get(1)?.extract()?,
                kind,
                ints: [int(3)?, ns(4)?, ns(5)?, ns(6)?, int(8)?, int(9)?, int(12)?],
                mode: get(7)?.extract()?,
                ids: [uint(10)?, uint(11)?],
                target: get(13)?.extract()?,
                target_raw: get(14)?.extract()?,
                error: get(16)?.extract()?,
            });
        }
        let views: Vec<Row<'_>> = parsed
            .iter()
            .map(|o| Row {
                path: o.path.as_bytes(),
                path_raw: o.raw.as_deref(),
                kind: o.kind,
                size: o.ints[0],
                mtime_us: o.ints[1],
                atime_us: o.ints[2],
                ctime_us: o.ints[3],
                mode: o.mode,
                uid: o.ints[4],
                gid: o.ints[5],
                ino: o.ids[0],
                dev: o.ids[1],
                nlink: o.ints[6],
                target: o.target.as_deref().map(str::as_bytes),
                target_raw: o.target_raw.as_deref(),
                error: o.error.as_deref().map(str::as_bytes),
            })
            .collect();
        let mut cols = self.cols.lock().unwrap_or_else(|e| e.into_inner());
        cols.reserve(views.iter().map(Row::bound).sum())
            .map_err(|_| full())?;
        for row in &views {
            cols.push_row(row);
        }
        Ok(())
    }

    /// The rows so far as `(n, columns, parents)` and an empty sink: `columns` maps a column name to
    /// its buffers, `(validity or None, offsets, data)` for variable width, `(validity or None, data)`
    /// for fixed width (`parent`, `type`: int32 dictionary indices; `parents`: the parent dictionary
    /// as `(offsets, data)`).  Each buffer is a [`Buffer`] holding the core's own memory (no copy);
    /// `operators.rows.sink_table` wraps them with `pyarrow.Array.from_buffers`.  `sort`: the rows in
    /// path order (`pfs_core::order`, on the core's threads, without the interpreter lock).
    #[pyo3(signature = (sort=false))]
    fn take<'py>(&self, py: Python<'py>, sort: bool) -> PyResult<Bound<'py, PyTuple>> {
        let mut cols = {
            let mut guard = self.cols.lock().unwrap_or_else(|e| e.into_inner());
            guard.take()
        };
        if sort {
            let width = std::thread::available_parallelism().map_or(1, |n| n.get());
            cols = py.allow_threads(|| cols.into_path_order(width));
        }
        let n = cols.len();
        let out = pyo3::types::PyDict::new(py);
        let var = |name: &str, b: &mut BinaryBuilder| -> PyResult<()> {
            let validity = opt_buffer(py, b.validity.take())?;
            let offsets = Buffer::new(py, Owned::I32(std::mem::take(&mut b.offsets)))?;
            let data = Buffer::new(py, Owned::U8(std::mem::take(&mut b.data)))?;
            out.set_item(name, (validity, offsets, data))
        };
        var("path", &mut cols.path)?;
        var("path_raw", &mut cols.path_raw)?;
        var("name", &mut cols.name)?;
        var("link_target", &mut cols.target)?;
        var("link_target_raw", &mut cols.target_raw)?;
        var("error", &mut cols.error)?;
        macro_rules! fixed {
            ($name:expr, $b:expr, $kind:ident) => {
                out.set_item(
                    $name,
                    (
                        opt_buffer(py, $b.validity.take())?,
                        Buffer::new(py, Owned::$kind(std::mem::take(&mut $b.values)))?,
                    ),
                )?
            };
        }
        fixed!("size", cols.size, I64);
        fixed!("mtime", cols.mtime, I64);
        fixed!("atime", cols.atime, I64);
        fixed!("ctime", cols.ctime, I64);
        fixed!("mode", cols.mode, U32);
        fixed!("uid", cols.uid, I64);
        fixed!("gid", cols.gid, I64);
        fixed!("ino", cols.ino, U64);
        fixed!("dev", cols.dev, U64);
        fixed!("nlink", cols.nlink, I64);
        let indices =
            |v: Vec<i32>| -> PyResult<_> { Ok((py.None(), Buffer::new(py, Owned::I32(v))?)) };
        out.set_item("parent", indices(std::mem::take(&mut cols.parent))?)?;
        out.set_item("depth", indices(std::mem::take(&mut cols.depth))?)?;
        out.set_item("type", indices(std::mem::take(&mut cols.kind))?)?;
        let parents = (
            cols.parents.len(),
            Buffer::new(py, Owned::I32(std::mem::take(&mut cols.parents.offsets)))?,
            Buffer::new(py, Owned::U8(std::mem::take(&mut cols.parents.data)))?,
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

/// A column's memory as the core built it.
enum Owned {
    U8(Vec<u8>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    U64(Vec<u64>),
}

impl Owned {
    fn bytes(&self) -> &[u8] {
        match self {
            Owned::U8(v) => v,
            Owned::I32(v) => as_bytes(v),
            Owned::U32(v) => as_bytes(v),
            Owned::I64(v) => as_bytes(v),
            Owned::U64(v) => as_bytes(v),
        }
    }
}

/// A read-only buffer (the buffer protocol) over a column the core built, handed to Arrow without a
/// copy: copying a 200,020-row part's ~30 MB into `bytes` cost ~20 ms and a page fault per 4 KiB.
/// Immutable (frozen, nothing writes it), so Arrow may keep views of it for as long as it lives.
#[pyclass(module = "operators._native", frozen)]
pub struct Buffer {
    data: Owned,
}

impl Buffer {
    fn new(py: Python<'_>, data: Owned) -> PyResult<Bound<'_, Buffer>> {
        Bound::new(py, Buffer { data })
    }
}

#[pymethods]
impl Buffer {
    /// # Safety
    /// Called by Python with a view to fill; the data lives as long as `slf`, which the view holds.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::os::raw::c_int,
    ) -> PyResult<()> {
        let data = slf.get().data.bytes();
        let len = pyo3::ffi::Py_ssize_t::try_from(data.len())
            .map_err(|_| PyValueError::new_err("a buffer past isize::MAX bytes"))?;
        // SAFETY: `view` is Python's to fill; `slf` (referenced by the view until it is released)
        // owns `data`, which nothing mutates (frozen); readonly = 1 refuses a writable request.
        let rc = unsafe {
            pyo3::ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                data.as_ptr().cast_mut().cast(),
                len,
                1,
                flags,
            )
        };
        if rc == -1 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.data.bytes().len()
    }
}

fn opt_buffer(py: Python<'_>, bits: Option<Vec<u8>>) -> PyResult<PyObject> {
    Ok(match bits {
        Some(b) => Buffer::new(py, Owned::U8(b))?.into_any().unbind(),
        None => py.None(),
    })
}

/// One directory being scanned: listed and stat-ed in steps of at most `max_entries`.
#[pyclass(module = "operators._native")]
pub struct DirScan {
    inner: scan::DirScan,
}

#[pymethods]
impl DirScan {
    /// Starts listing the directory open at `dir_fd` (a duplicate is kept; the caller may close its own).
    #[new]
    fn new(dir_fd: i32, rel: &[u8]) -> PyResult<Self> {
        if dir_fd < 0 {
            return Err(crate::os_error(libc::EBADF));
        }
        // SAFETY: the caller's descriptor is open for this call; it is only duplicated here.
        let dir = unsafe { BorrowedFd::borrow_raw(dir_fd) };
        let inner = scan::DirScan::new(dir, rel).map_err(crate::os_error)?;
        Ok(DirScan { inner })
    }

    /// Lists up to `max_entries` more entries, stats them in chunks of `chunk` over up to `width`
    /// threads (pool threads beside the caller's), and appends their rows to `sink`.
    ///
    /// `take_ops(n)` (the job's ops/s cap) is called before each chunk's stats, `keep(paths)` (a
    /// prune) with the text paths of a chunk's non-directories, returning which to keep; if either
    /// raises, the exception propagates and the entries listed are kept for the next step (none
    /// dropped), as when the sink is full (OverflowError: take its rows, then step again).  Returns
    /// `(counts, samples, subdirs, errno, done)`: counts `(entries, files, symlinks, other, bytes,
    /// errors, pruned, directories)` of the rows written, up to five `"path: error"` samples,
    /// subdirectories as `(path, row)` (a row like `operators.rows.row_from_stat`), the listing's
    /// errno (0: none).
    ///
    /// `descend` > 0 (only without `take_ops` and `keep`): the subdirectories found are walked in the
    /// same call, depth first, until `descend` entries are written in all; their rows (their own
    /// included) go to the sink and only the subdirectories not reached come back.
    #[pyo3(signature = (sink, max_entries, chunk, width, take_ops=None, keep=None, descend=0))]
    #[allow(clippy::too_many_arguments)] // the Python API, kept stable; the core takes StepOptions
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
        let o = StepOptions {
            max_entries,
            chunk,
            width,
            descend,
        };
        let take_fn = |n: usize| -> PyResult<()> {
            let take = take_ops.as_ref().expect("only called when given");
            Python::with_gil(|py| take.call1(py, (n,)).map(drop))
        };
        let keep_fn = |paths: Vec<String>| -> PyResult<Vec<bool>> {
            let keep = keep.as_ref().expect("only called when given");
            Python::with_gil(|py| {
                let verdict: Vec<bool> = keep
                    .call1(py, (PyList::new(py, paths.iter())?,))?
                    .extract(py)?;
                if verdict.len() != paths.len() {
                    return Err(PyValueError::new_err("keep() returns one bool per path"));
                }
                Ok(verdict)
            })
        };
        let hooks = Hooks {
            take_ops: take_ops
                .as_ref()
                .map(|_| &take_fn as &(dyn Fn(usize) -> PyResult<()> + Sync)),
            keep: keep
                .as_ref()
                .map(|_| &keep_fn as &(dyn Fn(Vec<String>) -> PyResult<Vec<bool>> + Sync)),
        };
        let step = py
            .allow_threads(|| self.inner.step(&sink.cols, o, &hooks))
            .map_err(|e| match e {
                StepError::Hook(e) => e,
                StepError::Full => full(),
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

/// A directory's row as `operators.rows.row_from_stat` makes it (times in nanoseconds, exact
/// whatever the year: Python ints).
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
            m.mtime.nanos().into_pyobject(py)?.into_any().unbind(),
            m.atime.nanos().into_pyobject(py)?.into_any().unbind(),
            m.ctime.nanos().into_pyobject(py)?.into_any().unbind(),
            m.mode.into_pyobject(py)?.into_any().unbind(),
            i64::from(m.uid).into_pyobject(py)?.into_any().unbind(),
            i64::from(m.gid).into_pyobject(py)?.into_any().unbind(),
            m.ino.into_pyobject(py)?.into_any().unbind(),
            m.dev.into_pyobject(py)?.into_any().unbind(),
            m.nlink.into_pyobject(py)?.into_any().unbind(),
            none.clone_ref(py),
            none.clone_ref(py),
            none.clone_ref(py),
            none,
        ],
    )
}

/// Threads the core's pool has started in this process.
#[pyfunction]
fn pool_threads() -> usize {
    pfs_core::pool::threads()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Sink>()?;
    m.add_class::<Buffer>()?;
    m.add_class::<DirScan>()?;
    m.add_function(wrap_pyfunction!(pool_threads, m)?)?;
    Ok(())
}
