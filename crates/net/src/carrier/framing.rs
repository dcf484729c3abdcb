//! How datagrams travel in a carrier's byte stream.
//!
//! ```text
//! stream = preamble, then frames
//! preamble (8 bytes) = 0x1f "fjtcp1" 0x00     sent first by each side
//! fake-TCP answer (8 bytes) = 0x1f "fjfake" 0x00
//!     what a fake-TCP flow sends, then closes, when a preamble reaches it
//!     (the far end is a TCP carrier)
//! frame = length (u16, big-endian) ‖ datagram (length bytes)
//! ```
//!
//! Each side checks the other's preamble before it takes any frame, so a
//! stranger's connection (a TLS client on port 443, a scanner) is closed
//! at once instead of feeding noise to the tunnel. A zero-length frame
//! carries nothing and is skipped. Datagrams longer than 65,535 bytes
//! cannot be framed (WireGuard's are at most the tunnel MTU plus 32).
//!
//! [`FrameDecoder`] is a checked view over a receive buffer: any bytes, cut
//! anywhere, give back exactly the frames that were sent or an error,
//! never a panic (fuzzed: `fuzz/fuzz_targets/carrier_frames.rs`).

/// What each side sends before its first frame.
pub const PREAMBLE: [u8; 8] = *b"\x1ffjtcp1\x00";
/// What a fake-TCP flow answers to a TCP carrier's preamble before it
/// closes, so that the TCP side, too, learns that the two carriers differ
/// even when no datagram went its way first.
pub const FAKE_TCP_ANSWER: [u8; 8] = *b"\x1ffjfake\x00";
/// Bytes in front of each datagram.
pub const FRAME_HEADER_LEN: usize = 2;
/// The longest datagram a frame holds.
pub const MAX_FRAMED_DATAGRAM: usize = u16::MAX as usize;

/// The frame header for a datagram of `len` bytes; `None` if it is too
/// long to frame.
pub fn frame_header(len: usize) -> Option<[u8; FRAME_HEADER_LEN]> {
    u16::try_from(len).ok().map(u16::to_be_bytes)
}

/// The stream broke the framing rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("the connection did not start with fjord's carrier preamble")]
    BadPreamble,
}

/// Reassembles frames from what a stream delivers, in a buffer allocated
/// once: read into [`FrameDecoder::space`], report with
/// [`FrameDecoder::filled`], take datagrams with [`FrameDecoder::next_frame`].
pub struct FrameDecoder {
    buffer: Vec<u8>,
    /// Bytes before `start` were consumed; `start..end` wait.
    start: usize,
    end: usize,
    preamble_seen: bool,
}

impl FrameDecoder {
    /// A decoder whose buffer holds `capacity` bytes (at least one
    /// largest frame: smaller values are raised to it).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(FRAME_HEADER_LEN + MAX_FRAMED_DATAGRAM);
        Self {
            buffer: vec![0; capacity],
            start: 0,
            end: 0,
            preamble_seen: false,
        }
    }

    /// Room to read into; empty only if the buffer holds nothing but
    /// complete frames not yet taken.
    pub fn space(&mut self) -> &mut [u8] {
        if self.start > 0 && (self.start == self.end || self.end == self.buffer.len()) {
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buffer[self.end..]
    }

    /// `count` bytes were read into [`FrameDecoder::space`].
    pub fn filled(&mut self, count: usize) {
        self.end = (self.end + count).min(self.buffer.len());
    }

    /// The bytes received and not yet taken (after a
    /// [`FramingError::BadPreamble`]: what came instead of the preamble).
    pub fn waiting(&self) -> &[u8] {
        &self.buffer[self.start..self.end]
    }

    /// Whether the preamble has arrived.
    pub fn introduced(&self) -> bool {
        self.preamble_seen
    }

    /// Puts back the frame of `len` bytes that [`FrameDecoder::next_frame`]
    /// returned last, to be returned again.
    pub fn unread(&mut self, len: usize) {
        self.start = self.start.saturating_sub(FRAME_HEADER_LEN + len);
    }

    /// The next whole datagram, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, FramingError> {
        if !self.preamble_seen {
            let waiting = &self.buffer[self.start..self.end];
            let compared = waiting.len().min(PREAMBLE.len());
            if waiting[..compared] != PREAMBLE[..compared] {
                return Err(FramingError::BadPreamble);
            }
            if compared < PREAMBLE.len() {
                return Ok(None);
            }
            self.start += PREAMBLE.len();
            self.preamble_seen = true;
        }
        loop {
            let waiting = &self.buffer[self.start..self.end];
            let Some((header, rest)) = waiting.split_first_chunk::<FRAME_HEADER_LEN>() else {
                return Ok(None);
            };
            let len = usize::from(u16::from_be_bytes(*header));
            if rest.len() < len {
                return Ok(None);
            }
            let frame = self.start + FRAME_HEADER_LEN..self.start + FRAME_HEADER_LEN + len;
            self.start = frame.end;
            if len > 0 {
                return Ok(Some(&self.buffer[frame]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(datagrams: &[&[u8]]) -> Vec<u8> {
        let mut stream = PREAMBLE.to_vec();
        for datagram in datagrams {
            stream.extend_from_slice(&frame_header(datagram.len()).unwrap());
            stream.extend_from_slice(datagram);
        }
        stream
    }

    /// Feeds `stream` in pieces of `piece` bytes, collecting frames.
    fn decode(stream: &[u8], piece: usize) -> Result<Vec<Vec<u8>>, FramingError> {
        let mut decoder = FrameDecoder::new(0);
        let mut frames = Vec::new();
        for mut chunk in stream.chunks(piece) {
            while !chunk.is_empty() {
                let space = decoder.space();
                let count = space.len().min(chunk.len());
                space[..count].copy_from_slice(&chunk[..count]);
                decoder.filled(count);
                chunk = &chunk[count..];
                while let Some(frame) = decoder.next_frame()? {
                    frames.push(frame.to_vec());
                }
            }
        }
        Ok(frames)
    }

    #[test]
    fn frames_survive_any_cut() {
        let big = vec![7u8; MAX_FRAMED_DATAGRAM];
        let datagrams: [&[u8]; 5] = [b"first", &[], &big, b"x", &[1, 2, 3]];
        let stream = encode(&datagrams);
        let expected: Vec<Vec<u8>> = datagrams
            .iter()
            .filter(|d| !d.is_empty())
            .map(|d| d.to_vec())
            .collect();
        for piece in [1, 2, 3, 7, 1000, 65_537, stream.len()] {
            assert_eq!(
                decode(&stream, piece).unwrap(),
                expected,
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn a_stranger_is_refused_before_any_frame() {
        let tls_hello = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03";
        assert_eq!(decode(tls_hello, 1), Err(FramingError::BadPreamble));
        let mut almost = PREAMBLE;
        almost[7] = 1;
        assert_eq!(
            decode(&encode(&[b"hi"])[..0], 1).unwrap(),
            Vec::<Vec<u8>>::new()
        );
        assert_eq!(decode(&almost, 8), Err(FramingError::BadPreamble));
        // Half a preamble is not yet a verdict.
        assert_eq!(decode(&PREAMBLE[..5], 5).unwrap(), Vec::<Vec<u8>>::new());
    }

    #[test]
    fn oversized_datagrams_cannot_be_framed() {
        assert_eq!(frame_header(MAX_FRAMED_DATAGRAM), Some([0xff, 0xff]));
        assert_eq!(frame_header(MAX_FRAMED_DATAGRAM + 1), None);
    }
}
