//! The greedy plan: what a solver timeout returns, and the MILP's warm start. It always
//! terminates in O(classes × nodes × deficit) and is valid (caps and servers hold), but moves
//! sessions one hop only, so it can miss room that a chain of moves would make, and it may
//! move more sessions than eq. 2's optimum.
//!
//! 1. Place each class's requests on its servers with the most free capacity, the classes
//!    with the fewest servers first (they have the least choice).
//! 2. For a class with requests left, free a slot on one of its servers by moving one
//!    movable session of another class from there to a server of that class with free
//!    capacity (the most free first); repeat until its requests fit or no such move is left.

use std::collections::BTreeMap;

use super::{free, Class, ClassPlan, Instance};

pub(crate) fn solve(inst: &Instance, classes: &[Class]) -> ClassPlan {
    let mut free = free(inst);
    let mut kept: Vec<BTreeMap<usize, u32>> = classes.iter().map(|c| c.sessions.clone()).collect();
    let mut added: Vec<BTreeMap<usize, u32>> = vec![BTreeMap::new(); classes.len()];
    let mut left: Vec<u32> = classes.iter().map(|c| c.requests).collect();
    let mut order: Vec<usize> = (0..classes.len()).filter(|&g| left[g] > 0).collect();
    order.sort_by(|&a, &b| {
        classes[a]
            .servers
            .len()
            .cmp(&classes[b].servers.len())
            .then(classes[b].requests.cmp(&classes[a].requests))
            .then(a.cmp(&b))
    });
    // Step 1: requests into free capacity.
    for &g in &order {
        let mut s = classes[g].servers.clone();
        s.sort_by(|a, b| free[*b].cmp(&free[*a]).then(a.cmp(b)));
        for j in s {
            if left[g] == 0 {
                break;
            }
            let n = free[j].min(i64::from(left[g])) as u32;
            if n > 0 {
                free[j] -= i64::from(n);
                left[g] -= n;
                *added[g].entry(j).or_default() += n;
            }
        }
    }
    // Step 2: one-hop moves make room for what is left.
    for &g in &order {
        for &j in &classes[g].servers {
            while left[g] > 0 {
                let Some((h, m)) = one_move(classes, &kept, &free, g, j) else {
                    break;
                };
                *kept[h].entry(j).or_default() -= 1;
                *added[h].entry(m).or_default() += 1;
                free[m] -= 1;
                *added[g].entry(j).or_default() += 1;
                left[g] -= 1;
            }
        }
    }
    ClassPlan {
        kept,
        added,
        unmet: left.iter().sum(),
    }
}

/// A movable session of another class on node `j` and a server of its class with free
/// capacity (the most free; ties: the lower class, then node index).
fn one_move(
    classes: &[Class],
    kept: &[BTreeMap<usize, u32>],
    free: &[i64],
    g: usize,
    j: usize,
) -> Option<(usize, usize)> {
    classes
        .iter()
        .enumerate()
        .filter(|(h, c)| *h != g && c.movable && kept[*h].get(&j).is_some_and(|k| *k > 0))
        .filter_map(|(h, c)| {
            c.servers
                .iter()
                .filter(|&&m| m != j && free[m] > 0)
                .max_by(|a, b| free[**a].cmp(&free[**b]).then(b.cmp(a)))
                .map(|&m| (h, m))
        })
        .max_by(|a, b| free[a.1].cmp(&free[b.1]).then(b.0.cmp(&a.0)))
}
