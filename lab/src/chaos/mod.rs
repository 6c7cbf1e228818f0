//! `vigil-lab chaos` (issue 25 §3): a seeded fault schedule against a cluster on a bed of
//! hosts, and a checker of what must hold through it. The schedule ([`schedule`]) and the
//! checker ([`checker`]) are pure functions, tested by hand-made cases; the run that drives
//! them over real nodes is their shell.

pub mod checker;
pub mod schedule;
