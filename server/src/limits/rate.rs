//! Token buckets: one per connection (requests per connection) and one per client address
//! (DESCRIBEs per address). Pure: time is passed in.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Addresses tracked at most; past it, full buckets (idle addresses) are dropped first.
const TRACKED_MAX: usize = 65_536;

/// `per_sec` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    per_sec: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn new(per_sec: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            per_sec,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Take one token: Ok, or Err(how long until the next one).
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let refill = now.saturating_duration_since(self.last).as_secs_f64() * self.per_sec;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else if self.per_sec > 0.0 {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.per_sec))
        } else {
            Err(Duration::from_secs(1))
        }
    }

    /// Whether it is full at `now` (its owner has been idle).
    fn full(&self, now: Instant) -> bool {
        self.tokens + now.saturating_duration_since(self.last).as_secs_f64() * self.per_sec
            >= self.burst
    }
}

#[derive(Debug)]
pub struct RateLimiter {
    per_sec: f64,
    burst: u32,
    buckets: HashMap<IpAddr, TokenBucket>,
}

impl RateLimiter {
    pub fn new(per_sec: f64, burst: u32) -> Self {
        Self {
            per_sec,
            burst,
            buckets: HashMap::new(),
        }
    }

    /// Take one token for `ip`: Ok, or Err(how long until the next one).
    pub fn take(&mut self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        let ip = super::client_key(ip);
        if self.buckets.len() >= TRACKED_MAX && !self.buckets.contains_key(&ip) {
            self.buckets.retain(|_, b| !b.full(now));
            if self.buckets.len() >= TRACKED_MAX {
                // Everyone is busy: refuse newcomers rather than grow.
                return Err(Duration::from_secs(1));
            }
        }
        let (per_sec, burst) = (self.per_sec, self.burst);
        self.buckets
            .entry(ip)
            .or_insert_with(|| TokenBucket::new(per_sec, burst, now))
            .take(now)
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
