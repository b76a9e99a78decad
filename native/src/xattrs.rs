//! `xattrs_of`: the binding of `pfs_core::xattrs`, as Arrow buffers.

use pfs_core::columns::{as_bytes, BinaryBuilder};
use pfs_core::xattrs::{self, Columns};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::names_of;

/// A variable-width column as `(offsets, data, validity or None)`.
fn binary<'py>(py: Python<'py>, mut b: BinaryBuilder) -> PyResult<Bound<'py, PyTuple>> {
    let validity = b.validity.take().map(|v| PyBytes::new(py, &v));
    PyTuple::new(
        py,
        [
            PyBytes::new(py, as_bytes(&b.offsets)).into_any(),
            PyBytes::new(py, &b.data).into_any(),
            validity.map_or_else(|| py.None().into_bound(py), Bound::into_any),
        ],
    )
}

/// The extended attributes of the entries `rels` (exact bytes, relative to `root`; `b""`: `root`
/// itself), never following a symlink, as buffers (`pfs_core::xattrs::Columns`): `(ok, has_acl,
/// list offsets, names, digests, values, [(index, error text)])`, one byte per entry in `ok` and
/// `has_acl`, int32 list offsets, and `(offsets, data, validity)` per attribute column.
#[pyfunction]
fn xattrs_of<'py>(
    py: Python<'py>,
    root: &[u8],
    rels: &Bound<'py, PyList>,
    fanout: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let rels = names_of(rels)?;
    let c = py.allow_threads(|| Columns::of(xattrs::xattrs_of(root, &rels, fanout)));
    let items: Vec<Bound<'py, PyAny>> = vec![
        PyBytes::new(py, &c.ok).into_any(),
        PyBytes::new(py, &c.acl).into_any(),
        PyBytes::new(py, as_bytes(&c.ends)).into_any(),
        binary(py, c.names)?.into_any(),
        binary(py, c.digests)?.into_any(),
        binary(py, c.values)?.into_any(),
        c.failed.into_pyobject(py)?.into_any(),
    ];
    PyTuple::new(py, items)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(xattrs_of, m)?)
}
