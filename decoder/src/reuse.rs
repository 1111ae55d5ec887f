//! Exact reuse distance (LRU stack distance) of cache-line accesses.
//!
//! The distance of an access is the number of *distinct* lines accessed
//! since the previous access to the same line (0: the line was the last one
//! accessed); a first access has no distance ("cold"). With the time of each
//! line's last access marked in a Fenwick tree, the distance is the number
//! of marks after that time: O(log n) per access.
//!
//! Memory is bounded by the number of distinct lines, not by the trace
//! length: when the time axis fills the tree, the live marks (one per line)
//! are renumbered densely and the tree is rebuilt.

use std::collections::HashMap;

use serde::Serialize;

/// Histogram of reuse distances in power-of-two buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReuseHistogram {
    /// First accesses to a line.
    pub cold: u64,
    /// `buckets[0]`: distance 0; `buckets[k]` (k >= 1): distances in
    /// `[2^(k-1), 2^k)`.
    pub buckets: Vec<u64>,
}

impl ReuseHistogram {
    /// Bucket index of a distance.
    pub fn bucket_of(distance: u64) -> usize {
        if distance == 0 {
            0
        } else {
            64 - distance.leading_zeros() as usize
        }
    }

    /// Lower bound of bucket `k`.
    pub fn bucket_start(k: usize) -> u64 {
        if k == 0 { 0 } else { 1 << (k - 1) }
    }

    fn add(&mut self, distance: u64) {
        let k = Self::bucket_of(distance);
        if self.buckets.len() <= k {
            self.buckets.resize(k + 1, 0);
        }
        self.buckets[k] += 1;
    }

    /// Accesses with a distance (all but the cold ones).
    pub fn warm(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// Computes reuse distances access by access.
pub struct ReuseDistance {
    last_access: HashMap<u64, u32, BuildLineHasher>,
    tree: Vec<u32>,
    now: u32,
    live: u32,
    histogram: ReuseHistogram,
}

impl Default for ReuseDistance {
    fn default() -> Self {
        Self::new()
    }
}

impl ReuseDistance {
    /// An empty tracker.
    pub fn new() -> Self {
        ReuseDistance {
            last_access: HashMap::with_hasher(BuildLineHasher),
            tree: vec![0; 1 << 16],
            now: 0,
            live: 0,
            histogram: ReuseHistogram::default(),
        }
    }

    /// Records an access to `line`; returns its distance (`None` when cold).
    #[inline]
    pub fn access(&mut self, line: u64) -> Option<u64> {
        if self.now as usize + 1 >= self.tree.len() {
            self.compact();
        }
        let now = self.now;
        self.now += 1;
        let distance = match self.last_access.insert(line, now) {
            Some(prev) => {
                // Marks after `prev`: every line accessed since, once each.
                let after = self.live - self.prefix(prev);
                self.add(prev, -1);
                Some(u64::from(after))
            }
            None => {
                self.live += 1;
                None
            }
        };
        self.add(now, 1);
        match distance {
            Some(d) => self.histogram.add(d),
            None => self.histogram.cold += 1,
        }
        distance
    }

    /// The histogram so far.
    pub fn histogram(&self) -> &ReuseHistogram {
        &self.histogram
    }

    /// Number of marks at times `<= t`.
    #[inline]
    fn prefix(&self, t: u32) -> u32 {
        let mut i = t as usize + 1;
        let mut sum = 0;
        while i > 0 {
            sum += self.tree[i - 1];
            i &= i - 1;
        }
        sum
    }

    #[inline]
    fn add(&mut self, t: u32, delta: i32) {
        let mut i = t as usize + 1;
        while i <= self.tree.len() {
            self.tree[i - 1] = self.tree[i - 1].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Renumbers the live marks 0..live in time order and rebuilds the
    /// tree, sized to twice the live lines so compactions stay rare.
    fn compact(&mut self) {
        let mut order: Vec<(u32, u64)> = self
            .last_access
            .iter()
            .map(|(&line, &t)| (t, line))
            .collect();
        order.sort_unstable();
        let size = (order.len() * 2).max(1 << 16).next_power_of_two();
        self.tree = vec![0; size];
        for (new_time, &(_, line)) in order.iter().enumerate() {
            self.last_access.insert(line, new_time as u32);
        }
        // Build in O(n): set leaves, then push partial sums up.
        for t in 0..order.len() {
            self.tree[t] = 1;
        }
        for i in 1..=size {
            let parent = i + (i & i.wrapping_neg());
            if parent <= size {
                let v = self.tree[i - 1];
                self.tree[parent - 1] += v;
            }
        }
        self.now = order.len() as u32;
    }
}

/// A cheap hasher for line numbers (multiplicative; lines are not
/// adversarial input, and SipHash costs more than the rest of an access).
#[derive(Clone, Copy, Default)]
pub struct BuildLineHasher;

impl std::hash::BuildHasher for BuildLineHasher {
    type Hasher = LineHasher;
    fn build_hasher(&self) -> LineHasher {
        LineHasher(0)
    }
}

/// See [`BuildLineHasher`].
#[derive(Clone, Copy, Default)]
pub struct LineHasher(u64);

impl std::hash::Hasher for LineHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: the distance by scanning back, O(n^2).
    fn naive(seq: &[u64]) -> Vec<Option<u64>> {
        (0..seq.len())
            .map(|i| {
                let prev = (0..i).rev().find(|&j| seq[j] == seq[i])?;
                let distinct: std::collections::HashSet<u64> =
                    seq[prev + 1..i].iter().copied().collect();
                Some(distinct.len() as u64)
            })
            .collect()
    }

    #[test]
    fn known_sequences() {
        let mut r = ReuseDistance::new();
        let got: Vec<Option<u64>> = [1, 2, 3, 1, 1, 2, 4, 3]
            .iter()
            .map(|&l| r.access(l))
            .collect();
        assert_eq!(
            got,
            vec![None, None, None, Some(2), Some(0), Some(2), None, Some(3)]
        );
        assert_eq!(r.histogram().cold, 4);
        // distances 2, 0, 2, 3 -> buckets 0:1, 2 ([2,4)):3
        assert_eq!(r.histogram().buckets, vec![1, 0, 3]);
    }

    #[test]
    fn cyclic_sweep_has_distance_n_minus_1() {
        let mut r = ReuseDistance::new();
        for round in 0..3 {
            for l in 0..100u64 {
                let d = r.access(l);
                assert_eq!(d, if round == 0 { None } else { Some(99) });
            }
        }
    }

    #[test]
    fn matches_naive_across_compactions() {
        let mut seed = 7u64;
        let seq: Vec<u64> = (0..200_000)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 33) % 50
            })
            .collect();
        let mut r = ReuseDistance::new();
        let got: Vec<Option<u64>> = seq.iter().map(|&l| r.access(l)).collect();
        // The naive reference is quadratic: check a window past several compactions.
        let window = &seq[150_000..151_000];
        let want = naive(&seq[..151_000]);
        assert_eq!(
            &got[150_000..151_000],
            &want[150_000..151_000],
            "{}",
            window.len()
        );
    }
}
