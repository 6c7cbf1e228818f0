//! What the registry holds: cameras as stored (the source URL without its password, the
//! password sealed beside it), users (HA1 hashes, rights) and API tokens (hashes, rights), and the node's resolved view
//! of them (`vigil_conf::CameraConfig` with the password back in the URL, in memory only).

use crate::secret::{join_password, SecretKey};
use crate::{FieldError, RegistryError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use vigil_conf::{CameraConfig, TokenConfig, UserConfig};

/// A camera as the registry file holds it: `camera.source` never carries a password.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredCamera {
    pub camera: CameraConfig,
    /// The URL's password sealed with the node's registry key (`secret`), bound to the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_password: Option<String>,
}

/// One version of the registry, as stored (`format` puts the version and checksum around
/// it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registry {
    pub cameras: BTreeMap<String, StoredCamera>,
    /// In clear here; sealed in the files (`stored`).
    pub users: BTreeMap<String, UserConfig>,
    /// API tokens (the SHA-256 of each secret), honoured by every node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tokens: BTreeMap<String, TokenConfig>,
}

impl Registry {
    /// Every camera and user passes the TOML's rules, keyed by its own id, and no stored
    /// URL carries a password: a file that fails this is refused like a bad checksum.
    pub fn check(&self) -> Result<(), FieldError> {
        for (id, c) in &self.cameras {
            vigil_conf::check_camera(&c.camera)?;
            if *id != c.camera.id {
                return Err(FieldError::camera(id, "id", "stored under another id"));
            }
            if let vigil_conf::Source::Pull { url } = &c.camera.source {
                if crate::secret::split_password(url).1.is_some() {
                    return Err(FieldError::camera(id, "source", "a password in clear"));
                }
            }
        }
        for (name, u) in &self.users {
            vigil_conf::check_user(u)?;
            if *name != u.name {
                return Err(FieldError::user(name, "name", "stored under another name"));
            }
        }
        for (name, t) in &self.tokens {
            vigil_conf::check_token(t)?;
            if *name != t.name {
                return Err(FieldError::token(name, "name", "stored under another name"));
            }
        }
        Ok(())
    }
}

/// The cameras as the node uses them: each sealed password opened and put back into its
/// URL. A password that does not open (another key) refuses the whole version, so a node
/// with the wrong key keeps what it had rather than pulling cameras without credentials.
pub fn resolve(
    reg: &Registry,
    key: Option<&SecretKey>,
) -> Result<BTreeMap<String, CameraConfig>, RegistryError> {
    let mut out = BTreeMap::new();
    for (id, stored) in &reg.cameras {
        let mut cam = stored.camera.clone();
        if let Some(sealed) = &stored.sealed_password {
            let key = key.ok_or_else(|| {
                FieldError::camera(
                    id,
                    "source",
                    "its password is sealed and this node has no [registry] secret_key",
                )
            })?;
            let password = key.open(id, sealed).map_err(|e| {
                FieldError::camera(
                    id,
                    "source",
                    format!("{e} (another [registry] secret_key?)"),
                )
            })?;
            if let vigil_conf::Source::Pull { url } = &cam.source {
                cam.source = vigil_conf::Source::Pull {
                    url: join_password(url, &password),
                };
            }
        }
        out.insert(id.clone(), cam);
    }
    Ok(out)
}

/// A camera with its password taken out of the URL and sealed, to be stored.
pub fn seal(cam: &CameraConfig, key: Option<&SecretKey>) -> Result<StoredCamera, FieldError> {
    let mut camera = cam.clone();
    let mut sealed_password = None;
    if let vigil_conf::Source::Pull { url } = &cam.source {
        let (bare, password) = crate::secret::split_password(url);
        if let Some(password) = password {
            let key = key.ok_or_else(|| {
                FieldError::camera(
                    &cam.id,
                    "source",
                    "a camera password needs [registry] secret_key (or a cluster key) to be \
                     stored sealed",
                )
            })?;
            sealed_password = Some(key.seal(&cam.id, &password));
            camera.source = vigil_conf::Source::Pull { url: bare };
        }
    }
    Ok(StoredCamera {
        camera,
        sealed_password,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vigil_conf::Source;

    fn pull(id: &str, url: &str) -> CameraConfig {
        CameraConfig::new(id, Source::Pull { url: url.into() })
    }

    #[test]
    fn a_password_is_sealed_out_of_the_url_and_back_in_memory_only() {
        let key = SecretKey::from_bytes([7; 32]);
        let cam = pull("gate", "rtsp://admin:s3cr%40t@10.0.0.9:554/ch1");
        let stored = seal(&cam, Some(&key)).unwrap();
        let text = serde_json::to_string(&stored).unwrap();
        assert!(!text.contains("s3cr"), "{text}");
        assert!(text.contains("rtsp://admin@10.0.0.9:554/ch1"), "{text}");
        let mut reg = Registry::default();
        reg.cameras.insert("gate".into(), stored);
        reg.check().unwrap();
        assert_eq!(resolve(&reg, Some(&key)).unwrap()["gate"], cam);
        // Another key (another cluster's) refuses the version, naming the camera.
        let e = resolve(&reg, Some(&SecretKey::from_bytes([8; 32]))).unwrap_err();
        assert!(e.to_string().contains("\"gate\": source"), "{e}");
        assert!(resolve(&reg, None).is_err());
        // No key: a password cannot be stored at all; a URL without one can.
        assert_eq!(seal(&cam, None).unwrap_err().field, "source");
        assert!(seal(&pull("x", "rtsp://admin@h/x"), None).is_ok());
    }

    #[test]
    fn a_stored_password_in_clear_or_a_mislabelled_entry_is_refused() {
        let mut reg = Registry::default();
        reg.cameras.insert(
            "a".into(),
            StoredCamera {
                camera: pull("a", "rtsp://u:p@h/x"),
                sealed_password: None,
            },
        );
        assert_eq!(reg.check().unwrap_err().field, "source");
        reg.cameras.clear();
        reg.cameras.insert(
            "a".into(),
            StoredCamera {
                camera: pull("b", "rtsp://h/x"),
                sealed_password: None,
            },
        );
        assert_eq!(reg.check().unwrap_err().field, "id");
    }
}
