//! The scan's hot path: list a directory, `fstatat` its entries relative to its descriptor (never
//! following a symlink), and append manifest rows (schema v1, `operators/schema.py`) to [`Cols`].
//! Directories come back to the caller (the walk queues them; their own row is written when they
//! are listed); everything else stays here until the columns are taken as Arrow buffers.
//!
//! Same semantics as the Python rows (`operators/rows.py`): an entry gone since the listing has no
//! row; a failed `fstatat` is an error row typed `directory` if the listing's `d_type` said so, else
//! `other`; a failed `readlinkat` an error row typed `symlink`; times in microseconds.  A step whose
//! hooks fail, or whose rows would not fit the columns' int32 offsets, keeps its listed entries for
//! the next step: nothing listed is ever dropped.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Mutex;

use crate::columns::{BinaryBuilder, FixedBuilder};
use crate::errors::describe;
use crate::names::{join, push_text};
use crate::order;
use crate::pool;
use crate::remove::Kind;
use crate::sys::{self, cstring, DirStream, Errno};
use crate::time::Time;

impl Kind {
    /// The index in the `type` column's dictionary (`operators.schema.TYPES` order).
    pub fn index(self) -> i32 {
        match self {
            Kind::File => 0,
            Kind::Directory => 1,
            Kind::Symlink => 2,
            Kind::Other => 3,
        }
    }
}

/// What one `fstatat` says about an entry.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    pub mode: u32,
    pub size: i64,
    pub mtime: Time,
    pub atime: Time,
    pub ctime: Time,
    pub uid: u32,
    pub gid: u32,
    pub ino: u64,
    pub dev: u64,
    pub nlink: u64,
}

impl Meta {
    pub fn of(s: &libc::stat) -> Meta {
        Meta {
            mode: s.st_mode,
            size: s.st_size,
            mtime: Time::mtime(s),
            atime: Time::atime(s),
            ctime: Time::ctime(s),
            uid: s.st_uid,
            gid: s.st_gid,
            ino: s.st_ino,
            dev: s.st_dev,
            nlink: s.st_nlink,
        }
    }

    pub fn kind(&self) -> Kind {
        Kind::of(self.mode)
    }
}

/// What became of one listed entry.
enum Outcome {
    Gone,
    Entry(Meta, Option<Vec<u8>>),
    Failed(Kind, Errno),
    Pruned,
}

/// What handing a chunk to a pool thread costs (a wake-up, two context switches): a chunk done
/// faster than this on the caller's thread is not worth sending out.
const HANDOFF: std::time::Duration = std::time::Duration::from_micros(50);

/// Bytes an error row's text takes at most (`describe`).
const ERROR_TEXT: usize = 256;

/// The manifest columns of rows not yet taken.
#[derive(Default)]
pub struct Cols {
    pub path: BinaryBuilder,
    pub path_raw: BinaryBuilder,
    pub name: BinaryBuilder,
    pub parent: Vec<i32>,
    pub parents: BinaryBuilder,
    pub depth: Vec<i32>,
    pub kind: Vec<i32>,
    pub size: FixedBuilder<i64>,
    pub mtime: FixedBuilder<i64>,
    pub atime: FixedBuilder<i64>,
    pub ctime: FixedBuilder<i64>,
    pub mode: FixedBuilder<u32>,
    pub uid: FixedBuilder<i64>,
    pub gid: FixedBuilder<i64>,
    pub ino: FixedBuilder<u64>,
    pub dev: FixedBuilder<u64>,
    pub nlink: FixedBuilder<i64>,
    pub target: BinaryBuilder,
    pub target_raw: BinaryBuilder,
    pub error: BinaryBuilder,
    scratch: Vec<u8>,
    /// Bytes a variable-width column may hold (`columns::MAX_DATA`; lower in tests).
    limit: Option<usize>,
}

/// The rows would not fit: a column's data would pass `i32::MAX` bytes (take the rows first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// Most bytes one row adds to any variable-width column: names' text (4 bytes per undecodable
/// byte, `\xNN`), raw names, the parent's text, a link target, the error text.
pub fn row_bound(path_len: usize, target_len: usize) -> usize {
    4 * path_len + ERROR_TEXT + 5 * target_len
}

impl Cols {
    pub fn len(&self) -> usize {
        self.depth.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Columns that hold at most `limit` bytes each (below `columns::MAX_DATA`: tests of a full sink).
    pub fn with_limit(limit: usize) -> Cols {
        Cols {
            limit: Some(limit.min(crate::columns::MAX_DATA)),
            ..Cols::default()
        }
    }

    /// Bytes any variable-width column can still take.
    pub fn room(&self) -> usize {
        let limit = self.limit.unwrap_or(crate::columns::MAX_DATA);
        [
            &self.path,
            &self.path_raw,
            &self.name,
            &self.parents,
            &self.target,
            &self.target_raw,
            &self.error,
        ]
        .iter()
        .map(|b| limit.saturating_sub(b.data.len()))
        .min()
        .unwrap_or(0)
    }

    /// These rows in path order (`order::sorted_rows`: sorted on up to `width` of the core's threads).
    pub fn into_path_order(self, width: usize) -> Cols {
        let rows = order::sorted_rows(&self.path, width);
        let r = rows.as_slice();
        Cols {
            path: self.path.gather(r),
            path_raw: self.path_raw.gather(r),
            name: self.name.gather(r),
            parent: order::gather(&self.parent, r),
            parents: self.parents, // the dictionary: indices keep pointing into it
            depth: order::gather(&self.depth, r),
            kind: order::gather(&self.kind, r),
            size: self.size.gather(r),
            mtime: self.mtime.gather(r),
            atime: self.atime.gather(r),
            ctime: self.ctime.gather(r),
            mode: self.mode.gather(r),
            uid: self.uid.gather(r),
            gid: self.gid.gather(r),
            ino: self.ino.gather(r),
            dev: self.dev.gather(r),
            nlink: self.nlink.gather(r),
            target: self.target.gather(r),
            target_raw: self.target_raw.gather(r),
            error: self.error.gather(r),
            scratch: Vec::new(),
            limit: self.limit,
        }
    }

    /// The rows so far, leaving empty columns with the same limit.
    pub fn take(&mut self) -> Cols {
        let limit = self.limit;
        let mut taken = std::mem::take(self);
        self.limit = limit;
        taken.limit = limit;
        taken
    }

    /// `Err(Full)` unless rows adding up to `need` bytes fit.
    pub fn reserve(&self, need: usize) -> Result<(), Full> {
        if need <= self.room() {
            Ok(())
        } else {
            Err(Full)
        }
    }

    /// Starts a directory's rows: its text joins the `parent` dictionary.
    fn open_parent(&mut self, rel: &[u8]) -> i32 {
        self.scratch.clear();
        push_text(&mut self.scratch, rel);
        let text = std::mem::take(&mut self.scratch);
        self.parents.push(&text);
        self.scratch = text;
        index(self.parents.len() - 1)
    }

    fn push_names(&mut self, rel: &[u8], name: &[u8], parent: i32, depth: i32) {
        let start = self.path.data.len();
        let full = join(rel, name);
        let valid = push_text(&mut self.path.data, &full);
        self.path.end_value(true);
        if valid {
            self.path_raw.push_null();
        } else {
            self.path_raw.push(&full);
        }
        // the name's text is the path's text after its last '/'
        let text = &self.path.data[start..];
        let cut = text.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
        let tail = text[cut..].to_vec();
        self.name.push(&tail);
        self.parent.push(parent);
        self.depth.push(depth);
    }

    fn push_meta(&mut self, m: &Meta) {
        self.size.push(m.size);
        self.mtime.push_opt(m.mtime.micros());
        self.atime.push_opt(m.atime.micros());
        self.ctime.push_opt(m.ctime.micros());
        self.mode.push(m.mode);
        self.uid.push(i64::from(m.uid));
        self.gid.push(i64::from(m.gid));
        self.ino.push(m.ino);
        self.dev.push(m.dev);
        self.nlink.push(i64::try_from(m.nlink).unwrap_or(i64::MAX));
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
                self.target.end_value(true);
                if valid {
                    self.target_raw.push_null();
                } else {
                    self.target_raw.push(t);
                }
            }
        }
    }

    /// Appends a row made elsewhere (Python's directory and error rows): `path` is its text, and the
    /// rest as the manifest stores it (times in microseconds).  The caller has reserved room.
    pub fn push_row(&mut self, row: &Row<'_>) {
        let path = row.path;
        let (parent, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&path[..0], path),
        };
        self.path.push(path);
        self.path_raw.push_opt(row.path_raw);
        self.name.push(name);
        self.parents.push(parent);
        let p = index(self.parents.len() - 1);
        self.parent.push(p);
        self.depth
            .push(index(path.iter().filter(|&&b| b == b'/').count() + 1));
        self.kind.push(row.kind.index());
        self.size.push_opt(row.size);
        self.mtime.push_opt(row.mtime_us);
        self.atime.push_opt(row.atime_us);
        self.ctime.push_opt(row.ctime_us);
        self.mode.push_opt(row.mode);
        self.uid.push_opt(row.uid);
        self.gid.push_opt(row.gid);
        self.ino.push_opt(row.ino);
        self.dev.push_opt(row.dev);
        self.nlink.push_opt(row.nlink);
        self.target.push_opt(row.target);
        self.target_raw.push_opt(row.target_raw);
        self.error.push_opt(row.error);
    }
}

/// An i32 index or count of a column (a column never holds more than i32::MAX rows: its offsets).
fn index(n: usize) -> i32 {
    i32::try_from(n).expect("a column holds at most i32::MAX values")
}

/// A row made outside the scan (`Cols::push_row`).
#[derive(Debug, Default)]
pub struct Row<'a> {
    pub path: &'a [u8],
    pub path_raw: Option<&'a [u8]>,
    pub kind: Kind,
    pub size: Option<i64>,
    pub mtime_us: Option<i64>,
    pub atime_us: Option<i64>,
    pub ctime_us: Option<i64>,
    pub mode: Option<u32>,
    pub uid: Option<i64>,
    pub gid: Option<i64>,
    pub ino: Option<u64>,
    pub dev: Option<u64>,
    pub nlink: Option<i64>,
    pub target: Option<&'a [u8]>,
    pub target_raw: Option<&'a [u8]>,
    pub error: Option<&'a [u8]>,
}

impl Row<'_> {
    /// Most bytes this row adds to any column.
    pub fn bound(&self) -> usize {
        let len = |b: Option<&[u8]>| b.map_or(0, <[u8]>::len);
        2 * self.path.len()
            + len(self.path_raw)
            + len(self.target)
            + len(self.target_raw)
            + len(self.error)
    }
}

/// Entries listed and not yet written: names back to back, their ends, their `d_type`s.
#[derive(Default)]
struct Listed {
    names: Vec<u8>,
    ends: Vec<usize>,
    types: Vec<u8>,
}

impl Listed {
    fn len(&self) -> usize {
        self.types.len()
    }

    fn name(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.names[start..self.ends[i]]
    }

    /// The entries from `from` on.
    fn tail(&self, from: usize) -> Listed {
        let mut rest = Listed::default();
        for i in from..self.len() {
            rest.push(self.name(i), self.types[i]);
        }
        rest
    }

    fn push(&mut self, name: &[u8], d_type: u8) {
        self.names.extend_from_slice(name);
        self.ends.push(self.names.len());
        self.types.push(d_type);
    }
}

struct ScanState {
    stream: DirStream,
    /// Listed by a step that failed (a hook raised, or the sink was full): the next step's.
    pending: Option<Listed>,
    done: bool,
}

/// One directory being scanned: listed and stat-ed in steps of at most `max_entries`, so a
/// directory of millions of entries is written out as it goes, never held whole.
pub struct DirScan {
    rel: Vec<u8>,
    state: Mutex<ScanState>,
}

/// What a step found: counters, error samples, and the subdirectories (path, metadata).
#[derive(Default, Debug)]
pub struct Step {
    pub entries: u64,
    pub files: u64,
    pub symlinks: u64,
    pub other: u64,
    pub bytes: u64,
    pub errors: u64,
    pub pruned: u64,
    pub directories: u64,
    pub samples: Vec<String>,
    pub subdirs: Vec<(Vec<u8>, Meta)>,
    /// Why the listing stopped (0: it did not).
    pub errno: Errno,
    pub done: bool,
}

/// Takes `n` operations of the job's ops/s cap (blocks until they are granted).
pub type TakeOps<'a, E> = &'a (dyn Fn(usize) -> Result<(), E> + Sync);
/// Which of these text paths (a chunk's non-directories) to keep.
pub type Keep<'a, E> = &'a (dyn Fn(Vec<String>) -> Result<Vec<bool>, E> + Sync);

/// The caller's pacing and pruning, called once per chunk from the core's threads.
pub struct Hooks<'a, E> {
    pub take_ops: Option<TakeOps<'a, E>>,
    pub keep: Option<Keep<'a, E>>,
}

/// How a step works.
#[derive(Clone, Copy, Debug)]
pub struct StepOptions {
    /// Most entries listed.
    pub max_entries: usize,
    /// Entries per chunk of stats (one hook call each).
    pub chunk: usize,
    /// Threads stat-ing at once (the caller's among them).
    pub width: usize,
    /// Entries written by walking the subdirectories found in the same step (0: none; never with hooks).
    pub descend: usize,
}

/// Why a step wrote nothing: its listed entries are kept for the next step.
#[derive(Debug)]
pub enum StepError<E> {
    Hook(E),
    Full,
}

fn stat_one(fd: BorrowedFd<'_>, name: &[u8], d_type: u8) -> Outcome {
    let Ok(c) = cstring(name) else {
        return Outcome::Failed(Kind::Other, libc::EINVAL);
    };
    match sys::lstat_at(fd, &c) {
        Err(libc::ENOENT) => Outcome::Gone,
        Err(e) => Outcome::Failed(
            if d_type == libc::DT_DIR {
                Kind::Directory
            } else {
                Kind::Other
            },
            e,
        ),
        Ok(s) => {
            let meta = Meta::of(&s);
            if meta.kind() == Kind::Symlink {
                match sys::readlink_at(fd, &c) {
                    Ok(t) => Outcome::Entry(meta, Some(t)),
                    Err(libc::ENOENT) => Outcome::Gone,
                    Err(e) => Outcome::Failed(Kind::Symlink, e),
                }
            } else {
                Outcome::Entry(meta, None)
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DirScan {
    /// Starts listing the directory open at `dir` (a duplicate is kept; the caller may close its own).
    pub fn new(dir: BorrowedFd<'_>, rel: &[u8]) -> Result<DirScan, Errno> {
        Ok(DirScan {
            rel: rel.to_vec(),
            state: Mutex::new(ScanState {
                stream: DirStream::open(dir)?,
                pending: None,
                done: false,
            }),
        })
    }

    /// Lists up to `max_entries` more entries (or takes those a failed step left), stats them in
    /// chunks over up to `width` threads, and appends their rows to `sink`; with `descend`, walks the
    /// subdirectories found depth first until that many entries are written, returning only those
    /// not reached.
    pub fn step<E: Send>(
        &self,
        sink: &Mutex<Cols>,
        o: StepOptions,
        hooks: &Hooks<'_, E>,
    ) -> Result<Step, StepError<E>> {
        let hooked = hooks.take_ops.is_some() || hooks.keep.is_some();
        let descend = if hooked { 0 } else { o.descend };
        let chunk = o.chunk.max(1);
        let rel = &self.rel;
        let mut state = lock(&self.state);
        let mut step = Step::default();
        let listed = match state.pending.take() {
            Some(l) => l,
            None if state.done => {
                step.done = true;
                return Ok(step);
            }
            None => {
                let mut l = Listed::default();
                while l.len() < o.max_entries.max(1) {
                    match state.stream.next_entry() {
                        Ok(Some(e)) => l.push(e.name.to_bytes(), e.d_type),
                        Ok(None) => {
                            state.done = true;
                            break;
                        }
                        Err(e) => {
                            step.errno = e;
                            state.done = true;
                            break;
                        }
                    }
                }
                l
            }
        };
        let fd = state.stream.fd();
        let n = listed.len();
        let chunks = n.div_ceil(chunk);
        let outcomes: Vec<Mutex<Vec<Outcome>>> =
            (0..chunks).map(|_| Mutex::new(Vec::new())).collect();
        let failure: Mutex<Option<E>> = Mutex::new(None);
        let work = |c: usize| {
            let (lo, hi) = (c * chunk, ((c + 1) * chunk).min(n));
            if let Some(take) = hooks.take_ops {
                if let Err(e) = take(hi - lo) {
                    lock(&failure).get_or_insert(e);
                    return;
                }
            }
            let mut out: Vec<Outcome> = (lo..hi)
                .map(|i| stat_one(fd, listed.name(i), listed.types[i]))
                .collect();
            if let Some(keep) = hooks.keep {
                if let Err(e) = prune(keep, rel, &listed, lo, &mut out) {
                    lock(&failure).get_or_insert(e);
                    return;
                }
            }
            *lock(&outcomes[c]) = out;
        };
        // Stats the kernel answers from its cache (a FUSE or NFS client right after READDIRPLUS, a
        // warm local disk) take microseconds: a chunk of them costs less than handing it to another
        // thread.  So chunks run here while each is that cheap; the first that is not (round trips)
        // sends the rest out over the pool.
        let mut inline = 0;
        if o.width > 1 {
            while inline < chunks {
                let t = std::time::Instant::now();
                work(inline);
                inline += 1;
                if t.elapsed() > HANDOFF {
                    break;
                }
            }
        }
        pool::for_each(chunks - inline, o.width.max(1), &|c| work(inline + c));
        if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
            state.pending = Some(listed);
            return Err(StepError::Hook(e));
        }
        let all: Vec<Outcome> = outcomes
            .into_iter()
            .flat_map(|o| o.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect();
        let mut rest = None;
        let subdirs = {
            let mut cols = lock(sink);
            // the longest prefix whose rows fit the columns: the rest waits for the next step
            let fits = fitting(cols.room(), rel, &listed, &all);
            if fits == 0 && n > 0 {
                drop(cols);
                state.pending = Some(listed);
                return Err(StepError::Full);
            }
            if fits < n {
                rest = Some(listed.tail(fits));
            }
            write_rows(
                &mut cols,
                rel,
                &listed,
                all.into_iter().take(fits).collect(),
                &mut step,
            )
        };
        step.done = state.done && rest.is_none();
        let descend = if rest.is_some() { 0 } else { descend }; // the sink is full enough
        if descend > 0 {
            let mut budget = descend as i64 - step.entries as i64;
            let mut left = Vec::new();
            descend_into(sink, fd, subdirs, 1, &mut budget, &mut step, &mut left);
            step.subdirs = left;
        } else {
            step.subdirs = subdirs;
        }
        state.pending = rest;
        Ok(step)
    }
}

/// Asks `keep` about a chunk's non-directories (`out`, from listed index `lo`): those it drops are pruned.
fn prune<E>(
    keep: &(dyn Fn(Vec<String>) -> Result<Vec<bool>, E> + Sync),
    rel: &[u8],
    listed: &Listed,
    lo: usize,
    out: &mut [Outcome],
) -> Result<(), E> {
    let asked: Vec<(usize, String)> = out
        .iter()
        .enumerate()
        .filter_map(|(j, o)| match o {
            Outcome::Entry(m, _) if m.kind() == Kind::Directory => None,
            Outcome::Gone | Outcome::Pruned | Outcome::Failed(Kind::Directory, _) => None,
            _ => {
                let mut t = Vec::new();
                push_text(&mut t, &join(rel, listed.name(lo + j)));
                Some((j, String::from_utf8(t).unwrap_or_default()))
            }
        })
        .collect();
    if asked.is_empty() {
        return Ok(());
    }
    let verdict = keep(asked.iter().map(|(_, t)| t.clone()).collect())?;
    for ((j, _), k) in asked.iter().zip(verdict) {
        if !k {
            out[*j] = Outcome::Pruned;
        }
    }
    Ok(())
}

/// How many of `outcomes` (from the first) have rows that fit in `room` bytes.
fn fitting(room: usize, rel: &[u8], listed: &Listed, outcomes: &[Outcome]) -> usize {
    let mut need = 4 * (rel.len() + 1);
    for (i, o) in outcomes.iter().enumerate() {
        need += one_bound(rel, listed, i, o);
        if need > room {
            return i;
        }
    }
    outcomes.len()
}

fn one_bound(rel: &[u8], listed: &Listed, i: usize, o: &Outcome) -> usize {
    let dir = rel.len() + 1;
    match o {
        Outcome::Entry(_, t) => {
            row_bound(dir + listed.name(i).len(), t.as_ref().map_or(0, Vec::len))
        }
        Outcome::Failed(..) => row_bound(dir + listed.name(i).len(), 0),
        Outcome::Gone | Outcome::Pruned => 0,
    }
}

/// Most bytes the rows of `outcomes` add to any column (`row_bound` each, and the parent's text).
fn bound(rel: &[u8], listed: &Listed, outcomes: &[Outcome]) -> usize {
    4 * (rel.len() + 1)
        + outcomes
            .iter()
            .enumerate()
            .map(|(i, o)| one_bound(rel, listed, i, o))
            .sum::<usize>()
}

/// Appends the rows of one listed directory's entries (`outcomes`, in listing order) to `cols`,
/// counting them in `step`; returns its subdirectories (path, metadata).
fn write_rows(
    cols: &mut Cols,
    rel: &[u8],
    listed: &Listed,
    outcomes: Vec<Outcome>,
    step: &mut Step,
) -> Vec<(Vec<u8>, Meta)> {
    let depth = if rel.is_empty() {
        1
    } else {
        index(rel.iter().filter(|&&b| b == b'/').count() + 2)
    };
    let mut parent: Option<i32> = None;
    let mut subdirs = Vec::new();
    for (i, o) in outcomes.into_iter().enumerate() {
        let name = listed.name(i);
        let (kind, meta, target, errno) = match o {
            Outcome::Gone => continue,
            Outcome::Pruned => {
                step.pruned += 1;
                continue;
            }
            Outcome::Entry(m, _) if m.kind() == Kind::Directory => {
                subdirs.push((join(rel, name), m));
                continue;
            }
            Outcome::Entry(m, t) => (m.kind(), Some(m), t, 0),
            Outcome::Failed(k, e) => (k, None, None, e),
        };
        let p = *parent.get_or_insert_with(|| cols.open_parent(rel));
        cols.push_names(rel, name, p, depth);
        let row = Written {
            kind,
            meta: meta.as_ref(),
            target: target.as_deref(),
            errno,
        };
        push_row(cols, &row, rel, name, step);
    }
    subdirs
}

/// The columns after the names of one row.
struct Written<'a> {
    kind: Kind,
    meta: Option<&'a Meta>,
    target: Option<&'a [u8]>,
    errno: Errno,
}

/// The columns after the names of one row, and its counts.
fn push_row(cols: &mut Cols, row: &Written<'_>, rel: &[u8], name: &[u8], step: &mut Step) {
    cols.kind.push(row.kind.index());
    match row.meta {
        Some(m) => cols.push_meta(m),
        None => cols.push_no_meta(),
    }
    cols.push_target(row.target);
    step.entries += 1;
    if row.errno != 0 {
        let text = describe(row.errno);
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
    match row.kind {
        Kind::File => {
            step.files += 1;
            step.bytes += row.meta.map_or(0, |m| m.size.max(0).unsigned_abs());
        }
        Kind::Directory => step.directories += 1,
        Kind::Symlink => step.symlinks += 1,
        Kind::Other => step.other += 1,
    }
}

/// How deep one call descends below its directory (each level holds a descriptor open).
const MAX_DESCENT: usize = 16;

/// Walks `subdirs` (children of the directory open at `parent_fd`) depth first while `budget`
/// lasts: each is opened relative to its parent (never through a symlink), listed whole (one
/// bigger than the budget left, or than the room left in the sink, is not entered), stat-ed, and
/// written with its own row, as the Python walk would (`operators.walk`: gone or no longer a
/// directory: no row; failed to open or list: its row with the error).  Directories not entered go
/// to `left`.
fn descend_into(
    sink: &Mutex<Cols>,
    parent_fd: BorrowedFd<'_>,
    subdirs: Vec<(Vec<u8>, Meta)>,
    level: usize,
    budget: &mut i64,
    step: &mut Step,
    left: &mut Vec<(Vec<u8>, Meta)>,
) {
    for (path, meta) in subdirs {
        if *budget <= 0
            || level > MAX_DESCENT
            || lock(sink).reserve(row_bound(path.len(), 0) * 2).is_err()
        {
            left.push((path, meta));
            continue;
        }
        let (rel, base) = crate::names::split(&path);
        let own_row = |errno: Errno, step: &mut Step| {
            let mut cols = lock(sink);
            let p = cols.open_parent(rel);
            let depth = index(path.iter().filter(|&&b| b == b'/').count() + 1);
            cols.push_names(rel, base, p, depth);
            let row = Written {
                kind: Kind::Directory,
                meta: Some(&meta),
                target: None,
                errno,
            };
            push_row(&mut cols, &row, rel, base, step);
        };
        let Ok(cname) = cstring(base) else {
            continue;
        };
        let child = match open_child(parent_fd, &cname) {
            Ok(fd) => fd,
            Err(libc::ENOENT | libc::ENOTDIR | libc::ELOOP) => continue, // vanished: no row
            Err(e) => {
                own_row(e, step);
                *budget -= 1;
                continue;
            }
        };
        let mut listed = Listed::default();
        let room = usize::try_from(*budget).unwrap_or(0);
        let mut too_big = false;
        let listing = sys::read_dir_while(child.as_fd(), |n: &CStr, t| {
            if listed.len() >= room {
                too_big = true;
                return false;
            }
            listed.push(n.to_bytes(), t);
            true
        });
        if too_big {
            left.push((path, meta)); // the Python walk lists it in steps
            continue;
        }
        let errno = listing.err().unwrap_or(0);
        let outcomes: Vec<Outcome> = (0..listed.len())
            .map(|i| stat_one(child.as_fd(), listed.name(i), listed.types[i]))
            .collect();
        let before = step.entries;
        let found = {
            let mut cols = lock(sink);
            if cols
                .reserve(bound(&path, &listed, &outcomes) + row_bound(path.len(), 0))
                .is_err()
            {
                drop(cols);
                left.push((path, meta));
                continue;
            }
            write_rows(&mut cols, &path, &listed, outcomes, step)
        };
        if errno != libc::ENOENT {
            own_row(errno, step);
        }
        *budget -= i64::try_from(step.entries - before).unwrap_or(i64::MAX);
        descend_into(sink, child.as_fd(), found, level + 1, budget, step, left);
    }
}

/// `openat(dir, name, O_DIRECTORY|O_NOFOLLOW)`: a child directory, never through a symlink.
pub fn open_child(dir: BorrowedFd<'_>, name: &CStr) -> Result<std::os::fd::OwnedFd, Errno> {
    sys::open_at(Some(dir), name, sys::OPEN_DIR | libc::O_NOFOLLOW, 0)
}
