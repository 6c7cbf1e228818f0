//! §B.2–§B.5 put together, as the elected scheduler runs them every sampling period T_s:
//! each node's gateway load GL (eq. 1–4) feeds its Brown forecast; a node in the alarm
//! zone whose forecasts cross Load_ove (or any node already above it) gives up one idle
//! camera, chosen by "last call finished first" and activity (§B.5), to a destination drawn
//! by roulette on inverse load (§B.4). One camera per overloaded node per period: the next
//! period's GL shows what the move changed before another is drawn.
//!
//! Pure: the caller passes the samples, keeps the forecasts between calls and passes the
//! random draws, so the live scheduler, the simulator and the tests run the same code and
//! a recorded decision can be checked by hand (its η and loads are in it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::GatewayConfig;
use crate::gateway::{
    activity, awake_share, camera_to_move, gateway_load, is_overloaded, r_membw, roulette_at, zone,
    Brown, CameraUsage, GatewayLoad, Zone,
};
use crate::view::{CameraId, NodeId};

/// What the scheduler knows of one node at a sampling instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewaySample {
    pub node: NodeId,
    /// §B.2 eq. 1, 0–1.
    pub r_cpu: f64,
    /// Bytes/s of every stream the node sends or relays (one per copy, eq. 2's X_l).
    pub stream_bytes_per_s: Vec<f64>,
    /// Pull cameras bound to the node and awake (NA of eq. 3).
    pub awake: u32,
    /// The node's movable cameras as it reported them: awake, with no viewer now.
    pub candidates: Vec<CameraUsage>,
    /// It can take a camera (alive, not draining, reachable over the cluster RPC).
    pub available: bool,
    /// A move off this node is already under way: no second one until it ends.
    pub moving: bool,
    /// Cameras it cannot receive (it relays them as an edge).
    #[serde(default)]
    pub excluded: Vec<CameraId>,
}

/// One node's judgement in one period, with every input a reader needs to redo it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CameraMoveDecision {
    pub node: NodeId,
    pub gl: f64,
    pub zone: Zone,
    /// F_{t+1..N}.
    pub forecasts: Vec<f64>,
    /// The camera to move and its activity DA (eq. 8), if the node was judged overloaded
    /// and had one.
    pub camera: Option<CameraId>,
    pub activity: Option<f64>,
    /// The destinations offered to the roulette (GL, overloaded) and the draw η.
    pub loads: Vec<GatewayLoad>,
    pub eta: Option<f64>,
    pub to: Option<NodeId>,
    pub reason: String,
}

/// §B.2 eq. 1–4 for one node; GA is the node's share of the cluster's awake cameras (NT
/// is the cluster's awake pull cameras, so a node holding more of them weighs more).
pub fn sample_gl(s: &GatewaySample, cluster_awake: u32, cfg: &GatewayConfig) -> f64 {
    let membw = r_membw(
        &s.stream_bytes_per_s,
        cfg.mem_transfer_rate,
        cfg.mem_bus_bits,
    );
    gateway_load(s.r_cpu, membw, awake_share(s.awake, cluster_awake), cfg)
}

/// One sampling period over every node: updates `forecasts` (nodes gone are dropped) and
/// returns a decision for every node judged overloaded (with a camera and a destination,
/// or the reason there is none). `draw` gives the roulette's η ∈ [0, 1).
pub fn plan_camera_moves(
    samples: &[GatewaySample],
    forecasts: &mut BTreeMap<NodeId, Brown>,
    now_ms: i64,
    cfg: &GatewayConfig,
    mut draw: impl FnMut() -> f64,
) -> Vec<CameraMoveDecision> {
    forecasts.retain(|n, _| samples.iter().any(|s| &s.node == n));
    let cluster_awake: u32 = samples.iter().map(|s| s.awake).sum();
    let gls: Vec<f64> = samples
        .iter()
        .map(|s| sample_gl(s, cluster_awake, cfg))
        .collect();
    let mut out = Vec::new();
    for (s, &gl) in samples.iter().zip(&gls) {
        let brown = forecasts
            .entry(s.node.clone())
            .or_insert_with(|| Brown::new(cfg.alpha));
        brown.update(gl);
        let z = zone(gl, cfg);
        let over = z == Zone::Overload || is_overloaded(gl, brown, cfg);
        if !over {
            continue;
        }
        let mut d = CameraMoveDecision {
            node: s.node.clone(),
            gl,
            zone: z,
            forecasts: (1..=cfg.forecasts).map(|m| brown.forecast(m)).collect(),
            camera: None,
            activity: None,
            loads: Vec::new(),
            eta: None,
            to: None,
            reason: String::new(),
        };
        if s.moving {
            d.reason = "overloaded; a camera is already moving off it".into();
            out.push(d);
            continue;
        }
        let Some(cam) = camera_to_move(&s.candidates, now_ms, cfg.recent_m) else {
            d.reason =
                "overloaded, but no idle awake camera to move (§B.5 moves idle ones only)".into();
            out.push(d);
            continue;
        };
        d.camera = Some(cam.camera.clone());
        d.activity = Some(activity(cam, now_ms));
        d.loads = samples
            .iter()
            .zip(&gls)
            .filter(|(t, _)| t.node != s.node && t.available)
            .filter(|(t, _)| !t.excluded.contains(&cam.camera))
            .map(|(t, &g)| GatewayLoad {
                node: t.node.clone(),
                gl: g,
                overloaded: zone(g, cfg) == Zone::Overload,
            })
            .collect();
        let eta = draw();
        d.eta = Some(eta);
        match roulette_at(&d.loads, eta) {
            Some(t) => {
                d.to = Some(t.node.clone());
                d.reason = format!(
                    "GL {gl:.3} ({}; forecasts {}) over Load_ove {:.2}: {} (DA {:.3}, one of \
                     the {} most recently finished idle cameras) to {} by roulette (GL {:.3}, \
                     η {eta:.3})",
                    match z {
                        Zone::Overload => "overload zone",
                        _ => "alarm zone",
                    },
                    d.forecasts
                        .iter()
                        .map(|f| format!("{f:.3}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    cfg.load_ove,
                    cam.camera,
                    activity(cam, now_ms),
                    cfg.recent_m,
                    t.node,
                    t.gl,
                );
            }
            None => {
                d.reason = "overloaded, but every other node is overloaded or unavailable".into();
            }
        }
        out.push(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> GatewayConfig {
        GatewayConfig {
            // GL = R_membw alone, with 1 MB/s of memory bandwidth: easy to compute by hand.
            lambda: [0.0, 1.0, 0.0],
            mem_transfer_rate: 1e6,
            mem_bus_bits: 8.0,
            ..Default::default()
        }
    }

    fn usage(camera: &str, last: i64, busy: i64) -> CameraUsage {
        CameraUsage {
            camera: camera.into(),
            idle: true,
            asleep: false,
            last_finished_ms: Some(last),
            online_since_ms: 0,
            busy_ms: busy,
        }
    }

    fn sample(node: &str, bytes: &[f64], cands: Vec<CameraUsage>) -> GatewaySample {
        GatewaySample {
            node: node.into(),
            r_cpu: 0.0,
            stream_bytes_per_s: bytes.to_vec(),
            awake: 1,
            candidates: cands,
            available: true,
            moving: false,
            excluded: vec![],
        }
    }

    #[test]
    fn a_node_above_load_ove_moves_the_most_active_recent_idle_camera_by_roulette() {
        let cfg = cfg();
        // a: 0.7 MB/s → GL 0.7 > 0.61 (overload zone at once); b 0.2, c 0.4.
        let samples = vec![
            sample(
                "a",
                &[400e3, 300e3],
                vec![
                    usage("x", 900, 100),
                    usage("y", 800, 500),
                    usage("z", 10, 990),
                ],
            ),
            sample("b", &[200e3], vec![]),
            sample("c", &[400e3], vec![]),
        ];
        let mut f = BTreeMap::new();
        let cfg5 = GatewayConfig { recent_m: 2, ..cfg };
        // RL: b 0.8, c 0.6 → PL 0.571, 0.429; η 0.6 > 0.571 → c.
        let d = plan_camera_moves(&samples, &mut f, 1000, &cfg5, || 0.6);
        assert_eq!(d.len(), 1);
        let d = &d[0];
        assert_eq!(d.node, "a");
        assert!((d.gl - 0.7).abs() < 1e-9);
        assert_eq!(d.zone, Zone::Overload);
        // M = 2: x (finished at 900) and y (800); DA x = 0.1, y = 0.5 → y. z is the most
        // active but finished longest ago: outside the M.
        assert_eq!(d.camera.as_deref(), Some("y"));
        assert!((d.activity.unwrap() - 0.5).abs() < 1e-9);
        assert_eq!(d.to.as_deref(), Some("c"));
        let d2 = plan_camera_moves(&samples, &mut BTreeMap::new(), 1000, &cfg5, || 0.5);
        assert_eq!(d2[0].to.as_deref(), Some("b"));
    }

    #[test]
    fn the_alarm_zone_moves_only_when_p_of_n_forecasts_cross_load_ove() {
        let cfg = cfg();
        let mut f = BTreeMap::new();
        let at = |kb: f64| {
            vec![
                sample("a", &[kb * 1e3], vec![usage("x", 5, 1)]),
                sample("b", &[0.0], vec![]),
            ]
        };
        // 0.50 (normal), then 0.58 (alarm): S' = 0.8·0.58 + 0.2·0.5 = 0.564,
        // S'' = 0.8·0.564 + 0.2·0.5 = 0.5512; a = 0.5768, b = 4·0.0128 = 0.0512:
        // F1 0.628, F2 0.6792, F3 0.7304: all three > 0.61 → overloaded.
        assert!(plan_camera_moves(&at(500.0), &mut f, 10, &cfg, || 0.0).is_empty());
        let d = plan_camera_moves(&at(580.0), &mut f, 10, &cfg, || 0.0);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].zone, Zone::Alarm);
        assert!(
            (d[0].forecasts[0] - 0.628).abs() < 1e-9,
            "{:?}",
            d[0].forecasts
        );
        assert_eq!(d[0].to.as_deref(), Some("b"));
        // A flat 0.58 from the start forecasts 0.58: in the alarm zone, not overloaded.
        let mut flat = BTreeMap::new();
        assert!(plan_camera_moves(&at(580.0), &mut flat, 10, &cfg, || 0.0).is_empty());
        assert!(plan_camera_moves(&at(580.0), &mut flat, 10, &cfg, || 0.0).is_empty());
    }

    #[test]
    fn no_move_without_an_idle_camera_a_destination_or_while_one_is_moving() {
        let cfg = cfg();
        let busy = CameraUsage {
            idle: false,
            ..usage("x", 1, 1)
        };
        let s = vec![
            sample("a", &[700e3], vec![busy]),
            sample("b", &[0.0], vec![]),
        ];
        let d = plan_camera_moves(&s, &mut BTreeMap::new(), 10, &cfg, || 0.0);
        assert!(
            d[0].camera.is_none() && d[0].reason.contains("no idle"),
            "{d:?}"
        );
        // The only other node is overloaded too, or relays the camera as an edge.
        let s = vec![
            sample("a", &[700e3], vec![usage("x", 1, 1)]),
            sample("b", &[650e3], vec![]),
        ];
        let d = plan_camera_moves(&s, &mut BTreeMap::new(), 10, &cfg, || 0.0);
        assert!(
            d[0].to.is_none() && d[0].reason.contains("every other node"),
            "{d:?}"
        );
        let mut s = vec![
            sample("a", &[700e3], vec![usage("x", 1, 1)]),
            sample("b", &[0.0], vec![]),
        ];
        s[1].excluded = vec!["x".into()];
        let d = plan_camera_moves(&s, &mut BTreeMap::new(), 10, &cfg, || 0.0);
        assert!(d[0].to.is_none(), "{d:?}");
        s[1].excluded.clear();
        s[0].moving = true;
        let d = plan_camera_moves(&s, &mut BTreeMap::new(), 10, &cfg, || 0.0);
        assert!(
            d[0].camera.is_none() && d[0].reason.contains("already moving"),
            "{d:?}"
        );
    }

    #[test]
    fn forecasts_of_nodes_gone_are_dropped() {
        let cfg = cfg();
        let mut f = BTreeMap::new();
        plan_camera_moves(
            &[sample("a", &[0.0], vec![]), sample("b", &[0.0], vec![])],
            &mut f,
            0,
            &cfg,
            || 0.0,
        );
        assert_eq!(f.len(), 2);
        plan_camera_moves(&[sample("b", &[0.0], vec![])], &mut f, 0, &cfg, || 0.0);
        assert_eq!(f.keys().collect::<Vec<_>>(), vec!["b"]);
    }
}
