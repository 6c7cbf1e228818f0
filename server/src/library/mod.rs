//! Access to recordings: the store's index and segments through the node's segmented cache
//! (single-flight loads, read-ahead), and the node's emulated read bandwidth (`bandwidth`).
//! Storage and cache only: the node holds it, and playback, export, HLS, migration and
//! recording read through it, so it sits below all of them.

pub mod bandwidth;

use std::sync::Arc;
use std::time::{Duration, Instant};
use vigil_cache::{SegmentCache, SegmentKey, Weighted};
use vigil_storage::{CameraIndex, Segment, SegmentMeta, StorageError, Store};

use bandwidth::ReadBandwidth;

/// Gaps between a camera's segments shorter than this are jitter, not missing video: the
/// recorded ranges the API, HLS and export show and cut are merged across them.
pub const GAP_MS: i64 = 1500;

/// A cached segment (the cache's weight and range traits live in another crate than the
/// segment type, hence the wrapper).
pub struct CachedSegment(pub Segment);

impl Weighted for CachedSegment {
    fn weight(&self) -> usize {
        self.0.approx_bytes()
    }
    fn end_ms(&self) -> i64 {
        self.0.meta.end_ms
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    #[error("{0}")]
    Storage(#[from] StorageError),
    #[error("{0}")]
    Shared(Arc<StorageError>),
    #[error("storage task failed: {0}")]
    Join(String),
    /// [`INDEX_FLIGHTS_MAX`] index reads are in flight (a hung shared volume holds them):
    /// refused at once rather than holding another blocking thread.
    #[error("storage is not answering: {0} index reads are waiting on it")]
    Busy(usize),
}

impl LibraryError {
    /// The storage error behind this one, whether this request read it or shared another's
    /// read (`Shared`).
    pub fn storage(&self) -> Option<&StorageError> {
        match self {
            LibraryError::Storage(e) => Some(e),
            LibraryError::Shared(e) => Some(e),
            _ => None,
        }
    }
}

/// Index reads (`Store::index`, a listing of the shared volume on a blocking thread) in
/// flight at once, over all cameras. A read for a camera already being read joins that
/// read (single-flight); past this many distinct ones a request is refused at once
/// (`LibraryError::Busy`), so a hung NFS share takes at most this many of tokio's blocking
/// threads, and segment reads, registry polls and retention keep theirs (issue 44, M5).
pub const INDEX_FLIGHTS_MAX: usize = 64;

/// One camera's index read in flight, shared by every request that asks meanwhile.
type IndexFlight = futures::future::Shared<
    futures::future::BoxFuture<'static, Result<CameraIndex, Arc<StorageError>>>,
>;

/// The histogram of segment read times (one sample per storage read, never per packet),
/// which the exporter gives buckets and the alert rules take a quantile of.
pub const STORAGE_READ_SECONDS: &str = "vigil_storage_read_seconds";

#[derive(Clone)]
pub struct Library {
    pub store: Store,
    pub cache: SegmentCache<CachedSegment>,
    pub read_ahead: usize,
    /// `[storage.emulate] read_latency_ms`: added to every segment read (experiments and
    /// tests of how playback rides out a slow shared volume).
    pub read_latency: Duration,
    /// `[storage.emulate] read_mbps`: the node's one read bandwidth, shared by every
    /// segment read (None = unlimited).
    pub read_bandwidth: Option<Arc<ReadBandwidth>>,
    /// Playback opens whose first segment was already in the cache, and all opens: what
    /// the similarity placement is for (requests for nearby moments meeting in one cache),
    /// seen per request rather than per segment.
    pub opens: Arc<OpenCounts>,
    /// Index reads in flight by camera (see [`INDEX_FLIGHTS_MAX`]).
    flights: Arc<std::sync::Mutex<std::collections::HashMap<String, IndexFlight>>>,
    /// Added to every index read on its blocking thread: a hung volume, in tests.
    pub index_latency: Duration,
    /// Index reads that reached the store (not joined to one in flight).
    pub index_reads: Arc<std::sync::atomic::AtomicU64>,
}

/// See [`Library::opens`].
#[derive(Debug, Default)]
pub struct OpenCounts {
    pub hits: std::sync::atomic::AtomicU64,
    pub total: std::sync::atomic::AtomicU64,
}

impl Library {
    pub fn new(
        store: Store,
        budget_bytes: usize,
        read_ahead: usize,
        read_latency: Duration,
    ) -> Library {
        Library {
            store,
            cache: SegmentCache::new(budget_bytes),
            read_ahead,
            read_latency,
            read_bandwidth: None,
            opens: Arc::default(),
            flights: Arc::default(),
            index_latency: Duration::ZERO,
            index_reads: Arc::default(),
        }
    }

    /// Keeps up to `bytes` of the segments where playbacks began out of the LRU order of
    /// the rest (`[cache] start_share`; vigil-cache's `resident` module says why).
    pub fn with_start_budget(mut self, bytes: usize) -> Library {
        self.cache = SegmentCache::with_start_budget(self.cache.budget_bytes(), bytes);
        self
    }

    /// Every segment read passes the emulated link of `mbps` megabits per second (0 = off).
    pub fn with_read_bandwidth(mut self, mbps: f64) -> Library {
        self.read_bandwidth = ReadBandwidth::new(mbps).map(Arc::new);
        self
    }

    /// The camera's index, refreshed from disk (off the async runtime): one read per
    /// camera at a time, joined by whoever asks meanwhile, at most [`INDEX_FLIGHTS_MAX`]
    /// in all.
    pub async fn index(&self, camera: &str) -> Result<CameraIndex, LibraryError> {
        let flight = self.index_flight(camera)?;
        flight.await.map_err(|e| match Arc::try_unwrap(e) {
            Ok(e) => LibraryError::Storage(e),
            Err(shared) => LibraryError::Shared(shared),
        })
    }

    /// The read of `camera`'s index in flight, or a new one.
    fn index_flight(&self, camera: &str) -> Result<IndexFlight, LibraryError> {
        use futures::FutureExt;
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        // A finished read is not reused: its result is as old as the read.
        flights.retain(|_, f| f.peek().is_none());
        if let Some(f) = flights.get(camera) {
            return Ok(f.clone());
        }
        if flights.len() >= INDEX_FLIGHTS_MAX {
            return Err(LibraryError::Busy(flights.len()));
        }
        let store = self.store.clone();
        let (name, latency) = (camera.to_string(), self.index_latency);
        let reads = self.index_reads.clone();
        let read = tokio::task::spawn_blocking(move || {
            reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if !latency.is_zero() {
                std::thread::sleep(latency);
            }
            store.index(&name)
        });
        // The read runs to its end whoever awaits it: a request that gives up does not
        // leave the next one a half-done read, and the thread is never abandoned twice.
        let flight = async move {
            match read.await {
                Ok(r) => r.map_err(Arc::new),
                Err(e) => Err(Arc::new(StorageError::Io {
                    path: Default::default(),
                    source: std::io::Error::other(e.to_string()),
                })),
            }
        }
        .boxed()
        .shared();
        // Driven to its end here too, so a flight every asker gave up on still finishes
        // and frees its place.
        tokio::spawn(flight.clone().map(|_| ()));
        flights.insert(camera.to_string(), flight.clone());
        Ok(flight)
    }

    fn key(meta: &SegmentMeta) -> SegmentKey {
        SegmentKey {
            camera: meta.camera.clone(),
            start_ms: meta.start_ms,
        }
    }

    fn loader(
        &self,
        meta: &SegmentMeta,
    ) -> impl FnOnce() -> futures::future::BoxFuture<'static, Result<CachedSegment, StorageError>>
    {
        let store = self.store.clone();
        let meta = meta.clone();
        let latency = self.read_latency;
        let bandwidth = self.read_bandwidth.clone();
        move || {
            Box::pin(async move {
                let started = Instant::now();
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                if let Some(b) = &bandwidth {
                    b.transfer(meta.bytes).await;
                }
                let camera = meta.camera.clone();
                let seg = tokio::task::spawn_blocking(move || store.read_segment(&camera, &meta))
                    .await
                    .map_err(|e| StorageError::Io {
                        path: Default::default(),
                        source: std::io::Error::other(e.to_string()),
                    })??;
                let took = started.elapsed();
                metrics::histogram!(STORAGE_READ_SECONDS).record(took.as_secs_f64());
                tracing::debug!(ms = took.as_millis() as u64, "segment loaded");
                Ok(CachedSegment(seg))
            })
        }
    }

    /// One segment, from the cache or storage (one storage read however many ask at once).
    pub async fn segment(&self, meta: &SegmentMeta) -> Result<Arc<CachedSegment>, LibraryError> {
        self.cache
            .get_or_load(Self::key(meta), self.loader(meta))
            .await
            .map_err(LibraryError::Shared)
    }

    /// The first segment of a playback being opened (DESCRIBE): [`Library::segment`],
    /// counted in [`Library::opens`] as a hit when it was resident when asked, and then
    /// protected as a start segment (the next viewer starting here waits for no read).
    pub async fn open_segment(
        &self,
        meta: &SegmentMeta,
    ) -> Result<Arc<CachedSegment>, LibraryError> {
        use std::sync::atomic::Ordering::Relaxed;
        let key = Self::key(meta);
        if self.cache.contains(&key) {
            self.opens.hits.fetch_add(1, Relaxed);
        }
        self.opens.total.fetch_add(1, Relaxed);
        let seg = self.segment(meta).await?;
        self.cache.protect_start(&key);
        Ok(seg)
    }

    /// One segment for a one-off sequential read (an export): from the cache when resident,
    /// else straight from storage without inserting it, so an hour's export does not evict
    /// the segments viewers are playing.
    pub async fn segment_once(
        &self,
        meta: &SegmentMeta,
    ) -> Result<Arc<CachedSegment>, LibraryError> {
        if let Some(hit) = self.cache.get(&Self::key(meta)) {
            return Ok(hit);
        }
        self.loader(meta)()
            .await
            .map(Arc::new)
            .map_err(LibraryError::from)
    }

    /// Start loading the segments after `meta` that a playing session will need next: none
    /// that starts at or after `end_ms`, the playback's end, when it has one (the camera's
    /// next recording is not what a bounded playback will play).
    pub fn read_ahead(&self, index: &CameraIndex, meta: &SegmentMeta, end_ms: Option<i64>) {
        for next in index.following(meta, self.read_ahead, end_ms) {
            self.cache.prefetch(Self::key(&next), self.loader(&next));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    fn library(latency: Duration) -> (tempfile::TempDir, Library) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            Store::open(dir.path(), "n1", vigil_storage::StoreConfig::default()).expect("store");
        std::fs::create_dir_all(dir.path().join("cameras").join("cam")).expect("mkdir");
        let mut lib = Library::new(store, 1 << 20, 0, Duration::ZERO);
        lib.index_latency = latency;
        (dir, lib)
    }

    /// Issue 44, M5: while the volume hangs, fifty requests for one camera's index make one
    /// read, not fifty blocking threads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_for_one_index_share_one_read() {
        let (_dir, lib) = library(Duration::from_millis(300));
        let asks: Vec<_> = (0..50)
            .map(|_| {
                let lib = lib.clone();
                tokio::spawn(async move { lib.index("cam").await.is_ok() })
            })
            .collect();
        for a in asks {
            assert!(a.await.expect("task"));
        }
        assert_eq!(lib.index_reads.load(Ordering::Relaxed), 1);
        // Once done, the next request reads afresh.
        assert!(lib.index("cam").await.is_ok());
        assert_eq!(lib.index_reads.load(Ordering::Relaxed), 2);
    }

    /// Past `INDEX_FLIGHTS_MAX` distinct reads in flight, a request is refused at once; a
    /// read every asker gave up on still ends and frees its place.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_volume_holds_at_most_the_bound_of_threads() {
        let (_dir, lib) = library(Duration::from_millis(400));
        let mut waiting = Vec::new();
        for i in 0..INDEX_FLIGHTS_MAX {
            let lib = lib.clone();
            waiting.push(tokio::spawn(
                async move { lib.index(&format!("cam-{i}")).await },
            ));
        }
        // Every flight is registered before the next line runs (index_flight is sync
        // up to its spawn); wait until the tasks have all asked.
        let deadline = Instant::now() + Duration::from_secs(5);
        while lib.flights.lock().unwrap_or_else(|p| p.into_inner()).len() < INDEX_FLIGHTS_MAX {
            assert!(Instant::now() < deadline, "the flights never started");
            tokio::task::yield_now().await;
        }
        let started = Instant::now();
        assert!(matches!(
            lib.index("one-more").await,
            Err(LibraryError::Busy(n)) if n == INDEX_FLIGHTS_MAX
        ));
        assert!(
            started.elapsed() < Duration::from_millis(200),
            "refused at once"
        );
        // Everyone gives up; the reads end anyway and the next request gets a place.
        for w in waiting {
            w.abort();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match lib.index("cam").await {
                Ok(_) => break,
                Err(LibraryError::Busy(_)) => {
                    assert!(Instant::now() < deadline, "the abandoned reads never ended");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}
