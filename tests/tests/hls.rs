//! HLS with fMP4 segments (issue 12 §2): a live camera at `/hls/live/<camera>/index.m3u8`
//! and a recording at `/hls/playback/<camera>/index.m3u8?start=…`, played by ffmpeg with
//! zero errors and the expected frames.

use std::time::Duration;
use vigil_tests::export::http_get;
use vigil_tests::*;

fn hls_url(node: &Node, path: &str) -> String {
    format!("http://{}{path}", node.api)
}

/// ffmpeg's input options that present the admin token on the playlist and every segment
/// (its HLS demuxer hands `-headers` to each request): a node with a token serves nobody
/// without credentials, on loopback too.
fn with_token() -> [String; 2] {
    [
        "-headers".into(),
        format!("Authorization: Bearer {ADMIN_TOKEN}\r\n"),
    ]
}

#[test]
fn live_hls_plays_in_ffmpeg() {
    let node = NodeBuilder::new().extra(DEMO_CAMERA).start();
    node.wait_live("live/demo");
    let url = hls_url(&node, "/hls/live/demo/index.m3u8");
    let auth = with_token();
    let auth: Vec<&str> = auth.iter().map(String::as_str).collect();
    let decoded = ffmpeg_decode(&url, &auth, &["-t", "5"], Duration::from_secs(40));
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
    // The same moments written with an offset, its `+` typed as is (not `%2B`): a query is
    // not a form, so the `+` is not a space.
    let plus_one = |ms: i64| rfc3339(ms + 3_600_000).replace('Z', "+01:00");
    let offset = http_get(
        &node,
        &format!(
            "/hls/playback/demo/index.m3u8?start={}&end={}",
            plus_one(start),
            plus_one(end)
        ),
    );
    assert_eq!(offset.status, 200, "{}", offset.text());
    assert_eq!(
        offset.text(),
        text,
        "the +01:00 spelling lists the same segments"
    );
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
    let auth = with_token();
    let auth: Vec<&str> = auth.iter().map(String::as_str).collect();
    let decoded = ffmpeg_decode(&hls_url(&node, &path), &auth, &[], Duration::from_secs(40));
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
    // Issue 44, M2: a span past `[export] max_range_secs` with `end=` is refused before
    // any segment is planned (it used to list every segment of the camera's history).
    let huge = http_get(
        &node,
        "/hls/playback/demo/index.m3u8?start=2000-01-01T00:00:00Z&end=2100-01-01T00:00:00Z",
    );
    assert_eq!(huge.status, 400, "{}", huge.text());
    assert!(huge.text().contains("max_range_secs"), "{}", huge.text());
}

/// CPU time (user + system) of a process so far, seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// The node's CPU share (1.0 = one core) over `window`.
fn node_cpu(pid: u32, window: Duration) -> f64 {
    let c0 = cpu_secs(pid);
    std::thread::sleep(window);
    (cpu_secs(pid) - c0) / window.as_secs_f64()
}

/// Live HLS latency (when each new segment is listed, against its first frame's wall time
/// in `EXT-X-PROGRAM-DATE-TIME`) and the node's CPU with N HLS viewers against N RTSP
/// viewers (ffmpeg `-c copy` to null). Figures: docs/BENCHMARKS.md.
#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn hls_latency_and_cost_per_viewer() {
    let viewers: usize = std::env::var("HLS_BENCH_VIEWERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let node = NodeBuilder::new().extra(DEMO_CAMERA).start();
    node.wait_live("live/demo");
    let pid = node.pid().expect("pid");
    // Latency of the live edge.
    let mut seen = std::collections::BTreeMap::new();
    let until = std::time::Instant::now() + Duration::from_secs(15);
    while std::time::Instant::now() < until {
        let text = http_get(&node, "/hls/live/demo/index.m3u8").text();
        let now = vigil_storage::now_ms();
        let mut pdt = None;
        for l in text.lines() {
            if let Some(t) = l.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:") {
                pdt = vigil_proto::rtsp::UtcTime::parse_rfc3339(t)
                    .ok()
                    .map(|t| t.unix_millis);
            } else if l.starts_with("seg-") {
                if let Some(p) = pdt.take() {
                    seen.entry(l.to_string()).or_insert(now - p);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The first playlist lists segments made before it was asked for: skip them.
    let ages: Vec<i64> = seen.values().copied().skip(6).collect();
    let mean = ages.iter().sum::<i64>() as f64 / ages.len().max(1) as f64;
    println!(
        "live edge: a segment is listed {mean:.0} ms after its first frame (mean of {}, min {:?}, max {:?})",
        ages.len(),
        ages.iter().min(),
        ages.iter().max()
    );
    let window = Duration::from_secs(10);
    let idle = node_cpu(pid, window);
    let run = |args: &[String]| -> Vec<Background> {
        (0..viewers)
            .map(|_| {
                spawn_background(
                    std::process::Command::new("ffmpeg")
                        .args(["-hide_banner", "-nostdin", "-v", "error"])
                        .args(args)
                        .args(["-c", "copy", "-t", "60", "-f", "null", "-"]),
                )
            })
            .collect()
    };
    let rtsp_url = node.url("live/demo");
    let rtsp = run(&[
        "-rtsp_transport".into(),
        "tcp".into(),
        "-i".into(),
        rtsp_url,
    ]);
    std::thread::sleep(Duration::from_secs(3));
    let with_rtsp = node_cpu(pid, window);
    drop(rtsp);
    let mut hls_args = with_token().to_vec();
    hls_args.extend(["-i".into(), hls_url(&node, "/hls/live/demo/index.m3u8")]);
    let hls = run(&hls_args);
    std::thread::sleep(Duration::from_secs(5));
    let with_hls = node_cpu(pid, window);
    drop(hls);
    println!("| viewers | node CPU (1.0 = a core) | per viewer |");
    println!("|---|---|---|");
    println!("| none | {idle:.3} | |");
    println!(
        "| {viewers} RTSP (TCP) | {with_rtsp:.3} | {:.4} |",
        (with_rtsp - idle) / viewers as f64
    );
    println!(
        "| {viewers} HLS | {with_hls:.3} | {:.4} |",
        (with_hls - idle) / viewers as f64
    );
}
