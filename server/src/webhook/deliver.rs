//! One receiver's delivery loop, on a thread of its own: a receiver that hangs or refuses
//! holds this thread only — never a runtime worker, a media task or another receiver.
//!
//! Its queue is its subscription to the node's event bus (`[webhooks] queue` deep): while it
//! retries, newer events wait there, and beyond the bound the oldest are dropped and counted
//! (`vigil_webhook_dropped_total`). Each event is tried `max_attempts` times on the
//! `retry::Backoff` schedule, then given up. Outcomes: `vigil_webhook_deliveries_total
//! {result="delivered"|"retried"|"given_up"}`. The signing key is held here and in no log
//! line, nor is the URL's path or query (many services put a token there): a log line
//! names the receiver by its origin. Redirects are not followed: the signed body goes to
//! the configured receiver or nowhere.

use super::body::{self, EVENT_HEADER, SIGNATURE_HEADER};
use super::retry::Backoff;
use crate::node::events::Published;
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::{error::RecvError, Receiver};
use tracing::{debug, warn};
use vigil_conf::Secret;

/// What a delivery thread needs, fixed at start.
pub struct Target {
    pub url: String,
    pub key: Option<Secret>,
    pub events: Vec<String>,
    pub timeout: Duration,
    pub backoff: Backoff,
    pub node_id: String,
    pub boot_ms: i64,
    /// The CAs an `https://` receiver's certificate is verified against.
    pub roots: Option<Arc<Vec<ureq::tls::Certificate<'static>>>>,
}

pub fn count(result: &'static str) {
    metrics::counter!("vigil_webhook_deliveries_total", "result" => result).increment(1);
}

/// Runs until the bus closes (the node is gone).
pub fn run(target: Target, mut rx: Receiver<Arc<Published>>) {
    let mut config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(target.timeout));
    if let Some(roots) = &target.roots {
        config = config.tls_config(
            ureq::tls::TlsConfig::builder()
                .provider(ureq::tls::TlsProvider::Rustls)
                .root_certs(ureq::tls::RootCerts::Specific(roots.clone()))
                .unversioned_rustls_crypto_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .build(),
        );
    }
    let agent: ureq::Agent = config.build().into();
    let origin = origin(&target.url);
    loop {
        match rx.blocking_recv() {
            Ok(p) => {
                let name = p.event.name();
                if target.events.is_empty() || target.events.iter().any(|e| e == name) {
                    deliver(&agent, &target, &origin, &p);
                }
            }
            Err(RecvError::Lagged(n)) => {
                metrics::counter!("vigil_webhook_dropped_total").increment(n);
                warn!(receiver = %origin, dropped = n, "webhook queue full: oldest events dropped");
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// One event, tried until it is taken or the schedule gives up.
fn deliver(agent: &ureq::Agent, t: &Target, origin: &str, p: &Published) {
    let body = body::body(&t.node_id, t.boot_ms, p);
    let signature = t
        .key
        .as_ref()
        .map(|k| body::signature(k.expose().as_bytes(), &body));
    for attempt in 1.. {
        match post(agent, t, p.event.name(), &body, signature.as_deref()) {
            Ok(()) => {
                count("delivered");
                debug!(receiver = %origin, event = p.event.name(), attempt, "webhook delivered");
                return;
            }
            Err(why) => match t.backoff.after(attempt, rand::thread_rng().gen()) {
                Some(wait) => {
                    count("retried");
                    debug!(receiver = %origin, attempt, %why, ?wait, "webhook attempt failed");
                    std::thread::sleep(wait);
                }
                None => {
                    count("given_up");
                    warn!(receiver = %origin, event = p.event.name(), attempts = attempt, %why,
                        "webhook event given up");
                    return;
                }
            },
        }
    }
}

/// How a log line names a receiver: `http://host:port`, nothing of its path or query.
fn origin(url: &str) -> String {
    url::Url::parse(url).map_or_else(
        |_| "<unparsable URL>".into(),
        |u| u.origin().ascii_serialization(),
    )
}

fn post(
    agent: &ureq::Agent,
    t: &Target,
    event: &str,
    body: &[u8],
    signature: Option<&str>,
) -> Result<(), String> {
    let mut req = agent
        .post(&t.url)
        .header("Content-Type", "application/json")
        .header(EVENT_HEADER, event);
    if let Some(s) = signature {
        req = req.header(SIGNATURE_HEADER, s);
    }
    match req.send(body) {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("answered {}", r.status().as_u16())),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_receiver_is_logged_by_its_origin_only() {
        assert_eq!(
            super::origin("http://hooks.example:8080/services/T0/B0/s3cr3t?token=x"),
            "http://hooks.example:8080"
        );
        assert_eq!(super::origin("not a url"), "<unparsable URL>");
    }
}
