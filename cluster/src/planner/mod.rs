//! §D.2 predictive min-migration planning: predict the next period's requests per content
//! (a recording or a live camera) from the last Δt, check whether they fit the free
//! capacity as sessions stand (eq. 1), and when they do not, find the fewest session moves
//! that make them fit (eq. 2).
//!
//! Eq. 2 is solved over *classes*: contents with the same set of nodes able to serve them
//! (r_i·) are interchangeable for capacity, so their sessions and requests add up and one
//! variable per (class, node) replaces one per (content, node). The aggregation is exact:
//! any class plan splits back into content moves ([`split`]). With recordings on a shared
//! root every recording is one class; at the paper's size (random replicas) 1500 videos
//! fall into a few hundred classes.
//!
//! Eq. 2 with y'_ij = kept + moved-in is a transportation problem; it is solved as a MILP
//! (good_lp over microlp, pure Rust) with a time limit and a gap, warm-started with the
//! greedy plan, which is also what a timeout returns ([`greedy`]).

mod feasible;
pub mod from_view;
pub mod greedy;
mod milp;
pub mod predict;
pub mod sim;
mod split;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use feasible::unmet_as_is;
pub use predict::{predict, zipf_fit, ArrivalLog, Prediction};

use crate::config::PlannerConfig;
use crate::view::NodeId;

/// One node as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanNode {
    pub id: NodeId,
    /// cap: concurrent streams.
    pub cap: u32,
    /// Streams that count against cap but no plan moves (live viewers, sessions whose
    /// content is not planned).
    pub fixed: u32,
}

/// One content (`playback/<camera>` or `live/<camera>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Content {
    pub id: String,
    /// R_i: predicted next-period requests.
    pub requests: u32,
    /// y_i·: current sessions per node index.
    pub sessions: BTreeMap<usize, u32>,
    /// r_i·: node indexes that can serve it (sorted). A session on a node outside it must
    /// move.
    pub servers: Vec<usize>,
    /// Its sessions can move (playbacks); a live viewer cannot.
    pub movable: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub nodes: Vec<PlanNode>,
    pub contents: Vec<Content>,
}

/// `sessions` sessions of `content` go from node `from` to node `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub content: String,
    pub from: NodeId,
    pub to: NodeId,
    pub sessions: u32,
}

/// How the plan was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Eq. 1 holds: the predicted requests fit as sessions stand; nothing moves.
    Feasible,
    /// Eq. 2 solved to optimality (or within the gap).
    Optimal,
    /// The solver stopped at its time limit with a solution no worse than the greedy one.
    TimeLimit,
    /// The solver gave no usable solution in time (or failed): the greedy plan.
    Greedy,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub method: Method,
    /// Z of eq. 2: sessions moved.
    pub moved: u32,
    pub moves: Vec<Move>,
    /// Predicted requests the plan cannot serve (0 unless no move can make room).
    pub unmet: u32,
    /// Predicted requests that do not fit as things stand (eq. 1; 0 = feasible).
    pub unmet_before: u32,
    /// The greedy plan's Z, for comparison (None when eq. 1 held).
    pub greedy_moved: Option<u32>,
    /// Why the solver's answer was not used, if it was not.
    pub note: Option<String>,
}

/// A class: contents with the same servers; the unit eq. 2 is solved over.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Class {
    pub servers: Vec<usize>,
    pub movable: bool,
    pub requests: u32,
    /// Σ y per node over its contents.
    pub sessions: BTreeMap<usize, u32>,
    pub members: Vec<usize>,
}

/// Class-level solution: kept sessions and additions (moved-in sessions and new requests)
/// per (class, node), and the unmet count.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClassPlan {
    pub kept: Vec<BTreeMap<usize, u32>>,
    pub added: Vec<BTreeMap<usize, u32>>,
    pub unmet: u32,
}

impl ClassPlan {
    /// Sessions leaving their node: Σ (y − kept).
    pub(crate) fn moved(&self, classes: &[Class]) -> u32 {
        classes
            .iter()
            .zip(&self.kept)
            .map(|(c, k)| {
                c.sessions
                    .iter()
                    .map(|(j, y)| y - k.get(j).copied().unwrap_or(0).min(*y))
                    .sum::<u32>()
            })
            .sum()
    }
}

/// cap − fixed − Σ y per node as sessions stand (negative when over cap).
pub(crate) fn raw_free(inst: &Instance) -> Vec<i64> {
    let mut f: Vec<i64> = inst
        .nodes
        .iter()
        .map(|n| i64::from(n.cap) - i64::from(n.fixed))
        .collect();
    for c in &inst.contents {
        for (j, y) in &c.sessions {
            f[*j] -= i64::from(*y);
        }
    }
    f
}

/// Free capacity per node. A node already over cap has none, but its running sessions are
/// not forced off: the plan is about the predicted requests (its capacity is taken as its
/// current load).
pub(crate) fn free(inst: &Instance) -> Vec<i64> {
    raw_free(inst).into_iter().map(|f| f.max(0)).collect()
}

/// The nodes that can serve content `c`: its servers and wherever it plays now.
pub(crate) fn servers(c: &Content) -> Vec<usize> {
    let mut s = c.servers.clone();
    s.extend(c.sessions.iter().filter(|(_, y)| **y > 0).map(|(j, _)| *j));
    s.sort_unstable();
    s.dedup();
    s
}

/// Groups contents by (movable, servers). Immovable contents (live viewers) form classes
/// too: their sessions stay, their requests can only land on their servers.
pub(crate) fn classes(inst: &Instance) -> Vec<Class> {
    let mut by: BTreeMap<(bool, Vec<usize>), Class> = BTreeMap::new();
    for (i, c) in inst.contents.iter().enumerate() {
        if c.requests == 0 && c.sessions.values().all(|y| *y == 0) {
            continue;
        }
        let s = servers(c);
        let e = by.entry((c.movable, s.clone())).or_insert_with(|| Class {
            servers: s,
            movable: c.movable,
            requests: 0,
            sessions: BTreeMap::new(),
            members: Vec::new(),
        });
        e.requests += c.requests;
        for (j, y) in &c.sessions {
            if *y > 0 {
                *e.sessions.entry(*j).or_default() += y;
            }
        }
        e.members.push(i);
    }
    by.into_values().collect()
}

/// §D.2: eq. 1, then eq. 2 when it fails. `time_left` is what remains of the caller's
/// deadline when it calls, read on the caller's clock: the policy reads none, so a test can
/// give it a deadline already passed. The solver gets `time_left`; with none left the
/// greedy plan is the answer.
pub fn plan(inst: &Instance, cfg: &PlannerConfig, time_left: Duration) -> Plan {
    let classes = classes(inst);
    let unmet_before = feasible::unmet(inst, &classes);
    if unmet_before == 0 {
        return Plan {
            method: Method::Feasible,
            moved: 0,
            moves: Vec::new(),
            unmet: 0,
            unmet_before,
            greedy_moved: None,
            note: None,
        };
    }
    let g = greedy::solve(inst, &classes);
    let greedy_moved = g.moved(&classes);
    let solved = if time_left.is_zero() {
        Err("no time left for the solver before the deadline".to_string())
    } else {
        milp::solve(inst, &classes, &g, time_left, cfg.mip_gap)
    };
    let (method, chosen, note) = match solved {
        Ok((sol, timed_out)) => {
            // Lexicographic, as the MILP's objective: serve more first, then move less.
            let better = (sol.unmet, sol.moved(&classes)) <= (g.unmet, greedy_moved);
            match (better, timed_out) {
                (true, false) => (Method::Optimal, sol, None),
                (true, true) => (Method::TimeLimit, sol, None),
                (false, _) => (
                    Method::Greedy,
                    g,
                    Some("the solver's incumbent was worse than the greedy plan".into()),
                ),
            }
        }
        Err(e) => (Method::Greedy, g, Some(e)),
    };
    let moves = split::moves(inst, &classes, &chosen);
    Plan {
        method,
        moved: moves.iter().map(|m| m.sessions).sum(),
        moves,
        unmet: chosen.unmet,
        unmet_before,
        greedy_moved: Some(greedy_moved),
        note,
    }
}

/// Checks a plan against the instance: every move takes existing sessions of a movable
/// content to a node that can serve it; after the moves, every node that received sessions
/// is within cap, and the predicted requests that still do not fit (eq. 1 on the moved
/// state) are no more than the plan says. For tests and the bench.
pub fn check(inst: &Instance, plan: &Plan) -> Result<(), String> {
    let idx = |id: &str| {
        inst.nodes
            .iter()
            .position(|n| n.id == id)
            .ok_or(format!("unknown node {id}"))
    };
    let mut after = inst.clone();
    let mut received = vec![false; inst.nodes.len()];
    for m in &plan.moves {
        let (f, t) = (idx(&m.from)?, idx(&m.to)?);
        let c = after
            .contents
            .iter_mut()
            .find(|c| c.id == m.content)
            .ok_or(format!("unknown content {}", m.content))?;
        if !c.movable {
            return Err(format!("{} cannot move", c.id));
        }
        if !servers(c).contains(&t) {
            return Err(format!("{} cannot be served by {}", c.id, m.to));
        }
        let have = c.sessions.entry(f).or_default();
        *have = have
            .checked_sub(m.sessions)
            .ok_or(format!("{} has too few sessions on {}", c.id, m.from))?;
        *c.sessions.entry(t).or_default() += m.sessions;
        received[t] = true;
    }
    for (j, f) in raw_free(&after).iter().enumerate() {
        if received[j] && *f < 0 {
            return Err(format!("{} over cap after the plan", inst.nodes[j].id));
        }
    }
    let left = unmet_as_is(&after);
    if left > plan.unmet {
        return Err(format!(
            "{left} predicted requests do not fit after the plan, which says {}",
            plan.unmet
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
