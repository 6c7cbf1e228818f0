//! Bytes-in tests of the stream framer, using request texts captured from real clients.

use bytes::Bytes;

use super::*;

fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>, ParseError> {
    parse_frame(buf, &Limits::default())
}

fn request(buf: &[u8]) -> (Request, usize) {
    match parse(buf) {
        Ok(Some((Frame::Request(r), n))) => (r, n),
        other => panic!("expected request, got {other:?}"),
    }
}

const FFMPEG_SETUP: &[u8] = b"SETUP rtsp://127.0.0.1:8554/live/cam/streamid=0 RTSP/1.0\r\n\
Transport: RTP/AVP/UDP;unicast;client_port=20000-20001;mode=record\r\n\
CSeq: 3\r\n\
User-Agent: Lavf59.27.100\r\n\
Session: 3f2a9c1d0b\r\n\
\r\n";

#[test]
fn ffmpeg_setup() {
    let (r, n) = request(FFMPEG_SETUP);
    assert_eq!(n, FFMPEG_SETUP.len());
    assert_eq!(r.method, Method::Setup);
    assert_eq!(r.uri, "rtsp://127.0.0.1:8554/live/cam/streamid=0");
    assert_eq!(r.cseq(), Some(3));
    assert_eq!(r.session_id(), Some("3f2a9c1d0b"));
    assert_eq!(r.headers.get("user-agent"), Some("Lavf59.27.100"));
    let t = parse_transports(r.headers.get("Transport").unwrap()).unwrap();
    assert_eq!(t[0].client_port, Some((20000, 20001)));
    assert_eq!(t[0].mode, Some(TransportMode::Record));
    assert!(r.body.is_empty());
}

#[test]
fn ffmpeg_announce_with_body() {
    let sdp = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=No Name\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\na=tool:libavformat 59.27.100\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:streamid=0\r\n";
    let msg = format!(
        "ANNOUNCE rtsp://127.0.0.1:8554/live/cam RTSP/1.0\r\nContent-Type: application/sdp\r\nCSeq: 2\r\nUser-Agent: Lavf59.27.100\r\nContent-Length: {}\r\n\r\n{sdp}",
        sdp.len()
    );
    let bytes = msg.as_bytes();
    // Every strict prefix asks for more bytes.
    for cut in 0..bytes.len() {
        assert_eq!(parse(&bytes[..cut]), Ok(None), "cut at {cut}");
    }
    let (r, n) = request(bytes);
    assert_eq!(n, bytes.len());
    assert_eq!(r.method, Method::Announce);
    assert_eq!(r.body, Bytes::from(sdp));
    assert_eq!(
        r.headers.get("Content-Length"),
        None,
        "framing header is consumed"
    );
    assert_eq!(r.headers.get("content-type"), Some("application/sdp"));
}

#[test]
fn gstreamer_setup_with_alternatives() {
    let msg = b"SETUP rtsp://127.0.0.1:8554/test/stream=0 RTSP/1.0\r\n\
CSeq: 3\r\n\
User-Agent: GStreamer/1.22.0\r\n\
Transport: RTP/AVP;unicast;client_port=54116-54117;mode=record,RTP/AVP/TCP;unicast;interleaved=0-1;mode=record\r\n\
Date: Thu, 01 Jan 2026 00:00:00 GMT\r\n\
\r\n";
    let (r, _) = request(msg);
    let t = parse_transports(r.headers.get("transport").unwrap()).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(t[0].lower, LowerTransport::Udp);
    assert_eq!(t[1].lower, LowerTransport::Tcp);
    assert_eq!(t[1].interleaved, Some((0, 1)));
}

#[test]
fn missing_cseq_is_not_a_parse_error() {
    let (r, _) = request(b"OPTIONS * RTSP/1.0\r\n\r\n");
    assert_eq!(r.cseq(), None);
    assert_eq!(r.uri, "*");
}

#[test]
fn unknown_method() {
    let (r, _) = request(b"FROBNICATE rtsp://h/x RTSP/1.0\r\nCSeq: 9\r\n\r\n");
    assert_eq!(r.method, Method::Other("FROBNICATE".into()));
}

#[test]
fn bad_request_line_keeps_cseq_and_resyncs() {
    let msg = b"DESCRIBE rtsp://h/x\r\nCSeq: 7\r\n\r\nOPTIONS * RTSP/1.0\r\nCSeq: 8\r\n\r\n";
    let e = parse(msg).unwrap_err();
    assert!(matches!(e, ParseError::BadRequestLine { .. }), "{e:?}");
    assert_eq!(e.status(), StatusCode::BAD_REQUEST);
    assert_eq!(e.cseq(), Some(7));
    let skip = e.resync().unwrap();
    assert!(e.to_string().contains("DESCRIBE rtsp://h/x"), "{e}");
    let (r, _) = request(&msg[skip..]);
    assert_eq!(r.cseq(), Some(8));
}

#[test]
fn bad_header_waits_for_body_before_resync() {
    let msg = b"SET_PARAMETER rtsp://h/x RTSP/1.0\r\nCSeq: 4\r\nno colon here\r\nContent-Length: 3\r\n\r\nabc";
    for cut in 0..msg.len() {
        assert_eq!(parse(&msg[..cut]), Ok(None), "cut at {cut}");
    }
    let e = parse(msg).unwrap_err();
    assert!(matches!(e, ParseError::BadHeader { ref line, .. } if line == "no colon here"));
    assert_eq!(e.resync(), Some(msg.len()));
    assert_eq!(e.cseq(), Some(4));
}

#[test]
fn versions() {
    let e = parse(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap_err();
    assert_eq!(e.status(), StatusCode::RTSP_VERSION_NOT_SUPPORTED);
    assert!(
        matches!(e, ParseError::UnsupportedVersion { ref version, .. } if version == "HTTP/1.1")
    );
    let e = parse(b"OPTIONS * RTSP/2.0\r\nCSeq: 1\r\n\r\n").unwrap_err();
    assert_eq!(e.status(), StatusCode::RTSP_VERSION_NOT_SUPPORTED);
    assert_eq!(e.cseq(), Some(1));
    let e = parse(b"RTSP/2.0 200 OK\r\n\r\n").unwrap_err();
    assert!(matches!(e, ParseError::UnsupportedVersion { .. }));
    let e = parse(b"OPTIONS * RTSPX\r\n\r\n").unwrap_err();
    assert!(matches!(e, ParseError::BadRequestLine { .. }));
    for bad in [
        &b"OPTIONS\r\n\r\n"[..],
        b"OPTIONS * RTSP/1.0 extra\r\n\r\n",
        b"OP:TIONS * RTSP/1.0\r\n\r\n",
    ] {
        assert!(
            matches!(parse(bad), Err(ParseError::BadRequestLine { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn oversized_header_even_when_incomplete() {
    let mut msg = b"OPTIONS * RTSP/1.0\r\nCSeq: 5\r\n".to_vec();
    while msg.len() < 9 * 1024 {
        msg.extend_from_slice(
            b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
        );
    }
    let e = parse(&msg).unwrap_err();
    assert_eq!(
        e,
        ParseError::HeaderTooLarge {
            limit: 8192,
            cseq: Some(5)
        }
    );
    assert_eq!(e.resync(), None);
    msg.extend_from_slice(b"\r\n");
    assert!(matches!(
        parse(&msg),
        Err(ParseError::HeaderTooLarge { .. })
    ));
    // Under a raised limit the same message is fine.
    let limits = Limits {
        max_header_bytes: 16 * 1024,
        ..Limits::default()
    };
    assert!(matches!(
        parse_frame(&msg, &limits),
        Ok(Some((Frame::Request(_), _)))
    ));
}

#[test]
fn content_length_problems() {
    for (cl, want_len) in [
        ("abc", None),
        ("-1", None),
        ("+5", None),
        ("", None),
        ("1, 2", None),
    ] {
        let msg =
            format!("ANNOUNCE rtsp://h/x RTSP/1.0\r\nCSeq: 2\r\nContent-Length: {cl}\r\n\r\n");
        let e = parse(msg.as_bytes()).unwrap_err();
        assert!(
            matches!(e, ParseError::BadContentLength { .. }),
            "{cl:?}: {e:?}"
        );
        assert_eq!(e.cseq(), Some(2));
        assert_eq!(e.resync(), want_len);
    }
    let conflicting =
        b"ANNOUNCE rtsp://h/x RTSP/1.0\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab";
    assert!(matches!(
        parse(conflicting),
        Err(ParseError::BadContentLength { .. })
    ));
    let agreeing =
        b"ANNOUNCE rtsp://h/x RTSP/1.0\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nab";
    assert_eq!(request(agreeing).0.body, Bytes::from_static(b"ab"));

    let big = b"ANNOUNCE rtsp://h/x RTSP/1.0\r\nCSeq: 6\r\nContent-Length: 65537\r\n\r\n";
    let e = parse(big).unwrap_err();
    assert_eq!(
        e,
        ParseError::BodyTooLarge {
            len: 65537,
            limit: 65536,
            cseq: Some(6)
        }
    );
    assert_eq!(e.status(), StatusCode::REQUEST_ENTITY_TOO_LARGE);
}

#[test]
fn interleaved_split_across_buffers() {
    let mut stream = vec![b'$', 1, 0, 5, 1, 2, 3, 4, 5];
    stream.extend_from_slice(b"GET_PARAMETER rtsp://h/x RTSP/1.0\r\nCSeq: 10\r\n\r\n");
    stream.extend_from_slice(&[b'$', 0, 0, 0]);
    for cut in 0..9 {
        assert_eq!(parse(&stream[..cut]), Ok(None));
    }
    let (f, n) = parse(&stream).unwrap().unwrap();
    assert_eq!(
        f,
        Frame::Interleaved {
            channel: 1,
            payload: Bytes::from_static(&[1, 2, 3, 4, 5])
        }
    );
    assert_eq!(n, 9);
    let (r, m) = request(&stream[n..]);
    assert_eq!(r.cseq(), Some(10));
    let (f, k) = parse(&stream[n + m..]).unwrap().unwrap();
    assert_eq!(
        f,
        Frame::Interleaved {
            channel: 0,
            payload: Bytes::new()
        }
    );
    assert_eq!(n + m + k, stream.len());
}

#[test]
fn pipelined_requests_and_keepalives() {
    let stream = b"\r\n\r\nOPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\nDESCRIBE rtsp://h/x RTSP/1.0\r\nCSeq: 2\r\nAccept: application/sdp\r\n\r\n\r\n";
    let (a, n) = request(stream);
    assert_eq!(a.method, Method::Options);
    assert_eq!(n, 4 + b"OPTIONS * RTSP/1.0\r\nCSeq: 1\r\n\r\n".len());
    let (b, m) = request(&stream[n..]);
    assert_eq!(b.method, Method::Describe);
    assert_eq!(b.cseq(), Some(2));
    assert_eq!(parse(&stream[n + m..]), Ok(None));
    assert_eq!(skip_blank_lines(&stream[n + m..]), 2);
    // A flood of keepalives alone is bounded by the header limit.
    assert!(matches!(
        parse(&[b'\n'; 9000]),
        Err(ParseError::HeaderTooLarge { .. })
    ));
}

#[test]
fn bare_lf_and_folding() {
    let msg =
        b"PLAY rtsp://h/x RTSP/1.0\nCSeq: 4\nSession:  abc ;timeout=60\nRange: npt=0-\n  \n\n";
    let (r, n) = request(msg);
    assert_eq!(n, msg.len());
    assert_eq!(r.cseq(), Some(4));
    assert_eq!(r.session_id(), Some("abc"));
    let (r, _) = request(b"PLAY rtsp://h/x RTSP/1.0\r\nX-Long: a\r\n\tb\r\n c\r\n\r\n");
    assert_eq!(r.headers.get("x-long"), Some("a b c"));
    let e = parse(b"PLAY rtsp://h/x RTSP/1.0\r\n folded-first\r\n\r\n").unwrap_err();
    assert!(matches!(e, ParseError::BadHeader { .. }));
}

#[test]
fn responses() {
    let msg = b"RTSP/1.0 200 OK\r\nCSeq: 1\r\nPublic: OPTIONS, DESCRIBE, SETUP\r\n\r\n";
    let (f, n) = parse(msg).unwrap().unwrap();
    assert_eq!(n, msg.len());
    let Frame::Response(r) = f else { panic!() };
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.reason, "OK");
    assert_eq!(r.cseq(), Some(1));
    let (f, _) = parse(b"RTSP/1.0 454 Session Not Found Here\r\n\r\n")
        .unwrap()
        .unwrap();
    let Frame::Response(r) = f else { panic!() };
    assert_eq!(
        (r.status, r.reason.as_str()),
        (StatusCode(454), "Session Not Found Here")
    );
    let (f, _) = parse(b"RTSP/1.0 299\r\n\r\n").unwrap().unwrap();
    assert!(matches!(
        f,
        Frame::Response(Response {
            status: StatusCode(299),
            ..
        })
    ));
    for bad in [
        &b"RTSP/1.0 20 OK\r\n\r\n"[..],
        b"RTSP/1.0 abc OK\r\n\r\n",
        b"RTSP/1.0 099 X\r\n\r\n",
        b"RTSP/x\r\n\r\n",
    ] {
        assert!(
            matches!(parse(bad), Err(ParseError::BadStatusLine { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn garbage() {
    assert_eq!(
        parse(&[0x80, 0, 0]).unwrap_err(),
        ParseError::UnexpectedByte { byte: 0x80 }
    );
    assert_eq!(parse(b" OPTIONS").unwrap_err().resync(), None);
    let msg = b"OPTIONS * RTSP/1.0\r\nX: \xff\xfe\r\nCSeq: 3\r\n\r\n";
    let e = parse(msg).unwrap_err();
    assert!(
        matches!(e, ParseError::NotUtf8 { ref line, .. } if line.starts_with("X: ")),
        "{e:?}"
    );
    assert_eq!(e.cseq(), Some(3));
    assert_eq!(e.resync(), Some(msg.len()));
    let long = format!("A B C {}\r\n\r\n", "D".repeat(2000));
    let e = parse(long.as_bytes()).unwrap_err();
    assert!(matches!(e, ParseError::BadRequestLine { ref line, .. } if line.len() < 210));
}

#[test]
fn request_round_trip() {
    let req = Request::new(Method::Announce, "rtsp://127.0.0.1:8554/live/cam")
        .header("CSeq", "2")
        .header("User-Agent", "Lavf59.27.100")
        .body("application/sdp", "v=0\r\n");
    let bytes = req.to_bytes();
    let (f, n) = parse(&bytes).unwrap().unwrap();
    assert_eq!(n, bytes.len());
    assert_eq!(f, Frame::Request(req));
    let req = Request::new(Method::Other("X-PING".into()), "*").header("CSeq", "1");
    assert_eq!(request(&req.to_bytes()).0, req);
}

#[test]
fn response_round_trip() {
    let resp = Response::new(StatusCode::OK)
        .header("CSeq", "3")
        .header(
            "Session",
            SessionHeader {
                id: "ab12".into(),
                timeout: Some(60),
            }
            .to_string(),
        )
        .header("Transport", Transport::tcp_interleaved((2, 3)).to_string())
        .body("text/parameters", &b"a: 1\r\n"[..]);
    let bytes = resp.to_bytes();
    let (f, n) = parse(&bytes).unwrap().unwrap();
    assert_eq!(n, bytes.len());
    assert_eq!(f, Frame::Response(resp.clone()));
    assert_eq!(resp.session_id(), Some("ab12"));
    let bare = Response::new(StatusCode::METHOD_NOT_VALID_IN_THIS_STATE).header("CSeq", "9");
    assert_eq!(
        parse(&bare.to_bytes()).unwrap().unwrap().0,
        Frame::Response(bare)
    );
}
