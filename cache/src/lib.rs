//! The node's segmented playback cache.
//!
//! Playback reads recorded segments from shared storage; sessions watching nearby moments of
//! one camera read the same segments. This cache keeps recently played segments in memory so
//! that such sessions cost one storage read per segment (single-flight), bounds the memory by
//! bytes rather than entries (segments vary widely in size with bitrate), reads ahead of
//! playing sessions, keeps the segments where playbacks began apart from the ones sessions
//! stream through (the `resident` module: a viewer waits only for the first), and lists
//! what it holds per camera so the cluster scheduler can send a playback request to the
//! node that already holds those segments.
//!
//! Locking: one `std::sync::Mutex` guards the resident lists and the in-flight table. It
//! is held only for map operations — never across an `.await`, never while a loader runs, and
//! never while a loader's future is created — so a slow storage read delays nobody but its
//! waiters.

mod ranges;
mod resident;
mod stats;

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::watch;

use resident::Resident;
pub use stats::CacheStats;
use stats::Counters;

/// The node's default byte budget (512 MiB), as the configuration documents it.
pub const DEFAULT_BUDGET_BYTES: usize = 512 * 1024 * 1024;

/// The cache unit: one recorded segment of one camera, named by its start time.
///
/// Only the start is in the key because a player asks for "the segment starting at t" (the
/// storage index maps any instant to that start); the segment's end comes from the value,
/// see [`Weighted::end_ms`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentKey {
    pub camera: String,
    /// Segment start, milliseconds since the Unix epoch (UTC).
    pub start_ms: i64,
}

impl SegmentKey {
    pub fn new(camera: impl Into<String>, start_ms: i64) -> Self {
        Self {
            camera: camera.into(),
            start_ms,
        }
    }
}

/// What the cache needs to know about a cached value.
///
/// The value, not the key, reports the segment's end: the end is only known once the
/// segment has been read (its last frame), while callers build keys before loading.
pub trait Weighted: Send + Sync + 'static {
    /// Bytes this value holds in memory, charged against the budget. Called once per load,
    /// when the value is inserted; it must be cheap and must not change afterwards.
    fn weight(&self) -> usize;
    /// End of the segment (ms since the epoch, exclusive), for [`SegmentCache::resident`].
    fn end_ms(&self) -> i64;
}

/// A loader's error, erased so that one in-flight table serves every error type; waiters
/// downcast it back to their own `E`.
type ErasedErr = Arc<dyn Any + Send + Sync>;
/// What a load publishes to its waiters: `None` until it finishes.
type Outcome<V> = Option<Result<Arc<V>, ErasedErr>>;

struct State<V> {
    /// The resident segments (recent and protected start lists, one byte budget).
    res: Resident<V>,
    /// Keys being loaded, each with the channel its result will be published on.
    inflight: HashMap<SegmentKey, watch::Receiver<Outcome<V>>>,
}

struct Inner<V> {
    state: Mutex<State<V>>,
    budget: usize,
    counters: Counters,
}

/// The segment cache. Cheap to clone (an `Arc`); all clones share one cache.
pub struct SegmentCache<V: Weighted> {
    inner: Arc<Inner<V>>,
}

impl<V: Weighted> Clone for SegmentCache<V> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<V: Weighted> Default for SegmentCache<V> {
    /// A cache with the node's default budget, [`DEFAULT_BUDGET_BYTES`].
    fn default() -> Self {
        Self::new(DEFAULT_BUDGET_BYTES)
    }
}

impl<V: Weighted> fmt::Debug for SegmentCache<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentCache")
            .field("stats", &self.stats())
            .finish()
    }
}

/// What a lookup under the lock found.
enum Lookup<V: Weighted> {
    Hit(Arc<V>),
    /// A load is in flight: wait on its channel.
    Wait(watch::Receiver<Outcome<V>>),
    /// Nothing resident or loading: the caller now owns the load of this key.
    Lead(LoadSlot<V>, watch::Receiver<Outcome<V>>),
}

/// Ownership of one in-flight load. Dropping it without publishing (the loader panicked,
/// or the runtime dropped the task) removes the in-flight entry, which closes the channel:
/// waiters then retry instead of waiting forever.
struct LoadSlot<V: Weighted> {
    inner: Arc<Inner<V>>,
    key: SegmentKey,
    tx: watch::Sender<Outcome<V>>,
    published: bool,
}

impl<V: Weighted> Drop for LoadSlot<V> {
    fn drop(&mut self) {
        if !self.published {
            self.inner.lock().inflight.remove(&self.key);
        }
    }
}

impl<V: Weighted> Inner<V> {
    /// Takes the state lock. A panic while it was held (only possible inside `lru` or a
    /// `HashMap`) leaves the maps consistent, so poisoning is ignored rather than spreading
    /// the panic to every playback session.
    fn lock(&self) -> MutexGuard<'_, State<V>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `demand`: a session asks and will wait (not read-ahead): a miss may shrink the
    /// start list (`Resident::demand_miss`).
    fn lookup(self: &Arc<Self>, key: &SegmentKey, demand: bool) -> Lookup<V> {
        let mut st = self.lock();
        if let Some(v) = st.res.get(key) {
            return Lookup::Hit(Arc::clone(v));
        }
        if demand && st.res.demand_miss(key) {
            self.counters.publish(&st.res);
        }
        if let Some(rx) = st.inflight.get(key) {
            return Lookup::Wait(rx.clone());
        }
        let (tx, rx) = watch::channel(None);
        st.inflight.insert(key.clone(), rx.clone());
        drop(st);
        let slot = LoadSlot {
            inner: Arc::clone(self),
            key: key.clone(),
            tx,
            published: false,
        };
        Lookup::Lead(slot, rx)
    }

    /// Ends a load under the lock: the key leaves the in-flight table and (on success)
    /// enters the LRU in the same critical section, so no caller can see it as neither
    /// resident nor loading and start a duplicate read.
    fn finish(&self, key: &SegmentKey, value: Option<(&Arc<V>, usize)>) {
        let c = &self.counters;
        let mut st = self.lock();
        st.inflight.remove(key);
        let Some((value, weight)) = value else { return };
        if weight > self.budget {
            c.oversize.fetch_add(1, Relaxed);
            return;
        }
        // A key already resident is only reloaded when waiters with a different error type
        // loaded it twice; `put` replaces it.
        let evicted = st.res.put(key.clone(), Arc::clone(value), weight);
        c.evictions.fetch_add(evicted, Relaxed);
        c.publish(&st.res);
    }
}

/// Runs one storage read and publishes its outcome to every waiter.
async fn run_load<V, E, Fut>(mut slot: LoadSlot<V>, fut: Fut)
where
    V: Weighted,
    E: Send + Sync + 'static,
    Fut: Future<Output = Result<V, E>>,
{
    let started = Instant::now();
    let result = fut.await;
    let inner = Arc::clone(&slot.inner);
    inner.counters.latency.record(started.elapsed());
    let outcome = match result {
        Ok(v) => {
            let v = Arc::new(v);
            // Weigh outside the lock: it is the value's code.
            let weight = v.weight();
            inner.finish(&slot.key, Some((&v, weight)));
            Ok(v)
        }
        Err(e) => {
            inner.counters.load_errors.fetch_add(1, Relaxed);
            inner.finish(&slot.key, None);
            Err(Arc::new(e) as ErasedErr)
        }
    };
    slot.published = true;
    slot.tx.send_replace(Some(outcome));
}

/// Waits for a load's outcome; `None` when the load ended without publishing one.
async fn wait<V: Weighted>(mut rx: watch::Receiver<Outcome<V>>) -> Outcome<V> {
    match rx.wait_for(Option::is_some).await {
        Ok(outcome) => outcome.clone(),
        Err(_) => None,
    }
}

impl<V: Weighted> SegmentCache<V> {
    /// A cache holding at most `budget_bytes` (sum of [`Weighted::weight`]), plain LRU.
    pub fn new(budget_bytes: usize) -> Self {
        Self::with_start_budget(budget_bytes, 0)
    }

    /// A cache holding at most `budget_bytes`, of which up to `start_bytes` keep the
    /// segments where playbacks began ([`protect_start`](Self::protect_start)) out of the
    /// LRU order of the rest; see the `resident` module for why.
    pub fn with_start_budget(budget_bytes: usize, start_bytes: usize) -> Self {
        let res = Resident::new(budget_bytes, start_bytes);
        let counters = Counters::default();
        counters.publish(&res);
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    res,
                    inflight: HashMap::new(),
                }),
                budget: budget_bytes,
                counters,
            }),
        }
    }

    /// Returns the segment, loading it with `load` if it is not resident.
    ///
    /// Single-flight: if a load of `key` is already in flight (another session's miss or a
    /// prefetch), this call waits for it and `load` is never called; one storage read serves
    /// every concurrent request. The read runs in its own tokio task (when called inside a
    /// runtime), so it completes and fills the cache even if every caller gives up.
    ///
    /// Errors reach every waiter as the same `Arc<E>` and are not cached: the next call
    /// loads again. A waiter whose `E` differs from the loading caller's cannot receive that
    /// error, so it retries with its own loader. If the loader panics, the caller that
    /// supplied it panics too; other waiters retry with their own loaders.
    ///
    /// Counts one hit, or one miss (plus `coalesced` when it joined a load in flight).
    pub async fn get_or_load<F, Fut, E>(&self, key: SegmentKey, load: F) -> Result<Arc<V>, Arc<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        let c = &self.inner.counters;
        let mut load = Some(load);
        let mut missed = false;
        loop {
            let (rx, leader) = match self.inner.lookup(&key, !missed) {
                Lookup::Hit(v) => {
                    if !missed {
                        c.hits.fetch_add(1, Relaxed);
                    }
                    return Ok(v);
                }
                Lookup::Wait(rx) => {
                    if !missed {
                        c.misses.fetch_add(1, Relaxed);
                        c.coalesced.fetch_add(1, Relaxed);
                    }
                    (rx, false)
                }
                Lookup::Lead(slot, rx) => {
                    if !missed {
                        c.misses.fetch_add(1, Relaxed);
                    }
                    // Only a leader takes the loader, and a leader never loops, so it is here.
                    let fut = load.take().expect("segment loader already used")();
                    c.loads.fetch_add(1, Relaxed);
                    match tokio::runtime::Handle::try_current() {
                        Ok(rt) => drop(rt.spawn(run_load(slot, fut))),
                        // Polled outside tokio: run the read in this future instead.
                        Err(_) => run_load(slot, fut).await,
                    }
                    (rx, true)
                }
            };
            missed = true;
            match wait(rx).await {
                Some(Ok(v)) => return Ok(v),
                Some(Err(e)) => match e.downcast::<E>() {
                    Ok(e) => return Err(e),
                    Err(_) => continue,
                },
                None if leader => panic!("segment loader for {key:?} panicked or was cancelled"),
                None => continue,
            }
        }
    }

    /// Returns the segment if resident, marking it most recently used.
    ///
    /// Counts a hit when found and nothing when absent: a caller that misses here goes on to
    /// [`get_or_load`](Self::get_or_load), which counts the miss, so one request is never
    /// counted as two misses.
    pub fn get(&self, key: &SegmentKey) -> Option<Arc<V>> {
        let v = self.inner.lock().res.get(key).cloned();
        if v.is_some() {
            self.inner.counters.hits.fetch_add(1, Relaxed);
        }
        v
    }

    /// Read-ahead: starts a background load of `key` unless it is resident or already
    /// loading, and returns at once. `load` is called only when a load starts.
    ///
    /// Returns whether a load was started. Outside a tokio runtime it does nothing (returns
    /// `false`): read-ahead is an optimisation and must never block or panic its caller.
    /// The outcome is only observable through the cache: a success becomes resident, an
    /// error is counted in `load_errors` and dropped. Does not count a hit or a miss.
    ///
    /// A resident key is made most recently used ([`touch`](Self::touch)): the session
    /// reading ahead will ask for it within a segment or two, and left where another
    /// session's read put it, it could be evicted before then and cost this one a wait.
    pub fn prefetch<F, Fut, E>(&self, key: SegmentKey, load: F) -> bool
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>> + Send + 'static,
        E: Send + Sync + 'static,
    {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        {
            let mut st = self.inner.lock();
            if st.res.get(&key).is_some() || st.inflight.contains_key(&key) {
                return false;
            }
        }
        // Re-checked inside `lookup`: another caller may have started a load meanwhile.
        match self.inner.lookup(&key, false) {
            Lookup::Lead(slot, _rx) => {
                let c = &self.inner.counters;
                let fut = load();
                c.loads.fetch_add(1, Relaxed);
                c.prefetches.fetch_add(1, Relaxed);
                drop(rt.spawn(run_load(slot, fut)));
                true
            }
            Lookup::Hit(_) | Lookup::Wait(_) => false,
        }
    }

    /// Inserts a value loaded elsewhere (the simulator's reads complete in virtual time),
    /// as a finished load would: evicting to the budget. Counts no hit, miss or load.
    pub fn insert_loaded(&self, key: SegmentKey, value: V) {
        let value = Arc::new(value);
        let weight = value.weight();
        self.inner.finish(&key, Some((&value, weight)));
    }

    /// A session asked for `key`, found it absent and waits for a load made elsewhere (the
    /// simulator's reads, in virtual time): what [`get_or_load`](Self::get_or_load) notes
    /// on its own miss, so the start list adapts the same way.
    pub fn demand_miss(&self, key: &SegmentKey) {
        let mut st = self.inner.lock();
        if st.res.demand_miss(key) {
            self.inner.counters.publish(&st.res);
        }
    }

    /// Read-ahead found `key` resident: makes it most recently used without counting a hit
    /// (what [`prefetch`](Self::prefetch) does; the simulator, which owns its reads, calls
    /// it directly). Returns whether it is resident.
    pub fn touch(&self, key: &SegmentKey) -> bool {
        self.inner.lock().res.get(key).is_some()
    }

    /// Whether `key` is resident. Does not count as a hit nor refresh its recency, so the
    /// scheduler and read-ahead can probe without distorting eviction.
    pub fn contains(&self, key: &SegmentKey) -> bool {
        self.inner.lock().res.contains(key)
    }

    /// Marks a resident segment as one where a playback began: it moves to the protected
    /// start list (most recent there) and outlives the segments sessions stream through.
    /// Returns whether it is protected now (false: not resident, no start budget, or the
    /// segment is larger than it). Counts no hit.
    pub fn protect_start(&self, key: &SegmentKey) -> bool {
        let mut st = self.inner.lock();
        let done = st.res.protect(key);
        self.inner.counters.publish(&st.res);
        done
    }

    /// Whether a load of `key` is in flight.
    pub fn is_loading(&self, key: &SegmentKey) -> bool {
        self.inner.lock().inflight.contains_key(key)
    }

    /// A snapshot of the counters. Takes no lock.
    pub fn stats(&self) -> CacheStats {
        self.inner.counters.snapshot(self.inner.budget)
    }

    /// The configured byte budget.
    pub fn budget_bytes(&self) -> usize {
        self.inner.budget
    }

    /// Resident segments per camera as sorted `(start_ms, end_ms)` ranges, merging segments
    /// whose gap to the previous one is at most `max_gap_ms` (overlaps always merge).
    ///
    /// The range end is the value's [`Weighted::end_ms`]. The lock is held only to copy the
    /// keys out (O(entries), a few hundred at the default budget); sorting and merging run
    /// after it is released.
    pub fn resident(&self, max_gap_ms: i64) -> BTreeMap<String, Vec<(i64, i64)>> {
        let spans: Vec<(String, i64, i64)> = {
            let st = self.inner.lock();
            st.res
                .iter()
                .map(|(k, v)| (k.camera.clone(), k.start_ms, v.end_ms()))
                .collect()
        };
        let mut by_camera: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
        for (camera, start, end) in spans {
            by_camera.entry(camera).or_default().push((start, end));
        }
        by_camera
            .into_iter()
            .map(|(camera, spans)| (camera, ranges::merge(spans, max_gap_ms)))
            .collect()
    }
}
