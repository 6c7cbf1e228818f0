//! The node's event bus: what happened that an operator's systems want to hear of (webhooks
//! today), published by whichever module saw it and read by whoever subscribed.
//!
//! On the node, below every module that emits, so emitting needs no knowledge of the
//! listeners (as `Node::notify_change`). A `broadcast` channel because an emit must never
//! wait: a subscriber that falls behind loses the oldest events (and learns how many), the
//! sender never blocks, and with no subscriber an emit costs a failed send. Nothing on the
//! media path emits: camera and recording events are derived by sampling (`events::sample`).

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::broadcast;

/// One event, as its JSON body names it (`"event": "camera_online"`, …).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The camera's stream became live on this node (held here, not relayed).
    CameraOnline {
        camera: String,
    },
    /// It stopped being live here (source lost, on-demand idle, moved, removed).
    CameraOffline {
        camera: String,
    },
    RecordingStarted {
        camera: String,
    },
    RecordingStopped {
        camera: String,
    },
    RecordingError {
        camera: String,
        error: String,
    },
    /// A member became alive or dead in the scheduler's view (sent by the scheduler only;
    /// without a cluster, a node announces itself at start).
    NodeUp {
        member: String,
    },
    NodeDown {
        member: String,
    },
    /// Sent by the newly elected scheduler.
    SchedulerChanged {
        scheduler: Option<String>,
        term: u64,
    },
    MigrationDone {
        session: String,
        to: String,
        gap_ms: Option<f64>,
    },
    MigrationFailed {
        session: String,
        to: String,
        error: String,
    },
    /// A registry version written by this node (sent once, by the writer).
    RegistryChanged {
        version: u64,
        by: String,
        changes: Vec<String>,
    },
}

impl Event {
    /// The name an operator filters by (`[webhooks] events`).
    pub fn name(&self) -> &'static str {
        match self {
            Event::CameraOnline { .. } => "camera_online",
            Event::CameraOffline { .. } => "camera_offline",
            Event::RecordingStarted { .. } => "recording_started",
            Event::RecordingStopped { .. } => "recording_stopped",
            Event::RecordingError { .. } => "recording_error",
            Event::NodeUp { .. } => "node_up",
            Event::NodeDown { .. } => "node_down",
            Event::SchedulerChanged { .. } => "scheduler_changed",
            Event::MigrationDone { .. } => "migration_done",
            Event::MigrationFailed { .. } => "migration_failed",
            Event::RegistryChanged { .. } => "registry_changed",
        }
    }
}

/// An event as published: numbered per node and stamped.
#[derive(Debug, Clone, PartialEq)]
pub struct Published {
    pub seq: u64,
    pub at_ms: i64,
    pub event: Event,
}

pub struct Bus {
    tx: broadcast::Sender<Arc<Published>>,
    seq: AtomicU64,
}

impl Bus {
    /// `capacity`: events a subscriber may fall behind by before it loses the oldest.
    pub fn new(capacity: usize) -> Bus {
        Bus {
            tx: broadcast::channel(capacity.max(1)).0,
            seq: AtomicU64::new(0),
        }
    }

    /// Publishes `event`; never waits.
    pub fn emit(&self, event: Event) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let at_ms = vigil_storage::now_ms();
        let _ = self.tx.send(Arc::new(Published { seq, at_ms, event }));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::broadcast::error::TryRecvError;

    #[test]
    fn a_slow_subscriber_loses_the_oldest_and_the_sender_never_waits() {
        let bus = Bus::new(2);
        bus.emit(Event::NodeUp { member: "x".into() }); // nobody listens: dropped
        let mut rx = bus.subscribe();
        for i in 0..5 {
            bus.emit(Event::CameraOnline {
                camera: format!("c{i}"),
            });
        }
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Lagged(3))));
        let next = rx.try_recv().expect("an event");
        assert_eq!(
            next.event,
            Event::CameraOnline {
                camera: "c3".into()
            }
        );
        assert_eq!(next.seq, 4);
        assert_eq!(rx.try_recv().expect("an event").seq, 5);
    }
}
