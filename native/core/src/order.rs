//! A part's rows in path order, sorted where they were made: the manifest keeps each part sorted by
//! `path` (min/max statistics prune prefix filters), and doing it here, on the core's threads, took
//! ~35 ms of a 200,020-row part against ~130 ms of CPU for Arrow's `sort_by("path")` (a sort of the
//! indices, then a take of every column), which ran on the one Python thread while the other core
//! idled (`benchmarks/RESULTS.md`, issue 30, h30l).
//!
//! The order is Arrow's: bytewise on the path's text, ties (none in a scan: paths are unique) in row
//! order, so the result is the same table `sort_by` gave.

use std::sync::Mutex;

use crate::columns::BinaryBuilder;
use crate::pool;

/// Fewest rows per sorted run: below this a second thread costs more than it saves.
const MIN_RUN: usize = 16_384;

/// Row numbers in the order of their `values` (bytewise; equal values keep their row order), sorted
/// in up to `width` runs on the core's threads and merged.
pub fn sorted_rows(values: &BinaryBuilder, width: usize) -> Vec<u32> {
    let n = values.len();
    assert!(
        u32::try_from(n).is_ok(),
        "a column holds at most i32::MAX values"
    );
    let runs = width.clamp(1, 8).min(n / MIN_RUN).max(1);
    let bounds: Vec<usize> = (0..=runs).map(|r| r * n / runs).collect();
    let sorted: Vec<Mutex<Vec<u32>>> = (0..runs).map(|_| Mutex::new(Vec::new())).collect();
    pool::for_each(runs, runs, &|r| {
        let mut rows: Vec<u32> = (bounds[r] as u32..bounds[r + 1] as u32).collect();
        rows.sort_by(|&a, &b| values.get(a as usize).cmp(values.get(b as usize)));
        *sorted[r].lock().unwrap_or_else(|e| e.into_inner()) = rows;
    });
    let mut runs: Vec<Vec<u32>> = sorted
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();
    while runs.len() > 1 {
        let mut next = Vec::with_capacity(runs.len().div_ceil(2));
        let mut it = runs.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => merge(values, &a, &b),
                None => a,
            });
        }
        runs = next;
    }
    runs.pop().unwrap_or_default()
}

/// Two sorted runs as one; on equal values `a`'s rows (the earlier ones) first.
fn merge(values: &BinaryBuilder, a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if values.get(b[j] as usize) < values.get(a[i] as usize) {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(a[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// `values` in the order of `rows` (a permutation of its row numbers).
pub fn gather<T: Copy>(values: &[T], rows: &[u32]) -> Vec<T> {
    rows.iter().map(|&i| values[i as usize]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(values: &[&[u8]]) -> BinaryBuilder {
        let mut b = BinaryBuilder::default();
        for v in values {
            b.push(v);
        }
        b
    }

    /// What Arrow's stable sort gives: row numbers by value, ties in row order.
    fn expected(values: &[Vec<u8>]) -> Vec<u32> {
        let mut rows: Vec<u32> = (0..values.len() as u32).collect();
        rows.sort_by(|&a, &b| values[a as usize].cmp(&values[b as usize]));
        rows
    }

    #[test]
    fn small_columns_sort_bytewise() {
        let c = column(&[b"b", b"a/b", b"a.b", b"a", b"\xff", b"a/b"]);
        assert_eq!(sorted_rows(&c, 4), vec![3, 2, 1, 5, 0, 4]);
        assert!(sorted_rows(&BinaryBuilder::default(), 4).is_empty());
    }

    #[test]
    fn runs_on_threads_merge_to_one_stable_order() {
        // enough rows for several runs, with duplicates across runs to check the merge keeps row order
        let n = 5 * MIN_RUN + 7;
        let values: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("d{:02}/f{:05}", (i * 7919) % 23, (i * 104_729) % 40_000).into_bytes())
            .collect();
        let c = column(&values.iter().map(Vec::as_slice).collect::<Vec<_>>());
        let want = expected(&values);
        for width in [1, 2, 3, 8] {
            assert_eq!(sorted_rows(&c, width), want, "width {width}");
        }
    }

    /// Every column of a row, as text (nulls as "-"), to compare rows across an ordering.
    fn rows_of(c: &crate::scan::Cols) -> Vec<String> {
        let bin = |b: &BinaryBuilder, i: usize| {
            if b.is_valid(i) {
                String::from_utf8_lossy(b.get(i)).into_owned()
            } else {
                "-".into()
            }
        };
        (0..c.len())
            .map(|i| {
                let size = c.size.validity.get(i).then_some(c.size.values[i]);
                let mode = c.mode.validity.get(i).then_some(c.mode.values[i]);
                let mtime = c.mtime.validity.get(i).then_some(c.mtime.values[i]); // all null
                let parent = c.parents.get(c.parent[i] as usize);
                format!(
                    "{} {} {} {} {} {size:?} {mode:?} {mtime:?} {} {} {} {}",
                    bin(&c.path, i),
                    bin(&c.path_raw, i),
                    bin(&c.name, i),
                    String::from_utf8_lossy(parent),
                    c.kind[i],
                    c.depth[i],
                    bin(&c.target, i),
                    bin(&c.target_raw, i), // all null
                    bin(&c.error, i)
                )
            })
            .collect()
    }

    #[test]
    fn every_column_follows_its_row_into_path_order() {
        use crate::remove::Kind;
        use crate::scan::{Cols, Row};
        let mut cols = Cols::default();
        let n = 3 * MIN_RUN + 5; // several runs
        for i in 0..n {
            let path = format!("d{:02}/e{:05}", (i * 31) % 17, (i * 7919) % n);
            let target = format!("t{i}");
            let error = format!("err {i}");
            cols.push_row(&Row {
                path: path.as_bytes(),
                path_raw: (i % 5 == 0).then_some(b"\xff".as_slice()),
                kind: if i % 3 == 0 {
                    Kind::Symlink
                } else {
                    Kind::File
                },
                size: (i % 4 != 0).then_some(i as i64),
                mode: (i % 7 != 0).then_some(i as u32),
                target: (i % 3 == 0).then_some(target.as_bytes()),
                error: (i % 11 == 0).then_some(error.as_bytes()),
                ..Row::default()
            });
        }
        let mut want = rows_of(&cols);
        want.sort(); // the path leads each row's text, and paths are unique
        let sorted = cols.into_path_order(2);
        assert_eq!(rows_of(&sorted), want);
        let paths: Vec<&[u8]> = (0..sorted.len()).map(|i| sorted.path.get(i)).collect();
        assert!(paths.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn gather_follows_the_rows() {
        assert_eq!(gather(&[10, 11, 12], &[2, 0, 1]), vec![12, 10, 11]);
    }
}
