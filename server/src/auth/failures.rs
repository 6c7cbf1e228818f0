//! Failed logins per client address and per user name, and the back-off that follows. Pure:
//! time is passed in.
//!
//! Up to `max_failures` wrong credentials are answered normally; past that the address (or
//! the user name the credentials claimed) is refused without checking for 1 s, doubling per
//! further failure up to `backoff_max`. Ten quiet minutes forget an entry.
//!
//! The rules that keep a guesser from getting round it (issue 44, finding H1):
//! * A success clears only the count of the user who succeeded: a guard with a login of
//!   their own cannot reset their address's count between guesses at other accounts.
//! * The user's own count follows the name from every address, so rotating addresses does
//!   not buy more guesses at one account; only names of known users are counted (the caller
//!   says), so made-up names cannot grow that table.
//! * An IPv6 client is counted by its /64 (`limits::client_key`).
//! * When the table of addresses is full of live entries, an address not in it is refused
//!   (fails closed) until entries age out, rather than going uncounted.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Addresses tracked at most; past it, entries whose back-off ended and that are quiet are
/// dropped first, and then new addresses are refused.
const TRACKED_MAX: usize = 65_536;
const FORGET_AFTER: Duration = Duration::from_secs(600);
/// How long a full table refuses an untracked address before it is pruned again.
const FULL_RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    last: Instant,
    blocked_until: Option<Instant>,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.blocked_until.is_some_and(|u| u > now)
            || now.saturating_duration_since(self.last) < FORGET_AFTER
    }

    fn blocked(&self, now: Instant) -> Option<Duration> {
        let until = self.blocked_until?;
        (until > now).then(|| until - now)
    }
}

#[derive(Debug)]
pub struct Failures {
    max_failures: u32,
    backoff_max: Duration,
    addresses: HashMap<IpAddr, Entry>,
    users: HashMap<String, Entry>,
    /// Set while the address table is full of live entries: when it was found full.
    full_since: Option<Instant>,
    tracked_max: usize,
}

impl Failures {
    pub fn new(max_failures: u32, backoff_max: Duration) -> Self {
        Self {
            max_failures,
            backoff_max,
            addresses: HashMap::new(),
            users: HashMap::new(),
            full_since: None,
            tracked_max: TRACKED_MAX,
        }
    }

    /// How much longer a login from `ip` claiming `user` (a known user's name, if the
    /// credentials name one) is refused, if it is: the longer of the two back-offs, or the
    /// full table's refusal for an address it does not hold.
    pub fn blocked(&mut self, ip: IpAddr, user: Option<&str>, now: Instant) -> Option<Duration> {
        let key = crate::limits::client_key(ip);
        let by_user = user.and_then(|u| self.users.get(u)?.blocked(now));
        let by_address = match self.addresses.get(&key) {
            Some(e) => e.blocked(now),
            None => self.full_refusal(now),
        };
        by_user.max(by_address)
    }

    /// While the table is full, a refusal for an address it does not hold; pruned at most
    /// once per `FULL_RETRY`.
    fn full_refusal(&mut self, now: Instant) -> Option<Duration> {
        let since = self.full_since?;
        if now.saturating_duration_since(since) >= FULL_RETRY {
            self.prune(now);
            if self.addresses.len() < self.tracked_max {
                self.full_since = None;
                return None;
            }
            self.full_since = Some(now);
        }
        Some(FULL_RETRY)
    }

    fn prune(&mut self, now: Instant) {
        self.addresses.retain(|_, e| e.live(now));
        self.users.retain(|_, e| e.live(now));
    }

    /// A wrong credential from `ip`, claiming `user` when it named a known user.
    pub fn failed(&mut self, ip: IpAddr, user: Option<&str>, now: Instant) {
        let key = crate::limits::client_key(ip);
        if self.addresses.len() >= self.tracked_max && !self.addresses.contains_key(&key) {
            self.prune(now);
            if self.addresses.len() >= self.tracked_max {
                self.full_since = Some(now);
            }
        }
        let (max, backoff) = (self.max_failures, self.backoff_max);
        if self.addresses.len() < self.tracked_max || self.addresses.contains_key(&key) {
            count(
                self.addresses.entry(key).or_insert_with(|| fresh(now)),
                now,
                max,
                backoff,
            );
        }
        if let Some(user) = user {
            if self.users.len() < self.tracked_max || self.users.contains_key(user) {
                let e = self
                    .users
                    .entry(user.to_string())
                    .or_insert_with(|| fresh(now));
                count(e, now, max, backoff);
            }
        }
    }

    /// A successful login as `user`: that user's count only. The address's count stays, so
    /// one account's success cannot wipe the guesses made at others from the same place.
    pub fn succeeded(&mut self, user: &str) {
        self.users.remove(user);
    }

    /// Keep the counts when a reloaded config changes the limits.
    pub fn set_limits(&mut self, max_failures: u32, backoff_max: Duration) {
        self.max_failures = max_failures;
        self.backoff_max = backoff_max;
    }
}

fn fresh(now: Instant) -> Entry {
    Entry {
        failures: 0,
        last: now,
        blocked_until: None,
    }
}

fn count(e: &mut Entry, now: Instant, max_failures: u32, backoff_max: Duration) {
    if now.saturating_duration_since(e.last) > FORGET_AFTER {
        e.failures = 0;
    }
    e.failures = e.failures.saturating_add(1);
    e.last = now;
    if e.failures >= max_failures {
        let doublings = (e.failures - max_failures).min(20);
        let delay = Duration::from_secs(1u64 << doublings).min(backoff_max);
        e.blocked_until = Some(now + delay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn backs_off_doubling_up_to_the_cap() {
        let (a, other) = (ip("127.0.0.9"), ip("127.0.0.10"));
        let t0 = Instant::now();
        let mut f = Failures::new(3, Duration::from_secs(5));
        f.failed(a, None, t0);
        f.failed(a, None, t0);
        assert_eq!(f.blocked(a, None, t0), None);
        f.failed(a, None, t0);
        assert_eq!(f.blocked(a, None, t0), Some(Duration::from_secs(1)));
        assert_eq!(f.blocked(other, None, t0), None);
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(f.blocked(a, None, t1), None);
        f.failed(a, None, t1);
        assert_eq!(f.blocked(a, None, t1), Some(Duration::from_secs(2)));
        f.failed(a, None, t1);
        f.failed(a, None, t1);
        // 8 s capped at 5 s.
        assert_eq!(f.blocked(a, None, t1), Some(Duration::from_secs(5)));
    }

    /// H1: four guesses at `admin`, one good login as the guesser's own `guard`, repeated.
    /// Before, the good login cleared the address and the back-off never started.
    #[test]
    fn another_users_success_does_not_clear_the_guesses() {
        let a = ip("198.18.0.5");
        let t0 = Instant::now();
        let mut f = Failures::new(5, Duration::from_secs(60));
        for _ in 0..4 {
            f.failed(a, Some("admin"), t0);
        }
        f.succeeded("guard");
        f.failed(a, Some("admin"), t0);
        assert!(f.blocked(a, Some("admin"), t0).is_some());
        // The address backs off for every name, the guesser's own included.
        assert!(f.blocked(a, Some("guard"), t0).is_some());
        // The victim's own success clears the victim's count, not the address's.
        f.succeeded("admin");
        assert!(f.blocked(a, None, t0).is_some());
    }

    #[test]
    fn a_user_is_counted_across_addresses() {
        let t0 = Instant::now();
        let mut f = Failures::new(3, Duration::from_secs(60));
        for i in 1..=3 {
            f.failed(ip(&format!("198.18.1.{i}")), Some("admin"), t0);
        }
        // A fresh address guessing at `admin` waits; the same address for another name not.
        assert!(f.blocked(ip("198.18.1.200"), Some("admin"), t0).is_some());
        assert_eq!(f.blocked(ip("198.18.1.200"), Some("guard"), t0), None);
        assert_eq!(f.blocked(ip("198.18.1.200"), None, t0), None);
    }

    #[test]
    fn ipv6_is_counted_by_its_slash_64() {
        let t0 = Instant::now();
        let mut f = Failures::new(2, Duration::from_secs(60));
        f.failed(ip("2001:db8:1:2::1"), None, t0);
        f.failed(ip("2001:db8:1:2:ffff::9"), None, t0);
        assert!(f.blocked(ip("2001:db8:1:2:abcd::1"), None, t0).is_some());
        assert_eq!(f.blocked(ip("2001:db8:1:3::1"), None, t0), None);
        // An IPv4-mapped address is its IPv4.
        f.failed(ip("::ffff:198.18.0.7"), None, t0);
        f.failed(ip("198.18.0.7"), None, t0);
        assert!(f.blocked(ip("198.18.0.7"), None, t0).is_some());
    }

    #[test]
    fn a_full_table_refuses_new_addresses_until_entries_age_out() {
        let t0 = Instant::now();
        let mut f = Failures::new(5, Duration::from_secs(60));
        f.tracked_max = 4;
        for i in 1..=4 {
            f.failed(ip(&format!("198.18.2.{i}")), None, t0);
        }
        assert_eq!(f.blocked(ip("198.18.2.9"), None, t0), None);
        // A fifth address fails: the table is full of live entries, so it fails closed.
        f.failed(ip("198.18.2.9"), None, t0);
        assert_eq!(f.blocked(ip("198.18.2.10"), None, t0), Some(FULL_RETRY));
        // A tracked address below its limit is still judged by its own count.
        assert_eq!(f.blocked(ip("198.18.2.1"), None, t0), None);
        // Once the entries are forgotten there is room again.
        let later = t0 + FORGET_AFTER + Duration::from_secs(2);
        assert_eq!(f.blocked(ip("198.18.2.10"), None, later), None);
        f.failed(ip("198.18.2.10"), None, later);
        assert_eq!(f.blocked(ip("198.18.2.11"), None, later), None);
    }

    #[test]
    fn quiet_entries_are_forgotten() {
        let a = ip("127.0.0.9");
        let t0 = Instant::now();
        let mut f = Failures::new(2, Duration::from_secs(60));
        f.failed(a, Some("admin"), t0);
        let later = t0 + FORGET_AFTER + Duration::from_secs(1);
        f.failed(a, Some("admin"), later);
        assert_eq!(f.blocked(a, Some("admin"), later), None);
    }
}
