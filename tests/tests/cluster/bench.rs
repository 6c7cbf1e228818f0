//! `bench_cluster`: the cluster measured (ignored by default).

use crate::support::*;

/// Benchmark (run by hand): `cargo test -p vigil-tests --test cluster -- --ignored --nocapture`.
/// Re-election time after kill -9 over 10 trials, gossip bytes per node per second, and the
/// DESCRIBE-with-redirect overhead against a direct DESCRIBE.
#[test]
#[ignore]
fn bench_cluster() {
    let _serial = serial();
    let mut times = Vec::new();
    let mut members = start_cluster(3, |i| {
        if i == 0 {
            DEMO_CAMERA.to_string()
        } else {
            String::new()
        }
    });
    {
        // DESCRIBE overhead: direct to the holder (new connection each, as a client that
        // follows a redirect opens one) against node 2 → 302 → node 1.
        let refs: Vec<&Node> = members.iter().map(|m| &m.node).collect();
        wait_converged(&refs, Duration::from_secs(20));
        let (n1, n2) = (refs[0], refs[1]);
        n1.wait_live("live/demo");
        poll_until(Duration::from_secs(10), "node 2 to see live/demo", || {
            nodes_view(n2)?
                .to_string()
                .contains("\"demo\"")
                .then_some(())
        });
        let median = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let mut direct = Vec::new();
        let mut redirected = Vec::new();
        for _ in 0..50 {
            let t = Instant::now();
            let mut c = RtspConn::connect(n1.rtsp);
            assert_eq!(
                c.request("DESCRIBE", &n1.url("live/demo"), &[], None)
                    .status
                    .0,
                200
            );
            direct.push(t.elapsed());
            let t = Instant::now();
            let mut c = RtspConn::connect(n2.rtsp);
            let r = c.request("DESCRIBE", &n2.url("live/demo"), &[], None);
            assert_eq!(r.status.0, 302);
            let loc = r.headers.get("Location").unwrap().to_string();
            let mut c = RtspConn::connect(n1.rtsp);
            assert_eq!(c.request("DESCRIBE", &loc, &[], None).status.0, 200);
            redirected.push(t.elapsed());
        }
        eprintln!(
            "DESCRIBE median: direct {:?}, with redirect {:?}",
            median(direct),
            median(redirected)
        );
    }
    for trial in 0..10 {
        let refs: Vec<&Node> = members.iter().map(|m| &m.node).collect();
        wait_converged(&refs, Duration::from_secs(20));
        // Wait until the restarted node 1 (priority 10) is past its grace and in charge
        // again, so every trial measures failure detection, not a hand-over in progress.
        let want = node_id(refs[0]);
        let sched = poll_until(Duration::from_secs(15), "node 1 in charge", || {
            let s = wait_agreed_scheduler(&refs, Duration::from_secs(10));
            (s == want).then_some(s)
        });
        let k = members
            .iter()
            .position(|m| node_id(&m.node) == sched)
            .unwrap();
        if trial == 0 {
            // Gossip volume over 10 s of a steady 3-node cluster.
            let sent = |n: &Node| {
                nodes_view(n).unwrap()["gossip"]["bytes_sent"]
                    .as_u64()
                    .unwrap()
            };
            let before: Vec<u64> = refs.iter().map(|n| sent(n)).collect();
            let t = Instant::now();
            std::thread::sleep(Duration::from_secs(10));
            let secs = t.elapsed().as_secs_f64();
            for (n, b) in refs.iter().zip(before) {
                eprintln!(
                    "gossip: {} sends {:.0} B/s",
                    node_id(n),
                    (sent(n) - b) as f64 / secs
                );
            }
        }
        let t0 = Instant::now();
        members[k].node.kill();
        let others: Vec<usize> = (0..members.len()).filter(|&i| i != k).collect();
        let e = poll_until(Duration::from_secs(10), "re-election", || {
            let s: Vec<Option<String>> = others
                .iter()
                .map(|&i| scheduler_of(&members[i].node))
                .collect();
            (s.iter()
                .all(|x| x.is_some() && x != &Some(sched.clone()) && *x == s[0]))
            .then(|| t0.elapsed())
        });
        eprintln!("trial {trial}: new scheduler in {e:?}");
        times.push(e);
        members[k].node.restart();
    }
    times.sort();
    eprintln!(
        "re-election after kill -9: p50 {:?}, max {:?}",
        times[times.len() / 2],
        times[times.len() - 1]
    );
}
