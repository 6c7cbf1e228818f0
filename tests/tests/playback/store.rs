//! What storage does under playback: a crash while recording, two nodes on one root, the
//! start list, one read per segment for concurrent sessions, a full disk.

use crate::support::*;

/// `kill -9` while recording the demo camera, restart: every complete segment is still
/// there and plays with zero errors, the index covers the recorded time up to the crash
/// (at most the segment being written is lost), and the restarted node records again.
#[test]
fn kill_9_during_recording_keeps_earlier_segments() {
    let root = tempfile::tempdir().unwrap();
    let mut node = NodeBuilder::new()
        .extra(DEMO_CAMERA)
        .extra(&storage(root.path(), 1.0))
        .start();
    poll_until(Duration::from_secs(30), "5 recorded segments", || {
        (segment_files(root.path(), "demo").len() >= 5).then_some(())
    });
    let killed_at = now_ms();
    node.kill();
    let before = segment_files(root.path(), "demo");
    let tmp_before = tmp_files(root.path(), "demo");
    node.restart();
    // The restarted node takes its lease over, clears the dead writer's temp file and
    // records again.
    poll_until(
        Duration::from_secs(20),
        "recording after the restart",
        || {
            let after = segment_files(root.path(), "demo");
            after.iter().any(|s| s.start_ms > killed_at).then_some(())
        },
    );
    let leftovers: Vec<_> = tmp_files(root.path(), "demo")
        .into_iter()
        .filter(|t| tmp_before.contains(t))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temp files of the killed writer: {leftovers:?}"
    );
    let after = segment_files(root.path(), "demo");
    for s in &before {
        assert!(
            after.contains(s),
            "segment {} lost after the restart",
            s.name
        );
    }
    let pre_end = before.last().unwrap().end_ms;
    assert!(
        pre_end <= killed_at && killed_at - pre_end <= 3_500,
        "the last complete segment ends {} ms before the kill: more than the open segment lost",
        killed_at - pre_end
    );
    // No segment claims the time of the crash: the pre-crash ones end before it, the
    // restarted node's start after it.
    assert!(
        after
            .iter()
            .all(|s| s.end_ms <= killed_at || s.start_ms > killed_at),
        "a segment spans the kill at {killed_at}: {after:?}"
    );
    // The index as the API shows it covers the pre-crash recording (a gap shorter than
    // the API's 1.5 s tolerance after a quick restart is merged into one range).
    let view = recordings(&node, "demo").expect("recordings after restart");
    let ranges = view["ranges"].as_array().unwrap();
    assert_eq!(
        ranges[0]["start_ms"].as_i64(),
        Some(before[0].start_ms),
        "{view}"
    );
    assert!(ranges[0]["end_ms"].as_i64() >= Some(pre_end), "{view}");
    let listed = view["segments"].as_u64().unwrap() as usize;
    assert!(
        listed >= after.len(),
        "the API lists {listed} segments, the directory had {}: {view}",
        after.len()
    );
    // The earlier segments play with zero errors (4 s of them, ended by the range's BYE).
    let start = before[0].start_ms;
    let url = playback_url(&node, "demo", start, Some(start + 4_000));
    let run = ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &[],
        Duration::from_secs(30),
    );
    run.assert_plays("ffmpeg of pre-crash segments", 95, 101);
}

/// Two nodes share one root: A records what ffmpeg publishes, B plays it back while A is
/// still recording (crossing segments A writes after B started), with zero errors.
#[test]
fn two_nodes_share_one_root() {
    let root = tempfile::tempdir().unwrap();
    let a = NodeBuilder::new().extra(&storage(root.path(), 1.0)).start();
    let b = NodeBuilder::new().extra(&storage(root.path(), 1.0)).start();
    // Looped, so A is still recording when B has played.
    let _publisher = spawn_background(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-nostdin", "-v", "error", "-re"])
            .args(["-stream_loop", "-1", "-i"])
            .arg(fixture("h264_aac.mp4"))
            .args(["-c", "copy", "-f", "rtsp", "-rtsp_transport", "tcp"])
            .arg(a.url("live/shared")),
    );
    // B sees A's segments through the shared root.
    let first_ms = poll_until(Duration::from_secs(30), "B to list 3 segments", || {
        let v = recordings(&b, "shared")?;
        (v["segments"].as_u64()? >= 3).then(|| v["ranges"][0]["start_ms"].as_i64())?
    });
    let url = playback_url(&b, "shared", first_ms, None);
    let run = ffmpeg_decode(
        &url,
        &["-rtsp_transport", "tcp"],
        &["-map", "0", "-t", "5"],
        Duration::from_secs(40),
    );
    run.assert_plays("B playing A's recording", 120, 130);
    let a_status = record_status(&a, "shared").expect("A records the camera");
    assert_eq!(a_status["state"], "recording", "{a_status}");
    assert!(
        record_status(&b, "shared").is_none(),
        "B must not record a camera it does not ingest"
    );
    assert!(stat(&cache_stats(&b), "loads") >= 5, "B read the segments");
    assert_eq!(stat(&cache_stats(&a), "loads"), 0, "A served no playback");
}

/// The segment a playback began at (its DESCRIBE) is moved to the cache's protected start
/// list (`[cache] start_share`), the segments read ahead after it are not; a second
/// playback from that moment opens from memory; with `start_share = 0` nothing is kept apart.
#[test]
fn the_segment_a_playback_began_at_is_kept_in_the_start_list() {
    let rec = recording();
    let with_share = |share: f64| {
        let extra = format!(
            "{}\n[cache]\nbudget_mb = 8\nstart_share = {share}\n",
            storage(rec.root.path(), 2.0)
        );
        NodeBuilder::new().extra(&extra).start()
    };
    let describe = |node: &Node| {
        let mut c = RtspConn::connect(node.rtsp);
        let url = playback_url(node, CAM, rec.first_ms + 4_050, None);
        let r = c.request("DESCRIBE", &url, &[("Accept", "application/sdp")], None);
        assert_eq!(r.status.0, 200, "DESCRIBE: {}", r.reason);
    };
    let node = with_share(0.5);
    let s = cache_stats(&node);
    assert_eq!(stat(&s, "start_limit_bytes"), 4 << 20, "{s}");
    assert_eq!(stat(&s, "start_bytes"), 0, "{s}");
    describe(&node);
    let s = settled_cache_stats(&node);
    let start = stat(&s, "start_bytes");
    assert!(start > 0, "the opened segment is protected: {s}");
    assert_eq!(start, stat(&s, "bytes"), "it is all the cache holds: {s}");
    // Playing from that moment opens it from memory and reads the next segments ahead:
    // those are not starts.
    let url = playback_url(&node, CAM, rec.first_ms + 4_050, None);
    runtime().block_on(async {
        let p = play_from_a_keyframe(&url, "start list").await;
        p.teardown().await.expect("teardown");
    });
    let s = settled_cache_stats(&node);
    assert_eq!((stat(&s, "opens"), stat(&s, "opens_cached")), (2, 1), "{s}");
    assert!(stat(&s, "prefetches") > 0, "read-ahead ran: {s}");
    assert_eq!(
        stat(&s, "start_bytes"),
        start,
        "read-ahead is not protected: {s}"
    );
    assert!(stat(&s, "bytes") > start, "{s}");

    let plain = with_share(0.0);
    describe(&plain);
    let s = settled_cache_stats(&plain);
    assert_eq!(stat(&s, "start_bytes"), 0, "{s}");
    assert!(stat(&s, "bytes") > 0, "{s}");
}

/// 20 clients of one camera at nearby moments at once read each segment from storage once
/// (single flight), whatever the interleaving. First 20 DESCRIBEs of one segment sent at the
/// same instant (raw connections, all requests written before any answer is read): one
/// storage read. Then 20 sessions of the project's client play 3 s each from nearby
/// moments: every segment they touch (and the cache reads ahead) is read once.
#[test]
fn twenty_concurrent_playbacks_read_each_segment_once() {
    let rec = recording();
    let node = playback_node(rec);
    let describe_at = |t: i64, cseq: u32| {
        format!(
            "DESCRIBE {} RTSP/1.0\r\nCSeq: {cseq}\r\nAccept: application/sdp\r\n\r\n",
            playback_url(&node, CAM, t, None)
        )
    };
    let mut conns: Vec<RtspConn> = (0..20).map(|_| RtspConn::connect(node.rtsp)).collect();
    let burst = rec.first_ms + 4_050;
    for (i, c) in conns.iter_mut().enumerate() {
        c.send(describe_at(burst + i as i64 * 90, 1).as_bytes())
            .expect("send DESCRIBE");
    }
    for (i, c) in conns.iter_mut().enumerate() {
        let r = c.response().expect("answer").expect("not closed");
        assert_eq!(r.status.0, 200, "DESCRIBE {i}: {}", r.reason);
    }
    drop(conns);
    let s = cache_stats(&node);
    eprintln!("cache after 20 simultaneous DESCRIBEs: {s}");
    assert_eq!(stat(&s, "loads"), 1, "20 DESCRIBEs of one segment: {s}");
    assert_eq!(stat(&s, "hits") + stat(&s, "misses"), 20, "{s}");
    assert_eq!(stat(&s, "misses") - stat(&s, "coalesced"), 1, "{s}");
    // Playback opens: 20, and the first of them found its segment not yet read.
    assert_eq!(stat(&s, "opens"), 20, "{s}");
    let cached = stat(&s, "opens_cached");
    assert!(cached < 20, "the first open read its segment: {s}");
    // One more open of that moment, the segment resident now: a cached open.
    let mut c = RtspConn::connect(node.rtsp);
    c.send(describe_at(burst, 1).as_bytes())
        .expect("send DESCRIBE");
    let r = c.response().expect("answer").expect("not closed");
    assert_eq!(r.status.0, 200, "DESCRIBE: {}", r.reason);
    let s = cache_stats(&node);
    assert_eq!(stat(&s, "opens"), 21, "{s}");
    assert_eq!(stat(&s, "opens_cached"), cached + 1, "{s}");

    let base = rec.first_ms + 10_050;
    let urls: Vec<String> = (0..20)
        .map(|i| playback_url(&node, CAM, base + i * 90, None))
        .collect();
    runtime().block_on(async {
        let sessions: Vec<_> = urls
            .into_iter()
            .map(|url| {
                tokio::spawn(async move {
                    let mut p = play(&url, PlayOptions::new(ClientTransport::Tcp))
                        .await
                        .expect("play");
                    let v = video_track(&p);
                    let mut cont = Continuity::new(&p);
                    let first = assert_starts_on_keyframe(&mut p, &mut cont, "concurrent").await;
                    play_for(
                        &mut p,
                        v,
                        first.header.timestamp,
                        3.0,
                        &mut cont,
                        "concurrent",
                    )
                    .await;
                    cont.assert_continuous("concurrent");
                    p.teardown().await.expect("teardown");
                })
            })
            .collect();
        for s in sessions {
            s.await.expect("session task");
        }
    });
    // Loads still in flight (read-ahead) finish quickly; then every read is resident.
    let stats = settled_cache_stats(&node);
    let loads = stat(&stats, "loads");
    eprintln!("cache after 20 concurrent sessions: {stats}");
    // One open per session: its DESCRIBE. The SETUP after it reads the same segment but
    // is not a second (cached) open, which would make every other open look like a hit.
    assert_eq!(stat(&stats, "opens"), 41, "{stats}");
    assert_eq!(stat(&stats, "load_errors"), 0, "{stats}");
    assert_eq!(stat(&stats, "evictions"), 0, "{stats}");
    assert_eq!(
        loads,
        stat(&stats, "entries"),
        "a segment was read from storage more than once: {stats}"
    );
    // The burst's segment, then those of t0+10 s .. ~t0+15 s (2 s each) and up to two
    // read ahead of the last.
    let touched = 1 + rec
        .segments
        .iter()
        .filter(|s| s.end_ms > base && s.start_ms < base + 1_800 + 3_000)
        .count() as u64;
    assert!(
        (touched..=touched + 2).contains(&loads),
        "{loads} storage reads for {touched} segments played (+ up to 2 read ahead): {stats}"
    );
    // Every lookup that led a load is a miss that did not join one in flight.
    assert_eq!(
        stat(&stats, "misses") - stat(&stats, "coalesced"),
        loads - stat(&stats, "prefetches"),
        "{stats}"
    );
    assert!(
        stat(&stats, "hits") >= 40,
        "the sessions' lookups were not served from memory: {stats}"
    );
}

// ---------------------------------------------------------------------------------------
// Full disk

/// A tmpfs mounted for the test, unmounted on drop (also when the test fails).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Busy (a process still holds a file): detach it now, freed when released.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Fill `path` with zeros until the file system is full (or `limit` bytes are written).
fn fill(path: &Path, limit: u64) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("filler file");
    let chunk = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    while written < limit {
        let n = (limit - written).min(chunk.len() as u64) as usize;
        match f.write(&chunk[..n]) {
            Ok(0) | Err(_) => break,
            Ok(n) => written += n as u64,
        }
    }
    let _ = f.sync_all();
    written
}

/// The storage root fills up: recording stops with the error in the API (state "error",
/// "disk full") and the metric, while a live viewer of the same camera keeps receiving
/// every packet; freeing space resumes recording by itself.
#[test]
fn full_disk_stops_recording_visibly_and_resumes() {
    let fs = match Tmpfs::mount("4m") {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED full_disk_stops_recording_visibly_and_resumes: cannot mount a tmpfs ({why})");
            return;
        }
    };
    let root = fs.path().join("root");
    std::fs::create_dir(&root).unwrap();
    // Leave ~300 KB: a few seconds of the demo camera (≈ 75 KB/s).
    let filler = fs.path().join("filler");
    fill(&filler, 4 * 1024 * 1024 - 300 * 1024);
    let node = NodeBuilder::new()
        .extra(DEMO_CAMERA)
        .extra(&storage(&root, 1.0))
        .start();
    node.wait_live("live/demo");
    let rt = runtime();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let viewer = {
        let url = node.url("live/demo");
        rt.spawn(async move {
            let p = play(&url, PlayOptions::new(ClientTransport::Tcp))
                .await
                .expect("live viewer");
            p.collect_stats(
                async {
                    let _ = stop_rx.await;
                },
                None,
            )
            .await
        })
    };
    let status = poll_until(
        Duration::from_secs(30),
        "a disk-full recording error",
        || record_status(&node, "demo").filter(|s| s["state"] == "error"),
    );
    let error = status["error"].as_str().unwrap_or_default().to_lowercase();
    assert!(error.contains("disk full"), "recording error: {status}");
    // Now take what is left too, so not even a small segment fits, and watch for longer
    // than the 2 s retry interval: recording stays stopped and says so.
    let topup = fs.path().join("topup");
    fill(&topup, u64::MAX);
    let files_full = segment_files(&root, "demo");
    let watch_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < watch_until {
        let s = record_status(&node, "demo").expect("status");
        assert_eq!(s["state"], "error", "state while the disk is full: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        segment_files(&root, "demo"),
        files_full,
        "segments appeared on a full disk"
    );
    assert!(
        labelled_metric(&node, "vigil_recording_errors_total", "camera=\"demo\"") > 0.0,
        "vigil_recording_errors_total"
    );
    let errors_before = status["errors"].as_u64().unwrap_or(0);
    assert!(errors_before > 0, "{status}");
    // Free space: recording resumes by itself, new segments appear.
    let freed_at = now_ms();
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(&topup).unwrap();
    poll_until(Duration::from_secs(20), "recording to resume", || {
        let s = record_status(&node, "demo")?;
        let new = segment_files(&root, "demo")
            .iter()
            .any(|f| f.start_ms >= freed_at);
        (s["state"] == "recording" && s["error"].is_null() && new).then_some(())
    });
    // The live viewer saw the whole episode without a gap.
    let _ = stop_tx.send(());
    let stats = rt.block_on(viewer).expect("viewer task");
    assert!(stats.error.is_none(), "live viewer: {:?}", stats.error);
    let t = &stats.tracks[0];
    assert!(t.packets > 500, "live viewer got {} packets", t.packets);
    assert_eq!(stats.lost(), 0, "live viewer lost packets");
    assert_eq!(t.ssrc_changes, 0);
    assert!(
        t.max_timestamp_step < CLOCK / 2,
        "live viewer saw a gap of {} ticks",
        t.max_timestamp_step
    );
    drop(node);
}
