//! Where a key's session value lives in the program's maps: in a direct-mapped array entry
//! found by the key's low bits (one cache line, no bucket, no chain: the common case), or, when
//! another key holds that entry, in the hash map behind it.
//!
//! An array entry is rewritten whole, so a packet reading it while it is written could see
//! half of the old value and half of the new. So an entry's value never changes while the
//! entry is in use: a new key is written unused, then the same bytes marked used; a changed
//! value goes to the hash map and the entry is marked unused (the same bytes, `used` 0), and
//! only after [`ENTRY_QUARANTINE`] (far longer than a program runs) is the entry rewritten
//! with the new value and used again ([`Keys::settle`]); a removed key's entry is free after
//! the same quarantine.

use aya::maps::{Array, HashMap as BpfHash, MapData};
use aya::Ebpf;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::time::{Duration, Instant};
use upf_io::bpf;

/// How long an entry marked unused keeps its old value before it is rewritten.
pub const ENTRY_QUARANTINE: Duration = Duration::from_millis(100);

/// `struct session`.
pub const SESSION_LEN: usize = 48;
pub type SessionValue = [u8; SESSION_LEN];
/// `struct direct`: key, used, the session value, padding to a cache line.
const DIRECT_LEN: usize = 64;
type DirectValue = [u8; DIRECT_LEN];

/// One table of keys: a direct-mapped array and its hash map.
#[derive(Debug)]
pub struct Keys {
    array: &'static str,
    hash: &'static str,
    /// Downlink keys are addresses as in a header: their low bits are the last octet's.
    big_endian: bool,
    mask: u32,
    /// Entries in use (or reserved for a key waiting to come back): index → key, value.
    entries: HashMap<u32, (u32, SessionValue)>,
    /// Keys whose value is in the hash map (an entry of theirs may wait to take it back).
    hashed: HashMap<u32, SessionValue>,
    /// Entries marked unused: freed (no key) or waiting for their key's new value, since.
    waiting: VecDeque<(Instant, u32)>,
    /// Entries of removed keys in quarantine (index → since).
    freed: HashMap<u32, Instant>,
}

impl Keys {
    /// The table of maps `array` and `hash`, the array of `entries` (a power of two).
    pub fn new(array: &'static str, hash: &'static str, big_endian: bool, entries: u32) -> Self {
        Self {
            array,
            hash,
            big_endian,
            mask: entries - 1,
            entries: HashMap::new(),
            hashed: HashMap::new(),
            waiting: VecDeque::new(),
            freed: HashMap::new(),
        }
    }

    fn index(&self, key: u32) -> u32 {
        let k = if self.big_endian {
            u32::from_be(key)
        } else {
            key
        };
        k & self.mask
    }

    /// Sets `key`'s value.
    pub fn set(&mut self, ebpf: &mut Ebpf, key: u32, v: SessionValue) -> io::Result<()> {
        let i = self.index(key);
        match self.entries.get(&i).copied() {
            // Its entry, in use: the new value through the hash map, the entry unused.
            Some((k, old)) if k == key && !self.hashed.contains_key(&key) => {
                hash(ebpf, self.hash)?
                    .insert(key, v, 0)
                    .map_err(|e| bpf::error("session map", &e))?;
                self.hashed.insert(key, v);
                write(ebpf, self.array, i, key, false, &old)?;
                self.waiting.push_back((Instant::now(), i));
                Ok(())
            }
            // Its entry is waiting, or another key's: the hash map.
            Some(_) => self.set_hashed(ebpf, key, v),
            // A removed key's entry in quarantine: reserved, taken once it is over.
            None if self.freed.contains_key(&i) => {
                self.set_hashed(ebpf, key, v)?;
                let since = self.freed.remove(&i).unwrap_or_else(Instant::now);
                self.entries.insert(i, (key, v));
                let at = self.waiting.partition_point(|(t, _)| *t <= since);
                self.waiting.insert(at, (since, i));
                Ok(())
            }
            None => {
                write(ebpf, self.array, i, key, false, &v)?;
                write(ebpf, self.array, i, key, true, &v)?;
                self.entries.insert(i, (key, v));
                Ok(())
            }
        }
    }

    fn set_hashed(&mut self, ebpf: &mut Ebpf, key: u32, v: SessionValue) -> io::Result<()> {
        hash(ebpf, self.hash)?
            .insert(key, v, 0)
            .map_err(|e| bpf::error("session map", &e))?;
        self.hashed.insert(key, v);
        Ok(())
    }

    /// Removes `key` (best effort: what the kernel no longer has is gone already).
    pub fn remove(&mut self, ebpf: &mut Ebpf, key: u32) {
        let i = self.index(key);
        if let Some(&(k, old)) = self.entries.get(&i) {
            if k == key {
                let _ = write(ebpf, self.array, i, key, false, &old);
                self.entries.remove(&i);
                self.freed.insert(i, Instant::now());
            }
        }
        if self.hashed.remove(&key).is_some() {
            if let Ok(mut h) = hash(ebpf, self.hash) {
                let _ = h.remove(&key);
            }
        }
    }

    /// Entries whose quarantine is over: free again, or rewritten with their key's value from
    /// the hash map and used again (the key then leaves the hash map).
    pub fn settle(&mut self, ebpf: &mut Ebpf) {
        self.freed.retain(|_, at| at.elapsed() < ENTRY_QUARANTINE);
        while let Some(&(at, i)) = self.waiting.front() {
            if at.elapsed() < ENTRY_QUARANTINE {
                break;
            }
            self.waiting.pop_front();
            let Some(&(key, _)) = self.entries.get(&i) else {
                continue;
            };
            let Some(&v) = self.hashed.get(&key) else {
                continue;
            };
            let back = write(ebpf, self.array, i, key, false, &v)
                .and_then(|()| write(ebpf, self.array, i, key, true, &v));
            if back.is_ok() {
                self.entries.insert(i, (key, v));
                self.hashed.remove(&key);
                if let Ok(mut h) = hash(ebpf, self.hash) {
                    let _ = h.remove(&key);
                }
            }
        }
    }

    /// Keys in the hash map (another key's entry, or waiting): for tests and metrics.
    pub fn hashed(&self) -> usize {
        self.hashed.len()
    }
}

fn hash<'a>(
    ebpf: &'a mut Ebpf,
    name: &str,
) -> io::Result<BpfHash<&'a mut MapData, u32, SessionValue>> {
    let m = ebpf
        .map_mut(name)
        .ok_or_else(|| io::Error::other(format!("XDP engine object without its {name} map")))?;
    BpfHash::try_from(m).map_err(|e| bpf::error("session map", &e))
}

/// Writes entry `i` of array `name`: `key`, `used`, `v`.
fn write(
    ebpf: &mut Ebpf,
    name: &str,
    i: u32,
    key: u32,
    used: bool,
    v: &SessionValue,
) -> io::Result<()> {
    let m = ebpf
        .map_mut(name)
        .ok_or_else(|| io::Error::other(format!("XDP engine object without its {name} map")))?;
    let mut a: Array<&mut MapData, DirectValue> =
        Array::try_from(m).map_err(|e| bpf::error("direct map", &e))?;
    let mut d = [0u8; DIRECT_LEN];
    d[0..4].copy_from_slice(&key.to_ne_bytes());
    d[4..8].copy_from_slice(&u32::from(used).to_ne_bytes());
    d[8..8 + SESSION_LEN].copy_from_slice(v);
    a.set(i, d, 0).map_err(|e| bpf::error("direct map", &e))
}
