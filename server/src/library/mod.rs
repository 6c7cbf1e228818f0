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
}

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

    /// The camera's index, refreshed from disk (off the async runtime).
    pub async fn index(&self, camera: &str) -> Result<CameraIndex, LibraryError> {
        let store = self.store.clone();
        let camera = camera.to_string();
        tokio::task::spawn_blocking(move || store.index(&camera))
            .await
            .map_err(|e| LibraryError::Join(e.to_string()))?
            .map_err(LibraryError::from)
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
