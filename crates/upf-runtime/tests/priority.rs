//! Priority modes in the workers' loop (seed 001): packets classified into queue groups as
//! they are received, the higher groups processed and sent first, each class in order.

use std::collections::HashMap;
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use upf_dataplane::{LocalAddrs, Packet, PipelineConfig, Port};
use upf_io::mem::{self, MemIo};
use upf_io::{IoStats, PacketIo, Pool};
use upf_rules::{Bitrate, Datapath, InstallFlags, Qer, QerId, Session};
use upf_runtime::priority::{Mode, PriorityConfig};
use upf_runtime::{PortQueue, RuntimeConfig, WorkerQueues, Workers};
use upf_wire::encap::{encapsulate_gtpu_v4, EncapV4, GtpuTunnel};
use upf_wire::ext::PduSessionContainer;
use upf_wire::{checksum, ip_proto};
mod common;
use common::{session, ue, UPF};

/// An in-memory queue that receives nothing until its gate opens: the test queues a whole
/// backlog first, so that what the worker sees does not depend on thread timing.
#[derive(Debug)]
struct Gated {
    io: MemIo,
    open: Arc<AtomicBool>,
}

impl PacketIo for Gated {
    fn rx_batch(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        if !self.open.load(Ordering::Acquire) {
            return Ok(0);
        }
        self.io.rx_batch(pool, batch, max)
    }

    fn tx_batch(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> io::Result<usize> {
        self.io.tx_batch(batch, pool)
    }

    fn stats(&self) -> IoStats {
        self.io.stats()
    }

    fn describe(&self) -> String {
        self.io.describe()
    }
}

/// An in-memory queue with a receive queue per group (as AF_XDP's socket per group, the test
/// playing the BPF program that classifies), gated like [`Gated`].
#[derive(Debug)]
struct Grouped {
    groups: [MemIo; 2],
    open: Arc<AtomicBool>,
}

impl PacketIo for Grouped {
    fn rx_batch(
        &mut self,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let n = self.rx_group(0, pool, batch, max)?;
        Ok(n + self.rx_group(1, pool, batch, max - n)?)
    }

    fn rx_groups(&self) -> usize {
        2
    }

    fn rx_group(
        &mut self,
        group: usize,
        pool: &mut Pool,
        batch: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        if !self.open.load(Ordering::Acquire) {
            return Ok(0);
        }
        self.groups[group].rx_batch(pool, batch, max)
    }

    fn tx_batch(&mut self, batch: &mut Vec<Packet>, pool: &mut Pool) -> io::Result<usize> {
        self.groups[0].tx_batch(batch, pool)
    }

    fn stats(&self) -> IoStats {
        let mut s = self.groups[0].stats();
        s.add(&self.groups[1].stats());
        s
    }

    fn describe(&self) -> String {
        "grouped".into()
    }
}

/// UDP source port of the inner packets: the class the test sent them in.
const HIGH_PORT: u16 = 1;
const LOW_PORT: u16 = 9;

/// A G-PDU from UE `i` with a UL PDU Session Container of `qfi`; the inner IPv4
/// Identification carries `seq`, the inner UDP source port `sport`.
fn gpdu_qfi(i: u32, qfi: u8, seq: u16, sport: u16) -> Vec<u8> {
    let mut ip = vec![0u8; 28];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&28u16.to_be_bytes());
    ip[4..6].copy_from_slice(&seq.to_be_bytes());
    ip[8] = 64;
    ip[9] = ip_proto::UDP;
    ip[12..16].copy_from_slice(&ue(i).octets());
    ip[16..20].copy_from_slice(&[198, 51, 100, 1]);
    let c = checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip[20..22].copy_from_slice(&sport.to_be_bytes());
    ip[24..26].copy_from_slice(&8u16.to_be_bytes());
    let mut buf = [0u8; 256];
    buf[128..128 + ip.len()].copy_from_slice(&ip);
    let e = EncapV4 {
        src: Ipv4Addr::new(192, 0, 2, 100),
        dst: UPF,
        ident: 0,
        dont_frag: false,
        tunnel: GtpuTunnel {
            teid: 100 + i,
            src_port: 2152,
            dst_port: 2152,
            psc: Some(PduSessionContainer::ul(qfi)),
            ttl: 64,
            dscp: 0,
            ecn: 0,
        },
    };
    let start = encapsulate_gtpu_v4(&mut buf, 128, ip.len(), &e).unwrap();
    buf[start..128 + ip.len()].to_vec()
}

const LOW: u16 = 600;
const HIGH: u16 = 24;
const BATCH: usize = 64;

/// What one worker in `mode` sent on N6 for a backlog of [`LOW`] low-priority G-PDUs (QFI 9)
/// followed by [`HIGH`] high-priority ones (QFI 1), two UEs each, and its statistics.
fn run(mode: Mode) -> (Vec<Vec<u8>>, upf_runtime::WorkerStats) {
    run_with(mode, None, session, None)
}

/// [`run`], MAX_RBS set to `max_rbs` at run time before the backlog is let in; with
/// `grouped`, N3 has a receive queue per group and the group queues hold `grouped` packets.
fn run_with(
    mode: Mode,
    max_rbs: Option<usize>,
    sessions: fn(u32) -> Arc<Session>,
    grouped: Option<usize>,
) -> (Vec<Vec<u8>>, upf_runtime::WorkerStats) {
    let cfg = RuntimeConfig {
        workers: 1,
        batch: BATCH,
        pipeline: PipelineConfig {
            n3: LocalAddrs {
                v4: Some(UPF),
                v6: None,
            },
            ..Default::default()
        },
        priority: PriorityConfig {
            mode,
            queue_packets: grouped.unwrap_or(upf_runtime::priority::QUEUE_PACKETS),
            ..Default::default()
        },
        ..Default::default()
    };
    let open = Arc::new(AtomicBool::new(false));
    let (n3, n3_peer) = mem::pair(Port::N3);
    let (n3_low, n3_low_peer) = mem::pair(Port::N3);
    let (n6, n6_peer) = mem::pair(Port::N6);
    let n3: Box<dyn PacketIo> = match grouped {
        None => Box::new(Gated {
            io: n3,
            open: open.clone(),
        }),
        Some(_) => Box::new(Grouped {
            groups: [n3, n3_low],
            open: open.clone(),
        }),
    };
    let queues = vec![WorkerQueues {
        queues: vec![
            PortQueue {
                port: Port::N3,
                instance: 0,
                io: n3,
            },
            PortQueue {
                port: Port::N6,
                instance: 0,
                io: Box::new(n6),
            },
        ],
        steered: true,
    }];
    let mut w = Workers::start_io(&cfg, queues).unwrap();
    for i in 0..2 {
        w.install(Instant::now(), sessions(i), InstallFlags::default())
            .unwrap();
    }
    let low_peer = if grouped.is_some() {
        &n3_low_peer
    } else {
        &n3_peer
    };
    for seq in 0..LOW {
        low_peer.inject(&gpdu_qfi(u32::from(seq % 2), 9, seq / 2, LOW_PORT));
    }
    for seq in 0..HIGH {
        n3_peer.inject(&gpdu_qfi(u32::from(seq % 2), 1, seq / 2, HIGH_PORT));
    }
    if let Some(n) = max_rbs {
        w.set_max_rbs(n).unwrap();
        // Control messages are applied in order: once this is answered, so is that.
        let _ = w.stats();
    }
    open.store(true, Ordering::Release);
    let total = usize::from(LOW + HIGH);
    let mut sent = Vec::new();
    // Until all came, or nothing did for a while (some were dropped), or 10 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut progress = Instant::now();
    while sent.len() < total && Instant::now() < deadline {
        let got = n6_peer.take_sent();
        if !got.is_empty() {
            progress = Instant::now();
        } else if progress.elapsed() > Duration::from_millis(500) {
            break;
        }
        sent.extend(got);
        std::thread::sleep(Duration::from_millis(2));
    }
    let stats = w.stats().remove(0);
    (sent, stats)
}

/// Low-priority packets sent before the last high-priority one; checks that every packet
/// came out and each (UE, class) in order.
fn low_before_last_high(sent: &[Vec<u8>]) -> usize {
    assert_eq!(sent.len(), usize::from(LOW + HIGH));
    let mut last: HashMap<([u8; 4], u16), u16> = HashMap::new();
    let mut low = 0;
    let mut low_before = 0;
    for d in sent {
        let src: [u8; 4] = d[12..16].try_into().unwrap();
        let sport = u16::from_be_bytes([d[20], d[21]]);
        let seq = u16::from_be_bytes([d[4], d[5]]);
        if let Some(prev) = last.insert((src, sport), seq) {
            assert!(prev < seq, "UE {src:?} class {sport}: {seq} after {prev}");
        }
        match sport {
            LOW_PORT => low += 1,
            HIGH_PORT => low_before = low,
            p => panic!("unexpected port {p}"),
        }
    }
    low_before
}

#[test]
fn strict_sends_the_high_group_ahead_of_a_low_backlog() {
    let max_rbs = 4;
    let (sent, stats) = run(Mode::Strict { max_rbs });
    let low_before = low_before_last_high(&sent);
    println!("strict, max_rbs {max_rbs}: {low_before} low-priority packets before the last high");
    // The worker reads a batch at a time from N3: the high packets, queued last, are all
    // read by the read that empties the backlog, and between two reads it takes at most
    // max_rbs low.
    let polls = usize::from(LOW + HIGH).div_ceil(BATCH);
    assert!(low_before <= polls * max_rbs, "{low_before} low before");
    assert_eq!(stats.groups.len(), 2);
    assert_eq!(stats.groups[0].stats.queued, u64::from(HIGH));
    assert_eq!(stats.groups[1].stats.queued, u64::from(LOW));
    assert!(stats
        .groups
        .iter()
        .all(|g| g.stats.dropped == 0 && g.depth == 0));
    assert!(stats.utilisation_permille.is_some());
}

/// A receive queue per group (classified by the backend): the high group is read before the
/// low backlog, so no low packet leaves before the last high one; and the low receive queue
/// is read only as far as its group queue has room, so the small group queue drops nothing.
#[test]
fn a_receive_queue_per_group_is_read_highest_first_and_by_room() {
    let (sent, stats) = run_with(Mode::Strict { max_rbs: 4 }, None, session, Some(40));
    assert_eq!(low_before_last_high(&sent), 0);
    assert_eq!(stats.groups[0].stats.queued, u64::from(HIGH));
    assert_eq!(stats.groups[1].stats.queued, u64::from(LOW));
    assert!(
        stats.groups.iter().all(|g| g.stats.dropped == 0),
        "{stats:?}"
    );
}

/// GBR first with a receive queue per group: UE 0's GBR flow arrives in the low group's
/// receive queue (the BPF programs do not know GBRs) with UE 1's, more than the low group's
/// software queue holds; UE 0's packets are all read, moved up and delivered, while UE 1's
/// drop (reading only as far as the low group has room would leave UE 0's packets in a ring
/// that, in the kernel, overflows for both).
#[test]
fn a_gbr_flow_in_a_lower_receive_queue_is_served_under_overload() {
    let (sent, stats) = run_with(Mode::Strict { max_rbs: 4 }, None, gbr_for_ue0, Some(100));
    let low_of = |i: u32| {
        (sent.iter())
            .filter(|d| {
                d[12..16] == ue(i).octets() && u16::from_be_bytes([d[20], d[21]]) == LOW_PORT
            })
            .count()
    };
    assert_eq!(low_of(0), usize::from(LOW / 2), "UE 0's GBR flow whole");
    assert!(
        low_of(1) < usize::from(LOW / 2),
        "UE 1's flow lost some: {}",
        low_of(1)
    );
    assert!(stats.groups[1].stats.dropped > 0);
    assert_eq!(stats.groups[0].stats.dropped, 0);
}

#[test]
fn max_rbs_changes_at_run_time() {
    let (sent, _) = run_with(Mode::Strict { max_rbs: 256 }, Some(1), session, None);
    let low_before = low_before_last_high(&sent);
    let polls = usize::from(LOW + HIGH).div_ceil(BATCH);
    assert!(low_before <= polls, "{low_before} low before");
    // Unchanged, the same backlog lets far more low packets out first.
    let (sent, _) = run(Mode::Strict { max_rbs: 256 });
    assert!(low_before_last_high(&sent) > 4 * polls);
}

#[test]
fn weighted_serves_both_groups_and_keeps_each_in_order() {
    let (sent, stats) = run(Mode::Weighted {
        weights: [4, 1, 0, 0],
    });
    let low_before = low_before_last_high(&sent);
    println!("weighted 4:1: {low_before} low-priority packets before the last high");
    assert!(low_before < usize::from(LOW), "{low_before} low before");
    assert_eq!(stats.groups[0].stats.queued, u64::from(HIGH));
}

/// [`session`], UE 0's under a QER with a Guaranteed Bit Rate.
fn gbr_for_ue0(i: u32) -> Arc<Session> {
    let mut s = Arc::unwrap_or_clone(session(i));
    if i == 0 {
        let mut q = Qer::open(QerId(1));
        q.gbr = Some(Bitrate {
            uplink_kbps: 64,
            downlink_kbps: 64,
        });
        s.insert_qer(q).unwrap();
        s.pdrs[0].qers = [QerId(1)].into_iter().collect();
    }
    Arc::new(s)
}

/// GBR first: UE 0's flow has a GBR, so its low-QFI packets go one group up, with the high
/// ones, ahead of UE 1's; each (UE, class) still in order.
#[test]
fn a_gbr_flow_goes_one_group_up() {
    let (sent, stats) = run_with(Mode::Strict { max_rbs: 4 }, None, gbr_for_ue0, None);
    low_before_last_high(&sent);
    let half = u64::from(LOW / 2);
    assert_eq!(stats.groups[0].stats.queued, u64::from(HIGH) + half);
    assert_eq!(stats.groups[1].stats.queued, half);
    // UE 0's low packets all left before the last of UE 1's.
    let ue0 = |d: &Vec<u8>| d[12..16] == ue(0).octets();
    let last_ue1 = sent.iter().rposition(|d| !ue0(d)).unwrap();
    let last_ue0_low = (sent.iter())
        .rposition(|d| ue0(d) && u16::from_be_bytes([d[20], d[21]]) == LOW_PORT)
        .unwrap();
    assert!(last_ue0_low < last_ue1, "{last_ue0_low} {last_ue1}");
}

#[test]
fn max_rbs_is_refused_where_the_mode_has_none() {
    for mode in [
        Mode::Fifo,
        Mode::Weighted {
            weights: [2, 1, 0, 0],
        },
    ] {
        let cfg = RuntimeConfig {
            workers: 1,
            priority: PriorityConfig {
                mode,
                ..Default::default()
            },
            ..Default::default()
        };
        let w = Workers::start(&cfg).unwrap();
        assert!(w.set_max_rbs(8).is_err());
    }
}

#[test]
fn fifo_is_arrival_order_without_groups() {
    let (sent, stats) = run(Mode::Fifo);
    // Every low packet was queued ahead of the high ones, and left ahead of them.
    assert_eq!(low_before_last_high(&sent), usize::from(LOW));
    assert!(stats.groups.is_empty());
    assert_eq!(stats.utilisation_permille, None);
}
