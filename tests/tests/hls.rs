//! HLS with fMP4 segments (issue 12 §2): a live camera at `/hls/live/<camera>/index.m3u8`
//! and a recording at `/hls/playback/<camera>/index.m3u8?start=…`, played by ffmpeg with
//! zero errors and the expected frames.

use std::time::Duration;
use vigil_tests::export::http_get;
use vigil_tests::*;

fn hls_url(node: &Node, path: &str) -> String {
    format!("http://{}{path}", node.api)
}

#[test]
fn live_hls_plays_in_ffmpeg() {
    let node = NodeBuilder::new().extra(DEMO_CAMERA).start();
    node.wait_live("live/demo");
    let url = hls_url(&node, "/hls/live/demo/index.m3u8");
    let decoded = ffmpeg_decode(&url, &[], &["-t", "5"], Duration::from_secs(40));
    decoded.assert_plays("live HLS", 124, 126);
    // The playlist is a live window of fMP4 segments after one init segment.
    let playlist = http_get(&node, "/hls/live/demo/index.m3u8");
    assert_eq!(playlist.status, 200);
    let text = playlist.text();
    assert!(text.contains("#EXT-X-MAP:URI=\"init.mp4\""), "{text}");
    assert!(!text.contains("ENDLIST"), "{text}");
    let seg = text
        .lines()
        .rfind(|l| l.starts_with("seg-"))
        .expect("a segment");
    let init = http_get(&node, "/hls/live/demo/init.mp4");
    assert_eq!(&init.body[4..8], b"ftyp");
    let media = http_get(&node, &format!("/hls/live/demo/{seg}"));
    assert_eq!(media.status, 200);
    assert_eq!(&media.body[4..8], b"moof");
    assert_eq!(http_get(&node, "/hls/live/nosuch/index.m3u8").status, 404);
    assert_eq!(http_get(&node, "/hls/live/demo/seg-999999.m4s").status, 404);
}

#[test]
fn recorded_hls_plays_from_a_moment() {
    let root = tempfile::tempdir().expect("root");
    let node = NodeBuilder::new()
        .extra(&format!(
            "[storage]\nroot = \"{}\"\nsegment_secs = 1.0",
            root.path().display()
        ))
        .extra(DEMO_CAMERA)
        .start();
    let first = demo_recorded_for(&node, 8_000);
    let (start, end) = (first + 2_500, first + 6_500);
    let path = format!(
        "/hls/playback/demo/index.m3u8?start={}&end={}",
        rfc3339(start),
        rfc3339(end)
    );
    let playlist = http_get(&node, &path);
    assert_eq!(playlist.status, 200, "{}", playlist.text());
    let text = playlist.text();
    assert!(text.contains("#EXT-X-PLAYLIST-TYPE:VOD") && text.ends_with("#EXT-X-ENDLIST\n"));
    let listed: f64 = text
        .lines()
        .filter_map(|l| {
            l.strip_prefix("#EXTINF:")?
                .trim_end_matches(',')
                .parse::<f64>()
                .ok()
        })
        .sum();
    // From the keyframe at or before the start (at most a GOP earlier) to the end.
    assert!((4.0..=5.05).contains(&listed), "{listed} s listed: {text}");
    let decoded = ffmpeg_decode(&hls_url(&node, &path), &[], &[], Duration::from_secs(40));
    let frames = (listed * 25.0).round() as u64;
    decoded.assert_plays("recorded HLS", frames - 1, frames + 1);
    // Bad requests.
    let status = |p: &str| http_get(&node, p).status;
    assert_eq!(status("/hls/playback/demo/index.m3u8"), 400, "no start");
    assert_eq!(status("/hls/playback/demo/index.m3u8?start=soon"), 400);
    assert_eq!(
        status(&format!(
            "/hls/playback/demo/index.m3u8?start={}",
            rfc3339(first + 3_600_000)
        )),
        404,
        "nothing recorded from then on"
    );
    assert_eq!(
        status(&format!(
            "/hls/playback/nosuch/index.m3u8?start={}",
            rfc3339(first)
        )),
        404
    );
}
