//! The steering node's heartbeat to the nodes sending its moved sessions: every
//! `heartbeat_ms`, one `Status` call per sending node carrying every session steered to it
//! (not one call per session: a thousand moved sessions on three peers cost three calls a
//! beat, not a thousand). The answer renews each session's lease there and brings its
//! progress home (where a take-back resumes); a session the sending node has not vouched for
//! within `takeback_ms` comes home.
//!
//! [`Book`] is the bookkeeping, sans-IO (time passed in, unit-tested); [`Heartbeats`] is the
//! node's one task that makes the calls.

use crate::cluster::Cluster;
use crate::handoff::{MigrationCall, MigrationReply, SessionStatus, WireStopped};
use crate::live::handoff::LiveHandoff;
use crate::node::command::SessionCommand;
use crate::node::{Node, SessionInfo};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Sessions named in one `Status` call: its answer (at worst ~650 bytes of JSON per
/// two-track session with its progress: 42 KB for 64, checked by a unit test) stays within
/// the RPC's 64 KiB frame cap; a node pair with more sessions gets more calls per beat.
pub const MAX_PER_CALL: usize = 64;

/// Longest wait for a session's connection to take a take-back command.
const TAKE_BACK_HANDOVER: Duration = Duration::from_secs(10);

/// What the answer of a sending node means for one watched session.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Still hosted there; its latest progress (kept for a take-back).
    Progress(WireStopped),
    /// A live viewer still sent there; its latest state (kept for a take-back).
    LiveProgress(LiveHandoff),
    /// Its run ended there by itself (end of recording or range): the session is over.
    Ended,
    /// Not vouched for within the take-back time: send it from here again.
    TakeBack,
}

struct Entry<W> {
    watched: W,
    last_ok: Instant,
}

/// The sessions steered from here, by the node sending them.
pub struct Book<W> {
    peers: BTreeMap<String, BTreeMap<String, Entry<W>>>,
}

impl<W: Clone> Default for Book<W> {
    fn default() -> Self {
        Book {
            peers: BTreeMap::new(),
        }
    }
}

impl<W: Clone> Book<W> {
    /// Watch `session`, sent by `peer` from `now` on (replacing an earlier watch of it).
    pub fn add(&mut self, peer: &str, session: &str, watched: W, now: Instant) {
        for sessions in self.peers.values_mut() {
            sessions.remove(session);
        }
        self.peers.entry(peer.to_string()).or_default().insert(
            session.to_string(),
            Entry {
                watched,
                last_ok: now,
            },
        );
        self.peers.retain(|_, s| !s.is_empty());
    }

    /// Stop watching the sessions `keep` says no to (released, ended).
    pub fn retain(&mut self, mut keep: impl FnMut(&W) -> bool) {
        for sessions in self.peers.values_mut() {
            sessions.retain(|_, e| keep(&e.watched));
        }
        self.peers.retain(|_, s| !s.is_empty());
    }

    /// The calls of one beat: per sending node, every session it sends for this node (in
    /// calls of at most [`MAX_PER_CALL`]).
    pub fn calls(&self) -> Vec<(String, Vec<String>)> {
        self.peers
            .iter()
            .flat_map(|(peer, s)| {
                let ids: Vec<String> = s.keys().cloned().collect();
                ids.chunks(MAX_PER_CALL)
                    .map(|c| (peer.clone(), c.to_vec()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Applies `peer`'s answer (None: it did not answer) at `now`; sessions that ended or
    /// are taken back are no longer watched.
    pub fn answer(
        &mut self,
        peer: &str,
        answer: Option<&[SessionStatus]>,
        now: Instant,
        takeback: Duration,
    ) -> Vec<(String, W, Outcome)> {
        let mut out = Vec::new();
        let Some(sessions) = self.peers.get_mut(peer) else {
            return out;
        };
        for st in answer.unwrap_or_default().iter().filter(|s| s.hosted) {
            let Some(e) = sessions.get_mut(&st.session) else {
                continue;
            };
            e.last_ok = now;
            if st.ended {
                out.push((st.session.clone(), e.watched.clone(), Outcome::Ended));
            } else if let Some(p) = &st.progress {
                out.push((
                    st.session.clone(),
                    e.watched.clone(),
                    Outcome::Progress(p.clone()),
                ));
            } else if let Some(l) = &st.live {
                out.push((
                    st.session.clone(),
                    e.watched.clone(),
                    Outcome::LiveProgress(l.clone()),
                ));
            }
        }
        for (id, e) in sessions.iter() {
            if now.saturating_duration_since(e.last_ok) >= takeback {
                out.push((id.clone(), e.watched.clone(), Outcome::TakeBack));
            }
        }
        for (id, _, o) in &out {
            if matches!(o, Outcome::Ended | Outcome::TakeBack) {
                sessions.remove(id);
            }
        }
        self.peers.retain(|_, s| !s.is_empty());
        out
    }
}

/// Where the sending node's last reported progress is kept: where a take-back resumes.
#[derive(Clone)]
pub enum Last {
    Playback(Arc<Mutex<Option<WireStopped>>>),
    /// With when it came: the sender's lease there runs out `lease_ms` after that.
    Live(Arc<Mutex<Option<(LiveHandoff, Instant)>>>),
}

/// One moved session as its steering node watches it.
#[derive(Clone)]
pub struct Watched {
    pub last: Last,
    pub info: Arc<SessionInfo>,
    /// Cancelled when the session is released there (it came home or moved on).
    pub cancel: CancellationToken,
}

impl Watched {
    fn live(&self) -> bool {
        !self.cancel.is_cancelled() && !self.info.cancel.is_cancelled()
    }
}

/// The node's heartbeat task and its book.
pub struct Heartbeats {
    book: Mutex<Book<Watched>>,
}

impl Heartbeats {
    /// The node's heartbeats, its task started on first use.
    pub fn of(node: &Arc<Node>, cluster: &Arc<Cluster>) -> Arc<Heartbeats> {
        node.extensions.get_or_init(|| {
            let hb = Arc::new(Heartbeats {
                book: Mutex::new(Book::default()),
            });
            let cfg = &node.config.cluster.migration;
            node.tasks.spawn(run(
                hb.clone(),
                cluster.clone(),
                node.shutdown.clone(),
                Duration::from_millis(cfg.heartbeat_ms),
                Duration::from_millis(cfg.takeback_ms),
            ));
            hb
        })
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book<Watched>> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Watch a session now sent by `peer`.
    pub fn watch(&self, peer: &str, watched: Watched) {
        let id = watched.info.id.clone();
        self.book().add(peer, &id, watched, Instant::now());
    }
}

async fn run(
    hb: Arc<Heartbeats>,
    cluster: Arc<Cluster>,
    shutdown: CancellationToken,
    every: Duration,
    takeback: Duration,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let calls = {
            let mut book = hb.book();
            book.retain(Watched::live);
            book.calls()
        };
        let answers = futures::future::join_all(calls.into_iter().map(|(peer, sessions)| {
            let cluster = cluster.clone();
            async move {
                let r = cluster
                    .call_migration(&peer, MigrationCall::Status { sessions }, every)
                    .await;
                (peer, r)
            }
        }))
        .await;
        let mut outcomes = Vec::new();
        {
            let now = Instant::now();
            let mut book = hb.book();
            for (peer, r) in answers {
                let st = match r {
                    Ok(MigrationReply::Status(v)) => Some(v),
                    _ => None,
                };
                for (_, w, o) in book.answer(&peer, st.as_deref(), now, takeback) {
                    outcomes.push((peer.clone(), w, o));
                }
            }
        }
        for (peer, w, o) in outcomes {
            // Released while the call was out: the session is no longer that node's.
            if !w.live() {
                continue;
            }
            match o {
                Outcome::Progress(p) => {
                    if let Last::Playback(l) = &w.last {
                        *l.lock().unwrap_or_else(|p| p.into_inner()) = Some(p);
                    }
                }
                Outcome::LiveProgress(p) => {
                    if let Last::Live(l) = &w.last {
                        *l.lock().unwrap_or_else(|p| p.into_inner()) = Some((p, Instant::now()));
                    }
                }
                Outcome::Ended => w.info.cancel.cancel(),
                Outcome::TakeBack => {
                    let tx = w
                        .info
                        .commands
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .clone();
                    // Handed over beside this loop: one session's busy connection must
                    // not hold every other session's heartbeat. The book has let the
                    // session go, so the command is not sent twice.
                    if let Some(tx) = tx {
                        let id = w.info.id.clone();
                        tokio::spawn(async move {
                            let command = SessionCommand::TakeBack { node: peer };
                            let sent = tokio::time::timeout(TAKE_BACK_HANDOVER, tx.send(command));
                            if sent.await.is_err() {
                                warn!(session = %id, "take-back not handed over: the session's connection took no command for {TAKE_BACK_HANDOVER:?}");
                            }
                        });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handoff::WireCursor;

    fn status(session: &str, hosted: bool, ended: bool, frame: Option<usize>) -> SessionStatus {
        SessionStatus {
            session: session.into(),
            hosted,
            running: hosted && !ended,
            ended,
            progress: frame.map(|frame| WireStopped {
                tracks: Vec::new(),
                resume: Some(WireCursor {
                    segment_start_ms: 0,
                    frame,
                }),
                anchor: None,
                last_sent_us: None,
            }),
            live: None,
        }
    }

    const TB: Duration = Duration::from_millis(700);

    #[test]
    fn one_call_per_sending_node_carries_all_its_sessions() {
        let t0 = Instant::now();
        let mut b = Book::default();
        b.add("B", "s1", 1, t0);
        b.add("C", "s2", 2, t0);
        b.add("B", "s3", 3, t0);
        b.add("B", "s4", 4, t0);
        assert_eq!(
            b.calls(),
            vec![
                ("B".to_string(), vec!["s1".into(), "s3".into(), "s4".into()]),
                ("C".to_string(), vec!["s2".into()]),
            ]
        );
        // s3 moves on from B to C: it is watched once, with C.
        b.add("C", "s3", 3, t0);
        b.retain(|w| *w != 4);
        assert_eq!(
            b.calls(),
            vec![
                ("B".to_string(), vec!["s1".into()]),
                ("C".to_string(), vec!["s2".into(), "s3".into()]),
            ]
        );
        b.retain(|w| *w != 1);
        assert_eq!(b.calls().len(), 1, "B dropped once it sends nothing for us");
    }

    #[test]
    fn a_full_call_and_its_answer_fit_in_one_frame() {
        let t0 = Instant::now();
        let mut b = Book::default();
        for i in 0..MAX_PER_CALL + 1 {
            b.add("B", &format!("{:016X}", u64::MAX - i as u64), i, t0);
        }
        let calls = b.calls();
        assert_eq!(calls.len(), 2, "65 sessions: two calls");
        assert_eq!(calls[0].1.len(), MAX_PER_CALL);
        // The largest answer: every session hosted, two tracks with the widest numbers.
        let identity = {
            let mut id = vigil_proto::rtp::RtpIdentity::new(u32::MAX, u16::MAX, u32::MAX);
            let h = vigil_proto::rtp::RtpHeader {
                marker: true,
                payload_type: 96,
                sequence: 40_000,
                timestamp: 4_000_000_000,
                ssrc: 1,
            };
            for _ in 0..3 {
                id.rewrite(&h, 1400);
            }
            id
        };
        let answer: Vec<SessionStatus> = calls[0]
            .1
            .iter()
            .map(|s| {
                let mut st = status(s, true, false, Some(usize::MAX));
                if let Some(p) = st.progress.as_mut() {
                    p.resume = Some(WireCursor {
                        segment_start_ms: i64::MAX,
                        frame: usize::MAX,
                    });
                    p.tracks = vec![
                        crate::handoff::WireTrack {
                            identity: identity.clone(),
                            seq: u16::MAX,
                            enabled: true,
                        };
                        2
                    ];
                    p.anchor = Some(crate::handoff::Anchor {
                        wall_us: i64::MAX,
                        media_ms: i64::MAX,
                    });
                }
                st
            })
            .collect();
        let fits = |answer: Vec<SessionStatus>, what: &str| {
            let frame = serde_json::to_vec(&crate::cluster::rpc::RpcResponse::Migration(
                MigrationReply::Status(answer),
            ))
            .unwrap();
            assert!(
                frame.len() < crate::cluster::rpc::MAX_FRAME,
                "{what}: {} bytes",
                frame.len()
            );
        };
        fits(answer, "playback");
        // The same for live viewers: two tracks, full marks, the widest numbers.
        use crate::live::handoff::{LiveTrack, Mark, MARK_RUN};
        let track = LiveTrack {
            identity: identity.clone(),
            clock_rate: u32::MAX,
            video: true,
            mark: Some(Mark {
                packets: vec![(u32::MAX, u64::MAX); MARK_RUN],
            }),
            min_step: Some(u32::MAX),
            sr_line: Some((u32::MAX, i64::MIN)),
        };
        let answer: Vec<SessionStatus> = calls[0]
            .1
            .iter()
            .map(|s| SessionStatus {
                live: Some(LiveHandoff {
                    tracks: vec![Some(track.clone()); 2],
                    last_sent_us: Some(i64::MIN),
                }),
                ..status(s, true, false, None)
            })
            .collect();
        fits(answer, "live");
    }

    #[test]
    fn answers_bring_progress_end_and_take_back() {
        let t0 = Instant::now();
        let mut b = Book::default();
        for (i, s) in ["s1", "s2", "s3"].into_iter().enumerate() {
            b.add("B", s, i, t0);
        }
        // At 300 ms B vouches for s1 (frame 7) and s2 (ended), not for s3 (lease lost there).
        let t1 = t0 + Duration::from_millis(300);
        let answer = [
            status("s1", true, false, Some(7)),
            status("s2", true, true, None),
            status("s3", false, false, None),
        ];
        let out = b.answer("B", Some(&answer), t1, TB);
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[0].0, "s1");
        assert!(matches!(&out[0].2, Outcome::Progress(p) if p.resume.unwrap().frame == 7));
        assert_eq!((out[1].0.as_str(), &out[1].2), ("s2", &Outcome::Ended));
        // B silent from then on: s3 (last vouched at 0) is taken back at 700 ms, s1 (at 300)
        // at 1000 ms; nothing before.
        let out = b.answer("B", None, t0 + Duration::from_millis(699), TB);
        assert!(out.is_empty(), "{out:?}");
        let out = b.answer("B", None, t0 + TB, TB);
        assert_eq!(out, vec![("s3".to_string(), 2, Outcome::TakeBack)]);
        let out = b.answer("B", None, t1 + TB, TB);
        assert_eq!(out, vec![("s1".to_string(), 0, Outcome::TakeBack)]);
        assert!(b.calls().is_empty(), "nothing left to watch");
        // An answer from a node we watch nothing on changes nothing.
        assert!(b.answer("C", Some(&answer), t1, TB).is_empty());
    }
}
