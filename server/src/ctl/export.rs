//! `vigil ctl export`: an MP4 of a recorded range into a file, with a progress bar.

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use std::io::{Read, Write};

pub struct Request<'a> {
    pub camera: &'a str,
    pub start: &'a str,
    pub end: &'a str,
    pub output: &'a std::path::Path,
    /// A fragmented MP4 (first bytes at once) instead of the plain faststart one.
    pub fragmented: bool,
}

pub fn export(api: &str, token: Option<&str>, r: &Request) -> anyhow::Result<()> {
    let q = |v: &str| utf8_percent_encode(v, NON_ALPHANUMERIC).to_string();
    let url = format!(
        "{}/api/export/{}?start={}&end={}{}",
        api.trim_end_matches('/'),
        q(r.camera),
        q(r.start),
        q(r.end),
        if r.fragmented { "" } else { "&download=1" }
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut req = agent.get(&url);
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let spinner = ProgressBar::new_spinner().with_message("reading the recording");
    spinner.enable_steady_tick(std::time::Duration::from_millis(120));
    let mut resp = req
        .call()
        .with_context(|| format!("cannot reach the admin API at {url} (is the node running?)"))?;
    spinner.finish_and_clear();
    let status = resp.status();
    if !status.is_success() {
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        bail!("{}: {}", status.as_u16(), text.trim_end());
    }
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
    };
    // Exact for the plain file; the recording's size in the range for the fragmented one.
    let total = header("content-length").or_else(|| header("x-vigil-estimated-length"));
    let started_at = resp
        .headers()
        .get("x-vigil-export-start")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bar = ProgressBar::new(total.unwrap_or(0));
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .context("progress template")?,
    );
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(r.output)
            .with_context(|| format!("cannot create {}", r.output.display()))?,
    );
    let mut body = resp.into_body().into_with_config().limit(u64::MAX).reader();
    let mut buf = vec![0u8; 256 * 1024];
    let mut written = 0u64;
    loop {
        let n = body
            .read(&mut buf)
            .context("the export was cut off (the file is incomplete)")?;
        if n == 0 {
            break;
        }
        file.write_all(&buf[..n])?;
        written += n as u64;
        if total.is_some_and(|t| written > t) {
            bar.set_length(written);
        }
        bar.set_position(written);
    }
    file.flush()?;
    bar.finish_and_clear();
    println!(
        "{}: {written} bytes, from the keyframe at {}",
        r.output.display(),
        started_at.as_deref().unwrap_or("?")
    );
    Ok(())
}
