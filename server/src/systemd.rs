//! A node's side of the service manager's protocol (sd_notify(3)), for the packaged unit's
//! `Type=notify` and `WatchdogSec=`.
//!
//! Why: with a plain `Type=simple` unit systemd calls the node "started" the moment it
//! execs, so units ordered after it (and `systemctl start` itself) would race the listeners;
//! READY=1 is sent once every listener is bound and its accept loop runs. A node whose
//! runtime stops scheduling tasks (a deadlock, a blocking call on every worker) keeps its
//! sockets open and looks alive to a port check; the watchdog pings come from a task on that
//! runtime, so they stop with it and systemd restarts the node.
//!
//! Outside systemd (no `NOTIFY_SOCKET`) every call here does nothing, so `vigil serve` in a
//! terminal or a container behaves as it always did. A failed send is logged at debug and
//! otherwise ignored: the service manager's bookkeeping must never stop a node.

use sd_notify::NotifyState;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!("sd_notify: {e}");
    }
}

/// READY=1 with a one-line status (`systemctl status` shows it).
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// RELOADING=1 before a SIGHUP's re-read of the config ([`ready`] again after it). The
/// timestamp is what systemd ≥ 253 matches the reload by; older ones ignore it.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// STOPPING=1: shutdown has begun (systemd then waits up to `TimeoutStopSec=`).
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// The interval between watchdog pings for a `WATCHDOG_USEC` of `timeout`: half of it, as
/// sd_watchdog_enabled(3) advises, so one late tick does not miss the deadline.
pub fn ping_interval(timeout: Duration) -> Duration {
    (timeout / 2).max(Duration::from_millis(1))
}

/// When systemd asked for a watchdog (`WATCHDOG_USEC`, for this pid), a task on the
/// current runtime that sends WATCHDOG=1 every half of it while `alive()` holds, until
/// `shutdown`. A tick that never comes (the runtime is stuck) is a missed ping, which is
/// the point.
pub fn spawn_watchdog(
    shutdown: CancellationToken,
    alive: impl Fn() -> bool + Send + 'static,
) -> Option<tokio::task::JoinHandle<()>> {
    let timeout = sd_notify::watchdog_enabled()?;
    let every = ping_interval(timeout);
    tracing::info!(
        ping_ms = every.as_millis() as u64,
        "systemd watchdog: pinging the service manager"
    );
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if !alive() {
                tracing::error!("systemd watchdog: the RTSP server has stopped; no more pings");
                return;
            }
            send(&[NotifyState::Watchdog]);
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_come_twice_per_watchdog_period() {
        assert_eq!(
            ping_interval(Duration::from_secs(30)),
            Duration::from_secs(15)
        );
        assert_eq!(
            ping_interval(Duration::from_micros(1)),
            Duration::from_millis(1)
        );
    }
}
