//! File times without overflow: a `stat` time as (seconds, nanoseconds), read in i128, so a time
//! before 1677 or after 2262 (outside i64 nanoseconds) is exact instead of wrapping; the manifest
//! stores microseconds (i64 holds ±292,000 years of them).

/// One of a file's times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Time {
    pub sec: i64,
    pub nsec: i64,
}

impl Time {
    pub fn mtime(st: &libc::stat) -> Time {
        Time {
            sec: st.st_mtime,
            nsec: st.st_mtime_nsec,
        }
    }

    pub fn atime(st: &libc::stat) -> Time {
        Time {
            sec: st.st_atime,
            nsec: st.st_atime_nsec,
        }
    }

    pub fn ctime(st: &libc::stat) -> Time {
        Time {
            sec: st.st_ctime,
            nsec: st.st_ctime_nsec,
        }
    }

    /// Nanoseconds since the epoch (`os.stat_result.st_mtime_ns`).
    pub fn nanos(self) -> i128 {
        i128::from(self.sec) * 1_000_000_000 + i128::from(self.nsec)
    }

    /// Microseconds, truncated toward zero (as pyarrow's divide of the nanoseconds, the manifest's
    /// rounding); None past i64 (beyond ±292,000 years).
    pub fn micros(self) -> Option<i64> {
        i64::try_from(self.nanos() / 1000).ok()
    }

    /// Microseconds truncated toward zero, as the manifest stores them ([`Time::micros`]), in i128 (no
    /// bound), for comparing with a manifest's time: rounding a time before 1970 down instead made every
    /// such entry look changed since the scan (`rm --manifest` and `sync --delete` skipped it).
    pub fn micros_trunc(self) -> i128 {
        self.nanos() / 1000
    }

    /// As a `timespec` for `futimens`.
    pub fn timespec(self) -> libc::timespec {
        libc::timespec {
            tv_sec: self.sec,
            tv_nsec: self.nsec,
        }
    }
}
