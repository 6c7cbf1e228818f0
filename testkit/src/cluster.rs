//! A cluster of harness nodes on 127.0.0.x: the `[cluster]` table each member starts with
//! (gossip seeded by the first member, priority by position, QUIC with certificates when
//! given), and what a member's `/api/cluster/nodes` says of the others, the formation the
//! harnesses wait for.

use crate::certs::Certs;

/// Member `i`'s `[cluster]` table.
pub struct Member<'a> {
    /// Gossip `ip:port` of this member.
    pub gossip: &'a str,
    /// The gossip address of a member already running (none for the first).
    pub seed: Option<&'a str>,
    /// The cluster key (gossip and redirect markers).
    pub key: &'a str,
    /// Lower is preferred as scheduler.
    pub priority: u32,
    /// QUIC node-to-node calls: the `ip:port` to listen on, the certificates and this
    /// member's id in them.
    pub rpc: Option<(&'a str, &'a Certs, &'a str)>,
    /// Further keys of the `[cluster]` table (policy, Bord…).
    pub keys: &'a str,
}

impl Member<'_> {
    /// The table's text, ending with a newline.
    pub fn table(&self) -> String {
        let seeds = self.seed.map(|s| format!("\"{s}\"")).unwrap_or_default();
        let mut t = format!(
            "[cluster]\nenabled = true\ngossip_listen = \"{}\"\nseeds = [{seeds}]\nkey = \"{}\"\npriority = {}\n",
            self.gossip, self.key, self.priority
        );
        if let Some((rpc, certs, id)) = self.rpc {
            t.push_str(&format!(
                "rpc_listen = \"{rpc}\"\nca_cert = \"{}\"\nnode_cert = \"{}\"\nnode_key = \"{}\"\n",
                certs.ca_pem().display(),
                certs.cert(id).display(),
                certs.key(id).display()
            ));
        }
        t.push_str(self.keys);
        t.push('\n');
        t
    }
}

/// Ids of the members a `/api/cluster/nodes` answer shows alive with a report (an RTSP
/// URL), in its order.
pub fn alive_ids(view: &serde_json::Value) -> Vec<String> {
    view["nodes"].as_array().map_or_else(Vec::new, |a| {
        a.iter()
            .filter(|x| x["alive"] == true && x["rtsp"].is_string())
            .map(|x| x["id"].as_str().unwrap_or("").to_string())
            .collect()
    })
}

/// The scheduler a `/api/cluster/nodes` answer names.
pub fn scheduler(view: &serde_json::Value) -> Option<&str> {
    view["scheduler"].as_str()
}

/// Whether a member's view shows `members` alive and `first` elected.
pub fn formed(view: &serde_json::Value, members: usize, first: &str) -> bool {
    alive_ids(view).len() == members && scheduler(view) == Some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_without_certificates_has_no_rpc_keys() {
        let t = Member {
            gossip: "127.0.0.2:7000",
            seed: Some("127.0.0.1:7000"),
            key: "k",
            priority: 20,
            rpc: None,
            keys: "policy = \"least-load\"",
        }
        .table();
        assert_eq!(
            t,
            "[cluster]\nenabled = true\ngossip_listen = \"127.0.0.2:7000\"\nseeds = [\"127.0.0.1:7000\"]\nkey = \"k\"\npriority = 20\npolicy = \"least-load\"\n"
        );
    }

    #[test]
    fn formation_needs_every_member_alive_and_the_first_elected() {
        let view = serde_json::json!({
            "scheduler": "a",
            "nodes": [
                {"id": "a", "alive": true, "rtsp": "rtsp://x"},
                {"id": "b", "alive": true, "rtsp": null},
            ]
        });
        assert_eq!(alive_ids(&view), ["a"]);
        assert!(formed(&view, 1, "a"));
        assert!(!formed(&view, 2, "a"));
        assert!(!formed(&view, 1, "b"));
    }
}
