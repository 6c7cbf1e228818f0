use super::*;
use proptest::prelude::*;

/// `ffmpeg -re -i clip.mp4 -c copy -f rtsp rtsp://host/live/x` (libavformat 60).
const FFMPEG: &str = "v=0\r\n\
o=- 0 0 IN IP4 127.0.0.1\r\n\
s=No Name\r\n\
c=IN IP4 127.0.0.1\r\n\
t=0 0\r\n\
a=tool:libavformat 60.16.100\r\n\
m=video 0 RTP/AVP 96\r\n\
b=AS:2000\r\n\
a=rtpmap:96 H264/90000\r\n\
a=fmtp:96 packetization-mode=1; sprop-parameter-sets=Z2QAH6zZQFAFuhAAAAMAEAAAAwPA8YMZYA==,aOvjyyLA; profile-level-id=64001F\r\n\
a=control:streamid=0\r\n\
m=audio 0 RTP/AVP 97\r\n\
b=AS:128\r\n\
a=rtpmap:97 MPEG4-GENERIC/44100/2\r\n\
a=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3; config=121056E500\r\n\
a=control:streamid=1\r\n";

/// GStreamer `rtspclientsink` (1.22), LF-only line endings as some proxies rewrite them.
const GSTREAMER: &str = "v=0
o=- 1188340656180883 1 IN IP4 127.0.0.1
s=Session streamed with GStreamer
i=rtsp-server
t=0 0
a=tool:GStreamer
a=type:broadcast
a=range:npt=now-
m=video 0 RTP/AVP 96
c=IN IP4 0.0.0.0
a=rtpmap:96 H264/90000
a=framerate:30
a=fmtp:96 packetization-mode=1;sprop-parameter-sets=Z0LAH9kAUAW7ARAAAAMAEAAAAwPI8YMkgA==,aMuMsg==;profile-level-id=42c01f;level-asymmetry-allowed=1
a=control:stream=0
a=ts-refclk:local
a=mediaclk:sender
m=audio 0 RTP/AVP 0
c=IN IP4 0.0.0.0
a=control:stream=1
";

/// A Hikvision-style camera DESCRIBE answer: absolute control URLs, session-level b=AS,
/// `a=Media_header` junk, an e= line, and PCMA with only a static payload type.
const HIKVISION: &str = "v=0\r\n\
o=- 1109162014219182 1109162014219192 IN IP4 192.168.1.64\r\n\
s=Media Presentation\r\n\
e=NONE\r\n\
b=AS:5100\r\n\
t=0 0\r\n\
a=control:rtsp://192.168.1.64:554/Streaming/Channels/101/?transportmode=unicast\r\n\
m=video 0 RTP/AVP 96\r\n\
c=IN IP4 0.0.0.0\r\n\
b=AS:5000\r\n\
a=recvonly\r\n\
a=x-dimensions:2560,1440\r\n\
a=control:rtsp://192.168.1.64:554/Streaming/Channels/101/trackID=1?transportmode=unicast\r\n\
a=rtpmap:96 H265/90000\r\n\
a=fmtp:96 sprop-vps=QAEMAf//AWAAAAMAsAAAAwAAAwB7LAUCQ==; sprop-sps=QgEBAWAAAAMAsAAAAwAAAwB7oAKAgC0WUuS0i9C; sprop-pps=RAHA8vA8kAA=\r\n\
a=Media_header:MEDIAINFO=494D4B48010300000400050000000000000000000000000000000000000000000000000000000000;\r\n\
a=appversion:1.0\r\n\
m=audio 0 RTP/AVP 8\r\n\
c=IN IP4 0.0.0.0\r\n\
b=AS:50\r\n\
a=recvonly\r\n\
a=control:rtsp://192.168.1.64:554/Streaming/Channels/101/trackID=2?transportmode=unicast\r\n\
a=Media_header:MEDIAINFO=494D4B48010300000400050000000000000000000000000000000000000000000000000000000000;\r\n\
a=appversion:1.0\r\n";

/// A Dahua-style camera with H.264, a float framerate and a duplicate session-level c=.
const DAHUA: &str = "v=0\r\n\
o=- 2251938210 2251938210 IN IP4 0.0.0.0\r\n\
s=Media Server\r\n\
c=IN IP4 0.0.0.0\r\n\
c=IN IP4 0.0.0.0\r\n\
t=0 0\r\n\
a=control:*\r\n\
a=packetization-supported:DH\r\n\
a=rtppayload-supported:DH\r\n\
a=range:npt=now-\r\n\
m=video 0 RTP/AVP 96\r\n\
a=control:trackID=0\r\n\
a=framerate:25.000000\r\n\
a=rtpmap:96 H264/90000\r\n\
a=fmtp:96 packetization-mode=1;profile-level-id=4D002A;sprop-parameter-sets=Z00AKpY1QPAET8s3AQEBAg==,aO4xsg==\r\n\
a=recvonly\r\n";

#[test]
fn parses_ffmpeg_announce() {
    let sdp = parse(FFMPEG).unwrap();
    assert_eq!(sdp.session_name.as_deref(), Some("No Name"));
    assert_eq!(sdp.media.len(), 2);
    let v = &sdp.media[0];
    assert_eq!(v.media, "video");
    assert_eq!(v.payload_type, 96);
    assert_eq!(v.codec(), Codec::H264);
    assert_eq!(v.clock_rate, 90000);
    assert_eq!(v.channels, None);
    assert_eq!(v.bandwidth_kbps, Some(2000));
    assert_eq!(v.control.as_deref(), Some("streamid=0"));
    assert!(v
        .fmtp
        .as_deref()
        .unwrap()
        .starts_with("packetization-mode=1; sprop"));
    let a = &sdp.media[1];
    assert_eq!(a.codec(), Codec::Aac);
    assert_eq!(a.encoding_name, "MPEG4-GENERIC");
    assert_eq!((a.clock_rate, a.channels), (44100, Some(2)));
    assert_eq!(a.control.as_deref(), Some("streamid=1"));
    assert_eq!(a.bandwidth_kbps, Some(128));
    let sets = h264_sprop_parameter_sets(v.fmtp.as_deref().unwrap());
    assert_eq!(sets.len(), 2);
    assert_eq!(crate::codec::h264_nal_type(&sets[0]), Some(7));
    assert_eq!(crate::codec::h264_nal_type(&sets[1]), Some(8));
}

#[test]
fn parses_gstreamer_announce() {
    let sdp = parse(GSTREAMER).unwrap();
    assert_eq!(
        sdp.session_name.as_deref(),
        Some("Session streamed with GStreamer")
    );
    let v = &sdp.media[0];
    assert_eq!(v.codec(), Codec::H264);
    assert_eq!(v.framerate, Some(30.0));
    assert_eq!(v.control.as_deref(), Some("stream=0"));
    let a = &sdp.media[1];
    assert_eq!(a.payload_type, 0);
    assert_eq!(a.encoding_name, "PCMU");
    assert_eq!((a.clock_rate, a.channels), (8000, Some(1)));
    assert_eq!(a.codec(), Codec::Pcmu);
}

#[test]
fn parses_hikvision_describe() {
    let sdp = parse(HIKVISION).unwrap();
    assert_eq!(sdp.media.len(), 2);
    let v = &sdp.media[0];
    assert_eq!(v.codec(), Codec::H265);
    assert_eq!(v.bandwidth_kbps, Some(5000));
    assert_eq!(
        v.control.as_deref(),
        Some("rtsp://192.168.1.64:554/Streaming/Channels/101/trackID=1?transportmode=unicast")
    );
    assert!(v.fmtp.as_deref().unwrap().starts_with("sprop-vps="));
    let a = &sdp.media[1];
    assert_eq!(a.codec(), Codec::Pcma);
    assert_eq!(a.clock_rate, 8000);
    assert_eq!(a.bandwidth_kbps, Some(50));
    assert_eq!(a.fmtp, None);
}

#[test]
fn parses_dahua_describe() {
    let sdp = parse(DAHUA).unwrap();
    assert_eq!(sdp.media.len(), 1);
    assert_eq!(sdp.media[0].framerate, Some(25.0));
    assert_eq!(sdp.media[0].control.as_deref(), Some("trackID=0"));
    assert_eq!(sdp.media[0].codec(), Codec::H264);
}

#[test]
fn multi_format_media_uses_first_format() {
    let sdp = parse(
        "m=audio 5004 RTP/AVP 97 0\na=rtpmap:0 PCMU/8000\na=rtpmap:97 opus/48000/2\na=fmtp:0 x\n",
    )
    .unwrap();
    let m = &sdp.media[0];
    assert_eq!((m.payload_type, m.encoding_name.as_str()), (97, "opus"));
    assert_eq!(m.fmtp, None);
    assert_eq!(m.codec(), Codec::Other);
}

#[test]
fn dynamic_pt_without_rtpmap_is_kept_unknown() {
    let sdp = parse("m=video 0 RTP/AVP 99\n").unwrap();
    assert_eq!(sdp.media[0].encoding_name, "");
    assert_eq!(sdp.media[0].clock_rate, 0);
    assert_eq!(sdp.media[0].codec(), Codec::Other);
}

#[test]
fn errors() {
    assert_eq!(parse(""), Err(SdpError::NoMedia));
    assert_eq!(parse("v=0\r\ns=x\r\n"), Err(SdpError::NoMedia));
    assert!(matches!(
        parse("m=video 0 RTP/AVP\n"),
        Err(SdpError::MalformedMedia { .. })
    ));
    assert!(matches!(
        parse("m=video x RTP/AVP 96\n"),
        Err(SdpError::MalformedMedia { .. })
    ));
    assert!(matches!(
        parse("m=video 0 RTP/AVP 200\n"),
        Err(SdpError::MalformedMedia { .. })
    ));
    assert!(matches!(
        parse("m=\n"),
        Err(SdpError::MalformedMedia { .. })
    ));
    // Non-RTP media is skipped, not an error, and its attributes do not leak.
    let sdp = parse(
        "m=video 0 RTP/AVP 96\na=rtpmap:96 H264/90000\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\na=control:x\n",
    )
    .unwrap();
    assert_eq!(sdp.media.len(), 1);
    assert_eq!(sdp.media[0].control, None);
    assert_eq!(
        parse("m=application 9 UDP/DTLS/SCTP webrtc-datachannel\n"),
        Err(SdpError::NoMedia)
    );
}

#[test]
fn render_describe_answer() {
    let mut sdp = parse(FFMPEG).unwrap();
    sdp.media[0].framerate = Some(25.0);
    let text = sdp.render("10.0.0.5", 42, "npt=now-");
    let expected = "v=0\r\n\
o=- 42 1 IN IP4 10.0.0.5\r\n\
s=No Name\r\n\
c=IN IP4 0.0.0.0\r\n\
t=0 0\r\n\
a=tool:vigil\r\n\
a=range:npt=now-\r\n\
a=control:*\r\n\
m=video 0 RTP/AVP 96\r\n\
b=AS:2000\r\n\
a=rtpmap:96 H264/90000\r\n\
a=fmtp:96 packetization-mode=1; sprop-parameter-sets=Z2QAH6zZQFAFuhAAAAMAEAAAAwPA8YMZYA==,aOvjyyLA; profile-level-id=64001F\r\n\
a=framerate:25\r\n\
a=control:trackID=0\r\n\
m=audio 0 RTP/AVP 97\r\n\
b=AS:128\r\n\
a=rtpmap:97 MPEG4-GENERIC/44100/2\r\n\
a=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3; config=121056E500\r\n\
a=control:trackID=1\r\n";
    assert_eq!(text, expected);
    // What we render, we (and so any tolerant client) can parse back.
    let back = parse(&text).unwrap();
    assert_eq!(back.media[1].control.as_deref(), Some("trackID=1"));
    assert_eq!(back.media[0].fmtp, sdp.media[0].fmtp);
}

#[test]
fn render_for_srtp_names_savp_and_each_tracks_key() {
    let sdp = parse(FFMPEG).unwrap();
    let keys = ["mikey AAAA".to_string(), "mikey BBBB\r\na=x".to_string()];
    let text = sdp.render_srtp("10.0.0.5", 42, "npt=now-", &keys);
    assert!(text.contains("m=video 0 RTP/SAVP 96\r\nb=AS:2000\r\na=key-mgmt:mikey AAAA\r\n"));
    // A value cannot add a line of its own.
    assert!(text.contains("m=audio 0 RTP/SAVP 97\r\nb=AS:128\r\na=key-mgmt:mikey BBBB  a=x\r\n"));
    assert!(!text.contains("RTP/AVP "));
    // The plain render carries no key.
    assert!(!sdp.render("10.0.0.5", 42, "npt=now-").contains("key-mgmt"));
    // A tolerant parser still reads the media.
    assert_eq!(parse(&text).unwrap().media.len(), 2);
}

#[test]
fn render_hikvision_with_recording_range_and_no_injection() {
    let mut sdp = parse(HIKVISION).unwrap();
    sdp.session_name = Some("evil\r\na=control:x".into());
    let text = sdp.render("192.0.2.1", 7, "npt=0-20.5");
    assert!(text.contains("a=range:npt=0-20.5\r\n"));
    assert!(text.contains("s=evil  a=control:x\r\n"));
    assert!(text.contains("a=rtpmap:8 PCMA/8000/1\r\na=control:trackID=1\r\n"));
    assert!(!text.contains("Media_header"));
    let default_name = SessionDescription::default().render("192.0.2.1", 1, "npt=now-");
    assert!(default_name.contains("s=vigil\r\n"));
}

#[test]
fn h264_fmtp_from_parameter_sets() {
    let sps = [0x67, 0x64, 0x00, 0x1f, 0xac];
    let pps = [0x68, 0xeb, 0xe3, 0xcb];
    let f = h264_fmtp(&sps, &pps);
    assert_eq!(
        f,
        "packetization-mode=1;profile-level-id=64001F;sprop-parameter-sets=Z2QAH6w=,aOvjyw=="
    );
    assert_eq!(
        h264_sprop_parameter_sets(&f),
        vec![sps.to_vec(), pps.to_vec()]
    );
    assert_eq!(
        h264_fmtp(&[0x67], &[0x68]),
        "packetization-mode=1;sprop-parameter-sets=Zw==,aA=="
    );
}

proptest! {
    #[test]
    fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse(&String::from_utf8_lossy(&data));
    }

    #[test]
    fn parse_never_panics_on_sdp_like_text(lines in proptest::collection::vec(
        (prop::sample::select(vec!["m=", "a=rtpmap:", "a=fmtp:", "a=control:", "b=AS:", "a=framerate:", "s=", "m=video 0 RTP/AVP "]),
         "[ -~]{0,20}"), 0..12)) {
        let text: String = lines.iter().map(|(k, v)| format!("{k}{v}\r\n")).collect();
        if let Ok(sdp) = parse(&text) {
            let _ = sdp.render("127.0.0.1", 1, "npt=now-");
        }
    }
}
