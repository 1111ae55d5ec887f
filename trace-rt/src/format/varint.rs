//! LEB128 variable-length integers, the building block of event records.

/// Most bytes of one varint (a u64 has ten groups of 7 bits).
pub const MAX_LEN: usize = 10;

/// Appends `value` as unsigned LEB128.
#[inline]
pub fn put_u64(buf: &mut Vec<u8>, value: u64) {
    buf.reserve(MAX_LEN);
    let len = buf.len();
    // SAFETY: `reserve` made room for MAX_LEN bytes after `len`; `put_raw`
    // wrote the `n` bytes the length grows by.
    unsafe {
        let n = put_raw(buf.as_mut_ptr().add(len), value);
        buf.set_len(len + n);
    }
}

/// Appends `value` zig-zag encoded, so small negative deltas stay short.
#[inline]
pub fn put_i64(buf: &mut Vec<u8>, value: i64) {
    put_u64(buf, zigzag(value));
}

/// `value` zig-zag encoded: 0, -1, 1, -2, ... become 0, 1, 2, 3, ...
#[inline(always)]
pub fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Writes `value` as LEB128 at `dst`; returns its length (1 to
/// [`MAX_LEN`]). Byte by byte straight into memory: a capacity check per
/// byte, or a stack buffer copied afterwards, cost more in the encoder's
/// hot loop.
///
/// # Safety
/// `dst` must be valid for writing [`MAX_LEN`] bytes.
#[inline(always)]
pub(crate) unsafe fn put_raw(dst: *mut u8, mut value: u64) -> usize {
    let mut n = 0;
    while value >= 0x80 {
        // SAFETY: n < MAX_LEN - 1 here (a u64 has at most ten groups).
        unsafe { dst.add(n).write((value as u8) | 0x80) };
        value >>= 7;
        n += 1;
    }
    // SAFETY: n < MAX_LEN here.
    unsafe { dst.add(n).write(value as u8) };
    n + 1
}

/// A cursor over an event payload. Every read is bounds-checked: a corrupt
/// payload yields `None`, never a panic.
#[derive(Clone, Copy)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// Starts reading at the beginning of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    /// True once every byte was consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    /// Current offset inside the payload.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Skips `n` bytes; `None` if fewer are left.
    pub fn skip(&mut self, n: u64) -> Option<()> {
        let n = usize::try_from(n).ok()?;
        if n > self.bytes.len() - self.pos.min(self.bytes.len()) {
            return None;
        }
        self.pos += n;
        Some(())
    }

    /// Takes the next `n` bytes; `None` if fewer are left.
    pub fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let start = self.pos;
        self.skip(n)?;
        self.bytes.get(start..self.pos)
    }

    /// Reads one raw byte.
    #[inline]
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// Reads an unsigned LEB128 value of at most 10 bytes.
    #[inline]
    pub fn u64(&mut self) -> Option<u64> {
        // Most values (site ids, small deltas) fit in one byte.
        let b = *self.bytes.get(self.pos)?;
        if b < 0x80 {
            self.pos += 1;
            return Some(u64::from(b));
        }
        self.u64_multi_byte()
    }

    #[cold]
    fn u64_multi_byte(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.u8()?;
            if shift == 63 && b > 1 {
                return None; // overflows 64 bits
            }
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// Reads a zig-zag encoded signed value.
    #[inline]
    pub fn i64(&mut self) -> Option<i64> {
        let v = self.u64()?;
        Some(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// Reads an unsigned value that must fit in 32 bits.
    #[inline]
    pub fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_edge_values() {
        let values = [0u64, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX];
        let mut buf = Vec::new();
        for &v in &values {
            put_u64(&mut buf, v);
            put_i64(&mut buf, v as i64);
        }
        let mut c = Cursor::new(&buf);
        for &v in &values {
            assert_eq!(c.u64(), Some(v));
            assert_eq!(c.i64(), Some(v as i64));
        }
        assert!(c.is_empty());
    }

    #[test]
    fn rejects_overlong_and_cut_values() {
        assert_eq!(Cursor::new(&[0x80, 0x80]).u64(), None);
        assert_eq!(Cursor::new(&[0xff; 11]).u64(), None);
        assert_eq!(Cursor::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]).u64(), None);
        assert_eq!(Cursor::new(&[0x80, 0x80, 0x80, 0x80, 0x10]).u32(), None);
    }
}
