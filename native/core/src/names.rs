//! Names as manifests hold them (`operators.names.decode`): the UTF-8 text, with every byte that is
//! not valid UTF-8 shown as `\xNN` (Python's `backslashreplace`); the raw bytes are kept beside the
//! text only for such names.

use crate::errors::Cause;

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

/// Split `a/b/c` into (`a/b`, `c`); a top-level name has the parent `b""`.
pub fn split(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&rel[..0], rel),
    }
}

/// One name inside a directory: refused if it could name something else than a child (`..`, `.`,
/// empty, or with a `/` or NUL), so no path the core is given leaves its root, whoever calls it.
pub fn check_component(name: &[u8]) -> Result<(), Cause> {
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&b| b == b'/' || b == 0)
    {
        Err(Cause::UnsafeName)
    } else {
        Ok(())
    }
}

/// A path relative to a root: every component checked with [`check_component`].
pub fn check_relative(rel: &[u8]) -> Result<(), Cause> {
    rel.split(|&b| b == b'/').try_for_each(check_component)
}
