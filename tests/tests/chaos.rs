//! The chaos run's short form in the suite (issue 25 §3): `vigil lab chaos`'s nemesis,
//! viewers and checker (`vigil_lab::chaos`) for a minute and a half on a bed of five node
//! hosts — a `kill -9` and restart, a SIGSTOP'd node, a partition and a full share, with an
//! operator action after each — and the run fails when the checker finds an invariant
//! broken, naming the seed that repeats it. The ten-minute run and its table are in
//! docs/BENCHMARKS.md ("On real hosts").
//!
//! Needs root (network namespaces, a tmpfs share). Under `CI=true` a machine that cannot
//! make them fails the test with the reason; elsewhere the test says why and skips.

use std::time::Duration;
use vigil_lab::chaos::{checker, run, schedule};
use vigil_testkit::hosts::{Bed, BedError};

/// The seed whose 105 s plan holds each of the four faults (checked below, before the run).
const SEED: u64 = 5;

#[test]
fn a_short_chaos_run_breaks_no_invariant() {
    let _serial = vigil_tests::serial();
    match Bed::new() {
        Ok(_) => {}
        Err(e @ BedError::Unavailable(_)) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipped: {e}");
            return;
        }
        Err(e) => panic!("no bed of hosts: {e}"),
    }
    let duration = Duration::from_secs(105);
    let params = schedule::Params {
        fault_len: (Duration::from_secs(6), Duration::from_secs(8)),
        settle: Duration::from_secs(12),
        kinds: vec![
            schedule::Kind::Kill,
            schedule::Kind::Pause,
            schedule::Kind::Partition,
            schedule::Kind::DiskFull,
        ],
        ..schedule::Params::for_run(duration)
    };
    // The plan is a pure function of the seed: make sure this one exercises every fault.
    let plan = schedule::plan(&params, &mut rand_seeded(SEED));
    let faults: Vec<String> = plan
        .iter()
        .filter_map(|t| match &t.step {
            schedule::Step::FaultStart { fault, .. } => Some(fault.to_string()),
            _ => None,
        })
        .collect();
    for kind in ["kill -9", "SIGSTOP", "partition", "storage full"] {
        assert!(
            faults.iter().any(|f| f.contains(kind)),
            "seed {SEED}'s plan has no {kind} fault: {faults:?}"
        );
    }
    let opts = run::Opts {
        duration,
        seed: SEED,
        live_viewers: 24,
        playback_viewers: 8,
        params,
        limits: checker::Limits::default(),
        bin: vigil_tests::vigil_bin(),
    };
    let outcome = run::run(&opts).unwrap_or_else(|e| panic!("the chaos run: {e:#}"));
    let report = vigil_lab::chaos::report(&opts, &outcome);
    eprintln!("{report}");
    // Every fault has its row, and the viewers were there to see them.
    assert_eq!(
        outcome
            .verdict
            .rows
            .iter()
            .filter(|r| faults.contains(&r.label))
            .count(),
        faults.len(),
        "{report}"
    );
    assert_eq!(outcome.viewers, 32, "{report}");
    assert!(outcome.spans >= 32, "{report}");
    assert!(
        outcome.verdict.violations.is_empty(),
        "invariants broken; repeat with `vigil lab chaos --seed {SEED}` and these parameters:\n{report}"
    );
}

fn rand_seeded(seed: u64) -> rand::rngs::StdRng {
    rand::SeedableRng::seed_from_u64(seed)
}
