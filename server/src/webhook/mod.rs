//! Webhooks (issue 26 §4): the node's events posted as signed JSON to the receivers of
//! `[webhooks] urls`, with retry and back-off, never holding the media path.
//!
//! The events come from the node's bus (`node::events`): migrations and registry writes
//! emit where they happen; camera, recording, member and scheduler events are derived by
//! the sampler (`sample`) from the state the API shows. Each receiver has its own thread
//! and queue (`deliver`); what a receiver checks — the body and its HMAC — is sans-IO
//! (`body`), as is the retry schedule (`retry`).

pub mod body;
mod deliver;
pub mod retry;
pub mod sample;

use crate::cluster::Cluster;
use crate::node::events::Event;
use crate::node::Node;
use sample::{Rec, Snapshot};
use std::sync::Arc;
use std::time::Duration;

/// Starts a delivery thread per URL and the sampler; nothing without URLs.
pub fn start(node: &Arc<Node>, cluster: Option<&Arc<Cluster>>) -> anyhow::Result<()> {
    let c = &node.config.webhooks;
    if c.urls.is_empty() {
        return Ok(());
    }
    let key = c.signing_key()?;
    for result in ["delivered", "retried", "given_up"] {
        metrics::counter!("vigil_webhook_deliveries_total", "result" => result).increment(0);
    }
    metrics::counter!("vigil_webhook_dropped_total").increment(0);
    let boot_ms = vigil_storage::now_ms();
    let roots = if c.urls.iter().any(|u| u.starts_with("https://")) {
        let (path, certs) = crate::net::tls_client::ca_certs(node.config.tls.client_ca.as_deref())?;
        anyhow::ensure!(
            !certs.is_empty(),
            "webhooks: no CA certificate in {} to verify https:// receivers",
            path.display()
        );
        let certs = certs
            .iter()
            .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
            .collect();
        Some(Arc::new(certs))
    } else {
        None
    };
    for url in &c.urls {
        let target = deliver::Target {
            url: url.clone(),
            key: key.clone(),
            events: c.events.clone(),
            timeout: Duration::from_millis(c.timeout_ms),
            backoff: retry::Backoff::of(c),
            node_id: node.config.node.id.clone(),
            boot_ms,
            roots: roots.clone(),
        };
        let rx = node.events.subscribe();
        std::thread::Builder::new()
            .name("vigil-webhook".into())
            .spawn(move || deliver::run(target, rx))?;
    }
    tracing::info!(
        receivers = c.urls.len(),
        signed = key.is_some(),
        "webhooks on"
    );
    if cluster.is_none() {
        // No scheduler to report members: a single node announces itself.
        node.events.emit(Event::NodeUp {
            member: node.config.node.id.clone(),
        });
    }
    tokio::spawn(sampler(
        node.clone(),
        cluster.cloned(),
        Duration::from_millis(c.sample_ms),
    ));
    Ok(())
}

/// Samples the node's state every `every` and emits what changed, until shutdown.
async fn sampler(node: Arc<Node>, cluster: Option<Arc<Cluster>>, every: Duration) {
    let mut prev = Snapshot::default();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = node.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let now = snapshot(&node, cluster.as_deref());
        for e in sample::diff(&prev, &now) {
            node.events.emit(e);
        }
        prev = now;
    }
}

fn snapshot(node: &Node, cluster: Option<&Cluster>) -> Snapshot {
    let online = node
        .paths()
        .iter()
        .filter(|p| p.is_held_live())
        .filter_map(|p| p.name.strip_prefix("live/").map(str::to_string))
        .collect();
    let recording = node
        .recordings
        .all()
        .into_iter()
        .filter_map(|s| match s.state.as_str() {
            "recording" => Some((s.camera, Rec::Recording)),
            "error" => Some((s.camera, Rec::Error(s.error.unwrap_or_default()))),
            _ => None,
        })
        .collect();
    let (members, scheduler, is_scheduler) = match cluster {
        Some(c) => {
            let (sched, term) = c.scheduler();
            let is = sched.as_deref() == Some(c.self_id.as_str());
            (
                c.members().into_iter().map(|m| (m.id, m.alive)).collect(),
                sched.map(|s| (s, term)),
                is,
            )
        }
        None => Default::default(),
    };
    Snapshot {
        online,
        recording,
        members,
        scheduler,
        is_scheduler,
    }
}
