//! The camera and user registry on the shared root (issue 26 §1–§2), end to end: real
//! nodes, a "camera" node serving the demo clip behind a password, ffmpeg as the viewer
//! ("plays": `ffmpeg -v error` prints nothing and decodes frames).
//!
//! - cameras added, re-pointed, disabled, enabled and removed at runtime, seeded from the
//!   TOML on the first start, and no camera password in the logs, API answers or files;
//! - bad input (ids, schemes, duplicates, a bad import row, concurrent edits) and a
//!   10 000-row import, timed;
//! - a corrupted version on the share: the node keeps the last good one, says so, and a
//!   restart keeps the registry exactly;
//! - two cluster members sharing the root: each applies the other's change within 2 s
//!   (measured), the scheduler binds a camera added at runtime, a concurrent edit loses 409;
//! - three members: a 1 000-camera import and a stream of edits and removals through all
//!   three applied everywhere within 2 s (measured), no packet lost by viewers of a camera
//!   no change names, a re-pointed camera's viewer decodes across it, restarts keep it all.
//!
//! Split by subject: `cameras` (runtime cameras and users), `input` (refusals, imports,
//! concurrent edits), `share` (the files on the share and the nodes sharing it), `scale` (the
//! "done when" run on three members), `tokens` (API tokens, sealed user hashes, sessions
//! ended by a password change).

mod cameras;
mod input;
mod scale;
mod share;
mod support;
mod tokens;
