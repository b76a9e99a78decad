//! `checksum_files`: the binding of `pfs_core::checksum`.

use pfs_core::checksum::{self, Algorithm};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::{identity, names_of};

/// Checksums of the files `rels` (exact bytes, relative to `root`; `b""`: `root` itself is the
/// file) with `algorithm` (`xxh3`, `sha256`, `md5`): per file `(True, "<algorithm>:<hex>")` or
/// `(False, "<error text>")`, in order.  Only regular files are read (a FIFO is refused, never opened
/// for a blocking read).  `root_id`: the root's (device, inode) when the job started; another
/// directory in its place since fails every file with ESTALE.
#[pyfunction]
#[pyo3(signature = (root, rels, algorithm, fanout, root_id=None))]
fn checksum_files(
    py: Python<'_>,
    root: &[u8],
    rels: &Bound<'_, PyList>,
    algorithm: &str,
    fanout: usize,
    root_id: Option<(u64, u64)>,
) -> PyResult<Vec<(bool, String)>> {
    let a = Algorithm::parse(algorithm).ok_or_else(|| {
        PyValueError::new_err(format!("unknown checksum algorithm {algorithm:?}"))
    })?;
    let rels = names_of(rels)?;
    let done =
        py.allow_threads(|| checksum::checksum_files_at(root, identity(root_id), &rels, a, fanout));
    Ok(done
        .into_iter()
        .map(|r| match r {
            Ok(sum) => (true, sum),
            Err(c) => (false, c.describe()),
        })
        .collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(checksum_files, m)?)
}
