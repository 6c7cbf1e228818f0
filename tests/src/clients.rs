//! Real clients driven by the end-to-end tests: ffmpeg and ffprobe (the judges of "plays"),
//! GStreamer, and what the kernel dropped while one of them read.

use crate::{run_with_timeout, spawn_background, Background, Captured};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

/// The bundled demo clip as an always-on camera at `live/demo` (for `NodeBuilder::extra`).
pub const DEMO_CAMERA: &str = "[[camera]]\nid = \"demo\"\nsource = \"demo\"\non_demand = false";

/// Frames of every fixture (10 s at 25 fps) and of one GOP (a keyframe every second).
pub const FIXTURE_FRAMES: u64 = 250;
pub const GOP: u64 = 25;

/// The frame window a reader of a whole fixture publish must decode, when it was started
/// `joined` after the publisher. The reader starts at the newest keyframe (the GOP cache),
/// so it gets at least every frame from the moment it joined and at most all of them:
/// `[250 - frames elapsed - one GOP of tolerance, 250]`.
pub fn expected_window(joined: Duration) -> (u64, u64) {
    let elapsed = (joined.as_secs_f64() * 25.0).ceil() as u64;
    (FIXTURE_FRAMES.saturating_sub(elapsed + GOP), FIXTURE_FRAMES)
}

/// What an ffmpeg reader decoded.
#[derive(Debug)]
pub struct Decoded {
    pub frames: u64,
    /// The output position ffmpeg reached (`out_time_us` of `-progress`), if it reported one.
    pub out_time: Option<Duration>,
    /// What ffmpeg printed at error level (at `-v error`, everything it printed).
    pub stderr: String,
    /// A UDP reader's warnings (missed or late RTP packets), kept out of `stderr`.
    pub warnings: String,
    pub status: ExitStatus,
    pub elapsed: Duration,
    /// What the kernel dropped while this reader ran (any socket on the machine).
    pub kernel_drops: KernelDrops,
}

/// Packets the kernel dropped on the machine over an interval, where /proc could be read:
/// two places a datagram can be lost on the way from a server to a local reader without
/// either of them being told.
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelDrops {
    /// UDP `InErrors` (/proc/net/snmp): full receive buffers, bad checksums.
    pub udp_in_errors: Option<u64>,
    /// A CPU's input backlog full (/proc/net/softnet_stat), loopback included.
    pub backlog: Option<u64>,
}

/// The kernel's drop counters at one moment, to count what it drops from then on.
#[derive(Debug, Clone, Copy)]
struct KernelDropsSince {
    udp_in_errors: Option<u64>,
    backlog: Option<u64>,
}

impl KernelDropsSince {
    fn now() -> KernelDropsSince {
        use vigil_server::procfs::{softnet_dropped, udp_in_errors};
        KernelDropsSince {
            udp_in_errors: udp_in_errors(),
            backlog: softnet_dropped(),
        }
    }

    fn drops(&self) -> KernelDrops {
        let now = KernelDropsSince::now();
        let delta = |now: Option<u64>, then: Option<u64>| Some(now?.saturating_sub(then?));
        KernelDrops {
            udp_in_errors: delta(now.udp_in_errors, self.udp_in_errors),
            backlog: delta(now.backlog, self.backlog),
        }
    }
}

impl Decoded {
    /// "Plays": exit 0, nothing at all on stderr at `-v error`, and `min..=max` frames.
    pub fn assert_plays(&self, what: &str, min: u64, max: u64) {
        assert!(
            self.stderr.trim().is_empty(),
            "{what}: ffmpeg reported errors (meanwhile the kernel dropped {:?}):\n{}\n\
             its warnings:\n{}",
            self.kernel_drops,
            self.stderr,
            self.warnings
        );
        assert!(
            self.status.success(),
            "{what}: ffmpeg failed ({}) after {:?}",
            self.status,
            self.elapsed
        );
        assert!(
            (min..=max).contains(&self.frames),
            "{what}: decoded {} frames, expected {min}..={max}",
            self.frames
        );
    }
}

/// The last `frame=N` of ffmpeg's `-progress` output.
pub fn progress_frames(stdout: &str) -> u64 {
    stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("frame=")?.trim().parse().ok())
        .unwrap_or(0)
}

/// `ffmpeg -v error [input options] -i URL [output options] -f null -` (a UDP reader:
/// `-v level+warning`) with frames reported on stdout by `-progress`. The RTSP socket timeout (5 s) bounds every wait on the server.
pub fn ffmpeg_decode_cmd(url: &str, input: &[&str], output: &[&str]) -> Command {
    let udp = input.windows(2).any(|w| w == ["-rtsp_transport", "udp"]);
    // A UDP reader also logs warnings, each line tagged with its level: `ffmpeg_decode`
    // keeps the errors apart, and the warnings (missed or late RTP packets) say why a
    // failed reader's picture broke.
    let level = if udp { "level+warning" } else { "error" };
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-hide_banner", "-nostdin", "-nostats", "-v", level])
        .args(["-timeout", "5000000"]);
    if udp {
        // A UDP reader's socket gets the system default receive buffer (208 KiB here),
        // about a second of the fixtures' packets counting the kernel's per-datagram
        // overhead: a CI machine that keeps ffmpeg off the CPU that long drops datagrams in
        // the kernel, which no server can prevent. 4 MiB (as a surveillance client would
        // ask for) keeps the test about the server's stream.
        // ffmpeg waits only 0.1 s for an RTP packet that arrives out of order over UDP
        // before it gives it up (GStreamer's rtspsrc waits 2 s, VLC 1 s): 0.5 s, as a
        // client on a real network would allow; a packet the server never sent still
        // breaks the picture.
        cmd.args(udp_client_ports())
            .args(["-buffer_size", "4194304", "-max_delay", "500000"]);
    }
    cmd.args(input)
        .args(["-i", url])
        .args(output)
        .args(["-f", "null", "-", "-progress", "pipe:1"]);
    cmd
}

/// Decode `url` with ffmpeg to the null muxer and count the frames.
pub fn ffmpeg_decode(url: &str, input: &[&str], output: &[&str], timeout: Duration) -> Decoded {
    start_ffmpeg_decode(url, input, output).finish(timeout)
}

/// An ffmpeg reader started by [`start_ffmpeg_decode`]: its process can be signalled (a
/// test freezes a viewer) before [`RunningDecode::finish`] collects what it decoded.
pub struct RunningDecode {
    run: Captured,
    started: Instant,
    drops: KernelDropsSince,
}

/// [`ffmpeg_decode`] started, not waited for.
pub fn start_ffmpeg_decode(url: &str, input: &[&str], output: &[&str]) -> RunningDecode {
    let drops = KernelDropsSince::now();
    RunningDecode {
        run: Captured::spawn(&mut ffmpeg_decode_cmd(url, input, output)),
        started: Instant::now(),
        drops,
    }
}

impl RunningDecode {
    /// Holds ffmpeg off the CPU (SIGSTOP): a viewer falling behind on a busy machine.
    pub fn freeze(&self) {
        self.run.signal(libc::SIGSTOP);
    }

    /// Lets a frozen ffmpeg run again (SIGCONT).
    pub fn thaw(&self) {
        self.run.signal(libc::SIGCONT);
    }

    /// Waits for ffmpeg to end (killed past `timeout`) and reads what it decoded.
    pub fn finish(self, timeout: Duration) -> Decoded {
        let out = self.run.wait(timeout);
        let kernel_drops = self.drops.drops();
        let progress = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let (warnings, errors): (Vec<&str>, Vec<&str>) =
            stderr.lines().partition(|l| l.contains("[warning] "));
        Decoded {
            frames: progress_frames(&progress),
            out_time: progress
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("out_time_us=")?.trim().parse().ok())
                .map(Duration::from_micros),
            stderr: errors.join("\n"),
            warnings: warnings.join("\n"),
            status: out.status,
            elapsed: self.started.elapsed(),
            kernel_drops,
        }
    }
}

/// [`ffmpeg_decode`] on a thread of its own, so several readers run at once.
pub fn spawn_ffmpeg_decode(
    url: &str,
    input: &[&str],
    output: &[&str],
    timeout: Duration,
) -> std::thread::JoinHandle<Decoded> {
    let url = url.to_string();
    let input: Vec<String> = input.iter().map(|s| s.to_string()).collect();
    let output: Vec<String> = output.iter().map(|s| s.to_string()).collect();
    std::thread::spawn(move || {
        let input: Vec<&str> = input.iter().map(String::as_str).collect();
        let output: Vec<&str> = output.iter().map(String::as_str).collect();
        ffmpeg_decode(&url, &input, &output, timeout)
    })
}

/// `ffmpeg -re -i FILE -c copy -f rtsp [-rtsp_transport tcp] URL` in the background.
pub fn ffmpeg_publish(file: &Path, url: &str, tcp: bool) -> Background {
    let mut cmd = Command::new("ffmpeg");
    cmd.args([
        "-hide_banner",
        "-nostdin",
        "-nostats",
        "-v",
        "error",
        "-re",
        "-i",
    ])
    .arg(file)
    .args(["-c", "copy", "-f", "rtsp"]);
    if tcp {
        cmd.args(["-rtsp_transport", "tcp"]);
    } else {
        cmd.args(udp_client_ports());
    }
    cmd.arg(url);
    spawn_background(&mut cmd)
}

/// `-min_port`/`-max_port` options giving an ffmpeg RTSP client over UDP 16 local ports
/// that are free right now. By default every ffmpeg starts at port 5000, so concurrent UDP
/// clients on one machine collide, and ffmpeg prints each failed bind as an error before it
/// moves on to the next port. The ranges are taken below 30000, away from the nodes' RTP
/// ports and the ephemeral range.
pub fn udp_client_ports() -> [String; 4] {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    for _ in 0..500 {
        let slot = u32::from(NEXT.fetch_add(1, Ordering::Relaxed));
        let base = 10_000 + ((std::process::id().wrapping_mul(7919) + slot * 16) % 20_000) as u16;
        let base = base & !1;
        let free = (base..base + 16)
            .map(|p| std::net::UdpSocket::bind(("127.0.0.1", p)))
            .collect::<Result<Vec<_>, _>>()
            .is_ok();
        if free {
            return [
                "-min_port".into(),
                base.to_string(),
                "-max_port".into(),
                (base + 15).to_string(),
            ];
        }
    }
    panic!("no free range of 16 UDP ports below 30000");
}

/// `ffprobe -show_streams` of an RTSP URL: the `streams` array. Asserts a clean run.
pub fn ffprobe_streams(url: &str, transport: &str) -> Vec<serde_json::Value> {
    let out = run_with_timeout(
        Command::new("ffprobe")
            .args(["-hide_banner", "-v", "error", "-timeout", "5000000"])
            .args(["-rtsp_transport", transport])
            .args(["-show_streams", "-of", "json", url]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.trim().is_empty(),
        "ffprobe {url} over {transport}: {}: {err}",
        out.status
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ffprobe JSON");
    v["streams"].as_array().cloned().unwrap_or_default()
}

/// What a GStreamer `rtspsrc` pipeline decoded.
#[derive(Debug)]
pub struct GstDecoded {
    /// Decoded frames that reached the sink.
    pub frames: u64,
    /// Caps of the decoded video (`width=(int)…`).
    pub caps: String,
    /// gst-launch's messages and every ERROR-level log line of any element
    /// (`GST_DEBUG=*:1`, libav's decoder errors included), in order.
    pub output: String,
    /// The ERROR lines (messages and logs) before the pipeline reached end of stream.
    pub errors: Vec<String>,
    /// ERROR lines after end of stream, while the pipeline shut down (rtspsrc of GStreamer
    /// 1.22 sometimes fails its PAUSE/TEARDOWN race there: not a playback error).
    pub teardown_errors: Vec<String>,
    pub status: ExitStatus,
    pub elapsed: Duration,
}

/// Decode `frames` H.264 frames from `url` with `rtspsrc protocols=…`, then stop (EOS).
pub fn gst_decode_h264(url: &str, protocols: &str, frames: u64, timeout: Duration) -> GstDecoded {
    gst_decode_h264_with(url, protocols, &[], frames, timeout)
}

/// [`gst_decode_h264`] with more `rtspsrc` properties (`tls-validation-flags=…`).
pub fn gst_decode_h264_with(
    url: &str,
    protocols: &str,
    props: &[&str],
    frames: u64,
    timeout: Duration,
) -> GstDecoded {
    let start = Instant::now();
    // One stream for messages (stdout, flushed per line) and logs (stderr): their order
    // tells errors while playing from errors while shutting down.
    let out = run_with_timeout(
        Command::new("sh")
            .args(["-c", "exec \"$@\" 2>&1", "sh", "gst-launch-1.0"])
            .env("GST_DEBUG", "*:1")
            .env("GST_DEBUG_NO_COLOR", "1")
            .args(["-e", "-v", "rtspsrc"])
            .arg(format!("location={url}"))
            .arg(format!("protocols={protocols}"))
            .args(props)
            .args([
                "latency=200",
                "tcp-timeout=5000000",
                "!",
                "rtph264depay",
                "!",
            ])
            .args(["h264parse", "!", "avdec_h264", "!", "identity"])
            // identity turns the (N+1)th buffer into EOS: N frames reach the sink.
            .arg(format!("eos-after={}", frames + 1))
            .args(["!", "fakesink", "silent=false"]),
        timeout,
    );
    let output = String::from_utf8_lossy(&out.stdout).into_owned();
    let frames = output
        .lines()
        .filter(|l| l.contains("last-message = chain") && l.contains("(fakesink0:sink)"))
        .count() as u64;
    let caps = output
        .lines()
        .find(|l| l.contains("GstFakeSink:fakesink0.GstPad:sink: caps = video/x-raw"))
        .unwrap_or_default()
        .to_string();
    let (mut errors, mut teardown_errors) = (Vec::new(), Vec::new());
    let mut eos = false;
    for line in output.lines() {
        eos |= line.starts_with("Got EOS from element");
        if line.contains("ERROR") {
            let list = if eos {
                &mut teardown_errors
            } else {
                &mut errors
            };
            list.push(line.to_string());
        }
    }
    GstDecoded {
        frames,
        caps,
        output,
        errors,
        teardown_errors,
        status: out.status,
        elapsed: start.elapsed(),
    }
}

/// `gst-launch-1.0 filesrc ! qtdemux ! h264parse ! rtspclientsink protocols=…` in the
/// background (it publishes in real time: the sink synchronises on the clock).
pub fn gst_publish_h264(file: &Path, url: &str, protocols: &str) -> Background {
    gst_publish_h264_with(file, url, protocols, &[])
}

/// [`gst_publish_h264`] with more `rtspclientsink` properties.
pub fn gst_publish_h264_with(
    file: &Path,
    url: &str,
    protocols: &str,
    props: &[&str],
) -> Background {
    spawn_background(
        Command::new("gst-launch-1.0")
            .env("GST_DEBUG", "*:1")
            .env("GST_DEBUG_NO_COLOR", "1")
            .args(["-q", "filesrc"])
            .arg(format!("location={}", file.display()))
            .args(["!", "qtdemux", "!", "h264parse", "!", "rtspclientsink"])
            .arg(format!("location={url}"))
            .arg(format!("protocols={protocols}"))
            .args(props),
    )
}
