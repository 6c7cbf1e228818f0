//! A class plan back to content moves: a class's sessions leaving node j (y − kept) go to
//! the class's nodes with additions, in node order; which contents of the class leave j is
//! the members' order (any choice is as good: they have the same servers).

use std::collections::BTreeMap;

use super::{Class, ClassPlan, Instance, Move};

pub(crate) fn moves(inst: &Instance, classes: &[Class], plan: &ClassPlan) -> Vec<Move> {
    let mut out: BTreeMap<(String, usize, usize), u32> = BTreeMap::new();
    for (g, c) in classes.iter().enumerate() {
        let mut dest: Vec<(usize, u32)> = plan.added[g]
            .iter()
            .map(|(j, n)| (*j, *n))
            .filter(|(_, n)| *n > 0)
            .collect();
        let mut d = 0;
        for (&j, &y) in &c.sessions {
            let mut surplus = y - plan.kept[g].get(&j).copied().unwrap_or(0).min(y);
            for &i in &c.members {
                let content = &inst.contents[i];
                let mut here = content.sessions.get(&j).copied().unwrap_or(0);
                while surplus > 0 && here > 0 && d < dest.len() {
                    let n = surplus.min(here).min(dest[d].1);
                    *out.entry((content.id.clone(), j, dest[d].0)).or_default() += n;
                    surplus -= n;
                    here -= n;
                    dest[d].1 -= n;
                    if dest[d].1 == 0 {
                        d += 1;
                    }
                }
            }
        }
    }
    out.into_iter()
        .map(|((content, f, t), n)| Move {
            content,
            from: inst.nodes[f].id.clone(),
            to: inst.nodes[t].id.clone(),
            sessions: n,
        })
        .collect()
}
