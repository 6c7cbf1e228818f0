//! Builders shared by the integration tests.
#![allow(dead_code)]

use vigil_cluster::{ClusterView, LoadWeights, NodeView, Stream, StreamSource};

/// Bord of every test node: 1 Gb/s. With VBR 4 Mb/s, ΔLoad = 0.7·100·k·4e6/1e9 =
/// 0.28 on a hit (k = 1), 0.56 on a miss (k = 2).
pub const BORD: f64 = 1e9;
pub const VBR: f64 = 4e6;
pub const HIT: f64 = 0.28;
pub const MISS: f64 = 0.56;

pub fn stream(camera: &str, position_ms: i64) -> Stream {
    Stream {
        camera: camera.into(),
        position_ms,
        vbr_bps: VBR,
        source: StreamSource::Storage,
        session: None,
    }
}

/// A node whose Load is pinned to `load` (as after a scheduler estimate) and which plays
/// `playing` = [(camera, position)].
pub fn node(id: &str, load: f64, playing: &[(&str, i64)]) -> NodeView {
    let mut n = NodeView::new(id, BORD);
    n.estimated_load = Some(load);
    n.streams = playing.iter().map(|&(c, p)| stream(c, p)).collect();
    n.sessions = n.streams.len() as u32;
    n
}

pub fn view(nodes: Vec<NodeView>) -> ClusterView {
    ClusterView::new(nodes, LoadWeights::default())
}

pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}
