//! H.264 (RFC 6184, non-interleaved modes) and H.265 (RFC 7798, without DON) reassembly.
//!
//! Both payload formats have the same three shapes (single NAL, aggregation, fragmentation)
//! and differ only in header sizes and type numbers, so one state machine serves both.

use super::{DepacketizeError, Sink, MAX_FRAME_BYTES};

/// The access unit being assembled, as length-prefixed NAL units.
#[derive(Debug)]
struct Au {
    ts: u32,
    data: Vec<u8>,
    keyframe: bool,
    /// A packet of this AU was lost or unusable: it is dropped instead of emitted, since a
    /// picture with missing slices decodes to garbage and poisons the recording until the
    /// next keyframe anyway.
    damaged: bool,
    /// Offset of the length prefix of a fragmented NAL still being reassembled.
    fu_start: Option<usize>,
}

impl Au {
    fn new(ts: u32) -> Self {
        Self {
            ts,
            data: Vec::new(),
            keyframe: false,
            damaged: false,
            fu_start: None,
        }
    }

    fn reserve(&self, more: usize) -> Result<(), DepacketizeError> {
        if self.data.len().saturating_add(more) > MAX_FRAME_BYTES {
            return Err(DepacketizeError::FrameTooLarge {
                max: MAX_FRAME_BYTES,
            });
        }
        Ok(())
    }

    fn push_nal(&mut self, nal: &[u8]) -> Result<(), DepacketizeError> {
        self.reserve(4 + nal.len())?;
        // Fits: MAX_FRAME_BYTES is far below u32::MAX.
        self.data
            .extend_from_slice(&(nal.len() as u32).to_be_bytes());
        self.data.extend_from_slice(nal);
        Ok(())
    }

    fn start_fu(&mut self, nal_header: &[u8]) -> Result<(), DepacketizeError> {
        self.reserve(4 + nal_header.len())?;
        self.fu_start = Some(self.data.len());
        self.data.extend_from_slice(&[0; 4]);
        self.data.extend_from_slice(nal_header);
        Ok(())
    }

    fn extend_fu(&mut self, body: &[u8]) -> Result<(), DepacketizeError> {
        self.reserve(body.len())?;
        self.data.extend_from_slice(body);
        Ok(())
    }

    fn end_fu(&mut self) {
        if let Some(start) = self.fu_start.take() {
            let len = (self.data.len() - start - 4) as u32;
            self.data[start..start + 4].copy_from_slice(&len.to_be_bytes());
        }
    }

    /// Forgets a half-reassembled NAL so the AU never contains a wrong length prefix.
    fn abort_fu(&mut self) {
        if let Some(start) = self.fu_start.take() {
            self.data.truncate(start);
        }
    }
}

#[derive(Debug)]
pub(super) struct H26x {
    h265: bool,
    au: Option<Au>,
}

impl H26x {
    pub(super) fn new(h265: bool) -> Self {
        Self { h265, au: None }
    }

    fn codec(&self) -> &'static str {
        if self.h265 {
            "H265"
        } else {
            "H264"
        }
    }

    fn malformed(&self, reason: &'static str) -> DepacketizeError {
        DepacketizeError::Malformed {
            codec: self.codec(),
            reason,
        }
    }

    fn is_keyframe_nal(&self, nal_type: u8) -> bool {
        if self.h265 {
            (16..=21).contains(&nal_type)
        } else {
            nal_type == 5
        }
    }

    pub(super) fn push(
        &mut self,
        ts: u32,
        marker: bool,
        payload: &[u8],
        loss: bool,
        sink: &mut Sink,
    ) -> Result<(), DepacketizeError> {
        if loss {
            // The missing packets may belong to the pending AU (its tail, or its middle if
            // this packet has the same timestamp).
            if let Some(au) = &mut self.au {
                au.damaged = true;
            }
        }
        if self.au.as_ref().is_some_and(|au| au.ts != ts) {
            self.flush(sink);
        }
        let mut au = self.au.take().unwrap_or_else(|| Au::new(ts));
        let result = if self.h265 {
            self.h265_payload(&mut au, payload, loss)
        } else {
            self.h264_payload(&mut au, payload, loss)
        };
        if result.is_err() {
            au.abort_fu();
            au.damaged = true;
        }
        self.au = Some(au);
        if marker {
            self.flush(sink);
        }
        result
    }

    /// Emits (or drops, if damaged or cut short in a fragment) the pending access unit.
    pub(super) fn flush(&mut self, sink: &mut Sink) {
        let Some(au) = self.au.take() else {
            return;
        };
        if au.damaged || au.fu_start.is_some() {
            sink.drop_frame();
        } else if !au.data.is_empty() {
            sink.emit(au.ts, au.keyframe, au.data);
        }
    }

    /// A complete NAL arrived while a fragmented one was open: the fragments' end is missing.
    fn close_open_fu(&self, au: &mut Au) -> Result<(), DepacketizeError> {
        if au.fu_start.is_some() {
            return Err(self.malformed("fragmented NAL unit without end fragment"));
        }
        Ok(())
    }

    fn single(&self, au: &mut Au, nal: &[u8], nal_type: u8) -> Result<(), DepacketizeError> {
        self.close_open_fu(au)?;
        au.keyframe |= self.is_keyframe_nal(nal_type);
        au.push_nal(nal)
    }

    fn aggregate(&self, au: &mut Au, units: &[u8], min_nal: usize) -> Result<(), DepacketizeError> {
        self.close_open_fu(au)?;
        // Validate the whole packet first so a bad size never leaves half of it in the AU.
        let mut nals = Vec::new();
        let mut rest = units;
        while !rest.is_empty() {
            let (size, tail) = match rest {
                [hi, lo, tail @ ..] => (usize::from(u16::from_be_bytes([*hi, *lo])), tail),
                _ => return Err(self.malformed("truncated aggregation unit size")),
            };
            if size < min_nal {
                return Err(self.malformed("aggregation unit too small"));
            }
            let nal = tail
                .get(..size)
                .ok_or_else(|| self.malformed("aggregation unit runs past the payload"))?;
            nals.push(nal);
            rest = &tail[size..];
        }
        if nals.is_empty() {
            return Err(self.malformed("empty aggregation packet"));
        }
        for nal in nals {
            let t = if self.h265 {
                (nal[0] >> 1) & 0x3f
            } else {
                nal[0] & 0x1f
            };
            au.keyframe |= self.is_keyframe_nal(t);
            au.push_nal(nal)?;
        }
        Ok(())
    }

    /// One fragmentation unit. `fu` is the FU header (S and E bits, type in the low bits)
    /// and `nal_header` the reconstructed header of the fragmented NAL.
    fn fragment(
        &self,
        au: &mut Au,
        fu: u8,
        nal_header: &[u8],
        body: &[u8],
        loss: bool,
    ) -> Result<(), DepacketizeError> {
        if fu & 0x80 != 0 {
            if au.fu_start.is_some() {
                return Err(self.malformed("fragment start while a fragmented NAL is open"));
            }
            let nal_type = if self.h265 { fu & 0x3f } else { fu & 0x1f };
            au.keyframe |= self.is_keyframe_nal(nal_type);
            au.start_fu(nal_header)?;
        } else if au.fu_start.is_none() {
            // A continuation whose start was lost is expected after a loss (and for a
            // receiver joining mid-NAL), so it is dropped quietly instead of erroring on
            // every remaining fragment.
            let expected = loss || au.damaged;
            au.damaged = true;
            return if expected {
                Ok(())
            } else {
                Err(self.malformed("fragment continuation without start"))
            };
        }
        au.extend_fu(body)?;
        if fu & 0x40 != 0 {
            au.end_fu();
        }
        Ok(())
    }

    fn h264_payload(
        &self,
        au: &mut Au,
        payload: &[u8],
        loss: bool,
    ) -> Result<(), DepacketizeError> {
        let Some(&hdr) = payload.first() else {
            return Err(self.malformed("empty payload"));
        };
        match hdr & 0x1f {
            // Reserved; RFC 6184 §5.2 says receivers ignore them.
            0 | 30 | 31 => Ok(()),
            t @ 1..=23 => self.single(au, payload, t),
            24 => self.aggregate(au, &payload[1..], 1),
            28 => {
                let [indicator, fu, body @ ..] = payload else {
                    return Err(self.malformed("truncated FU-A"));
                };
                let t = fu & 0x1f;
                let header = [(indicator & 0xe0) | t];
                self.fragment(au, *fu, &header, body, loss)
            }
            // STAP-B, MTAP16/24, FU-B: interleaved mode only, refused at construction.
            t => Err(DepacketizeError::UnsupportedPacketType {
                codec: "H264",
                packet_type: t,
            }),
        }
    }

    fn h265_payload(
        &self,
        au: &mut Au,
        payload: &[u8],
        loss: bool,
    ) -> Result<(), DepacketizeError> {
        let [ph0, ph1, rest @ ..] = payload else {
            return Err(self.malformed("payload shorter than the 2-byte header"));
        };
        match (ph0 >> 1) & 0x3f {
            t @ 0..=47 => self.single(au, payload, t),
            48 => self.aggregate(au, rest, 2),
            49 => {
                let [fu, body @ ..] = rest else {
                    return Err(self.malformed("truncated FU"));
                };
                let t = fu & 0x3f;
                let header = [(ph0 & 0x81) | (t << 1), *ph1];
                self.fragment(au, *fu, &header, body, loss)
            }
            50 => Err(DepacketizeError::UnsupportedPacketType {
                codec: "H265",
                packet_type: 50,
            }),
            // 51..=63 are unspecified; RFC 7798 §4.4 has receivers ignore them.
            _ => Ok(()),
        }
    }
}
