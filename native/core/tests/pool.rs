//! The core's thread pool: borrowed work, panics, failed spawns and forks never hang or outlive
//! the caller's frame.  Also run under miri (`make test`), which checks the borrowed-work protocol.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pfs_core::pool::{self, Pool};

/// Miri interprets every instruction: fewer rounds and chunks there, the same paths.
const SMALL: bool = cfg!(miri);

fn counted(pool: &Arc<Pool>, n: usize, width: usize) -> usize {
    let done = AtomicUsize::new(0);
    let seen: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
    pool.for_each(n, width, &|i| {
        seen[i].fetch_add(1, Ordering::Relaxed);
        done.fetch_add(1, Ordering::Relaxed);
    });
    assert!(
        seen.iter().all(|s| s.load(Ordering::Relaxed) == 1),
        "every chunk runs exactly once"
    );
    done.into_inner()
}

#[test]
fn every_chunk_runs_once_on_borrowed_state() {
    let pool = Pool::new(|body| std::thread::Builder::new().spawn(body).map(drop));
    for width in [1, 2, 4] {
        assert_eq!(counted(&pool, 37, width), 37);
    }
    assert!(pool.threads() >= 1);
}

#[test]
fn a_panic_in_a_helper_reaches_the_caller_and_the_pool_still_works() {
    let pool = Pool::new(|body| std::thread::Builder::new().spawn(body).map(drop));
    let caller = std::thread::current().id();
    for round in 0..if SMALL { 1 } else { 3 } {
        let got = catch_unwind(AssertUnwindSafe(|| {
            pool.for_each(if SMALL { 8 } else { 32 }, 4, &|i| {
                std::thread::sleep(std::time::Duration::from_millis(2));
                if std::thread::current().id() != caller {
                    panic!("chunk {i} of round {round}, on a helper");
                }
            })
        }));
        assert!(
            got.is_err(),
            "the panic is re-raised on the caller's thread"
        );
    }
    assert_eq!(counted(&pool, 20, 4), 20);
}

#[test]
fn a_panic_in_the_callers_chunk_waits_for_the_helpers_first() {
    // the helpers keep reading `state` (borrowed from this frame) after the caller's chunk panics:
    // for_each may only unwind once they are out (miri flags a use after free otherwise)
    let pool = Pool::new(|body| std::thread::Builder::new().spawn(body).map(drop));
    let state = vec![1u64; 64];
    let running = AtomicUsize::new(0);
    let caller = std::thread::current().id();
    let got = catch_unwind(AssertUnwindSafe(|| {
        pool.for_each(if SMALL { 12 } else { 64 }, 4, &|i| {
            if std::thread::current().id() == caller {
                // panic once a helper is inside (its chunks take 300 ms), or after 5 s without one
                let start = std::time::Instant::now();
                while running.load(Ordering::SeqCst) == 0 && start.elapsed().as_secs() < 5 {
                    std::thread::yield_now();
                }
                panic!("the caller's chunk");
            }
            running.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(300));
            assert_eq!(state[i], 1);
            running.fetch_sub(1, Ordering::SeqCst);
        })
    }));
    assert!(got.is_err());
    assert_eq!(
        running.load(Ordering::SeqCst),
        0,
        "no helper still inside the caller's work"
    );
    drop(state);
    assert_eq!(counted(&pool, 8, 4), 8);
}

#[test]
fn no_thread_at_all_runs_every_chunk_on_the_caller() {
    let pool = Pool::new(|_| Err(std::io::Error::from_raw_os_error(libc::EAGAIN)));
    assert_eq!(counted(&pool, 50, 8), 50);
    assert_eq!(pool.threads(), 0);
}

#[test]
#[cfg_attr(miri, ignore)] // real-time waits; no borrowed work beyond the tests above
fn helpers_stuck_behind_other_work_are_not_waited_for() {
    // one thread only, busy with a long batch of another caller: a second caller's helper job waits
    // in the queue; the second caller claims all its chunks itself and returns without it
    static SPAWNED: AtomicUsize = AtomicUsize::new(0);
    let pool = Pool::new(|body| {
        if SPAWNED.fetch_add(1, Ordering::SeqCst) >= 1 {
            return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
        }
        std::thread::Builder::new().spawn(body).map(drop)
    });
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Mutex::new(rx);
    std::thread::scope(|s| {
        let p = pool.clone();
        let long = s.spawn(move || {
            p.for_each(2, 2, &|i| {
                if i == 0 || i == 1 {
                    let _ = rx
                        .lock()
                        .unwrap()
                        .recv_timeout(std::time::Duration::from_secs(20));
                }
            })
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        let start = std::time::Instant::now();
        assert_eq!(counted(&pool, 10, 2), 10);
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "did not wait for the busy thread"
        );
        tx.send(()).unwrap();
        tx.send(()).unwrap();
        long.join().unwrap();
    });
}

#[test]
#[cfg_attr(miri, ignore)] // fork
fn a_child_forked_while_the_pool_is_busy_has_a_working_pool() {
    // threads call the global pool in a loop while the main thread forks: every child must get
    // through a fanned-out batch of its own (the parent's pool locks may be held at the fork)
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy: Vec<_> = (0..3)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let n = AtomicUsize::new(0);
                    pool::for_each(64, 8, &|_| {
                        n.fetch_add(1, Ordering::Relaxed);
                    });
                    assert_eq!(n.into_inner(), 64);
                }
            })
        })
        .collect();
    for _ in 0..40 {
        let status = common::in_child(20, || {
            let n = AtomicUsize::new(0);
            pool::for_each(32, 4, &|_| {
                n.fetch_add(1, Ordering::Relaxed);
            });
            i32::from(n.into_inner() != 32)
        });
        assert_eq!(status, Some(0), "the child's batch finished");
    }
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        t.join().unwrap();
    }
}

#[test]
#[cfg_attr(miri, ignore)] // timing: threads must be idle
fn a_batch_wakes_only_as_many_idle_threads_as_it_queued_jobs() {
    // a network scan's process keeps up to 256 idle threads: waking all of them for each small batch
    // (notify_all) was most of its system time
    let pool = Pool::new(|body| std::thread::Builder::new().spawn(body).map(drop));
    let nap = || std::thread::sleep(std::time::Duration::from_millis(20));
    pool.for_each(32, 32, &|_| nap());
    assert!(pool.threads() >= 16);
    std::thread::sleep(std::time::Duration::from_millis(300)); // every helper back to waiting
    let before = pool.wakeups();
    pool.for_each(3, 3, &|_| nap()); // two helper jobs
    std::thread::sleep(std::time::Duration::from_millis(100));
    let woken = pool.wakeups() - before;
    assert!(
        woken <= 4,
        "{woken} idle threads woken for 2 jobs ({} threads)",
        pool.threads()
    );
}
