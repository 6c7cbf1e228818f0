//! The RTSP server session of a vigil node as plain code with time passed in.
//!
//! This is the `quinn-proto` half of the node's RTSP service: everything a session
//! *decides* — which method is valid in which state, what a PLAY's Range and Scale ask for
//! and whether the recording can serve it, which RTP identity each track continues with,
//! when the keepalive runs out, when the next frame of a playback is due — and nothing it
//! *does*. No sockets, no tasks, no clock: callers pass `now`, and the node's tokio shell
//! (`vigil-server`'s `rtsp` and `playback` modules) carries out what the core returns:
//! start or stop a sender, bind or release ports, write the answer.
//!
//! A method is handled in three steps so that a refused request changes nothing:
//! **validate** (`Session::check_*`, `&self`: every refusal the core can know),
//! **decide** (pure functions of what the shell read from storage, still `&self`), and
//! **commit** (`Session::commit_*`, `&mut self`, infallible). The shell does its I/O
//! between the steps and commits only when every refusal has been checked.
//!
//! Why a crate of its own rather than a module of `vigil-proto`: the session state holds
//! a shell-chosen resume position (`Session<C>`'s `C`, the recording's cursor) and is about
//! serving, not about the wire format; keeping it apart from the node lets the compiler
//! enforce that it does no I/O, as `vigil-proto` does for the wire format.

pub mod pacer;
pub mod refusal;
pub mod session;
pub mod steer;
pub mod tracks;
pub mod window;

pub use pacer::{Gap, Pacer, RateMeter, Step};
pub use refusal::Refusal;
pub use session::{
    Handback, LivePause, LivePlay, PlayAsk, PlayFrom, PlayPlan, Presentation, Record, SenderWindow,
    Session, Transport,
};
pub use steer::{Act, Control, Retime, Steer, SteerError, SteerState};
pub use tracks::{TrackOut, TrackSetup};
