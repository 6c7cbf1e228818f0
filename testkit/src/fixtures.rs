//! Media fixtures made with ffmpeg's synthetic sources.

use crate::workspace;
use std::path::PathBuf;
use std::process::Command;

/// Media files made once per machine with ffmpeg's synthetic sources, under
/// target/test-fixtures. 10 s, 25 fps, a keyframe every second (250 frames).
pub fn fixture(name: &str) -> PathBuf {
    let dir = workspace().join("target").join("test-fixtures");
    std::fs::create_dir_all(&dir).expect("fixture dir");
    let path = dir.join(name);
    // Tests run in parallel threads: one makes a fixture while the others wait for it (two
    // ffmpegs writing one temp file made a corrupt fixture on a fresh checkout).
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _making = MAKING.lock().unwrap_or_else(|p| p.into_inner());
    if path.exists() {
        return path;
    }
    let tmp = dir.join(format!("{}.{}.tmp", name, std::process::id()));
    let video = ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25"];
    let audio = ["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100"];
    // H.264 with a keyframe every second (25 frames) and no scene-cut keyframes.
    let x264 = [
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-g",
        "25",
        "-keyint_min",
        "25",
        "-sc_threshold",
        "0",
        "-pix_fmt",
        "yuv420p",
    ];
    let mut args: Vec<&str> = vec!["-v", "error", "-y"];
    match name {
        "h264_aac.mp4" => {
            args.extend(video);
            args.extend(audio);
            args.extend(["-t", "10"]);
            args.extend(x264);
            args.extend(["-c:a", "aac", "-b:a", "64k"]);
        }
        "h264.mp4" => {
            args.extend(video);
            args.extend(["-t", "10"]);
            args.extend(x264);
        }
        "h265.mp4" => {
            args.extend(video);
            args.extend([
                "-t",
                "10",
                "-c:v",
                "libx265",
                "-preset",
                "ultrafast",
                "-x265-params",
                "keyint=25:min-keyint=25:scenecut=0:log-level=error",
                "-pix_fmt",
                "yuv420p",
                "-tag:v",
                "hvc1",
            ]);
        }
        "h264_2mbps.mp4" => {
            args.extend([
                "-f",
                "lavfi",
                "-i",
                "testsrc2=size=1280x720:rate=25",
                "-t",
                "20",
            ]);
            args.extend(x264);
            args.extend(["-b:v", "2M", "-maxrate", "2M", "-bufsize", "1M"]);
        }
        other => panic!("unknown fixture {other}"),
    }
    args.extend(["-f", "mp4"]);
    let out = Command::new("ffmpeg")
        .args(&args)
        .arg(&tmp)
        .output()
        .expect("run ffmpeg (apt-get install ffmpeg)");
    assert!(
        out.status.success(),
        "making fixture {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &path).expect("rename fixture");
    path
}
