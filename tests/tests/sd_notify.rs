//! The node's side of systemd's `Type=notify` and `WatchdogSec=` (issue 28 §2), without
//! systemd: the test is the service manager, a unix datagram socket named by
//! `NOTIFY_SOCKET`, as systemd passes it.
//!
//! READY=1 must mean "connections are accepted" (units ordered after vigil, and a
//! `systemctl start` that returns, count on it): at the moment it arrives the RTSP port
//! accepts a connection with no retry, and a node that cannot bind its port never sends it.
//! Watchdog pings then come at half of WATCHDOG_USEC; SIGHUP is bracketed by RELOADING=1 and
//! READY=1; SIGTERM says STOPPING=1.

use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};
use vigil_testkit::serve::{NodeConfig, ServeProcess};
use vigil_tests::{free_port, signal, vigil_bin};

/// The service manager's socket.
fn manager(dir: &Path) -> (UnixDatagram, String) {
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
    (socket, path.to_string_lossy().into_owned())
}

/// The next datagram within `timeout`, as its `KEY=value` lines; None on timeout.
fn next_message(socket: &UnixDatagram, timeout: Duration) -> Option<Vec<String>> {
    socket
        .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
        .expect("set a read timeout");
    let mut buf = [0u8; 4096];
    match socket.recv(&mut buf) {
        Ok(n) => Some(
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .map(str::to_string)
                .collect(),
        ),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            None
        }
        Err(e) => panic!("receiving from the notify socket: {e}"),
    }
}

/// Messages until one holds `line`, within `timeout`: (that message, the ones before it).
fn wait_for_line(
    socket: &UnixDatagram,
    line: &str,
    timeout: Duration,
) -> (Vec<String>, Vec<Vec<String>>) {
    let deadline = Instant::now() + timeout;
    let mut before = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(message) = next_message(socket, left) else {
            panic!("no {line} within {timeout:?}; received before: {before:?}");
        };
        if message.iter().any(|l| l == line) {
            return (message, before);
        }
        before.push(message);
    }
}

fn config(rtsp_port: u16) -> NodeConfig {
    NodeConfig {
        id: format!("notify-{rtsp_port}"),
        ip: "127.0.0.1".into(),
        rtsp_port,
        api_port: free_port("127.0.0.1"),
        udp: vigil_testkit::ports::udp_range(),
        token: vigil_tests::ADMIN_TOKEN.into(),
        tables: "[storage]\nenabled = false\n".into(),
        ..NodeConfig::default()
    }
}

#[test]
fn ready_comes_once_the_rtsp_port_accepts_then_watchdog_reload_and_stop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (socket, path) = manager(dir.path());
    let config = config(free_port("127.0.0.1"));
    let env = [
        ("NOTIFY_SOCKET".to_string(), path),
        // Pings every 150 ms.
        ("WATCHDOG_USEC".to_string(), "300000".to_string()),
    ];
    let mut node = ServeProcess::spawn(
        &vigil_bin(),
        &dir.path().join("node"),
        &config.id,
        &config.render(),
        "info",
        &env,
    )
    .unwrap_or_else(|e| panic!("{e}"));

    let (ready, before) = wait_for_line(&socket, "READY=1", Duration::from_secs(20));
    // At once, no retry: READY=1 promises the listener is there.
    let accepted = TcpStream::connect_timeout(
        &vigil_testkit::serve::rtsp_socket(&config).expect("addr"),
        Duration::from_secs(2),
    );
    assert!(
        accepted.is_ok(),
        "READY=1 came but the RTSP port refused: {accepted:?}; log:\n{}",
        node.log()
    );
    assert!(
        vigil_testkit::serve::api_get(&config.api_url(), "/api/health").is_ok(),
        "READY=1 came but the admin API does not answer; log:\n{}",
        node.log()
    );
    assert!(
        before.iter().flatten().all(|l| l != "WATCHDOG=1"),
        "watchdog pings before READY=1: {before:?}"
    );
    assert!(
        ready
            .iter()
            .any(|l| l.starts_with("STATUS=") && l.contains(&config.rtsp_addr())),
        "READY=1 carries a status naming the RTSP address: {ready:?}"
    );

    // Pings at about 150 ms: over 1.5 s about ten; at least three on a loaded machine, and
    // not a flood (a ping per tick, not per loop turn).
    let window = Instant::now() + Duration::from_millis(1500);
    let mut pings = 0;
    while let Some(message) =
        next_message(&socket, window.saturating_duration_since(Instant::now()))
    {
        assert_eq!(message, ["WATCHDOG=1"], "between READY=1 and SIGHUP");
        pings += 1;
        if Instant::now() >= window {
            break;
        }
    }
    assert!(
        (3..=14).contains(&pings),
        "{pings} watchdog pings in 1.5 s at WATCHDOG_USEC = 300 ms (one per 150 ms)"
    );

    // SIGHUP: RELOADING=1 (with the time systemd ≥ 253 matches it by), then READY=1.
    let pid = node.pid().expect("running");
    signal(pid, libc::SIGHUP);
    let (reloading, _) = wait_for_line(&socket, "RELOADING=1", Duration::from_secs(5));
    assert!(
        reloading.iter().any(|l| l.starts_with("MONOTONIC_USEC=")),
        "{reloading:?}"
    );
    wait_for_line(&socket, "READY=1", Duration::from_secs(5));

    signal(pid, libc::SIGTERM);
    wait_for_line(&socket, "STOPPING=1", Duration::from_secs(5));
    let status = node
        .wait_for(
            "its exit after SIGTERM",
            Duration::from_secs(10),
            Duration::from_millis(20),
            || None::<()>,
        )
        .err();
    match status {
        Some(vigil_testkit::serve::HarnessError::Exited { status, .. }) => {
            assert!(
                status.success(),
                "exit after SIGTERM: {status}; log:\n{}",
                node.log()
            )
        }
        other => panic!("no clean exit after SIGTERM: {other:?}"),
    }
}

#[test]
fn a_node_that_cannot_bind_its_port_never_says_ready() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (socket, path) = manager(dir.path());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let config = config(port);
    let mut node = ServeProcess::spawn(
        &vigil_bin(),
        &dir.path().join("node"),
        &config.id,
        &config.render(),
        "info",
        &[("NOTIFY_SOCKET".to_string(), path)],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let exited = node.wait_for(
        "its exit (its RTSP port is taken)",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || None::<()>,
    );
    match exited {
        Err(vigil_testkit::serve::HarnessError::Exited { status, log, .. }) => {
            assert!(!status.success(), "{status}");
            assert!(log.contains("cannot listen for RTSP"), "{log}");
        }
        other => panic!("the node did not fail on a taken port: {other:?}"),
    }
    socket.set_nonblocking(true).expect("non-blocking");
    let mut buf = [0u8; 4096];
    let mut got = Vec::new();
    while let Ok(n) = socket.recv(&mut buf) {
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(
        got.iter().all(|m| !m.lines().any(|l| l == "READY=1")),
        "READY=1 from a node that could not listen: {got:?}"
    );
}
