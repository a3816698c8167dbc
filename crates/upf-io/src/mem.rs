//! The in-memory backend: a queue pair per port, for tests and the in-memory benchmark. The
//! other end ([`MemPeer`]) injects packets and collects what the UPF sent, from any thread.

use crate::{IoStats, PacketIo, Pool};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use upf_packet::{Packet, Port};

#[derive(Debug, Default)]
struct Queues {
    to_upf: VecDeque<Vec<u8>>,
    from_upf: Vec<Vec<u8>>,
}

/// One port's queue inside the UPF.
#[derive(Debug)]
pub struct MemIo {
    port: Port,
    q: Arc<Mutex<Queues>>,
    stats: IoStats,
}

/// The test's end of a [`MemIo`].
#[derive(Debug, Clone)]
pub struct MemPeer {
    q: Arc<Mutex<Queues>>,
}

/// A connected pair for `port`.
pub fn pair(port: Port) -> (MemIo, MemPeer) {
    let q = Arc::new(Mutex::new(Queues::default()));
    (
        MemIo {
            port,
            q: q.clone(),
            stats: IoStats::default(),
        },
        MemPeer { q },
    )
}

fn lock(q: &Mutex<Queues>) -> std::sync::MutexGuard<'_, Queues> {
    // A panicking test thread poisons the lock; the queues themselves are still consistent.
    q.lock().unwrap_or_else(|e| e.into_inner())
}

impl MemPeer {
    /// Queues a packet (IP header first) for the UPF to receive.
    pub fn inject(&self, data: &[u8]) {
        lock(&self.q).to_upf.push_back(data.to_vec());
    }

    /// Everything the UPF sent on this port so far.
    pub fn take_sent(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut lock(&self.q).from_upf)
    }
}

impl PacketIo for MemIo {
    fn rx_batch(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let mut q = lock(&self.q);
        let mut n = 0;
        while n < max {
            let Some(d) = q.to_upf.pop_front() else { break };
            let mut p = pool.get(self.port);
            if p.load(self.port, &d) {
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += d.len() as u64;
                batch.push(p);
                n += 1;
            } else {
                self.stats.rx_discarded += 1;
                pool.put(p);
            }
        }
        Ok(n)
    }

    fn tx_batch(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> io::Result<usize> {
        let mut q = lock(&self.q);
        let n = batch.len();
        for p in batch.drain(..) {
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += p.len() as u64;
            q.from_upf.push(p.data().to_vec());
            pool.put(p);
        }
        Ok(n)
    }

    fn stats(&self) -> IoStats {
        self.stats
    }

    fn describe(&self) -> String {
        format!("{}: in-memory", self.port.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let (mut io, peer) = pair(Port::N6);
        let mut pool = Pool::new(8);
        peer.inject(&[0x45, 0, 0, 20]);
        peer.inject(&[0; 4000]); // too big for a buffer: discarded
        let mut b = Vec::new();
        assert_eq!(io.rx_batch(&mut pool, &mut b, 32).unwrap(), 1);
        assert_eq!(b[0].data(), &[0x45, 0, 0, 20]);
        assert_eq!(b[0].port(), Port::N6);
        assert_eq!(io.tx_batch(&mut b, &mut pool).unwrap(), 1);
        assert!(b.is_empty());
        assert_eq!(peer.take_sent(), vec![vec![0x45, 0, 0, 20]]);
        let s = io.stats();
        assert_eq!((s.rx_packets, s.tx_packets, s.rx_discarded), (1, 1, 1));
    }
}
