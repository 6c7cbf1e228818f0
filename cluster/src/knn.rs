//! §C.2 load weight and §C.3 node classes by K nearest neighbours.

use serde::{Deserialize, Serialize};

use crate::view::Indicators;

/// §C.3 classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeClass {
    Low,
    Normal,
    High,
}

impl NodeClass {
    pub const ALL: [NodeClass; 3] = [NodeClass::Low, NodeClass::Normal, NodeClass::High];

    pub fn name(self) -> &'static str {
        match self {
            NodeClass::Low => "low",
            NodeClass::Normal => "normal",
            NodeClass::High => "high",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// One labelled indicator vector (θ_cpu, θ_mem, θ_net, θ_links) → class.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainingSample {
    pub theta: [f64; 4],
    pub class: NodeClass,
}

/// §C.2 eq. 8: L = ω_c·θ_cpu + ω_m·θ_mem + ω_n·θ_net + ω_l·θ_links (0–1 scale).
pub fn load_weight(theta: &Indicators, omega: &[f64; 4]) -> f64 {
    theta.as_array().iter().zip(omega).map(|(t, w)| t * w).sum()
}

/// The shipped §C.3 training set. The paper publishes none, so this one is built to agree
/// with §C.2's weight under the default ω: five `low` vectors with L ≲ 0.25 (idle to lightly
/// used, any indicator ≤ 0.3), five `normal` with L ≈ 0.4–0.5 (every indicator 0.35–0.55),
/// five `high` with L ≳ 0.7 (every indicator ≥ 0.6). Each class mixes which indicator
/// dominates (CPU-, memory-, network- or link-heavy) so that one saturated resource pulls a
/// node towards the higher class. With K = 3 the boundaries fall roughly at L ≈ 0.32 and
/// L ≈ 0.6. An operator replaces it with vectors measured on their own hardware.
pub fn default_training_set() -> Vec<TrainingSample> {
    use NodeClass::*;
    let s = |theta: [f64; 4], class| TrainingSample { theta, class };
    vec![
        s([0.05, 0.10, 0.05, 0.05], Low),
        s([0.15, 0.20, 0.10, 0.10], Low),
        s([0.20, 0.30, 0.20, 0.15], Low),
        s([0.10, 0.25, 0.25, 0.20], Low),
        s([0.30, 0.20, 0.15, 0.25], Low),
        s([0.40, 0.40, 0.40, 0.40], Normal),
        s([0.50, 0.45, 0.35, 0.50], Normal),
        s([0.35, 0.50, 0.50, 0.45], Normal),
        s([0.55, 0.40, 0.55, 0.55], Normal),
        s([0.45, 0.55, 0.45, 0.35], Normal),
        s([0.75, 0.70, 0.80, 0.75], High),
        s([0.90, 0.80, 0.85, 0.90], High),
        s([0.70, 0.85, 0.75, 0.80], High),
        s([0.95, 0.90, 0.95, 0.95], High),
        s([0.80, 0.60, 0.90, 0.85], High),
    ]
}

fn dist2(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// §C.3: majority class of the K nearest samples (Euclidean). A tie between classes goes to
/// the tied class owning the nearest sample; equal distances keep training-set order. An
/// empty set classifies everything `Normal` (no evidence either way).
pub fn classify(theta: &Indicators, training: &[TrainingSample], k: usize) -> NodeClass {
    let x = theta.as_array();
    let k = k.max(1).min(training.len());
    if k == 0 {
        return NodeClass::Normal;
    }
    // Insertion into a small sorted buffer: K is tiny, the set is small.
    let mut best: Vec<(f64, usize)> = Vec::with_capacity(k + 1);
    for (i, s) in training.iter().enumerate() {
        let d = dist2(&x, &s.theta);
        if best.len() == k && d >= best[k - 1].0 {
            continue;
        }
        let pos = best.partition_point(|&(bd, _)| bd <= d);
        best.insert(pos, (d, i));
        best.truncate(k);
    }
    let mut votes = [0usize; 3];
    let mut nearest = [usize::MAX; 3];
    for (rank, &(_, i)) in best.iter().enumerate() {
        let c = training[i].class.slot();
        votes[c] += 1;
        nearest[c] = nearest[c].min(rank);
    }
    let top = *votes.iter().max().unwrap_or(&0);
    NodeClass::ALL
        .into_iter()
        .filter(|c| votes[c.slot()] == top)
        .min_by_key(|c| nearest[c.slot()])
        .unwrap_or(NodeClass::Normal)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn th(cpu: f64, mem: f64, net: f64, links: f64) -> Indicators {
        Indicators {
            cpu,
            mem,
            net,
            links,
        }
    }

    #[test]
    fn load_weight_by_hand() {
        // ω = (0.4, 0.25, 0.25, 0.1); θ = (0.5, 0.4, 0.2, 0.3):
        // 0.2 + 0.1 + 0.05 + 0.03 = 0.38.
        let l = load_weight(&th(0.5, 0.4, 0.2, 0.3), &[0.4, 0.25, 0.25, 0.1]);
        assert!((l - 0.38).abs() < 1e-12);
    }

    #[test]
    fn classifies_the_three_bands() {
        let t = default_training_set();
        assert_eq!(classify(&th(0.1, 0.15, 0.1, 0.1), &t, 3), NodeClass::Low);
        assert_eq!(
            classify(&th(0.45, 0.45, 0.45, 0.45), &t, 3),
            NodeClass::Normal
        );
        assert_eq!(classify(&th(0.85, 0.8, 0.9, 0.9), &t, 3), NodeClass::High);
        // Every training sample classifies as its own label (K = 3, no noise in the set).
        for s in &t {
            let x = th(s.theta[0], s.theta[1], s.theta[2], s.theta[3]);
            assert_eq!(classify(&x, &t, 3), s.class, "{:?}", s.theta);
        }
    }

    #[test]
    fn k1_is_nearest_and_ties_go_to_the_nearest_class() {
        let t = vec![
            TrainingSample {
                theta: [0.0; 4],
                class: NodeClass::Low,
            },
            TrainingSample {
                theta: [1.0; 4],
                class: NodeClass::High,
            },
        ];
        assert_eq!(classify(&th(0.2, 0.2, 0.2, 0.2), &t, 1), NodeClass::Low);
        // K = 2: one vote each; High's sample is nearer.
        assert_eq!(classify(&th(0.7, 0.7, 0.7, 0.7), &t, 2), NodeClass::High);
        assert_eq!(classify(&th(0.5, 0.5, 0.5, 0.5), &[], 3), NodeClass::Normal);
    }
}
