//! Playback of recordings over RTSP: the URL, the segment library (store + cache), and the
//! paced sender task. The RTSP methods are in `rtsp::playback_methods`.

pub mod bandwidth;
pub mod library;
pub mod request;
pub mod task;
pub mod window;
