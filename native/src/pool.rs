//! A process-wide pool of I/O threads inside the core: a batch fans its chunks out over `width`
//! threads (the caller's among them), so hundreds of `fstatat` calls can be in flight on a network
//! mount from a handful of Python threads.  Threads start on demand and stay (up to `MAX_THREADS`);
//! a forked child notices the new pid and starts its own (the parent's threads do not exist there).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

pub const MAX_THREADS: usize = 256;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Pool {
    pid: u32,
    tx: Sender<Job>,
    rx: Arc<Mutex<Receiver<Job>>>,
    threads: usize,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);
/// Jobs sent and not yet finished, over all callers: the pool grows to cover them.
static OUTSTANDING: AtomicUsize = AtomicUsize::new(0);

fn dispatch(jobs: Vec<Job>) {
    let mut guard = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if guard.as_ref().map(|p| p.pid != pid).unwrap_or(true) {
        if let Some(old) = guard.take() {
            std::mem::forget(old); // a forked child: the parent's threads are gone, its locks may be held
        }
        let (tx, rx) = channel::<Job>();
        *guard = Some(Pool {
            pid,
            tx,
            rx: Arc::new(Mutex::new(rx)),
            threads: 0,
        });
        OUTSTANDING.store(0, Ordering::SeqCst);
    }
    let pool = guard.as_mut().expect("pool just made");
    let want = (OUTSTANDING.fetch_add(jobs.len(), Ordering::SeqCst) + jobs.len()).min(MAX_THREADS);
    while pool.threads < want {
        let rx = pool.rx.clone();
        let spawned = std::thread::Builder::new()
            .name("pfs-core".into())
            .spawn(move || loop {
                let job = {
                    let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                    rx.recv()
                };
                match job {
                    Ok(job) => {
                        job();
                        OUTSTANDING.fetch_sub(1, Ordering::SeqCst);
                    }
                    Err(_) => return,
                }
            });
        if spawned.is_err() {
            break; // out of threads: fewer helpers, the caller still runs every chunk itself if need be
        }
        pool.threads += 1;
    }
    for job in jobs {
        let _ = pool.tx.send(job);
    }
}

/// The count of finished helpers, and a wake-up for the caller waiting on them.
struct Latch {
    left: Mutex<usize>,
    done: Condvar,
}

/// Runs `work(i)` for every `i` in `0..n` on up to `width` threads (the caller's and pool helpers)
/// and returns when all are done.  Chunks are taken from a shared counter, so a slow chunk does not
/// hold up the others.  `work` may borrow from the caller: the caller does not return before every
/// helper has finished with it.
pub fn for_each(n: usize, width: usize, work: &(dyn Fn(usize) + Sync)) {
    let helpers = width.min(n).saturating_sub(1).min(MAX_THREADS);
    let next = AtomicUsize::new(0);
    if helpers == 0 {
        for i in 0..n {
            work(i);
        }
        return;
    }
    let latch = Arc::new(Latch {
        left: Mutex::new(helpers),
        done: Condvar::new(),
    });
    // SAFETY: the references handed to the helpers (work, next) outlive them: this function waits on
    // the latch until every helper has counted itself out before its frame is left.
    let work_ptr: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(work) };
    let next_ptr: &'static AtomicUsize = unsafe { std::mem::transmute(&next) };
    let jobs: Vec<Job> = (0..helpers)
        .map(|_| {
            let latch = latch.clone();
            Box::new(move || {
                claim_all(next_ptr, n, work_ptr);
                let mut left = latch.left.lock().unwrap_or_else(|e| e.into_inner());
                *left -= 1;
                if *left == 0 {
                    latch.done.notify_all();
                }
            }) as Job
        })
        .collect();
    dispatch(jobs);
    claim_all(&next, n, work);
    let mut left = latch.left.lock().unwrap_or_else(|e| e.into_inner());
    while *left > 0 {
        left = latch.done.wait(left).unwrap_or_else(|e| e.into_inner());
    }
}

/// Runs `work(i)` for each index below `n` this thread claims from `next`, until none is left.
fn claim_all(next: &AtomicUsize, n: usize, work: &(dyn Fn(usize) + Sync)) {
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        work(i);
    }
}

/// Threads the pool has started in this process (for tests and the benchmark).
pub fn threads() -> usize {
    let guard = POOL.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        Some(p) if p.pid == std::process::id() => p.threads,
        _ => 0,
    }
}
