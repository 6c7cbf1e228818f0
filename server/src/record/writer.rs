//! One camera's storage writer, run by the writer pool: owns the store's `Recorder` while
//! frames flow, and turns every failure into the camera's visible status.

use super::pool::LaneWriter;
use super::Recordings;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};
use vigil_storage::{Frame, StorageError, Store, StreamHeader};

/// How often a failed writer (full disk, lease held elsewhere) tries again.
const RETRY: Duration = Duration::from_secs(2);

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
            if Instant::now() < self.next_attempt {
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
                }
                Err(e) => {
                    recordings.fail(camera, &e);
                    self.next_attempt = Instant::now() + RETRY;
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

impl Recordings {
    pub(super) fn fail(&self, camera: &str, e: &StorageError) {
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
    pub(super) fn error(&self, camera: &str, message: String) {
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
