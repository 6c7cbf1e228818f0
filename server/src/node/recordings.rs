//! Recording status per camera, and the writer pool every recorder of the node shares.
//!
//! Kept here, not in `record`, because it is state every task reads (the API, the metrics,
//! shutdown) while only `record` writes it: `node` stays below `record`, which reaches it
//! through `Node::recordings`.

use super::writer_pool::{PoolStats, WriterPool};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tracing::{info, warn};
use vigil_storage::StorageError;

/// What the API shows about one camera's recording.
#[derive(Debug, Clone, Serialize, Default)]
pub struct RecordStatus {
    pub camera: String,
    /// "recording", "waiting" (no live stream), "error".
    pub state: String,
    pub error: Option<String>,
    pub segments_written: u64,
    pub bytes_written: u64,
    pub errors: u64,
    /// Frames lost before reaching storage: the writer pool was behind (the camera's queue
    /// was full) or the recorder fell out of the live ring.
    pub frames_dropped: u64,
}

/// Recording state of every camera of this node, and the writer pool they share.
#[derive(Default)]
pub struct Recordings {
    status: Mutex<HashMap<String, RecordStatus>>,
    pool: OnceLock<WriterPool>,
}

impl Recordings {
    pub(crate) fn get(&self, camera: &str) -> Option<RecordStatus> {
        let map = self.status.lock().unwrap_or_else(|p| p.into_inner());
        map.get(camera).cloned()
    }

    /// Changes `camera`'s status, listing it as "waiting" first if it was not yet.
    pub(crate) fn update(&self, camera: &str, f: impl FnOnce(&mut RecordStatus)) {
        let mut map = self.status.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = map.get_mut(camera) {
            return f(s);
        }
        let s = map
            .entry(camera.to_string())
            .or_insert_with(|| RecordStatus {
                camera: camera.to_string(),
                state: "waiting".into(),
                ..Default::default()
            });
        f(s);
    }

    /// The writer pool, started on first use.
    pub fn pool(&self, storage: &vigil_conf::StorageConfig) -> std::io::Result<&WriterPool> {
        if let Some(p) = self.pool.get() {
            return Ok(p);
        }
        let threads = storage.writer_threads();
        let class = match storage.writer_io_class {
            vigil_conf::WriterIoClass::Idle => vigil_storage::io_priority::WriterIoClass::Idle,
            vigil_conf::WriterIoClass::Low => vigil_storage::io_priority::WriterIoClass::Low,
            vigil_conf::WriterIoClass::Normal => vigil_storage::io_priority::WriterIoClass::Normal,
        };
        let p = WriterPool::new(
            threads,
            storage.writer_queue_total_mb.saturating_mul(1 << 20),
            std::time::Duration::from_millis(storage.writer_linger_ms),
            move || {
                // Advisory: a kernel or policy that refuses it leaves the class as it was.
                if let Err(e) = vigil_storage::io_priority::set_current_thread(class) {
                    warn!("cannot set the recording writers' I/O class: {e}");
                }
            },
        )?;
        info!(threads, ?class, "recording writer pool started");
        Ok(self.pool.get_or_init(|| p))
    }

    /// The pool's figures, once it runs.
    pub fn pool_stats(&self) -> Option<PoolStats> {
        self.pool.get().map(WriterPool::stats)
    }

    /// Finishes every queued write and stops the writer threads (at node exit, after the
    /// recorders have ended).
    pub fn shutdown(&self) {
        if let Some(p) = self.pool.get() {
            p.shutdown();
        }
    }

    pub fn all(&self) -> Vec<RecordStatus> {
        let map = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = map.values().cloned().collect();
        v.sort_by(|a, b| a.camera.cmp(&b.camera));
        v
    }

    /// The cameras being written now, sorted.
    pub fn recording(&self) -> Vec<String> {
        let map = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<String> = map
            .values()
            .filter(|s| s.state == "recording")
            .map(|s| s.camera.clone())
            .collect();
        v.sort_unstable();
        v
    }

    /// Marks the camera in error for a failed storage write.
    pub(crate) fn fail(&self, camera: &str, e: &StorageError) {
        let message = match e {
            StorageError::DiskFull { path } => format!(
                "disk full writing {}: recording stopped, retrying",
                path.display()
            ),
            other => format!("{other}"),
        };
        self.error(camera, message);
    }

    /// Marks the camera in error with `message` (counted once per distinct message in a row).
    pub(crate) fn error(&self, camera: &str, message: String) {
        warn!(camera, "recording error: {message}");
        self.update(camera, |s| {
            if s.error.as_deref() != Some(message.as_str()) {
                s.errors += 1;
            }
            s.state = "error".into();
            s.error = Some(message);
        });
    }
}
