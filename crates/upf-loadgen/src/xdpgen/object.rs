//! Loading the programs' objects with aya, and their array maps.

use aya::maps::{Array, MapData};
use aya::programs::Xdp;
use aya::Ebpf;
use std::io;
use std::sync::Mutex;
use upf_io::bpf;

/// Loads XDP program `name` of `ebpf` into the kernel.
pub(super) fn load_xdp<'a>(ebpf: &'a mut Ebpf, name: &str) -> io::Result<&'a mut Xdp> {
    let prog: &mut Xdp = ebpf
        .program_mut(name)
        .ok_or_else(|| io::Error::other(format!("object without {name}")))?
        .try_into()
        .map_err(|e| bpf::error(name, &e))?;
    prog.load()
        .map_err(|e| bpf::error(&format!("BPF_PROG_LOAD (XDP {name})"), &e))?;
    Ok(prog)
}

/// XDP program `name` of `ebpf`, loaded.
pub(super) fn xdp<'a>(ebpf: &'a Ebpf, name: &str) -> io::Result<&'a Xdp> {
    ebpf.program(name)
        .ok_or_else(|| io::Error::other(format!("object without {name}")))?
        .try_into()
        .map_err(|e| bpf::error(name, &e))
}

/// An array map of `N`-octet values (u32 keys), taken out of its object; the threads that
/// read and reset it share it.
pub(super) struct ArrayMap<const N: usize> {
    name: &'static str,
    map: Mutex<Array<MapData, [u8; N]>>,
}

impl<const N: usize> std::fmt::Debug for ArrayMap<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ArrayMap({}, {N} octets)", self.name)
    }
}

impl<const N: usize> ArrayMap<N> {
    /// Map `name` of `ebpf` (after its programs are loaded: they hold the map from then on).
    pub(super) fn take(ebpf: &mut Ebpf, name: &'static str) -> io::Result<Self> {
        let m = ebpf
            .take_map(name)
            .ok_or_else(|| io::Error::other(format!("object without map {name}")))?;
        let map = Array::try_from(m).map_err(|e| bpf::error(name, &e))?;
        Ok(ArrayMap {
            name,
            map: Mutex::new(map),
        })
    }

    fn lock(&self) -> io::Result<std::sync::MutexGuard<'_, Array<MapData, [u8; N]>>> {
        self.map
            .lock()
            .map_err(|_| io::Error::other(format!("map {} lock poisoned", self.name)))
    }

    pub(super) fn get(&self, i: u32) -> io::Result<[u8; N]> {
        self.lock()?
            .get(&i, 0)
            .map_err(|e| bpf::error(&format!("reading map {}", self.name), &e))
    }

    pub(super) fn set(&self, i: u32, v: &[u8; N]) -> io::Result<()> {
        self.lock()?
            .set(i, v, 0)
            .map_err(|e| bpf::error(&format!("writing map {}", self.name), &e))
    }
}

pub(super) fn u64_at(v: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(v[off..off + 8].try_into().unwrap_or([0; 8]))
}

pub(super) fn u32_at(v: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(v[off..off + 4].try_into().unwrap_or([0; 4]))
}
