//! Recording and playback end to end (issue 3): a node records what ffmpeg publishes (or its
//! demo camera) into the store, and ffmpeg, GStreamer and the project's own client play it
//! back over `rtsp://HOST/playback/<camera>?start=…[&end=…]` with seeks (`Range: npt=`,
//! `Range: clock=`), trick play (`Scale`), PAUSE and resume; a crash loses at most the segment
//! being written; two nodes share one root; concurrent sessions read each segment from
//! storage once; a full disk stops recording visibly while live viewing goes on; bad playback
//! URLs get clear 4xx answers; `vigil ctl` shows recordings and the cache.
//!
//! Most tests play one shared recording ([`support::recording`]): 20 s of the H.264 + AAC fixture
//! (10 s, looped once) published with `ffmpeg -re`, recorded in 2 s segments by a node that
//! is stopped afterwards. Each test plays it with a node of its own on the same root, so
//! each starts with an empty playback cache. The fixture has a keyframe every second (a GOP
//! of 25 frames at 25 fps), which bounds "the keyframe at or before" a requested time.

mod playing;
mod requests;
mod store;
mod support;
