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
    let eta: f64 = rng.gen();
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

/// §B.5: only idle (awake) cameras move; of the M most recently finished, the one with the
/// highest DA. Ties: more recent finish, then camera id (determinism).
pub fn camera_to_move(cams: &[CameraUsage], now_ms: i64, m: usize) -> Option<&CameraUsage> {
    let mut idle: Vec<&CameraUsage> = cams.iter().filter(|c| c.idle && !c.asleep).collect();
    idle.sort_by(|a, b| {
        b.last_finished_ms
            .cmp(&a.last_finished_ms)
            .then_with(|| a.camera.cmp(&b.camera))
    });
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
