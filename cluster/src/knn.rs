//! §C.2 load weight and §C.3 node classes by K nearest neighbours.

use serde::{Deserialize, Serialize};

use crate::config::{NodeClass, TrainingSample};

/// §C.1 indicators θ, each in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Indicators {
    pub cpu: f64,
    pub mem: f64,
    pub net: f64,
    pub links: f64,
}

impl Indicators {
    pub fn as_array(&self) -> [f64; 4] {
        [self.cpu, self.mem, self.net, self.links]
    }
}

/// §C.2 eq. 8: L = ω_c·θ_cpu + ω_m·θ_mem + ω_n·θ_net + ω_l·θ_links (0–1 scale).
pub fn load_weight(theta: &Indicators, omega: &[f64; 4]) -> f64 {
    theta.as_array().iter().zip(omega).map(|(t, w)| t * w).sum()
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
    use crate::config::default_training_set;

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
