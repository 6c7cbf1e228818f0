//! `[onvif]`: how a node talks to ONVIF cameras when it onboards them (`POST
//! /api/cameras/{id}/onvif`, `vigil ctl camera add --onvif`) and discovers them (`POST
//! /api/onvif/discover`, `vigil ctl discover`).

use crate::ConfigError;
use serde::Deserialize;
use std::net::{IpAddr, Ipv4Addr};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OnvifConfig {
    /// The local IPv4 address WS-Discovery probes leave from: its interface carries the
    /// multicast to 239.255.255.250:3702 (the camera network's). 0.0.0.0: the interface
    /// of the default route.
    pub discovery_address: IpAddr,
    /// How long a probe collects ProbeMatches (ms), unless the request asks for less.
    pub discovery_timeout_ms: u64,
    /// Each SOAP request to a device: connect, send and read the answer within this (ms).
    pub request_timeout_ms: u64,
}

impl Default for OnvifConfig {
    fn default() -> Self {
        Self {
            discovery_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            discovery_timeout_ms: 2000,
            request_timeout_ms: 5000,
        }
    }
}

impl OnvifConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !self.discovery_address.is_ipv4() {
            return Err(ConfigError::Invalid(
                "onvif.discovery_address must be an IPv4 address (WS-Discovery's multicast group is IPv4 here)".into(),
            ));
        }
        if !(100..=10_000).contains(&self.discovery_timeout_ms) {
            return Err(ConfigError::Invalid(
                "onvif.discovery_timeout_ms must be between 100 and 10000".into(),
            ));
        }
        if !(100..=60_000).contains(&self.request_timeout_ms) {
            return Err(ConfigError::Invalid(
                "onvif.request_timeout_ms must be between 100 and 60000".into(),
            ));
        }
        Ok(())
    }
}
