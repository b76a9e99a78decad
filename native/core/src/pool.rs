//! A process-wide pool of I/O threads inside the core: a batch fans its chunks out over `width`
//! threads (the caller's among them), so hundreds of `fstatat` calls can be in flight on a network
//! mount from a handful of Python threads.  Threads start on demand and stay (up to `MAX_THREADS`).
//!
//! Sound by construction, not by the caller's care:
//! - Work borrowed from the caller's frame reaches a helper only through a [`Batch`], which a helper
//!   *enters* (under the batch's lock, refused once the caller has closed it) and *leaves*; the
//!   caller closes the batch and waits for every entered helper to leave before its frame ends, from
//!   a drop guard, so also when the caller's own chunk panics.  Helpers catch panics (the caller
//!   re-raises the first), so a panic never skips the count and never hangs the caller.
//! - A helper that never started (no thread free, a spawn that failed) is simply never entered: the
//!   caller claims every chunk itself, so a batch never waits on a queue with no thread.
//! - Fork-safe: the pool is keyed by pid and looked up without taking any lock the parent may have
//!   held at `fork` (an atomic pointer); a child makes its own pool and never touches the parent's.

use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

pub const MAX_THREADS: usize = 256;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Starts a pool thread running `body`; an error when the OS refuses (EAGAIN under a pids limit).
pub type Spawner = fn(Box<dyn FnOnce() + Send + 'static>) -> std::io::Result<()>;

fn spawn_std(body: Box<dyn FnOnce() + Send + 'static>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("pfs-core".into())
        .spawn(body)
        .map(drop)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Jobs waiting for a thread, and the threads.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
    /// Times an idle thread was woken (tests: a batch wakes as many threads as it queued jobs).
    wakeups: u64,
}

/// A pool of threads; [`global`] is the process's, tests make their own.
pub struct Pool {
    pid: u32,
    spawn: Spawner,
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Pool {
    pub fn new(spawn: Spawner) -> Arc<Pool> {
        Arc::new(Pool {
            pid: std::process::id(),
            spawn,
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
        })
    }

    /// Threads started so far.
    pub fn threads(&self) -> usize {
        lock(&self.queue).threads
    }

    /// Times an idle thread has been woken so far.
    pub fn wakeups(&self) -> u64 {
        lock(&self.queue).wakeups
    }

    /// Queues `jobs`, starting threads (outside the lock) so that each can run at once; returns how
    /// many were queued: none when the pool has no thread at all and none could be started.
    fn submit(self: &Arc<Self>, jobs: Vec<Job>) -> usize {
        let want = {
            let q = lock(&self.queue);
            let busy = q.threads - q.idle;
            (busy + q.jobs.len() + jobs.len())
                .min(MAX_THREADS)
                .saturating_sub(q.threads)
        };
        let mut started = 0;
        for _ in 0..want {
            let me = self.clone();
            if (self.spawn)(Box::new(move || me.work())).is_err() {
                break; // fewer helpers: the caller claims every chunk it is not helped with
            }
            started += 1;
        }
        let mut q = lock(&self.queue);
        q.threads += started;
        q.idle += started;
        if q.threads == 0 {
            return 0;
        }
        let n = jobs.len();
        q.jobs.extend(jobs);
        drop(q);
        // one wake-up per job, not every idle thread: a network scan's process keeps up to 256 of
        // them, and waking all for each directory's batch was most of its helpers' system time
        for _ in 0..n {
            self.ready.notify_one();
        }
        n
    }

    /// A pool thread: runs queued jobs, forever.
    fn work(&self) {
        let mut q = lock(&self.queue);
        loop {
            match q.jobs.pop_front() {
                Some(job) => {
                    q.idle -= 1;
                    drop(q);
                    job(); // a helper job catches its own panics (Batch::help)
                    q = lock(&self.queue);
                    q.idle += 1;
                }
                None => {
                    q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                    q.wakeups += 1;
                }
            }
        }
    }

    /// Runs `work(i)` for every `i` in `0..n` on up to `width` threads (the caller's and this pool's)
    /// and returns when all are done.  Chunks are taken from a shared counter, so a slow chunk does
    /// not hold up the others.  A panic in any chunk is re-raised here once no helper runs `work`.
    pub fn for_each(self: &Arc<Self>, n: usize, width: usize, work: &(dyn Fn(usize) + Sync)) {
        let helpers = width.min(n).saturating_sub(1).min(MAX_THREADS);
        if helpers == 0 {
            (0..n).for_each(work);
            return;
        }
        let batch = Arc::new(Batch {
            next: AtomicUsize::new(0),
            n,
            state: Mutex::new(BatchState::default()),
            left: Condvar::new(),
        });
        let shared = SharedWork::new(&work);
        let jobs: Vec<Job> = (0..helpers)
            .map(|_| {
                let batch = batch.clone();
                Box::new(move || batch.help(shared)) as Job
            })
            .collect();
        let guard = CloseOnDrop(&batch);
        self.submit(jobs);
        let mine = catch_unwind(AssertUnwindSafe(|| batch.claim_all(work)));
        drop(guard); // closes the batch and waits for every helper inside it
        if let Err(panic) = mine {
            resume_unwind(panic);
        }
        let helper_panic = lock(&batch.state).panic.take();
        if let Some(panic) = helper_panic {
            resume_unwind(panic);
        }
    }
}

/// A type-erased reference to the caller's `work`: a thin pointer to a `&dyn Fn` on the caller's
/// stack.  Only [`Batch::help`] dereferences it, between entering and leaving the batch, and the
/// caller does not leave `for_each` (even unwinding) before the batch is closed and left by all.
#[derive(Clone, Copy)]
struct SharedWork(*const ());

// SAFETY: the pointee is `&(dyn Fn(usize) + Sync)`: calling it from any thread is allowed (Sync),
// and the entered/left protocol of `Batch` keeps it alive for every use (see `SharedWork`).
unsafe impl Send for SharedWork {}
// SAFETY: as for Send: the pointee is only ever called, and `dyn Fn + Sync` may be called from
// several threads at once.
unsafe impl Sync for SharedWork {}

impl SharedWork {
    fn new(work: &&(dyn Fn(usize) + Sync)) -> Self {
        SharedWork((work as *const &(dyn Fn(usize) + Sync)).cast())
    }

    /// # Safety
    /// The `&dyn Fn` this was made from must still be alive (the batch is open and entered).
    unsafe fn call(self, i: usize) {
        // SAFETY: by this function's contract the pointee is a live `&(dyn Fn(usize) + Sync)`.
        let work = unsafe { *self.0.cast::<&(dyn Fn(usize) + Sync)>() };
        work(i)
    }
}

#[derive(Default)]
struct BatchState {
    /// The caller has finished claiming: helpers not yet inside must not enter.
    closed: bool,
    /// Helpers inside (running chunks).
    inside: usize,
    /// The first panic of a helper, for the caller to re-raise.
    panic: Option<Box<dyn std::any::Any + Send>>,
}

/// One `for_each` call's chunks and the helpers working on them.
struct Batch {
    next: AtomicUsize,
    n: usize,
    state: Mutex<BatchState>,
    left: Condvar,
}

impl Batch {
    /// Runs `work(i)` for each index this thread claims, until none is left.
    fn claim_all(&self, work: &(dyn Fn(usize) + Sync)) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                break;
            }
            work(i);
        }
    }

    /// A helper job: enters the batch unless it is closed, claims chunks, leaves.
    fn help(&self, work: SharedWork) {
        {
            let mut s = lock(&self.state);
            if s.closed {
                return;
            }
            s.inside += 1;
        }
        let ran = catch_unwind(AssertUnwindSafe(|| {
            self.claim_all(&|i| {
                // SAFETY: this helper entered the open batch above and leaves it only below, and the
                // caller waits (CloseOnDrop) for every entered helper to leave before `work` dies.
                unsafe { work.call(i) }
            })
        }));
        let mut s = lock(&self.state);
        if let Err(panic) = ran {
            self.next.store(self.n, Ordering::Relaxed); // the others stop claiming
            s.panic.get_or_insert(panic);
        }
        s.inside -= 1;
        if s.inside == 0 {
            self.left.notify_all();
        }
    }
}

/// Closes a batch and waits until no helper is inside it: run when `for_each` leaves, however.
struct CloseOnDrop<'a>(&'a Batch);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.next.store(self.0.n, Ordering::Relaxed); // after a panic: the helpers stop claiming
        let mut s = lock(&self.0.state);
        s.closed = true;
        while s.inside > 0 {
            s = self.0.left.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The process's pool: an `Arc<Pool>` leaked into an atomic pointer, replaced (the old one leaked
/// too: its threads do not exist in a child, its locks may be held) when the pid changes.
static GLOBAL: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());

/// This process's pool (made on first use, and again in a forked child).
pub fn global() -> Arc<Pool> {
    let pid = std::process::id();
    loop {
        let cur = GLOBAL.load(Ordering::Acquire);
        if !cur.is_null() {
            // SAFETY: a non-null GLOBAL came from Arc::into_raw below and is never released (a
            // replaced pool is leaked), so it points at a live Pool; reading `pid` takes no lock.
            let pool = unsafe { &*cur };
            if pool.pid == pid {
                // SAFETY: as above; the count is raised for the clone, the leaked reference stays.
                return unsafe {
                    Arc::increment_strong_count(cur);
                    Arc::from_raw(cur)
                };
            }
        }
        let fresh = Arc::into_raw(Pool::new(spawn_std)).cast_mut();
        if GLOBAL
            .compare_exchange(cur, fresh, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // SAFETY: `fresh` was made just above and never shared.
            drop(unsafe { Arc::from_raw(fresh) });
        }
    }
}

/// [`Pool::for_each`] on the process's pool.
pub fn for_each(n: usize, width: usize, work: &(dyn Fn(usize) + Sync)) {
    if width.min(n) <= 1 {
        (0..n).for_each(work);
        return;
    }
    global().for_each(n, width, work)
}

/// Threads the pool has started in this process (for tests and the benchmark).
pub fn threads() -> usize {
    let cur = GLOBAL.load(Ordering::Acquire);
    if cur.is_null() {
        return 0;
    }
    // SAFETY: see `global`: a non-null GLOBAL is a live, leaked Pool.
    let pool = unsafe { &*cur };
    if pool.pid == std::process::id() {
        pool.threads()
    } else {
        0
    }
}
