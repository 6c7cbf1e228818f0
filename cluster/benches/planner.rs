//! §D.2 planner at the paper's size (issue 11 benchmark): 20 nodes × cap 100, 1500 videos
//! with Zipf(0.6) popularity, 110 replicas per node, nodes 97 % full, 60 requests due
//! (eq. 1 fails). First a table over 200 seeded instances: solve time p50/p99 (eq. 1, the
//! greedy warm start and eq. 2 with the default 100 ms limit), how each plan was reached,
//! and the sessions moved and requests left unserved against the greedy plan. Then
//! criterion's own timing of one instance.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use rand::SeedableRng;
use vigil_cluster::planner::sim::{paper_instance, PaperSetup};
use vigil_cluster::planner::{check, plan, Method};
use vigil_cluster::PlannerConfig;

const RUNS: u64 = 200;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn table() {
    let cfg = PlannerConfig::default();
    let mut times = Vec::new();
    let (mut moved, mut greedy, mut unmet, mut gunmet_sum, mut before) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut methods = std::collections::BTreeMap::<String, u32>::new();
    let mut fewer = 0;
    for seed in 0..RUNS {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let inst = paper_instance(&PaperSetup::default(), &mut rng);
        let t = Instant::now();
        let p = plan(&inst, &cfg, Duration::from_millis(cfg.time_limit_ms));
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        if let Err(e) = check(&inst, &p) {
            panic!("seed {seed}: invalid plan: {e}");
        }
        *methods.entry(format!("{:?}", p.method)).or_default() += 1;
        moved += u64::from(p.moved);
        unmet += u64::from(p.unmet);
        before += u64::from(p.unmet_before);
        if p.method != Method::Feasible {
            // The greedy plan's own figures for the same instance.
            let g = plan(&inst, &cfg, Duration::ZERO);
            greedy += u64::from(g.moved);
            gunmet_sum += u64::from(g.unmet);
            if (p.unmet, p.moved) < (g.unmet, g.moved) {
                fewer += 1;
            }
        }
    }
    println!("planner at 20 nodes x cap 100, 1500 videos, {RUNS} seeded instances:");
    println!(
        "  solve time  p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        pct(&mut times, 0.5),
        pct(&mut times, 0.99),
        pct(&mut times, 1.0)
    );
    println!("  methods     {methods:?}");
    println!("  unserved before planning (eq. 1)  {before}");
    println!("  MILP plan:   {moved} sessions moved, {unmet} requests unserved");
    println!("  greedy plan: {greedy} sessions moved, {gunmet_sum} requests unserved");
    println!("  instances where the MILP plan beats greedy: {fewer}");
}

fn bench(c: &mut Criterion) {
    table();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let inst = paper_instance(&PaperSetup::default(), &mut rng);
    let cfg = PlannerConfig::default();
    c.bench_function("planner/paper_size", |b| {
        let time_left = Duration::from_millis(cfg.time_limit_ms);
        b.iter(|| black_box(plan(black_box(&inst), &cfg, time_left)))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(10)).sample_size(50);
    targets = bench
}
criterion_main!(benches);
