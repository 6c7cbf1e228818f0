//! A fixed pool of writer threads shared by every recorded camera.
//!
//! A thread per camera (the first design, through `spawn_blocking`) does not scale to a city:
//! 1000 cameras are 1000 threads and their stacks, and tokio's blocking pool — which playback's
//! index and segment reads also use — caps at 512 threads, so past that cameras silently queued
//! forever and playback waited behind them. Here each camera is a [`Lane`]: a byte-bounded queue
//! of messages plus the camera's writer state. A lane with queued work sits in the pool's ready
//! queue at most once, so one camera's messages are handled in order by one thread at a time,
//! and a camera whose writes are slow holds one thread while the other lanes continue on the
//! others. The pool's threads are its own, never tokio's: playback reads keep their own lane
//! (tokio's blocking pool) however slow the writers are.
//!
//! **Waking the threads.** A frame makes its idle lane ready; waking a writer for each (the
//! first design) cost a futex wake on the runtime's thread and a context switch on the
//! writer's, 25 000 a second at 1000 cameras, for a few microseconds of work each (a fifth of
//! a recording node's CPU, docs/BENCHMARKS.md). Recording tolerates delay (the disk sees a
//! segment's bytes in 256 KiB writes anyway), so a lane that becomes ready waits for the
//! pool's *bell*: a thread that, `linger` after the first lane became ready, wakes as many
//! writers as the lanes waiting call for ([`LANES_PER_WAKE`] each). Writers drain the ready
//! queue before they sleep again, so a busy pool runs its threads without waking them, and a
//! backlog of [`HURRY`] lanes wakes one at once. A writer that takes a lane with others
//! still waiting arms the bell too, so a turn held up by a slow write delays the others by
//! `linger`, not until the next frame. `linger` = 0 wakes a writer per ready lane.
//!
//! It lives under `node` because the node owns the one pool (in `Node::recordings`) that
//! every recorder shares; it knows nothing of recording itself (`record::writer` is the
//! [`LaneWriter`] it runs).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Messages a lane handles per turn before yielding its thread to the next ready lane, so a
/// camera with a long backlog cannot starve the others.
const TURN: usize = 64;

/// `[storage] writer_linger_ms` by default: what a ready lane waits at most for the bell.
pub const DEFAULT_LINGER: Duration = Duration::from_millis(5);

/// Ready lanes per writer the bell wakes (a turn takes a few microseconds; a thread handles
/// this many within a small part of the linger).
const LANES_PER_WAKE: usize = 32;

/// Ready lanes that wake a writer at once, without the bell (a backlog the awake threads are
/// not getting through).
const HURRY: usize = 256;

/// What a lane's thread does with each message, in order.
pub trait LaneWriter: Send + 'static {
    type Msg: Send + 'static;
    fn handle(&mut self, msg: Self::Msg);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a queue push/pop: a panic cannot leave it half done.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

trait Runnable: Send + Sync {
    /// Handles one turn of queued messages; true when more are queued.
    fn turn(&self) -> bool;
}

#[derive(Default)]
struct Ready {
    lanes: VecDeque<Arc<dyn Runnable>>,
    stop: bool,
    /// The bell will ring (a lane became ready since it last rang).
    bell_armed: bool,
}

struct Shared {
    ready: Mutex<Ready>,
    /// Writers wait here.
    wake: Condvar,
    /// The bell waits here for a lane to become ready.
    bell: Condvar,
    linger: Duration,
    threads: usize,
    /// Times a writer woke from waiting for work.
    wakes: AtomicU64,
    /// Threads handling a lane right now.
    busy: AtomicUsize,
    /// Bytes queued in all lanes.
    queued_bytes: AtomicU64,
    /// Messages refused because their lane or the pool was full.
    refused: AtomicU64,
    /// Bound on `queued_bytes` over all lanes.
    limit_bytes: u64,
}

impl Shared {
    /// A lane became ready: a writer takes it when the bell rings, at once past a backlog.
    fn schedule(&self, lane: Arc<dyn Runnable>) {
        let mut ready = lock(&self.ready);
        ready.lanes.push_back(lane);
        if self.linger.is_zero() || ready.lanes.len() >= HURRY {
            drop(ready);
            self.wake.notify_one();
        } else if !std::mem::replace(&mut ready.bell_armed, true) {
            drop(ready);
            self.bell.notify_one();
        }
    }
}

/// How many writers the bell wakes for `ready` waiting lanes (pure).
fn writers_to_wake(ready: usize, threads: usize) -> usize {
    ready.div_ceil(LANES_PER_WAKE).min(threads)
}

/// The bell: `linger` after a lane became ready, wakes the writers the ready lanes call for.
fn ring(shared: &Shared) {
    let mut ready = lock(&shared.ready);
    loop {
        while !ready.bell_armed && !ready.stop {
            ready = shared.bell.wait(ready).unwrap_or_else(|p| p.into_inner());
        }
        if ready.stop {
            return;
        }
        let due = Instant::now() + shared.linger;
        while let Some(left) = due
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        {
            if ready.stop {
                return;
            }
            ready = shared
                .bell
                .wait_timeout(ready, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        ready.bell_armed = false;
        for _ in 0..writers_to_wake(ready.lanes.len(), shared.threads) {
            shared.wake.notify_one();
        }
    }
}

/// Figures for the API and metrics.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct PoolStats {
    pub threads: usize,
    pub busy: usize,
    pub ready_lanes: usize,
    pub queued_bytes: u64,
    pub refused: u64,
    /// Times a writer woke from waiting for work (the bell keeps this far below the frames).
    pub wakes: u64,
}

/// The writer threads.
pub struct WriterPool {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    count: usize,
}

/// The bell's thread, joined after the writers.
fn spawn_bell(shared: &Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    let shared = shared.clone();
    std::thread::Builder::new()
        .name("vigil-writer-bell".into())
        .spawn(move || ring(&shared))
}

impl WriterPool {
    /// Starts `threads` writer threads (at least one), holding at most `limit_bytes` queued
    /// over all lanes (each lane has its own limit too), a ready lane waiting at most
    /// `linger` for a writer (module doc). Each thread first runs `init` (the recorder's I/O
    /// priority class).
    pub fn new(
        threads: usize,
        limit_bytes: u64,
        linger: Duration,
        init: impl Fn() + Send + Sync + 'static,
    ) -> std::io::Result<WriterPool> {
        let init = Arc::new(init);
        let count = threads.max(1);
        let shared = Arc::new(Shared {
            ready: Mutex::default(),
            wake: Condvar::new(),
            bell: Condvar::new(),
            linger,
            threads: count,
            wakes: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            queued_bytes: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            limit_bytes,
        });
        let mut handles = Vec::with_capacity(count + 1);
        for i in 0..count {
            let shared = shared.clone();
            let init = init.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("vigil-writer-{i}"))
                    .spawn(move || {
                        init();
                        work(&shared)
                    })?,
            );
        }
        // Last, so the writers are joined before it (they may still schedule lanes).
        handles.push(spawn_bell(&shared)?);
        Ok(WriterPool {
            shared,
            threads: Mutex::new(handles),
            count,
        })
    }

    /// A new lane for `writer`, holding at most `limit_bytes` of queued messages.
    pub fn lane<W: LaneWriter>(&self, writer: W, limit_bytes: usize) -> Arc<Lane<W>> {
        Arc::new(Lane {
            state: Mutex::new(LaneState {
                queue: VecDeque::new(),
                bytes: 0,
                scheduled: false,
            }),
            writer: Mutex::new(writer),
            pool: self.shared.clone(),
            limit_bytes,
        })
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            threads: self.count,
            busy: self.shared.busy.load(Ordering::Relaxed),
            ready_lanes: lock(&self.shared.ready).lanes.len(),
            queued_bytes: self.shared.queued_bytes.load(Ordering::Relaxed),
            refused: self.shared.refused.load(Ordering::Relaxed),
            wakes: self.shared.wakes.load(Ordering::Relaxed),
        }
    }

    /// Lets the threads finish every queued message, then joins them.
    pub fn shutdown(&self) {
        lock(&self.shared.ready).stop = true;
        self.shared.wake.notify_all();
        self.shared.bell.notify_all();
        for t in lock(&self.threads).drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for WriterPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn work(shared: &Shared) {
    loop {
        let lane = {
            let mut ready = lock(&shared.ready);
            loop {
                if let Some(l) = ready.lanes.pop_front() {
                    // Lanes left behind this one: if its turn is long (a slow disk), the bell
                    // wakes another writer for them.
                    if !ready.lanes.is_empty()
                        && !shared.linger.is_zero()
                        && !std::mem::replace(&mut ready.bell_armed, true)
                    {
                        shared.bell.notify_one();
                    }
                    break l;
                }
                if ready.stop {
                    return;
                }
                ready = shared.wake.wait(ready).unwrap_or_else(|p| p.into_inner());
                shared.wakes.fetch_add(1, Ordering::Relaxed);
            }
        };
        shared.busy.fetch_add(1, Ordering::Relaxed);
        let more = lane.turn();
        shared.busy.fetch_sub(1, Ordering::Relaxed);
        if more {
            // This thread (or another awake one) takes it again: no one to wake.
            lock(&shared.ready).lanes.push_back(lane);
        }
    }
}

struct LaneState<M> {
    queue: VecDeque<(M, usize)>,
    /// Bytes queued, including the turn being handled.
    bytes: usize,
    /// In the ready queue or being handled.
    scheduled: bool,
}

/// One camera's queue into the pool.
pub struct Lane<W: LaneWriter> {
    state: Mutex<LaneState<W::Msg>>,
    /// Locked only by the one thread handling the lane's turn.
    writer: Mutex<W>,
    pool: Arc<Shared>,
    limit_bytes: usize,
}

impl<W: LaneWriter> Lane<W> {
    /// Queues a message of `size` bytes; gives it back when the lane or the pool already
    /// holds its limit (the writers are behind: the caller decides what to drop and reports
    /// it).
    pub fn push(self: &Arc<Self>, msg: W::Msg, size: usize) -> Result<(), W::Msg> {
        self.enqueue(msg, size, false)
    }

    /// Queues a message whatever the lane holds (control messages that must not be lost).
    pub fn push_always(self: &Arc<Self>, msg: W::Msg) {
        let _ = self.enqueue(msg, 0, true);
    }

    fn enqueue(self: &Arc<Self>, msg: W::Msg, size: usize, force: bool) -> Result<(), W::Msg> {
        let schedule = {
            let mut st = lock(&self.state);
            let pool_full = self.pool.queued_bytes.load(Ordering::Relaxed) + size as u64
                > self.pool.limit_bytes;
            if !force && st.bytes > 0 && (st.bytes + size > self.limit_bytes || pool_full) {
                self.pool.refused.fetch_add(1, Ordering::Relaxed);
                return Err(msg);
            }
            st.queue.push_back((msg, size));
            st.bytes += size;
            !std::mem::replace(&mut st.scheduled, true)
        };
        self.pool
            .queued_bytes
            .fetch_add(size as u64, Ordering::Relaxed);
        if schedule {
            self.pool.schedule(self.clone());
        }
        Ok(())
    }

    /// Bytes queued and not yet handled.
    pub fn queued_bytes(&self) -> usize {
        lock(&self.state).bytes
    }
}

impl<W: LaneWriter> Runnable for Lane<W> {
    fn turn(&self) -> bool {
        let batch: Vec<(W::Msg, usize)> = {
            let mut st = lock(&self.state);
            let n = st.queue.len().min(TURN);
            st.queue.drain(..n).collect()
        };
        {
            let mut writer = lock(&self.writer);
            for (msg, size) in batch {
                writer.handle(msg);
                lock(&self.state).bytes -= size;
                self.pool
                    .queued_bytes
                    .fetch_sub(size as u64, Ordering::Relaxed);
            }
        }
        let mut st = lock(&self.state);
        if st.queue.is_empty() {
            st.scheduled = false;
            false
        } else {
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Records what it handled; blocks on `gate` for messages marked slow.
    struct Probe {
        id: usize,
        seen: mpsc::Sender<(usize, u32)>,
        gate: Arc<(Mutex<bool>, Condvar)>,
    }

    impl LaneWriter for Probe {
        type Msg = (u32, bool);
        fn handle(&mut self, (n, slow): (u32, bool)) {
            if slow {
                let (open, cv) = &*self.gate;
                let mut o = lock(open);
                while !*o {
                    o = cv.wait(o).unwrap_or_else(|p| p.into_inner());
                }
            }
            let _ = self.seen.send((self.id, n));
        }
    }

    fn gate() -> Arc<(Mutex<bool>, Condvar)> {
        Arc::new((Mutex::new(false), Condvar::new()))
    }

    fn open(g: &(Mutex<bool>, Condvar)) {
        *lock(&g.0) = true;
        g.1.notify_all();
    }

    fn probe_lane(
        pool: &WriterPool,
        id: usize,
        seen: &mpsc::Sender<(usize, u32)>,
        gate: &Arc<(Mutex<bool>, Condvar)>,
        limit: usize,
    ) -> Arc<Lane<Probe>> {
        pool.lane(
            Probe {
                id,
                seen: seen.clone(),
                gate: gate.clone(),
            },
            limit,
        )
    }

    #[test]
    fn lanes_keep_order_and_a_slow_lane_holds_one_thread_only() {
        let pool = WriterPool::new(2, u64::MAX, DEFAULT_LINGER, || {}).unwrap();
        let (tx, rx) = mpsc::channel();
        let g = gate();
        let slow = probe_lane(&pool, 0, &tx, &g, 1 << 20);
        slow.push((0, true), 1).unwrap();
        let fast: Vec<_> = (1..=20)
            .map(|id| probe_lane(&pool, id, &tx, &g, 1 << 20))
            .collect();
        for n in 0..200u32 {
            for l in &fast {
                l.push((n, false), 1).unwrap();
            }
        }
        // Every fast message arrives while the slow lane is still blocked.
        let mut next = [0u32; 21];
        for _ in 0..20 * 200 {
            let (id, n) = rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap();
            assert_ne!(id, 0, "the slow lane ran before its gate opened");
            assert_eq!(n, next[id], "lane {id} out of order");
            next[id] += 1;
        }
        open(&g);
        assert_eq!(
            rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap(),
            (0, 0)
        );
        pool.shutdown();
    }

    #[test]
    fn full_lane_refuses_but_control_messages_pass() {
        let pool = WriterPool::new(1, u64::MAX, Duration::ZERO, || {}).unwrap();
        let (tx, rx) = mpsc::channel();
        let g = gate();
        let lane = probe_lane(&pool, 0, &tx, &g, 100);
        lane.push((0, true), 60).unwrap(); // blocks the only thread
        lane.push((1, false), 40).unwrap();
        assert_eq!(lane.push((2, false), 1), Err((2, false)));
        lane.push_always((3, false));
        assert_eq!(pool.stats().refused, 1);
        open(&g);
        let got: Vec<_> = (0..3)
            .map(|_| {
                rx.recv_timeout(std::time::Duration::from_secs(30))
                    .unwrap()
                    .1
            })
            .collect();
        assert_eq!(got, vec![0, 1, 3]);
        pool.shutdown();
        assert_eq!(pool.stats().queued_bytes, 0);
        assert_eq!(lane.queued_bytes(), 0);
    }

    #[test]
    fn the_pool_bound_holds_over_all_lanes() {
        let pool = WriterPool::new(1, 250, DEFAULT_LINGER, || {}).unwrap();
        let (tx, rx) = mpsc::channel();
        let g = gate();
        let lanes: Vec<_> = (0..5)
            .map(|id| probe_lane(&pool, id, &tx, &g, 1000))
            .collect();
        // Each lane's first message is always taken (a lane is never starved by the others);
        // then the pool's 250 bytes bound the rest.
        for l in &lanes {
            l.push((0, true), 50).unwrap();
        }
        assert_eq!(pool.stats().queued_bytes, 250);
        assert!(lanes[0].push((1, false), 10).is_err());
        open(&g);
        for _ in 0..5 {
            rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap();
        }
        pool.shutdown();
    }

    #[test]
    fn the_bell_wakes_a_writer_per_lanes_per_wake_lanes_up_to_the_threads() {
        assert_eq!(writers_to_wake(0, 16), 0);
        assert_eq!(writers_to_wake(1, 16), 1);
        assert_eq!(writers_to_wake(LANES_PER_WAKE, 16), 1);
        assert_eq!(writers_to_wake(LANES_PER_WAKE + 1, 16), 2);
        assert_eq!(writers_to_wake(1000, 16), 16);
    }

    /// Rounds of one frame on each of 100 lanes, each round written (in order) before the
    /// next comes, as a camera's frames come between writes: each round wakes the sleeping
    /// writers once through the bell, a few threads, not one wake per frame.
    #[test]
    fn frames_over_many_lanes_wake_the_writers_once_per_bell_not_per_frame() {
        let pool = WriterPool::new(4, u64::MAX, Duration::from_millis(50), || {}).unwrap();
        let (tx, rx) = mpsc::channel();
        let g = gate();
        let lanes: Vec<_> = (0..100)
            .map(|id| probe_lane(&pool, id, &tx, &g, 1 << 20))
            .collect();
        for n in 0..10u32 {
            for l in &lanes {
                l.push((n, false), 1).unwrap();
            }
            let mut seen = [false; 100];
            for _ in 0..100 {
                let (id, m) = rx.recv_timeout(Duration::from_secs(30)).unwrap();
                assert_eq!(m, n, "lane {id} out of order");
                seen[id] = true;
            }
            assert!(seen.iter().all(|s| *s));
        }
        // One ring per round (a round's frames all come before its bell), ≤ 4 writers each;
        // a wake per frame would be up to 1000.
        let wakes = pool.stats().wakes;
        assert!(wakes <= 64, "{wakes} wakes for 1000 frames in 10 rounds");
        pool.shutdown();
        assert_eq!(pool.stats().queued_bytes, 0);
    }
}
