//! The session rules without sockets: every method in every state, a refused PLAY,
//! PAUSE/resume identity, Range/Scale/end combinations, keepalive expiry.

use super::*;
use vigil_proto::rtsp::parse_transports;
use vigil_proto::sdp;

const SDP: &str = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=c\r\nt=0 0\r\n\
m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:trackID=0\r\n\
m=audio 0 RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\na=control:trackID=1\r\n";

/// A resume position as the shell's cursor would be: (segment start, frame).
type Cur = (i64, usize);

const ORIGIN: i64 = 1_000_000;

fn presentation(url_end: Option<i64>) -> Presentation<Cur> {
    Presentation::new(ORIGIN, url_end, sdp::parse(SDP).unwrap(), 2.0)
}

fn tcp(track: u8) -> Transport {
    Transport::Tcp {
        rtp_channel: track * 2,
        rtcp_channel: track * 2 + 1,
    }
}

fn setup_of(track: u16) -> TrackSetup {
    TrackSetup {
        ssrc: 0x1000 + u32::from(track),
        first_seq: 100 * track,
        first_ts: 5_000,
    }
}

fn session(kind: SessionKind, playback: bool, now: Instant) -> Session<Cur> {
    let pb = playback.then(|| presentation(None));
    Session::new("S1".into(), kind, 2, Duration::from_secs(60), pb, now)
}

fn play_req(headers: &[(&str, &str)]) -> Request {
    let mut r = Request::new(Method::Play, "rtsp://h/playback/c?start=x").header("Session", "S1");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r
}

/// A session brought into `state` the way a client would.
fn in_state(kind: SessionKind, playback: bool, state: SessionState) -> Session<Cur> {
    let now = Instant::now();
    let mut s = session(kind, playback, now);
    if state == SessionState::Init {
        return s;
    }
    s.check_setup(true).unwrap();
    s.commit_setup(0, tcp(0), setup_of(0), now);
    match state {
        SessionState::Playing if playback => {
            let ask = s.check_play(&play_req(&[])).unwrap();
            let plan = s.decide_play(ask, ORIGIN, ORIGIN + 60_000, true).unwrap();
            s.commit_play(plan, |_| 0, |i| format!("t{i}"), now);
        }
        SessionState::Playing => {
            s.check_play_live().unwrap();
            s.commit_play_live(now);
        }
        SessionState::Recording => {
            s.check_record(true).unwrap();
            s.commit_record(now);
        }
        _ => {}
    }
    assert_eq!(s.state(), state);
    s
}

#[test]
fn every_method_in_every_state() {
    use SessionKind::{Play as P, Record as R};
    use SessionState::*;
    let ok = |s| Ok::<SessionState, u16>(s);
    let err = |c: StatusCode| Err::<SessionState, u16>(c.0);
    let e455 = err(StatusCode::METHOD_NOT_VALID_IN_THIS_STATE);
    let other = Method::Other("FLY".into());
    // (kind, state, method, expected next state or status)
    let table: Vec<(SessionKind, SessionState, Method, Result<SessionState, u16>)> = vec![
        (P, Init, Method::Setup, ok(Ready)),
        (P, Ready, Method::Setup, ok(Ready)),
        (P, Playing, Method::Setup, ok(Playing)),
        (R, Recording, Method::Setup, ok(Recording)),
        (P, Init, Method::Play, e455),
        (P, Ready, Method::Play, ok(Playing)),
        (P, Playing, Method::Play, ok(Playing)),
        (R, Ready, Method::Play, e455),
        (R, Recording, Method::Play, e455),
        (P, Ready, Method::Record, e455),
        (P, Playing, Method::Record, e455),
        (R, Init, Method::Record, e455),
        (R, Ready, Method::Record, ok(Recording)),
        (R, Recording, Method::Record, ok(Recording)),
        (P, Init, Method::Pause, e455),
        (P, Ready, Method::Pause, ok(Ready)),
        (P, Playing, Method::Pause, ok(Ready)),
        (R, Recording, Method::Pause, ok(Ready)),
        (P, Init, Method::Teardown, ok(Init)),
        (P, Playing, Method::Teardown, ok(Init)),
        (R, Recording, Method::Teardown, ok(Init)),
        (P, Playing, Method::Options, ok(Playing)),
        (P, Ready, Method::Describe, ok(Ready)),
        (R, Recording, Method::GetParameter, ok(Recording)),
        (P, Playing, Method::SetParameter, ok(Playing)),
        (P, Playing, Method::Announce, e455),
        (R, Ready, Method::Announce, e455),
        (P, Ready, Method::Redirect, e455),
        (P, Playing, other.clone(), err(StatusCode::NOT_IMPLEMENTED)),
        (R, Init, other, err(StatusCode::NOT_IMPLEMENTED)),
    ];
    for (kind, state, method, want) in table {
        let s = in_state(kind, false, state);
        let got = s.check(&method).map_err(|r| r.status.0);
        assert_eq!(got, want, "{kind:?} {state:?} {}", method.as_str());
        if let Err(r) = s.check(&method) {
            if r.status == StatusCode::METHOD_NOT_VALID_IN_THIS_STATE {
                assert!(
                    r.reason.contains(method.as_str()) && r.reason.contains(&format!("{state:?}")),
                    "the reason names the method and state: {}",
                    r.reason
                );
            }
        }
    }
}

#[test]
fn the_typed_method_checks_follow_the_table_and_commit_nothing() {
    use SessionState::*;
    // Live PLAY: Init refused, Ready starts, Playing resumes, a recorder refused.
    assert!(in_state(SessionKind::Play, false, Init)
        .check_play_live()
        .is_err());
    let ready = in_state(SessionKind::Play, false, Ready);
    assert_eq!(ready.check_play_live(), Ok(LivePlay::Start));
    assert_eq!(ready.state(), Ready, "checking commits nothing");
    let mut paused = in_state(SessionKind::Play, false, Playing);
    assert_eq!(paused.check_pause(), Ok(LivePause::Hold));
    paused.commit_pause(Instant::now());
    assert_eq!(paused.state(), Ready);
    assert_eq!(paused.check_play_live(), Ok(LivePlay::Resume));
    assert!(in_state(SessionKind::Record, false, Recording)
        .check_play_live()
        .is_err());
    // A playback session is not played as live.
    assert!(in_state(SessionKind::Play, true, Ready)
        .check_play_live()
        .is_err());
    // PAUSE before PLAY does nothing to media.
    assert_eq!(ready.check_pause(), Ok(LivePause::Nothing));
    assert!(in_state(SessionKind::Play, false, Init)
        .check_pause()
        .is_err());
    // RECORD.
    let rec = in_state(SessionKind::Record, false, Ready);
    assert_eq!(rec.check_record(true), Ok(Record::Start));
    let no_announce = rec.check_record(false).unwrap_err();
    assert_eq!(
        no_announce.status,
        StatusCode::METHOD_NOT_VALID_IN_THIS_STATE
    );
    assert_eq!(
        rec.state(),
        Ready,
        "a refused RECORD leaves the session in Ready"
    );
    let recording = in_state(SessionKind::Record, false, Recording);
    assert_eq!(recording.check_record(true), Ok(Record::Already));
    assert!(in_state(SessionKind::Play, false, Ready)
        .check_record(true)
        .is_err());
    // A playback's PAUSE stops its sender only while it sends.
    let playing = in_state(SessionKind::Play, true, Playing);
    assert_eq!(playing.check_pause(), Ok(LivePause::StopSender));
    assert_eq!(
        in_state(SessionKind::Play, true, Ready).check_pause(),
        Ok(LivePause::Nothing)
    );
}

#[test]
fn requests_must_name_the_connection_s_session() {
    let s = session(SessionKind::Play, false, Instant::now());
    assert_eq!(own(Some(&s), Some("S1")), Ok(()));
    for (sess, header, why) in [
        (Some(&s), None, "no Session header"),
        (Some(&s), Some("S2"), "unknown session"),
        (None, Some("S1"), "unknown session"),
        (None, None, "no Session header"),
    ] {
        let r = own(sess, header).unwrap_err();
        assert_eq!(
            (r.status, r.reason.as_str()),
            (StatusCode::SESSION_NOT_FOUND, why)
        );
    }
}

#[test]
fn setup_joins_one_path_and_grows_the_tracks() {
    let now = Instant::now();
    let mut s = session(SessionKind::Play, false, now);
    let r = s.check_setup(false).unwrap_err();
    assert_eq!(r.status, StatusCode::AGGREGATE_OPERATION_NOT_ALLOWED);
    assert_eq!(s.state(), SessionState::Init);
    s.commit_setup(3, tcp(3), setup_of(3), now);
    assert_eq!(s.state(), SessionState::Ready);
    assert_eq!(
        s.transports().len(),
        4,
        "a track past the SDP's count grows the list"
    );
    assert_eq!(s.track_of_channel(6), Some((3, true)));
    assert_eq!(s.track_of_channel(7), Some((3, false)));
    assert_eq!(s.track_of_channel(0), None);
    assert_eq!(s.rtp_channels(), vec![None, None, None, Some(6)]);
    assert_eq!(s.rtcp_channel(3), Some(7));
    assert!(s.is_tcp());
    let udp = Transport::Udp {
        client_rtp: "127.0.0.1:5000".parse().unwrap(),
        client_rtcp: "127.0.0.1:5001".parse().unwrap(),
        server_port: 40_000,
    };
    let mut u = session(SessionKind::Play, false, now);
    u.commit_setup(0, udp, setup_of(0), now);
    assert!(!u.is_tcp(), "a UDP track is not interleaved");
    assert_eq!(u.rtp_channels(), vec![None, None]);
    assert_eq!(u.transports()[0], Some(udp));
}

#[test]
fn keepalive_expires_after_the_timeout_from_the_last_activity() {
    let t0 = Instant::now();
    let mut s = session(SessionKind::Play, false, t0);
    let secs = Duration::from_secs;
    assert!(!s.expired(t0 + secs(60)), "at the timeout: still alive");
    assert!(s.expired(t0 + secs(61)));
    s.touch(t0 + secs(30));
    assert_eq!(s.expires_at(), t0 + secs(90));
    assert!(!s.expired(t0 + secs(61)));
    s.touch(t0 + secs(10));
    assert_eq!(
        s.expires_at(),
        t0 + secs(90),
        "an older activity never moves it back"
    );
    assert_eq!(s.header(), "S1;timeout=60");
    // Every committed method is activity.
    s.commit_setup(0, tcp(0), setup_of(0), t0 + secs(100));
    assert_eq!(s.expires_at(), t0 + secs(160));
}

#[test]
fn scale_and_range_are_validated_before_the_state() {
    let s = in_state(SessionKind::Play, true, SessionState::Ready);
    let code = |h: &[(&str, &str)]| s.check_play(&play_req(h)).map_err(|r| r.status.0);
    assert_eq!(code(&[("Scale", "32")]), Err(456));
    assert_eq!(code(&[("Range", "npt=banana")]), Err(457));
    assert_eq!(code(&[("Range", "npt=6-2")]), Err(457));
    let ask = s
        .check_play(&play_req(&[("Range", "npt=2.5-6"), ("Scale", "2")]))
        .unwrap();
    assert_eq!(ask.asked.start, Some(ORIGIN + 2_500));
    assert_eq!(ask.play_end, Some(ORIGIN + 6_000));
    assert_eq!(ask.rate.map(|r| r.value), Some(2.0));
    // In Init, PLAY is 455 whatever it asks.
    let init = in_state(SessionKind::Play, true, SessionState::Init);
    assert_eq!(
        init.check_play(&play_req(&[])).unwrap_err().status,
        StatusCode::METHOD_NOT_VALID_IN_THIS_STATE
    );
    // A live session's PLAY is not a playback's.
    let live = in_state(SessionKind::Play, false, SessionState::Ready);
    assert!(live.check_play(&play_req(&[])).is_err());
}

#[test]
fn the_url_end_and_the_range_end_combine_earliest_first() {
    let now = Instant::now();
    let mut s = Session::new(
        "S1".into(),
        SessionKind::Play,
        2,
        Duration::from_secs(60),
        Some(presentation(Some(ORIGIN + 10_000))),
        now,
    );
    s.commit_setup(0, tcp(0), setup_of(0), now);
    let ask = |h: &[(&str, &str)]| s.check_play(&play_req(h)).unwrap();
    assert_eq!(ask(&[]).play_end, Some(ORIGIN + 10_000), "the URL's end");
    assert_eq!(ask(&[("Range", "npt=0-4")]).play_end, Some(ORIGIN + 4_000));
    assert_eq!(
        ask(&[("Range", "npt=0-40")]).play_end,
        Some(ORIGIN + 10_000)
    );
    // Decided against a recording ending at +8 s: serves to 8 s; past the URL's end 457.
    let plan = s
        .decide_play(ask(&[]), ORIGIN, ORIGIN + 8_000, true)
        .unwrap();
    assert_eq!(plan.end_ms, ORIGIN + 8_000);
    let late = s.decide_play(ask(&[]), ORIGIN + 10_000, ORIGIN + 20_000, true);
    assert_eq!(late.unwrap_err().status, StatusCode::INVALID_RANGE);
    // The window a sender gets: a Range end short of the URL's keeps the session.
    let plan = s
        .decide_play(
            ask(&[("Range", "npt=1-4")]),
            ORIGIN + 1_000,
            ORIGIN + 20_000,
            true,
        )
        .unwrap();
    let (resp, _, w) = s.commit_play(plan, |_| 0, |i| format!("u{i}"), now);
    assert_eq!(resp.headers.get("Range"), Some("npt=1.000-4.000"));
    assert_eq!(w.end_ms, Some(ORIGIN + 4_000));
    assert!(w.range_end_only);
    assert!(!w.keyframes_only);
}

#[test]
fn a_refused_play_leaves_the_session_exactly_as_it_was() {
    // Playing at Scale 2 to a Range end, with a sender running.
    let now = Instant::now();
    let mut s = in_state(SessionKind::Play, true, SessionState::Ready);
    let ask = s
        .check_play(&play_req(&[("Scale", "2"), ("Range", "npt=0-30")]))
        .unwrap();
    let plan = s.decide_play(ask, ORIGIN, ORIGIN + 60_000, true).unwrap();
    let (_, tracks, before) = s.commit_play(plan, |_| 0, |i| format!("u{i}"), now);
    let snapshot = |s: &Session<Cur>| {
        let p = s.playback().unwrap();
        (
            s.state(),
            p.scale(),
            p.range_end(),
            p.sending(),
            p.sender_window(),
        )
    };
    let was = snapshot(&s);
    // Every refusal a PLAY can meet in the core: bad Scale, bad Range, a range that ends
    // before the frame it would start at.
    assert!(s.check_play(&play_req(&[("Scale", "99")])).is_err());
    assert!(s.check_play(&play_req(&[("Range", "npt=9-3")])).is_err());
    let ask = s
        .check_play(&play_req(&[("Range", "npt=20-25"), ("Scale", "4")]))
        .unwrap();
    // The seek landed on a keyframe after the Range's end (the next recording).
    assert!(s
        .decide_play(ask, ORIGIN + 26_000, ORIGIN + 60_000, true)
        .is_err());
    assert_eq!(snapshot(&s), was, "nothing committed");
    // A PLAY without Range while playing had to stop the sender to learn its position; the
    // position turns out past the Range end: the old sender restarts as it was.
    s.sender_stopped(Handback {
        tracks,
        resume: Some((ORIGIN + 30_000, 0)),
    });
    let ask = s.check_play(&play_req(&[("Range", "npt=-5")]));
    let ask = ask.unwrap_or_else(|_| s.check_play(&play_req(&[])).unwrap());
    let refused = s.decide_play(
        PlayAsk {
            play_end: Some(ORIGIN + 5_000),
            ..ask
        },
        ORIGIN + 30_000,
        ORIGIN + 60_000,
        false,
    );
    assert!(refused.is_err());
    let (_, resume, window) = s.restart().expect("the stopped state");
    assert_eq!(resume, (ORIGIN + 30_000, 0));
    assert_eq!(
        window, before,
        "the same Scale and end as before the refused PLAY"
    );
    assert_eq!(snapshot(&s), was);
}

#[test]
fn pause_and_resume_continue_the_rtp_identity() {
    let now = Instant::now();
    let mut s = in_state(SessionKind::Play, true, SessionState::Ready);
    s.commit_setup(1, tcp(1), setup_of(1), now);
    let ask = s.check_play(&play_req(&[])).unwrap();
    assert_eq!(
        s.play_from(&ask),
        PlayFrom::Seek(ORIGIN),
        "the first PLAY starts at the origin"
    );
    let plan = s.decide_play(ask, ORIGIN, ORIGIN + 60_000, true).unwrap();
    let (resp, mut tracks, _) = s.commit_play(plan, |_| 0, |i| format!("u{i}"), now);
    // Both tracks set up: each gets SETUP's identity (the first PLAY's rebase only moves the
    // timestamp line, which has sent nothing yet).
    assert_eq!(
        resp.headers.get("RTP-Info"),
        Some("url=u0;seq=0;rtptime=5000,url=u1;seq=100;rtptime=5000")
    );
    // The sender sends 3 packets on track 0, then PAUSE hands its state back.
    for i in 0..3u16 {
        let h = vigil_proto::rtp::RtpHeader {
            marker: true,
            payload_type: 96,
            sequence: i,
            timestamp: 3_000 * u32::from(i),
            ssrc: 0,
        };
        tracks[0].identity.rewrite(&h, 10);
    }
    assert_eq!(s.check_pause(), Ok(LivePause::StopSender));
    s.sender_stopped(Handback {
        tracks,
        resume: Some((ORIGIN, 3)),
    });
    s.commit_pause(now);
    assert_eq!(s.state(), SessionState::Ready);
    assert_eq!(s.playback().unwrap().resume(), Some(&(ORIGIN, 3)));
    // Resume: no seek, the sequence continues at 3, the timestamp where it was.
    let ask = s.check_play(&play_req(&[])).unwrap();
    assert_eq!(s.play_from(&ask), PlayFrom::Resume((ORIGIN, 3)));
    let plan = s
        .decide_play(ask, ORIGIN + 120, ORIGIN + 60_000, false)
        .unwrap();
    let (resp, tracks, _) = s.commit_play(plan, |_| 9_000, |i| format!("u{i}"), now);
    assert_eq!(
        resp.headers.get("RTP-Info"),
        Some("url=u0;seq=3;rtptime=14000,url=u1;seq=100;rtptime=5000")
    );
    assert_eq!(tracks[0].identity.ssrc(), 0x1000);
    // A seek after that rebases: the line continues one 25 fps frame (3 600) past the last.
    s.sender_stopped(Handback {
        tracks,
        resume: Some((ORIGIN, 5)),
    });
    let ask = s.check_play(&play_req(&[("Range", "npt=30-")])).unwrap();
    assert_eq!(s.play_from(&ask), PlayFrom::Seek(ORIGIN + 30_000));
    let plan = s
        .decide_play(ask, ORIGIN + 30_000, ORIGIN + 60_000, true)
        .unwrap();
    let (resp, _, _) = s.commit_play(plan, |_| 0, |i| format!("u{i}"), now);
    let info = resp.headers.get("RTP-Info").unwrap();
    assert!(info.starts_with("url=u0;seq=3;rtptime=14600,"), "{info}");
}

#[test]
fn the_play_answer_says_the_range_in_the_unit_asked_and_echoes_the_rate() {
    let now = Instant::now();
    let mut s = in_state(SessionKind::Play, true, SessionState::Ready);
    let ask = s
        .check_play(&play_req(&[
            ("Range", "clock=19700101T001640Z-"),
            ("Speed", "4"),
        ]))
        .unwrap();
    assert_eq!(ask.asked.start, Some(1_000_000));
    let plan = s.decide_play(ask, 1_000_500, 1_002_000, true).unwrap();
    let (resp, _, w) = s.commit_play(plan, |_| 0, |i| format!("u{i}"), now);
    assert_eq!(
        resp.headers.get("Range"),
        Some("clock=19700101T001640.5Z-19700101T001642Z")
    );
    assert_eq!(resp.headers.get("Speed"), Some("4"));
    assert_eq!(resp.headers.get("Scale"), None);
    assert!(
        w.keyframes_only,
        "Speed 4 is above keyframes_only_above (2)"
    );
    assert_eq!(s.playback().unwrap().scale(), 4.0);
    // A later PLAY without Scale keeps the rate.
    s.sender_stopped(Handback {
        tracks: Vec::new(),
        resume: Some((0, 0)),
    });
    let ask = s.check_play(&play_req(&[])).unwrap();
    let plan = s.decide_play(ask, 1_000_600, 1_002_000, false).unwrap();
    let (resp, _, w) = s.commit_play(plan, |_| 0, |i| format!("u{i}"), now);
    assert_eq!(w.scale, 4.0);
    assert_eq!(resp.headers.get("Range"), Some("npt=0.600-2.000"));
}

#[test]
fn transports_are_chosen_from_the_offers() {
    let peer: IpAddr = "127.0.0.5".parse().unwrap();
    let choose = |v: &str, kind| {
        choose_transport(
            &parse_transports(v).unwrap(),
            v,
            1,
            kind,
            peer,
            Profiles::PLAIN,
        )
        .map(|(c, _, _)| c)
    };
    assert_eq!(
        choose("RTP/AVP/TCP;unicast", SessionKind::Play),
        Ok(Chosen::Tcp { channels: (2, 3) })
    );
    assert_eq!(
        choose("RTP/AVP/TCP;unicast;interleaved=6-7", SessionKind::Play),
        Ok(Chosen::Tcp { channels: (6, 7) })
    );
    assert_eq!(
        choose(
            "RTP/AVP;multicast,RTP/AVP;unicast;client_port=5000-5001",
            SessionKind::Play
        ),
        Ok(Chosen::Udp {
            client_rtp: 5000,
            client_rtcp: 5001
        })
    );
    let code = |v: &str, kind| choose(v, kind).unwrap_err().status;
    assert_eq!(
        code("RTP/AVP;unicast", SessionKind::Play),
        StatusCode::UNSUPPORTED_TRANSPORT
    );
    // Port 0: nothing can be sent there; the next offer is taken, or none.
    for zero in ["client_port=0-1", "client_port=5000-0"] {
        assert_eq!(
            code(&format!("RTP/AVP;unicast;{zero}"), SessionKind::Play),
            StatusCode::UNSUPPORTED_TRANSPORT,
            "{zero}"
        );
    }
    assert_eq!(
        choose(
            "RTP/AVP;unicast;client_port=0-1,RTP/AVP/TCP;unicast",
            SessionKind::Play
        ),
        Ok(Chosen::Tcp { channels: (2, 3) })
    );
    assert_eq!(
        code("RTP/SAVP;unicast;client_port=5000-5001", SessionKind::Play),
        StatusCode::UNSUPPORTED_TRANSPORT
    );
    assert_eq!(
        code(
            "RTP/AVP;unicast;client_port=5000-5001;destination=198.18.0.9",
            SessionKind::Play
        ),
        StatusCode::UNSUPPORTED_TRANSPORT,
        "media to a third party"
    );
    assert!(choose(
        "RTP/AVP;unicast;client_port=5000-5001;destination=127.0.0.5",
        SessionKind::Play
    )
    .is_ok());
    assert_eq!(
        code("RTP/AVP/TCP;unicast;mode=record", SessionKind::Play),
        StatusCode::METHOD_NOT_VALID_IN_THIS_STATE
    );
    assert!(choose("RTP/AVP/TCP;unicast;mode=record", SessionKind::Record).is_ok());
}

#[test]
fn srtp_is_taken_only_where_the_connection_allows_it() {
    let peer: IpAddr = "127.0.0.5".parse().unwrap();
    let rtsps = |plain_udp| Profiles {
        savp: true,
        plain_udp,
    };
    let choose = |v: &str, kind, p| {
        choose_transport(&parse_transports(v).unwrap(), v, 0, kind, peer, p)
            .map(|(c, _, savp)| (c, savp))
    };
    let udp = Chosen::Udp {
        client_rtp: 5000,
        client_rtcp: 5001,
    };
    let savp_udp = "RTP/SAVP;unicast;client_port=5000-5001";
    assert_eq!(
        choose(savp_udp, SessionKind::Play, rtsps(false)),
        Ok((udp, true))
    );
    assert_eq!(
        choose(
            "RTP/SAVP/TCP;unicast;interleaved=0-1",
            SessionKind::Play,
            rtsps(false)
        ),
        Ok((Chosen::Tcp { channels: (0, 1) }, true))
    );
    // Plain RTSP, or a track its DESCRIBE gave no key: 461.
    assert!(choose(savp_udp, SessionKind::Play, Profiles::PLAIN).is_err());
    // A publisher's SRTP is not served.
    assert!(choose(
        "RTP/SAVP/TCP;unicast;mode=record",
        SessionKind::Record,
        rtsps(true)
    )
    .is_err());
    // "require": plain UDP refused with the reason, plain TCP (inside TLS) taken, and a
    // client listing both gets the first it may have.
    let avp_udp = "RTP/AVP;unicast;client_port=5000-5001";
    let e = choose(avp_udp, SessionKind::Play, rtsps(false)).unwrap_err();
    assert_eq!(e.status, StatusCode::UNSUPPORTED_TRANSPORT);
    assert!(e.reason.contains("tls.srtp"), "{}", e.reason);
    assert_eq!(
        choose(
            &format!("{avp_udp},RTP/AVP/TCP;unicast"),
            SessionKind::Play,
            rtsps(false)
        ),
        Ok((Chosen::Tcp { channels: (0, 1) }, false))
    );
    assert_eq!(
        choose(
            &format!("{avp_udp},{savp_udp}"),
            SessionKind::Play,
            rtsps(false)
        ),
        Ok((udp, true))
    );
    // "offer": plain UDP still taken.
    assert_eq!(
        choose(avp_udp, SessionKind::Play, rtsps(true)),
        Ok((udp, false))
    );
}

#[test]
fn setup_urls_name_tracks_by_their_controls() {
    let sdp = sdp::parse(SDP).unwrap();
    assert_eq!(
        track_index(&sdp, SessionKind::Play, Some("trackID=1")),
        Ok(1)
    );
    let err = |k, c| track_index(&sdp, k, c).unwrap_err().status;
    assert_eq!(
        err(SessionKind::Play, Some("trackID=2")),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        err(SessionKind::Play, Some("streamid=0")),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        err(SessionKind::Play, None),
        StatusCode::AGGREGATE_OPERATION_NOT_ALLOWED
    );
    // A publisher's own controls, bare or as the last segment of an absolute URL.
    let pushed = sdp::parse(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=c\r\nt=0 0\r\n\
m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:streamid=0\r\n\
m=audio 0 RTP/AVP 8\r\na=rtpmap:8 PCMA/8000\r\na=control:rtsp://cam/live/stream=1\r\n",
    )
    .unwrap();
    assert_eq!(
        track_index(&pushed, SessionKind::Record, Some("streamid=0")),
        Ok(0)
    );
    assert_eq!(
        track_index(&pushed, SessionKind::Record, Some("stream=1")),
        Ok(1)
    );
    let one = sdp::parse(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=c\r\nt=0 0\r\n\
m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n",
    )
    .unwrap();
    assert_eq!(track_index(&one, SessionKind::Play, None), Ok(0));
}

#[test]
fn a_play_without_range_while_sending_continues_where_the_sender_is() {
    let s = in_state(SessionKind::Play, true, SessionState::Playing);
    let ask = s.check_play(&play_req(&[("Scale", "2")])).unwrap();
    assert_eq!(s.play_from(&ask), PlayFrom::WhereSending);
    let ask = s.check_play(&play_req(&[("Range", "npt=now-")])).unwrap();
    assert_eq!(
        s.play_from(&ask),
        PlayFrom::WhereSending,
        "npt=now- names no start"
    );
    let ask = s.check_play(&play_req(&[("Range", "npt=3-")])).unwrap();
    assert_eq!(s.play_from(&ask), PlayFrom::Seek(ORIGIN + 3_000));
    // A run that ended (no resume position) starts over at the origin.
    let mut ended = in_state(SessionKind::Play, true, SessionState::Playing);
    ended.sender_stopped(Handback {
        tracks: Vec::new(),
        resume: None,
    });
    let ask = ended.check_play(&play_req(&[])).unwrap();
    assert_eq!(ended.play_from(&ask), PlayFrom::Seek(ORIGIN));
    assert!(
        ended.restart().is_none(),
        "nothing to restart after the end"
    );
}
