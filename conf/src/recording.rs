//! `[storage]`, `[cache]` and `[playback]`: where recordings are written and kept, the
//! playback cache, and trick play.

use crate::ConfigError;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Recording root: a directory on the shared volume (iSCSI LUN or NFS share) that every
    /// node mounts at the same path. Relative paths are taken from the working directory.
    pub root: std::path::PathBuf,
    /// Record live cameras at all (each camera can opt out with `record = false`).
    pub enabled: bool,
    /// Target segment length; segments are cut at the first keyframe past it.
    pub segment_secs: f64,
    /// Delete recordings older than this (0 = keep forever).
    pub retention_max_age_hours: f64,
    /// Delete the oldest recordings while the root holds more than this (0 = no limit).
    pub retention_max_bytes: u64,
    /// Per-camera write lease lifetime on the shared root (renewed every third of it). A
    /// node that dies keeps its cameras' leases this long, so another node's recording of a
    /// re-bound camera starts at most this late (cluster).
    pub lease_ttl_secs: f64,
    /// Longest an RTSP request of a recording (DESCRIBE, SETUP, PLAY) waits for the storage
    /// it needs (the camera's index, a segment). Past it the request is answered 503 and
    /// the read goes on in the background: a hung shared volume costs answers, never the
    /// client's connection. A playing session's sender waits as long as its viewer stays.
    pub request_read_timeout_ms: u64,
    /// Storage emulation for experiments and tests only: makes the local disk behave like a
    /// slower shared volume. Off (all zero) by default.
    pub emulate: StorageEmulation,
    /// Threads writing recordings, shared by all cameras (0 = 8 per core, 8 to 32).
    pub writer_threads: usize,
    /// Frames queued per camera for the writer threads, in KiB; past it the camera drops
    /// frames up to its next keyframe and shows an error (the writers are behind the disk).
    pub writer_queue_kb: u64,
    /// Bound on what all cameras queue together, in MiB (the node's memory when the disk
    /// cannot keep up with every camera); past it cameras drop frames the same way.
    pub writer_queue_total_mb: u64,
    /// A camera's frames wait at most this many ms for a writer thread: one wake of the
    /// pool's threads serves every camera whose frames came in meanwhile, instead of one
    /// wake per frame (0 = wake a writer for each). At most 1000.
    pub writer_linger_ms: u64,
    /// Group commit: segments closed within this many ms are made durable by one sync
    /// together and listed after it (a crash of the machine loses at most that batch, one
    /// segment per camera, besides the segments being written). 0 = one `fsync` per segment
    /// by its writer, which caps recording at the disk's commit rate (docs/BENCHMARKS.md).
    pub commit_interval_ms: u64,
    /// How a group commit pass syncs: `syncfs` (one sync of the root's file system, best on
    /// a volume dedicated to recordings) or `files` (`fdatasync` of each segment of the
    /// batch, for a root that shares its file system with other busy writers).
    pub commit_sync: CommitSync,
    /// The recorder starts the write-back of each segment every this many KiB it wrote,
    /// from the writer's thread and in its I/O class (0 = leave it to the kernel's flusher).
    /// Off by default: it did not measure better (docs/BENCHMARKS.md, "Recording at the
    /// disk's bandwidth").
    pub writeback_kb: u64,
    /// Write segments past the page cache (`O_DIRECT`) where the file system allows it (else
    /// through it, as with `false`). Off by default: it measured no better than the page
    /// cache once the writers wake per linger, and each 256 KiB write then waits for the
    /// device, so a slow LUN slows the writers (docs/BENCHMARKS.md, "Recording at the disk's
    /// bandwidth").
    pub direct_io: bool,
    /// I/O priority class of the writer threads: `idle` (the disk serves playback reads
    /// first; recording is delayed by reads, never starved; lease renewals leave the class),
    /// `low` (best effort, lowest level) or `normal`.
    pub writer_io_class: WriterIoClass,
    /// Which live cameras are recorded: `all`, or only those `listed` as `[[camera]]`.
    /// Unset: `listed` when `[auth]` is on, `all` otherwise (see `Config::record_mode`).
    pub record: Option<RecordMode>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageEmulation {
    /// Added to every segment read for playback (a cache miss or read-ahead), as the
    /// latency of a loaded IPSAN LUN would be. 0 = none.
    pub read_latency_ms: u64,
    /// Added to every frame the recorder writes (on the writer pool's thread), as a slow
    /// or failing LUN would: recording falls behind and drops visibly; live viewing must
    /// not notice. 0 = none.
    pub write_latency_ms: u64,
    /// The node's read bandwidth to the volume in Mb/s, shared by all its segment reads at
    /// once (concurrent reads queue for it as they would on one loaded LUN's link): a read
    /// of B bytes takes at least 8·B / (read_mbps·10⁶) s, plus the other reads ahead of it.
    /// 0 = unlimited.
    pub read_mbps: f64,
}

impl StorageEmulation {
    /// Bounds of `read_mbps` when on: below 0.1 Mb/s the limiter's 10 ms refill would be
    /// a handful of bytes (its rounding a visible error), above 1 Tb/s it emulates nothing.
    pub const READ_MBPS_RANGE: (f64, f64) = (0.1, 1_000_000.0);

    fn validate(&self) -> Result<(), ConfigError> {
        if self.read_latency_ms > 60_000 {
            return Err(ConfigError::Invalid(
                "storage.emulate.read_latency_ms must be at most 60000".into(),
            ));
        }
        let (lo, hi) = Self::READ_MBPS_RANGE;
        let r = self.read_mbps;
        if !(r == 0.0 || (r >= lo && r <= hi)) {
            return Err(ConfigError::Invalid(format!(
                "storage.emulate.read_mbps must be 0 (off) or between {lo} and {hi} Mb/s, not {r}"
            )));
        }
        Ok(())
    }
}

/// `[storage] commit_interval_ms` by default (`vigil_storage::DEFAULT_COMMIT_INTERVAL`).
pub const DEFAULT_COMMIT_INTERVAL_MS: u64 = 200;

/// See [`StorageConfig::writer_io_class`].
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WriterIoClass {
    #[default]
    Idle,
    Low,
    Normal,
}

/// See [`StorageConfig::commit_sync`].
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CommitSync {
    #[default]
    Syncfs,
    Files,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RecordMode {
    All,
    Listed,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            root: "./data".into(),
            enabled: true,
            segment_secs: 4.0,
            retention_max_age_hours: 0.0,
            retention_max_bytes: 0,
            lease_ttl_secs: 15.0,
            request_read_timeout_ms: 10_000,
            emulate: StorageEmulation::default(),
            writer_threads: 0,
            writer_queue_kb: 4096,
            writer_queue_total_mb: 1024,
            writer_linger_ms: 5,
            commit_interval_ms: DEFAULT_COMMIT_INTERVAL_MS,
            commit_sync: CommitSync::Syncfs,
            writeback_kb: 0,
            direct_io: false,
            writer_io_class: WriterIoClass::Idle,
            record: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Memory budget of the segmented playback cache.
    pub budget_mb: u64,
    /// Segments loaded ahead of each playing session.
    pub read_ahead_segments: usize,
    /// Share of the budget that keeps the segments where playbacks began out of the LRU
    /// order of the segments sessions stream through (vigil-cache's `resident` module:
    /// only a playback's first segment is on the viewer's critical path).
    pub start_share: f64,
}

/// `[cache] start_share` by default: a quarter of the budget, room for the first segments
/// of 128 recordings at 2 Mb/s and 4 s segments in the default 512 MiB.
pub const DEFAULT_CACHE_START_SHARE: f64 = 0.25;

/// Why a `start_share` is not usable, if it is not: 0 (off) up to 0.9 (the rest of the
/// budget must still hold the segments being played and read ahead).
pub fn check_cache_start_share(share: f64) -> Result<(), String> {
    if (0.0..=0.9).contains(&share) {
        Ok(())
    } else {
        Err(format!("{share} is not between 0 and 0.9"))
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            budget_mb: 512,
            read_ahead_segments: 2,
            start_share: DEFAULT_CACHE_START_SHARE,
        }
    }
}

impl CacheConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check_cache_start_share(self.start_share)
            .map_err(|e| ConfigError::Invalid(format!("cache.start_share: {e}")))
    }

    /// The protected start list's size in bytes.
    pub fn start_bytes(&self) -> usize {
        (self.budget_mb.saturating_mul(1 << 20) as f64 * self.start_share) as usize
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PlaybackConfig {
    /// Above this Scale only keyframes are sent (trick play).
    pub keyframes_only_above_scale: f64,
    /// A playback start up to this long before a camera's first recording starts at the
    /// first recorded frame (a user typing whole seconds); earlier starts get 404.
    pub start_tolerance_secs: f64,
}

impl Default for PlaybackConfig {
    fn default() -> Self {
        Self {
            keyframes_only_above_scale: 2.0,
            start_tolerance_secs: 10.0,
        }
    }
}

impl StorageConfig {
    /// The writer pool size: `writer_threads`, or when 0 eight per core within 8..=32. The
    /// threads mostly wait on the `fsync` that closes every segment, so their number is the
    /// disk's write concurrency, not CPU: 2000 cameras × 512 kb/s on a 2-core machine wrote
    /// 49 MB/s with 4 threads and 94 MB/s with 16 (docs/BENCHMARKS.md).
    pub fn writer_threads(&self) -> usize {
        if self.writer_threads > 0 {
            return self.writer_threads;
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        (cores * 8).clamp(8, 32)
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(self.segment_secs >= 0.5 && self.segment_secs <= 60.0) {
            return Err(ConfigError::Invalid(
                "storage.segment_secs must be between 0.5 and 60".into(),
            ));
        }
        if !(self.lease_ttl_secs >= 1.0 && self.lease_ttl_secs <= 3600.0) {
            return Err(ConfigError::Invalid(
                "storage.lease_ttl_secs must be between 1 and 3600".into(),
            ));
        }
        if !(100..=600_000).contains(&self.request_read_timeout_ms) {
            return Err(ConfigError::Invalid(
                "storage.request_read_timeout_ms must be between 100 and 600000".into(),
            ));
        }
        self.emulate.validate()?;
        if self.writer_threads > 1024 {
            return Err(ConfigError::Invalid(
                "storage.writer_threads must be at most 1024".into(),
            ));
        }
        if self.writer_linger_ms > 1000 {
            return Err(ConfigError::Invalid(
                "storage.writer_linger_ms must be at most 1000".into(),
            ));
        }
        if self.writer_queue_total_mb < 16 {
            return Err(ConfigError::Invalid(
                "storage.writer_queue_total_mb must be at least 16".into(),
            ));
        }
        if self.commit_interval_ms > 2_000 {
            return Err(ConfigError::Invalid(
                "storage.commit_interval_ms must be at most 2000 (a machine crash loses what \
                 waits this long)"
                    .into(),
            ));
        }
        if self.writer_queue_kb < 64 {
            return Err(ConfigError::Invalid(
                "storage.writer_queue_kb must be at least 64".into(),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExportConfig {
    /// Longest range one export may cover; a longer request gets 400. Bounds how long one
    /// request keeps the storage busy and how large the faststart `moov` grows (it holds
    /// every sample: about 20 bytes per frame in memory, 43 MB for a day of 25 fps video).
    pub max_range_secs: f64,
    /// Segments read ahead of the one being sent (each is in memory while it waits).
    pub read_ahead: usize,
    /// Exports a node streams at once; one more is answered 503 at once. Each reads up to
    /// `max_range_secs` of segments from the shared volume, which recording writes to.
    pub max_concurrent: usize,
}

impl Default for ExportConfig {
    fn default() -> Self {
        Self {
            max_range_secs: 86_400.0,
            read_ahead: 2,
            max_concurrent: 8,
        }
    }
}

impl ExportConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(1.0..=7.0 * 86_400.0).contains(&self.max_range_secs) {
            return Err(ConfigError::Invalid(
                "export.max_range_secs must be between 1 and 604800".into(),
            ));
        }
        if !(1..=16).contains(&self.read_ahead) {
            return Err(ConfigError::Invalid(
                "export.read_ahead must be between 1 and 16".into(),
            ));
        }
        if !(1..=1024).contains(&self.max_concurrent) {
            return Err(ConfigError::Invalid(
                "export.max_concurrent must be between 1 and 1024".into(),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HlsConfig {
    /// Live segments are cut at the first keyframe after this long (a 1 s GOP gives 1 s
    /// segments: a player 3 segments behind the live edge is about 3 s late).
    pub segment_secs: f64,
    /// Live segments kept in memory and listed (per camera being watched over HLS).
    pub live_segments: usize,
    /// A camera's live HLS stops this long after its last request.
    pub idle_secs: f64,
}

impl Default for HlsConfig {
    fn default() -> Self {
        Self {
            segment_secs: 1.0,
            live_segments: 6,
            idle_secs: 30.0,
        }
    }
}

impl HlsConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.2..=30.0).contains(&self.segment_secs) {
            return Err(ConfigError::Invalid(
                "hls.segment_secs must be between 0.2 and 30".into(),
            ));
        }
        if !(3..=100).contains(&self.live_segments) {
            return Err(ConfigError::Invalid(
                "hls.live_segments must be between 3 and 100".into(),
            ));
        }
        if !(1.0..=3600.0).contains(&self.idle_secs) {
            return Err(ConfigError::Invalid(
                "hls.idle_secs must be between 1 and 3600".into(),
            ));
        }
        Ok(())
    }
}

impl PlaybackConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=86_400.0).contains(&self.start_tolerance_secs) {
            return Err(ConfigError::Invalid(
                "playback.start_tolerance_secs must be between 0 and 86400".into(),
            ));
        }
        Ok(())
    }
}
