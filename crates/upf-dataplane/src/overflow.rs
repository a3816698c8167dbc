//! The overflow store for SDF filters: a half of a hot record ([`crate::hot`]) whose filters
//! do not fit its inline lines keeps them in a *run* of lines of this pipeline-wide arena,
//! and stays hot.
//!
//! Runs come in power-of-two sizes (1 to [`MAX_RUN_LINES`] lines) with a free list per size:
//! a run freed when its slot's record is rebuilt or removed is the next one of its size
//! handed out, so churn reuses lines instead of growing the arena (a rebuild of the same
//! rules gets its own run back). The arena grows by chunks of one huge page each, never
//! moved: growing copies nothing while the worker's packets wait, and the chunks are what
//! the huge-page allocator backs with huge pages. A run never crosses a chunk.

use crate::filter::FastFilter;

/// A line of two filters (a half's inline filter lines have the same layout).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(C, align(64))]
pub(crate) struct Line(pub [FastFilter; 2]);

const _: () = assert!(size_of::<Line>() == 64);

/// The longest run: 256 filters.
pub(crate) const MAX_RUN_LINES: usize = 128;
const CLASSES: usize = MAX_RUN_LINES.trailing_zeros() as usize + 1;
/// Lines of a chunk: 2 MiB, one huge page.
const CHUNK_LINES: usize = (2 << 20) / size_of::<Line>();
const _: () = assert!(CHUNK_LINES.is_power_of_two() && CHUNK_LINES >= MAX_RUN_LINES);

/// `lines` lines from line `at` of the arena; `lines == 0`: none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Run {
    pub at: u32,
    pub lines: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Arena {
    /// Each allocated with room for [`CHUNK_LINES`] and filled up to it, so never moved.
    chunks: Vec<Vec<Line>>,
    /// Free runs by size class (`1 << class` lines).
    free: [Vec<u32>; CLASSES],
    /// Runs handed out and not freed.
    live: usize,
}

/// The size class of a run of `lines` (1..=[`MAX_RUN_LINES`]) lines.
fn class(lines: usize) -> usize {
    lines.next_power_of_two().trailing_zeros() as usize
}

impl Arena {
    /// A run holding a copy of `src`; `None` if it is empty or longer than a run.
    pub fn alloc(&mut self, src: &[Line]) -> Option<Run> {
        let lines = src.len();
        if lines == 0 || lines > MAX_RUN_LINES {
            return None;
        }
        let c = class(lines);
        let at = match self.free[c].pop() {
            Some(at) => at,
            None => {
                let size = 1 << c;
                if self
                    .chunks
                    .last()
                    .is_none_or(|k| k.len() + size > CHUNK_LINES)
                {
                    // The last chunk's tail (shorter than this run) is left unused.
                    self.chunks.push(Vec::with_capacity(CHUNK_LINES));
                }
                let n = self.chunks.len() - 1;
                let k = self.chunks.last_mut()?;
                let at = u32::try_from(n * CHUNK_LINES + k.len()).ok()?;
                k.resize(k.len() + size, Line::default());
                at
            }
        };
        let run = Run {
            at,
            lines: u32::try_from(lines).ok()?,
        };
        let (k, off) = Self::place(run);
        self.chunks
            .get_mut(k)?
            .get_mut(off..off + lines)?
            .copy_from_slice(src);
        self.live += 1;
        Some(run)
    }

    /// Gives `run` back for reuse (a run of no lines is none).
    pub fn free(&mut self, run: Run) {
        if run.lines == 0 {
            return;
        }
        self.free[class(run.lines as usize)].push(run.at);
        self.live -= 1;
    }

    /// The chunk and offset of a run's first line.
    #[inline(always)]
    fn place(run: Run) -> (usize, usize) {
        let at = run.at as usize;
        (at / CHUNK_LINES, at % CHUNK_LINES)
    }

    /// The lines of `run`.
    #[inline(always)]
    pub fn lines(&self, run: Run) -> &[Line] {
        let (k, off) = Self::place(run);
        self.chunks
            .get(k)
            .and_then(|c| c.get(off..off + run.lines as usize))
            .unwrap_or(&[])
    }

    /// Runs in use.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Lines the arena has handed out so far, in use or free (its size, chunk tails aside).
    #[cfg(test)]
    pub fn lines_made(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{Pipeline, PipelineConfig};
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;
    use std::time::Instant;
    use upf_rules::sdf::FlowDescription;
    use upf_rules::*;

    /// Session `i`: an uplink and a downlink PDR with `n` filters each, forwarding to N6.
    /// Each session's filters are its own (remote address by `i`), so each has a shape and
    /// runs of its own.
    pub(crate) fn session(i: u32, n: u16) -> Arc<Session> {
        let mut s = Session::new(
            Seid(i.into()),
            Seid(i.into()),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
        );
        let ue = Ipv4Addr::from(0x0a00_0000 + i);
        let filters: Vec<SdfFilter> = (0..n)
            .map(|k| SdfFilter {
                flow: Some(
                    FlowDescription::parse(&format!(
                        "permit out 17 from 198.51.{}.7 {} to assigned",
                        i % 256,
                        5000 + k
                    ))
                    .unwrap(),
                ),
                ..Default::default()
            })
            .collect();
        for (id, uplink) in [(1, true), (2, false)] {
            let mut pdi = crate::test_rules::pdi(uplink, i, ue);
            pdi.sdf_filters = filters.clone().into();
            s.insert_pdr(Pdr {
                id: PdrId(id),
                precedence: Precedence(10),
                pdi,
                outer_header_removal: None,
                far: Some(FarId(1)),
                qers: Default::default(),
                urrs: Default::default(),
            })
            .unwrap();
        }
        s.insert_far(crate::test_rules::far(1, None)).unwrap();
        Arc::new(s)
    }

    #[test]
    fn churn_reuses_the_runs_it_frees() {
        let now = Instant::now();
        let mut p = Pipeline::new(now, PipelineConfig::default());
        let sizes = [5, 16, 30];
        let mut made = Vec::new();
        for round in 0..6 {
            for i in 1..=40u32 {
                let n = sizes[(i + round) as usize % 3];
                p.install(now, session(i, n), InstallFlags::default())
                    .unwrap();
            }
            assert_eq!(p.cold_sessions(), 0);
            assert_eq!(p.arena.live(), 80);
            for i in 1..=40u32 {
                // A rebuild of the same rules takes its runs back.
                let slot = p.by_seid[&Seid(i.into())] as usize;
                let shape = p.hot[slot].keys.shape;
                let runs = p.shapes.get(shape).runs;
                p.query(now, Seid(i.into()), &[]).unwrap();
                assert_eq!(p.hot[slot].keys.shape, shape);
                assert_eq!(p.shapes.get(shape).runs, runs);
                // A modification to another size frees its runs for others.
                let n = sizes[(i + round + 1) as usize % 3];
                p.install(now, session(i, n), InstallFlags::default())
                    .unwrap();
            }
            assert_eq!(p.arena.live(), 80);
            for i in 1..=40u32 {
                p.remove(now, Seid(i.into())).unwrap();
            }
            assert_eq!(p.arena.live(), 0);
            made.push(p.arena.lines_made());
        }
        // Rounds 3-5 ask what rounds 0-2 asked: the arena does not grow.
        assert_eq!(made[2..], [made[2]; 4], "{made:?}");
        // No more than the peak a class held: at most 40 sessions x 2 halves of one class.
        assert!(made[2] <= 80 * (4 + 8 + 16), "{made:?}");
    }

    /// The lines of `n` filters.
    fn filters(n: usize) -> Vec<Line> {
        vec![Line::default(); n.div_ceil(2)]
    }

    #[test]
    fn runs_are_sized_by_class_and_reused_once_freed() {
        let mut a = Arena::default();
        assert_eq!(a.alloc(&[]), None);
        assert_eq!(a.alloc(&filters(2 * MAX_RUN_LINES + 1)), None);
        let r5 = a.alloc(&filters(5)).unwrap();
        assert_eq!(r5.lines, 3);
        assert_eq!(a.lines(r5).len(), 3);
        let r16 = a.alloc(&filters(16)).unwrap();
        // 5 filters take 3 lines of a 4-line run.
        assert_eq!(r16.at, 4);
        assert_eq!(a.lines_made(), 12);
        a.free(r5);
        // A run of another class does not take it; one of its class does.
        let r32 = a.alloc(&filters(32)).unwrap();
        assert_ne!(r32.at, r5.at);
        let again = a.alloc(&filters(7)).unwrap();
        assert_eq!(again.at, r5.at);
        assert_eq!(a.live(), 3);
        for r in [r16, r32, again] {
            a.free(r);
        }
        assert_eq!(a.live(), 0);
    }

    #[test]
    fn runs_stay_within_a_chunk() {
        let mut a = Arena::default();
        let mut runs = Vec::new();
        for _ in 0..CHUNK_LINES / MAX_RUN_LINES {
            runs.push(a.alloc(&filters(2 * MAX_RUN_LINES)).unwrap());
        }
        let small = a.alloc(&filters(3)).unwrap();
        assert_eq!(small.at as usize, CHUNK_LINES);
        // Too long for the second chunk's tail: a third chunk.
        for _ in 0..(CHUNK_LINES - 2) / MAX_RUN_LINES {
            runs.push(a.alloc(&filters(2 * MAX_RUN_LINES)).unwrap());
        }
        let big = a.alloc(&filters(2 * MAX_RUN_LINES)).unwrap();
        assert_eq!(big.at as usize, 2 * CHUNK_LINES);
        assert_eq!(a.lines(big).len(), MAX_RUN_LINES);
    }
}
