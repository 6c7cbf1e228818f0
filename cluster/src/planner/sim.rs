//! The paper's simulated set-up (ALGORITHMS.md §D.2) as planner instances, for the unit tests
//! and the criterion bench: `nodes` nodes of `cap` streams, `videos` videos with Zipf(0.6)
//! popularity, `replicas` videos per node (each video at least once, round-robin, the rest
//! drawn at random: the paper's mismatched case), every node filled to `fill` of cap with
//! sessions of the videos it holds (drawn by popularity), and `requests` next-period
//! requests drawn by popularity.

use std::collections::BTreeMap;

use rand::distributions::{Distribution, WeightedIndex};
use rand::seq::SliceRandom;
use rand::Rng;

use super::{Content, Instance, PlanNode};

#[derive(Debug, Clone, Copy)]
pub struct PaperSetup {
    pub nodes: usize,
    pub cap: u32,
    pub videos: usize,
    pub replicas: usize,
    pub zipf: f64,
    pub fill: f64,
    pub requests: u32,
}

impl Default for PaperSetup {
    /// 20 nodes × cap 100, 1500 videos, 110 replicas per node, Zipf(0.6); 97 % full and 60
    /// requests due: at that load eq. 1 fails for the popular videos' nodes.
    fn default() -> Self {
        Self {
            nodes: 20,
            cap: 100,
            videos: 1500,
            replicas: 110,
            zipf: 0.6,
            fill: 0.97,
            requests: 60,
        }
    }
}

pub fn paper_instance(s: &PaperSetup, rng: &mut impl Rng) -> Instance {
    let mut servers: Vec<Vec<usize>> = vec![Vec::new(); s.videos];
    let mut held: Vec<Vec<usize>> = vec![Vec::new(); s.nodes];
    for (v, sv) in servers.iter_mut().enumerate() {
        let j = v % s.nodes;
        sv.push(j);
        held[j].push(v);
    }
    for (j, h) in held.iter_mut().enumerate() {
        let mut others: Vec<usize> = (0..s.videos).filter(|v| v % s.nodes != j).collect();
        others.shuffle(rng);
        for v in others.into_iter().take(s.replicas.saturating_sub(h.len())) {
            h.push(v);
            servers[v].push(j);
        }
    }
    let pop: Vec<f64> = (1..=s.videos).map(|k| (k as f64).powf(-s.zipf)).collect();
    let mut sessions: Vec<BTreeMap<usize, u32>> = vec![BTreeMap::new(); s.videos];
    for (j, h) in held.iter().enumerate() {
        let w: Vec<f64> = h.iter().map(|&v| pop[v]).collect();
        let Ok(d) = WeightedIndex::new(&w) else {
            continue;
        };
        for _ in 0..(f64::from(s.cap) * s.fill) as u32 {
            *sessions[h[d.sample(rng)]].entry(j).or_default() += 1;
        }
    }
    let mut requests = vec![0u32; s.videos];
    if let Ok(d) = WeightedIndex::new(&pop) {
        for _ in 0..s.requests {
            requests[d.sample(rng)] += 1;
        }
    }
    let contents = (0..s.videos)
        .map(|v| {
            let mut sv = servers[v].clone();
            sv.sort_unstable();
            Content {
                id: format!("video-{v}"),
                requests: requests[v],
                sessions: std::mem::take(&mut sessions[v]),
                servers: sv,
                movable: true,
            }
        })
        .collect();
    Instance {
        nodes: (0..s.nodes)
            .map(|j| PlanNode {
                id: format!("node-{j}"),
                cap: s.cap,
                fixed: 0,
            })
            .collect(),
        contents,
    }
}
