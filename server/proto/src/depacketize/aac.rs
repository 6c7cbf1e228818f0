//! MPEG-4 audio in RTP, RFC 3640 `mpeg4-generic` (AAC-hbr / AAC-lbr and any other mode with
//! AU headers), non-interleaved or interleaved, with fragmented AUs.

use super::{fmtp_param, fmtp_u32, DepacketizeError, Sink, MAX_FRAME_BYTES};

const CODEC: &str = "AAC";

fn malformed(reason: &'static str) -> DepacketizeError {
    DepacketizeError::Malformed {
        codec: CODEC,
        reason,
    }
}

/// MSB-first reader over the first `end` bits of a byte slice.
struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> BitReader<'a> {
    fn new(data: &'a [u8], end: usize) -> Self {
        Self {
            data,
            pos: 0,
            end: end.min(data.len() * 8),
        }
    }

    fn remaining(&self) -> usize {
        self.end - self.pos
    }

    /// Reads `n` (at most 32) bits; `None` past the end.
    fn read(&mut self, n: u32) -> Option<u32> {
        let n = n as usize;
        if n > 32 || n > self.remaining() {
            return None;
        }
        let mut v = 0u64;
        for _ in 0..n {
            let bit = (self.data.get(self.pos / 8)? >> (7 - self.pos % 8)) & 1;
            v = (v << 1) | u64::from(bit);
            self.pos += 1;
        }
        u32::try_from(v).ok()
    }

    /// Reads a flag and, if set, skips the `n`-bit field it announces (CTS/DTS deltas).
    fn skip_flagged(&mut self, n: u32) -> Option<()> {
        if n > 0 && self.read(1)? == 1 {
            self.read(n)?;
        }
        Some(())
    }
}

/// An AU larger than one packet, arriving in pieces (RFC 3640 §3.2.3: every fragment repeats
/// the AU header with the full AU size; the marker bit is set on the last fragment).
#[derive(Debug)]
struct Fragmented {
    ts: u32,
    size: usize,
    data: Vec<u8>,
    damaged: bool,
}

#[derive(Debug)]
pub(super) struct Aac {
    size_len: u32,
    index_len: u32,
    index_delta_len: u32,
    cts_delta_len: u32,
    dts_delta_len: u32,
    random_access: bool,
    stream_state_len: u32,
    aux_size_len: u32,
    /// Samples per AU: the timestamp step between AUs of one packet.
    duration: u32,
    frag: Option<Fragmented>,
}

impl Aac {
    /// Reads the AU-header layout from fmtp. Lengths absent from fmtp default to the mode's
    /// (AAC-hbr 13/3/3 when no mode is given either, which is what publishers that omit them
    /// send), because guessing wrong about sizes would misparse every packet.
    pub(super) fn from_fmtp(fmtp: &str) -> Result<Self, DepacketizeError> {
        let mode = fmtp_param(fmtp, "mode");
        let defaults = match mode {
            None => Some((13, 3, 3)),
            Some(m) if m.eq_ignore_ascii_case("AAC-hbr") => Some((13, 3, 3)),
            Some(m) if m.eq_ignore_ascii_case("AAC-lbr") => Some((6, 2, 2)),
            Some(_) => None,
        };
        let field = |name: &'static str, default: Option<u32>| -> Result<u32, DepacketizeError> {
            let v = fmtp_u32(fmtp, name)?.or(default).unwrap_or(0);
            if v > 32 {
                return Err(DepacketizeError::BadFmtp {
                    name,
                    value: v.to_string(),
                });
            }
            Ok(v)
        };
        let size_len = field("sizelength", defaults.map(|d| d.0))?;
        if size_len == 0 {
            return Err(DepacketizeError::UnsupportedMode {
                codec: CODEC,
                feature: format!("mode {:?} without AU headers", mode.unwrap_or("")),
            });
        }
        let duration = match fmtp_u32(fmtp, "constantduration")? {
            Some(0) | None => 1024,
            Some(d) => d,
        };
        Ok(Self {
            size_len,
            index_len: field("indexlength", defaults.map(|d| d.1))?,
            index_delta_len: field("indexdeltalength", defaults.map(|d| d.2))?,
            cts_delta_len: field("ctsdeltalength", None)?,
            dts_delta_len: field("dtsdeltalength", None)?,
            random_access: field("randomaccessindication", None)? > 0,
            stream_state_len: field("streamstateindication", None)?,
            aux_size_len: field("auxiliarydatasizelength", None)?,
            duration,
            frag: None,
        })
    }

    /// Parses the AU-headers section: `(AU size, AU index relative to the first)` each.
    fn au_headers(&self, headers: &[u8], bits: usize) -> Option<Vec<(usize, u32)>> {
        let mut r = BitReader::new(headers, bits);
        let mut aus = Vec::new();
        let mut index = 0u32;
        while r.remaining() > 0 {
            let size = r.read(self.size_len)?;
            if aus.is_empty() {
                // AU-Index is a stream-wide serial number; only deltas place AUs in time.
                r.read(self.index_len)?;
            } else {
                index = index
                    .wrapping_add(1)
                    .wrapping_add(r.read(self.index_delta_len)?);
            }
            r.skip_flagged(self.cts_delta_len)?;
            r.skip_flagged(self.dts_delta_len)?;
            if self.random_access {
                r.read(1)?;
            }
            r.read(self.stream_state_len)?;
            aus.push((usize::try_from(size).ok()?, index));
        }
        Some(aus)
    }

    pub(super) fn push(
        &mut self,
        ts: u32,
        marker: bool,
        payload: &[u8],
        loss: bool,
        sink: &mut Sink,
    ) -> Result<(), DepacketizeError> {
        if let Some(f) = &mut self.frag {
            f.damaged |= loss;
            if f.ts != ts {
                self.flush(sink);
            }
        }
        let result = self.parse(ts, marker, payload, loss, sink);
        if result.is_err() {
            if let Some(f) = &mut self.frag {
                f.damaged = true;
            } else {
                sink.drop_frame();
            }
        }
        if marker && self.frag.is_some() {
            // The last fragment came and the AU is still short (or was damaged).
            self.flush(sink);
        }
        result
    }

    fn parse(
        &mut self,
        ts: u32,
        marker: bool,
        payload: &[u8],
        loss: bool,
        sink: &mut Sink,
    ) -> Result<(), DepacketizeError> {
        let [hi, lo, rest @ ..] = payload else {
            return Err(malformed("payload shorter than AU-headers-length"));
        };
        let header_bits = usize::from(u16::from_be_bytes([*hi, *lo]));
        let header_bytes = header_bits.div_ceil(8);
        let headers = rest
            .get(..header_bytes)
            .ok_or(malformed("AU headers run past the payload"))?;
        let mut aus = self
            .au_headers(headers, header_bits)
            .ok_or(malformed("truncated AU header"))?;
        let mut data = &rest[header_bytes..];
        if self.aux_size_len > 0 {
            let mut r = BitReader::new(data, data.len() * 8);
            let aux_bits = r
                .read(self.aux_size_len)
                .ok_or(malformed("truncated auxiliary data size"))?;
            let skip = (self.aux_size_len as usize + aux_bits as usize).div_ceil(8);
            data = data
                .get(skip..)
                .ok_or(malformed("auxiliary data runs past the payload"))?;
        }

        if let Some(frag) = &mut self.frag {
            if aus.len() != 1 || aus[0].0 != frag.size {
                return Err(malformed("AU fragment header does not match its AU"));
            }
            if frag.data.len() + data.len() > frag.size {
                return Err(malformed("AU fragments exceed the AU size"));
            }
            frag.data.extend_from_slice(data);
            if frag.data.len() == frag.size {
                if let Some(f) = self.frag.take() {
                    if f.damaged {
                        sink.drop_frame();
                    } else {
                        sink.emit(f.ts, true, f.data);
                    }
                }
            }
            return Ok(());
        }

        if let [(size, _)] = aus[..] {
            if size > data.len() {
                if size > MAX_FRAME_BYTES {
                    return Err(DepacketizeError::FrameTooLarge {
                        max: MAX_FRAME_BYTES,
                    });
                }
                if marker {
                    return Err(malformed("AU larger than its only packet"));
                }
                // After a loss this may be a middle fragment (RFC 3640 has no start flag),
                // so the AU is only trusted if nothing was lost before it.
                let mut buf = Vec::with_capacity(size);
                buf.extend_from_slice(data);
                self.frag = Some(Fragmented {
                    ts,
                    size,
                    data: buf,
                    damaged: loss,
                });
                return Ok(());
            }
        }

        let total = aus
            .iter()
            .try_fold(0usize, |acc, (size, _)| acc.checked_add(*size));
        if total.is_none_or(|t| t > data.len()) {
            return Err(malformed("AU sizes exceed the payload"));
        }
        for (size, index) in aus.drain(..) {
            let (au, tail) = data.split_at(size);
            data = tail;
            if !au.is_empty() {
                let au_ts = ts.wrapping_add(index.wrapping_mul(self.duration));
                sink.emit(au_ts, true, au.to_vec());
            }
        }
        Ok(())
    }

    /// Drops a fragmented AU whose remaining fragments will not come.
    pub(super) fn flush(&mut self, sink: &mut Sink) {
        if self.frag.take().is_some() {
            sink.drop_frame();
        }
    }
}
