//! Placement decision time (issue 4 benchmark): 5, 50 and 500 nodes carrying 10 000
//! sessions over 1 000 cameras, and 50 nodes carrying 100 000 (issue 13), every policy. The view is built once (its per-camera
//! indexes included); each iteration decides one request from a rotating set of 1 024.
//! `describe-view`: the view each DESCRIBE is placed on, rebuilt in full or kept (issue 13).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vigil_cluster::{
    place, ClusterConfig, ClusterView, Decision, Indicators, LoadWeights, NodeView, PlaceState,
    Policy, Request, Stream, StreamSource, ViewCache, ViewEntry,
};

const CAMERAS: usize = 1_000;
/// One day of recordings per camera.
const SPAN_MS: i64 = 86_400_000;

fn build(nodes: usize, sessions: usize, rng: &mut StdRng) -> ClusterView {
    let mut ns: Vec<NodeView> = (0..nodes)
        .map(|i| {
            let mut n = NodeView::new(format!("node-{i}"), 10e9);
            n.cpu = rng.gen_range(0.05..0.5);
            n.mem = rng.gen_range(0.1..0.6);
            n.indicators = Indicators {
                cpu: n.cpu,
                mem: n.mem,
                net: rng.gen_range(0.0..0.9),
                links: rng.gen_range(0.0..0.9),
            };
            n
        })
        .collect();
    for _ in 0..sessions {
        let cam = rng.gen_range(0..CAMERAS);
        let pos = rng.gen_range(0..SPAN_MS);
        let n = &mut ns[rng.gen_range(0..nodes)];
        let source = if rng.gen_bool(0.5) {
            StreamSource::Cache
        } else {
            StreamSource::Storage
        };
        n.streams.push(Stream {
            camera: format!("cam-{cam}"),
            position_ms: pos,
            vbr_bps: 2e6,
            source,
            session: None,
        });
        // Cache-aware: the node holds the minute around each stream it serves.
        n.cached
            .entry(format!("cam-{cam}"))
            .or_default()
            .push((pos - 30_000, pos + 30_000));
        n.sessions += 1;
    }
    for n in &mut ns {
        for r in n.cached.values_mut() {
            r.sort_unstable();
        }
    }
    ClusterView::new(ns, LoadWeights::default())
}

fn bench(c: &mut Criterion) {
    let cfg = ClusterConfig::default();
    let mut g = c.benchmark_group("place");
    for (nodes, sessions) in [
        (5usize, 10_000usize),
        (50, 10_000),
        (500, 10_000),
        (50, 100_000),
    ] {
        let mut rng = StdRng::seed_from_u64(nodes as u64);
        let raw = build(nodes, sessions, &mut rng);
        let id = format!("{nodes}n-{}ks", sessions / 1000);
        // The live scheduler classifies on each report, not on each request.
        let mut view = raw.clone();
        view.classify_nodes(&cfg.knn);
        let reqs: Vec<Request> = (0..1024)
            .map(|_| {
                Request::playback(
                    format!("cam-{}", rng.gen_range(0..CAMERAS)),
                    rng.gen_range(0..SPAN_MS),
                    2e6,
                )
            })
            .collect();
        for policy in Policy::ALL {
            g.bench_with_input(BenchmarkId::new(policy.name(), &id), &view, |b, view| {
                let mut st = PlaceState::default();
                let mut r = StdRng::seed_from_u64(1);
                let mut k = 0usize;
                b.iter(|| {
                    k = (k + 1) & 1023;
                    black_box(place(view, &reqs[k], policy, &mut st, &cfg, &mut r))
                })
            });
        }
        // KNN classifying every node on every request, for comparison.
        g.bench_with_input(
            BenchmarkId::new("knn-class-unindexed", &id),
            &raw,
            |b, view| {
                let mut st = PlaceState::default();
                let mut r = StdRng::seed_from_u64(1);
                let mut k = 0usize;
                b.iter(|| {
                    k = (k + 1) & 1023;
                    black_box(place(
                        view,
                        &reqs[k],
                        Policy::KnnClass,
                        &mut st,
                        &cfg,
                        &mut r,
                    ))
                })
            },
        );
    }
    g.finish();
}

/// The view a node places a DESCRIBE on (issue 13), 50 nodes × 100 000 sessions: built in
/// full from every member's entry (what each DESCRIBE did before), or kept by a
/// [`ViewCache`] and updated for the entries that changed since the last DESCRIBE (none, or
/// one member's new report); and a placed DESCRIBE's decision applied to the view and the
/// chosen node's entry in place, against the copy of that entry it used to store.
fn describe_view(c: &mut Criterion) {
    let mut g = c.benchmark_group("describe-view");
    let w = LoadWeights::default();
    let mut rng = StdRng::seed_from_u64(50);
    let view = build(50, 100_000, &mut rng);
    let mut entries: Vec<ViewEntry> = view.nodes().iter().cloned().map(ViewEntry::new).collect();
    let refs: Vec<&ViewEntry> = entries.iter().collect();
    g.bench_function("full-rebuild/50n-100ks", |b| {
        b.iter(|| {
            black_box(ClusterView::new(
                refs.iter().map(|n| NodeView::clone(n)).collect(),
                w,
            ))
        })
    });
    let mut cache = ViewCache::default();
    cache.sync(&refs, w);
    g.bench_function("incremental-unchanged/50n-100ks", |b| {
        b.iter(|| black_box(cache.sync(&refs, w).len()))
    });
    g.bench_function("incremental-unchanged+entry-copy/50n-100ks", |b| {
        b.iter(|| {
            let v = cache.sync(&refs, w);
            black_box(ViewEntry::new(v.node(7).clone()))
        })
    });
    // Node 3 alternates between two reports: one member's entry rebuilt per DESCRIBE.
    let other = ViewEntry::new(NodeView::clone(&entries[3]));
    let mut alt = refs.clone();
    alt[3] = &other;
    let mut flip = false;
    g.bench_function("incremental-one-changed/50n-100ks", |b| {
        b.iter(|| {
            flip = !flip;
            black_box(cache.sync(if flip { &alt } else { &refs }, w).len())
        })
    });
    drop(alt);
    // What a placed DESCRIBE does now: the kept view (the entries collected as the server
    // does), then the decision applied to it and to node 7's entry in place. Each decision
    // adds a stream, so after each batch node 7 is put back (untimed) to keep the size.
    let original = entries[7].clone();
    let decision = |k: u64| Decision::Assign {
        node: "node-7".into(),
        estimated_load: 50.0,
        reason: String::new(),
        stream: Stream {
            camera: format!("cam-{}", k % CAMERAS as u64),
            position_ms: (k as i64 * 7_919) % SPAN_MS,
            vbr_bps: 2e6,
            source: StreamSource::Storage,
            session: None,
        },
    };
    g.bench_function("incremental-unchanged+apply-in-place/50n-100ks", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for k in 0..iters {
                let d = decision(k);
                let t = Instant::now();
                cache.sync(&entries.iter().collect::<Vec<_>>(), w);
                cache
                    .apply(&mut entries[7], &d)
                    .expect("node-7 is in the view");
                took += t.elapsed();
            }
            entries[7] = original.clone();
            cache.sync(&entries.iter().collect::<Vec<_>>(), w);
            took
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1));
    targets = bench, describe_view
}
criterion_main!(benches);
