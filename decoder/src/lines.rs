//! Cache lines: the one definition of which lines an access touches and
//! which of their bytes. Every consumer (working set, metrics, rasteriser,
//! hit-testing) asks here.

/// A cache line size (a power of two), kept as the shift that turns an
/// address into a line number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LineSize {
    shift: u32,
}

impl LineSize {
    /// `bytes` must be a power of two (checked by the working-set config).
    pub fn new(bytes: u32) -> Self {
        LineSize { shift: bytes.max(1).trailing_zeros() }
    }

    /// Bytes per line.
    pub fn bytes(self) -> u32 {
        1 << self.shift
    }

    /// The line holding `addr`.
    #[inline]
    pub fn line_of(self, addr: u64) -> u64 {
        addr >> self.shift
    }

    /// The first address of `line`.
    #[inline]
    pub fn start_of(self, line: u64) -> u64 {
        line << self.shift
    }

    /// First and last line touched by `size` bytes at `addr`. An access of
    /// 0 bytes still touches the line of its address; an access reaching
    /// past the top of the address space stops there.
    #[inline]
    pub fn lines(self, addr: u64, size: u64) -> (u64, u64) {
        (addr >> self.shift, addr.saturating_add(size.max(1) - 1) >> self.shift)
    }

    /// Each line the access touches with the byte range `[lo, hi)` of it
    /// that was read (empty, `lo == hi`, for a 0-byte access).
    #[inline]
    pub fn pieces(self, addr: u64, size: u64) -> Pieces {
        let offset = addr & ((1u64 << self.shift) - 1);
        if offset + size <= 1u64 << self.shift {
            // Inside one line: the common case, without 128-bit arithmetic.
            let (lo, hi) = (offset as u32, (offset + size) as u32);
            return Pieces { single: Some((addr >> self.shift, lo, hi)), ..Pieces::EMPTY };
        }
        let (first, last) = self.lines(addr, size);
        // In 128 bits, so that an access at the top of the address space
        // neither wraps nor loses its last byte.
        let start = u128::from(addr);
        let end = (start + u128::from(size)).min(u128::from(u64::MAX) + 1);
        Pieces { shift: self.shift, line: first, last, start, end, done: false, single: None }
    }
}

/// Iterator of [`LineSize::pieces`]: `(line, lo, hi)`.
pub struct Pieces {
    shift: u32,
    line: u64,
    last: u64,
    start: u128,
    end: u128,
    done: bool,
    /// The one piece of an access inside one line.
    single: Option<(u64, u32, u32)>,
}

impl Pieces {
    const EMPTY: Pieces = Pieces { shift: 0, line: 0, last: 0, start: 0, end: 0, done: true, single: None };
}

impl Iterator for Pieces {
    type Item = (u64, u32, u32);

    #[inline]
    fn next(&mut self) -> Option<(u64, u32, u32)> {
        if let Some(piece) = self.single.take() {
            return Some(piece);
        }
        if self.done {
            return None;
        }
        let line = self.line;
        let line_start = u128::from(line) << self.shift;
        let line_end = line_start + (1u128 << self.shift);
        let lo = self.start.max(line_start).min(line_end) - line_start;
        let hi = self.end.min(line_end).max(line_start + lo) - line_start;
        if line == self.last {
            self.done = true;
        } else {
            self.line += 1;
        }
        Some((line, lo as u32, hi as u32))
    }
}

/// Bits `lo..hi` set (`lo <= hi <= 128`; empty when equal).
#[inline]
pub fn byte_mask(lo: u32, hi: u32) -> u128 {
    if hi <= lo { 0 } else { (u128::MAX >> (128 - (hi - lo))) << lo }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_pieces() {
        let l = LineSize::new(64);
        assert_eq!(l.lines(60, 8), (0, 1));
        assert_eq!(l.lines(64, 0), (1, 1), "a 0-byte access touches its line");
        assert_eq!(l.pieces(60, 8).collect::<Vec<_>>(), vec![(0, 60, 64), (1, 0, 4)]);
        assert_eq!(l.pieces(64, 0).collect::<Vec<_>>(), vec![(1, 0, 0)]);
        assert_eq!(l.pieces(0, 200).count(), 4);
        let top = u64::MAX - 3;
        assert_eq!(l.pieces(top, 100).collect::<Vec<_>>(), vec![(top >> 6, 60, 64)], "stops at the top");
    }

    #[test]
    fn byte_masks() {
        assert_eq!(byte_mask(0, 1), 1);
        assert_eq!(byte_mask(4, 8), 0xf0);
        assert_eq!(byte_mask(0, 128), u128::MAX);
        assert_eq!(byte_mask(127, 128), 1 << 127);
        assert_eq!(byte_mask(5, 5), 0);
    }
}
