//! Failed logins per client address, and the back-off that follows. Pure: time is passed in.
//!
//! Up to `max_failures` wrong credentials are answered normally; past that the address is
//! refused without checking for 1 s, doubling per further failure up to `backoff_max`. A
//! success clears the address; ten quiet minutes forget it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Addresses tracked at most; past it, entries whose back-off ended are dropped first.
const TRACKED_MAX: usize = 65_536;
const FORGET_AFTER: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    last: Instant,
    blocked_until: Option<Instant>,
}

#[derive(Debug)]
pub struct Failures {
    max_failures: u32,
    backoff_max: Duration,
    entries: HashMap<IpAddr, Entry>,
}

impl Failures {
    pub fn new(max_failures: u32, backoff_max: Duration) -> Self {
        Self {
            max_failures,
            backoff_max,
            entries: HashMap::new(),
        }
    }

    /// How much longer `ip` is refused, if it is.
    pub fn blocked(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let until = self.entries.get(&ip)?.blocked_until?;
        (until > now).then(|| until - now)
    }

    /// A wrong credential from `ip`.
    pub fn failed(&mut self, ip: IpAddr, now: Instant) {
        if self.entries.len() >= TRACKED_MAX && !self.entries.contains_key(&ip) {
            self.entries.retain(|_, e| {
                e.blocked_until.is_some_and(|u| u > now) || now - e.last < FORGET_AFTER
            });
            if self.entries.len() >= TRACKED_MAX {
                return;
            }
        }
        let e = self.entries.entry(ip).or_insert(Entry {
            failures: 0,
            last: now,
            blocked_until: None,
        });
        if now.saturating_duration_since(e.last) > FORGET_AFTER {
            e.failures = 0;
        }
        e.failures = e.failures.saturating_add(1);
        e.last = now;
        if e.failures >= self.max_failures {
            let doublings = (e.failures - self.max_failures).min(20);
            let delay = Duration::from_secs(1u64 << doublings).min(self.backoff_max);
            e.blocked_until = Some(now + delay);
        }
    }

    /// A successful login from `ip`.
    pub fn succeeded(&mut self, ip: IpAddr) {
        self.entries.remove(&ip);
    }

    /// Keep the counts when a reloaded config changes the limits.
    pub fn set_limits(&mut self, max_failures: u32, backoff_max: Duration) {
        self.max_failures = max_failures;
        self.backoff_max = backoff_max;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backs_off_doubling_and_forgives_on_success() {
        let ip: IpAddr = "127.0.0.9".parse().unwrap();
        let other: IpAddr = "127.0.0.10".parse().unwrap();
        let t0 = Instant::now();
        let mut f = Failures::new(3, Duration::from_secs(5));
        f.failed(ip, t0);
        f.failed(ip, t0);
        assert_eq!(f.blocked(ip, t0), None);
        f.failed(ip, t0);
        assert_eq!(f.blocked(ip, t0), Some(Duration::from_secs(1)));
        assert_eq!(f.blocked(other, t0), None);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(f.blocked(ip, t1), None);
        f.failed(ip, t1);
        assert_eq!(f.blocked(ip, t1), Some(Duration::from_secs(2)));
        f.failed(ip, t1);
        f.failed(ip, t1);
        // 8 s capped at 5 s.
        assert_eq!(f.blocked(ip, t1), Some(Duration::from_secs(5)));
        f.succeeded(ip);
        assert_eq!(f.blocked(ip, t1), None);
    }

    #[test]
    fn quiet_addresses_are_forgotten() {
        let ip: IpAddr = "127.0.0.9".parse().unwrap();
        let t0 = Instant::now();
        let mut f = Failures::new(2, Duration::from_secs(60));
        f.failed(ip, t0);
        let later = t0 + FORGET_AFTER + Duration::from_secs(1);
        f.failed(ip, later);
        assert_eq!(f.blocked(ip, later), None);
    }
}
