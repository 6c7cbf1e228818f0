//! The event queue of virtual time: events ordered by time, then by the order they were
//! scheduled, so two events at the same instant always run in the same order (the run is a
//! function of the seed alone).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Virtual time in microseconds since the run's start.
pub type Micros = i64;

pub const MS: Micros = 1_000;
pub const SEC: Micros = 1_000_000;

/// Seconds (f64) → virtual microseconds, rounded.
pub fn secs(s: f64) -> Micros {
    (s * SEC as f64).round() as Micros
}

struct Entry<E> {
    at: Micros,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest event must come out first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// A min-queue of timed events with a clock that only moves forward.
pub struct Queue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
    now: Micros,
    processed: u64,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0,
            processed: 0,
        }
    }
}

impl<E> Queue<E> {
    pub fn now(&self) -> Micros {
        self.now
    }

    /// Events taken so far (a measure of the run's work).
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// Schedules `event` at `at`; a time in the past runs at the current instant.
    pub fn at(&mut self, at: Micros, event: E) {
        self.seq += 1;
        self.heap.push(Entry {
            at: at.max(self.now),
            seq: self.seq,
            event,
        });
    }

    /// Schedules `event` `delay` after now.
    pub fn after(&mut self, delay: Micros, event: E) {
        self.at(self.now.saturating_add(delay.max(0)), event);
    }

    /// The next event at or before `until`, advancing the clock to it.
    pub fn next_until(&mut self, until: Micros) -> Option<E> {
        if self.heap.peek().is_none_or(|e| e.at > until) {
            return None;
        }
        let e = self.heap.pop()?;
        self.now = e.at;
        self.processed += 1;
        Some(e.event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_order_then_schedule_order() {
        let mut q = Queue::default();
        q.at(5, "b");
        q.at(3, "a");
        q.at(5, "c");
        q.at(9, "late");
        let mut got = Vec::new();
        while let Some(e) = q.next_until(8) {
            got.push((q.now(), e));
        }
        assert_eq!(got, vec![(3, "a"), (5, "b"), (5, "c")]);
        // A past time runs now, never moving the clock back.
        q.at(1, "past");
        assert_eq!(q.next_until(8), Some("past"));
        assert_eq!(q.now(), 5);
        assert_eq!(q.next_until(100), Some("late"));
        assert_eq!(q.processed(), 5);
    }
}
