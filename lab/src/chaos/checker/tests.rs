//! Hand-made observations: a kill of the writer of cam1 at 10 s (undone at 20 s), then a
//! camera move at 30 s, the run ending at 40 s.

use super::*;

fn event(label: &str, start: i64, end: i64, hits: &[&str]) -> Event {
    Event {
        label: label.into(),
        start_ms: start,
        end_ms: end,
        hits: hits.iter().map(|s| s.to_string()).collect(),
        hits_cameras: Vec::new(),
        stops_recording: false,
        not_made: None,
    }
}

fn base() -> Observed {
    let mut move_cam2 = event("move cam2 to node3", 30_000, 30_000, &["node3"]);
    move_cam2.hits_cameras = vec!["cam2".into()];
    let mut o = Observed {
        events: vec![
            event("kill -9 node1", 10_000, 20_000, &["node1"]),
            move_cam2,
        ],
        run_end_ms: 40_000,
        ..Observed::default()
    };
    o.holders.insert("cam1".into(), vec![(0, "node1".into())]);
    o.holders.insert("cam2".into(), vec![(0, "node2".into())]);
    o
}

/// Segments of one second from `from` to `to`, touching.
fn seconds(from: i64, to: i64) -> Vec<(i64, i64)> {
    (from / 1000..to / 1000)
        .map(|s| (s * 1000, s * 1000 + 1000))
        .collect()
}

fn span(viewer: usize, path: &str, node: &str, first: i64, last: i64) -> Span {
    Span {
        viewer,
        path: path.into(),
        node: node.into(),
        first_ms: first,
        last_ms: last,
        gaps: Vec::new(),
        voluntary: false,
    }
}

#[test]
fn a_killed_writers_gap_is_a_figure_and_an_untouched_cameras_gap_a_violation() {
    let mut o = base();
    // cam1 (written by node1) stops at 11 s and is taken over at 16 s: a hit camera.
    let mut cam1 = seconds(0, 11_000);
    cam1.extend(seconds(16_000, 40_000));
    o.segments.insert("cam1".into(), cam1);
    // cam2 (node2, untouched by the kill) loses 12.0–13.0 s.
    let mut cam2 = seconds(0, 12_000);
    cam2.extend(seconds(13_000, 40_000));
    o.segments.insert("cam2".into(), cam2);
    let v = check(&o, &Limits::default());
    assert_eq!(v.rows[0].hit_cameras, 1);
    assert_eq!(v.rows[0].hit_recording_gap_ms, 5_000);
    assert_eq!(v.rows[0].other_recording_gaps, 1);
    assert_eq!(
        v.violations,
        vec!["kill -9 node1: 1 recording gaps of cameras it did not touch"]
    );
}

#[test]
fn a_takeover_longer_than_the_limit_and_overlapping_segments_are_violations() {
    let mut o = base();
    let mut cam1 = seconds(0, 11_000);
    cam1.extend(seconds(25_000, 40_000));
    // Two writers at once during the move: 31.5–32.5 s overlaps 31–32 and 32–33.
    let mut cam2 = seconds(0, 40_000);
    cam2.push((31_500, 32_500));
    o.segments.insert("cam1".into(), cam1);
    o.segments.insert("cam2".into(), cam2);
    let v = check(&o, &Limits::default());
    assert_eq!(v.rows[0].hit_recording_gap_ms, 14_000);
    assert_eq!(v.rows[1].recorded_twice, 2);
    assert_eq!(v.violations.len(), 2, "{:?}", v.violations);
    assert!(v.violations[0].contains("14000 ms"));
    assert!(v.violations[1].starts_with("move cam2 to node3: 2 overlapping"));
}

#[test]
fn viewer_outages_are_charged_to_the_row_they_start_in_and_split_hit_from_untouched() {
    let mut o = base();
    // Viewer 0 watched cam1 on node2 (cam1's holder node1 is killed): hit, 4 s outage.
    o.spans.push(span(0, "live/cam1", "node2", 0, 12_000));
    o.spans.push(span(0, "live/cam1", "node2", 16_000, 40_000));
    // Viewer 1 on node1 itself: hit, reconnects to node3 after 3 s.
    o.spans.push(span(1, "live/cam2", "node1", 0, 10_500));
    o.spans.push(span(1, "live/cam2", "node3", 13_500, 40_000));
    // Viewer 2 watches cam2 on node2: untouched by the kill, a 2 s silence at 14 s.
    let mut v2 = span(2, "live/cam2", "node2", 0, 40_000);
    v2.gaps.push((14_000, 16_000));
    // ... and a 0.8 s one during the camera move (under the threshold).
    v2.gaps.push((30_100, 30_900));
    o.spans.push(v2);
    // Viewer 3 plays back, ends its session itself at 20 s, starts again at 25 s.
    let mut p = span(3, "playback/cam1", "node4", 0, 20_000);
    p.voluntary = true;
    o.spans.push(p);
    o.spans
        .push(span(3, "playback/cam1", "node4", 25_000, 40_000));
    let v = check(&o, &Limits::default());
    let r = &v.rows[0];
    assert_eq!((r.hit_outages, r.hit_longest_ms), (2, 4_000));
    assert_eq!((r.other_outages, r.other_longest_ms), (1, 2_000));
    assert_eq!(v.rows[1].other_outages, 0);
    assert_eq!(v.violations.len(), 1);
}

#[test]
fn refusals_and_requests_sent_to_the_dead_node_are_counted_with_their_duration() {
    let mut o = base();
    for (at, dead) in [(10_200, true), (11_000, true), (12_500, false)] {
        o.refusals.push(Refusal {
            at_ms: at,
            asked: "node2".into(),
            sent_to: Some("node1".into()),
            dead,
            reason: "connect refused".into(),
        });
    }
    let v = check(&o, &Limits::default());
    let r = &v.rows[0];
    assert_eq!((r.refused, r.sent_to_dead, r.refused_for_ms), (3, 2, 2_500));
    assert!(v.violations.is_empty(), "{:?}", v.violations);
}

#[test]
fn two_schedulers_count_only_after_the_heal_time() {
    let mut o = base();
    let two = |at| SchedulerSample {
        at_ms: at,
        views: vec![
            ("node2".into(), Some("node2".into())),
            ("node3".into(), Some("node3".into())),
            ("node4".into(), None),
        ],
    };
    // The fault is undone at 20 s; heal time 5 s: 24 s is forgiven, 29 s is not.
    o.schedulers.push(two(24_000));
    o.schedulers.push(two(29_000));
    o.schedulers.push(SchedulerSample {
        at_ms: 29_500,
        views: vec![
            ("node2".into(), Some("node2".into())),
            ("node3".into(), Some("node2".into())),
        ],
    });
    let limits = Limits {
        heal_ms: 5_000,
        ..Limits::default()
    };
    let v = check(&o, &limits);
    assert_eq!(v.rows[0].split_schedulers, 1);
    assert_eq!(v.violations.len(), 1);
}

fn row(node: &str, sender: &str, steered_by: Option<&str>) -> SessionRow {
    SessionRow {
        node: node.into(),
        path: "playback/cam1".into(),
        sender: sender.into(),
        steered_by: steered_by.map(str::to_string),
    }
}

#[test]
fn a_move_is_whole_when_both_halves_are_listed() {
    let answered = vec!["node1".into(), "node2".into(), "node3".into()];
    let whole = SessionSample {
        at_ms: 35_000,
        rows: vec![
            row("node1", "node2", None),
            row("node2", "node2", Some("node1")),
            row("node3", "node3", None),
        ],
        answered: answered.clone(),
    };
    assert_eq!(half_moved(&whole), 0);
    // node1 still steers a session node2 no longer sends; node3 hosts one for node2, which
    // does not know it.
    let halves = SessionSample {
        at_ms: 35_000,
        rows: vec![
            row("node1", "node2", None),
            row("node3", "node3", Some("node2")),
        ],
        answered,
    };
    assert_eq!(half_moved(&halves), 2);
    // The other half on a node that did not answer is not counted.
    let unknown = SessionSample {
        at_ms: 35_000,
        rows: vec![row("node1", "node5", None)],
        answered: vec!["node1".into()],
    };
    assert_eq!(half_moved(&unknown), 0);
    let mut o = base();
    o.sessions.push(halves);
    let v = check(&o, &Limits::default());
    assert_eq!(v.rows[1].half_moved, 2);
    assert!(v.violations[0].contains("2 sessions half-moved"));
}

#[test]
fn a_full_disk_hits_every_camera_but_no_viewer_and_a_fault_not_made_is_not_checked() {
    let mut o = base();
    let mut full = event("shared storage full", 10_000, 20_000, &[]);
    full.stops_recording = true;
    let mut netem = event("20 ms delay from node2", 30_000, 35_000, &["node2"]);
    netem.not_made = Some("tc netem unsupported".into());
    o.events = vec![full, netem];
    let mut cam2 = seconds(0, 12_000);
    cam2.extend(seconds(22_000, 40_000));
    o.segments.insert("cam2".into(), cam2);
    // A live viewer of cam1, held by node1, silent 2 s during the full disk: live viewing
    // must go on, so it is not hit.
    let mut v0 = span(0, "live/cam1", "node3", 0, 40_000);
    v0.gaps.push((15_000, 17_000));
    v0.gaps.push((31_000, 33_000));
    o.spans.push(v0);
    let v = check(&o, &Limits::default());
    assert_eq!(v.rows[0].hit_cameras, 1);
    assert_eq!(v.rows[0].other_outages, 1);
    assert_eq!(v.rows[1].other_outages, 1);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert!(v.violations[0].starts_with("shared storage full: 1 outages"));
}

/// A loss that began just before its fault — the writer's open segment, a viewer's last
/// packet a frame before the partition's rules went in — is the fault's, not the row's
/// before it; one that began well before (beyond the lead) stays where it began.
#[test]
fn a_loss_that_began_just_before_its_fault_is_charged_to_the_fault() {
    let mut o = base();
    // cam1 (node1, the killed writer): last segment ended at 9.4 s, 0.6 s before the
    // kill at 10 s; back at 16 s. cam2: a gap from 8.0 s, 2 s before it: untouched.
    let mut cam1 = seconds(0, 9_000);
    cam1.push((9_000, 9_400));
    cam1.extend(seconds(16_000, 40_000));
    o.segments.insert("cam1".into(), cam1);
    let mut cam2 = seconds(0, 8_000);
    cam2.extend(seconds(9_000, 40_000));
    o.segments.insert("cam2".into(), cam2);
    // A viewer of node1's, silent from 9.9 s (a frame before the kill) to 13 s.
    o.spans.push(span(1, "live/cam1", "node1", 0, 9_900));
    o.spans.push(span(1, "live/cam1", "node2", 13_000, 40_000));
    // Rows need an event before the kill for the early losses to land in: a move at 5 s.
    let mut early = event("move cam3 to node2", 5_000, 5_000, &[]);
    early.hits_cameras = vec!["cam3".into()];
    o.events.insert(0, early);
    let v = check(&o, &Limits::default());
    let (before, kill) = (&v.rows[0], &v.rows[1]);
    assert_eq!((kill.hit_cameras, kill.hit_recording_gap_ms), (1, 6_600));
    assert_eq!((kill.hit_outages, kill.hit_longest_ms), (1, 3_100));
    assert_eq!((before.other_recording_gaps, before.other_outages), (1, 0));
    assert_eq!(before.details, vec!["cam2: no segment from 8000 to 9000"]);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
}

/// A full share stops every recording for as long as it lasts: the limit is its length
/// and the writers' resumption, not a takeover's.
#[test]
fn a_full_shares_gap_is_bounded_by_its_length_and_the_resumption() {
    let mut o = base();
    let mut full = event("shared storage full", 10_000, 24_000, &[]);
    full.stops_recording = true;
    o.events = vec![full];
    // cam1 resumes 3 s after the share is freed (within 4 s), cam2 5 s after (beyond).
    let mut cam1 = seconds(0, 10_000);
    cam1.extend(seconds(27_000, 40_000));
    let mut cam2 = seconds(0, 10_000);
    cam2.extend(seconds(29_000, 40_000));
    o.segments.insert("cam1".into(), cam1);
    o.segments.insert("cam2".into(), cam2);
    let v = check(&o, &Limits::default());
    assert_eq!(v.rows[0].hit_cameras, 2);
    assert_eq!(v.rows[0].hit_recording_gap_ms, 19_000);
    assert_eq!(
        v.violations,
        vec!["shared storage full: a hit camera was not recorded for 19000 ms (limit 18000 ms)"]
    );
}
