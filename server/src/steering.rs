//! What a session's RTSP connection lends to the code that steers its media from outside
//! (migration's moves and take-backs): the session's identity and its sender, typed by
//! what it sends. `rtsp` builds a [`Steered`] from its session and hands it, with the
//! [`SessionCommand`](crate::node::command::SessionCommand) it received, to the
//! [`CommandHandler`] `migrate` registers in `node::extensions` at start-up. So neither
//! module names the other: both name this one, and it names only the senders (`playback`,
//! `live_sender`) and the node below them (checked by `layering.rs`).

use crate::cluster::Cluster;
use crate::live_sender::LiveSender;
use crate::node::command::SessionCommand;
use crate::node::{Node, PathEntry, SessionInfo};
use crate::playback::sender::Playback;
use crate::playback::task::UdpOut;
use crate::playback::SessionCore;
use std::sync::Arc;

/// A session, borrowed from its connection for the length of one command (the connection
/// reads nothing meanwhile).
pub struct Steered<'a> {
    pub info: &'a Arc<SessionInfo>,
    pub media: SteeredMedia<'a>,
}

/// A session's media as a move sees it.
pub enum SteeredMedia<'a> {
    /// A recording played over UDP (or set up and not played yet): its sender, and the
    /// core that restarts it from the stopped sender's state.
    Playback {
        core: &'a mut SessionCore,
        playback: &'a mut Playback,
    },
    /// A live viewer over UDP.
    Live(LiveViewer<'a>),
    /// TCP-interleaved: the media rides the viewer's RTSP connection to this node.
    Interleaved,
    /// A session that cannot move at all, with why (said to the operator as is).
    Unmovable(&'static str),
}

/// A live UDP viewer's sender, its outputs and its PAUSE.
pub struct LiveViewer<'a> {
    /// The live path it watches (`live/<camera>`).
    pub path: &'a Arc<PathEntry>,
    pub sender: &'a mut LiveSender,
    /// Where its tracks go at the client, from this node's server ports.
    pub outs: &'a [UdpOut],
    /// A sender that takes over starts paused too.
    pub paused: bool,
}

/// Carries out a command sent to a session from outside its connection; a node without
/// one drops the command (its sender sees the reply channel close).
pub struct CommandHandler(pub HandleCommand);

/// The signature of a [`CommandHandler`].
pub type HandleCommand = for<'a> fn(
    &'a Arc<Node>,
    Option<&'a Arc<Cluster>>,
    Steered<'a>,
    SessionCommand,
) -> futures::future::BoxFuture<'a, ()>;
