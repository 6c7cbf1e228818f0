//! Box building: a growable buffer where a box is opened (its size left blank) and closed
//! (its size patched in), so nested boxes need no size precomputation.

/// A buffer of big-endian fields and nested boxes.
#[derive(Default, Debug)]
pub struct BoxWriter {
    buf: Vec<u8>,
}

impl BoxWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    /// Opens a box; returns its start for [`BoxWriter::end`].
    pub fn begin(&mut self, fourcc: &[u8; 4]) -> usize {
        let at = self.buf.len();
        self.u32(0);
        self.bytes(fourcc);
        at
    }

    /// Opens a full box (version and 24-bit flags).
    pub fn begin_full(&mut self, fourcc: &[u8; 4], version: u8, flags: u32) -> usize {
        let at = self.begin(fourcc);
        self.u32((u32::from(version) << 24) | (flags & 0x00ff_ffff));
        at
    }

    /// Closes the box opened at `at`: patches its 32-bit size.
    pub fn end(&mut self, at: usize) {
        let size = (self.buf.len() - at) as u32;
        self.buf[at..at + 4].copy_from_slice(&size.to_be_bytes());
    }

    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn u24(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes()[1..]);
    }
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }
    pub fn zeros(&mut self, n: usize) {
        self.buf.resize(self.buf.len() + n, 0);
    }
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// Overwrites a 32-bit field written earlier (a `trun` data offset known only once the
    /// `moof` is complete).
    pub fn patch_u32(&mut self, at: usize, v: u32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// An `mdat` header for `payload` bytes (64-bit size when it needs one).
    pub fn mdat_header(&mut self, payload: u64) {
        if payload + 8 > u64::from(u32::MAX) {
            self.u32(1);
            self.bytes(b"mdat");
            self.u64(payload + 16);
        } else {
            self.u32((payload + 8) as u32);
            self.bytes(b"mdat");
        }
    }

    /// The unity transformation matrix of `mvhd` and `tkhd`.
    pub fn matrix(&mut self) {
        for v in [0x0001_0000u32, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000] {
            self.u32(v);
        }
    }
}
