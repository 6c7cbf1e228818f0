//! §B data-gateway balancing: gateway load GL (eq. 1–4), Brown forecasting and overload
//! judgement (B.3), roulette-wheel destination (B.4, eq. 6–7), which camera to move
//! (B.5, eq. 8) and device sleep (B.1). Loads here are on a 0–1 scale.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::config::GatewayConfig;
use crate::view::{CameraId, NodeId};

/// §B.2 eq. 1: R_cpu = (T_usr + T_sys)/(T_usr + T_sys + T_idle), jiffies over the period.
pub fn r_cpu(usr: u64, sys: u64, idle: u64) -> f64 {
    let busy = usr.saturating_add(sys);
    let total = busy.saturating_add(idle);
    if total == 0 {
        0.0
    } else {
        busy as f64 / total as f64
    }
}

/// §B.2 eq. 2: R_membw = Σ X_l / (f_m · M_bs / 8). X_l in bytes/s (bitrate × copies / 8
/// for relay without transcoding), f_m the memory transfer rate (transfers/s), M_bs the bus
/// width in bits, so f_m·M_bs/8 is the memory bandwidth in bytes/s.
pub fn r_membw(x_bytes_per_s: &[f64], f_m: f64, m_bs_bits: f64) -> f64 {
    let bw = f_m * m_bs_bits / 8.0;
    if bw <= 0.0 {
        return 0.0;
    }
    x_bytes_per_s.iter().sum::<f64>() / bw
}

/// §B.2 eq. 3: GA = NA/NT, the share of the node's cameras that are awake.
pub fn awake_share(awake: u32, total: u32) -> f64 {
    if total == 0 {
        0.0
    } else {
        f64::from(awake) / f64::from(total)
    }
}

/// §B.2 eq. 4: GL = λ1·R_cpu + λ2·R_membw + λ3·GA.
pub fn gateway_load(r_cpu: f64, r_membw: f64, ga: f64, cfg: &GatewayConfig) -> f64 {
    let l = cfg.lambda;
    l[0] * r_cpu + l[1] * r_membw + l[2] * ga
}

/// §B.3 zones. The paper's idle zone (≈ Load_min) has no published figure and no decision
/// depends on it, so it is folded into `Normal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Zone {
    Normal,
    /// GL > Load_alm: forecast every period.
    Alarm,
    /// GL > Load_ove.
    Overload,
}

pub fn zone(gl: f64, cfg: &GatewayConfig) -> Zone {
    if gl > cfg.load_ove {
        Zone::Overload
    } else if gl > cfg.load_alm {
        Zone::Alarm
    } else {
        Zone::Normal
    }
}

/// §B.3 Brown's double exponential smoothing. Initialisation (a choice; the paper gives
/// none): S'_0 = S''_0 = the first sample, the usual start that makes a flat series
/// forecast itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Brown {
    pub alpha: f64,
    pub s1: f64,
    pub s2: f64,
    pub samples: u64,
}

impl Brown {
    pub fn new(alpha: f64) -> Self {
        Self {
            alpha,
            s1: 0.0,
            s2: 0.0,
            samples: 0,
        }
    }

    /// S'_t = α·x + (1−α)·S'_{t−1};  S''_t = α·S'_t + (1−α)·S''_{t−1}.
    pub fn update(&mut self, x: f64) {
        if self.samples == 0 {
            self.s1 = x;
            self.s2 = x;
        } else {
            let a = self.alpha;
            self.s1 = a * x + (1.0 - a) * self.s1;
            self.s2 = a * self.s1 + (1.0 - a) * self.s2;
        }
        self.samples += 1;
    }

    /// F_{t+m} = a_t + b_t·m with a_t = 2S' − S'', b_t = α/(1−α)·(S' − S'').
    pub fn forecast(&self, m: u32) -> f64 {
        let a = 2.0 * self.s1 - self.s2;
        let b = self.alpha / (1.0 - self.alpha) * (self.s1 - self.s2);
        a + b * f64::from(m)
    }
}

/// §B.3 judgement for one sampling period: a node outside the alarm zone is not judged;
/// inside it, overloaded when at least P of the N forecasts exceed Load_ove.
pub fn is_overloaded(current_gl: f64, brown: &Brown, cfg: &GatewayConfig) -> bool {
    if current_gl <= cfg.load_alm || brown.samples == 0 {
        return false;
    }
    let over = (1..=cfg.forecasts)
        .filter(|&m| brown.forecast(m) > cfg.load_ove)
        .count();
    over >= cfg.forecasts_over as usize
}

/// A destination candidate for §B.4.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayLoad {
    pub node: NodeId,
    pub gl: f64,
    pub overloaded: bool,
}

/// §B.4 eq. 6–7: RL = 1 − GL, PL = RL/ΣRL, SPL cumulative; draw η and take the first k with
/// η ≤ SPL_k. Overloaded nodes are excluded; randomness is deliberate (always taking the
/// lightest makes migrated cameras oscillate). `None` when no node has spare capacity.
pub fn roulette<'a>(nodes: &'a [GatewayLoad], rng: &mut impl Rng) -> Option<&'a GatewayLoad> {
    roulette_at(nodes, rng.gen())
}

/// [`roulette`] with the draw η given, so that a recorded decision can be redone by hand.
pub fn roulette_at(nodes: &[GatewayLoad], eta: f64) -> Option<&GatewayLoad> {
    let rl = |n: &GatewayLoad| {
        if n.overloaded {
            0.0
        } else {
            (1.0 - n.gl).max(0.0)
        }
    };
    let total: f64 = nodes.iter().map(rl).sum();
    if total <= 0.0 {
        return None;
    }
    let mut spl = 0.0;
    let mut last = None;
    for n in nodes.iter().filter(|n| rl(n) > 0.0) {
        spl += rl(n) / total;
        last = Some(n);
        if eta <= spl {
            return Some(n);
        }
    }
    // Rounding may leave SPL_m a hair under 1.
    last
}

/// What a node knows of one bound camera's use (§B.1, §B.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CameraUsage {
    pub camera: CameraId,
    /// No live viewer, relay or recording demand right now.
    pub idle: bool,
    pub asleep: bool,
    /// End of its last use (ms); `None` if never used since it came online.
    pub last_finished_ms: Option<i64>,
    /// When it came online (ms).
    pub online_since_ms: i64,
    /// Σ_j Tsk_{i,j}: total duration of its uses (ms).
    pub busy_ms: i64,
}

/// §B.5 eq. 8: DA = Σ Tsk / Tol, Tol = time online.
pub fn activity(c: &CameraUsage, now_ms: i64) -> f64 {
    let tol = now_ms - c.online_since_ms;
    if tol <= 0 {
        0.0
    } else {
        c.busy_ms as f64 / tol as f64
    }
}

/// §B.5's "last call finished first" order: the most recently finished first (never used
/// last), then camera id (determinism). A node sends the scheduler its first M in it.
pub fn last_finished_first(a: &CameraUsage, b: &CameraUsage) -> std::cmp::Ordering {
    b.last_finished_ms
        .cmp(&a.last_finished_ms)
        .then_with(|| a.camera.cmp(&b.camera))
}

/// §B.5: only idle (awake) cameras move; of the M most recently finished, the one with the
/// highest DA. Ties: more recent finish, then camera id (determinism).
pub fn camera_to_move(cams: &[CameraUsage], now_ms: i64, m: usize) -> Option<&CameraUsage> {
    let mut idle: Vec<&CameraUsage> = cams.iter().filter(|c| c.idle && !c.asleep).collect();
    idle.sort_by(|a, b| last_finished_first(a, b));
    idle.truncate(m);
    idle.into_iter()
        .enumerate()
        .max_by(|(ia, a), (ib, b)| {
            activity(a, now_ms)
                .total_cmp(&activity(b, now_ms))
                .then(ib.cmp(ia))
        })
        .map(|(_, c)| c)
}

/// §B.1: the cameras to put to sleep now. TS_i = now − T_last_i (or time online if never
/// used); an idle awake camera with TS_i > TS_max is a candidate; the longest idle go first,
/// as long as sleeping/total stays ≤ PS_max.
pub fn cameras_to_sleep(cams: &[CameraUsage], now_ms: i64, cfg: &GatewayConfig) -> Vec<CameraId> {
    let total = cams.len();
    let asleep = cams.iter().filter(|c| c.asleep).count();
    let cap = (cfg.ps_max * total as f64 + 1e-9).floor() as usize;
    let room = cap.saturating_sub(asleep);
    let ts = |c: &CameraUsage| now_ms - c.last_finished_ms.unwrap_or(c.online_since_ms);
    let mut cand: Vec<&CameraUsage> = cams
        .iter()
        .filter(|c| c.idle && !c.asleep && ts(c) > cfg.ts_max_ms)
        .collect();
    cand.sort_by(|a, b| ts(b).cmp(&ts(a)).then_with(|| a.camera.cmp(&b.camera)));
    cand.into_iter()
        .take(room)
        .map(|c| c.camera.clone())
        .collect()
}

/// A live node as the camera binder sees it (§B.2 inputs from its report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayNode {
    pub node: NodeId,
    /// R_cpu of the last sampling period (0–1).
    pub r_cpu: f64,
    /// X_l of the streams it serves (bytes/s).
    pub stream_bytes_per_s: Vec<f64>,
}

/// One camera binding made by [`bind_cameras`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Binding {
    pub camera: CameraId,
    pub node: NodeId,
    /// Bound before, to a node that is no longer live.
    pub previous: Option<NodeId>,
    pub reason: String,
}

/// Binds every camera of `cameras` to a live node: a camera whose bound node is among `live`
/// keeps it; the others (unbound, or bound to a node that died) are placed by the §B.4
/// roulette over the §B.2 gateway loads GL_k (R_cpu and the streams' X_l from the node's
/// report; GA_k see below), updated after every binding of the round so a burst spreads. Overloaded (GL > Load_ove) nodes are excluded.
/// Returns the new binding map and the changes made; with no live node with spare capacity
/// a camera stays unbound (left out of the map).
pub fn bind_cameras(
    cameras: &[CameraId],
    current: &std::collections::BTreeMap<CameraId, NodeId>,
    live: &[GatewayNode],
    cfg: &GatewayConfig,
    rng: &mut impl Rng,
) -> (std::collections::BTreeMap<CameraId, NodeId>, Vec<Binding>) {
    let mut map = std::collections::BTreeMap::new();
    let mut bound: Vec<u32> = vec![0; live.len()];
    for cam in cameras {
        if let Some(n) = current.get(cam) {
            if let Some(i) = live.iter().position(|l| &l.node == n) {
                map.insert(cam.clone(), n.clone());
                bound[i] += 1;
            }
        }
    }
    let total_bound = |b: &[u32]| b.iter().sum::<u32>();
    let mut changes = Vec::new();
    for cam in cameras {
        if map.contains_key(cam) {
            continue;
        }
        let nt = total_bound(&bound).max(1);
        let loads: Vec<GatewayLoad> = live
            .iter()
            .zip(&bound)
            .map(|(l, &b)| {
                // GA_k: eq. 3 (NA_k/NT_k) is 1 for every node whose bound cameras are all
                // awake, which the binder cannot tell apart (it does not see sleep), so the
                // node's share of the cluster's bound cameras stands in for it (a choice).
                let ga = awake_share(b, nt);
                let membw = r_membw(
                    &l.stream_bytes_per_s,
                    cfg.mem_transfer_rate,
                    cfg.mem_bus_bits,
                );
                let gl = gateway_load(l.r_cpu, membw, ga, cfg);
                GatewayLoad {
                    node: l.node.clone(),
                    gl,
                    overloaded: zone(gl, cfg) == Zone::Overload,
                }
            })
            .collect();
        let Some(dest) = roulette(&loads, rng) else {
            continue;
        };
        let i = live.iter().position(|l| l.node == dest.node).unwrap_or(0);
        bound[i] += 1;
        map.insert(cam.clone(), dest.node.clone());
        let previous = current.get(cam).cloned();
        changes.push(Binding {
            camera: cam.clone(),
            node: dest.node.clone(),
            reason: match &previous {
                Some(p) => format!("{p} is not live: re-bound by roulette, GL {:.3}", dest.gl),
                None => format!("bound by roulette, GL {:.3}", dest.gl),
            },
            previous,
        });
    }
    (map, changes)
}

#[cfg(test)]
mod bind_tests {
    use super::*;
    use rand::SeedableRng;

    fn n(id: &str, cpu: f64) -> GatewayNode {
        GatewayNode {
            node: id.into(),
            r_cpu: cpu,
            stream_bytes_per_s: vec![],
        }
    }

    #[test]
    fn keeps_live_bindings_and_rebinds_dead_ones() {
        let cfg = GatewayConfig::default();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let cams: Vec<CameraId> = vec!["a".into(), "b".into(), "c".into()];
        let live = vec![n("n1", 0.1), n("n2", 0.1)];
        let (m, ch) = bind_cameras(&cams, &Default::default(), &live, &cfg, &mut rng);
        assert_eq!(m.len(), 3);
        assert_eq!(ch.len(), 3);
        // n2 dies: its cameras move to n1, n1's stay put.
        let (m2, ch2) = bind_cameras(&cams, &m, &live[..1], &cfg, &mut rng);
        assert!(m2.values().all(|v| v == "n1"));
        assert_eq!(ch2.len(), m.values().filter(|v| *v == "n2").count());
        assert!(ch2.iter().all(|b| b.previous.as_deref() == Some("n2")));
        // Nothing live: nothing bound.
        let (m3, _) = bind_cameras(&cams, &m, &[], &cfg, &mut rng);
        assert!(m3.is_empty());
    }

    #[test]
    fn overloaded_nodes_get_nothing_and_seed_reproduces() {
        let cfg = GatewayConfig::default();
        let cams: Vec<CameraId> = (0..20).map(|i| format!("c{i}")).collect();
        // busy: R_cpu 1 and the whole memory bandwidth in streams → GL 0.9 > Load_ove.
        let mut busy = n("busy", 1.0);
        busy.stream_bytes_per_s = vec![2.4e9 * 64.0 / 8.0];
        let live = vec![busy, n("idle", 0.0), n("mid", 0.3)];
        let run = |seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            bind_cameras(&cams, &Default::default(), &live, &cfg, &mut rng).0
        };
        let m = run(3);
        assert!(m.values().all(|v| v != "busy"));
        assert_eq!(m, run(3));
    }
}
