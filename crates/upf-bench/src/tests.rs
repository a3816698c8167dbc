//! The harness's own tests: profiles, workloads, results JSON, tables, plots, A/B arithmetic.

use crate::ab;
use crate::buffering;
use crate::harness::{Build, Machine, Measured, Results, Topology, SCHEMA};
use crate::memory::Orig;
use crate::profile::{self, Workload};
use crate::report;
use crate::spec::{self, Origin, Sweep};
use std::net::IpAddr;
use std::time::Instant;
use upf_dataplane::{DropReason, LocalAddrs, Output, Pipeline, PipelineConfig};
use upf_rules::PacketMeta;
use upf_rules::{ApplyAction, DatapathEvent, InstallFlags};
use upf_rules::{Interface, PdrId, QerId, Qfi, Session, Teid};

fn shipped(name: &str) -> spec::Profile {
    spec::load(name).expect("shipped profile loads").0
}

#[test]
fn every_shipped_profile_parses_with_its_quick_variant() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
    let mut files = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            files += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            let p = spec::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!p.points().is_empty(), "{}", p.name);
            let q = p.quick();
            q.validate().unwrap();
            assert!(q.points().len() <= p.points().len());
            assert!(q.sessions.count <= 1000, "{}: quick stays small", p.name);
            assert!(
                spec::shipped().any(|n| n == p.name),
                "{} is built in",
                p.name
            );
        }
    }
    assert_eq!(files, spec::shipped().count());
}

#[test]
fn invalid_profiles_name_the_key() {
    let s0 = include_str!("../../../profiles/s0.toml");
    let typo = s0.replace("count = 100000", "cont = 100000");
    let e = format!("{:#}", spec::parse(&typo).unwrap_err());
    assert!(e.contains("cont"), "{e}");
    let bad_qfi = s0.replace("qfi = 1\n", "qfi = 64\n");
    let e = format!("{:#}", spec::parse(&bad_qfi).unwrap_err());
    assert!(e.contains("bearers[0].qfi"), "{e}");
    let bad_type = s0.replace("sizes = [64,", "sizes = [\"64\",");
    let e = format!("{:#}", spec::parse(&bad_type).unwrap_err());
    assert!(e.contains("sizes"), "{e}");
    let bad_split = s0.replace("[42.5,", "[142.5,");
    let e = format!("{:#}", spec::parse(&bad_split).unwrap_err());
    assert!(e.contains("traffic.uplink_percent"), "{e}");
    let s1 = include_str!("../../../profiles/s1.toml");
    let e = format!(
        "{:#}",
        spec::parse(&s1.replacen("bearer = \"hp\"", "bearer = \"vip\"", 1)).unwrap_err()
    );
    assert!(e.contains("mixes[0].packets[0].bearer"), "{e}");
    assert!(spec::load("s9")
        .unwrap_err()
        .to_string()
        .contains("unknown profile"));
}

#[test]
fn own_ambr_gives_each_session_its_own_rate_and_nothing_else() {
    let p = shipped("s0");
    let shared = Workload::new(&p, None, 10, None).unwrap();
    let own = Workload::new(&p, None, 10, None).unwrap().own_ambr(true);
    let ambr = |s: &Session| s.qers.iter().find(|q| q.id == QerId(1)).unwrap().mbr;
    let base = ambr(&shared.session(3)).unwrap().uplink_kbps;
    assert_eq!(ambr(&shared.session(7)), ambr(&shared.session(3)));
    for i in [0u32, 3, 7] {
        let (a, b) = (shared.session(i), own.session(i));
        assert_eq!(ambr(&b).unwrap().uplink_kbps, base + u64::from(i));
        assert_eq!(ambr(&b).unwrap().downlink_kbps, base + u64::from(i));
        // Everything else as the profile gives it.
        let strip = |s: &Session| Session {
            qers: Vec::new(),
            ..s.clone()
        };
        assert_eq!(strip(&a), strip(&b));
    }
}

#[test]
fn s0_file_builds_what_issue_4_hard_coded() {
    let p = shipped("s0");
    let w = Workload::new(&p, None, p.sessions.count, None).unwrap();
    for i in [0, 1, 159, 160, 99_999] {
        assert_eq!(w.session(i), profile::s0_session(i), "UE {i}");
    }
    assert!(w.peak().is_none());
    // Same random draws, same packets (flow, then direction).
    let draws = [3u64, 100, 7, 9_000, 0, 4_249, 4, 4_250];
    let mut it = draws.iter().copied();
    for k in 0..4 {
        let (pk, up) = w.packet(&mut |_| it.next().unwrap(), 42, 128, 42.5);
        let flow = u16::try_from(draws[2 * k]).unwrap();
        let uplink = draws[2 * k + 1] < 4250;
        assert_eq!(up, uplink);
        assert_eq!(pk.data(), profile::s0_packet(42, flow, uplink, 128).data());
    }
}

#[test]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn s1_priority_is_marked_and_matched() {
    let p = shipped("s1");
    let w = Workload::new(&p, Some("profile1"), 10, None).unwrap();
    let s = w.session(3);
    let ue = IpAddr::V4(profile::ue_addr(3));
    let srv: IpAddr = "203.0.113.10".parse().unwrap();
    let meta = |source, qfi: Option<u8>, tos: u8| PacketMeta {
        source,
        teid: (source == Interface::Access).then_some(Teid(profile::ue_teid(3))),
        qfi: qfi.map(Qfi),
        src: if source == Interface::Access { ue } else { srv },
        dst: if source == Interface::Access { srv } else { ue },
        protocol: 17,
        src_port: 443,
        dst_port: 40000,
        tos,
        spi: None,
        flow_label: None,
    };
    let pdr = |m: PacketMeta| s.classify(&m).map(|p| p.id);
    assert_eq!(pdr(meta(Interface::Access, Some(1), 0)), Some(PdrId(1)));
    assert_eq!(pdr(meta(Interface::Access, Some(9), 0)), Some(PdrId(2)));
    assert_eq!(pdr(meta(Interface::Core, None, 46 << 2)), Some(PdrId(3)));
    assert_eq!(pdr(meta(Interface::Core, None, 0)), Some(PdrId(4)));
    // Profile 1's first row is uplink high priority at 175 B; the last downlink low at 645 B.
    let (hp, up) = w.packet(&mut |_| 0, 3, 0, 0.0);
    assert!(up);
    assert_eq!(hp.len(), 175 + 44);
    assert_eq!(hp.data()[20 + 8 + 12 + 2] & 0x3f, 1, "PSC QFI");
    let (lo, up) = w.packet(&mut |n| n - 1, 3, 0, 0.0);
    assert!(!up);
    assert_eq!((lo.len(), lo.data()[1]), (645, 0));
    let mut k = 0;
    let dl_hp_draw = |n: u64| {
        k += 1;
        // x just past the two uplink rows: the downlink high-priority row.
        if k == 1 {
            ((878_571.0 + 1_300_775.0 + 10.0) / 20_702_923.0 * n as f64) as u64
        } else {
            0
        }
    };
    let mut d = dl_hp_draw;
    let (dl, up) = w.packet(&mut d, 3, 0, 0.0);
    assert!(!up);
    assert_eq!((dl.len(), dl.data()[1]), (175, 46 << 2));
}

#[test]
fn s4_peak_ue_draws_its_share() {
    let p = shipped("s4");
    let w = Workload::new(&p, None, 1000, None).unwrap();
    let (peak, session) = w.peak().unwrap();
    assert_eq!(peak, 1000);
    assert_eq!(session.pdrs.len(), 2);
    let mut x: u64 = 1;
    let mut draw = |n: u64| {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) % n
    };
    let ues: Vec<u32> = (0..1000).collect();
    let hits = (0..100_000)
        .filter(|_| w.draw_ue(&mut draw, &ues) == peak)
        .count();
    assert!((52_000..54_200).contains(&hits), "{hits}");
}

#[test]
fn sweeps_expand_as_documented() {
    let p = shipped("s0");
    assert_eq!(p.points().len(), 24);
    assert_eq!(p.quick().points().len(), 2);
    let s = p.sweep(Sweep::Sessions).unwrap();
    assert_eq!(
        s.iter().map(|x| x.sessions).collect::<Vec<_>>(),
        [1000, 10_000, 100_000, 1_000_000]
    );
    assert!(s.iter().all(|x| x.size == 64));
    assert_eq!(p.quick().sweep(Sweep::Acl).unwrap().len(), 2);
    assert!(shipped("s3").sweep(Sweep::SdfFilters).is_err());
    // Throughput 25 % uplink with 100 B up and 300 B down is 50 % of the packets.
    assert!((p.packet_share(25.0, 100, 300) - 50.0).abs() < 1e-9);
    let args = p.points()[0].memory_args("s0");
    assert_eq!(args[..3], ["memory", "--profile", "s0"]);
    assert!(args.windows(2).any(|w| w == ["--uplink-percent", "42.5"]));
    let m = shipped("s3").points()[0].memory_args("s3");
    assert!(m.windows(2).any(|w| w == ["--mix", "imix596"]));
}

fn sample_results() -> Results {
    let p = shipped("s0").quick();
    let runs = p
        .points()
        .into_iter()
        .enumerate()
        .map(|(i, pt)| {
            let mpps = 3.0 - i as f64 * 0.5;
            let raw = serde_json::json!({
                "profile": "s0",
                "memory_per_session_bytes": 6100.0,
                "sizes": [{
                    "size": pt.size, "mpps_per_core": mpps, "gbps_per_core": 1.5,
                    "ns_per_packet": 1e3 / mpps, "null_forward_mpps_per_core": 50.0,
                    "ratio_to_null": mpps / 50.0,
                }],
            });
            let args = pt.memory_args("s0");
            Measured::from_line(pt, args, raw).unwrap()
        })
        .collect();
    Results {
        schema: SCHEMA,
        created_unix: 1,
        command: vec!["upf-bench".into(), "run".into()],
        machine: Machine {
            cpu_model: "Test CPU".into(),
            cpus: 2,
            memory_bytes: 1 << 30,
            kernel: "6.0".into(),
            hostname: "h".into(),
            load_before: [1.0, 2.0, 3.0],
            load_after: [1.5, 2.0, 3.0],
        },
        build: Build::this(),
        topology: Topology::Memory,
        sweep: Sweep::Points,
        quick: true,
        mixes: Vec::new(),
        notes: p.memory_notes(),
        profile: p,
        profile_origin: Origin::BuiltIn,
        runs,
    }
}

#[test]
fn results_json_round_trips() {
    let r = sample_results();
    let text = serde_json::to_string_pretty(&r).unwrap();
    let back: Results = serde_json::from_str(&text).unwrap();
    assert_eq!(back, r);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for k in ["machine", "build", "profile", "runs", "notes"] {
        assert!(v.get(k).is_some(), "{k}");
    }
    assert_eq!(v["runs"][0]["raw"]["sizes"][0]["mpps_per_core"], 3.0);
}

#[test]
fn table_has_a_row_per_point() {
    let t = report::table(&sample_results());
    let rows: Vec<&str> = t
        .lines()
        .filter(|l| l.starts_with("| 64 B") || l.starts_with("| 1400 B"))
        .collect();
    assert_eq!(rows.len(), 2, "{t}");
    assert!(
        rows[0].contains("| 3.00 | 1.50 | 333 | 50.00 | 0.06 | 6.1 kB |"),
        "{}",
        rows[0]
    );
    assert!(t.contains("Test CPU"));
    assert!(t.contains("Notes:"));
}

#[test]
fn plots_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let r = sample_results();
    report::render(&r, dir.path()).unwrap();
    for name in report::plot_names(&r) {
        let f = dir.path().join(&name);
        let bytes = std::fs::read(&f).unwrap();
        assert!(bytes.len() > 1000, "{name}: {} bytes", bytes.len());
        if name.ends_with(".png") {
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}");
        }
    }
    // A log-scale sweep too.
    let mut s = r;
    s.sweep = Sweep::Sessions;
    report::render(&s, dir.path()).unwrap();
    assert!(
        std::fs::metadata(dir.path().join("mpps-sessions.png"))
            .unwrap()
            .len()
            > 1000
    );
}

#[test]
fn ab_medians_and_ratio() {
    assert_eq!(ab::median(&[3.0, 1.0, 2.0]), 2.0);
    assert_eq!(ab::median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    assert!(ab::median(&[]).is_nan());
    let c = ab::compare("mpps_per_core", vec![2.0, 2.2, 1.8], vec![3.0, 2.7, 3.3]);
    assert_eq!((c.median_a, c.median_b), (2.0, 3.0));
    assert!((c.ratio - 1.5).abs() < 1e-12);
    let line = serde_json::json!({"sizes": [{"mpps_per_core": 2.5}]});
    assert_eq!(ab::metric(&line, "mpps_per_core"), 2.5);
    assert!(ab::metric(&line, "missing").is_nan());
}

#[test]
fn buffering_share_picks_its_count_of_sessions_spread_out() {
    let count = |n, s| buffering::pick(n, s).iter().filter(|&&b| b).count();
    assert_eq!(count(1000, 0.1), 100);
    assert_eq!(count(100_000, 0.1), 10_000);
    assert_eq!(count(10, 0.1), 1);
    assert_eq!(count(3, 0.5), 2);
    assert_eq!(count(7, 0.0), 0);
    assert_eq!(count(0, 0.1), 0);
    // Spread: every 10 sessions hold one of them.
    let p = buffering::pick(1000, 0.1);
    assert!(p.chunks(10).all(|c| c.iter().filter(|&&b| b).count() == 1));
}

#[test]
fn buffering_session_buffers_downlink_only_under_a_bar() {
    let t = Workload::new(&shipped("s0"), None, 10, None).unwrap();
    let s = t.session(3);
    let b = buffering::buffering_session(&s);
    assert!(b.bar.is_some());
    for (f, g) in s.fars.iter().zip(&b.fars) {
        let to_access = f
            .forwarding
            .as_ref()
            .is_some_and(|w| w.destination == Interface::Access);
        if to_access {
            assert_eq!(g.action, ApplyAction::BUFF | ApplyAction::NOCP);
            assert_eq!(g.bar, b.bar.map(|x| x.id));
        } else {
            assert_eq!(f, g);
        }
    }
    assert!(s.fars.iter().zip(&b.fars).any(|(f, g)| f != g));
    assert_eq!((&s.pdrs, &s.qers, &s.urrs), (&b.pdrs, &b.qers, &b.urrs));
}

/// The buffering bench's input stays full although the pipeline keeps what it buffers: each
/// kept packet is replaced by a new buffer, and only those (not the ones it sends or drops).
#[test]
fn refilled_input_stays_full_while_the_pipeline_keeps_packets() {
    let t = Workload::new(&shipped("s0"), None, 2, None).unwrap();
    let now = Instant::now();
    let mut pipeline = Pipeline::new(
        now,
        PipelineConfig {
            n3: LocalAddrs {
                v4: Some(profile::UPF_N3),
                v6: None,
            },
            ..Default::default()
        },
    );
    let sessions = [buffering::buffering_session(&t.session(0)), t.session(1)];
    for s in sessions {
        pipeline
            .install_shared(now, s, InstallFlags::default(), None)
            .unwrap();
    }
    let (mut batch, mut origs) = (Vec::new(), Vec::new());
    let mut x = 0;
    for _ in 0..8 {
        // Downlink only (uplink 0 %), a flow in turn.
        let (p, up) = t.packet(
            &mut |n| {
                x += 1;
                x % n.max(1)
            },
            1,
            64,
            0.0,
        );
        assert!(!up);
        origs.push(Orig::of(&p, up));
        batch.push(p);
    }
    let mut input = buffering::Input::new(vec![batch], vec![origs], 8);
    assert_eq!(input.batches(), 1);
    let limit = pipeline.config().buffer_packets_per_far;
    let (mut rx, mut out) = (Vec::new(), Output::default());
    let mut ue = 0;
    for round in 1..=20 {
        // UEs 0 (buffering) and 1 in turn.
        let others = input.fill(
            &mut rx,
            |_| {
                ue ^= 1;
                ue
            },
            |u| u != 0,
        );
        assert_eq!((rx.len(), others), (8, 4), "round {round}");
        // New buffers for what the pipeline kept so far, no more.
        assert_eq!(input.allocated, pipeline.buffered() as u64, "round {round}");
        pipeline.process(now, &mut rx, &mut out);
        assert_eq!(out.tx.len(), 4, "round {round}: UE 1's are sent");
        input.recycle(&mut out);
        assert_eq!(pipeline.buffered(), (4 * round).min(limit));
    }
    assert!(matches!(
        pipeline.poll_event(),
        Some(DatapathEvent::DownlinkData { .. })
    ));
    assert!(
        pipeline.poll_event().is_none(),
        "one report a buffering period"
    );
    assert_eq!(
        pipeline.counters().dropped(DropReason::BufferFull),
        80 - limit as u64
    );
}
