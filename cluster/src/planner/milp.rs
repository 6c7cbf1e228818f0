//! §D.2 eq. 2 as a MILP over classes (good_lp, solved by microlp).
//!
//! Per class g and node j: `m_gj` ∈ [0, y_gj] sessions moved off j (0 for immovable
//! classes), `a_gj` ≥ 0 sessions or requests added on j (servers only); per class `u_g` ∈
//! [0, R_g] requests left unserved. With y' = y − m + moved-in and x the requests,
//!
//!   min Σ m + W·Σ u   s.t.  Σ_j (a_gj − m_gj) + u_g ≥ R_g   ∀g   (Σ_j x_ij ≥ R_i)
//!                          Σ_g (a_gj − m_gj) ≤ free_j       ∀j   (Σ_i y'_ij + x_ij ≤ cap)
//!
//! Z = Σ m is eq. 2's ½ Σ|y' − y| (every session moved off one node lands on another).
//! W = 1 + Σ y makes serving one more request worth more than any number of moves: when no
//! plan serves every prediction (eq. 2 has no solution), the plan serves as many as it can
//! with the fewest moves. Every variable is in one class row and one node row with equal
//! signs, so the matrix is totally unimodular and the LP optimum is already integral: the
//! branch and bound ends at its root.

use std::collections::BTreeMap;
use std::time::Duration;

use good_lp::solvers::microlp::microlp;
use good_lp::{
    variable, variables, Expression, ResolutionError, Solution, SolutionStatus, SolverModel,
    Variable, WithMipGap, WithTimeLimit,
};

use super::{free, Class, ClassPlan, Instance};

/// The solver's plan and whether it stopped at the time limit (with an incumbent).
pub(crate) fn solve(
    inst: &Instance,
    classes: &[Class],
    warm: &ClassPlan,
    limit: Duration,
    gap: f64,
) -> Result<(ClassPlan, bool), String> {
    if limit.is_zero() {
        return Err("no time left for the solver".into());
    }
    let free = free(inst);
    let total_y: u32 = classes
        .iter()
        .flat_map(|c| c.sessions.values())
        .sum::<u32>();
    let w = f64::from(total_y) + 1.0;
    let mut vars = variables!();
    let mut objective = Expression::default();
    let mut node_rows: Vec<Expression> = vec![Expression::default(); inst.nodes.len()];
    let mut class_rows: Vec<(Expression, u32)> = Vec::with_capacity(classes.len());
    let mut m_vars: Vec<Vec<(usize, Variable)>> = Vec::with_capacity(classes.len());
    let mut a_vars: Vec<Vec<(usize, Variable)>> = Vec::with_capacity(classes.len());
    let mut u_vars: Vec<Option<Variable>> = Vec::with_capacity(classes.len());
    for (g, c) in classes.iter().enumerate() {
        let mut row = Expression::default();
        let mut ms = Vec::new();
        if c.movable {
            for (&j, &y) in &c.sessions {
                let moved = y - warm.kept[g].get(&j).copied().unwrap_or(0).min(y);
                let m = vars.add(
                    variable()
                        .integer()
                        .min(0)
                        .max(f64::from(y))
                        .initial(f64::from(moved)),
                );
                objective.add_mul(1.0, m);
                row.add_mul(-1.0, m);
                node_rows[j].add_mul(-1.0, m);
                ms.push((j, m));
            }
        }
        let mut net: i64 = 0;
        let mut as_ = Vec::new();
        for &j in &c.servers {
            let init = warm.added[g].get(&j).copied().unwrap_or(0);
            // At most the free room plus every movable session there moved off.
            let movable_there: i64 = classes
                .iter()
                .filter(|o| o.movable)
                .map(|o| o.sessions.get(&j).map_or(0, |y| i64::from(*y)))
                .sum();
            let a = vars.add(
                variable()
                    .integer()
                    .min(0)
                    .max((free[j] + movable_there) as f64)
                    .initial(f64::from(init)),
            );
            row.add_mul(1.0, a);
            node_rows[j].add_mul(1.0, a);
            as_.push((j, a));
            net += i64::from(init);
        }
        net -= ms
            .iter()
            .map(|(j, _)| {
                let y = c.sessions[j];
                i64::from(y - warm.kept[g].get(j).copied().unwrap_or(0).min(y))
            })
            .sum::<i64>();
        let u = (c.requests > 0).then(|| {
            let init = (i64::from(c.requests) - net).clamp(0, i64::from(c.requests));
            let u = vars.add(
                variable()
                    .integer()
                    .min(0)
                    .max(f64::from(c.requests))
                    .initial(init as f64),
            );
            objective.add_mul(w, u);
            row.add_mul(1.0, u);
            u
        });
        class_rows.push((row, c.requests));
        m_vars.push(ms);
        a_vars.push(as_);
        u_vars.push(u);
    }
    let mut model = vars
        .minimise(objective)
        .using(microlp)
        .with_time_limit(limit.as_secs_f64())
        .with_mip_gap(gap as f32)
        .map_err(|e| format!("mip gap: {e}"))?;
    for (row, r) in class_rows {
        model.add_constraint(row.geq(f64::from(r)));
    }
    for (row, f) in node_rows.into_iter().zip(&free) {
        model.add_constraint(row.leq(*f as f64));
    }
    let sol = model.solve().map_err(|e| match e {
        ResolutionError::Other(s) => s.to_string(),
        e => e.to_string(),
    })?;
    let timed_out = matches!(sol.status(), SolutionStatus::TimeLimit);
    let val = |v: Variable| sol.value(v).round().max(0.0) as u32;
    let kept = classes
        .iter()
        .zip(&m_vars)
        .map(|(c, ms)| {
            let mut k = c.sessions.clone();
            for (j, m) in ms {
                if let Some(y) = k.get_mut(j) {
                    *y -= val(*m).min(*y);
                }
            }
            k
        })
        .collect();
    let added = a_vars
        .iter()
        .map(|as_| {
            as_.iter()
                .map(|(j, a)| (*j, val(*a)))
                .filter(|(_, n)| *n > 0)
                .collect::<BTreeMap<_, _>>()
        })
        .collect();
    let unmet = u_vars.iter().flatten().map(|u| val(*u)).sum();
    Ok((ClassPlan { kept, added, unmet }, timed_out))
}
