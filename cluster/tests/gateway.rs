//! §B gateway load, Brown forecast, roulette, camera selection and sleep.

use rand::rngs::StdRng;
use rand::SeedableRng;
use vigil_cluster::gateway::*;
use vigil_cluster::GatewayConfig;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn gateway_load_by_hand() {
    // R_cpu = (30 + 10)/(30 + 10 + 60) = 0.4.
    // 100 streams of 2 Mb/s relayed in 3 copies: X = 6e6/8 = 750 000 B/s each, 7.5e7 total;
    // memory 1 600 MT/s × 64 bit / 8 = 1.28e10 B/s → R_membw = 0.005859375.
    // GA = 60/100 = 0.6. GL = 0.5·0.4 + 0.4·0.005859375 + 0.1·0.6 = 0.26234375.
    let c = GatewayConfig::default();
    let rc = r_cpu(30, 10, 60);
    assert!(close(rc, 0.4));
    let rm = r_membw(&vec![750_000.0; 100], 1.6e9, 64.0);
    assert!(close(rm, 0.005859375));
    let ga = awake_share(60, 100);
    assert!(close(ga, 0.6));
    assert!(close(gateway_load(rc, rm, ga, &c), 0.26234375));
    assert_eq!(r_cpu(0, 0, 0), 0.0);
    assert_eq!(awake_share(0, 0), 0.0);
    assert_eq!(zone(0.5, &c), Zone::Normal);
    assert_eq!(zone(0.55, &c), Zone::Alarm);
    assert_eq!(zone(0.62, &c), Zone::Overload);
}

#[test]
fn brown_forecast_by_hand() {
    // α = 0.8, samples 0.50, 0.55, 0.60; S'_0 = S''_0 = 0.50.
    // x = 0.55: S' = 0.44 + 0.1 = 0.54;    S'' = 0.432 + 0.1 = 0.532.
    // x = 0.60: S' = 0.48 + 0.108 = 0.588; S'' = 0.4704 + 0.1064 = 0.5768.
    // a = 2·0.588 − 0.5768 = 0.5992; b = 0.8/0.2·(0.588 − 0.5768) = 0.0448.
    // F1 = 0.644, F2 = 0.6888, F3 = 0.7336: all three > 0.61 ≥ P = 2 → overloaded.
    let c = GatewayConfig::default();
    let mut b = Brown::new(c.alpha);
    for x in [0.50, 0.55, 0.60] {
        b.update(x);
    }
    assert!(close(b.s1, 0.588) && close(b.s2, 0.5768));
    assert!(close(b.forecast(1), 0.644));
    assert!(close(b.forecast(2), 0.6888));
    assert!(close(b.forecast(3), 0.7336));
    assert!(is_overloaded(0.60, &b, &c));
    // Outside the alarm zone the node is not judged, whatever the trend.
    assert!(!is_overloaded(0.54, &b, &c));
    // A flat 0.58 (alarm zone) forecasts 0.58 < 0.61: not overloaded.
    let mut flat = Brown::new(c.alpha);
    for _ in 0..5 {
        flat.update(0.58);
    }
    assert!(close(flat.forecast(3), 0.58));
    assert!(!is_overloaded(0.58, &flat, &c));
    // Falling from 0.66 to 0.58: S' = 0.464 + 0.132 = 0.596, S'' = 0.4768 + 0.132 = 0.6088
    // → a = 1.192 − 0.6088 = 0.5832, b = 4·(−0.0128) = −0.0512; F1 = 0.532 < 0.61 → not
    // overloaded although GL is in the alarm zone.
    let mut down = Brown::new(c.alpha);
    down.update(0.66);
    down.update(0.58);
    assert!(close(down.forecast(1), 0.532));
    assert!(!is_overloaded(0.58, &down, &c));
}

#[test]
fn roulette_frequencies() {
    // GL 0.2, 0.5, 0.8 and an overloaded 0.1: RL = 0.8, 0.5, 0.2 (overloaded excluded),
    // Σ = 1.5 → PL = 0.5333, 0.3333, 0.1333.
    let nodes = vec![
        GatewayLoad {
            node: "a".into(),
            gl: 0.2,
            overloaded: false,
        },
        GatewayLoad {
            node: "b".into(),
            gl: 0.5,
            overloaded: false,
        },
        GatewayLoad {
            node: "c".into(),
            gl: 0.8,
            overloaded: false,
        },
        GatewayLoad {
            node: "x".into(),
            gl: 0.1,
            overloaded: true,
        },
    ];
    let mut rng = StdRng::seed_from_u64(7);
    let n = 30_000;
    let mut counts = std::collections::HashMap::new();
    for _ in 0..n {
        *counts
            .entry(roulette(&nodes, &mut rng).unwrap().node.clone())
            .or_insert(0) += 1;
    }
    let f = |k: &str| *counts.get(k).unwrap_or(&0) as f64 / n as f64;
    assert!((f("a") - 0.8 / 1.5).abs() < 0.015, "{counts:?}");
    assert!((f("b") - 0.5 / 1.5).abs() < 0.015, "{counts:?}");
    assert!((f("c") - 0.2 / 1.5).abs() < 0.015, "{counts:?}");
    assert_eq!(f("x"), 0.0);
    // Same seed, same sequence.
    let draw = |seed| {
        let mut r = StdRng::seed_from_u64(seed);
        (0..50)
            .map(|_| roulette(&nodes, &mut r).unwrap().node.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(3), draw(3));
    // Nothing with spare capacity → None.
    let full = vec![GatewayLoad {
        node: "a".into(),
        gl: 1.0,
        overloaded: false,
    }];
    assert!(roulette(&full, &mut rng).is_none());
}

fn cam(id: &str, idle: bool, last: Option<i64>, busy_ms: i64) -> CameraUsage {
    CameraUsage {
        camera: id.into(),
        idle,
        asleep: false,
        last_finished_ms: last,
        online_since_ms: 0,
        busy_ms,
    }
}

#[test]
fn camera_to_move_takes_the_most_active_of_the_recent_idle() {
    // now = 100 000 ms online for all: DA = busy/100 000.
    // Idle by recency: c6 (99k, DA .05), c5 (98k, .30), c4 (97k, .10), c3 (96k, .20),
    // c2 (95k, .25) are the M = 5 most recent; c1 (90k, DA .90) is not among them;
    // busy c0 (DA .95) never moves. Highest DA of the five: c5.
    let cams = vec![
        cam("c0", false, Some(99_500), 95_000),
        cam("c1", true, Some(90_000), 90_000),
        cam("c2", true, Some(95_000), 25_000),
        cam("c3", true, Some(96_000), 20_000),
        cam("c4", true, Some(97_000), 10_000),
        cam("c5", true, Some(98_000), 30_000),
        cam("c6", true, Some(99_000), 5_000),
    ];
    let now = 100_000;
    assert!(close(activity(&cams[5], now), 0.3));
    assert_eq!(camera_to_move(&cams, now, 5).unwrap().camera, "c5");
    // M = 1: only the latest finished (c6).
    assert_eq!(camera_to_move(&cams, now, 1).unwrap().camera, "c6");
    assert!(camera_to_move(&cams[..1], now, 5).is_none());
}

#[test]
fn sleep_respects_ts_max_and_ps_max() {
    // 10 cameras, one already asleep; PS_max 0.4 → at most 4 asleep → room for 3.
    // TS_max 1 000 s; now = 5 000 s. Idle for 4 000, 3 500, 3 000, 2 000 s (candidates,
    // longest first), 500 s (too recent), and one busy camera.
    let s = 1_000;
    let mut cams = vec![
        cam("a", true, Some(1_000 * s), 0),
        cam("b", true, Some(1_500 * s), 0),
        cam("c", true, Some(2_000 * s), 0),
        cam("d", true, Some(3_000 * s), 0),
        cam("e", true, Some(4_500 * s), 0),
        cam("f", false, Some(0), 0),
        cam("g", true, Some(4_900 * s), 0),
        cam("h", true, Some(4_900 * s), 0),
        cam("i", true, Some(4_900 * s), 0),
    ];
    let mut z = cam("z", true, Some(0), 0);
    z.asleep = true;
    cams.push(z);
    let c = GatewayConfig::default();
    assert_eq!(cameras_to_sleep(&cams, 5_000 * s, &c), ["a", "b", "c"]);
    assert_eq!(GatewayConfig::ts_max_from(2.0, 500 * s), 1_000 * s);
}
