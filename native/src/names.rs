//! Names as manifests hold them (`operators.names.decode`): the UTF-8 text, with every byte that is
//! not valid UTF-8 shown as `\xNN` (Python's `backslashreplace`); the raw bytes are kept beside the
//! text only for such names.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

/// A Python list of `bytes` (names or paths, exact) as owned byte strings.
pub fn names_of(list: &Bound<'_, PyList>) -> PyResult<Vec<Vec<u8>>> {
    list.iter()
        .map(|o| Ok(o.downcast::<PyBytes>()?.as_bytes().to_vec()))
        .collect()
}

/// Appends the text of `raw` to `out`; returns whether `raw` was valid UTF-8 (no raw copy needed).
pub fn push_text(out: &mut Vec<u8>, raw: &[u8]) -> bool {
    let mut rest = raw;
    let mut valid = true;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.extend_from_slice(s.as_bytes());
                return valid;
            }
            Err(e) => {
                valid = false;
                let good = e.valid_up_to();
                out.extend_from_slice(&rest[..good]);
                let bad = e.error_len().unwrap_or(rest.len() - good);
                for &b in &rest[good..good + bad] {
                    out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
                }
                rest = &rest[good + bad..];
            }
        }
    }
}

/// `rel/name` (just `name` at the root).
pub fn join(rel: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(rel.len() + 1 + name.len());
    if !rel.is_empty() {
        p.extend_from_slice(rel);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}
