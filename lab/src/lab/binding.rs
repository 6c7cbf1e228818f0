//! The gateway lab's starting point (§B): wait until the scheduler has bound every pull
//! camera and its node pulls it, then make the manual binding both arms start from, every
//! gateway bound to as many cameras as the tours leave even, by the operator's move.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use vigil_sim::gateway::GatewaySpec;

use super::nodes::{self, node_id, Cluster};

/// Camera → the node it is bound to and live on, as node 0 shows it, once all are.
pub fn wait_all_live(cluster: &Cluster, cameras: usize) -> anyhow::Result<BTreeMap<String, usize>> {
    let ids = cluster.ids();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held: BTreeMap<String, usize> = nodes::get_json(&cluster.nodes[0].api, "/api/cameras")
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|c| c["state"] == "live")
            .filter_map(|c| {
                let k = ids
                    .iter()
                    .position(|i| Some(i.as_str()) == c["node"].as_str())?;
                Some((c["camera"].as_str()?.to_string(), k))
            })
            .collect();
        if held.len() == cameras {
            return Ok(held);
        }
        if Instant::now() > deadline {
            let states = nodes::get_json(&cluster.nodes[0].api, "/api/cameras")
                .map(|v| v.to_string())
                .unwrap_or_default();
            bail!(
                "{} of {cameras} cameras live on the nodes after 60 s; node 0's /api/cameras: {states}",
                held.len()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How many cameras each gateway is bound to for the run: its tours' cameras at least, the
/// rest dealt so the gateways are as even as can be (the paper's 100 per gateway).
fn targets(need: &[usize], cameras: usize) -> Vec<usize> {
    let mut t = need.to_vec();
    for _ in 0..cameras.saturating_sub(need.iter().sum()) {
        if let Some(k) = (0..t.len()).min_by_key(|&k| (t[k], k)) {
            t[k] += 1;
        }
    }
    t
}

/// The manual binding both arms start from, and each gateway's tour cameras: node k bound
/// to `targets` cameras, the first `tours_per_node[k] × cameras_per_tour` of them in tours.
/// The scheduler's own binding is kept where it fits; the rest is moved by the operator's
/// move (`POST /api/cluster/cameras/{camera}/move`, the same two steps as §B.5), several at
/// once. Returns the tour cameras per node and the cameras moved.
pub fn deal_cameras(
    cluster: &Cluster,
    g: &GatewaySpec,
    held: &BTreeMap<String, usize>,
) -> anyhow::Result<(Vec<Vec<String>>, usize)> {
    let n = cluster.nodes.len();
    let cpt = g.cameras_per_tour as usize;
    let need: Vec<usize> = g.tours_per_node.iter().map(|&t| t as usize * cpt).collect();
    let target = targets(&need, held.len());
    let mut on: Vec<Vec<String>> = vec![Vec::new(); n];
    for (c, &k) in held {
        on[k].push(c.clone());
    }
    let mut moves = Vec::new();
    for k in 0..n {
        while on[k].len() < target[k] {
            let Some(from) = (0..n).find(|&j| on[j].len() > target[j]) else {
                bail!("not enough cameras for the tours: {need:?} needed");
            };
            let cam = on[from].pop().unwrap_or_default();
            moves.push((cam.clone(), node_id(k)));
            on[k].push(cam);
        }
    }
    let api = &cluster.nodes[0].api;
    for batch in moves.chunks(8) {
        std::thread::scope(|s| {
            let handles: Vec<_> = batch
                .iter()
                .map(|(cam, to)| s.spawn(move || move_camera(api, cam, to)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| bail!("a move's thread panicked"))
                })
                .collect::<anyhow::Result<Vec<()>>>()
        })?;
    }
    Ok((
        (0..n).map(|k| on[k][..need[k]].to_vec()).collect(),
        moves.len(),
    ))
}

/// The operator's move of `cam` to node `to`, through the scheduler.
fn move_camera(api: &str, cam: &str, to: &str) -> anyhow::Result<()> {
    let answer = vigil_server::ctl::post(
        api,
        Some(nodes::TOKEN),
        &format!("/api/cluster/cameras/{cam}/move"),
        &serde_json::json!({ "to": to }),
    )
    .with_context(|| format!("moving {cam} to {to}"))?;
    let r: vigil_server::cluster::CameraMoveRecord =
        serde_json::from_str(&answer).context("the move's answer")?;
    if r.result != "moved" {
        bail!("moving {cam} to {to}: {}", r.result);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::targets;

    #[test]
    fn targets_even_out_what_the_tours_leave() {
        assert_eq!(targets(&[20, 10, 4, 2], 100), [25, 25, 25, 25]);
        assert_eq!(targets(&[20, 10, 4, 2], 50), [20, 10, 10, 10]);
        assert_eq!(targets(&[4, 2], 8), [4, 4]);
        assert_eq!(targets(&[4, 2], 5), [4, 2]);
    }
}
