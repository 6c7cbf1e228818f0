//! Retention: what [`Store::enforce_retention`] deletes, by age and by bytes over all cameras.

use crate::error::StorageError;
use crate::index::SegmentMeta;
use crate::store::{lock, Store};
use std::collections::{BinaryHeap, HashSet};
use std::fs;
use std::io;

/// What [`Store::enforce_retention`] deleted.
#[derive(Debug, Default, Clone)]
pub struct RetentionReport {
    pub deleted_segments: u64,
    pub deleted_bytes: u64,
    /// Cameras that lost segments, sorted.
    pub cameras: Vec<String>,
}

impl Store {
    /// Deletes segments that ended before `now - retention_max_age`, then the oldest segments
    /// across all cameras (k-way merge by start time, so only what is deleted is visited)
    /// while the total exceeds `retention_max_bytes`. Several nodes may run it at once: a
    /// file already deleted by another is skipped.
    pub fn enforce_retention(&self, now_unix_ms: i64) -> Result<RetentionReport, StorageError> {
        let cfg = &self.inner.config;
        let mut report = RetentionReport::default();
        let mut cams = HashSet::new();
        let mut indexes = Vec::new();
        for cam in self.cameras()? {
            indexes.push((cam.clone(), self.index(&cam)?));
        }
        let mut total: u64 = indexes.iter().map(|(_, ix)| ix.total_bytes()).sum();
        let per_camera = lock(&self.inner.per_camera).clone();
        let cutoffs: Vec<Option<i64>> = indexes
            .iter()
            .map(|(cam, _)| {
                per_camera
                    .get(cam)
                    .and_then(|s| s.retention_max_age)
                    .unwrap_or(cfg.retention_max_age)
                    .map(|a| now_unix_ms.saturating_sub(a.as_millis() as i64))
            })
            .collect();
        // Min-heap over each camera's oldest remaining segment.
        let mut heap = BinaryHeap::new();
        let mut iters: Vec<_> = indexes.iter().map(|(_, ix)| ix.segments()).collect();
        let mut pending: Vec<Option<SegmentMeta>> = iters.iter_mut().map(|it| it.next()).collect();
        for (i, m) in pending.iter().enumerate() {
            if let Some(m) = m {
                heap.push(std::cmp::Reverse((m.start_ms, i)));
            }
        }
        while let Some(std::cmp::Reverse((_, i))) = heap.pop() {
            let Some(m) = pending[i].take() else { continue };
            let too_old = cutoffs[i].is_some_and(|c| m.end_ms < c);
            let too_big = cfg.retention_max_bytes.is_some_and(|max| total > max);
            if !too_old && !too_big {
                // This camera's later segments are newer and the total only shrinks, so the
                // camera is done; other cameras may still hold segments past the age limit.
                continue;
            }
            if self.delete_segment(&m)? {
                report.deleted_segments += 1;
                report.deleted_bytes += m.bytes;
                cams.insert(m.camera.clone());
            }
            total = total.saturating_sub(m.bytes);
            pending[i] = iters[i].next();
            if let Some(n) = &pending[i] {
                heap.push(std::cmp::Reverse((n.start_ms, i)));
            }
        }
        report.cameras = cams.into_iter().collect();
        report.cameras.sort();
        Ok(report)
    }

    /// Deletes a segment file and its index entry; false if it was already gone.
    fn delete_segment(&self, m: &SegmentMeta) -> Result<bool, StorageError> {
        let path = self.inner.root.join(&m.file);
        let deleted = match fs::remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(StorageError::from_io(&path, e)),
        };
        let cache = self.cache(&m.camera);
        lock(&cache).index.remove(m.start_ms);
        // Drop the hour directory once empty (fails harmlessly while it still has files).
        if let Some(parent) = path.parent() {
            let _ = fs::remove_dir(parent);
        }
        Ok(deleted)
    }
}
