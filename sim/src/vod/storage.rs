//! A node's cache and the shared storage behind it, in virtual time: lookups through the
//! real `vigil-cache` LRU, reads queued on the storage FIFO, and read-ahead.

use super::*;

impl VodSim<'_> {
    /// Asks node n's cache for a segment now: (hit, when it is available). A miss joins
    /// the read in flight or starts one. Counts a lookup when `count`.
    pub(super) fn fetch(&mut self, n: u32, media: u32, seg: u32, count: bool) -> (bool, Micros) {
        let now = self.q.now();
        self.fetch_at(n, media, seg, count, now)
    }

    /// [`Self::fetch`] by a request that reaches the node at `at` (≥ now): a miss starts
    /// its read then. The cache is looked up now: what a few ms change is not modelled.
    pub(super) fn fetch_at(
        &mut self,
        n: u32,
        media: u32,
        seg: u32,
        count: bool,
        at: Micros,
    ) -> (bool, Micros) {
        let start = self.seg_time(media, seg);
        let hit = self.nodes[n as usize]
            .cache
            .get(&self.cameras[self.camera_of(media) as usize], start);
        let now = at;
        if count {
            if let Some(s) = self.measuring() {
                let st = &mut self.m.steps[s];
                if hit {
                    st.hits += 1;
                } else {
                    st.misses += 1;
                }
            }
        }
        if hit {
            return (true, now);
        }
        if count {
            // The viewer waits for this read (the start, or a segment read ahead too late).
            self.nodes[n as usize]
                .cache
                .demand_miss(&self.cameras[self.camera_of(media) as usize], start);
        }
        (false, self.load_at(n, media, seg, at))
    }

    /// The read of (n, media, seg) in flight, or a new one: FIFO over the storage bandwidth,
    /// then the fixed latency.
    pub(super) fn load(&mut self, n: u32, media: u32, seg: u32) -> Micros {
        let now = self.q.now();
        self.load_at(n, media, seg, now)
    }

    /// [`Self::load`] starting at `at` (≥ now).
    pub(super) fn load_at(&mut self, n: u32, media: u32, seg: u32, at: Micros) -> Micros {
        if let Some(&done) = self.inflight.get(&(n, media, seg)) {
            return done;
        }
        let now = at;
        let st = &self.sc.storage;
        let xfer = st
            .read_mbps()
            .map_or(0, |mbps| secs(self.seg_bytes as f64 * 8.0 / (mbps * 1e6)));
        let begin = now.max(self.storage_free_at);
        self.storage_free_at = begin + xfer;
        let done = self.storage_free_at + secs(st.read_latency_ms() / 1000.0);
        self.inflight.insert((n, media, seg), done);
        self.q.at(
            done,
            Ev::LoadDone {
                node: n,
                media,
                seg,
            },
        );
        if let Some(s) = self.measuring() {
            self.m.steps[s].reads += 1;
        }
        done
    }

    pub(super) fn read_ahead(&mut self, n: u32, media: u32, seg: u32) {
        for k in 1..=self.sc.nodes.read_ahead_segments {
            let s = seg + k;
            if s >= self.segs {
                break;
            }
            let start = self.seg_time(media, s);
            if !self.nodes[n as usize]
                .cache
                .touch(&self.cameras[self.camera_of(media) as usize], start)
                && !self.inflight.contains_key(&(n, media, s))
            {
                self.load(n, media, s);
            }
        }
    }
}
