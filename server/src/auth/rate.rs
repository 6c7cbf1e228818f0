//! A token bucket per client address (DESCRIBEs per address). Pure: time is passed in.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Addresses tracked at most; past it, full buckets (idle addresses) are dropped first.
const TRACKED_MAX: usize = 65_536;

#[derive(Debug)]
pub struct RateLimiter {
    per_sec: f64,
    burst: f64,
    buckets: HashMap<IpAddr, (f64, Instant)>,
}

impl RateLimiter {
    pub fn new(per_sec: f64, burst: u32) -> Self {
        Self {
            per_sec,
            burst: f64::from(burst.max(1)),
            buckets: HashMap::new(),
        }
    }

    /// Take one token for `ip`: Ok, or Err(how long until the next one).
    pub fn take(&mut self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        if self.buckets.len() >= TRACKED_MAX && !self.buckets.contains_key(&ip) {
            let (per_sec, burst) = (self.per_sec, self.burst);
            self.buckets.retain(|_, (tokens, last)| {
                *tokens + now.saturating_duration_since(*last).as_secs_f64() * per_sec < burst
            });
            if self.buckets.len() >= TRACKED_MAX {
                // Everyone is busy: refuse newcomers rather than grow.
                return Err(Duration::from_secs(1));
            }
        }
        let (tokens, last) = self.buckets.entry(ip).or_insert((self.burst, now));
        let refill = now.saturating_duration_since(*last).as_secs_f64() * self.per_sec;
        *tokens = (*tokens + refill).min(self.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else if self.per_sec > 0.0 {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.per_sec))
        } else {
            Err(Duration::from_secs(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_rate_per_address() {
        let a: IpAddr = "127.0.0.5".parse().unwrap();
        let b: IpAddr = "127.0.0.6".parse().unwrap();
        let t0 = Instant::now();
        let mut r = RateLimiter::new(10.0, 3);
        assert!((0..3).all(|_| r.take(a, t0).is_ok()));
        let wait = r.take(a, t0).unwrap_err();
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
        assert!(r.take(b, t0).is_ok(), "another address has its own bucket");
        assert!(r.take(a, t0 + Duration::from_millis(100)).is_ok());
        assert!(r.take(a, t0 + Duration::from_millis(100)).is_err());
        // Idle refills up to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        assert!((0..3).all(|_| r.take(a, later).is_ok()));
        assert!(r.take(a, later).is_err());
    }
}
