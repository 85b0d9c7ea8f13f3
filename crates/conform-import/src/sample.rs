//! `--sample N --seed S`: a reproducible subset of N cases, chosen while streaming
//! (reservoir sampling, Algorithm R), so only the N chosen cases are ever held.

/// SplitMix64: small, fast, and the same sequence on every platform and version, which a
/// generic random crate does not promise.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// The generator that `seed` starts.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next number of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (Lemire's multiply-shift with rejection), `bound > 0`.
    pub fn below(&mut self, bound: u64) -> u64 {
        loop {
            let m = u128::from(self.next_u64()) * u128::from(bound);
            let low = m as u64;
            if low >= bound.wrapping_neg() % bound {
                return (m >> 64) as u64;
            }
        }
    }
}

/// A uniform sample of at most `size` items from a stream of unknown length.
#[derive(Debug)]
pub struct Reservoir<T> {
    size: usize,
    seen: u64,
    rng: SplitMix64,
    items: Vec<T>,
}

impl<T> Reservoir<T> {
    /// An empty sample of at most `size` items, drawn with `seed`.
    pub fn new(size: usize, seed: u64) -> Reservoir<T> {
        Reservoir {
            size,
            seen: 0,
            rng: SplitMix64::new(seed),
            items: Vec::with_capacity(size.min(4096)),
        }
    }

    /// Offers the next item; it may replace one already held.
    pub fn offer(&mut self, item: T) {
        self.seen += 1;
        if self.items.len() < self.size {
            self.items.push(item);
            return;
        }
        let j = self.rng.below(self.seen);
        if let Some(slot) = usize::try_from(j).ok().and_then(|j| self.items.get_mut(j)) {
            *slot = item;
        }
    }

    /// How many items were offered.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// The items held now.
    pub fn items_mut(&mut self) -> &mut [T] {
        &mut self.items
    }

    /// The items held, in no particular order.
    pub fn into_items(self) -> Vec<T> {
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize, seed: u64, of: u32) -> Vec<u32> {
        let mut r = Reservoir::new(n, seed);
        (0..of).for_each(|i| r.offer(i));
        let mut items = r.into_items();
        items.sort();
        items
    }

    #[test]
    fn the_same_seed_gives_the_same_sample() {
        assert_eq!(sample(10, 7, 1000), sample(10, 7, 1000));
        assert_ne!(sample(10, 7, 1000), sample(10, 8, 1000));
        assert_eq!(sample(10, 7, 5), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn every_item_is_about_equally_likely() {
        // 2,000 samples of 10 out of 100: each item is expected 200 times.
        let mut counts = [0u32; 100];
        for seed in 0..2000 {
            for i in sample(10, seed, 100) {
                counts[i as usize] += 1;
            }
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min > 140 && *max < 260, "{min}..{max}");
    }
}
