//! Glass-to-glass on one machine (issue 27's benchmark): a camera whose every frame shows
//! its number as a 16-bit barcode (16 black or white columns across its top 64 rows), sent
//! by this process so the wall time each frame entered the node is known; a viewer reads
//! the number back from what it presents (Chromium: `requestVideoFrameCallback` and a
//! canvas; ffmpeg: 16 grey pixels per frame on a pipe), and the difference of the two clocks
//! — one machine, one clock — is the frame's glass-to-glass time.
//!
//! Why pixels rather than RTP timestamps: every viewer gets its own RTP identity from the
//! node, HLS has none, and a decoded picture is what the viewer sees.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Frames in one loop of the clip (60 s at 25 fps); a number identifies a frame within a loop
/// and the send times tell the loops apart.
pub const CLIP_FRAMES: usize = 1500;
pub const FPS: f64 = 25.0;

/// Encodes the barcode clip (H.264 Annex B, 640×360, 25 fps, one keyframe a second, no
/// B-frames) with ffmpeg into `dir`.
pub fn barcode_clip(dir: &Path) -> std::path::PathBuf {
    let out = dir.join("barcode.h264");
    let lum = "if(lt(Y,64),255*mod(floor(N/pow(2,floor(X/40))),2),110)";
    let status = Command::new("ffmpeg")
        .args([
            "-hide_banner",
            "-nostdin",
            "-v",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
        ])
        .arg(format!(
            "color=c=gray:s=640x360:r=25:d={},geq=lum='{lum}':cb=128:cr=128",
            CLIP_FRAMES / 25
        ))
        .args([
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-tune",
            "zerolatency",
            "-bf",
            "0",
            "-g",
            "25",
            "-pix_fmt",
            "yuv420p",
            "-f",
            "h264",
        ])
        .arg(&out)
        .status()
        .expect("ffmpeg runs");
    assert!(status.success(), "ffmpeg could not encode the barcode clip");
    out
}

/// Wall time (µs since the epoch) each frame was written to the node, by global index
/// (frame `k` shows the number `k % CLIP_FRAMES`).
pub type Sent = Arc<Mutex<Vec<i64>>>;

/// Publishes `clip` to `url` in real time on a thread of its own, recording when each frame
/// was written, until `stop` is set.
pub fn publish(
    clip: &Path,
    url: &str,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (Sent, std::thread::JoinHandle<()>) {
    let data = std::fs::read(clip).expect("the clip");
    let clip = vigil_testkit::client::Clip::from_annexb(&data, FPS).expect("SPS/PPS");
    assert_eq!(clip.frames.len(), CLIP_FRAMES, "one frame per number");
    let sent: Sent = Arc::default();
    let (url, out) = (url.to_string(), sent.clone());
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let mut p =
                vigil_testkit::client::Publisher::announce(&url, &clip, Duration::from_secs(10))
                    .await
                    .expect("ANNOUNCE/RECORD");
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / FPS));
            let mut ts: u32 = 0;
            for k in 0usize.. {
                tick.tick().await;
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let frame = &clip.frames[k % CLIP_FRAMES];
                if p.send_frame(frame, ts).await.is_err() {
                    break;
                }
                out.lock()
                    .unwrap()
                    .push(vigil_storage::now_ms() * 1000 + sub_ms_us());
                ts = ts.wrapping_add(3600);
            }
            let _ = p.teardown().await;
        });
    });
    (sent, thread)
}

/// The µs within the current millisecond (now_ms has ms resolution).
fn sub_ms_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::from(d.subsec_micros() % 1000))
}

/// The glass-to-glass times (ms) of `seen` frames: (number shown, wall time presented in
/// ms since the epoch) against when that frame was sent: the latest send of that number
/// before it was presented. Frames whose number was never sent are dropped (a misread).
pub fn latencies(seen: &[(u32, f64)], sent: &[i64]) -> Vec<f64> {
    seen.iter()
        .filter_map(|(n, at_ms)| {
            let at_us = (at_ms * 1000.0) as i64;
            (0..sent.len())
                .rev()
                .filter(|k| k % CLIP_FRAMES == *n as usize)
                .map(|k| sent[k])
                .find(|t| *t <= at_us)
                .map(|t| (at_us - t) as f64 / 1000.0)
        })
        // A number misread as an older one would look seconds late: a loop away is a misread.
        .filter(|ms| *ms < 30_000.0)
        .collect()
}

/// Reads frames of an RTSP URL with ffmpeg (`-fflags nobuffer -flags low_delay`, as a
/// latency-minded operator runs it), each as 16 grey pixels on a pipe, timestamped when
/// they arrive: (number, ms since the epoch). Stops after `frames`. `threads`: the
/// decoder's (None: ffmpeg's default, frame threads on every core, each holding a frame).
pub fn ffmpeg_read(
    url: &str,
    frames: usize,
    timeout: Duration,
    threads: Option<u32>,
) -> Vec<(u32, f64)> {
    let mut cmd = Command::new("ffmpeg");
    if let Some(t) = threads {
        cmd.args(["-threads", &t.to_string()]);
    }
    let mut child = cmd
        .args([
            "-hide_banner",
            "-nostdin",
            "-v",
            "error",
            "-fflags",
            "nobuffer",
            "-flags",
            "low_delay",
            "-rtsp_transport",
            "tcp",
            "-i",
            url,
            "-vf",
            "crop=640:64:0:0,scale=16:1:flags=area",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "gray",
            "-flush_packets",
            "1",
            "-",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("ffmpeg runs");
    let mut out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut px = [0u8; 16];
        while out.read_exact(&mut px).is_ok() {
            let at = wall_ms();
            let n = px
                .iter()
                .enumerate()
                .filter(|(_, v)| **v > 128)
                .fold(0u32, |n, (k, _)| n | (1 << k));
            if tx.send((n, at)).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + timeout;
    let mut seen = Vec::new();
    while seen.len() < frames {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(s) => seen.push(s),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    seen
}

pub fn wall_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// The `p`-th percentile (0–100) of `v`, nearest rank.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

/// Chromium's side, run in a page of the node (same origin for WHEP and HLS): a `<video>`
/// for a WHEP URL (`kind` "webrtc") or an HLS playlist ("hls", hls.js as the console
/// vendors it), and from its first presented frame on, each frame's number and
/// `performance.timeOrigin + expectedDisplayTime` pushed to `window.__glass.seen` until
/// `count`. `window.__glass.first`: ms from the call to the first presented frame;
/// `marks`: ms to the offer's ICE candidates gathered, its answer, the connection (WebRTC),
/// or to the playlist parsed and the first segment loaded (HLS).
pub const BROWSER_VIEWER: &str = r#"
const [kind, url, count] = arguments;
const g = { seen: [], first: null, error: null, done: false, marks: {} };
window.__glass = g;
const v = document.createElement('video');
v.muted = true; v.autoplay = true; v.playsInline = true;
v.style.width = '640px';
document.body.append(v);
const cvs = document.createElement('canvas');
cvs.width = 640; cvs.height = 64;
const ctx = cvs.getContext('2d', { willReadFrequently: true });
const t0 = performance.now();
const number = () => {
  ctx.drawImage(v, 0, 0, 640, 64, 0, 0, 640, 64);
  const d = ctx.getImageData(0, 0, 640, 64).data;
  let n = 0;
  for (let k = 0; k < 16; k++) {
    if (d[(32 * 640 + 40 * k + 20) * 4] > 128) n |= 1 << k;
  }
  return n;
};
const onFrame = (now, meta) => {
  if (g.first === null) g.first = meta.expectedDisplayTime - t0;
  g.seen.push([number(), performance.timeOrigin + meta.expectedDisplayTime]);
  if (g.seen.length < count) v.requestVideoFrameCallback(onFrame); else g.done = true;
};
v.requestVideoFrameCallback(onFrame);
const fail = (e) => { g.error = String(e && e.message || e); };
// The console's token, when it was signed in: a node with one serves nobody without it.
const token = sessionStorage.getItem('vigil.adminToken');
const auth = token ? { Authorization: `Bearer ${token}` } : {};
(async () => {
  if (kind === 'webrtc') {
    const pc = new RTCPeerConnection();
    g.pc = pc;
    pc.addTransceiver('video', { direction: 'recvonly' });
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === 'connected') g.marks.connected = performance.now() - t0;
    };
    pc.ontrack = (e) => { v.srcObject = new MediaStream([e.track]); v.play().catch(fail); };
    await pc.setLocalDescription(await pc.createOffer());
    // No wait for the browser's candidates: the node is ICE-lite and learns the viewer's
    // address from its checks (as the console does).
    g.marks.offered = performance.now() - t0;
    const r = await fetch(url, { method: 'POST', headers: { ...auth, 'Content-Type': 'application/sdp' }, body: pc.localDescription.sdp });
    g.marks.answered = performance.now() - t0;
    if (r.status !== 201) throw new Error(`${r.status} ${await r.text()}`);
    g.resource = new URL(r.headers.get('Location'), location.href).toString();
    await pc.setRemoteDescription({ type: 'answer', sdp: await r.text() });
  } else {
    const h = new window.Hls({ xhrSetup: (x) => { if (token) x.setRequestHeader('Authorization', `Bearer ${token}`); } });
    g.hls = h;
    h.on(window.Hls.Events.ERROR, (_e, d) => { if (d.fatal) fail(`${d.type}: ${d.details}`); });
    h.on(window.Hls.Events.MANIFEST_PARSED, () => {
      g.marks.playlist = performance.now() - t0;
      v.play().catch(fail);
    });
    h.on(window.Hls.Events.FRAG_LOADED, () => {
      if (g.marks.segment === undefined) g.marks.segment = performance.now() - t0;
    });
    h.loadSource(url);
    h.attachMedia(v);
  }
})().catch(fail);
return true;
"#;

/// Ends the page's viewer (`BROWSER_VIEWER`): its peer closed (resource deleted) or hls.js
/// destroyed, the element removed.
pub const BROWSER_VIEWER_END: &str = r#"
return (async () => {
  const g = window.__glass;
  if (!g) return true;
  const token = sessionStorage.getItem('vigil.adminToken');
  const auth = token ? { Authorization: `Bearer ${token}` } : {};
  if (g.resource) await fetch(g.resource, { method: 'DELETE', headers: auth }).catch(() => {});
  if (g.pc) g.pc.close();
  if (g.hls) g.hls.destroy();
  document.querySelectorAll('video').forEach((v) => { if (!v.id) v.remove(); });
  window.__glass = null;
  return true;
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_matched_with_its_latest_send_before_it_was_shown() {
        let sent: Vec<i64> = (0..CLIP_FRAMES as i64 * 2).map(|k| k * 40_000).collect();
        // Number 10 shown 100 ms after its second send (k = 1510).
        let second = 1510.0 * 40.0 + 100.0;
        assert_eq!(latencies(&[(10, second)], &sent), vec![100.0]);
        assert_eq!(latencies(&[(10, 400.5)], &sent), vec![0.5]);
        assert!(
            latencies(&[(10, 399.0)], &sent).is_empty(),
            "before any send"
        );
        assert!(latencies(&[(1600, 1e9)], &sent).is_empty(), "never sent");
        assert_eq!(percentile(&[3.0, 1.0, 2.0, 4.0], 50.0), 2.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0, 4.0], 95.0), 4.0);
    }
}
