//! Reading the configuration protocol's lines without leaving secrets in
//! freed memory. `set=1` requests carry `private_key=` and
//! `preshared_key=` lines, and `get=1` replies carry them back, so every
//! byte of a line passes only through buffers that are wiped when dropped:
//! one pending buffer per connection, allocated once at its full size (a
//! growing `Vec` would free copies of what it held), and one zeroizing
//! `String` per line. `BufReader` keeps its own buffer, which it never
//! wipes, hence this reader.

use std::io::{self, Read};

use zeroize::{Zeroize, Zeroizing};

/// No line of the protocol comes near this (the longest, a key, is 76
/// bytes); a longer one ends the connection.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Bytes read from the socket at once.
const CHUNK_BYTES: usize = 4096;

/// Lines from `reader`, each without its `\n`.
pub struct SecretLines<R> {
    reader: R,
    /// Bytes read but not yet returned as a line. Its capacity is fixed
    /// at creation: it never reallocates.
    pending: Zeroizing<Vec<u8>>,
}

impl<R: Read> SecretLines<R> {
    pub fn new(reader: R) -> Self {
        Self {
            reader,
            pending: Zeroizing::new(Vec::with_capacity(MAX_LINE_BYTES + CHUNK_BYTES)),
        }
    }

    /// The next line; `None` at the end of the stream. A last line without
    /// `\n` still counts. Fails on a line that is not UTF-8 or is longer
    /// than [`MAX_LINE_BYTES`].
    pub fn next_line(&mut self) -> io::Result<Option<Zeroizing<String>>> {
        loop {
            if let Some(end) = self.pending.iter().position(|&byte| byte == b'\n') {
                return self.take(end, end + 1).map(Some);
            }
            if self.pending.len() >= MAX_LINE_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "configuration line too long",
                ));
            }
            let mut chunk = Zeroizing::new([0u8; CHUNK_BYTES]);
            let read = match self.reader.read(chunk.as_mut()) {
                Ok(read) => read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            };
            if read == 0 {
                if self.pending.is_empty() {
                    return Ok(None);
                }
                let len = self.pending.len();
                return self.take(len, len).map(Some);
            }
            // Within capacity: pending held under MAX_LINE_BYTES before.
            self.pending.extend_from_slice(&chunk[..read]);
        }
    }

    /// Removes the first `consumed` pending bytes, returning the first
    /// `len` of them as a line.
    fn take(&mut self, len: usize, consumed: usize) -> io::Result<Zeroizing<String>> {
        let mut line = Zeroizing::new(Vec::with_capacity(len));
        line.extend_from_slice(&self.pending[..len]);
        // Shifts the rest to the front, within the same allocation.
        self.pending.drain(..consumed);
        match String::from_utf8(std::mem::take(&mut *line)) {
            Ok(text) => Ok(Zeroizing::new(text)),
            Err(error) => {
                error.into_bytes().zeroize();
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "configuration line is not UTF-8",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8]) -> Vec<String> {
        let mut reader = SecretLines::new(input);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            out.push(line.to_string());
        }
        out
    }

    #[test]
    fn splits_lines_across_reads() {
        assert_eq!(
            lines(b"get=1\n\nset=1\nkey=v"),
            ["get=1", "", "set=1", "key=v"]
        );
        let long = format!("allowed_ip={}\n", "1".repeat(CHUNK_BYTES * 2));
        assert_eq!(lines(long.as_bytes()), [long.trim_end()]);
        assert!(lines(b"").is_empty());
    }

    #[test]
    fn refuses_overlong_and_non_utf8_lines() {
        let overlong = vec![b'a'; MAX_LINE_BYTES + 10];
        let mut reader = SecretLines::new(overlong.as_slice());
        assert_eq!(
            reader.next_line().unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let mut reader = SecretLines::new(&b"ok\n\xff\xfe\n"[..]);
        assert_eq!(reader.next_line().unwrap().unwrap().as_str(), "ok");
        assert!(reader.next_line().is_err());
    }

    #[test]
    fn never_reallocates_its_pending_buffer() {
        let input = "private_key=00\n".repeat(MAX_LINE_BYTES / 8);
        let mut reader = SecretLines::new(input.as_bytes());
        let capacity = reader.pending.capacity();
        while reader.next_line().unwrap().is_some() {
            assert_eq!(reader.pending.capacity(), capacity);
        }
    }
}
