//! §D.2 eq. 1: do the predicted requests fit the free capacity as sessions stand? A
//! bipartite flow (requests of each class → nodes that can serve it → free capacity), so the
//! exact answer is a max-flow, computed with `pathfinding`'s Edmonds–Karp.

use pathfinding::directed::edmonds_karp::edmonds_karp_sparse;

use super::{classes, free, Class, Instance};

/// Predicted requests that cannot be served without moving anything (0: eq. 1 holds).
pub(crate) fn unmet(inst: &Instance, classes: &[Class]) -> u32 {
    let demand: i64 = classes.iter().map(|c| i64::from(c.requests)).sum();
    if demand == 0 {
        return 0;
    }
    let free = free(inst);
    // Vertices: 0 source, 1 sink, 2.. classes, then nodes.
    let cn = classes.len();
    let vertices: Vec<usize> = (0..2 + cn + free.len()).collect();
    let mut edges = Vec::new();
    for (g, c) in classes.iter().enumerate() {
        if c.requests == 0 {
            continue;
        }
        edges.push(((0, 2 + g), i64::from(c.requests)));
        for &j in &c.servers {
            edges.push(((2 + g, 2 + cn + j), demand));
        }
    }
    for (j, f) in free.iter().enumerate() {
        if *f > 0 {
            edges.push(((2 + cn + j, 1), *f));
        }
    }
    let (_, served, _) = edmonds_karp_sparse(&vertices, &0, &1, edges);
    (demand - served).max(0) as u32
}

/// Eq. 1 on an instance: the predicted requests that do not fit as sessions stand.
pub fn unmet_as_is(inst: &Instance) -> u32 {
    unmet(inst, &classes(inst))
}
