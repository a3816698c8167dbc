//! The shapes of hot sessions ([`crate::hot`]), interned: sessions whose rules differ only
//! in their keys, tunnels and state share one, found by value when a session is built and
//! counted by reference, so that however many sessions there are, the shapes a packet reads
//! are as few as the policies an SMF gives them.

use crate::hot::{Half, Shape};
use crate::overflow::{Arena, Line, Run};
use crate::tables::{FastMap, FoldHasher};
use smallvec::SmallVec;
use std::hash::{BuildHasher, BuildHasherDefault};

/// Shapes a chunk: ~1 MB.
const CHUNK: usize = 1024;

#[derive(Debug, Default)]
pub(crate) struct Shapes {
    /// By index, in chunks that never move (a `Vec` of a million shapes, ~1 GB, grown by
    /// copying held up the install that grew it for a second); a free index holds its
    /// last shape until reused.
    chunks: Vec<Box<[Shape; CHUNK]>>,
    /// By index, every index handed out so far.
    refs: Vec<u32>,
    /// The indices in use by hash of their halves and runs' lines (a shape is ~960
    /// octets: not kept twice, should every session have its own).
    ids: FastMap<u64, SmallVec<[u32; 1]>>,
    free: Vec<u32>,
}

fn hash(halves: &[Half; 2], runs: &[&[Line]; 2]) -> u64 {
    BuildHasherDefault::<FoldHasher>::default().hash_one((halves, runs))
}

impl Shapes {
    /// Room for `n` shapes' indices and hashes (a shape a session at most), where it can be
    /// had: a map of a million grown by rehashing held up the install that grew it. The
    /// chunks come as they are needed.
    pub fn with_capacity(n: usize) -> Self {
        let mut s = Self::default();
        let _ = s.refs.try_reserve_exact(n);
        let _ = s.ids.try_reserve(n);
        s
    }

    #[inline(always)]
    pub fn get(&self, id: u32) -> &Shape {
        let i = id as usize;
        // A chunk is an array: the offset in it needs no bounds check.
        &self.chunks[i / CHUNK][i % CHUNK]
    }

    fn get_mut(&mut self, id: u32) -> &mut Shape {
        let i = id as usize;
        &mut self.chunks[i / CHUNK][i % CHUNK]
    }

    /// Shapes in use.
    #[inline(always)]
    pub fn live(&self) -> usize {
        self.refs.len() - self.free.len()
    }

    /// The index of the shape of `halves` whose overflow runs hold `runs` (one more session
    /// refers to it): the one already in use, or a new one with its runs taken from `arena`.
    /// `None` when the arena has no room.
    pub fn intern(
        &mut self,
        halves: [Half; 2],
        runs: [Vec<Line>; 2],
        arena: &mut Arena,
    ) -> Option<u32> {
        let h = hash(&halves, &[&runs[0], &runs[1]]);
        let same = |s: &Shape| {
            s.halves == halves && (0..2).all(|k| arena.lines(s.runs[k]) == runs[k].as_slice())
        };
        if let Some(&id) = self
            .ids
            .get(&h)
            .and_then(|ids| ids.iter().find(|&&id| same(self.get(id))))
        {
            self.refs[id as usize] += 1;
            return Some(id);
        }
        let mut shape = Shape {
            halves,
            runs: [Run::default(); 2],
        };
        for (k, lines) in runs.iter().enumerate() {
            if lines.is_empty() {
                continue;
            }
            match arena.alloc(lines) {
                Some(r) => shape.runs[k] = r,
                None => {
                    free_runs(&shape, arena);
                    return None;
                }
            }
        }
        let id = match self.free.pop() {
            Some(id) => {
                *self.get_mut(id) = shape;
                self.refs[id as usize] = 1;
                id
            }
            None => {
                let made = self.refs.len();
                let Ok(id) = u32::try_from(made) else {
                    free_runs(&shape, arena);
                    return None;
                };
                if made.is_multiple_of(CHUNK) {
                    let chunk = vec![Shape::default(); CHUNK].into_boxed_slice();
                    self.chunks.push(chunk.try_into().ok()?);
                }
                *self.get_mut(id) = shape;
                self.refs.push(1);
                id
            }
        };
        self.ids.entry(h).or_default().push(id);
        Some(id)
    }

    /// One session less refers to shape `id`; the last gives its runs back to `arena`.
    pub fn release(&mut self, id: u32, arena: &mut Arena) {
        let i = id as usize;
        let Some(r) = self.refs.get_mut(i).filter(|r| **r != 0) else {
            return;
        };
        *r -= 1;
        if *r != 0 {
            return;
        }
        let s = *self.get(id);
        let h = hash(&s.halves, &[arena.lines(s.runs[0]), arena.lines(s.runs[1])]);
        if let Some(ids) = self.ids.get_mut(&h) {
            ids.retain(|&mut x| x != id);
            if ids.is_empty() {
                self.ids.remove(&h);
            }
        }
        free_runs(&s, arena);
        self.free.push(id);
    }
}

/// Gives a shape's runs back, last first (the arena's free lists are stacks, so a shape
/// built again takes them back in the same places).
fn free_runs(shape: &Shape, arena: &mut Arena) {
    for &r in shape.runs.iter().rev() {
        arena.free(r);
    }
}

#[cfg(test)]
mod tests {
    use crate::pipeline::Output;
    use crate::test_rules::{far, pdi, N3};
    use crate::{Pipeline, PipelineConfig};
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;
    use std::time::Instant;
    use upf_packet::{Packet, Port};
    use upf_rules::*;

    fn ue(i: u32) -> Ipv4Addr {
        Ipv4Addr::from(0x0a00_0000 + i)
    }

    fn gnb(i: u32) -> Ipv4Addr {
        Ipv4Addr::new(192, 0, 2, 100 + (i % 50) as u8)
    }

    /// Session `i` of one policy (an uplink and a downlink PDR, a downlink tunnel to its
    /// gNB, one QER with an MBR of `kbps` both ways): its TEID, UE address and tunnel are
    /// its own. `named`: the PDRs' one SDF filter names the UE's address, not `assigned`.
    fn session_with(i: u32, kbps: u64, named: bool) -> Arc<Session> {
        let mut s = Session::new(
            Seid(i.into()),
            Seid(i.into()),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        );
        for (id, uplink) in [(1, true), (2, false)] {
            let mut pdi = pdi(uplink, i, ue(i));
            if named {
                let text = format!("permit out 17 from 198.51.100.1 443 to {}", ue(i));
                pdi.sdf_filters = [SdfFilter {
                    flow: Some(upf_rules::sdf::FlowDescription::parse(&text).unwrap()),
                    ..Default::default()
                }]
                .into_iter()
                .collect();
            }
            s.insert_pdr(Pdr {
                id: PdrId(id),
                precedence: Precedence(10),
                pdi,
                outer_header_removal: uplink.then_some(OuterHeaderRemoval::GtpuUdpIp {
                    delete_pdu_session_container: false,
                }),
                far: Some(FarId(id.into())),
                qers: [QerId(1)].into_iter().collect(),
                urrs: Default::default(),
            })
            .unwrap();
            let tunnel = (!uplink).then_some((0x1000 + i, gnb(i)));
            s.insert_far(far(id.into(), tunnel)).unwrap();
        }
        let mut q = Qer::open(QerId(1));
        q.mbr = Some(Bitrate {
            uplink_kbps: kbps,
            downlink_kbps: kbps,
        });
        s.insert_qer(q).unwrap();
        Arc::new(s)
    }

    fn session(i: u32, kbps: u64) -> Arc<Session> {
        session_with(i, kbps, false)
    }

    fn config() -> PipelineConfig {
        PipelineConfig {
            n3: crate::LocalAddrs {
                v4: Some(N3),
                v6: None,
            },
            ..Default::default()
        }
    }

    /// A downlink UDP packet to UE `i` from 198.51.100.1 port `sport`.
    fn down_from(i: u32, sport: u16) -> Packet {
        let mut ip = vec![0u8; 48];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&48u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[198, 51, 100, 1]);
        ip[16..20].copy_from_slice(&ue(i).octets());
        let c = !upf_wire::checksum::sum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip[20..22].copy_from_slice(&sport.to_be_bytes());
        ip[22..24].copy_from_slice(&5000u16.to_be_bytes());
        ip[24..26].copy_from_slice(&28u16.to_be_bytes());
        Packet::from_bytes(Port::N6, &ip).unwrap()
    }

    fn down(i: u32) -> Packet {
        down_from(i, 443)
    }

    #[test]
    fn sessions_alike_share_one_shape_and_keep_their_own_tunnels() {
        let now = Instant::now();
        let mut p = Pipeline::new(now, config());
        let n = 100;
        for i in 1..=n {
            p.install(now, session(i, 1_000_000), InstallFlags::default())
                .unwrap();
        }
        assert_eq!((p.cold_sessions(), p.shapes.live()), (0, 1));
        // Each packet leaves by its own session's tunnel, the header checksum right.
        let mut rx: Vec<Packet> = (1..=n).map(down).collect();
        let mut out = Output::default();
        p.process(now, &mut rx, &mut out);
        assert_eq!(out.tx.len(), n as usize);
        for (i, pkt) in (1..=n).zip(&out.tx) {
            let d = upf_wire::encap::decapsulate_verified(pkt.data()).unwrap();
            assert_eq!(d.outer_dst, IpAddr::V4(gnb(i)), "session {i}");
            assert_eq!(d.gtpu.teid, 0x1000 + i, "session {i}");
        }
        // Another rate is another shape, for as long as a session has it.
        p.install(now, session(7, 2_000_000), InstallFlags::default())
            .unwrap();
        assert_eq!(p.shapes.live(), 2);
        p.install(now, session(7, 1_000_000), InstallFlags::default())
            .unwrap();
        assert_eq!(p.shapes.live(), 1);
        p.install(now, session(7, 2_000_000), InstallFlags::default())
            .unwrap();
        p.remove(now, Seid(7)).unwrap();
        assert_eq!(p.shapes.live(), 1);
        for i in 1..=n {
            let _ = p.remove(now, Seid(i.into()));
        }
        assert_eq!(p.shapes.live(), 0);
    }

    #[test]
    fn filters_that_name_the_ue_share_a_shape_and_still_filter() {
        let now = Instant::now();
        let mut p = Pipeline::new(now, config());
        for i in 1..=20 {
            p.install(
                now,
                session_with(i, 1_000_000, true),
                InstallFlags::default(),
            )
            .unwrap();
        }
        assert_eq!((p.cold_sessions(), p.shapes.live()), (0, 1));
        // From the filter's port, forwarded; from another, no PDR matches.
        let mut rx: Vec<Packet> = (1..=20)
            .flat_map(|i| [down(i), down_from(i, 444)])
            .collect();
        let mut out = Output::default();
        p.process(now, &mut rx, &mut out);
        assert_eq!(out.tx.len(), 20);
        assert_eq!(p.counters().dropped(crate::DropReason::NoMatchingPdr), 20);
    }

    #[test]
    fn shapes_with_runs_free_them_with_their_last_session() {
        let now = Instant::now();
        let mut p = Pipeline::new(now, PipelineConfig::default());
        // 30 filters each way: in runs. Sessions 1 and 2 have distinct filters.
        for i in [1, 2, 1 + 256] {
            p.install(
                now,
                crate::overflow::tests::session(i, 30),
                InstallFlags::default(),
            )
            .unwrap();
        }
        // Sessions 1 and 257 have the same filters (remote address by i % 256).
        assert_eq!((p.shapes.live(), p.arena.live()), (2, 4));
        p.remove(now, Seid(1)).unwrap();
        assert_eq!((p.shapes.live(), p.arena.live()), (2, 4));
        p.remove(now, Seid(257)).unwrap();
        assert_eq!((p.shapes.live(), p.arena.live()), (1, 2));
    }
}
