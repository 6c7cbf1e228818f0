//! `[storage.emulate] read_mbps`: one read bandwidth per node that all its segment reads
//! share, as the reads of every session of a node share one IPSAN LUN's link. A lone read
//! of B bytes takes B / rate; two at once take twice as long together, which is what makes
//! an emulated volume slow down under load instead of only adding a constant latency.
//!
//! The bucket is `leaky-bucket`'s: FIFO (fair) waiters, partial fills so a read larger
//! than the bucket waits over several refills, and no background task.

use std::time::Duration;

use leaky_bucket::RateLimiter;

/// How often the bucket refills. Short enough that a 4 s segment at a few Mb/s is paced
/// smoothly, long enough that the refilling waiter does not wake the runtime constantly.
const REFILL: Duration = Duration::from_millis(10);

pub struct ReadBandwidth {
    limiter: RateLimiter,
    bytes_per_sec: f64,
}

impl ReadBandwidth {
    /// A node-wide bandwidth of `mbps` megabits per second; `None` when 0 (unlimited).
    pub fn new(mbps: f64) -> Option<ReadBandwidth> {
        if mbps.is_nan() || mbps <= 0.0 {
            return None;
        }
        let bytes_per_sec = mbps * 1e6 / 8.0;
        let refill = ((bytes_per_sec * REFILL.as_secs_f64()).round() as usize).max(1);
        // The bucket holds one refill at most: an idle LUN does not bank bandwidth for a
        // later burst, so a read after a pause is paced like any other.
        let limiter = RateLimiter::builder()
            .initial(refill)
            .refill(refill)
            .max(refill)
            .interval(REFILL)
            .fair(true)
            .build();
        Some(ReadBandwidth {
            limiter,
            bytes_per_sec: refill as f64 / REFILL.as_secs_f64(),
        })
    }

    /// The rate the bucket really gives (its refill rounded to whole bytes).
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes_per_sec
    }

    /// Waits until `bytes` have passed the emulated link, behind the reads already waiting.
    pub async fn transfer(&self, bytes: u64) {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        self.limiter.acquire(bytes).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn off_at_zero() {
        assert!(ReadBandwidth::new(0.0).is_none());
        assert!(ReadBandwidth::new(f64::NAN).is_none());
        let b = ReadBandwidth::new(8.0).unwrap();
        assert_eq!(b.bytes_per_sec(), 1_000_000.0);
    }

    /// 8 Mb/s = 1 MB/s, a refill of 10 000 B every 10 ms and one refill in the bucket at
    /// the start: a 1 MB read waits 99 refills (0.99 s); two reads of 500 kB at once share
    /// the link and the second ends at the same 0.99 s, the first at about half of it.
    #[tokio::test(start_paused = true)]
    async fn reads_are_paced_and_share_the_link() {
        let b = ReadBandwidth::new(8.0).unwrap();
        let t0 = Instant::now();
        b.transfer(1_000_000).await;
        assert_eq!(t0.elapsed(), Duration::from_millis(990));

        let b = ReadBandwidth::new(8.0).unwrap();
        let t0 = Instant::now();
        let one = async {
            b.transfer(500_000).await;
            t0.elapsed()
        };
        let two = async {
            b.transfer(500_000).await;
            t0.elapsed()
        };
        let (a, z) = tokio::join!(one, two);
        let (first, last) = (a.min(z), a.max(z));
        assert_eq!(last, Duration::from_millis(990));
        assert_eq!(first, Duration::from_millis(490));
    }

    /// A pause does not bank bandwidth: after 5 idle seconds a 100 kB read still takes
    /// 90 ms (one refill was waiting in the bucket).
    #[tokio::test(start_paused = true)]
    async fn an_idle_link_does_not_bank_a_burst() {
        let b = ReadBandwidth::new(8.0).unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let t0 = Instant::now();
        b.transfer(100_000).await;
        assert_eq!(t0.elapsed(), Duration::from_millis(90));
    }
}
