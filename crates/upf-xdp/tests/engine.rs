//! The engine loaded in the kernel (root): the verifier takes the program, a full map refuses
//! a session, the drop reasons are named as the reference names them.

use std::net::{IpAddr, Ipv4Addr};
use upf_rules::*;
use upf_xdp::{Config, Engine, Hops, InstallError, NextHop, Reason};

fn config(sessions: u32) -> Config {
    Config {
        sessions,
        n3: Ipv4Addr::new(192, 0, 2, 1),
        outer_ttl: 64,
        hops: Hops {
            n3: NextHop::default(),
            n6: NextHop::default(),
        },
    }
}

/// A session with an uplink PDR (TEID `n`) to N6 and a downlink PDR (UE 10.0.x.y) to a gNB.
fn session(n: u32) -> Session {
    let ue = Ipv4Addr::from(0x0a00_0000 + n);
    let mut s = Session::new(Seid(u64::from(n)), Seid(1), "192.0.2.9".parse().unwrap());
    let mut ul = Pdi::any(Interface::Access);
    ul.local_f_teid = Some(LocalFTeid {
        teid: Teid(n),
        ipv4: None,
        ipv6: None,
    });
    ul.ue_ip = Some(UeIp {
        ipv4: Some(ue),
        ipv6: None,
        is_destination: false,
    });
    let mut dl = Pdi::any(Interface::Core);
    dl.ue_ip = Some(UeIp {
        ipv4: Some(ue),
        ipv6: None,
        is_destination: true,
    });
    for (id, pdi, ohr) in [(1u16, ul, true), (2, dl, false)] {
        s.insert_pdr(Pdr {
            id: PdrId(id),
            precedence: Precedence(1),
            pdi,
            outer_header_removal: ohr.then_some(OuterHeaderRemoval::GtpuUdpIp {
                delete_pdu_session_container: false,
            }),
            far: Some(FarId(u32::from(id))),
            qers: Default::default(),
            urrs: Default::default(),
        })
        .unwrap();
    }
    let mut to_gnb = Forwarding::to(Interface::Access);
    to_gnb.outer_header_creation = Some(OuterHeaderCreation::Gtpu {
        teid: Teid(7),
        peer: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 100)),
    });
    for (id, fw) in [(1, Forwarding::to(Interface::Core)), (2, to_gnb)] {
        s.insert_far(Far {
            id: FarId(id),
            action: ApplyAction::FORW,
            forwarding: Some(fw),
            duplicating: Box::default(),
            bar: None,
        })
        .unwrap();
    }
    s
}

#[test]
#[ignore = "needs root"]
fn the_program_loads_and_a_full_map_refuses() {
    let mut e = Engine::load(config(2)).expect("the verifier takes the program");
    e.install(&session(1)).unwrap();
    e.install(&session(2)).unwrap();
    e.install(&session(2)).expect("a replacement needs no room");
    assert!(matches!(e.install(&session(3)), Err(InstallError::Full(2))));
    let mut other = session(3);
    other.seid = Seid(1);
    other.pdrs[1].pdi.ue_ip.as_mut().unwrap().ipv4 = Some(Ipv4Addr::new(10, 0, 0, 2));
    assert!(
        matches!(e.install(&other), Err(InstallError::Conflict(_))),
        "the UE address of session 2"
    );
    e.remove(Seid(1)).unwrap();
    e.install(&session(3)).expect("room again");
    assert_eq!(e.sessions(), 2);
}

#[test]
#[ignore = "needs root"]
fn a_million_sessions_load() {
    let e = Engine::load(config(1_000_000)).expect("maps for 1M sessions");
    assert_eq!(e.sessions(), 0);
}

#[test]
fn drop_reasons_are_named_as_the_reference_names_them() {
    let names: Vec<&str> = upf_dataplane::DropReason::ALL
        .iter()
        .map(|r| r.name())
        .collect();
    for r in Reason::ALL {
        assert!(names.contains(&r.name()), "{}", r.name());
    }
}
