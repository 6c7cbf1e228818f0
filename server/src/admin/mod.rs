//! Admin HTTP API (JSON) and Prometheus `/metrics`, and the views `vigil ctl` prints.

mod access;
pub mod api;
pub mod audit_api;
mod body;
pub mod cameras_api;
pub mod console;
mod listener;
pub mod metrics;
pub mod migrate_api;
pub mod onvif_api;
pub mod plan_api;
pub mod registry_api;
mod signin;
pub mod token;
pub mod tokens_api;
mod trail;
pub mod views;
pub mod whep_api;
