//! One task sends every live viewer this node serves of one stream (issue 29 §3), over UDP
//! or over the viewer's RTSP connection.
//!
//! A task per viewer, woken by the hub once per frame, cost ≈ 4 µs of user space per viewer
//! per frame at 1000 viewers (docs/BENCHMARKS.md "Fan-out at the kernel's floor"): the
//! scheduling of the task, the hub's `Notify` waiter list, the task's `select!` and
//! cancellation tokens, for a few microseconds of real work (the header rewrite and the
//! send call). Here the hub wakes one task per frame, whatever the number of viewers, and
//! the task walks its viewers: each keeps its own cursor and RTP identity (its `Reader`), so
//! what a viewer receives, pauses, reports and hands over is what its own task did before.
//!
//! A viewer on the node's shared UDP ports (`rtsp::shared_ports`) is not sent to in its
//! turn: its packets are queued, and the walk's whole batch leaves at its end in as few
//! `sendmmsg` calls as the kernel allows (`net::udp_fanout`), one socket and one call for
//! hundreds of viewers. A viewer with ports of its own (sharing off, an SRTP viewer) is sent
//! to in its turn. Either way the sends are awaited. A UDP socket's buffer fills only when
//! the interface cannot take the packets, which every viewer of the node shares; a full
//! buffer does not stand for a slow reader as a TCP connection's does (UDP has no
//! back-pressure from the receiver), so waiting for it holds nobody back that the interface
//! would not.
//! A TCP viewer's socket is another matter: one that does not read must hold back nobody
//! else. Its writes never wait (`net::tcp_sink`): what its socket does not take is queued
//! for its connection task to drain under the slow-reader bound, and while anything is
//! queued the viewer is skipped (`blocked`), its reader falling behind as it did when its
//! own task blocked on the socket; the sink tells the group when the queue is gone.
//!
//! A group holds at most [`GROUP_MAX`] viewers; a stream with more has more groups, so that
//! its fan-out still spreads over the runtime's threads (one group is one task on one core
//! at a time). A group lives while it has viewers: the last one leaving takes its entry out
//! of the node's map under the map's lock, so a viewer arriving then starts a new group.

use super::slot::{Scratch, Slot};
use super::{Outs, Pumped};
use crate::live::prefetch::prefetch_val;
use crate::live::stream::Stream;
use crate::node::Node;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

/// How often the group looks at its viewers' timers (reports, SR, BYE after the end).
const TICK: Duration = Duration::from_millis(100);
/// Viewers per group: one wake per frame for this many is already a small cost per viewer
/// (a 256th), and a thousand viewers of one camera still make four tasks the runtime can run
/// on four cores.
pub(super) const GROUP_MAX: usize = 256;

/// What a viewer's handle asks of its group.
pub(super) enum Cmd {
    Add(Box<Slot>),
    Pause(u64, bool),
    /// Stop for good, with an RTCP BYE.
    End(u64),
    /// Stop without a BYE (another sender continues the viewer) and give its state back.
    Stop(u64, oneshot::Sender<Pumped>),
    /// A TCP viewer's socket took everything queued: it can be sent to again.
    Drained(u64),
}

/// The node's groups, by stream.
#[derive(Default)]
pub(super) struct Groups {
    map: Mutex<HashMap<usize, Vec<Entry>>>,
    next_id: AtomicU64,
}

struct Entry {
    tx: mpsc::UnboundedSender<Cmd>,
    group: u64,
    /// Viewers added and not yet gone (counted up by `add`, down by the group).
    members: Arc<AtomicUsize>,
}

impl Groups {
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn map(&self) -> MutexGuard<'_, HashMap<usize, Vec<Entry>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts the viewer in its stream's group, starting one if there is none; returns where
    /// its handle sends its commands.
    pub fn add(self: &Arc<Self>, node: &Arc<Node>, slot: Slot) -> mpsc::UnboundedSender<Cmd> {
        let stream = slot.reader.stream().clone();
        let key = Arc::as_ptr(&stream) as usize;
        let mut map = self.map();
        let entries = map.entry(key).or_default();
        let mut cmd = Cmd::Add(Box::new(slot));
        for e in entries.iter() {
            if e.members.load(Ordering::Acquire) >= GROUP_MAX {
                continue;
            }
            match e.tx.send(cmd) {
                Ok(()) => {
                    e.members.fetch_add(1, Ordering::AcqRel);
                    return e.tx.clone();
                }
                // The group ended without taking its entry out (its task was dropped).
                Err(mpsc::error::SendError(back)) => cmd = back,
            }
        }
        entries.retain(|e| !e.tx.is_closed());
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(cmd);
        let group = self.next_id();
        let members = Arc::new(AtomicUsize::new(1));
        entries.push(Entry {
            tx: tx.clone(),
            group,
            members: members.clone(),
        });
        let span = tracing::info_span!(parent: None, "live_group", path = %stream.path);
        let task = Group {
            me: tx.downgrade(),
            node: node.clone(),
            groups: self.clone(),
            stream,
            key,
            group,
            members,
            rx,
            slots: Vec::new(),
            index: HashMap::new(),
            scratch: Scratch::default(),
            cursor: None,
            changed: true,
        };
        node.tasks.spawn(task.run().instrument(span));
        tx
    }
}

struct Group {
    /// Where a TCP viewer's sink says its queue is gone (weak: the entry's sender is the
    /// one that keeps the group).
    me: mpsc::WeakUnboundedSender<Cmd>,
    node: Arc<Node>,
    groups: Arc<Groups>,
    /// Held so that the stream's address, the group's key, is not reused while it runs.
    stream: Arc<Stream>,
    key: usize,
    group: u64,
    members: Arc<AtomicUsize>,
    rx: mpsc::UnboundedReceiver<Cmd>,
    slots: Vec<Slot>,
    /// Where each viewer is in `slots`, by id: a command names its viewer, and finding it
    /// by a walk was a cache miss per viewer per command (a TCP viewer's `Drained` comes
    /// many times a second at a thousand viewers).
    index: HashMap<u64, usize>,
    scratch: Scratch,
    /// The lowest cursor of the viewers ready to send: what the group waits on the hub
    /// beyond. Kept from the last walk, as a walk of a thousand viewers only to find it was
    /// a cache miss per viewer per frame.
    cursor: Option<u64>,
    /// Viewers came, went or changed state since `cursor` was found.
    changed: bool,
}

impl Group {
    async fn run(mut self) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.slots.is_empty() && self.retire() {
                return;
            }
            // The hub wakes the group when any sending viewer has something new.
            if std::mem::take(&mut self.changed) {
                self.cursor = self
                    .slots
                    .iter()
                    .filter(|s| s.ready())
                    .map(|s| s.reader.cursor())
                    .min();
            }
            let cursor = self.cursor;
            tokio::select! {
                biased;
                _ = self.node.shutdown.cancelled() => {
                    for slot in std::mem::take(&mut self.slots) {
                        slot.bye(&self.node).await;
                    }
                    return;
                }
                cmd = self.rx.recv() => match cmd {
                    Some(cmd) => {
                        self.command(cmd).await;
                        self.changed = true;
                    }
                    None => return,
                },
                _ = self.stream.wait_beyond(cursor.unwrap_or(0)), if cursor.is_some() => {
                    // Caught up, the viewers all wait at one cursor: one read of the hub
                    // serves them all.
                    // The cursor to wait beyond next is found in the same walk, each viewer
                    // looked at once per frame.
                    self.scratch.read.clear();
                    let mut next = None;
                    for i in 0..self.slots.len() {
                        self.fetch_ahead(i);
                        let slot = &mut self.slots[i];
                        if !slot.ready() {
                            continue;
                        }
                        slot.pump(&self.node, &mut self.scratch).await;
                        if slot.ready() {
                            let c = slot.reader.cursor();
                            next = Some(next.map_or(c, |n: u64| n.min(c)));
                        }
                    }
                    self.scratch.flush().await;
                    self.cursor = next;
                    self.scratch.read.clear();
                }
                // The timers change no sending viewer's cursor: they only end viewers past
                // their BYE time, which are not sending.
                _ = tick.tick() => self.timers().await,
            }
        }
    }

    /// Asks for the memory of the viewers after the `i`th ahead of their turn
    /// ([`crate::live::prefetch`]): the slot three ahead, what the slot two ahead points
    /// to, what that points to one ahead — each pointer read from memory asked for one
    /// viewer earlier, so no hint waits for a miss of its own. A frame's send call for each
    /// viewer between them gives the memory time to arrive.
    fn fetch_ahead(&self, i: usize) {
        if let Some(s) = self.slots.get(i + 3) {
            prefetch_val(s);
        }
        if let Some(s) = self.slots.get(i + 2) {
            s.prefetch_owned();
        }
        if let Some(s) = self.slots.get(i + 1) {
            s.prefetch_sockets();
        }
    }

    /// Ends the group if no viewer is on its way to it: under the map's lock, which every
    /// `add` holds while it sends, so none can arrive once the entry is gone.
    fn retire(&mut self) -> bool {
        let groups = self.groups.clone();
        let mut map = groups.map();
        match self.rx.try_recv() {
            Ok(Cmd::Add(slot)) => {
                self.push(*slot);
                false
            }
            // A command for a viewer that has left: nothing to do, look again.
            Ok(Cmd::Stop(..) | Cmd::Pause(..) | Cmd::End(..) | Cmd::Drained(..)) => false,
            Err(_) => {
                if let Some(entries) = map.get_mut(&self.key) {
                    entries.retain(|e| e.group != self.group);
                    if entries.is_empty() {
                        map.remove(&self.key);
                    }
                }
                true
            }
        }
    }

    /// A viewer joins; a TCP viewer's sink learns where to say its queue is gone.
    fn push(&mut self, slot: Slot) {
        if let Outs::Tcp(t) = &slot.outs {
            let (me, id) = (self.me.clone(), slot.id);
            t.sink.on_drained(Box::new(move || {
                if let Some(tx) = me.upgrade() {
                    let _ = tx.send(Cmd::Drained(id));
                }
            }));
        }
        self.index.insert(slot.id, self.slots.len());
        self.slots.push(slot);
        self.changed = true;
    }

    fn slot(&mut self, id: u64) -> Option<&mut Slot> {
        let i = *self.index.get(&id)?;
        self.slots.get_mut(i)
    }

    fn take(&mut self, id: u64) -> Option<Slot> {
        let i = *self.index.get(&id)?;
        Some(self.remove(i))
    }

    fn remove(&mut self, i: usize) -> Slot {
        self.members.fetch_sub(1, Ordering::AcqRel);
        let slot = self.slots.swap_remove(i);
        self.index.remove(&slot.id);
        if let Some(moved) = self.slots.get(i) {
            self.index.insert(moved.id, i);
        }
        slot
    }

    async fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Add(slot) => self.push(*slot),
            // Sent at once: it waited on its socket, not on the hub.
            Cmd::Drained(id) => {
                if let Some(&i) = self.index.get(&id) {
                    let s = &mut self.slots[i];
                    s.blocked = false;
                    if s.sending() {
                        self.scratch.read.clear();
                        s.pump(&self.node, &mut self.scratch).await;
                        self.scratch.flush().await;
                        self.scratch.read.clear();
                    }
                }
            }
            Cmd::Pause(id, paused) => {
                if let Some(s) = self.slot(id) {
                    s.paused = paused;
                }
            }
            Cmd::End(id) => {
                if let Some(slot) = self.take(id) {
                    slot.bye(&self.node).await;
                }
            }
            // An unknown id (the viewer ended on its own) drops `tx`: its handle then takes
            // what `finish` left.
            Cmd::Stop(id, tx) => {
                if let Some(slot) = self.take(id) {
                    slot.end_session_if_ended();
                    let _ = tx.send(slot.into_pumped(false));
                }
            }
        }
    }

    /// Sender reports, progress reports and the BYE after a publisher's end, when due.
    async fn timers(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.slots.len() {
            // The counters each viewer adds to, ahead of its turn (see `fetch_ahead`).
            if let Some(s) = self.slots.get(i + 2) {
                prefetch_val(s);
            }
            if let Some(s) = self.slots.get(i + 1) {
                s.prefetch_counters();
            }
            if self.slots[i].bye_due(now) {
                self.remove(i).bye(&self.node).await;
                continue;
            }
            self.slots[i].tick(&self.node, now).await;
            i += 1;
        }
    }
}

#[cfg(test)]
impl Groups {
    /// Groups running, for the tests.
    pub fn len(&self) -> usize {
        self.map().values().map(Vec::len).sum()
    }
}
