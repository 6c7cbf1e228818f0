//! Cluster certificates for nodes started by a harness: one CA and a certificate per node
//! id (the id as its DNS name), made in-process with the node's own code
//! (`vigil_server::cluster::rpc`, what `vigil cluster ca|cert` run).

use std::path::{Path, PathBuf};

use crate::serve::HarnessError;

/// A CA under `DIR/ca` and node certificates under `DIR/certs`.
#[derive(Debug, Clone)]
pub struct Certs {
    ca: PathBuf,
    certs: PathBuf,
}

impl Certs {
    /// Makes a CA under `dir` (node certificates: [`Certs::add`]).
    pub fn ca(dir: &Path) -> Result<Certs, HarnessError> {
        let certs = Certs {
            ca: dir.join("ca"),
            certs: dir.join("certs"),
        };
        vigil_server::cluster::rpc::make_ca(&certs.ca)
            .map_err(|e| HarnessError::Certs(format!("the CA: {e:#}")))?;
        Ok(certs)
    }

    /// Makes the CA and a certificate for every id in `ids` under `dir`.
    pub fn make<S: AsRef<str>>(dir: &Path, ids: &[S]) -> Result<Certs, HarnessError> {
        let certs = Certs::ca(dir)?;
        for id in ids {
            certs.add(id.as_ref())?;
        }
        Ok(certs)
    }

    /// Issues a certificate for node `id`, signed by this CA.
    pub fn add(&self, id: &str) -> Result<(), HarnessError> {
        vigil_server::cluster::rpc::make_node_cert(
            &self.ca,
            id,
            &self.certs,
            &[],
            vigil_server::cluster::rpc::NODE_CERT_DAYS,
        )
        .map_err(|e| HarnessError::Certs(format!("node {id}: {e:#}")))
    }

    /// The directory holding `ca.pem` and `ca.key`.
    pub fn ca_dir(&self) -> &Path {
        &self.ca
    }

    /// The directory holding every node's `ID.pem` and `ID.key`.
    pub fn certs_dir(&self) -> &Path {
        &self.certs
    }

    pub fn ca_pem(&self) -> PathBuf {
        self.ca.join("ca.pem")
    }

    /// Node `id`'s certificate (with the CA's).
    pub fn cert(&self, id: &str) -> PathBuf {
        self.certs.join(format!("{id}.pem"))
    }

    pub fn key(&self, id: &str) -> PathBuf {
        self.certs.join(format!("{id}.key"))
    }
}
