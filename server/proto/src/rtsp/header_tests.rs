//! Tests of the typed header values: Range, Scale/Speed, Session, RTP-Info, state machine.

use super::*;

#[test]
fn npt_ranges() {
    let r = Range::parse("npt=0.000-").unwrap();
    assert_eq!(
        r,
        Range::Npt {
            start: NptTime::Seconds(0.0),
            end: None
        }
    );
    assert_eq!(r.to_string(), "npt=0.000-");
    let r = Range::parse("npt=5-20").unwrap();
    assert_eq!(r.to_string(), "npt=5.000-20.000");
    assert_eq!(Range::parse("npt=now-").unwrap().to_string(), "npt=now-");
    let r = Range::parse("npt=1:02:03.5-").unwrap();
    assert_eq!(
        r,
        Range::Npt {
            start: NptTime::Seconds(3723.5),
            end: None
        }
    );
    let r = Range::parse(" NPT = 10 - 1:00:00 ;time=19970123T143720Z").unwrap();
    assert_eq!(
        r,
        Range::Npt {
            start: NptTime::Seconds(10.0),
            end: Some(NptTime::Seconds(3600.0))
        }
    );
    assert_eq!(
        Range::parse("npt=-20").unwrap(),
        Range::Npt {
            start: NptTime::Seconds(0.0),
            end: Some(NptTime::Seconds(20.0))
        }
    );
    assert_eq!(
        Range::parse("npt=.5-").unwrap(),
        Range::Npt {
            start: NptTime::Seconds(0.5),
            end: None
        }
    );
    for bad in [
        "npt=",
        "npt=-",
        "npt=abc-",
        "npt=1e3-",
        "npt=inf-",
        "npt=NaN-",
        "npt=-1-",
        "npt=1:60:00-",
        "npt=1:00:60-",
        "npt=1:2-",
        "npt=1:2:3:4-",
        "npt=.-",
        "0-10",
        "foo=1-2",
        "npt=5",
    ] {
        let e = Range::parse(bad).unwrap_err();
        assert_eq!(e.status(), StatusCode::INVALID_RANGE, "{bad}");
    }
    assert!(matches!(
        Range::parse("smpte=10:07:00-10:07:33:05.01"),
        Err(HeaderError::Unsupported { .. })
    ));
}

#[test]
fn clock_ranges() {
    let r = Range::parse("clock=19961108T142300Z-19961108T143520Z").unwrap();
    let Range::Clock {
        start,
        end: Some(end),
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(start.unix_millis, 847_462_980_000);
    assert_eq!(end.unix_millis - start.unix_millis, 740_000);
    assert_eq!(r.to_string(), "clock=19961108T142300Z-19961108T143520Z");
    let r = Range::parse("clock=19961108T142300.25Z-").unwrap();
    assert_eq!(r.to_string(), "clock=19961108T142300.25Z-");
    for bad in [
        "clock=19961108T142300-",
        "clock=19961308T142300Z-",
        "clock=19960230T000000Z-",
        "clock=1996110T142300Z-",
        "clock=19961108T246000Z-",
        "clock=-19961108T142300Z",
    ] {
        assert!(Range::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(
        UtcTime::parse_clock("20000229T000000Z")
            .unwrap()
            .to_clock_string(),
        "20000229T000000Z"
    );
    assert_eq!(
        UtcTime::parse_clock("19691231T235959.5Z")
            .unwrap()
            .unix_millis,
        -500
    );
}

#[test]
fn rfc3339() {
    let t = UtcTime::parse_rfc3339("2026-11-29T08:00:00Z").unwrap();
    assert_eq!(t.to_rfc3339(), "2026-11-29T08:00:00Z");
    assert_eq!(UtcTime::parse_clock("20261129T080000Z").unwrap(), t);
    let f = UtcTime::parse_rfc3339("2026-11-29T08:00:00.123456Z").unwrap();
    assert_eq!(f.unix_millis - t.unix_millis, 123);
    assert_eq!(f.to_rfc3339(), "2026-11-29T08:00:00.123Z");
    assert_eq!(super::rfc3339(f.unix_millis), "2026-11-29T08:00:00.123Z");
    assert_eq!(
        UtcTime::parse_rfc3339("2026-11-29T09:30:00+01:30").unwrap(),
        t
    );
    assert_eq!(
        UtcTime::parse_rfc3339("2026-11-29t07:00:00-01:00").unwrap(),
        t
    );
    assert_eq!(
        UtcTime::parse_rfc3339("1970-01-01T00:00:00Z")
            .unwrap()
            .unix_millis,
        0
    );
    // Leap days, fractions and offsets other than Z.
    assert_eq!(
        UtcTime::parse_rfc3339("2024-02-29T23:59:59.999+01:00")
            .unwrap()
            .to_rfc3339(),
        "2024-02-29T22:59:59.999Z"
    );
    assert_eq!(
        UtcTime::parse_rfc3339("2100-03-01T00:00:00Z")
            .unwrap()
            .unix_millis
            - UtcTime::parse_rfc3339("2100-02-28T00:00:00Z")
                .unwrap()
                .unix_millis,
        86_400_000,
        "2100 is not a leap year"
    );
    for bad in [
        "2026-11-29",
        "2026-11-29T08:00:00",
        "2026-13-01T00:00:00Z",
        "2026-11-29T08:00:00.Z",
        "2026/11/29T08:00:00Z",
        "2026-02-29T08:00:00Z",
        "2026-11-29T08:00:00+99:00",
        "２026-11-29T08:00:00Z",
    ] {
        assert!(UtcTime::parse_rfc3339(bad).is_err(), "{bad}");
    }
}

#[test]
fn scale_and_speed() {
    assert_eq!(parse_scale("1"), Ok(1.0));
    assert_eq!(parse_scale(" -2.5 "), Ok(-2.5));
    assert_eq!(parse_scale("+0.5"), Ok(0.5));
    for bad in ["", "inf", "NaN", "-", "1e3", "abc", "--1", "1.2.3"] {
        assert!(parse_scale(bad).is_err(), "{bad}");
    }
    assert_eq!(parse_speed("2.0"), Ok(2.0));
    assert!(parse_speed("0").is_err());
    assert!(parse_speed("-1").is_err());
    assert_eq!(parse_speed("x").unwrap_err().header(), "Speed");
}

#[test]
fn session_header() {
    let s = SessionHeader::parse("12345678;timeout=60").unwrap();
    assert_eq!(
        s,
        SessionHeader {
            id: "12345678".into(),
            timeout: Some(60)
        }
    );
    assert_eq!(s.to_string(), "12345678;timeout=60");
    let s = SessionHeader::parse(" 3f2a$-_.+ ; Timeout = 5 ; x=y").unwrap();
    assert_eq!((s.id.as_str(), s.timeout), ("3f2a$-_.+", Some(5)));
    assert_eq!(SessionHeader::parse("abc").unwrap().to_string(), "abc");
    for bad in [
        "",
        ";timeout=5",
        "a b",
        "abc;timeout=x",
        "abc;timeout=-1",
        "abc;timeout=99999999999",
    ] {
        assert!(SessionHeader::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn rtp_info() {
    let entries = vec![
        RtpInfo {
            url: "rtsp://h/live/cam/trackID=0".into(),
            seq: Some(45102),
            rtptime: Some(12345678),
        },
        RtpInfo {
            url: "rtsp://h/live/cam/trackID=1".into(),
            seq: None,
            rtptime: Some(1),
        },
    ];
    let s = format_rtp_info(&entries);
    assert_eq!(
        s,
        "url=rtsp://h/live/cam/trackID=0;seq=45102;rtptime=12345678,url=rtsp://h/live/cam/trackID=1;rtptime=1"
    );
    assert_eq!(parse_rtp_info(&s).unwrap(), entries);
    let odd =
        parse_rtp_info("url=rtsp://h/a,b;x=1;seq=1 ; ssrc=1234, url=rtsp://h/c;rtptime=5").unwrap();
    assert_eq!(odd[0].url, "rtsp://h/a,b;x=1");
    assert_eq!(odd[0].seq, Some(1));
    assert_eq!(odd[1].rtptime, Some(5));
    for bad in [
        "",
        "seq=1",
        "url=rtsp://h/a;seq=70000",
        "url=rtsp://h/a;rtptime=x",
        "url=",
    ] {
        assert!(parse_rtp_info(bad).is_err(), "{bad}");
    }
}

#[test]
fn state_machine() {
    use SessionKind::{Play as P, Record as R};
    use SessionState::*;
    let bad = Err(StatusCode::METHOD_NOT_VALID_IN_THIS_STATE);
    assert_eq!(next_state(Init, P, &Method::Setup), Ok(Ready));
    assert_eq!(next_state(Ready, P, &Method::Setup), Ok(Ready));
    assert_eq!(next_state(Playing, P, &Method::Setup), Ok(Playing));
    assert_eq!(next_state(Recording, R, &Method::Setup), Ok(Recording));
    assert_eq!(next_state(Ready, P, &Method::Play), Ok(Playing));
    assert_eq!(next_state(Playing, P, &Method::Play), Ok(Playing));
    assert_eq!(next_state(Ready, R, &Method::Play), bad);
    assert_eq!(next_state(Init, P, &Method::Play), bad);
    assert_eq!(next_state(Ready, R, &Method::Record), Ok(Recording));
    assert_eq!(next_state(Recording, R, &Method::Record), Ok(Recording));
    assert_eq!(next_state(Ready, P, &Method::Record), bad);
    assert_eq!(next_state(Init, R, &Method::Record), bad);
    assert_eq!(next_state(Playing, P, &Method::Pause), Ok(Ready));
    assert_eq!(next_state(Recording, R, &Method::Pause), Ok(Ready));
    assert_eq!(next_state(Ready, R, &Method::Pause), Ok(Ready));
    assert_eq!(next_state(Init, P, &Method::Pause), bad);
    for s in [Init, Ready, Playing, Recording] {
        assert_eq!(next_state(s, P, &Method::Teardown), Ok(Init));
        for m in [
            Method::Options,
            Method::GetParameter,
            Method::SetParameter,
            Method::Describe,
        ] {
            assert_eq!(next_state(s, R, &m), Ok(s));
        }
        assert_eq!(next_state(s, P, &Method::Announce), bad);
        assert_eq!(
            next_state(s, P, &Method::Other("X".into())),
            Err(StatusCode::NOT_IMPLEMENTED)
        );
    }
}

#[test]
fn npt_millis_are_checked() {
    let ms = |v: &str| match Range::parse(v).unwrap() {
        Range::Npt { start, .. } => start.millis(),
        other => panic!("{other:?}"),
    };
    assert_eq!(ms("npt=5.0004-"), Some(5000));
    assert_eq!(ms("npt=1:00:00.5-"), Some(3_600_500));
    assert_eq!(ms("npt=now-"), None);
    assert_eq!(ms("npt=99999999999999999999-"), None);
    assert_eq!(ms(&format!("npt={}-", "9".repeat(300))), None);
    // The largest accepted value still adds to any recorded instant without overflow.
    let max = ms("npt=3200000000000-").unwrap();
    assert!(i64::from(u32::MAX).checked_add(max).is_some());
}

#[test]
fn time_spans() {
    let span = |s, e| TimeSpan::parse(s, e);
    // 2026-11-29T08:00:00Z = 20 786 days × 86 400 s + 8 h.
    let t0 = (20_786 * 86_400 + 8 * 3600) * 1000;
    assert_eq!(
        span(Some("2026-11-29T08:00:00Z"), None),
        Ok(TimeSpan {
            start_ms: t0,
            end_ms: None
        })
    );
    // Offsets and fractions, at either end.
    assert_eq!(
        span(
            Some("2026-11-29T09:00:00+01:00"),
            Some("2026-11-29T02:30:10.25-05:30")
        ),
        Ok(TimeSpan {
            start_ms: t0,
            end_ms: Some(t0 + 10_250)
        })
    );
    assert_eq!(
        span(Some("2026-11-29T08:00:00.001Z"), None).map(|s| s.start_ms),
        Ok(t0 + 1)
    );
    assert_eq!(
        span(None, Some("2026-11-29T08:00:00Z")),
        Err(TimeSpanError::Missing("start"))
    );
    for bad in [
        "yesterday",
        "2026-13-40T08:00:00Z",
        "2026-11-29T08:00:00",
        "2026-11-29",
        "",
    ] {
        assert_eq!(
            span(Some(bad), None),
            Err(TimeSpanError::NotRfc3339 {
                key: "start",
                value: bad.into()
            }),
            "{bad}"
        );
        assert!(matches!(
            span(Some("2026-11-29T08:00:00Z"), Some(bad)),
            Err(TimeSpanError::NotRfc3339 { key: "end", .. })
        ));
    }
    // An end at or before the start.
    for end in ["2026-11-29T08:00:00Z", "2026-11-29T09:00:00+02:00"] {
        assert_eq!(
            span(Some("2026-11-29T08:00:00Z"), Some(end)),
            Err(TimeSpanError::EndNotAfterStart),
            "{end}"
        );
    }
    // The peer's text is quoted, cut to MAX_ERROR_TEXT.
    let long = "x".repeat(5000);
    let e = span(Some(&long), None).unwrap_err().to_string();
    assert!(e.starts_with("start=\"xxx") && e.len() < 300, "{e}");
}
