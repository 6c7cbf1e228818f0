//! The registry of cameras, users and API tokens that every node of a cluster reads from the
//! shared storage root (issue 26 §1), and a single node uses the same way.
//!
//! Pure parts, unit-tested without a node: the model and its checks (`model`, on
//! `vigil_conf::check_camera` / `check_user`, the same rules as the TOML), the file format
//! (`format`: a header line with the version, length and SHA-256 of the JSON body that
//! follows), the operators' edits (`edit`: add, set, remove, import — each all or nothing),
//! imports from CSV and JSON with the row and field of the first refusal (`import`), the
//! difference between two versions as what a node must do (`diff`), sealed camera
//! passwords (`secret`) and users' sealed hashes in the files (`stored`). `dir` is the blocking I/O on the share: versions created by hard
//! link (the compare-and-set), the newest good version found, the change log.
//!
//! Why files on the share and not a consensus store: every node already mounts the root
//! and trusts it with the recordings; a registry beside them adds no service to run, secure
//! or keep alive, works for one node as for fifty, and survives any number of node losses.
//! A write is a `link(2)` of a complete, fsynced file to the next version's name: the
//! server-side atomic create of local file systems and NFS (as the storage leases), so two
//! writers of one version cannot both win, whatever the clients cache.

pub mod diff;
pub mod dir;
pub mod edit;
pub mod format;
pub mod import;
pub mod model;
pub mod secret;
mod stored;

pub use diff::{diff, Action};
pub use dir::{ChangeRecord, Loaded, RegistryDir};
pub use edit::{apply, CameraPatch, ChangeItem, Edit, UserInput, UserPatch};
pub use model::{resolve, Registry, StoredCamera};
pub use secret::{SecretError, SecretKey};

use thiserror::Error;

/// A refused field: which row of an import (1-based; None for a single edit), which
/// camera or user, which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}{what} {id:?}: {field}: {message}", row.map_or(String::new(), |r| format!("row {r}: ")))]
pub struct FieldError {
    pub row: Option<usize>,
    /// "camera", "user" or "token".
    pub what: &'static str,
    pub id: String,
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn camera(id: &str, field: &str, message: impl Into<String>) -> FieldError {
        FieldError {
            row: None,
            what: "camera",
            id: id.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn user(name: &str, field: &str, message: impl Into<String>) -> FieldError {
        FieldError {
            row: None,
            what: "user",
            id: name.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn token(name: &str, field: &str, message: impl Into<String>) -> FieldError {
        FieldError {
            row: None,
            what: "token",
            id: name.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn at_row(mut self, row: usize) -> FieldError {
        self.row = Some(row);
        self
    }
}

impl From<vigil_conf::CameraFieldError> for FieldError {
    fn from(e: vigil_conf::CameraFieldError) -> Self {
        FieldError::camera(&e.camera, e.field, e.message)
    }
}

impl From<vigil_conf::TokenFieldError> for FieldError {
    fn from(e: vigil_conf::TokenFieldError) -> Self {
        FieldError::token(&e.token, e.field, e.message)
    }
}

impl From<vigil_conf::UserFieldError> for FieldError {
    fn from(e: vigil_conf::UserFieldError) -> Self {
        FieldError::user(&e.user, e.field, e.message)
    }
}

/// Why an edit, a read or a write of the registry failed. The API maps the kinds to 400,
/// 404 and 409; the text is what the operator reads (no secret in it).
#[derive(Debug, Error)]
pub enum RegistryError {
    #[error("{0}")]
    Invalid(#[from] FieldError),
    #[error("{what} {id:?} does not exist")]
    NotFound { what: &'static str, id: String },
    #[error("{what} {id:?} already exists")]
    Exists { what: &'static str, id: String },
    /// Compare-and-set lost: someone else wrote version `current` first.
    #[error("the registry changed: it is at version {current} now (re-read and retry)")]
    Conflict { current: u64 },
    #[error("registry file {path}: {why}")]
    Corrupt { path: String, why: String },
    #[error("registry {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl RegistryError {
    pub(crate) fn io(
        what: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.display().to_string();
        move |source| RegistryError::Io { what, path, source }
    }
}
