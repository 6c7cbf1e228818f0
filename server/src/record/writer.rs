//! One camera's storage writer, run by the writer pool: owns the store's `Recorder` while
//! frames flow, and turns every failure into the camera's visible status.

use crate::node::recordings::Recordings;
use crate::node::writer_pool::LaneWriter;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::info;
use vigil_storage::{Frame, StorageError, Store, StreamHeader};

/// How often a failed writer (full disk) tries again.
const RETRY: Duration = Duration::from_secs(2);
/// A lease held elsewhere is retried at most this often (each try is one file check): after
/// a camera move the lease is freed once the old holder's last segment is committed.
const LEASE_RETRY: Duration = Duration::from_millis(100);
/// While the lease is held elsewhere the frames of the GOP in progress are kept, up to this
/// many bytes (a GOP of an 8 Mb/s camera at one keyframe a second), so that a lease freed
/// in the middle of a GOP records from that GOP's keyframe rather than from the next one:
/// the old holder's commit (a `syncfs`) takes long enough on a busy disk to miss the
/// keyframe after its last frame, which made a move's recording gap two GOPs, not one.
/// The recorder itself drops what is older than the newest stored segment.
const HELD_MAX_BYTES: usize = 1 << 20;

pub enum WriterMsg {
    Frame(Frame),
    /// The stream ended: close the segment, free the lease, then answer.
    Finish(tokio::sync::oneshot::Sender<()>),
}

pub struct CameraWriter {
    pub recordings: Arc<Recordings>,
    pub store: Store,
    pub camera: String,
    pub header: StreamHeader,
    recorder: Option<vigil_storage::Recorder>,
    next_attempt: Instant,
    /// The last try found the camera's lease held by another node.
    lease_elsewhere: bool,
    lease_retry: Duration,
    /// While the lease is elsewhere: the GOP in progress (from its keyframe), see
    /// [`HELD_MAX_BYTES`].
    held: Vec<Frame>,
    held_bytes: usize,
    /// `[storage.emulate] write_latency_ms`: a slow LUN, for experiments and fault tests.
    write_latency: Duration,
}

impl CameraWriter {
    pub fn new(
        recordings: Arc<Recordings>,
        store: Store,
        camera: String,
        header: StreamHeader,
    ) -> CameraWriter {
        CameraWriter {
            recordings,
            store,
            camera,
            header,
            recorder: None,
            next_attempt: Instant::now(),
            lease_elsewhere: false,
            lease_retry: LEASE_RETRY,
            held: Vec::new(),
            held_bytes: 0,
            write_latency: Duration::ZERO,
        }
    }

    /// Tries a lease held elsewhere this often (tests: at every frame).
    #[cfg(test)]
    pub fn with_lease_retry(mut self, every: Duration) -> CameraWriter {
        self.lease_retry = every;
        self
    }

    /// Keeps `frame` if it belongs to the GOP in progress (while the lease is elsewhere).
    fn hold(&mut self, frame: &Frame) {
        if frame.keyframe {
            self.take_held();
        } else if self.held.is_empty() {
            return;
        }
        self.held_bytes += frame.data.len();
        if self.held_bytes > HELD_MAX_BYTES {
            self.take_held();
            return;
        }
        self.held.push(frame.clone());
    }

    /// The GOP kept while the lease was elsewhere, no longer kept.
    fn take_held(&mut self) -> Vec<Frame> {
        self.held_bytes = 0;
        std::mem::take(&mut self.held)
    }

    /// Every frame write takes `latency` longer (storage emulation).
    pub fn with_write_latency(mut self, latency: Duration) -> CameraWriter {
        self.write_latency = latency;
        self
    }

    fn frame(&mut self, frame: Frame) {
        if self.recorder.is_none() {
            let now = Instant::now();
            let was_elsewhere = self.lease_elsewhere;
            if was_elsewhere {
                self.hold(&frame);
            }
            // Waiting for the lease, a try is worth it only with a GOP to start from.
            let due = now >= self.next_attempt && (!was_elsewhere || !self.held.is_empty());
            if !due {
                return; // dropped while the disk is full or the lease is elsewhere
            }
            let camera = self.camera.as_str();
            match self.store.recorder(camera, self.header.clone()) {
                Ok(r) => {
                    // After an error (full disk, lease elsewhere) the camera counts as
                    // recording again only once a segment is stored: a retry that gets a
                    // recorder on a still-full disk must not show "recording" in between.
                    self.recordings.update(camera, |s| {
                        if s.state != "error" {
                            info!(camera, "recording");
                            s.state = "recording".into();
                            s.error = None;
                        }
                    });
                    self.recorder = Some(r);
                    self.lease_elsewhere = false;
                    // The GOP kept while waiting (it ends with this frame) goes first.
                    let held = self.take_held();
                    if !held.is_empty() {
                        for f in held {
                            self.write(f);
                        }
                        return;
                    }
                }
                Err(e) => {
                    self.recordings.fail(camera, &e);
                    self.lease_elsewhere = matches!(e, StorageError::LeaseHeld { .. });
                    self.next_attempt = now
                        + if self.lease_elsewhere {
                            self.lease_retry
                        } else {
                            RETRY
                        };
                    if !self.lease_elsewhere {
                        self.take_held();
                    } else if !was_elsewhere {
                        self.hold(&frame);
                    }
                    return;
                }
            }
        }
        self.write(frame);
    }

    fn write(&mut self, frame: Frame) {
        let camera = self.camera.as_str();
        let recordings = &self.recordings;
        let Some(r) = self.recorder.as_mut() else {
            return;
        };
        if !self.write_latency.is_zero() {
            // The emulated slow write: this pool thread is the one a slow LUN would block.
            std::thread::sleep(self.write_latency);
        }
        match r.write(frame) {
            Ok(Some(seg)) => recordings.update(camera, |s| {
                s.segments_written += 1;
                s.bytes_written += seg.bytes;
                if s.state == "error" {
                    info!(camera, "recording resumed");
                    s.state = "recording".into();
                    s.error = None;
                }
            }),
            Ok(None) => {}
            Err(e) => {
                recordings.fail(camera, &e);
                // Dropping the recorder discards the partial segment and frees the lease.
                self.recorder = None;
                self.next_attempt = Instant::now() + RETRY;
            }
        }
    }

    fn finish(&mut self) {
        let camera = self.camera.as_str();
        if let Some(r) = self.recorder.take() {
            match r.finish() {
                Ok(Some(seg)) => self.recordings.update(camera, |s| {
                    s.segments_written += 1;
                    s.bytes_written += seg.bytes;
                }),
                Ok(None) => {}
                Err(e) => self.recordings.fail(camera, &e),
            }
        }
    }
}

impl LaneWriter for CameraWriter {
    type Msg = WriterMsg;
    fn handle(&mut self, msg: WriterMsg) {
        match msg {
            WriterMsg::Frame(f) => self.frame(f),
            WriterMsg::Finish(done) => {
                self.finish();
                let _ = done.send(());
            }
        }
    }
}
