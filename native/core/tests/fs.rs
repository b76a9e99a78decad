//! The jobs on real temp trees: FIFOs, far-future times, names that are not UTF-8 or are long,
//! links swapped mid-walk, `..` in manifest paths, the pinned root, EMFILE, short copies, EINTR,
//! `O_NONBLOCK` kept or cleared on regular files.

mod common;

use std::ffi::CString;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Mutex;

use common::{in_child, lstat, mkfifo, set_mtime, TempDir};
use pfs_core::checksum::{checksum_files, checksum_files_at, Algorithm};
use pfs_core::copy::{
    copy_fd, cp_files, cp_files_at, Copied, CopyJob, CopyOptions, Existing, OnExist, Owners, Write,
};
use pfs_core::errors::Cause;
use pfs_core::parents::{Parents, Root};
use pfs_core::remove::{self, Check, Done, Expect, Kind, Mode, RelOptions};
use pfs_core::scan::{Cols, DirScan, Hooks, StepError, StepOptions};
use pfs_core::sys::{self, Follow, Nonblock};
use pfs_core::xattr::{Plan, Refused};

/// 2300-01-01T00:00:00Z plus some nanoseconds: past i64 nanoseconds (2262).
const Y2300: i64 = 10_413_792_000;

fn opts() -> CopyOptions {
    CopyOptions {
        follow: Follow::Never,
        owners: Owners::MINE,
        write: Write::Temp,
        existing: Existing::Check,
        on_exist: OnExist::Overwrite,
        umask: 0o022,
        xattrs: Some(Plan { privileged: false }),
    }
}

/// What became of each file (asserting nothing of its metadata was refused).
fn outcomes(done: Vec<(Copied, Vec<Refused>)>) -> Vec<Copied> {
    done.into_iter()
        .map(|(c, refused)| {
            assert!(refused.is_empty(), "{refused:?}");
            c
        })
        .collect()
}

fn job(rel: &[u8]) -> CopyJob {
    CopyJob {
        rel: rel.to_vec(),
        out: rel.to_vec(),
        tmp: b".tmp-copy".to_vec(),
        ..CopyJob::default()
    }
}

fn rel_opts() -> RelOptions {
    RelOptions {
        check: Check::Recheck,
        mode: Mode::Remove,
        fanout: 1,
        root_id: None,
    }
}

fn no_hooks() -> Hooks<'static, ()> {
    Hooks {
        take_ops: None,
        keep: None,
    }
}

fn step_opts() -> StepOptions {
    StepOptions {
        max_entries: 1000,
        chunk: 16,
        width: 2,
        descend: 0,
    }
}

/// Every row of a directory scanned in one step (`descend` 0), as (path text, mtime µs).
fn scan(dir: &Path) -> Cols {
    let root = fs::File::open(dir).unwrap();
    let s = DirScan::new(root.as_fd(), b"").unwrap();
    let sink = Mutex::new(Cols::default());
    let step = s.step(&sink, step_opts(), &no_hooks()).unwrap();
    assert!(step.done);
    sink.into_inner().unwrap()
}

#[test]
fn a_fifo_is_refused_by_checksums_and_cp_without_blocking() {
    let t = TempDir::new();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&dst).unwrap();
    mkfifo(&src.join("fifo"));
    let (s, d) = (
        src.as_os_str().as_bytes().to_vec(),
        dst.as_os_str().as_bytes().to_vec(),
    );
    // in a child: on a blocking open the child hangs, is killed, and the test fails instead of hanging
    let status = in_child(20, move || {
        let sums = checksum_files(&s, &[b"fifo".to_vec()], Algorithm::Xxh3, 1);
        assert_eq!(sums, vec![Err(Cause::NotRegular)]);
        let fifo_root = [s.clone(), b"/fifo".to_vec()].concat();
        assert_eq!(
            checksum_files(&fifo_root, &[Vec::new()], Algorithm::Md5, 1),
            vec![Err(Cause::NotRegular)]
        );
        let got = outcomes(cp_files(&s, &d, &[job(b"fifo")], &opts(), 1));
        assert_eq!(got, vec![Copied::Failed(Cause::NotRegular)]);
        0
    });
    assert_eq!(status, Some(0), "refused at once, in the child");
    assert!(
        fs::read_dir(&dst).unwrap().next().is_none(),
        "no temp file left behind"
    );
}

#[test]
fn far_future_times_are_exact_in_the_scan_rm_and_cp() {
    let t = TempDir::new();
    let f = t.path().join("future");
    fs::write(&f, b"x").unwrap();
    set_mtime(&f, Y2300, 123_456_789);
    let cols = scan(t.path());
    assert_eq!(
        cols.mtime.values,
        vec![Y2300 * 1_000_000 + 123_456],
        "microseconds, not wrapped"
    );
    // cp keeps it (futimens on the open file)
    let out = t.path().join("out");
    fs::create_dir(&out).unwrap();
    let got = outcomes(cp_files(
        &t.bytes(),
        out.as_os_str().as_bytes(),
        &[job(b"future")],
        &opts(),
        1,
    ));
    assert_eq!(got, vec![Copied::Copied]);
    let st = lstat(&out.join("future"));
    assert_eq!((st.st_mtime, st.st_mtime_nsec), (Y2300, 123_456_789));
    // rm compares the manifest's time (i128 nanoseconds) to the microsecond
    let ns = i128::from(Y2300) * 1_000_000_000 + 123_456_789;
    let row = |mtime_ns| {
        vec![(
            b"future".to_vec(),
            Expect {
                kind: Some(Kind::File),
                size: Some(1),
                mtime_ns: Some(mtime_ns),
                ..Expect::default()
            },
        )]
    };
    let stale = remove::unlink_rels(&t.bytes(), &row(ns + 1000), rel_opts());
    assert!(
        matches!(&stale[0], Done::Problem(p) if p.message.as_deref() == Some("mtime differs from the manifest"))
    );
    assert_eq!(
        remove::unlink_rels(&t.bytes(), &row(ns), rel_opts()),
        vec![Done::Removed(1)]
    );
    assert!(!f.exists());
}

#[test]
fn times_before_1677_are_exact_where_the_filesystem_keeps_them() {
    let Ok(t) = std::panic::catch_unwind(|| {
        let p = Path::new("/dev/shm").join(format!("pfs-core-old-{}", std::process::id()));
        fs::create_dir_all(&p).unwrap();
        p
    }) else {
        return; // no tmpfs here (ext4 stores nothing before 1901)
    };
    let f = t.join("old");
    fs::write(&f, b"x").unwrap();
    let sec = -10_000_000_000; // 1653
    set_mtime(&f, sec, 5_000);
    let kept = lstat(&f).st_mtime == sec;
    let cols = scan(&t);
    fs::remove_dir_all(&t).unwrap();
    if kept {
        assert_eq!(
            cols.mtime.values,
            vec![sec * 1_000_000 + 5],
            "truncated toward zero, not wrapped"
        );
    }
}

#[test]
fn names_that_are_not_utf8_or_are_255_bytes_long_are_kept_exactly() {
    let t = TempDir::new();
    let mut bad = b"caf\xe9-".to_vec();
    bad.extend(std::iter::repeat_n(b'n', 255 - bad.len()));
    let path = t.path().join(std::ffi::OsStr::from_bytes(&bad));
    fs::write(&path, b"data").unwrap();
    let cols = scan(t.path());
    assert_eq!(
        cols.path.get(0),
        [b"caf\\xe9-".as_slice(), &bad[5..]].concat().as_slice()
    );
    assert_eq!(cols.path_raw.get(0), bad.as_slice());
    let sums = checksum_files(&t.bytes(), &[bad.clone()], Algorithm::Sha256, 1);
    assert!(sums[0].as_ref().unwrap().starts_with("sha256:"));
    let gone = remove::unlink_rels(&t.bytes(), &[(bad, Expect::default())], rel_opts());
    assert_eq!(gone, vec![Done::Removed(4)]);
}

#[test]
fn a_directory_swapped_for_a_symlink_mid_walk_is_not_followed() {
    let t = TempDir::new();
    let (root, outside) = (t.path().join("root"), t.path().join("outside"));
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::create_dir_all(root.join("c")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("f"), b"secret").unwrap();
    fs::write(root.join("a/b/f"), b"inside").unwrap();
    let r = Root::open(root.as_os_str().as_bytes(), None).unwrap();
    let mut parents = Parents::new(&r);
    parents.dir(b"c").unwrap();
    // swapped after the walk began: "a" becomes a link to outside
    fs::rename(root.join("a"), t.path().join("a.moved")).unwrap();
    symlink(&outside, root.join("a")).unwrap();
    let e = parents.dir(b"a").err().unwrap();
    assert_eq!(e.path, b"a");
    assert!(
        matches!(e.cause, Cause::Os(libc::ELOOP | libc::ENOTDIR)),
        "{e}"
    );
    let rows = vec![(b"a/f".to_vec(), Expect::default())];
    let done = remove::unlink_rels(root.as_os_str().as_bytes(), &rows, rel_opts());
    assert!(
        matches!(&done[0], Done::Problem(p) if p.message.as_deref().unwrap().contains("not followed"))
    );
    let sums = checksum_files(
        root.as_os_str().as_bytes(),
        &[b"a/f".to_vec()],
        Algorithm::Xxh3,
        1,
    );
    assert!(
        matches!(sums[0], Err(Cause::Os(libc::ELOOP | libc::ENOTDIR))),
        "{sums:?}"
    );
    assert!(outside.join("f").exists());
}

#[test]
fn dot_dot_and_empty_components_never_leave_the_root() {
    let t = TempDir::new();
    let root = t.path().join("root");
    fs::create_dir_all(root.join("sub")).unwrap();
    fs::write(t.path().join("victim"), b"x").unwrap();
    fs::create_dir(t.path().join("victimdir")).unwrap();
    let r = root.as_os_str().as_bytes();
    let bad: Vec<Vec<u8>> = vec![
        b"../victim".to_vec(),
        b"sub/../../victim".to_vec(),
        b"./../victim".to_vec(),
        b"sub//x".to_vec(),
        b"..".to_vec(),
    ];
    let rows: Vec<_> = bad.iter().map(|b| (b.clone(), Expect::default())).collect();
    for d in remove::unlink_rels(r, &rows, rel_opts()) {
        assert!(
            matches!(d, Done::Problem(ref p) if p.cause == Cause::UnsafeName),
            "{d:?}"
        );
    }
    let dirs = vec![b"../victimdir".to_vec(), b"sub/..".to_vec()];
    for d in remove::rmdir_rels(r, &dirs, rel_opts()) {
        assert!(
            matches!(d, Done::Problem(ref p) if p.cause == Cause::UnsafeName),
            "{d:?}"
        );
    }
    let out = t.path().join("out");
    fs::create_dir(&out).unwrap();
    let mut j = job(b"../victim");
    j.out = b"x".to_vec();
    assert_eq!(
        outcomes(cp_files(r, out.as_os_str().as_bytes(), &[j], &opts(), 1)),
        vec![Copied::Failed(Cause::UnsafeName)]
    );
    assert!(t.path().join("victim").exists() && t.path().join("victimdir").exists());
    assert!(root.join("sub").exists());
}

#[test]
fn the_root_is_pinned_by_device_and_inode() {
    let t = TempDir::new();
    let root = t.path().join("root");
    fs::create_dir(&root).unwrap();
    let rb = root.as_os_str().as_bytes();
    let r = Root::open(rb, None).unwrap();
    assert!(Root::open(rb, Some(r.id())).is_ok());
    // replaced by another directory of the same name
    fs::rename(&root, t.path().join("old")).unwrap();
    fs::create_dir(&root).unwrap();
    assert_eq!(
        Root::open(rb, Some(r.id())).err().unwrap().cause,
        Cause::Os(libc::ESTALE)
    );
    assert_eq!(
        r.parent().err().unwrap().cause,
        Cause::Os(libc::ESTALE),
        "the name is no longer the pinned root"
    );
    // the root itself goes relative to its parent
    let done = remove::rmdir_rels(rb, &[Vec::new()], rel_opts());
    assert_eq!(done, vec![Done::Removed(0)]);
    assert!(!root.exists() && t.path().join("old").exists());
}

#[test]
fn out_of_descriptors_is_an_error_per_file_not_a_crash() {
    let t = TempDir::new();
    fs::create_dir_all(t.path().join("a/b/c")).unwrap();
    for i in 0..8 {
        fs::write(t.path().join(format!("a/b/c/f{i}")), b"x").unwrap();
    }
    let root = t.bytes();
    let status = in_child(60, move || {
        let rels: Vec<Vec<u8>> = (0..8).map(|i| format!("a/b/c/f{i}").into_bytes()).collect();
        // exactly three descriptors free: the root, a and b fit, c does not
        let top = fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
            .max()
            .unwrap();
        let lim = libc::rlimit {
            rlim_cur: top + 1 + 3,
            rlim_max: top + 64,
        };
        // SAFETY: setting this child's own limit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
        let mut fill = Vec::new();
        while let Ok(f) = fs::File::open("/dev/null") {
            fill.push(f); // every free number below the limit, holes included
        }
        fill.truncate(fill.len() - 3);
        let sums = checksum_files(&root, &rels, Algorithm::Xxh3, 1);
        let all_emfile = sums.iter().all(|s| *s == Err(Cause::Os(libc::EMFILE)));
        let gone = remove::unlink_rels(
            &root,
            &rels
                .iter()
                .map(|r| (r.clone(), Expect::default()))
                .collect::<Vec<_>>(),
            rel_opts(),
        );
        let all_failed = gone
            .iter()
            .all(|d| matches!(d, Done::Problem(p) if p.cause == Cause::Os(libc::EMFILE)));
        if !(all_emfile && all_failed) {
            eprintln!("{sums:?} {gone:?}");
        }
        i32::from(!(all_emfile && all_failed))
    });
    assert_eq!(status, Some(0));
    assert_eq!(
        fs::read_dir(t.path().join("a/b/c")).unwrap().count(),
        8,
        "nothing removed without its parent"
    );
}

#[test]
fn a_copy_shorter_than_the_size_is_an_error_not_copied() {
    let t = TempDir::new();
    fs::write(t.path().join("src"), vec![7u8; 10_000]).unwrap();
    let src = fs::File::open(t.path().join("src")).unwrap();
    let dst = fs::File::create(t.path().join("dst")).unwrap();
    let mut st = sys::fstat(src.as_fd()).unwrap();
    st.st_size = 20_000; // what fstat said before the file shrank
    assert_eq!(copy_fd(src.as_fd(), dst.as_fd(), &st), Err(Cause::Shrank));
    st.st_size = 10_000;
    assert_eq!(copy_fd(src.as_fd(), dst.as_fd(), &st), Ok(()));
    assert_eq!(fs::read(t.path().join("dst")).unwrap(), vec![7u8; 10_000]);
}

extern "C" fn on_signal(_: libc::c_int) {}

#[test]
fn a_system_call_interrupted_by_a_signal_is_retried() {
    let t = TempDir::new();
    let fifo = t.path().join("fifo");
    mkfifo(&fifo);
    let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a handler that does nothing, installed without SA_RESTART so calls fail with EINTR.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = 0;
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let c = &c;
        let reader = s.spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() }).unwrap();
            // blocks until a writer opens the FIFO; the signals below interrupt it first
            sys::open_at(None, c, libc::O_RDONLY | libc::O_CLOEXEC, 0)
        });
        let thread = rx.recv().unwrap();
        for _ in 0..5 {
            std::thread::sleep(std::time::Duration::from_millis(30));
            // SAFETY: the reader thread is alive until joined below.
            unsafe { libc::pthread_kill(thread, libc::SIGUSR1) };
        }
        let _writer = fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        assert!(
            reader.join().unwrap().is_ok(),
            "EINTR retried, not returned"
        );
    });
}

#[test]
fn a_failing_hook_or_a_full_sink_keeps_the_listed_entries() {
    let t = TempDir::new();
    for i in 0..40 {
        fs::write(t.path().join(format!("f{i:02}")), b"x").unwrap();
    }
    let root = fs::File::open(t.path()).unwrap();
    let s = DirScan::new(root.as_fd(), b"").unwrap();
    // take_ops fails (a cancelled job's token bucket): nothing written, nothing lost
    let fail = |_: usize| -> Result<(), &'static str> { Err("cancelled") };
    let hooks = Hooks {
        take_ops: Some(&fail as &(dyn Fn(usize) -> Result<(), &'static str> + Sync)),
        keep: None,
    };
    let sink = Mutex::new(Cols::default());
    assert!(matches!(
        s.step(&sink, step_opts(), &hooks),
        Err(StepError::Hook("cancelled"))
    ));
    // a sink too small for one more row: Full, and the rows come with the next step
    let tiny = Mutex::new(Cols::with_limit(100));
    assert!(matches!(
        s.step(&tiny, step_opts(), &no_hooks()),
        Err(StepError::Full)
    ));
    // a sink with room for some: the rows that fit now, the others with the next step
    let small = Mutex::new(Cols::with_limit(10 * 300));
    let first = s.step(&small, step_opts(), &no_hooks()).unwrap();
    assert!(
        first.entries > 0 && first.entries < 40 && !first.done,
        "{first:?}"
    );
    let rest = s.step(&sink, step_opts(), &no_hooks()).unwrap();
    assert_eq!((first.entries + rest.entries, rest.done), (40, true));
    let mut small = small.into_inner().unwrap();
    let small_len = small.len();
    assert_eq!(sink.lock().unwrap().len() + small_len, 40);
    let mut names: Vec<Vec<u8>> = (0..small_len).map(|i| small.name.get(i).to_vec()).collect();
    let _ = small.take();
    names.extend((0..40 - small_len).map(|i| sink.lock().unwrap().name.get(i).to_vec()));
    names.sort();
    assert_eq!(
        names,
        (0..40)
            .map(|i| format!("f{i:02}").into_bytes())
            .collect::<Vec<_>>()
    );
}

fn status_flags(fd: std::os::fd::BorrowedFd<'_>) -> libc::c_int {
    use std::os::fd::AsRawFd;
    // SAFETY: F_GETFL on a live descriptor.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) }
}

#[test]
fn o_nonblock_is_kept_only_on_the_roots_device_of_a_filesystem_that_ignores_it() {
    let t = TempDir::new();
    fs::write(t.path().join("f"), b"data").unwrap();
    let root = Root::open(&t.bytes(), None).unwrap();
    let dev = root.id().dev;
    let name = CString::new("f").unwrap();
    let open = |nb| sys::open_regular(Some(root.fd()), &name, Follow::Never, nb).unwrap();
    let (fd, st) = open(Nonblock::KeepOn(dev));
    assert_eq!(st.st_dev, dev);
    assert_ne!(status_flags(fd.as_fd()) & libc::O_NONBLOCK, 0, "kept");
    let (fd, _) = open(Nonblock::KeepOn(dev ^ 1));
    assert_eq!(
        status_flags(fd.as_fd()) & libc::O_NONBLOCK,
        0,
        "cleared for a file on another device (a mount below the root)"
    );
    let (fd, _) = open(Nonblock::Clear);
    assert_eq!(status_flags(fd.as_fd()) & libc::O_NONBLOCK, 0, "cleared");
    // procfs is not known to ignore O_NONBLOCK: cleared there (as on FUSE, NFS, anything unknown)
    let proc = Root::open(b"/proc", None).unwrap();
    assert_eq!(proc.nonblock(), Nonblock::Clear);
    let fs_type = sys::fs_type(root.fd()).unwrap();
    #[allow(clippy::unnecessary_cast)]
    if [libc::EXT4_SUPER_MAGIC as i64, libc::TMPFS_MAGIC as i64].contains(&fs_type) {
        assert_eq!(root.nonblock(), Nonblock::KeepOn(dev));
    }
}

fn get_attr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let (p, n) = (
        std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap(),
        std::ffi::CString::new(name).unwrap(),
    );
    let mut buf = vec![0u8; 1 << 16];
    sys::getxattr(sys::At::Path(&p), &n, &mut buf)
        .ok()
        .map(|len| buf[..len].to_vec())
}

#[test]
fn cp_copies_user_xattrs_binary_and_64_kib_unless_told_not_to() {
    let t = TempDir::new();
    fs::write(t.path().join("f"), b"data").unwrap();
    let p = std::ffi::CString::new(t.path().join("f").as_os_str().as_bytes()).unwrap();
    let mut big = vec![7u8; 65536];
    let set = |name: &str, v: &[u8]| {
        let n = std::ffi::CString::new(name).unwrap();
        sys::setxattr(sys::At::Path(&p), &n, v)
    };
    if set("user.bin", b"\x00\xff\x01").is_err() {
        eprintln!("no user.* attributes on this file system: skipped");
        return;
    }
    if set("user.big", &big) == Err(libc::ENOSPC) {
        big.truncate(3000); // ext4 without ea_inode: a value fits in one block (tmpfs takes 64 KiB)
        set("user.big", &big).unwrap();
    }
    for (dir, plan) in [
        ("with", Some(Plan { privileged: false })),
        ("without", None),
    ] {
        let out = t.path().join(dir);
        fs::create_dir(&out).unwrap();
        let o = CopyOptions {
            xattrs: plan,
            ..opts()
        };
        let got = outcomes(cp_files(
            &t.bytes(),
            out.as_os_str().as_bytes(),
            &[job(b"f")],
            &o,
            1,
        ));
        assert_eq!(got, vec![Copied::Copied]);
        let (bin, long) = (
            get_attr(&out.join("f"), "user.bin"),
            get_attr(&out.join("f"), "user.big"),
        );
        if plan.is_some() {
            assert_eq!(bin.as_deref(), Some(&b"\x00\xff\x01"[..]));
            assert_eq!(long, Some(big.clone()));
        } else {
            assert_eq!((bin, long), (None, None), "--no-xattrs copies none");
        }
    }
}

#[test]
fn checksums_read_every_byte_of_files_around_the_buffer_sizes() {
    use sha2::{Digest, Sha256};
    let t = TempDir::new();
    let sizes = [0usize, 1, 65_535, 65_536, 65_537, (4 << 20) + 3, 9 << 20];
    let mut rels = Vec::new();
    let mut want = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..n).map(|k| (k * 31 + i) as u8).collect();
        fs::write(t.path().join(format!("f{i}")), &data).unwrap();
        let hex: String = Sha256::digest(&data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        want.push(Ok(format!("sha256:{hex}")));
        rels.push(format!("f{i}").into_bytes());
    }
    // one core thread, so one buffer sees every size in turn (small first, then grown)
    assert_eq!(
        checksum_files(&t.bytes(), &rels, Algorithm::Sha256, 1),
        want
    );
    // the root itself as the file (O_NONBLOCK always cleared there)
    let big = [t.bytes(), b"/f6".to_vec()].concat();
    assert_eq!(
        checksum_files(&big, &[Vec::new()], Algorithm::Sha256, 1),
        vec![want[6].clone()]
    );
}

#[test]
fn rm_cp_and_checksums_refuse_a_root_replaced_since_the_job_started() {
    let t = TempDir::new();
    let root = t.path().join("root");
    fs::create_dir(&root).unwrap();
    let rb = root.as_os_str().as_bytes();
    let id = Root::open(rb, None).unwrap().id();
    // another directory renamed into the root's place, holding the same names
    fs::rename(&root, t.path().join("old")).unwrap();
    fs::create_dir(&root).unwrap();
    fs::write(root.join("f"), b"other tree").unwrap();
    let stale = Cause::Os(libc::ESTALE);
    let o = RelOptions {
        root_id: Some(id),
        ..rel_opts()
    };
    let want = Expect {
        kind: Some(Kind::File),
        ..Expect::default()
    };
    let done = remove::unlink_rels(rb, &[(b"f".to_vec(), want)], o);
    assert!(
        matches!(&done[..], [Done::Problem(p)] if p.cause == stale),
        "{done:?}"
    );
    let done = remove::rmdir_rels(rb, &[Vec::new()], o);
    assert!(
        matches!(&done[..], [Done::Problem(p)] if p.cause == stale),
        "{done:?}"
    );
    assert!(root.join("f").exists(), "nothing removed in the other tree");
    let sums = checksum_files_at(rb, Some(id), &[b"f".to_vec()], Algorithm::Xxh3, 1);
    assert_eq!(sums, vec![Err(stale)]);
    let out = t.path().join("out");
    fs::create_dir(&out).unwrap();
    let got = cp_files_at(
        rb,
        Some(id),
        out.as_os_str().as_bytes(),
        &[job(b"f")],
        &opts(),
        1,
    );
    assert_eq!(outcomes(got), vec![Copied::Failed(stale)]);
    assert!(
        fs::read_dir(&out).unwrap().next().is_none(),
        "nothing copied"
    );
    // the same calls with the live root's identity work
    let live = Some(Root::open(rb, None).unwrap().id());
    assert!(checksum_files_at(rb, live, &[b"f".to_vec()], Algorithm::Xxh3, 1)[0].is_ok());
}

#[test]
fn an_attribute_the_destination_has_and_the_source_lacks_is_removed_from_an_existing_tree() {
    let t = TempDir::new();
    fs::write(t.path().join("f"), b"data").unwrap();
    let out = t.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("f"), b"old").unwrap();
    let p = std::ffi::CString::new(out.join("f").as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new("user.stale").unwrap();
    if sys::setxattr(sys::At::Path(&p), &n, b"x").is_err() {
        return; // no user.* attributes here
    }
    let o = CopyOptions {
        write: Write::InPlace,
        ..opts()
    };
    let got = outcomes(cp_files(
        &t.bytes(),
        out.as_os_str().as_bytes(),
        &[job(b"f")],
        &o,
        1,
    ));
    assert_eq!(got, vec![Copied::Copied]);
    assert_eq!(get_attr(&out.join("f"), "user.stale"), None);
}
