//! Bounds-checked little-endian readers over buffers the OS filled in.

/// A little-endian view of a buffer; every read is bounds-checked and yields `None` past the end,
/// so a truncated or malformed buffer can never panic.
#[derive(Debug, Clone, Copy)]
pub struct Le<'a>(pub &'a [u8]);

impl<'a> Le<'a> {
    /// `n` bytes at `at`.
    pub fn bytes(&self, at: usize, n: usize) -> Option<&'a [u8]> {
        self.0.get(at..at.checked_add(n)?)
    }
    /// The byte at `at`.
    pub fn u8(&self, at: usize) -> Option<u8> {
        self.0.get(at).copied()
    }
    /// The `u16` at `at`.
    pub fn u16(&self, at: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(at, 2)?.try_into().ok()?))
    }
    /// The `u32` at `at`.
    pub fn u32(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(at, 4)?.try_into().ok()?))
    }
    /// The signed 64-bit `LARGE_INTEGER` at `at`.
    pub fn i64(&self, at: usize) -> Option<i64> {
        Some(i64::from_le_bytes(self.bytes(at, 8)?.try_into().ok()?))
    }
    /// The 16-byte GUID at `at`.
    pub fn guid(&self, at: usize) -> Option<uuid::Uuid> {
        Some(uuid::Uuid::from_bytes_le(
            self.bytes(at, 16)?.try_into().ok()?,
        ))
    }
}
