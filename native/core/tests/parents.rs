//! A core call's fan-out slices share its open directories (`Root`'s cache, read by `Parents`).

mod common;

use std::fs;
use std::os::fd::AsRawFd;
use std::thread;

use common::TempDir;
use pfs_core::errors::Cause;
use pfs_core::parents::{Parents, Root};

fn fd_of(parents: &mut Parents<'_>, rel: &[u8]) -> i32 {
    parents.dir(rel).unwrap().as_raw_fd()
}

#[test]
fn slices_of_one_call_share_each_open_directory_and_its_ancestors() {
    let t = TempDir::new();
    fs::create_dir_all(t.path().join("a/b/c")).unwrap();
    fs::create_dir_all(t.path().join("a/b/d")).unwrap();
    let root = Root::open(&t.bytes(), None).unwrap();
    let (mut one, mut two) = (Parents::new(&root), Parents::new(&root));
    let c = fd_of(&mut one, b"a/b/c");
    assert_eq!(
        fd_of(&mut two, b"a/b/c"),
        c,
        "a second slice reuses the first's descriptor"
    );
    let d = fd_of(&mut two, b"a/b/d");
    assert_ne!(d, c);
    assert_eq!(fd_of(&mut one, b"a/b/d"), d);
    assert_eq!(
        fd_of(&mut one, b"a/b"),
        fd_of(&mut two, b"a/b"),
        "ancestors are shared too"
    );
    // concurrent slices opening one directory get one descriptor
    let fds: Vec<i32> = thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|_| s.spawn(|| fd_of(&mut Parents::new(&root), b"a")))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(fds.iter().all(|&fd| fd == fds[0]), "{fds:?}");
    // another call opens its own
    let other = Root::open(&t.bytes(), None).unwrap();
    assert_ne!(fd_of(&mut Parents::new(&other), b"a/b/c"), c);
}

#[test]
fn a_directory_that_failed_to_open_is_tried_again() {
    let t = TempDir::new();
    let root = Root::open(&t.bytes(), None).unwrap();
    let mut parents = Parents::new(&root);
    let e = parents.dir(b"x/y").err().unwrap();
    assert_eq!(e.cause, Cause::Os(libc::ENOENT));
    assert_eq!(e.path, b"x");
    fs::create_dir_all(t.path().join("x/y")).unwrap(); // made meanwhile (cp's missing parents)
    assert!(Parents::new(&root).dir(b"x/y").is_ok());
}

#[test]
fn past_the_shared_limit_directories_still_open() {
    let t = TempDir::new();
    for i in 0..300 {
        fs::create_dir_all(t.path().join(format!("p/{i}"))).unwrap();
    }
    let root = Root::open(&t.bytes(), None).unwrap();
    let mut parents = Parents::new(&root);
    for i in 0..300 {
        assert!(parents.dir(format!("p/{i}").as_bytes()).is_ok(), "{i}");
    }
    assert!(
        parents.dir(b"p/../p").is_err(),
        "components are still checked"
    );
}

#[test]
fn a_chain_deeper_than_the_stack_allows_a_recursion_opens_level_by_level() {
    // 5,000 levels (paths of 10,000 bytes, past PATH_MAX), made relative to the level above
    let t = TempDir::new();
    let levels = 5_000;
    let mut dir = fs::File::open(t.path()).unwrap();
    for _ in 0..levels {
        let name = std::ffi::CString::new("d").unwrap();
        assert_eq!(
            unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o755) },
            0
        );
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            )
        };
        assert!(fd >= 0);
        dir = unsafe { <fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    }
    let root = Root::open(&t.bytes(), None).unwrap();
    let deepest = vec![b"d".as_slice(); levels].join(&b'/');
    // on a thread with a small stack: the walk down is a loop, whatever the depth
    thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(move || {
            let mut parents = Parents::new(&root);
            for level in 1..=levels {
                parents.dir(&deepest[..2 * level - 1]).unwrap(); // each level below the last one
            }
            let mut fresh = Parents::new(&root);
            fresh.dir(&deepest).unwrap(); // and the deepest at once, from the shared ones down
        })
        .unwrap()
        .join()
        .unwrap();
}
