//! The workspace's one seeded generator, `SeededRng` (xoshiro256** seeded through SplitMix64),
//! plus a stateless `hash64` for patterns that must be recomputable from an address alone.
//!
//! The simulator's faults, the crash workloads (fsoc-sim), the model's operation generator
//! (fsoc-model), benchmark data (fsoc-bench) and seeded tests all draw from it. Nothing here
//! touches OS randomness, so one seed and one operation sequence always give the same faults,
//! bit errors and workloads on every platform and with every version of every dependency;
//! `sequence_is_pinned` makes any change of the stream deliberate.

/// One SplitMix64 step: advances `state` and returns a well-mixed 64-bit value.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    mix64(*state)
}

/// The SplitMix64 finaliser: a bijective mix of all 64 bits.
fn mix64(value: u64) -> u64 {
    let mut z = value;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Stateless hash of a seed and three words, used to derive per-page patterns (tear masks,
/// erase-progress masks) that must be recomputed identically on every read without storing
/// them.
pub fn hash64(seed: u64, a: u64, b: u64, c: u64) -> u64 {
    // Each word goes through the finaliser before the next is folded in, so (a, b) and (b, a)
    // give unrelated results.
    let mut h = mix64(seed ^ 0x6a09_e667_f3bc_c908);
    h = mix64(h ^ a);
    h = mix64(h.wrapping_add(0x3c6e_f372_fe94_f82b) ^ b);
    mix64(h.wrapping_add(0xa54f_f53a_5f1d_36f1) ^ c)
}

/// A small, fast, seeded generator (xoshiro256**). Cloning it clones its stream position, so a
/// cloned simulator replays the same future.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeededRng {
    state: [u64; 4],
}

/// Parts per million, the unit for probabilities kept in integers.
pub const PARTS_PER_MILLION: u32 = 1_000_000;

impl SeededRng {
    /// A generator whose whole stream is determined by `seed` (any value, including 0).
    pub fn new(seed: u64) -> Self {
        let mut splitmix_state = seed;
        let state = [
            splitmix64(&mut splitmix_state),
            splitmix64(&mut splitmix_state),
            splitmix64(&mut splitmix_state),
            splitmix64(&mut splitmix_state),
        ];
        // SplitMix64 outputs are distinct for consecutive states, so the all-zero state (the
        // one xoshiro cannot leave) is impossible.
        debug_assert!(state.iter().any(|&word| word != 0), "xoshiro state must not be all zero");
        SeededRng { state }
    }

    pub fn next_u64(&mut self) -> u64 {
        let [s0, s1, s2, s3] = &mut self.state;
        let result = s1.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = *s1 << 17;
        *s2 ^= *s0;
        *s3 ^= *s1;
        *s1 ^= *s2;
        *s0 ^= *s3;
        *s2 ^= t;
        *s3 = s3.rotate_left(45);
        result
    }

    /// A uniform value in `0..bound` (Lemire's multiply-shift with rejection, so no modulo
    /// bias). `bound` 0 returns 0, so callers need no special case for empty ranges.
    // Intended: `product as u64` takes the low half of the 128-bit product (Lemire's method).
    #[allow(clippy::cast_possible_truncation)]
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        loop {
            let product = u128::from(self.next_u64()) * u128::from(bound);
            let low = product as u64;
            // The rejection zone is `2^64 mod bound` wide; it is tiny, so this loop almost
            // never repeats.
            if low >= bound.wrapping_neg() % bound {
                let value = (product >> 64) as u64;
                debug_assert!(value < bound, "below({bound}) produced {value}");
                return value;
            }
        }
    }

    /// A uniform value in `low..=high_inclusive`; the whole `u64` range is allowed.
    pub fn range(&mut self, low: u64, high_inclusive: u64) -> u64 {
        assert!(low <= high_inclusive, "range({low}, {high_inclusive}) is empty");
        match (high_inclusive - low).checked_add(1) {
            Some(span) => low + self.below(span),
            None => self.next_u64(),
        }
    }

    /// A uniform value in `[0, 1)` with 53 bits of precision.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `probability` (clamped to `[0, 1]`).
    pub fn chance(&mut self, probability: f64) -> bool {
        if probability <= 0.0 {
            return false;
        }
        if probability >= 1.0 {
            return true;
        }
        self.unit_f64() < probability
    }

    /// True with probability `numerator / denominator`, exactly (an unbiased integer draw).
    /// A certain outcome (`numerator` 0, or at least `denominator`) never draws from the
    /// stream, so a disabled fault or choice does not shift the sequence of anything else.
    pub fn chance_ratio(&mut self, numerator: u64, denominator: u64) -> bool {
        assert!(denominator > 0, "chance_ratio({numerator}, 0)");
        if numerator == 0 {
            return false;
        }
        if numerator >= denominator {
            return true;
        }
        self.below(denominator) < numerator
    }

    /// True with probability `percent / 100` (`chance_ratio`).
    pub fn chance_percent(&mut self, percent: u32) -> bool {
        self.chance_ratio(u64::from(percent), 100)
    }

    /// True with probability `parts_per_million / 1_000_000` (`chance_ratio`).
    pub fn chance_ppm(&mut self, parts_per_million: u32) -> bool {
        self.chance_ratio(u64::from(parts_per_million), u64::from(PARTS_PER_MILLION))
    }

    /// A uniformly chosen element; `None` for an empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        usize::try_from(self.below(items.len() as u64)).ok().and_then(|index| items.get(index))
    }

    /// An index chosen with probability proportional to its weight; `None` if all are 0.
    pub fn weighted_index(&mut self, weights: &[u32]) -> Option<usize> {
        let total: u64 = weights.iter().map(|&weight| u64::from(weight)).sum();
        if total == 0 {
            return None;
        }
        let mut ticket = self.below(total);
        for (index, &weight) in weights.iter().enumerate() {
            if ticket < u64::from(weight) {
                return Some(index);
            }
            ticket -= u64::from(weight);
        }
        unreachable!("ticket {ticket} left over below the total weight {total}")
    }

    /// Fills `bytes` from the stream, eight bytes per draw (little-endian, so the same on
    /// every platform).
    pub fn fill_bytes(&mut self, bytes: &mut [u8]) {
        let mut chunks = bytes.chunks_exact_mut(8);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let word = self.next_u64().to_le_bytes();
            for (byte, value) in tail.iter_mut().zip(word) {
                *byte = value;
            }
        }
    }

    /// `count` bytes from the stream (`fill_bytes`).
    pub fn bytes(&mut self, count: usize) -> alloc::vec::Vec<u8> {
        let mut bytes = alloc::vec![0; count];
        self.fill_bytes(&mut bytes);
        bytes
    }

    /// A Poisson-distributed count with mean `mean` (Knuth's product method, capped at `cap`
    /// so a huge mean cannot loop for long). Used for bit errors per ECC sector.
    pub fn poisson(&mut self, mean: f64, cap: u32) -> u32 {
        if mean <= 0.0 {
            return 0;
        }
        let limit = exp_negative(mean);
        let mut product = self.unit_f64();
        let mut count = 0;
        while product > limit && count < cap {
            count += 1;
            product *= self.unit_f64();
        }
        count
    }
}

/// `e^-x` for `x >= 0` without `std` (core has no transcendental functions): halve `x` until
/// small, sum a short Taylor series, then square back up.
pub fn exp_negative(x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    if x > 700.0 {
        return 0.0;
    }
    let mut reduced = x;
    let mut halvings = 0u32;
    while reduced > 1.0 / 64.0 {
        reduced /= 2.0;
        halvings += 1;
    }
    // Six terms are exact to f64 precision for |reduced| <= 1/64.
    let r = -reduced;
    let mut value = 1.0 + r * (1.0 + r / 2.0 * (1.0 + r / 3.0 * (1.0 + r / 4.0 * (1.0 + r / 5.0 * (1.0 + r / 6.0)))));
    for _ in 0..halvings {
        value *= value;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_different_seeds_differ() {
        let mut a = SeededRng::new(7);
        let mut b = SeededRng::new(7);
        let mut c = SeededRng::new(8);
        let stream_a: [u64; 4] = core::array::from_fn(|_| a.next_u64());
        let stream_b: [u64; 4] = core::array::from_fn(|_| b.next_u64());
        let stream_c: [u64; 4] = core::array::from_fn(|_| c.next_u64());
        assert_eq!(stream_a, stream_b);
        assert_ne!(stream_a, stream_c);
    }

    #[test]
    fn sequence_is_pinned() {
        // Pinned so a change of algorithm (which would change every recorded seed's faults,
        // workloads and generated operations) is deliberate.
        let mut rng = SeededRng::new(0);
        assert_eq!(rng.next_u64(), 0x99ec_5f36_cb75_f2b4);
    }

    // Checks that below() stays in range and hits every value of a small range.
    #[test]
    fn below_covers_its_range() {
        let mut rng = SeededRng::new(1);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            let value = rng.below(7);
            assert!(value < 7, "below(7) gave {value}");
            seen[value as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "not every value drawn: {seen:?}");
        assert_eq!(rng.below(0), 0);
    }

    // Checks range() at its edges (a single value, the whole u64 range) and inside.
    #[test]
    fn range_stays_in_bounds() {
        let mut rng = SeededRng::new(7);
        for _ in 0..10_000 {
            let value = rng.range(10, 12);
            assert!((10..=12).contains(&value), "range(10, 12) gave {value}");
        }
        assert_eq!(rng.range(5, 5), 5);
        let _any = rng.range(0, u64::MAX);
    }

    // Checks pick() and weighted_index() on empty, zero-weight and single-choice inputs.
    #[test]
    fn choices_respect_weights() {
        let mut rng = SeededRng::new(8);
        assert_eq!(rng.pick::<u8>(&[]), None);
        assert_eq!(rng.pick(&[4]), Some(&4));
        assert_eq!(rng.weighted_index(&[0, 0, 5, 0]), Some(2));
        assert_eq!(rng.weighted_index(&[0, 0]), None);
        let heavy = (0..1000).filter(|_| rng.weighted_index(&[1, 9]) == Some(1)).count();
        assert!((850..950).contains(&heavy), "weight 9 of 10 chosen {heavy} of 1000 times");
    }

    // Checks that fill_bytes() is the little-endian stream, tail included.
    #[test]
    fn bytes_are_the_stream_in_little_endian() {
        let mut words = SeededRng::new(9);
        let expected: alloc::vec::Vec<u8> = (0..2).flat_map(|_| words.next_u64().to_le_bytes()).take(13).collect();
        assert_eq!(SeededRng::new(9).bytes(13), expected);
        assert!(SeededRng::new(9).bytes(0).is_empty());
    }

    // Checks chance_ppm's frequency roughly (10% over 100k draws) and its exact extremes.
    #[test]
    fn chance_frequencies() {
        let mut rng = SeededRng::new(2);
        let hits = (0..100_000).filter(|_| rng.chance_ppm(100_000)).count();
        assert!((9_000..11_000).contains(&hits), "10% chance hit {hits} of 100000");
        assert!(!rng.chance_ppm(0));
        assert!(rng.chance_ppm(PARTS_PER_MILLION));
        assert!(!rng.chance_percent(0));
        assert!(rng.chance_percent(100));
        let quarter = (0..10_000).filter(|_| rng.chance_ratio(1, 4)).count();
        assert!((2_300..2_700).contains(&quarter), "1/4 chance hit {quarter} of 10000");
        assert!(!rng.chance(0.0));
        assert!(rng.chance(1.0));
    }

    #[test]
    fn exp_negative_matches_known_values() {
        let cases = [(0.0, 1.0), (1.0, 0.367_879_441_171_442_3), (5.0, 0.006_737_946_999_085_467)];
        for (x, expected) in cases {
            let got = exp_negative(x);
            assert!((got - expected).abs() < 1e-12 * expected.max(1e-300), "e^-{x} = {got}");
        }
    }

    // Checks the Poisson sampler's mean (2.0 over 20k draws).
    #[test]
    fn poisson_mean_is_close() {
        let mut rng = SeededRng::new(3);
        let total: u64 = (0..20_000).map(|_| u64::from(rng.poisson(2.0, 100))).sum();
        let mean = total as f64 / 20_000.0;
        assert!((1.9..2.1).contains(&mean), "poisson(2) mean {mean}");
    }

    #[test]
    fn hash64_depends_on_every_argument() {
        let base = hash64(1, 2, 3, 4);
        assert_eq!(base, hash64(1, 2, 3, 4));
        assert_ne!(base, hash64(0, 2, 3, 4));
        assert_ne!(base, hash64(1, 3, 2, 4));
        assert_ne!(base, hash64(1, 2, 3, 5));
    }
}
