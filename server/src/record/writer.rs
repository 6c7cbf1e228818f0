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
/// A lease held elsewhere is retried on every keyframe (a segment can only start on one),
/// at most this often: after a camera move the lease is freed as the source's last segment
/// closes, and the recording goes on from the next keyframe (each try is one file check).
const LEASE_RETRY: Duration = Duration::from_millis(100);

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
            write_latency: Duration::ZERO,
        }
    }

    /// Every frame write takes `latency` longer (storage emulation).
    pub fn with_write_latency(mut self, latency: Duration) -> CameraWriter {
        self.write_latency = latency;
        self
    }

    fn frame(&mut self, frame: Frame) {
        let camera = self.camera.as_str();
        let recordings = &self.recordings;
        if self.recorder.is_none() {
            let now = Instant::now();
            let due = match self.lease_elsewhere {
                true => frame.keyframe && now >= self.next_attempt,
                false => now >= self.next_attempt,
            };
            if !due {
                return; // dropped while the disk is full or the lease is elsewhere
            }
            match self.store.recorder(camera, self.header.clone()) {
                Ok(r) => {
                    // After an error (full disk, lease elsewhere) the camera counts as
                    // recording again only once a segment is stored: a retry that gets a
                    // recorder on a still-full disk must not show "recording" in between.
                    recordings.update(camera, |s| {
                        if s.state != "error" {
                            info!(camera, "recording");
                            s.state = "recording".into();
                            s.error = None;
                        }
                    });
                    self.recorder = Some(r);
                    self.lease_elsewhere = false;
                }
                Err(e) => {
                    recordings.fail(camera, &e);
                    self.lease_elsewhere = matches!(e, StorageError::LeaseHeld { .. });
                    self.next_attempt = Instant::now()
                        + if self.lease_elsewhere {
                            LEASE_RETRY
                        } else {
                            RETRY
                        };
                    return;
                }
            }
        }
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
