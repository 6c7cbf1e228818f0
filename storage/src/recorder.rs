//! [`Recorder`]: writes one camera's frames into keyframe-aligned segments while holding the
//! camera's lease.
//!
//! A segment is streamed into `cameras/<cam>/.tmp/<start>-<node>-<token>.seg.tmp`, then on
//! close: trailer, flush, lease confirmation, and the file goes to the store's group commit
//! (`commit`: one sync for every segment closed in the interval, then the renames), which
//! the recorder does not wait for; it waits only before handing over its next segment, so a
//! camera has at most one segment waiting. Without group commit (interval 0) the close itself
//! does `fsync`, lease confirmation, `rename` into its hour directory, `fsync` of that
//! directory. Readers only list renamed files, so they never see a torn segment, and a
//! `kill -9` loses at most the open temp file (removed by the next `Store::open` or
//! recorder, which rename the closed ones still waiting).

use crate::commit::{Pending, Ticket};
use crate::error::{IoContext, StorageError};
use crate::format::{encode_header, Frame, SegmentEncoder, StreamHeader};
use crate::index::{hour_dir_name, segment_file_name, SegmentMeta};
use crate::lease::{sync_dir, unique_token, Lease};
use crate::segment_file::{AlignedBuf, SegmentFile};
use crate::store::{lock, Store, CAMERAS_DIR, TMP_DIR};
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Without a keyframe, a segment is still cut once it is this many times the target length
/// (the next one then starts on a non-keyframe; playback starts at its first frame).
const MAX_SEGMENT_FACTOR: i64 = 8;

/// The segment being written.
struct OpenSegment {
    tmp: PathBuf,
    enc: SegmentEncoder<SegmentFile>,
    start_ms: i64,
    last_ms: i64,
    frames: u32,
    /// First/last time and count of cut-track frames, for the end-time estimate on finish.
    cut_first: Option<i64>,
    cut_last: i64,
    cut_count: u32,
}

/// Writes one camera. Holds the camera's lease until `finish` or drop.
pub struct Recorder {
    store: Store,
    camera: String,
    cam_dir: PathBuf,
    header_bytes: Vec<u8>,
    /// Track whose keyframes cut segments; `None` (audio only) cuts at any frame.
    video: Option<u8>,
    lease: Lease,
    cur: Option<OpenSegment>,
    last_start: Option<i64>,
    /// The end of the camera's newest segment when this writer took the lease (whoever wrote
    /// it): recording resumes at the first cut point at or after it. A writer taking over
    /// (a re-bound camera, a heal) pulls the camera itself and starts at the newest keyframe
    /// in its own buffer, which is often a frame or a GOP before where the previous writer
    /// stopped; writing it would store that media twice, in overlapping segments.
    resume_at_ms: Option<i64>,
    /// The last closed segment, while its group commit pass has not reported.
    committing: Option<Arc<Ticket>>,
    finished: bool,
    /// The camera's segment length (its own, else the store's) when this recorder started.
    segment_ms: i64,
    /// The write buffer between segments (one per camera, reused: 260 KiB).
    spare: Option<AlignedBuf>,
}

impl Recorder {
    pub(crate) fn start(
        store: Store,
        camera: &str,
        header: StreamHeader,
    ) -> Result<Recorder, StorageError> {
        let cam_dir = store.camera_dir(camera);
        let tmp_dir = cam_dir.join(TMP_DIR);
        fs::create_dir_all(&tmp_dir).at(&tmp_dir)?;
        let ttl = store.inner.config.lease_ttl;
        {
            let mut active = lock(&store.inner.active);
            if !active.insert(camera.to_string()) {
                return Err(StorageError::LeaseHeld {
                    camera: camera.to_string(),
                    holder: store.inner.node.clone(),
                    expires_in_ms: ttl.as_millis() as i64,
                });
            }
        }
        // Our own node id on a live lease means an earlier run of this node crashed (this
        // process has no recorder for the camera): take it over at once.
        let lease = match Lease::acquire(&cam_dir, camera, &store.inner.node, ttl, true) {
            Ok(l) => l,
            Err(e) => {
                lock(&store.inner.active).remove(camera);
                return Err(e);
            }
        };
        // We own the camera now, so any temp file is a dead writer's leftover.
        store.clear_tmp(camera);
        let resume_at_ms = store.newest_end_ms(camera);
        let segment = store
            .camera_settings(camera)
            .segment_duration
            .unwrap_or(store.inner.config.segment_duration);
        Ok(Recorder {
            segment_ms: i64::try_from(segment.as_millis()).unwrap_or(i64::MAX),
            camera: camera.to_string(),
            cam_dir,
            header_bytes: encode_header(&header),
            video: header.video_track(),
            lease,
            cur: None,
            last_start: None,
            resume_at_ms,
            committing: None,
            finished: false,
            spare: None,
            store,
        })
    }

    pub fn camera(&self) -> &str {
        &self.camera
    }

    /// When the held lease expires (UTC ms) unless renewed by further writes; the server can
    /// show it, or write more often than this when a camera goes quiet.
    pub fn lease_expires_ms(&self) -> i64 {
        self.lease.expires_ms()
    }

    /// Appends a frame. A new segment starts at a keyframe of the first video track (or any
    /// frame without video) once the current one is ≥ `segment_duration` long. Frames before
    /// the first keyframe of a video stream are dropped. Renews the lease every TTL/3. Returns
    /// the segment this call closed, if any. On error the open segment is discarded (no file
    /// left behind) and recording resumes at the next keyframe if called again.
    pub fn write(&mut self, frame: Frame) -> Result<Option<SegmentMeta>, StorageError> {
        if let Some(r) = self.committing.as_ref().and_then(|t| t.try_take()) {
            self.committing = None;
            if let Err(e) = r {
                self.discard();
                return Err(e);
            }
        }
        if let Err(e) = self.lease.renew_if_due() {
            self.discard();
            return Err(e);
        }
        let cut_point = self
            .video
            .is_none_or(|v| frame.track == v && frame.keyframe);
        let seg_ms = self.segment_ms;
        let mut closed = None;
        if let Some(cur) = &self.cur {
            let age = frame.time_ms.saturating_sub(cur.start_ms);
            if (cut_point && age >= seg_ms) || age >= seg_ms.saturating_mul(MAX_SEGMENT_FACTOR) {
                closed = Some(self.close(Some(frame.time_ms))?);
            }
        } else if !cut_point || self.resume_at_ms.is_some_and(|r| frame.time_ms < r) {
            return Ok(None); // waiting for a keyframe (after what is already stored)
        }
        if self.cur.is_none() {
            self.open(frame.time_ms)?;
        }
        if let Err(e) = self.append(&frame) {
            self.discard();
            return Err(e);
        }
        Ok(closed)
    }

    fn open(&mut self, time_ms: i64) -> Result<(), StorageError> {
        // Start times are unique per camera (they name the file and key the index).
        let start_ms = match self.last_start {
            Some(prev) if time_ms <= prev => prev + 1,
            _ => time_ms,
        };
        let tmp = self.cam_dir.join(TMP_DIR).join(format!(
            "{start_ms}-{}-{:016x}.seg.tmp",
            self.store.inner.node,
            unique_token()
        ));
        let result = (|| -> io::Result<SegmentEncoder<SegmentFile>> {
            if let Some(e) = self.store.take_fault() {
                return Err(e);
            }
            let config = &self.store.inner.config;
            let buf = self.spare.take().unwrap_or_else(AlignedBuf::new);
            let f = SegmentFile::create(&tmp, config.direct_io, config.writeback_bytes, buf)?;
            SegmentEncoder::new(f, &self.header_bytes)
        })();
        match result {
            Ok(enc) => {
                self.cur = Some(OpenSegment {
                    tmp,
                    enc,
                    start_ms,
                    last_ms: start_ms,
                    frames: 0,
                    cut_first: None,
                    cut_last: start_ms,
                    cut_count: 0,
                });
                self.last_start = Some(start_ms);
                Ok(())
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(StorageError::from_io(&tmp, e))
            }
        }
    }

    fn append(&mut self, frame: &Frame) -> Result<(), StorageError> {
        self.store.run_write_hook(&self.camera);
        let fault = self.store.take_fault();
        let video = self.video;
        let Some(cur) = self.cur.as_mut() else {
            return Ok(());
        };
        let r = match fault {
            Some(e) => Err(e),
            None => cur.enc.frame(frame),
        };
        r.at(&cur.tmp)?;
        cur.frames += 1;
        cur.last_ms = cur.last_ms.max(frame.time_ms);
        if video.is_none_or(|v| v == frame.track) {
            cur.cut_first.get_or_insert(frame.time_ms);
            cur.cut_last = frame.time_ms;
            cur.cut_count += 1;
        }
        Ok(())
    }

    /// Removes the open segment's temp file after a failure.
    fn discard(&mut self) {
        if let Some(cur) = self.cur.take() {
            drop(cur.enc);
            let _ = fs::remove_file(&cur.tmp);
        }
    }

    /// Completes the open segment. `next_ms`: time of the frame that starts the next segment,
    /// which becomes this one's end; otherwise the end is the last video frame plus one frame
    /// interval (averaged over the segment), and at least the last frame's time.
    fn close(&mut self, next_ms: Option<i64>) -> Result<SegmentMeta, StorageError> {
        let Some(cur) = self.cur.take() else {
            return Err(StorageError::from_io(
                &self.cam_dir,
                io::Error::other("no open segment"),
            ));
        };
        let tmp = cur.tmp.clone();
        let r = self.commit(cur, next_ms);
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r
    }

    fn commit(
        &mut self,
        cur: OpenSegment,
        next_ms: Option<i64>,
    ) -> Result<SegmentMeta, StorageError> {
        let interval = match cur.cut_first {
            Some(first) if cur.cut_count >= 2 => {
                (cur.cut_last - first) / i64::from(cur.cut_count - 1)
            }
            _ => 0,
        };
        let end_ms = next_ms
            .unwrap_or(cur.cut_last.saturating_add(interval))
            .max(cur.last_ms)
            .max(cur.start_ms);
        let tmp = &cur.tmp;
        if let Some(e) = self.store.take_fault() {
            return Err(StorageError::from_io(tmp, e));
        }
        let (w, bytes, crc) = cur.enc.finish(cur.frames, cur.start_ms, end_ms).at(tmp)?;
        let (file, buf) = w.into_parts().at(tmp)?;
        self.spare = Some(buf);
        let dir_name = hour_dir_name(cur.start_ms);
        let dir = self.cam_dir.join(&dir_name);
        let name = segment_file_name(cur.start_ms, end_ms, cur.frames, bytes, crc);
        let dest = dir.join(&name);
        let meta = SegmentMeta {
            camera: self.camera.clone(),
            start_ms: cur.start_ms,
            end_ms,
            bytes,
            frames: cur.frames,
            file: PathBuf::from(CAMERAS_DIR)
                .join(&self.camera)
                .join(&dir_name)
                .join(&name),
            crc32: crc,
        };
        if let Some(committer) = &self.store.inner.committer {
            // One segment per camera in a batch: the previous one's pass must have run.
            if let Some(prev) = self.committing.take() {
                prev.wait()?;
            }
            self.lease.confirm()?;
            // The pass renames only while the lease surely holds: before its expiry less a
            // sixth of the TTL (clock skew between nodes; `confirm` left more than a third).
            let ttl_ms = self.store.inner.config.lease_ttl.as_millis() as i64;
            let ticket = Arc::new(Ticket::default());
            committer.submit(Pending {
                file: Some(file),
                tmp: tmp.clone(),
                cam_dir: self.cam_dir.clone(),
                dir_name,
                dest,
                meta: meta.clone(),
                lease_expires_ms: self.lease.expires_ms() - ttl_ms / 6,
                ticket: ticket.clone(),
            });
            self.committing = Some(ticket);
            return Ok(meta);
        }
        file.sync_all().at(tmp)?;
        drop(file);
        self.lease.confirm()?;
        // Retention may remove an emptied hour directory at any time: (re)create and retry.
        let mut renamed = Err(io::Error::from(io::ErrorKind::NotFound));
        for _ in 0..3 {
            if !dir.is_dir() {
                match fs::create_dir(&dir) {
                    Ok(()) => sync_dir(&self.cam_dir).at(&self.cam_dir)?,
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(StorageError::from_io(&dir, e)),
                }
            }
            renamed = fs::rename(tmp, &dest);
            match &renamed {
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                _ => break,
            }
        }
        renamed.at(&dest)?;
        sync_dir(&dir).at(&dir)?;
        self.store.note_committed(&dir_name, &meta);
        Ok(meta)
    }

    /// Closes the current segment (if it has frames) and releases the lease.
    pub fn finish(mut self) -> Result<Option<SegmentMeta>, StorageError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<Option<SegmentMeta>, StorageError> {
        if self.finished {
            return Ok(None);
        }
        self.finished = true;
        let r = match &self.cur {
            Some(c) if c.frames > 0 => self.close(None).map(Some),
            Some(_) => {
                self.discard();
                Ok(None)
            }
            None => Ok(None),
        };
        // The lease is released only once the last segment is in place: the next writer
        // resumes after the newest listed segment.
        let committed = self.committing.take().map_or(Ok(()), |t| {
            // Hurry the pass: a stream that ended (or a node stopping) should not hold its
            // writer thread for a whole interval per camera.
            self.store.flush_commits();
            t.wait()
        });
        let r = r.and_then(|seg| committed.map(|()| seg));
        self.lease.release();
        lock(&self.store.inner.active).remove(&self.camera);
        r
    }
}

impl Drop for Recorder {
    /// Best effort: close the segment and release the lease; errors are dropped (the next
    /// `Store::open` cleans up whatever is left).
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
