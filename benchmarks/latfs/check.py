#!/usr/bin/env python3
"""Functional check of a latfs mount (run as root): the os.* calls file tools use.

  check.py /mnt/lat        # makes and removes /mnt/lat/.latfs-check
Prints one line per check and exits non-zero if any failed.
"""

import ctypes
import os
import stat
import subprocess
import sys

top = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "/mnt/lat", ".latfs-check")
fails = []


def check(name, cond):
    print(f"{'ok' if cond else 'FAIL':<4} {name}")
    if not cond:
        fails.append(name)


def raises(exc, fn, *a):
    try:
        fn(*a)
    except exc:
        return True
    return False


def read(path):
    with open(path, "rb") as f:
        return f.read()


def p(*names):
    return os.path.join(top, *names)


subprocess.run(["rm", "-rf", top])
os.mkdir(top)
os.mkdir(p("d"), 0o750)
check("mkdir mode", stat.S_IMODE(os.lstat(p("d")).st_mode) == 0o750)
with open(p("d", "f"), "wb") as f:
    f.write(b"hello world\n" * 1000)
    f.flush()
    os.fsync(f.fileno())
with open(p("d", "f"), "rb") as f:
    check("write/read", f.read() == b"hello world\n" * 1000)
check("scandir", [(e.name, e.is_file()) for e in os.scandir(p("d"))] == [("f", True)])
check("lstat size", os.lstat(p("d", "f")).st_size == 12000)
os.symlink("f", p("d", "s"))
check("symlink/readlink", os.readlink(p("d", "s")) == "f" and os.path.islink(p("d", "s")))
check("follow symlink", read(p("d", "s"))[:5] == b"hello")
os.link(p("d", "f"), p("d", "h"))
a, b = os.lstat(p("d", "f")), os.lstat(p("d", "h"))
check("hard link: same st_ino, nlink 2", a.st_ino == b.st_ino and b.st_nlink == 2)
os.rename(p("d", "h"), p("d", "h2"))
check("rename", os.path.exists(p("d", "h2")) and not os.path.exists(p("d", "h")))
with open(p("d", "g"), "w") as f:
    f.write("g")
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_NOREPLACE, RENAME_EXCHANGE = -100, 1, 2
r = libc.renameat2(AT_FDCWD, p("d", "g").encode(), AT_FDCWD, p("d", "f").encode(), RENAME_NOREPLACE)
check("renameat2 NOREPLACE -> EEXIST", r == -1 and ctypes.get_errno() == 17)
r = libc.renameat2(AT_FDCWD, p("d", "g").encode(), AT_FDCWD, p("d", "f").encode(), RENAME_EXCHANGE)
check("renameat2 EXCHANGE", r == 0 and read(p("d", "f")) == b"g")
os.rename(p("d", "g"), p("d", "f"))  # swap back
os.chmod(p("d", "f"), 0o640)
check("chmod", stat.S_IMODE(os.lstat(p("d", "f")).st_mode) == 0o640)
os.utime(p("d", "f"), ns=(1_000_000_123, 2_000_000_456))
st = os.lstat(p("d", "f"))
check("utimens (ns)", st.st_atime_ns == 1_000_000_123 and st.st_mtime_ns == 2_000_000_456)
os.chown(p("d", "f"), 1000, 1000)
check("chown", os.lstat(p("d", "f")).st_uid == 1000)
os.truncate(p("d", "f"), 5)
check("truncate", os.lstat(p("d", "f")).st_size == 5)
fd = os.open(p("d", "big"), os.O_RDWR | os.O_CREAT, 0o644)
os.posix_fallocate(fd, 0, 1 << 20)
check("fallocate", os.fstat(fd).st_size == 1 << 20)
os.ftruncate(fd, 10)
check("ftruncate", os.fstat(fd).st_size == 10)
os.close(fd)
with open(p("d", "f2"), "wb") as f:
    f.write(b"x" * 100000)
src, dst = os.open(p("d", "f2"), os.O_RDONLY), os.open(p("d", "cfr"), os.O_WRONLY | os.O_CREAT, 0o644)
n = os.copy_file_range(src, dst, 100000)
os.close(src)
os.close(dst)
check("copy_file_range", n == 100000 and read(p("d", "cfr")) == b"x" * 100000)
fd = os.open(p("d", "f2"), os.O_RDONLY)
os.unlink(p("d", "f2"))
check("read after unlink", os.pread(fd, 3, 0) == b"xxx" and not os.path.exists(p("d", "f2")))
os.close(fd)
os.mkfifo(p("d", "fifo"))
check("mknod fifo", stat.S_ISFIFO(os.lstat(p("d", "fifo")).st_mode))
check("statvfs", os.statvfs(top).f_bsize > 0)
check("access", os.access(p("d", "f"), os.R_OK))
check("ENOENT", raises(FileNotFoundError, os.lstat, p("d", "nope")))
check("rmdir non-empty -> ENOTEMPTY", raises(OSError, os.rmdir, p("d")))
os.mkdir(p("locked"))
os.mkdir(p("locked", "x"))
os.chmod(p("locked"), 0)
nocap = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search", "--"]
r = subprocess.run(nocap + ["ls", p("locked")], capture_output=True, text=True)
check("chmod 000 dir, no DAC caps -> Permission denied", r.returncode != 0 and "Permission denied" in r.stderr)
r = subprocess.run(["ls", p("locked")], capture_output=True, text=True)
check("chmod 000 dir, root -> readable", r.returncode == 0 and r.stdout.split() == ["x"])
os.chmod(p("locked"), 0o755)
os.mkdir(p("pub"))
os.chmod(p("pub"), 0o777)
subprocess.run(["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "touch", p("pub", "u")], check=True)
check("file made by uid 1000 is owned by it", os.lstat(p("pub", "u")).st_uid == 1000)
r = subprocess.run(
    ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "touch", p("d", "u")], capture_output=True, text=True
)
check("uid 1000 cannot write in root's 0750 dir", r.returncode != 0)
subprocess.run(["rm", "-rf", top], check=True)
check("rm -rf", not os.path.exists(top))
print(f"{len(fails)} failed")
sys.exit(1 if fails else 0)
