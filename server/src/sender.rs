//! Who sends a session's media, for playback and live alike: this node (`Local`), the node
//! the session moved to (`Remote`, a handle `migrate` implements behind a trait the sender's
//! module defines), or nobody now (`None`: a paused playback here, or a live viewer between
//! the two halves of a move). One shape, so the session, its move and its take-back read
//! the same way whatever the media; `playback::sender::PlaybackSender` and
//! `live_sender::LiveSender` fill it in.

/// A session's sender; see the module doc.
pub enum Sender<L, R> {
    Local(L),
    Remote(R),
    None,
}

impl<L, R> Sender<L, R> {
    /// The sender, leaving `None` in its place (a move's stop, a take-back).
    pub fn take(&mut self) -> Sender<L, R> {
        std::mem::replace(self, Sender::None)
    }

    pub fn remote(&self) -> Option<&R> {
        match self {
            Sender::Remote(r) => Some(r),
            _ => None,
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self, Sender::Local(_))
    }

    pub fn is_remote(&self) -> bool {
        matches!(self, Sender::Remote(_))
    }
}

#[cfg(test)]
mod tests {
    use super::Sender;

    #[test]
    fn take_leaves_nobody_sending() {
        let mut s: Sender<u8, &str> = Sender::Remote("b");
        assert_eq!(s.remote(), Some(&"b"));
        assert!(matches!(s.take(), Sender::Remote("b")));
        assert!(matches!(s, Sender::None));
        assert!(!s.is_local() && !s.is_remote() && s.remote().is_none());
        let s: Sender<u8, &str> = Sender::Local(1);
        assert!(s.is_local() && s.remote().is_none());
    }
}
