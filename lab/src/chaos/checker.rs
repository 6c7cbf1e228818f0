//! The chaos run's checker: a pure function from what was observed (the segment files, the
//! lease holders, every viewer's packet log, the nodes' views of the scheduler and their
//! sessions) to one row per stretch of the run and the invariants it broke.
//!
//! The timeline is cut into rows at every fault start and every operator action, so each
//! loss lands in exactly one row: the one in which it began. A row knows which nodes its
//! event *hits* (a killed or paused node, a partition's minority, a lossy node, the target
//! of a camera move); a viewer or camera is hit when its node, or the node its stream comes
//! from, is. What the hit ones lose is a figure; what the others lose breaks an invariant.

use std::collections::BTreeMap;

/// One row's event as the runner made it.
#[derive(Debug, Clone)]
pub struct Event {
    pub label: String,
    pub start_ms: i64,
    /// When the fault was undone (for an action: its start).
    pub end_ms: i64,
    /// Node ids the event acts on (viewers and cameras served from them are hit). None for
    /// a full disk: live viewing must go on through it.
    pub hits: Vec<String>,
    /// Cameras the event acts on directly (a camera move).
    pub hits_cameras: Vec<String>,
    /// Whether the fault stops every recording (the shared storage full).
    pub stops_recording: bool,
    /// The fault could not be made here (e.g. no `tc netem`): reported, not checked.
    pub not_made: Option<String>,
}

/// One session of one viewer, from its first packet to its last.
#[derive(Debug, Clone)]
pub struct Span {
    pub viewer: usize,
    /// `live/cam1`, `playback/cam2`.
    pub path: String,
    pub node: String,
    pub first_ms: i64,
    pub last_ms: i64,
    /// Silences longer than the viewer's gap threshold inside the span: (from, to).
    pub gaps: Vec<(i64, i64)>,
    /// The viewer ended it itself (a playback that had played its share): the time to the
    /// next span is not an outage.
    pub voluntary: bool,
}

/// A request that did not end in media: refused, unreachable, or redirected to a node
/// that did not answer.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub at_ms: i64,
    pub asked: String,
    /// The node a redirect named, when it was not the one asked.
    pub sent_to: Option<String>,
    /// The node answering (or redirected to) was down at the time.
    pub dead: bool,
    pub reason: String,
}

/// Every answering node's scheduler at one moment.
#[derive(Debug, Clone)]
pub struct SchedulerSample {
    pub at_ms: i64,
    pub views: Vec<(String, Option<String>)>,
}

/// A session as a node's `/api/sessions` lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SessionRow {
    /// The node listing it.
    pub node: String,
    pub path: String,
    /// The node sending its media (`node` unless it migrated).
    pub sender: String,
    /// Hosted here for the node holding the viewer's connection.
    pub steered_by: Option<String>,
}

/// Sessions listed by every node at one moment (a quiet time: after a fault's settle).
#[derive(Debug, Clone)]
pub struct SessionSample {
    pub at_ms: i64,
    pub rows: Vec<SessionRow>,
    /// Nodes that answered: a half of a move on a node that did not is not counted.
    pub answered: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub events: Vec<Event>,
    pub run_end_ms: i64,
    /// Per camera: its segments (start, end), any order.
    pub segments: BTreeMap<String, Vec<(i64, i64)>>,
    /// Per camera: (time, lease holder) samples in time order.
    pub holders: BTreeMap<String, Vec<(i64, String)>>,
    pub spans: Vec<Span>,
    pub refusals: Vec<Refusal>,
    pub schedulers: Vec<SchedulerSample>,
    pub sessions: Vec<SessionSample>,
}

/// The checker's thresholds (`vigil lab chaos` flags).
#[derive(Debug, Clone)]
pub struct Limits {
    /// A viewer silence longer than this is an outage.
    pub viewer_gap_ms: i64,
    /// A recording gap longer than this is a loss.
    pub recording_gap_ms: i64,
    /// How long after a fault is undone one scheduler must be back.
    pub heal_ms: i64,
    /// A hit camera's recording gap beyond this (the takeover) breaks an invariant too.
    pub takeover_ms: i64,
    /// How long after a full share is freed its recordings may take to resume (the
    /// writers' retry, then a keyframe): beyond the fault's length plus this, a loss.
    pub resume_ms: i64,
    /// How long before a fault the loss it causes can begin, so that it is charged to the
    /// fault: a recording's gap starts where its last stored segment ended (the one being
    /// written when the fault struck is lost), a viewer's where its last packet came.
    pub segment_lead_ms: i64,
    pub viewer_lead_ms: i64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            viewer_gap_ms: 1_000,
            recording_gap_ms: 500,
            heal_ms: 10_000,
            takeover_ms: 12_000,
            // The writers retry every 2 s; a segment is 1 s on the bed.
            resume_ms: 4_000,
            segment_lead_ms: 1_500,
            // A frame interval (40 ms) and the time to make a fault's rules.
            viewer_lead_ms: 250,
        }
    }
}

/// One row of the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    pub label: String,
    pub start_ms: i64,
    /// Longest recording gap of a hit camera, ms (the writer's takeover), and how many.
    pub hit_recording_gap_ms: i64,
    pub hit_cameras: usize,
    /// Recording gaps of cameras the event did not touch (0).
    pub other_recording_gaps: usize,
    /// Overlapping segments (a camera written twice) (0).
    pub recorded_twice: usize,
    /// Viewer outages longer than the threshold: of hit viewers, longest; of others (0).
    pub hit_outages: usize,
    pub hit_longest_ms: i64,
    pub other_outages: usize,
    pub other_longest_ms: i64,
    /// Requests refused or sent to a dead node, and from the row's start to the last.
    pub refused: usize,
    pub sent_to_dead: usize,
    pub refused_for_ms: i64,
    /// Sessions half-moved at the row's end (0).
    pub half_moved: usize,
    /// Samples after the heal time in which nodes named different schedulers (0).
    pub split_schedulers: usize,
    pub not_made: Option<String>,
    /// Which cameras and viewers broke an invariant, and when (ms since the epoch): what
    /// an investigation lines up with the nodes' logs.
    pub details: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Verdict {
    pub rows: Vec<Row>,
    /// Every broken invariant, naming the row.
    pub violations: Vec<String>,
}

pub fn check(o: &Observed, l: &Limits) -> Verdict {
    let mut events = o.events.clone();
    events.sort_by_key(|e| e.start_ms);
    // Row k covers [start_k, start_{k+1}); the last runs to the end of the run.
    let bounds: Vec<(i64, i64)> = events
        .iter()
        .enumerate()
        .map(|(k, e)| {
            let next = events.get(k + 1).map_or(o.run_end_ms, |n| n.start_ms);
            (e.start_ms, next)
        })
        .collect();
    let row_of = |t: i64| bounds.iter().position(|&(a, b)| t >= a && t < b);
    // The row of a loss that began at `from` and ended at `to`: the first event that
    // started within `lead` after `from` (and before `to`), else the one `from` is in.
    let charged = |from: i64, to: i64, lead: i64| {
        events
            .iter()
            .position(|e| e.start_ms > from && e.start_ms <= (from + lead).min(to))
            .or_else(|| row_of(from))
    };
    let mut rows: Vec<Row> = events
        .iter()
        .map(|e| Row {
            label: e.label.clone(),
            start_ms: e.start_ms,
            not_made: e.not_made.clone(),
            ..Row::default()
        })
        .collect();
    let holder_at = |camera: &str, t: i64| -> Option<&str> {
        o.holders
            .get(camera)?
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map(|(_, h)| h.as_str())
    };
    let camera_hit = |k: usize, camera: &str| {
        let e = &events[k];
        e.stops_recording
            || e.hits_cameras.iter().any(|c| c == camera)
            || holder_at(camera, e.start_ms).is_some_and(|h| e.hits.iter().any(|n| n == h))
    };

    // Recordings: gaps and overlaps between consecutive segments.
    for (camera, segs) in &o.segments {
        let mut segs = segs.clone();
        segs.sort_unstable();
        for w in segs.windows(2) {
            let (prev, next) = (w[0], w[1]);
            if next.0 < prev.1 {
                if let Some(k) = row_of(next.0) {
                    rows[k].recorded_twice += 1;
                }
                continue;
            }
            let gap = next.0 - prev.1;
            if gap <= l.recording_gap_ms {
                continue;
            }
            let Some(k) = charged(prev.1, next.0, l.segment_lead_ms) else {
                continue;
            };
            if camera_hit(k, camera) {
                rows[k].hit_cameras += 1;
                rows[k].hit_recording_gap_ms = rows[k].hit_recording_gap_ms.max(gap);
            } else {
                rows[k].other_recording_gaps += 1;
                rows[k].details.push(format!(
                    "{camera}: no segment from {} to {}",
                    prev.1, next.0
                ));
            }
        }
    }

    // Viewers: silences inside spans, and between a span that did not end by choice and
    // the viewer's next.
    let mut by_viewer: BTreeMap<usize, Vec<&Span>> = BTreeMap::new();
    for s in &o.spans {
        by_viewer.entry(s.viewer).or_default().push(s);
    }
    for spans in by_viewer.values_mut() {
        spans.sort_by_key(|s| s.first_ms);
        let mut outages: Vec<(i64, i64, &Span)> = Vec::new();
        for s in spans.iter() {
            outages.extend(s.gaps.iter().map(|&(a, b)| (a, b, *s)));
        }
        for w in spans.windows(2) {
            let (prev, next) = (w[0], w[1]);
            if !prev.voluntary {
                outages.push((prev.last_ms, next.first_ms, prev));
            }
        }
        for (from, to, span) in outages {
            let len = to - from;
            if len <= l.viewer_gap_ms {
                continue;
            }
            let Some(k) = charged(from, to, l.viewer_lead_ms) else {
                continue;
            };
            let e = &events[k];
            let camera = span.path.rsplit('/').next().unwrap_or("");
            let live = span.path.starts_with("live/");
            let hit = e.hits.contains(&span.node)
                || e.hits_cameras.iter().any(|c| c == camera)
                || (live
                    && holder_at(camera, e.start_ms)
                        .is_some_and(|h| e.hits.iter().any(|n| n == h)));
            let r = &mut rows[k];
            if hit {
                r.hit_outages += 1;
                r.hit_longest_ms = r.hit_longest_ms.max(len);
            } else {
                r.other_outages += 1;
                r.other_longest_ms = r.other_longest_ms.max(len);
                r.details.push(format!(
                    "viewer {} ({} on {}): silent from {from} to {to}",
                    span.viewer, span.path, span.node
                ));
            }
        }
    }

    for f in &o.refusals {
        let Some(k) = row_of(f.at_ms) else { continue };
        let r = &mut rows[k];
        r.refused += 1;
        r.sent_to_dead += usize::from(f.dead);
        r.refused_for_ms = r.refused_for_ms.max(f.at_ms - r.start_ms);
    }

    for s in &o.schedulers {
        let Some(k) = row_of(s.at_ms) else { continue };
        if s.at_ms < events[k].end_ms + l.heal_ms {
            continue;
        }
        let named: std::collections::BTreeSet<&str> =
            s.views.iter().filter_map(|(_, v)| v.as_deref()).collect();
        if named.len() > 1 {
            rows[k].split_schedulers += 1;
        }
    }

    for s in &o.sessions {
        let Some(k) = row_of(s.at_ms) else { continue };
        rows[k].half_moved += half_moved(s);
    }

    let mut violations = Vec::new();
    for (r, e) in rows.iter().zip(&events) {
        if r.not_made.is_some() {
            continue;
        }
        let checks = [
            (
                r.other_recording_gaps > 0,
                format!(
                    "{} recording gaps of cameras it did not touch",
                    r.other_recording_gaps
                ),
            ),
            (
                r.hit_recording_gap_ms > gap_limit(e, l),
                format!(
                    "a hit camera was not recorded for {} ms (limit {} ms)",
                    r.hit_recording_gap_ms,
                    gap_limit(e, l)
                ),
            ),
            (
                r.recorded_twice > 0,
                format!("{} overlapping segments", r.recorded_twice),
            ),
            (
                r.other_outages > 0,
                format!(
                    "{} outages of viewers it did not touch (longest {} ms)",
                    r.other_outages, r.other_longest_ms
                ),
            ),
            (
                r.half_moved > 0,
                format!("{} sessions half-moved", r.half_moved),
            ),
            (
                r.split_schedulers > 0,
                format!(
                    "nodes named different schedulers {} times after the heal time",
                    r.split_schedulers
                ),
            ),
        ];
        violations.extend(
            checks
                .into_iter()
                .filter(|(broken, _)| *broken)
                .map(|(_, what)| format!("{}: {what}", e.label)),
        );
    }
    Verdict { rows, violations }
}

/// How long a camera the event hits may go unrecorded: a writer's takeover, or for a full
/// share its whole length and the writers' resumption.
fn gap_limit(e: &Event, l: &Limits) -> i64 {
    if e.stops_recording {
        (e.end_ms - e.start_ms).max(0) + l.resume_ms
    } else {
        l.takeover_ms
    }
}

/// Halves of moves without their other half: a session sent from another node that the
/// sender does not host for it, or one hosted for a node that no longer lists it. Only
/// pairs of answering nodes count.
pub fn half_moved(s: &SessionSample) -> usize {
    let answered = |n: &str| s.answered.iter().any(|a| a == n);
    let mut fronts: BTreeMap<(&str, &str, &str), i64> = BTreeMap::new();
    for r in &s.rows {
        if r.steered_by.is_none() && r.sender != r.node && answered(&r.sender) {
            *fronts.entry((&r.node, &r.sender, &r.path)).or_default() += 1;
        }
    }
    let mut hosted: BTreeMap<(&str, &str, &str), i64> = BTreeMap::new();
    for r in &s.rows {
        if let Some(front) = r.steered_by.as_deref().filter(|f| answered(f)) {
            *hosted.entry((front, &r.node, &r.path)).or_default() += 1;
        }
    }
    let mut keys: Vec<_> = fronts.keys().chain(hosted.keys()).copied().collect();
    keys.sort_unstable();
    keys.dedup();
    keys.iter()
        .map(|k| {
            let (a, b) = (fronts.get(k).copied(), hosted.get(k).copied());
            (a.unwrap_or(0) - b.unwrap_or(0)).unsigned_abs() as usize
        })
        .sum()
}

#[cfg(test)]
mod tests;
