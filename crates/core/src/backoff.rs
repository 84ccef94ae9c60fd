//! Capped exponential backoff with full jitter, over an injectable, seedable random source.
//!
//! Full jitter (delay uniform in `[0, min(cap, base · 2^(attempt−1))]`) spreads a herd of
//! retries after a provider hiccup instead of re-synchronising it; the bounds are a property
//! test.

use std::time::Duration;

/// A source of uniform random numbers in `[0, 1)`. Injected so tests and the simulator are
/// reproducible from a seed.
pub trait Jitter {
    /// The next uniform sample in `[0, 1)`.
    fn next_unit(&mut self) -> f64;
}

/// SplitMix64: tiny, fast, seedable and stable across releases (unlike a library RNG whose
/// stream may change with a version bump and silently change every simulator result).
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Jitter for SplitMix64 {
    fn next_unit(&mut self) -> f64 {
        // 53 high bits → exactly representable in an f64 mantissa.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Capped exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Ceiling of the first retry's delay.
    pub base: Duration,
    /// Largest delay ever returned.
    pub cap: Duration,
}

impl Backoff {
    /// The un-jittered ceiling for retry number `attempt` (1-based): `min(cap, base · 2^(attempt−1))`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(32);
        self.base.checked_mul(1u32 << shift.min(31)).map_or(self.cap, |d| d.min(self.cap))
    }

    /// A full-jitter delay for retry number `attempt`: uniform in `[0, ceiling(attempt)]`.
    pub fn delay(&self, attempt: u32, jitter: &mut impl Jitter) -> Duration {
        let ceiling = self.ceiling(attempt);
        let u = jitter.next_unit().clamp(0.0, 1.0);
        ceiling.mul_f64(u).min(ceiling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ceiling_doubles_until_the_cap() {
        let b = Backoff { base: Duration::from_secs(1), cap: Duration::from_secs(60) };
        let got: Vec<_> = (1..=8).map(|a| b.ceiling(a).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(b.ceiling(0), Duration::from_secs(1));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(60));
    }

    #[test]
    fn same_seed_gives_same_delays() {
        let b = Backoff { base: Duration::from_secs(2), cap: Duration::from_secs(300) };
        let (mut r1, mut r2) = (SplitMix64::new(42), SplitMix64::new(42));
        let d1: Vec<_> = (1..20).map(|a| b.delay(a, &mut r1)).collect();
        let d2: Vec<_> = (1..20).map(|a| b.delay(a, &mut r2)).collect();
        assert_eq!(d1, d2);
        let mut r3 = SplitMix64::new(43);
        let d3: Vec<_> = (1..20).map(|a| b.delay(a, &mut r3)).collect();
        assert_ne!(d1, d3);
    }

    #[test]
    fn jitter_spreads_over_the_whole_range() {
        let b = Backoff { base: Duration::from_secs(10), cap: Duration::from_secs(10) };
        let mut r = SplitMix64::new(7);
        let samples: Vec<f64> = (0..10_000).map(|_| b.delay(1, &mut r).as_secs_f64()).collect();
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        assert!((4.8..5.2).contains(&mean), "mean {mean} of U[0,10] should be near 5");
        assert!(samples.iter().any(|s| *s < 0.5) && samples.iter().any(|s| *s > 9.5));
    }

    proptest! {
        #[test]
        fn backoff_is_always_within_zero_and_cap(
            base_ms in 0u64..120_000, cap_ms in 0u64..3_600_000, attempt in 0u32..200, seed: u64,
        ) {
            let b = Backoff { base: Duration::from_millis(base_ms), cap: Duration::from_millis(cap_ms) };
            let mut r = SplitMix64::new(seed);
            let d = b.delay(attempt, &mut r);
            prop_assert!(d <= b.cap);
            prop_assert!(d <= b.ceiling(attempt));
        }

        #[test]
        fn unit_samples_are_in_zero_one(seed: u64) {
            let mut r = SplitMix64::new(seed);
            for _ in 0..100 {
                let u = r.next_unit();
                prop_assert!((0.0..1.0).contains(&u));
            }
        }
    }
}
