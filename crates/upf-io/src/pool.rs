//! A worker's free packet buffers, so that receiving does not allocate in steady state.

use upf_packet::{Packet, Port};

/// Free buffers of one worker. Bounded: buffers beyond `cap` are freed.
#[derive(Debug)]
pub struct Pool {
    free: Vec<Packet>,
    cap: usize,
}

impl Pool {
    pub fn new(cap: usize) -> Self {
        Self {
            free: Vec::with_capacity(cap),
            cap,
        }
    }

    /// A buffer for a packet arriving on `port` (recycled, else new); its data is empty.
    pub fn get(&mut self, port: Port) -> Packet {
        match self.free.pop() {
            Some(mut p) => {
                p.load(port, &[]);
                p
            }
            None => Packet::new(port),
        }
    }

    pub fn put(&mut self, p: Packet) {
        if self.free.len() < self.cap {
            self.free.push(p);
        }
    }

    pub fn put_all(&mut self, ps: impl IntoIterator<Item = Packet>) {
        for p in ps {
            self.put(p);
        }
    }

    pub fn len(&self) -> usize {
        self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.free.is_empty()
    }
}

impl Default for Pool {
    fn default() -> Self {
        Self::new(4096)
    }
}
