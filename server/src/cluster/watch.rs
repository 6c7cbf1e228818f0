//! The scheduler watch (issue 29 §2): a QUIC connection from this member to each candidate
//! [`vigil_cluster::elect_watched`] names, kept alive every `scheduler_watch_ms` and lost
//! after `scheduler_timeout_ms` without a packet from the peer and one fresh attempt that
//! did not connect within a short bound (see [`watch`]). A lost watch makes its node dead to
//! this member's election at once; the connection is retried meanwhile, so a node that
//! answers again (a stall, not a death) is elected again.
//!
//! Why a connection of its own and not the RPC's: those carry placements and migrations
//! with the endpoint's 5 s idle timeout, and a watch that a long call kept busy would say
//! nothing about the peer's silence. Why QUIC and not a ping on the gossip socket: the
//! endpoint is already mutually authenticated by the cluster CA, so nobody outside the
//! cluster can keep a dead scheduler alive or kill a live one with forged answers; and
//! QUIC's idle timeout is exactly the "heard nothing for this long" the watch needs.
//!
//! Only connections that were once up count: a candidate never reached (it has just joined,
//! or its certificate is wrong) is left to the gossip's detector, so a misconfigured member
//! cannot make its peers flap.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::rpc;

/// Between two connection attempts to a watched node that does not answer.
const RETRY: Duration = Duration::from_millis(100);

/// This member's watches, by node id.
pub(super) struct Watches {
    settings: Option<Settings>,
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Clone)]
struct Settings {
    endpoint: quinn::Endpoint,
    config: quinn::ClientConfig,
    timeout: Duration,
}

struct Entry {
    addr: SocketAddr,
    lost: Arc<AtomicBool>,
    stop: CancellationToken,
}

impl Watches {
    /// Watches over `rpc`'s endpoint; none without it or with `timeout_ms` 0.
    pub(super) fn new(rpc: Option<&rpc::Rpc>, ping_ms: u64, timeout_ms: u64) -> Watches {
        let settings = rpc.filter(|_| timeout_ms > 0).map(|r| {
            let (ping, timeout) = (
                Duration::from_millis(ping_ms),
                Duration::from_millis(timeout_ms),
            );
            Settings {
                endpoint: r.endpoint.clone(),
                config: r.watch_config(ping, timeout),
                timeout,
            }
        });
        Watches {
            settings,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This member's watch of `id` was up and is lost.
    pub(super) fn is_lost(&self, id: &str) -> bool {
        self.entries()
            .get(id)
            .is_some_and(|e| e.lost.load(Ordering::Relaxed))
    }

    /// Watches exactly `targets` (node id, RPC address): a watch starts for each new one
    /// (or one at a new address), the others stop. Called from the membership refresh.
    pub(super) fn follow(&self, targets: &[(String, SocketAddr)]) {
        let Some(s) = &self.settings else {
            return;
        };
        let mut entries = self.entries();
        entries.retain(|id, e| {
            let keep = targets.iter().any(|(t, a)| t == id && *a == e.addr);
            if !keep {
                e.stop.cancel();
            }
            keep
        });
        for (id, addr) in targets {
            if entries.contains_key(id) {
                continue;
            }
            let e = Entry {
                addr: *addr,
                lost: Arc::new(AtomicBool::new(false)),
                stop: CancellationToken::new(),
            };
            tokio::spawn(watch(
                s.clone(),
                id.clone(),
                *addr,
                e.lost.clone(),
                e.stop.clone(),
            ));
            entries.insert(id.clone(), e);
        }
    }

    /// Stops every watch (shutdown).
    pub(super) fn stop_all(&self) {
        for (_, e) in self.entries().drain() {
            e.stop.cancel();
        }
    }
}

/// One watch: connect, wait for the connection to be lost, confirm, mark it, reconnect.
///
/// A lost connection is confirmed by one fresh connection attempt bounded by
/// [`confirm_within`] before the node is marked lost: when this member itself stalled (its
/// process starved or stopped longer than the timeout), its side of the connection times
/// out on resuming although the scheduler answered all along, and the fresh handshake
/// succeeds at once. A dead scheduler costs the confirmation's bound on top of the timeout.
async fn watch(
    s: Settings,
    id: String,
    addr: SocketAddr,
    lost: Arc<AtomicBool>,
    stop: CancellationToken,
) {
    let confirm = confirm_within(s.timeout);
    let mut confirming = false;
    loop {
        let bound = if confirming { confirm } else { s.timeout };
        let attempt = tokio::time::timeout(
            bound,
            rpc::connect(&s.endpoint, Some(s.config.clone()), addr, &id),
        );
        let conn = tokio::select! {
            _ = stop.cancelled() => return,
            r = attempt => r,
        };
        match conn {
            Ok(Ok(conn)) => {
                if lost.swap(false, Ordering::Relaxed) {
                    info!(node = %id, %addr, "scheduler watch answered again");
                } else if confirming {
                    info!(node = %id, %addr, "scheduler watch timed out and reconnected at once: not lost");
                }
                let why = tokio::select! {
                    _ = stop.cancelled() => {
                        conn.close(0u32.into(), b"unwatched");
                        return;
                    }
                    why = conn.closed() => why,
                };
                debug!(node = %id, %addr, reason = %why, "scheduler watch: connection lost, confirming");
                confirming = true;
                continue;
            }
            Ok(Err(e)) => debug!(node = %id, %addr, error = %e, "scheduler watch: no connection"),
            Err(_) => debug!(node = %id, %addr, "scheduler watch: no connection within {bound:?}"),
        }
        if confirming {
            confirming = false;
            lost.store(true, Ordering::Relaxed);
            metrics::counter!("vigil_cluster_watch_lost_total").increment(1);
            info!(
                node = %id,
                %addr,
                "scheduler watch lost: the node is dead to this member's election"
            );
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// How long the fresh attempt that confirms a lost watch may take: a quarter of the
/// timeout, at most 200 ms (a handshake on a LAN takes a few ms; on a dead peer it never
/// completes).
fn confirm_within(timeout: Duration) -> Duration {
    (timeout / 4).min(Duration::from_millis(200))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_confirmation_is_a_short_fraction_of_the_timeout() {
        assert_eq!(
            confirm_within(Duration::from_millis(800)),
            Duration::from_millis(200)
        );
        assert_eq!(
            confirm_within(Duration::from_millis(300)),
            Duration::from_millis(75)
        );
        assert_eq!(
            confirm_within(Duration::from_secs(10)),
            Duration::from_millis(200)
        );
    }
}
