//! `[registry]`: cameras and RTSP users kept on the shared storage root, changed at runtime
//! through the admin API and `vigil ctl` (the `vigil-registry` crate), instead of
//! `[[camera]]` and `[[auth.user]]` in every node's file.

use crate::ConfigError;
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// Take the cameras and users from the registry in `<[storage] root>/registry/`. On the
    /// first start with an empty registry, this file's `[[camera]]` and `[[auth.user]]`
    /// seed it; from then on the registry is what counts and they are ignored.
    pub enabled: bool,
    /// How often the node looks for a newer version on the share (ms).
    pub poll_ms: u64,
    /// The key camera passwords are sealed with in the registry files: 64 hex digits, in
    /// this key or in the first line of `secret_key_file`; every node of a cluster needs the
    /// same. Unset: derived from `[cluster] key`; with neither, a camera URL with a
    /// password is refused.
    pub secret_key: String,
    pub secret_key_file: Option<PathBuf>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            poll_ms: 500,
            secret_key: String::new(),
            secret_key_file: None,
        }
    }
}

/// Where the key of sealed camera passwords comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretKeySource {
    /// `secret_key` or `secret_key_file`: the key itself.
    Key([u8; 32]),
    /// `[cluster] key`: the registry derives its key from it.
    ClusterKey(String),
    /// No key: passwords cannot be stored.
    None,
}

impl RegistryConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(50..=60_000).contains(&self.poll_ms) {
            return Err(ConfigError::Invalid(
                "registry.poll_ms must be between 50 and 60000".into(),
            ));
        }
        if !self.secret_key.is_empty() {
            parse_key(&self.secret_key)?;
        }
        if !self.secret_key.is_empty() && self.secret_key_file.is_some() {
            return Err(ConfigError::Invalid(
                "registry: give secret_key or secret_key_file, not both".into(),
            ));
        }
        Ok(())
    }

    /// The sealing key: `secret_key`, else `secret_key_file`'s first line, else the cluster
    /// key when `cluster_key` is given (the cluster is on).
    pub fn secret_key(&self, cluster_key: Option<&str>) -> Result<SecretKeySource, ConfigError> {
        if !self.secret_key.is_empty() {
            return parse_key(&self.secret_key).map(SecretKeySource::Key);
        }
        if let Some(path) = &self.secret_key_file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.display().to_string(),
                source,
            })?;
            return parse_key(text.lines().next().unwrap_or("")).map(SecretKeySource::Key);
        }
        Ok(match cluster_key.filter(|k| !k.is_empty()) {
            Some(k) => SecretKeySource::ClusterKey(k.to_string()),
            None => SecretKeySource::None,
        })
    }
}

fn parse_key(hex: &str) -> Result<[u8; 32], ConfigError> {
    let hex = hex.trim();
    let bad = || {
        ConfigError::Invalid(
            "registry.secret_key: 64 hex digits (e.g. `openssl rand -hex 32`)".into(),
        )
    };
    if hex.len() != 64 {
        return Err(bad());
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16)
            .map_err(|_| bad())?;
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_comes_from_the_config_the_file_or_the_cluster_key() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let c = RegistryConfig {
            secret_key: hex.into(),
            ..Default::default()
        };
        c.validate().unwrap();
        let SecretKeySource::Key(k) = c.secret_key(Some("ck")).unwrap() else {
            panic!("the configured key wins")
        };
        assert_eq!((k[0], k[1], k[31]), (0x00, 0x11, 0xff));
        let none = RegistryConfig::default();
        assert_eq!(
            none.secret_key(Some("ck")).unwrap(),
            SecretKeySource::ClusterKey("ck".into())
        );
        assert_eq!(none.secret_key(None).unwrap(), SecretKeySource::None);
        for bad in ["abc", &"g".repeat(64)] {
            let c = RegistryConfig {
                secret_key: bad.to_string(),
                ..Default::default()
            };
            assert!(c.validate().is_err(), "{bad}");
        }
    }
}
