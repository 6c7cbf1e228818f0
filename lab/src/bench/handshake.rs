//! `vigil bench handshake`: connections per second that reach an answered DESCRIBE — a
//! fresh TCP connection, DESCRIBE, and with credentials in the URL the 401 challenge and the
//! Digest answer — to measure what authentication costs a node. Blocking sockets, one per
//! worker thread at a time (a handshake is a few round trips; threads keep it simple).
//!
//! The node's per-address limits count these requests: raise `[limits] describes_per_sec`,
//! `describe_burst` and `max_connections_per_address` on the node under test.

use anyhow::Context;
use bytes::BytesMut;
use clap::Args;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use vigil_proto::rtsp::auth::answer_challenge;
use vigil_proto::rtsp::{parse_frame, Frame, Limits, Response};

#[derive(Args, Debug, Clone)]
pub struct HandshakeArgs {
    /// rtsp://[user:pass@]host:port/path: with credentials, each connection logs in.
    #[arg(long)]
    pub url: String,
    /// Connections to make in all.
    #[arg(long, default_value_t = 2000)]
    pub connections: usize,
    /// Connections made at once (one per worker thread).
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
}

/// The next response on `s`.
fn response(s: &mut TcpStream, buf: &mut BytesMut) -> anyhow::Result<Response> {
    let mut chunk = [0u8; 16384];
    loop {
        if let Some((frame, used)) =
            parse_frame(buf, &Limits::default()).map_err(|e| anyhow::anyhow!("{e}"))?
        {
            let _ = buf.split_to(used);
            if let Frame::Response(r) = frame {
                return Ok(r);
            }
            continue;
        }
        let n = s.read(&mut chunk)?;
        anyhow::ensure!(n > 0, "the node closed the connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One connection: DESCRIBE (and the Digest answer to a 401). Its duration.
fn handshake(addr: &str, uri: &str, creds: Option<(&str, &str)>) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_nodelay(true)?;
    let mut buf = BytesMut::new();
    s.write_all(format!("DESCRIBE {uri} RTSP/1.0\r\nCSeq: 1\r\n\r\n").as_bytes())?;
    let mut r = response(&mut s, &mut buf)?;
    if r.status.0 == 401 {
        let (user, pass) = creds.context("401 and no credentials in the URL")?;
        let challenge = r
            .headers
            .get("WWW-Authenticate")
            .context("401 without a challenge")?
            .to_string();
        let auth = answer_challenge(&challenge, (user, pass), "DESCRIBE", uri, ("bench", 1))
            .context("no Digest challenge")?;
        s.write_all(
            format!("DESCRIBE {uri} RTSP/1.0\r\nCSeq: 2\r\nAuthorization: {auth}\r\n\r\n")
                .as_bytes(),
        )?;
        r = response(&mut s, &mut buf)?;
    }
    anyhow::ensure!(
        r.status.0 == 200,
        "DESCRIBE answered {} {}",
        r.status.0,
        r.reason
    );
    Ok(start.elapsed())
}

pub fn run(args: HandshakeArgs) -> anyhow::Result<()> {
    let url = url::Url::parse(&args.url).context("--url")?;
    let addr = format!(
        "{}:{}",
        url.host_str().context("no host")?,
        url.port().unwrap_or(554)
    );
    let user = percent_encoding::percent_decode_str(url.username())
        .decode_utf8_lossy()
        .into_owned();
    let pass = url.password().map(|p| {
        percent_encoding::percent_decode_str(p)
            .decode_utf8_lossy()
            .into_owned()
    });
    let mut bare = url.clone();
    let _ = bare.set_username("");
    let _ = bare.set_password(None);
    let uri = bare.to_string();
    let creds = pass.map(|p| (user, p));
    let per_worker = args.connections.div_ceil(args.workers.max(1));
    let start = Instant::now();
    let results: Vec<anyhow::Result<Vec<Duration>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.workers.max(1))
            .map(|_| {
                let (addr, uri, creds) = (&addr, &uri, &creds);
                scope.spawn(move || {
                    let c = creds.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
                    (0..per_worker)
                        .map(|_| handshake(addr, uri, c))
                        .collect::<anyhow::Result<Vec<_>>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("worker panicked")))
            })
            .collect()
    });
    let elapsed = start.elapsed();
    let mut times = Vec::new();
    for r in results {
        times.extend(r?);
    }
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
    println!(
        "{} handshakes ({}) in {:.2} s: {:.0} connections/s, latency p50 {:.2} ms, p99 {:.2} ms",
        times.len(),
        if creds.is_some() {
            "Digest login"
        } else {
            "no login"
        },
        elapsed.as_secs_f64(),
        times.len() as f64 / elapsed.as_secs_f64(),
        pct(0.5).as_secs_f64() * 1000.0,
        pct(0.99).as_secs_f64() * 1000.0,
    );
    Ok(())
}
