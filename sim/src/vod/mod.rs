//! §A in virtual time: closed-loop playback clients on a ramp, placed by the unchanged
//! `vigil_cluster::place` (and moved by `rem_step` for the `+rem` arms) over a
//! `ClusterView` rebuilt from the simulated nodes' reports; each node's playback cache is
//! the real `vigil-cache` LRU; storage is a FIFO with latency and bandwidth.
//!
//! Model choices (said in every report):
//! - A request is `Req(camera, T)` with T the start of the chosen recording (§A testbed).
//! - Response time = DESCRIBE to a random entry node (+ one node round trip to ask the
//!   scheduler, + a round trip for the 302 when placed elsewhere) + DESCRIBE, SETUP, PLAY on
//!   the chosen node, where DESCRIBE needs the first segment (cache or storage), + the
//!   first RTP packet of the keyframe over the node's remaining bandwidth: the instant the
//!   lab measures (`vigil lab`, connect → first packet beginning a keyframe). Each request
//!   costs `request_ms / (1 − ρ)` on a node whose utilisation ρ = max(C, N).
//! - A node's report (§A.1: C from the bytes it moves, M from its cache, N from its
//!   streams, a stream counted as storage-read when its last segment missed the cache)
//!   is built within `report_ms` of any change and reaches the scheduler `report_delay_ms`
//!   later (gossip), replacing what the scheduler had placed on the node since it was
//!   built; REM runs on each such report.

mod metrics;
mod reports;
mod sessions;
mod storage;

use std::collections::{HashMap, HashSet};

use rand::rngs::StdRng;
use vigil_cluster::{
    apply, place, ClusterConfig, ClusterView, Decision, NodeView, PlaceState, Request,
};

use crate::cache::SimCache;
use crate::dist::{client_rng, offset, policy_rng, Ask, Asker};
use crate::engine::{secs, Micros, Queue, MS, SEC};
use crate::report::SessionRow;
use crate::scenario::{Arm, Scenario};

pub use metrics::{quantile, vod_report, ArmResult, StepAcc, StepFigures, TRACE_NODES};

/// Recordings start here (ms since the epoch): 2026-01-01T00:00:00Z.
pub const EPOCH_MS: i64 = 1_767_225_600_000;
/// Where recording `rec` of every camera starts (ms since the epoch): the recordings
/// follow each other an hour apart (the lab writes them there).
pub fn recording_start_ms(sc: &Scenario, rec: usize) -> i64 {
    let span = (sc.workload.recording_secs * 1000.0).round() as i64 + 3_600_000;
    EPOCH_MS + rec as i64 * span
}

/// The scheduler runs on node 0 (election is not what is measured).
const SCHEDULER: usize = 0;
/// Metrics are sampled this often.
const SAMPLE: Micros = SEC;

#[derive(Debug, Clone, Copy)]
enum Ev {
    Request {
        client: u32,
    },
    Need {
        session: u32,
        gen: u32,
        seg: u32,
    },
    Resume {
        session: u32,
        gen: u32,
        seg: u32,
    },
    LoadDone {
        node: u32,
        media: u32,
        seg: u32,
    },
    Vcr {
        session: u32,
        scale: f64,
    },
    End {
        session: u32,
    },
    Gossip,
    /// A report built `report_delay_ms` ago reaches the scheduler.
    Deliver {
        report: u32,
    },
    Sample,
    Step {
        step: u32,
    },
}

struct Node {
    id: String,
    cache: SimCache,
    sessions: Vec<u32>,
    /// Σ VBR·k of its streams (§A.1 eq. 2 numerator), kept current on every change.
    net_bps: f64,
    /// Bytes moved per second (sent + read from storage), for C.
    moved_bps: f64,
    dirty: bool,
}

struct Session {
    client: u32,
    cam: u32,
    /// The recording played ([`VodSim::media`]): segments are cached per recording.
    media: u32,
    /// First segment index's recording time (the request's T).
    begin_ms: i64,
    node: u32,
    scale: f64,
    /// Segment being played and when it started playing (virtual µs).
    seg: u32,
    seg_at: Micros,
    playing: bool,
    hit: bool,
    gen: u32,
    row: usize,
    stall_from: Micros,
    alive: bool,
}

struct Client {
    rng: StdRng,
}

/// One arm's run over the whole ramp.
pub struct VodSim<'a> {
    sc: &'a Scenario,
    arm: Arm,
    cfg: ClusterConfig,
    q: Queue<Ev>,
    nodes: Vec<Node>,
    sessions: Vec<Session>,
    clients: Vec<Client>,
    cameras: Vec<String>,
    view: ClusterView,
    place_state: PlaceState,
    policy_rng: StdRng,
    /// (node, camera, segment) → completion time of the read in flight.
    /// Reads in flight by (node, media, segment).
    inflight: HashMap<(u32, u32, u32), Micros>,
    /// Reads in flight of a segment where a session began: protected when they land.
    start_reads: HashSet<(u32, u32, u32)>,
    storage_free_at: Micros,
    /// Reports on their way to the scheduler (`report_delay_ms`), by number: the node, when
    /// it was built, the report.
    in_transit: HashMap<u32, (usize, Micros, NodeView)>,
    next_report: u32,
    /// Placements of the last `report_delay_ms` (node, when, load added, decision): a
    /// report built before one does not show it, and the scheduler keeps it over that
    /// report (the server's `cluster::reservations::carry_over`).
    placed: Vec<(usize, Micros, f64, Decision)>,
    asker: Asker,
    seg_us: Micros,
    seg_ms: i64,
    segs: u32,
    seg_bytes: usize,
    step: usize,
    active: u32,
    pub rows: Vec<SessionRow>,
    pub m: metrics::Acc,
}

impl<'a> VodSim<'a> {
    pub fn new(sc: &'a Scenario, arm: Arm) -> Self {
        let w = &sc.workload;
        let n = &sc.nodes;
        let nodes: Vec<Node> = (0..n.count)
            .map(|i| Node {
                id: format!("n{i:04}"),
                cache: SimCache::new(n.cache_mb * 1024.0 * 1024.0, n.cache_start_share),
                sessions: Vec::new(),
                net_bps: 0.0,
                moved_bps: 0.0,
                dirty: false,
            })
            .collect();
        let cameras = (0..w.cameras).map(|c| format!("cam-{c:06}")).collect();
        let seg_ms = (w.segment_secs * 1000.0).round() as i64;
        let steps = sc.ramp.as_ref().map_or(0, |r| r.steps.len());
        let mut s = Self {
            sc,
            arm,
            cfg: sc.cluster.clone(),
            q: Queue::default(),
            nodes,
            sessions: Vec::new(),
            clients: Vec::new(),
            cameras,
            view: ClusterView::new(Vec::new(), sc.cluster.sched.weights),
            place_state: PlaceState::default(),
            policy_rng: policy_rng(sc.seed),
            inflight: HashMap::new(),
            start_reads: HashSet::new(),
            storage_free_at: 0,
            in_transit: HashMap::new(),
            next_report: 0,
            placed: Vec::new(),
            asker: Asker::new(w, n.count),
            seg_us: secs(w.segment_secs),
            seg_ms,
            segs: ((w.recording_secs * 1000.0) / seg_ms as f64).ceil() as u32,
            seg_bytes: sc.segment_bytes(),
            step: 0,
            active: 0,
            rows: Vec::new(),
            m: metrics::Acc::new(steps),
        };
        let views = (0..s.nodes.len()).map(|i| s.node_view(i)).collect();
        s.view = ClusterView::new(views, sc.cluster.sched.weights);
        s
    }

    /// Runs the ramp to its end; returns the events processed.
    pub fn run(&mut self) -> u64 {
        let Some(r) = self.sc.ramp.clone() else {
            return 0;
        };
        let end = r.end_us();
        self.q.at(0, Ev::Step { step: 0 });
        self.q.at(SAMPLE, Ev::Sample);
        self.q.at(self.sc.nodes.report_ms as i64 * MS, Ev::Gossip);
        while let Some(ev) = self.q.next_until(end) {
            self.handle(ev);
        }
        self.q.processed()
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Step { step } => self.on_step(step as usize),
            Ev::Request { client } => self.on_request(client),
            Ev::Need { session, gen, seg } => {
                if self.sessions[session as usize].gen == gen {
                    self.on_need(session, seg);
                }
            }
            Ev::Resume { session, gen, seg } => {
                if self.sessions[session as usize].gen == gen {
                    self.on_resume(session, seg);
                }
            }
            Ev::LoadDone { node, media, seg } => {
                self.inflight.remove(&(node, media, seg));
                let start = self.seg_time(media, seg);
                let cam_name = &self.cameras[self.camera_of(media) as usize];
                let cache = &self.nodes[node as usize].cache;
                cache.insert(cam_name, start, start + self.seg_ms, self.seg_bytes);
                if self.start_reads.remove(&(node, media, seg)) {
                    cache.protect_start(cam_name, start);
                }
            }
            Ev::Vcr { session, scale } => self.on_vcr(session, scale),
            Ev::End { session } => self.end_session(session),
            Ev::Gossip => {
                self.gossip();
                self.q
                    .after(self.sc.nodes.report_ms as i64 * MS, Ev::Gossip);
            }
            Ev::Deliver { report } => {
                if let Some(r) = self.in_transit.remove(&report) {
                    self.deliver(vec![r]);
                }
            }
            Ev::Sample => {
                self.sample();
                self.q.after(SAMPLE, Ev::Sample);
            }
        }
    }

    /// Segment `seg`'s start, relative to its recording's start (all recordings of the
    /// simulation are laid out alike; the camera and T tell them apart).
    fn seg_start(&self, seg: u32) -> i64 {
        seg as i64 * self.seg_ms
    }

    /// A recording by its index in the workload (camera × recordings per camera + which).
    fn media(&self, cam: u32, rec: u32) -> u32 {
        cam * self.sc.workload.recordings_per_camera as u32 + rec
    }

    fn camera_of(&self, media: u32) -> u32 {
        media / self.sc.workload.recordings_per_camera as u32
    }

    fn rec_begin(&self, rec: u32) -> i64 {
        recording_start_ms(self.sc, rec as usize)
    }

    /// Segment `seg` of recording `media`: its recording time, which with the camera is
    /// the segment's cache key (as a real node's: one camera's recordings are different
    /// segments).
    fn seg_time(&self, media: u32, seg: u32) -> i64 {
        let rec = media % self.sc.workload.recordings_per_camera as u32;
        self.rec_begin(rec) + self.seg_start(seg)
    }

    fn measuring(&self) -> Option<usize> {
        self.sc.ramp.as_ref()?.measured_step(self.q.now())
    }

    fn on_step(&mut self, step: usize) {
        let Some(r) = self.sc.ramp.clone() else {
            return;
        };
        self.step = step;
        let target = r.steps[step];
        // New clients arrive spread over the settle time (or 30 s), never all at once.
        let spread = secs(r.spread());
        while (self.clients.len() as u32) < target {
            let id = self.clients.len() as u64;
            let mut rng = client_rng(self.sc.seed, id);
            let at = self.q.now() + offset(spread, &mut rng);
            self.clients.push(Client { rng });
            self.q.at(at, Ev::Request { client: id as u32 });
        }
        self.active = target;
        if step + 1 < r.steps.len() {
            self.q.at(
                secs(r.step_secs) * (step as i64 + 1),
                Ev::Step {
                    step: step as u32 + 1,
                },
            );
        }
    }

    fn on_request(&mut self, client: u32) {
        if client >= self.active {
            return;
        }
        let now = self.q.now();
        let w = &self.sc.workload;
        // A fixed set of draws per request from the client's own stream: every arm sees the
        // same requests, lengths, VCR changes and pauses.
        let Ask {
            recording: pick,
            length_s: length,
            vcr,
            think_s: think,
            entry,
        } = self.asker.ask(&mut self.clients[client as usize].rng);
        let cam = (pick / w.recordings_per_camera) as u32;
        let rec = (pick % w.recordings_per_camera) as u32;
        let media = self.media(cam, rec);
        let begin_ms = self.rec_begin(rec);
        let vbr = w.bitrate_mbps * 1e6;
        let req = Request::playback(self.cameras[cam as usize].clone(), begin_ms, vbr);
        let Arm::Place { policy, rem: _ } = self.arm else {
            return;
        };
        let d = place(
            &self.view,
            &req,
            policy,
            &mut self.place_state,
            &self.cfg,
            &mut self.policy_rng,
        );
        let step_label = self.sc.ramp.as_ref().map_or(String::new(), |r| {
            r.steps
                .get(self.step)
                .map_or(String::new(), |s| s.to_string())
        });
        let mut row = SessionRow {
            policy: self.arm.to_string(),
            step: step_label,
            session: self.sessions.len() as u64,
            client: u64::from(client),
            camera: req.camera.clone(),
            time_ms: begin_ms,
            requested_s: now as f64 / SEC as f64,
            scale: 1.0,
            ..SessionRow::default()
        };
        let measuring = self.measuring();
        let Decision::Assign { node, .. } = &d else {
            row.rejected = true;
            row.session = u64::MAX;
            self.rows.push(row);
            if let Some(s) = measuring {
                self.m.steps[s].rejected += 1;
                self.m.steps[s].requests += 1;
            }
            self.q.after(secs(think.max(1.0)), Ev::Request { client });
            return;
        };
        let Some(n) = self.view.index_of(node) else {
            return;
        };
        let before = self.view.load(n);
        let _ = apply(&mut self.view, &d);
        if self.sc.nodes.report_delay_ms > 0 {
            let keep = now - self.sc.nodes.report_delay_ms as i64 * MS;
            self.placed.retain(|(_, at, _, _)| *at >= keep);
            let delta = self.view.load(n) - before;
            self.placed.push((n, now, delta, d.clone()));
        }
        let sid = self.sessions.len() as u32;
        // Response time (module doc).
        let rtt = secs(w.rtt_ms / 1000.0);
        let mut pre = rtt + self.proc(entry);
        if entry != SCHEDULER {
            pre += rtt;
        }
        let redirected = n != entry;
        if redirected {
            pre += 2 * rtt;
        }
        // The chosen node reads the first segment when the DESCRIBE reaches it.
        let (hit, avail) = self.fetch_at(n as u32, media, 0, true, now + pre);
        // As a node's `open_segment`: the segment a playback began at is protected.
        if hit {
            let cam_name = &self.cameras[cam as usize];
            self.nodes[n].cache.protect_start(cam_name, begin_ms);
        } else {
            self.start_reads.insert((n as u32, media, 0));
        }
        let proc_n = self.proc(n);
        let describe_done = (now + pre + proc_n).max(avail);
        let first = describe_done + 2 * (rtt + proc_n) + self.first_packet(n) + rtt / 2;
        let response = first - now;
        row.node = self.nodes[n].id.clone();
        row.redirected = redirected;
        row.first_hit = hit;
        row.response_ms = Some(response as f64 / MS as f64);
        if let Some(s) = measuring {
            let st = &mut self.m.steps[s];
            st.requests += 1;
            st.responses.push(response as f64 / MS as f64);
            st.first_hits += u64::from(hit);
        }
        self.rows.push(row);
        self.sessions.push(Session {
            client,
            cam,
            media,
            begin_ms,
            node: n as u32,
            scale: 1.0,
            seg: 0,
            seg_at: first,
            playing: true,
            hit,
            gen: 0,
            row: self.rows.len() - 1,
            stall_from: 0,
            alive: true,
        });
        self.attach(sid, n);
        self.read_ahead(n as u32, media, 0);
        self.q.at(
            first + self.seg_us,
            Ev::Need {
                session: sid,
                gen: 0,
                seg: 1,
            },
        );
        if let Some((scale, vcr_at)) = vcr {
            self.q.at(
                first + secs(vcr_at),
                Ev::Vcr {
                    session: sid,
                    scale,
                },
            );
        }
        self.q.at(first + secs(length), Ev::End { session: sid });
        self.m.think.insert(sid, think);
    }

    /// A node's per-request service time at its current utilisation.
    fn proc(&self, n: usize) -> Micros {
        let rho = self.utilisation(n).min(0.98);
        secs(self.sc.nodes.request_ms / 1000.0 / (1.0 - rho))
    }

    /// ρ = max(C, N). On a shared host Bord is a configured figure, not a link (the lab's
    /// nodes talk over loopback), so nothing queues on it: ρ = C.
    fn utilisation(&self, n: usize) -> f64 {
        let cpu = self.cpu(n);
        if self.sc.nodes.shared_host {
            return cpu;
        }
        let node = &self.nodes[n];
        cpu.max(node.net_bps / self.bord(n))
    }

    /// The keyframe's first RTP packet (an MTU) over what is left of the node's link.
    fn first_packet(&self, n: usize) -> Micros {
        const PACKET_BITS: f64 = 1400.0 * 8.0;
        if self.sc.nodes.shared_host {
            return 0;
        }
        let bord = self.bord(n);
        let free = (1.0 - self.nodes[n].net_bps / bord).max(0.02);
        secs(PACKET_BITS / (bord * free))
    }

    /// λ (§A.2 eq. 3) and mean Load as the scheduler sees them: its view of each node (the
    /// last report, plus the decisions placed and moves made since), which is what the lab
    /// samples from the real scheduler (`/api/cluster/nodes`).
    fn sample(&mut self) {
        let Some(s) = self.measuring() else {
            return;
        };
        // The nodes' N and C inputs, which request timing reads, kept current once a second
        // as before; the loads sampled are the scheduler's, not these.
        for i in 0..self.nodes.len() {
            self.refresh(i);
        }
        let loads: Vec<f64> = (0..self.view.len()).map(|i| self.view.load(i)).collect();
        let st = &mut self.m.steps[s];
        st.samples += 1;
        st.variance_sum += vigil_cluster::load_variance(&loads);
        st.load_sum += loads.iter().sum::<f64>() / loads.len() as f64;
        st.load_max_sum += loads.iter().copied().fold(0.0, f64::max);
        if loads.len() <= metrics::TRACE_NODES {
            let now = self.q.now() as f64 / SEC as f64;
            self.m.load_trace.push((now, loads));
        }
    }
}

/// Runs every arm of a vod scenario; returns their results.
pub fn run_vod(sc: &Scenario) -> Vec<ArmResult> {
    sc.arms()
        .into_iter()
        .map(|arm| {
            let wall = std::time::Instant::now();
            let mut sim = VodSim::new(sc, arm);
            let events = sim.run();
            ArmResult::from_sim(arm, sim, events, wall.elapsed())
        })
        .collect()
}
