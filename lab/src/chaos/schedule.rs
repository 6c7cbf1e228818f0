//! The nemesis's plan: which fault happens when, and the operator's actions between them,
//! drawn from a seed before the run starts, so a run that broke an invariant is repeated
//! exactly by its seed. A pure function of the parameters and the RNG.
//!
//! Faults come one at a time, each followed by a quiet spell (`settle`) before the next:
//! every loss the checker finds is then charged to one fault, and what "after the heal"
//! means is unambiguous. Operator actions (migrate a session, drain and undrain a node,
//! move a camera) fall inside the quiet spells, as an operator's do during a shift.

use rand::seq::SliceRandom;
use rand::Rng;
use std::fmt;
use std::time::Duration;

/// A fault the nemesis makes. Nodes are indices `0..nodes`.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// `kill -9`, restarted when the fault ends.
    Kill { node: usize },
    /// These nodes cut off from the others (every other host still reaches both sides).
    Partition { minority: Vec<usize> },
    /// `percent` % of what the node sends is dropped.
    Loss { node: usize, percent: f64 },
    /// SIGSTOP, SIGCONT when the fault ends: a node that hangs (a GC-like pause, a
    /// stuck disk) and comes back believing nothing happened.
    Pause { node: usize },
    /// The shared storage fills up (every node records to it): recording stops with a
    /// clear error, live viewing goes on; space is freed when the fault ends.
    DiskFull,
    /// Delay between nodes (`tc netem`): on kernels without netem, reported as not made.
    Delay { node: usize, ms: u32 },
}

/// What an operator does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Move one running session (picked at run time) to this node.
    Migrate { to: usize },
    /// Drain the node; it is undrained `for_secs` later.
    Drain { node: usize, for_secs: u64 },
    /// Move the camera's binding to this node.
    MoveCamera { camera: usize, to: usize },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    FaultStart { id: usize, fault: Fault },
    FaultEnd { id: usize },
    Operator(Action),
}

/// One step at its time from the run's start.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed {
    pub at: Duration,
    pub step: Step,
}

/// Which faults the nemesis draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Kill,
    Partition,
    Loss,
    Pause,
    DiskFull,
    Delay,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Kill,
        Kind::Partition,
        Kind::Loss,
        Kind::Pause,
        Kind::DiskFull,
        Kind::Delay,
    ];
}

#[derive(Debug, Clone)]
pub struct Params {
    pub nodes: usize,
    pub cameras: usize,
    pub duration: Duration,
    /// Quiet time before the first fault (the cluster forms, recordings start).
    pub warmup: Duration,
    /// How long a fault lasts: drawn uniformly in this range.
    pub fault_len: (Duration, Duration),
    /// Quiet time after each fault.
    pub settle: Duration,
    pub kinds: Vec<Kind>,
    /// Whether the quiet spells hold operator actions.
    pub operator: bool,
}

impl Params {
    /// The defaults of `vigil lab chaos` for a run of `duration`.
    pub fn for_run(duration: Duration) -> Params {
        Params {
            nodes: 5,
            cameras: 4,
            duration,
            warmup: Duration::from_secs(20),
            fault_len: (Duration::from_secs(6), Duration::from_secs(15)),
            settle: Duration::from_secs(15),
            kinds: Kind::ALL.to_vec(),
            operator: true,
        }
    }
}

/// The run's steps in time order. Every fault ends before `duration` and before the next
/// starts; at most one node is down (killed or paused) at a time, and a partition's
/// minority is 1 or 2 of the nodes.
pub fn plan(p: &Params, rng: &mut impl Rng) -> Vec<Timed> {
    let mut steps = Vec::new();
    if p.nodes == 0 || p.kinds.is_empty() {
        return steps;
    }
    let mut t = p.warmup;
    let mut id = 0;
    loop {
        let (lo, hi) = p.fault_len;
        let len = if hi > lo { rng.gen_range(lo..=hi) } else { lo };
        if t + len + p.settle > p.duration {
            break;
        }
        let fault = draw(p, rng);
        steps.push(Timed {
            at: t,
            step: Step::FaultStart { id, fault },
        });
        steps.push(Timed {
            at: t + len,
            step: Step::FaultEnd { id },
        });
        if p.operator {
            // One action in the middle third of the quiet spell after the fault.
            let quiet = p.settle.as_millis() as u64;
            let at = t + len + Duration::from_millis(rng.gen_range(quiet / 3..=quiet * 2 / 3));
            steps.push(Timed {
                at,
                step: Step::Operator(action(p, rng)),
            });
        }
        t += len + p.settle;
        id += 1;
    }
    steps.sort_by_key(|s| s.at);
    steps
}

fn draw(p: &Params, rng: &mut impl Rng) -> Fault {
    let node = rng.gen_range(0..p.nodes);
    match p.kinds.choose(rng).copied().unwrap_or(Kind::Kill) {
        Kind::Kill => Fault::Kill { node },
        Kind::Pause => Fault::Pause { node },
        Kind::Loss => Fault::Loss {
            node,
            percent: [1.0, 3.0, 10.0][rng.gen_range(0..3)],
        },
        Kind::DiskFull => Fault::DiskFull,
        Kind::Delay => Fault::Delay {
            node,
            ms: [20, 100][rng.gen_range(0..2)],
        },
        Kind::Partition => {
            let size = if p.nodes >= 5 {
                rng.gen_range(1..=2)
            } else {
                1
            };
            let mut all: Vec<usize> = (0..p.nodes).collect();
            all.shuffle(rng);
            let mut minority: Vec<usize> = all.into_iter().take(size.min(p.nodes)).collect();
            minority.sort_unstable();
            Fault::Partition { minority }
        }
    }
}

fn action(p: &Params, rng: &mut impl Rng) -> Action {
    let to = rng.gen_range(0..p.nodes);
    match rng.gen_range(0..3) {
        0 => Action::Migrate { to },
        1 => Action::Drain {
            node: to,
            for_secs: (p.settle.as_secs() / 3).max(1),
        },
        _ => Action::MoveCamera {
            camera: rng.gen_range(0..p.cameras.max(1)),
            to,
        },
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |i: &usize| format!("node{}", i + 1);
        match self {
            Fault::Kill { node } => write!(f, "kill -9 {}", n(node)),
            Fault::Partition { minority } => {
                let names: Vec<String> = minority.iter().map(n).collect();
                write!(f, "partition {{{}}} from the rest", names.join(","))
            }
            Fault::Loss { node, percent } => write!(f, "{percent} % loss from {}", n(node)),
            Fault::Pause { node } => write!(f, "SIGSTOP {}", n(node)),
            Fault::DiskFull => write!(f, "shared storage full"),
            Fault::Delay { node, ms } => write!(f, "{ms} ms delay from {}", n(node)),
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Migrate { to } => write!(f, "migrate a session to node{}", to + 1),
            Action::Drain { node, for_secs } => {
                write!(f, "drain node{} for {for_secs} s", node + 1)
            }
            Action::MoveCamera { camera, to } => {
                write!(f, "move cam{} to node{}", camera + 1, to + 1)
            }
        }
    }
}

impl Fault {
    /// The nodes the fault acts on (all for a full disk: they share it).
    pub fn targets(&self, nodes: usize) -> Vec<usize> {
        match self {
            Fault::Kill { node }
            | Fault::Pause { node }
            | Fault::Loss { node, .. }
            | Fault::Delay { node, .. } => vec![*node],
            Fault::Partition { minority } => minority.clone(),
            Fault::DiskFull => (0..nodes).collect(),
        }
    }

    /// Whether the node stops serving during the fault (its viewers are expected to lose
    /// their session and come back elsewhere).
    pub fn takes_down(&self, node: usize) -> bool {
        matches!(self, Fault::Kill { node: n } | Fault::Pause { node: n } if *n == node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn params() -> Params {
        Params::for_run(Duration::from_secs(600))
    }

    fn faults(steps: &[Timed]) -> Vec<(Duration, Duration, Fault)> {
        let mut out = Vec::new();
        for s in steps {
            if let Step::FaultStart { id, fault } = &s.step {
                let end = steps
                    .iter()
                    .find(|e| e.step == Step::FaultEnd { id: *id })
                    .map(|e| e.at)
                    .expect("every fault ends");
                out.push((s.at, end, fault.clone()));
            }
        }
        out
    }

    #[test]
    fn a_seed_gives_the_same_plan_and_another_seed_another() {
        let a = plan(&params(), &mut rand::rngs::StdRng::seed_from_u64(7));
        let b = plan(&params(), &mut rand::rngs::StdRng::seed_from_u64(7));
        let c = plan(&params(), &mut rand::rngs::StdRng::seed_from_u64(8));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn faults_come_one_at_a_time_with_a_quiet_spell_after_each_and_end_in_time() {
        let p = params();
        for seed in 0..50 {
            let steps = plan(&p, &mut rand::rngs::StdRng::seed_from_u64(seed));
            let fs = faults(&steps);
            // 600 s, 20 s warm-up, faults of 6–15 s each followed by 15 s: 17–27 faults.
            assert!(
                (17..=27).contains(&fs.len()),
                "seed {seed}: {} faults",
                fs.len()
            );
            assert_eq!(fs[0].0, p.warmup);
            for w in fs.windows(2) {
                assert!(w[1].0 >= w[0].1 + p.settle, "seed {seed}: {:?}", w);
            }
            for (start, end, fault) in &fs {
                let len = *end - *start;
                assert!(len >= p.fault_len.0 && len <= p.fault_len.1);
                assert!(*end + p.settle <= p.duration);
                if let Fault::Partition { minority } = fault {
                    assert!((1..=2).contains(&minority.len()), "{minority:?}");
                    assert!(minority.iter().all(|&n| n < p.nodes));
                }
            }
            assert!(steps.windows(2).all(|w| w[0].at <= w[1].at));
        }
    }

    #[test]
    fn operator_actions_fall_in_the_quiet_spells() {
        let p = params();
        let steps = plan(&p, &mut rand::rngs::StdRng::seed_from_u64(3));
        let fs = faults(&steps);
        let actions: Vec<Duration> = steps
            .iter()
            .filter(|s| matches!(s.step, Step::Operator(_)))
            .map(|s| s.at)
            .collect();
        assert_eq!(actions.len(), fs.len());
        for at in actions {
            assert!(
                fs.iter().all(|(s, e, _)| at < *s || at > *e + p.settle / 4),
                "an action at {at:?} falls in a fault"
            );
        }
    }

    #[test]
    fn every_kind_is_drawn_and_only_the_kinds_asked_for() {
        let mut p = params();
        let steps = plan(&p, &mut rand::rngs::StdRng::seed_from_u64(11));
        let drawn: Vec<Fault> = faults(&steps).into_iter().map(|f| f.2).collect();
        for k in Kind::ALL {
            assert!(
                drawn.iter().any(|f| kind_of(f) == k),
                "{k:?} never drawn in {drawn:?}"
            );
        }
        p.kinds = vec![Kind::Kill, Kind::Pause];
        let steps = plan(&p, &mut rand::rngs::StdRng::seed_from_u64(11));
        assert!(faults(&steps)
            .iter()
            .all(|f| matches!(f.2, Fault::Kill { .. } | Fault::Pause { .. })));
    }

    fn kind_of(f: &Fault) -> Kind {
        match f {
            Fault::Kill { .. } => Kind::Kill,
            Fault::Partition { .. } => Kind::Partition,
            Fault::Loss { .. } => Kind::Loss,
            Fault::Pause { .. } => Kind::Pause,
            Fault::DiskFull => Kind::DiskFull,
            Fault::Delay { .. } => Kind::Delay,
        }
    }

    #[test]
    fn a_run_too_short_for_a_fault_has_none() {
        let p = Params::for_run(Duration::from_secs(30));
        assert!(plan(&p, &mut rand::rngs::StdRng::seed_from_u64(1)).is_empty());
    }
}
