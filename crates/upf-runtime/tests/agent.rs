//! The real agent over the workers: PFCP sessions installed on the worker owning their UE,
//! packets through both workers, usage reported to the byte on deletion.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};
use upf_dataplane::{LocalAddrs, PipelineConfig, Port};
use upf_n4::{Agent, Config};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message, Pdu};
use upf_runtime::{steer, RuntimeConfig, Workers};
use upf_smf as smf;

mod common;
use common::{gpdu_sized, UPF};

const SMF: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 9);

struct Rig {
    agent: Agent<Workers>,
    now: Instant,
    seq: u32,
}

impl Rig {
    fn request(&mut self, seid: Option<u64>, m: impl Into<Message>) -> Message {
        self.seq += 1;
        let peer = SocketAddr::new(SMF.into(), 8805);
        self.agent
            .handle_datagram(self.now, peer, &smf::encode(seid, self.seq, m));
        std::iter::from_fn(|| self.agent.poll_transmit())
            .map(|t| Pdu::decode(&t.payload).unwrap().0)
            .find(|p| p.header.sequence == self.seq)
            .expect("a response")
            .message
    }
}

fn session(ue: Ipv4Addr, cp_seid: u64) -> SessionEstablishmentRequest {
    let mut ul = smf::pdi(
        SourceInterface::ACCESS,
        Some(smf::choose_teid(1)),
        Some(smf::ue_ip(smf::UeAddr::Static(ue), false)),
        None,
    );
    ul.qfis = Default::default();
    SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(SMF),
        cp_f_seid: FSeid {
            seid: cp_seid,
            ipv4: Some(SMF),
            ipv6: None,
        },
        create_pdrs: [smf::create_pdr(1, 100, ul, 1, &[], &[1], true)]
            .into_iter()
            .collect(),
        create_fars: [smf::create_far(
            1,
            ApplyAction::FORW,
            Some(smf::forwarding(DestinationInterface::CORE, None)),
            None,
        )]
        .into_iter()
        .collect(),
        create_urrs: [smf::create_urr(1, ReportingTriggers::default(), None)]
            .into_iter()
            .collect(),
        pdn_type: Some(PdnType::IPV4),
        ..Default::default()
    }
}

#[test]
fn pfcp_sessions_over_two_workers_report_exact_usage() {
    let now = Instant::now();
    let workers = Workers::start(&RuntimeConfig {
        workers: 2,
        pipeline: PipelineConfig {
            n3: LocalAddrs {
                v4: Some(UPF),
                v6: None,
            },
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let mut r = Rig {
        agent: Agent::new(Config::new(UPF.into()), workers, now, 3_900_000_000).unwrap(),
        now,
        seq: 0,
    };
    assert!(matches!(
        r.request(None, smf::association_setup(NodeId::Ipv4(SMF), 1)),
        Message::AssociationSetupResponse(_)
    ));
    // UEs chosen so that both workers own some.
    let ues: Vec<Ipv4Addr> = (1..=8).map(|i| Ipv4Addr::new(10, 60, 0, i)).collect();
    let owners: Vec<usize> = ues
        .iter()
        .map(|u| steer::worker_of(steer::ue_hash((*u).into()), 2))
        .collect();
    assert!(owners.contains(&0) && owners.contains(&1), "{owners:?}");
    let mut seids = Vec::new();
    let mut teids = Vec::new();
    for (i, ue) in ues.iter().enumerate() {
        let Message::SessionEstablishmentResponse(m) =
            r.request(Some(0), session(*ue, 100 + i as u64))
        else {
            panic!()
        };
        assert_eq!(m.cause, Cause::REQUEST_ACCEPTED);
        seids.push(m.up_f_seid.unwrap().seid);
        teids.push(
            m.created_pdrs
                .iter()
                .find_map(|c| match c.local_f_teid {
                    Some(FTeid::Assigned { teid, .. }) => Some(teid),
                    _ => None,
                })
                .unwrap(),
        );
    }
    // UE i sends i+1 packets of 100 + i octets of payload (128 + i octets of IP).
    let mut batch = Vec::new();
    for (i, ue) in ues.iter().enumerate() {
        for _ in 0..=i {
            batch.push(gpdu_sized(teids[i], *ue, 0, 0, 100 + i));
        }
    }
    let n = batch.len();
    r.agent.datapath().steer(batch);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < n && Instant::now() < deadline {
        got.extend(r.agent.datapath().collect(Duration::from_millis(100)));
    }
    assert_eq!(got.len(), n);
    assert!(got.iter().all(|p| p.port() == Port::N6));
    for (i, seid) in seids.iter().enumerate() {
        let Message::SessionDeletionResponse(m) = r.request(Some(*seid), SessionDeletionRequest {})
        else {
            panic!()
        };
        assert_eq!(m.cause, Cause::REQUEST_ACCEPTED);
        let v = m.usage_reports[0].volume_measurement.unwrap();
        let bytes = (i as u64 + 1) * (128 + i as u64);
        assert_eq!(
            (v.total_volume, v.uplink_volume),
            (Some(bytes), Some(bytes)),
            "UE {i}"
        );
    }
    let c = r.agent.datapath().counters();
    assert!(c.iter().all(|c| c.balanced() && c.sent() > 0), "{c:?}");
}
