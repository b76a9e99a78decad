//! rm's tree mode keeps its memory flat in directory size: a directory is listed and cleared in
//! bounded batches, never held whole with a result per entry.  Its own test binary: the allocator
//! that counts bytes is process-wide.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};

use pfs_core::remove::{clear_dir, ClearOptions, Devices, Mode};

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only sizes are counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` was allocated above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn clearing_a_big_directory_holds_a_batch_not_the_listing() {
    let t = common::TempDir::new();
    let n = 20_000;
    for i in 0..n {
        std::fs::File::create(t.path().join(format!("file-with-a-longish-name-{i:08}"))).unwrap();
    }
    std::fs::create_dir(t.path().join("subdir")).unwrap();
    let dir = std::fs::File::open(t.path()).unwrap();
    let o = ClearOptions {
        mode: Mode::Remove,
        devices: Devices::Skip,
        fanout: 2,
        sample_limit: 10,
    };
    let before = NOW.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let done = clear_dir(dir.as_fd(), None, o);
    let peak = PEAK.load(Ordering::Relaxed) - before;
    assert_eq!(
        (done.entries, done.removed, done.subdirs.len()),
        (n + 1, n as u64, 1)
    );
    assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 1);
    // a batch of 4096 names and results is well under 1.5 MB; the whole listing (20,000 names and
    // results) is several times that
    eprintln!("peak {peak}");
    assert!(
        peak < 3 << 19,
        "peak {peak} bytes while clearing {n} entries"
    );
}
