//! Data-path counters kept by the worker (plain integers: one writer).

/// Counts of batches, packets and I/O errors, for `fjord show` and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataStats {
    pub tun_reads: u64,
    pub tun_read_errors: u64,
    /// Packets lost to failed TUN writes.
    pub tun_write_errors: u64,
    /// TUN write calls; fewer than `rx_packets` when packets were merged.
    pub tun_writes: u64,
    pub tx_packets: u64,
    pub rx_packets: u64,
    pub rx_datagrams: u64,
    pub udp_sends: u64,
    pub udp_recvs: u64,
    pub udp_send_errors: u64,
    pub udp_recv_errors: u64,
    /// Batches whose encryption or decryption was shared with other
    /// threads (`--threads`).
    pub crypto_splits: u64,
    /// Turns of the worker's loop that found a source ready but moved no
    /// data: near zero on a healthy worker (each ready source is read
    /// until it would block). A run of them is a loop that cannot make
    /// progress; the worker then waits between turns and says so once.
    pub idle_turns: u64,
}

impl DataStats {
    /// System calls that moved data: what every turn over a ready source
    /// makes at least one of, unless the source was found empty.
    pub fn data_calls(&self) -> u64 {
        self.tun_reads + self.tun_writes + self.udp_recvs + self.udp_sends
    }
}
