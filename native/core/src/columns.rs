//! Column builders whose buffers Python wraps with `pyarrow.Array.from_buffers` (no Python
//! object per entry): variable-width binary/UTF-8 (int32 offsets + data), fixed-width numbers,
//! and a validity bitmap for nullable columns.  Offsets are int32, as Arrow's `binary`/`string`:
//! a writer checks [`BinaryBuilder::room`] before a batch of rows and never pushes past `i32::MAX`
//! bytes (a push that would is a bug, and panics, instead of wrapping to a negative offset).

/// A validity bitmap (Arrow layout: bit i set = value i present), built lazily: `None` until the
/// first null, so columns without nulls hand Arrow no bitmap at all.
#[derive(Default)]
pub struct Validity {
    bits: Option<Vec<u8>>,
    len: usize,
    nulls: usize,
}

impl Validity {
    pub fn push(&mut self, valid: bool) {
        if !valid && self.bits.is_none() {
            let mut bits = vec![0xffu8; self.len.div_ceil(8).max(1)];
            // bits past len are don't-care; clear them so later pushes can OR into place
            for i in self.len..bits.len() * 8 {
                bits[i / 8] &= !(1 << (i % 8));
            }
            self.bits = Some(bits);
        }
        if let Some(bits) = self.bits.as_mut() {
            if self.len / 8 >= bits.len() {
                bits.push(0);
            }
            if valid {
                bits[self.len / 8] |= 1 << (self.len % 8);
            } else {
                bits[self.len / 8] &= !(1 << (self.len % 8));
            }
        }
        if !valid {
            self.nulls += 1;
        }
        self.len += 1;
    }

    pub fn nulls(&self) -> usize {
        self.nulls
    }

    /// Whether value `i` is present.
    pub fn get(&self, i: usize) -> bool {
        self.bits
            .as_ref()
            .is_none_or(|bits| bits[i / 8] & (1 << (i % 8)) != 0)
    }

    /// The bitmap of the values at `rows`, in that order.
    pub fn gather(&self, rows: &[u32]) -> Validity {
        if self.bits.is_none() {
            return Validity {
                bits: None,
                len: rows.len(),
                nulls: 0,
            };
        }
        if self.nulls == self.len {
            // every value null (path_raw, link_target, error in most parts): no bit to look up
            return Validity {
                bits: Some(vec![0; rows.len().div_ceil(8).max(1)]),
                len: rows.len(),
                nulls: rows.len(),
            };
        }
        let mut out = Validity::default();
        for &i in rows {
            out.push(self.get(i as usize));
        }
        out
    }

    /// The bitmap bytes, or None when every value is present.
    pub fn take(&mut self) -> Option<Vec<u8>> {
        let bits = self.bits.take();
        self.len = 0;
        self.nulls = 0;
        bits
    }
}

/// The most data bytes a column holds (int32 offsets).
pub const MAX_DATA: usize = i32::MAX as usize;

/// Variable-width values (Arrow `binary`/`string`: int32 offsets, data bytes, validity).
pub struct BinaryBuilder {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    pub validity: Validity,
}

impl Default for BinaryBuilder {
    fn default() -> Self {
        BinaryBuilder {
            offsets: vec![0],
            data: Vec::new(),
            validity: Validity::default(),
        }
    }
}

impl BinaryBuilder {
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes that can still be appended before an offset would pass `i32::MAX`.
    pub fn room(&self) -> usize {
        MAX_DATA.saturating_sub(self.data.len())
    }

    /// Ends the value whose bytes were appended to `data`: its end offset, checked.
    pub fn end_value(&mut self, valid: bool) {
        let end = i32::try_from(self.data.len())
            .expect("column data past i32::MAX: the writer must check room() first");
        self.offsets.push(end);
        self.validity.push(valid);
    }

    pub fn push(&mut self, value: &[u8]) {
        self.data.extend_from_slice(value);
        self.end_value(true);
    }

    /// Appends `a` + `sep` + `b` as one value (a path from a directory and a name) without a temporary.
    pub fn push_joined(&mut self, a: &[u8], sep: &[u8], b: &[u8]) {
        self.data.extend_from_slice(a);
        self.data.extend_from_slice(sep);
        self.data.extend_from_slice(b);
        self.end_value(true);
    }

    pub fn push_null(&mut self) {
        self.end_value(false);
    }

    pub fn push_opt(&mut self, value: Option<&[u8]>) {
        match value {
            Some(v) => self.push(v),
            None => self.push_null(),
        }
    }

    pub fn get(&self, i: usize) -> &[u8] {
        &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    pub fn is_valid(&self, i: usize) -> bool {
        self.validity.get(i)
    }

    /// The values at `rows` (row numbers of this column), in that order.
    pub fn gather(&self, rows: &[u32]) -> BinaryBuilder {
        if self.data.is_empty() {
            // every value empty or null: all offsets 0
            return BinaryBuilder {
                offsets: vec![0; rows.len() + 1],
                data: Vec::new(),
                validity: self.validity.gather(rows),
            };
        }
        let mut out = BinaryBuilder {
            offsets: Vec::with_capacity(rows.len() + 1),
            data: Vec::with_capacity(rows.iter().map(|&i| self.get(i as usize).len()).sum()),
            validity: self.validity.gather(rows),
        };
        out.offsets.push(0);
        for &i in rows {
            out.data.extend_from_slice(self.get(i as usize));
            out.offsets
                .push(i32::try_from(out.data.len()).expect("as long as this column's data"));
        }
        out
    }
}

/// Fixed-width values with validity.
pub struct FixedBuilder<T: Copy + Default> {
    pub values: Vec<T>,
    pub validity: Validity,
}

impl<T: Copy + Default> Default for FixedBuilder<T> {
    fn default() -> Self {
        FixedBuilder {
            values: Vec::new(),
            validity: Validity::default(),
        }
    }
}

impl<T: Copy + Default> FixedBuilder<T> {
    pub fn push(&mut self, v: T) {
        self.values.push(v);
        self.validity.push(true);
    }

    pub fn push_null(&mut self) {
        self.values.push(T::default());
        self.validity.push(false);
    }

    pub fn push_opt(&mut self, v: Option<T>) {
        match v {
            Some(v) => self.push(v),
            None => self.push_null(),
        }
    }

    /// The values at `rows` (row numbers of this column), in that order.
    pub fn gather(&self, rows: &[u32]) -> FixedBuilder<T> {
        FixedBuilder {
            values: rows.iter().map(|&i| self.values[i as usize]).collect(),
            validity: self.validity.gather(rows),
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Numbers without padding or invalid bit patterns, so their memory can be read as bytes.  Sealed:
/// implemented here for the fixed-width column types only.
pub trait Plain: Copy + sealed::Sealed {}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Plain for $t {}
    )*};
}
plain!(u8, i32, u32, i64, u64);

/// The raw bytes of a slice of numbers (native endian), for a Python `bytes` buffer.
pub fn as_bytes<T: Plain>(values: &[T]) -> &[u8] {
    // SAFETY: `T: Plain` is one of the primitive integers above: no padding, every byte initialised;
    // u8 has alignment 1 and the length is the slice's size in bytes, so the view stays in bounds
    // and borrows `values` for its lifetime.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}
