//! A playback session's life on its node: attached and detached, each segment needed in
//! turn (a stall when it is not there yet), VCR speed changes, the end and the client's
//! next request after its think time.

use super::*;

impl VodSim<'_> {
    pub(super) fn attach(&mut self, sid: u32, n: usize) {
        let node = &mut self.nodes[n];
        node.sessions.push(sid);
        node.dirty = true;
        self.sessions[sid as usize].node = n as u32;
    }

    pub(super) fn detach(&mut self, sid: u32) {
        let n = self.sessions[sid as usize].node as usize;
        let node = &mut self.nodes[n];
        if let Some(i) = node.sessions.iter().position(|&x| x == sid) {
            node.sessions.swap_remove(i);
        }
        node.dirty = true;
    }

    pub(super) fn on_need(&mut self, sid: u32, seg: u32) {
        if seg >= self.segs {
            self.end_session(sid);
            return;
        }
        let s = &self.sessions[sid as usize];
        let (n, media) = (s.node, s.media);
        let (hit, avail) = self.fetch(n, media, seg, true);
        self.read_ahead(n, media, seg);
        let now = self.q.now();
        let s = &mut self.sessions[sid as usize];
        s.hit = hit;
        s.seg = seg;
        if hit {
            self.play(sid, seg, now);
        } else {
            s.playing = false;
            s.stall_from = now;
            let gen = s.gen;
            self.q.at(
                avail,
                Ev::Resume {
                    session: sid,
                    gen,
                    seg,
                },
            );
        }
    }

    pub(super) fn on_resume(&mut self, sid: u32, seg: u32) {
        let now = self.q.now();
        let s = &mut self.sessions[sid as usize];
        s.playing = true;
        s.seg_at = now;
        let stalled = (now - s.stall_from) as f64 / MS as f64;
        self.rows[s.row].stall_ms += stalled;
        self.play(sid, seg, now);
    }

    /// Segment `seg` starts playing at `now`: the next one is needed a segment later at the
    /// session's speed.
    pub(super) fn play(&mut self, sid: u32, seg: u32, now: Micros) {
        let s = &mut self.sessions[sid as usize];
        s.seg_at = now;
        let next = now + (self.seg_us as f64 / s.scale) as Micros;
        let gen = s.gen;
        self.q.at(
            next,
            Ev::Need {
                session: sid,
                gen,
                seg: seg + 1,
            },
        );
    }

    /// Current recording position of a session (ms, absolute).
    pub(super) fn position(&self, sid: u32) -> i64 {
        let s = &self.sessions[sid as usize];
        let into = if s.playing {
            ((self.q.now() - s.seg_at).max(0) as f64 / MS as f64 * s.scale) as i64
        } else {
            0
        };
        s.begin_ms + self.seg_start(s.seg) + into.min(self.seg_ms)
    }

    pub(super) fn on_vcr(&mut self, sid: u32, scale: f64) {
        if !self.sessions[sid as usize].alive {
            return;
        }
        let now = self.q.now();
        let pos_in_seg = {
            let s = &self.sessions[sid as usize];
            if s.playing {
                (now - s.seg_at) as f64 * s.scale
            } else {
                0.0
            }
        };
        let n = self.sessions[sid as usize].node as usize;
        self.nodes[n].dirty = true;
        let s = &mut self.sessions[sid as usize];
        s.scale = scale;
        s.gen += 1;
        self.rows[s.row].scale = scale;
        if s.playing {
            // Keep the position within the segment; the rest plays at the new speed.
            s.seg_at = now - (pos_in_seg / scale) as Micros;
            let left = ((self.seg_us as f64 - pos_in_seg).max(0.0) / scale) as Micros;
            let (gen, seg) = (s.gen, s.seg);
            self.q.after(
                left,
                Ev::Need {
                    session: sid,
                    gen,
                    seg: seg + 1,
                },
            );
        } else {
            // Waiting for storage: resume when the read is done (a fresh event).
            let (gen, seg, n, media) = (s.gen, s.seg, s.node, s.media);
            let done = self.inflight.get(&(n, media, seg)).copied().unwrap_or(now);
            self.q.at(
                done,
                Ev::Resume {
                    session: sid,
                    gen,
                    seg,
                },
            );
        }
    }

    pub(super) fn end_session(&mut self, sid: u32) {
        if !self.sessions[sid as usize].alive {
            return;
        }
        self.detach(sid);
        let now = self.q.now();
        let s = &mut self.sessions[sid as usize];
        s.alive = false;
        s.gen = s.gen.wrapping_add(1);
        self.rows[s.row].ended_s = Some(now as f64 / SEC as f64);
        let client = s.client;
        let think = self.m.think.remove(&sid).unwrap_or(0.0);
        self.q.after(secs(think), Ev::Request { client });
    }
}
