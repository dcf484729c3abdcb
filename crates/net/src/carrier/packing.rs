//! Datagrams a carrier received, packed into receive messages shaped like
//! a GRO receive on the UDP socket: a run of equal-length datagrams from
//! one source shares one buffer, `stride` apart (the last may be shorter),
//! so the receive pipeline treats them exactly as it treats UDP's.

use std::io::IoSliceMut;
use std::net::{IpAddr, SocketAddr};

use quinn_udp::RecvMeta;

/// Most bytes of one message (the pipeline's receive buffers are 64 KiB).
pub const MESSAGE_BYTES: usize = 65_536;

/// Where received datagrams came from: the far end, and our address.
pub type Source = (SocketAddr, Option<IpAddr>);

/// Fills receive messages one datagram at a time.
pub struct Packer {
    capacity: usize,
    /// Messages finished.
    done: usize,
    /// The message being filled: its source, length so far and stride.
    open: Option<(Source, usize, usize)>,
}

impl Packer {
    /// A packer for up to `capacity` messages.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            done: 0,
            open: None,
        }
    }

    /// Whether a datagram of any length fits: a message is free.
    pub fn has_room(&self) -> bool {
        self.done + usize::from(self.open.is_some()) < self.capacity
    }

    /// Adds `datagram` from `source`: to the open message if it continues
    /// its run, else to a new one. `false` (and nothing added) if it needs
    /// a new message and none is left.
    pub fn push(
        &mut self,
        buffers: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
        source: Source,
        datagram: &[u8],
    ) -> bool {
        if datagram.is_empty() {
            return true;
        }
        let joins = self.open.is_some_and(|(open_source, len, stride)| {
            open_source == source
                && len % stride == 0
                && datagram.len() <= stride
                && len + datagram.len() <= MESSAGE_BYTES
        });
        if !joins {
            if !self.has_room() {
                return false;
            }
            self.close(meta);
            self.open = Some((source, 0, datagram.len()));
        }
        let (Some((_, len, _)), Some(buffer)) = (self.open.as_mut(), buffers.get_mut(self.done))
        else {
            return false;
        };
        let Some(room) = buffer.get_mut(*len..*len + datagram.len()) else {
            return false;
        };
        room.copy_from_slice(datagram);
        *len += datagram.len();
        true
    }

    fn close(&mut self, meta: &mut [RecvMeta]) {
        if let Some(((remote, local), len, stride)) = self.open.take()
            && let Some(meta) = meta.get_mut(self.done)
        {
            meta.addr = remote;
            meta.len = len;
            meta.stride = stride;
            meta.ecn = None;
            meta.dst_ip = local;
            self.done += 1;
        }
    }

    /// Closes the open message; how many messages were filled.
    pub fn finish(mut self, meta: &mut [RecvMeta]) -> usize {
        self.close(meta);
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_equal_datagrams_share_a_message() {
        let mut storage = vec![0u8; MESSAGE_BYTES * 3];
        let mut meta = [RecvMeta::default(); 3];
        let a: Source = ("198.18.0.2:443".parse().unwrap(), None);
        let b: Source = ("198.18.0.3:443".parse().unwrap(), None);
        let mut packer = Packer::new(3);
        {
            let mut chunks = storage.chunks_exact_mut(MESSAGE_BYTES);
            let mut buffers: [IoSliceMut<'_>; 3] =
                std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap()));
            for datagram in [&[1u8; 100][..], &[2; 100], &[3; 40], &[4; 100]] {
                assert!(packer.push(&mut buffers, &mut meta, a, datagram));
            }
            // Another source starts the last message; then no room.
            assert!(packer.push(&mut buffers, &mut meta, b, &[5; 10]));
            assert!(!packer.has_room());
            assert!(!packer.push(&mut buffers, &mut meta, a, &[6; 10]));
        }
        assert_eq!(packer.finish(&mut meta), 3);
        assert_eq!((meta[0].len, meta[0].stride, meta[0].addr), (240, 100, a.0));
        assert_eq!((meta[1].len, meta[1].stride), (100, 100));
        assert_eq!((meta[2].len, meta[2].addr), (10, b.0));
        assert_eq!(&storage[200..240], &[3; 40]);
        assert_eq!(&storage[MESSAGE_BYTES..MESSAGE_BYTES + 100], &[4; 100]);
    }
}
