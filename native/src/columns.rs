//! Column builders whose buffers Python wraps with `pyarrow.Array.from_buffers` (no Python
//! object per entry): variable-width binary/UTF-8 (int32 offsets + data), fixed-width numbers,
//! and a validity bitmap for nullable columns.

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

    /// The bitmap bytes, or None when every value is present.
    pub fn take(&mut self) -> Option<Vec<u8>> {
        let bits = self.bits.take();
        self.len = 0;
        self.nulls = 0;
        bits
    }
}

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

    pub fn push(&mut self, value: &[u8]) {
        self.data.extend_from_slice(value);
        self.offsets.push(self.data.len() as i32);
        self.validity.push(true);
    }

    /// Appends `a` + `sep` + `b` as one value (a path from a directory and a name) without a temporary.
    pub fn push_joined(&mut self, a: &[u8], sep: &[u8], b: &[u8]) {
        self.data.extend_from_slice(a);
        self.data.extend_from_slice(sep);
        self.data.extend_from_slice(b);
        self.offsets.push(self.data.len() as i32);
        self.validity.push(true);
    }

    pub fn push_null(&mut self) {
        self.offsets.push(self.data.len() as i32);
        self.validity.push(false);
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
        match &self.validity.bits {
            None => true,
            Some(bits) => bits[i / 8] & (1 << (i % 8)) != 0,
        }
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
}

/// The raw bytes of a slice of numbers, for a Python `bytes` buffer.
pub fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    unsafe {
        std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values))
    }
}
