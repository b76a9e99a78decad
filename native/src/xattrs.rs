//! `xattrs_of`: the binding of `pfs_core::xattrs`.

use pfs_core::xattrs;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::names_of;

/// One attribute: (name, "xxh3:<hex>" of its value, the value when at most 256 bytes).
type Attr = (Py<PyBytes>, String, Option<Py<PyBytes>>);

/// The extended attributes of the entries `rels` (exact bytes, relative to `root`; `b""`: `root`
/// itself), never following a symlink: per entry `(True, ([attr, ...], has_acl), "")` with the
/// attributes sorted by name, or `(False, None, "<error text>")`, in order.
#[pyfunction]
fn xattrs_of(
    py: Python<'_>,
    root: &[u8],
    rels: &Bound<'_, PyList>,
    fanout: usize,
) -> PyResult<Vec<(bool, Option<(Vec<Attr>, bool)>, String)>> {
    let rels = names_of(rels)?;
    let done = py.allow_threads(|| xattrs::xattrs_of(root, &rels, fanout));
    Ok(done
        .into_iter()
        .map(|r| match r {
            Ok(a) => {
                let attrs = a
                    .attrs
                    .into_iter()
                    .map(|x| {
                        let value = x.value.map(|v| PyBytes::new(py, &v).unbind());
                        (PyBytes::new(py, &x.name).unbind(), x.digest, value)
                    })
                    .collect();
                (true, Some((attrs, a.has_acl)), String::new())
            }
            Err(c) => (false, None, c.describe()),
        })
        .collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(xattrs_of, m)?)
}
