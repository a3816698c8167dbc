//! Accepted ⇒ applied (issue #26, Proof): random establishments and modifications go to the
//! agent as PFCP bytes; after each one the session the data path holds (read back from the
//! recording `MemDatapath`) must equal what a model of TS 29.244 §5.2 / §7.5 computes from the
//! requests alone, and a refused request must leave it unchanged.
//!
//! The model is written from the spec, not from the agent: removals, then creations, then
//! updates (§7.5.4), a removed rule's ID dropped from the rules that name it (§6.3.3.3), list
//! IEs of Update PDR replacing the list (Table 7.5.4.2-1), and every reference resolving at
//! the end. Where the agent and the model disagree about accepting, the test fails too.

mod harness;

use harness::{Smf, SMF_IP};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::Cause;
use upf_rules::{Gate, Interface, Session};
use upf_smf as smf;

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 7);

/// Where a FAR forwards to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dest {
    Core,
    Gnb { teid: u32, peer: Ipv4Addr },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PdrM {
    precedence: u32,
    uplink: bool,
    tos: Option<u8>,
    far: Option<u32>,
    qers: BTreeSet<u32>,
    urrs: BTreeSet<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FarM {
    action: u16,
    dest: Option<Dest>,
    bar: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct QerM {
    ul_open: bool,
    dl_open: bool,
    mbr: Option<(u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct UrrM {
    triggers: u32,
    threshold: Option<u64>,
}

/// A session as the SMF asked for it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Model {
    pdrs: BTreeMap<u16, PdrM>,
    fars: BTreeMap<u32, FarM>,
    qers: BTreeMap<u32, QerM>,
    urrs: BTreeMap<u32, UrrM>,
    bar: Option<u8>,
}

/// One change of a modification (or, the Create ones, a rule of an establishment).
#[derive(Debug, Clone)]
enum Op {
    CreatePdr(u16, PdrM),
    CreateFar(u32, FarM),
    CreateQer(u32, QerM),
    CreateUrr(u32, UrrM),
    CreateBar(u8),
    UpdatePdr {
        id: u16,
        precedence: Option<u32>,
        far: Option<u32>,
        qers: Vec<u32>,
        urrs: Vec<u32>,
    },
    UpdateFar {
        id: u32,
        action: Option<u16>,
        dest: Option<Dest>,
    },
    UpdateQer {
        id: u32,
        gate: Option<(bool, bool)>,
        mbr: Option<(u64, u64)>,
    },
    UpdateUrr {
        id: u32,
        threshold: Option<u64>,
    },
    RemovePdr(u16),
    RemoveFar(u32),
    RemoveQer(u32),
    RemoveUrr(u32),
    RemoveBar(u8),
}

impl Model {
    /// The session after `ops`, or `None` where TS 29.244 says to refuse them.
    fn apply(&self, ops: &[Op]) -> Option<Model> {
        let mut m = self.clone();
        for op in ops {
            match *op {
                Op::RemovePdr(id) => {
                    m.pdrs.remove(&id)?;
                }
                Op::RemoveFar(id) => {
                    m.fars.remove(&id)?;
                    for p in m.pdrs.values_mut().filter(|p| p.far == Some(id)) {
                        p.far = None;
                    }
                }
                Op::RemoveQer(id) => {
                    m.qers.remove(&id)?;
                    m.pdrs.values_mut().for_each(|p| {
                        p.qers.remove(&id);
                    });
                }
                Op::RemoveUrr(id) => {
                    m.urrs.remove(&id)?;
                    m.pdrs.values_mut().for_each(|p| {
                        p.urrs.remove(&id);
                    });
                }
                Op::RemoveBar(id) => {
                    if m.bar.take() != Some(id) {
                        return None;
                    }
                    for f in m.fars.values_mut().filter(|f| f.bar == Some(id)) {
                        f.bar = None;
                    }
                }
                _ => {}
            }
        }
        for op in ops {
            let fresh = match op {
                Op::CreateFar(id, f) => m.fars.insert(*id, f.clone()).is_none(),
                Op::CreateQer(id, q) => m.qers.insert(*id, q.clone()).is_none(),
                Op::CreateUrr(id, u) => m.urrs.insert(*id, u.clone()).is_none(),
                Op::CreateBar(id) => m.bar.replace(*id).is_none(),
                // FAR ID is conditional on predefined rules, which are not used here.
                Op::CreatePdr(_, p) if p.far.is_none() => false,
                Op::CreatePdr(id, p) => m.pdrs.insert(*id, p.clone()).is_none(),
                _ => true,
            };
            if !fresh {
                return None;
            }
        }
        for op in ops {
            match op {
                Op::UpdatePdr {
                    id,
                    precedence,
                    far,
                    qers,
                    urrs,
                } => {
                    let p = m.pdrs.get_mut(id)?;
                    if let Some(x) = precedence {
                        p.precedence = *x;
                    }
                    if let Some(x) = far {
                        p.far = Some(*x);
                    }
                    if !qers.is_empty() {
                        p.qers = qers.iter().copied().collect();
                    }
                    if !urrs.is_empty() {
                        p.urrs = urrs.iter().copied().collect();
                    }
                }
                Op::UpdateFar { id, action, dest } => {
                    let f = m.fars.get_mut(id)?;
                    if let Some(a) = action {
                        f.action = *a;
                    }
                    if let Some(d) = dest {
                        f.dest = Some(*d);
                    }
                }
                Op::UpdateQer { id, gate, mbr } => {
                    let q = m.qers.get_mut(id)?;
                    if let Some((ul, dl)) = gate {
                        (q.ul_open, q.dl_open) = (*ul, *dl);
                    }
                    if mbr.is_some() {
                        q.mbr = *mbr;
                    }
                }
                Op::UpdateUrr { id, threshold } => {
                    let u = m.urrs.get_mut(id)?;
                    if threshold.is_some() {
                        u.threshold = *threshold;
                    }
                }
                _ => {}
            }
        }
        let resolves = m.pdrs.values().all(|p| {
            p.far.is_none_or(|f| m.fars.contains_key(&f))
                && p.qers.iter().all(|q| m.qers.contains_key(q))
                && p.urrs.iter().all(|u| m.urrs.contains_key(u))
        }) && m.fars.values().all(|f| f.bar.is_none() || f.bar == m.bar);
        resolves.then_some(m)
    }

    /// What the data path holds, in the model's terms.
    fn of(s: &Session) -> Model {
        let ids = |v: &[u32]| v.iter().copied().collect::<BTreeSet<u32>>();
        Model {
            pdrs: s
                .pdrs
                .iter()
                .map(|p| {
                    let pdr = PdrM {
                        precedence: p.precedence.0,
                        uplink: p.pdi.source == Interface::Access,
                        tos: p.pdi.sdf_filters.iter().find_map(|f| f.tos.map(|t| t.0)),
                        far: p.far.map(|f| f.0),
                        qers: ids(&p.qers.iter().map(|q| q.0).collect::<Vec<_>>()),
                        urrs: ids(&p.urrs.iter().map(|u| u.0).collect::<Vec<_>>()),
                    };
                    (p.id.0, pdr)
                })
                .collect(),
            fars: s
                .fars
                .iter()
                .map(|f| {
                    let dest = f
                        .forwarding
                        .as_ref()
                        .map(|w| match w.outer_header_creation {
                            Some(upf_rules::OuterHeaderCreation::Gtpu {
                                teid,
                                peer: IpAddr::V4(peer),
                            }) if w.destination == Interface::Access => {
                                Dest::Gnb { teid: teid.0, peer }
                            }
                            _ => Dest::Core,
                        });
                    let far = FarM {
                        action: f.action.bits(),
                        dest,
                        bar: f.bar.map(|b| b.0),
                    };
                    (f.id.0, far)
                })
                .collect(),
            qers: s
                .qers
                .iter()
                .map(|q| {
                    let qer = QerM {
                        ul_open: q.gate_uplink == Gate::Open,
                        dl_open: q.gate_downlink == Gate::Open,
                        mbr: q.mbr.map(|b| (b.uplink_kbps, b.downlink_kbps)),
                    };
                    (q.id.0, qer)
                })
                .collect(),
            urrs: s
                .urrs
                .iter()
                .map(|u| {
                    let urr = UrrM {
                        triggers: u.triggers.bits(),
                        threshold: u.volume_threshold.and_then(|v| v.total),
                    };
                    (u.id.0, urr)
                })
                .collect(),
            bar: s.bar.as_ref().map(|b| b.id.0),
        }
    }
}

fn gate(open: bool) -> upf_pfcp::ie::Gate {
    if open {
        upf_pfcp::ie::Gate::Open
    } else {
        upf_pfcp::ie::Gate::Closed
    }
}

fn forwarding(d: Dest) -> ForwardingParameters {
    match d {
        Dest::Core => smf::forwarding(DestinationInterface::CORE, None),
        Dest::Gnb { teid, peer } => smf::forwarding(
            DestinationInterface::ACCESS,
            Some(OuterHeaderCreation {
                teid: Some(teid),
                ipv4: Some(peer),
                ..OuterHeaderCreation::empty(OuterHeaderCreation::GTPU_UDP_IPV4)
            }),
        ),
    }
}

fn create_pdr(id: u16, p: &PdrM) -> CreatePdr {
    let (source, teid, ue) = if p.uplink {
        (SourceInterface::ACCESS, Some(smf::choose_teid(1)), None)
    } else {
        let ue = smf::ue_ip(smf::UeAddr::Static(UE), true);
        (SourceInterface::CORE, None, Some(ue))
    };
    let mut pdi = smf::pdi(source, teid, ue, None);
    pdi.qfis = Default::default();
    if let Some(tos) = p.tos {
        pdi.sdf_filters.push(SdfFilter {
            tos_traffic_class: Some(u16::from(tos) << 8 | 0xfc),
            ..Default::default()
        });
    }
    let qers: Vec<u32> = p.qers.iter().copied().collect();
    let urrs: Vec<u32> = p.urrs.iter().copied().collect();
    let mut c = smf::create_pdr(id, p.precedence, pdi, 0, &qers, &urrs, p.uplink);
    c.far_id = p.far.map(FarId);
    c
}

fn create_far(id: u32, f: &FarM) -> CreateFar {
    smf::create_far(
        id,
        ApplyAction::from_bits_truncate(f.action),
        f.dest.map(forwarding),
        f.bar,
    )
}

fn create_qer(id: u32, q: &QerM) -> CreateQer {
    let mut c = smf::create_qer(id, q.mbr, None);
    c.gate_status = GateStatus {
        uplink: gate(q.ul_open),
        downlink: gate(q.dl_open),
    };
    c
}

fn create_urr(id: u32, u: &UrrM) -> CreateUrr {
    smf::create_urr(
        id,
        ReportingTriggers::from_bits_truncate(u.triggers),
        u.threshold,
    )
}

fn volume(total: u64) -> Volume {
    Volume {
        total: Some(total),
        uplink: None,
        downlink: None,
    }
}

/// The Session Modification Request carrying `ops`.
fn modification(ops: &[Op]) -> SessionModificationRequest {
    let mut m = smf::modification();
    for op in ops {
        match op {
            Op::CreatePdr(id, p) => m.create_pdrs.push(create_pdr(*id, p)),
            Op::CreateFar(id, f) => m.create_fars.push(create_far(*id, f)),
            Op::CreateQer(id, q) => m.create_qers.push(create_qer(*id, q)),
            Op::CreateUrr(id, u) => m.create_urrs.push(create_urr(*id, u)),
            Op::CreateBar(id) => {
                m.create_bar = Some(CreateBar {
                    bar_id: BarId(*id),
                    ..Default::default()
                })
            }
            Op::UpdatePdr {
                id,
                precedence,
                far,
                qers,
                urrs,
            } => m.update_pdrs.push(UpdatePdr {
                pdr_id: PdrId(*id),
                precedence: precedence.map(Precedence),
                far_id: far.map(FarId),
                qer_ids: qers.iter().map(|&q| QerId(q)).collect(),
                urr_ids: urrs.iter().map(|&u| UrrId(u)).collect(),
                ..Default::default()
            }),
            Op::UpdateFar { id, action, dest } => m.update_fars.push(UpdateFar {
                far_id: FarId(*id),
                apply_action: action.map(ApplyAction::from_bits_truncate),
                update_forwarding_parameters: dest.map(|d| {
                    let f = forwarding(d);
                    UpdateForwardingParameters {
                        destination_interface: Some(f.destination_interface),
                        network_instance: f.network_instance,
                        outer_header_creation: f.outer_header_creation,
                        ..Default::default()
                    }
                }),
                ..Default::default()
            }),
            Op::UpdateQer { id, gate: g, mbr } => m.update_qers.push(UpdateQer {
                qer_id: QerId(*id),
                gate_status: g.map(|(ul, dl)| GateStatus {
                    uplink: gate(ul),
                    downlink: gate(dl),
                }),
                mbr: mbr.map(|(u, d)| Mbr {
                    uplink_kbps: u,
                    downlink_kbps: d,
                }),
                ..Default::default()
            }),
            Op::UpdateUrr { id, threshold } => m.update_urrs.push(UpdateUrr {
                urr_id: UrrId(*id),
                volume_threshold: threshold.map(volume),
                ..Default::default()
            }),
            Op::RemovePdr(id) => m.remove_pdrs.push(RemovePdr { pdr_id: PdrId(*id) }),
            Op::RemoveFar(id) => m.remove_fars.push(RemoveFar { far_id: FarId(*id) }),
            Op::RemoveQer(id) => m.remove_qers.push(RemoveQer { qer_id: QerId(*id) }),
            Op::RemoveUrr(id) => m.remove_urrs.push(RemoveUrr { urr_id: UrrId(*id) }),
            Op::RemoveBar(id) => m.remove_bar = Some(RemoveBar { bar_id: BarId(*id) }),
        }
    }
    m
}

// Few IDs, so that duplicates, dangling references and removals of used rules come up often.
fn pdr_id() -> impl Strategy<Value = u16> {
    1u16..=4
}
fn rule_id() -> impl Strategy<Value = u32> {
    1u32..=3
}

fn dest() -> impl Strategy<Value = Dest> {
    prop_oneof![
        Just(Dest::Core),
        (1u32..=1000, 1u8..=3).prop_map(|(teid, n)| Dest::Gnb {
            teid,
            peer: Ipv4Addr::new(192, 0, 2, n),
        }),
    ]
}

fn pdr() -> impl Strategy<Value = PdrM> {
    let ids = || proptest::collection::btree_set(rule_id(), 0..=2);
    (
        0u32..300,
        any::<bool>(),
        proptest::option::of(0u8..64),
        proptest::option::weighted(0.9, rule_id()),
        ids(),
        ids(),
    )
        .prop_map(|(precedence, uplink, tos, far, qers, urrs)| PdrM {
            precedence,
            uplink,
            tos: tos.map(|t| t << 2),
            far,
            qers,
            urrs,
        })
}

fn far() -> impl Strategy<Value = FarM> {
    let f = |action: ApplyAction| action.bits();
    prop_oneof![
        dest().prop_map(move |d| FarM {
            action: f(ApplyAction::FORW),
            dest: Some(d),
            bar: None,
        }),
        Just(FarM {
            action: f(ApplyAction::DROP),
            dest: None,
            bar: None,
        }),
        proptest::option::of(Just(1u8)).prop_map(move |bar| FarM {
            action: f(ApplyAction::BUFF | ApplyAction::NOCP),
            dest: None,
            bar,
        }),
    ]
}

fn qer() -> impl Strategy<Value = QerM> {
    (
        any::<bool>(),
        any::<bool>(),
        proptest::option::of((1u64..1_000_000, 1u64..1_000_000)),
    )
        .prop_map(|(ul_open, dl_open, mbr)| QerM {
            ul_open,
            dl_open,
            mbr,
        })
}

fn urr() -> impl Strategy<Value = UrrM> {
    proptest::option::of(1u64..1 << 40).prop_map(|threshold| UrrM {
        triggers: if threshold.is_some() {
            ReportingTriggers::VOLTH.bits()
        } else {
            0
        },
        threshold,
    })
}

/// A modification's changes; Create BAR and Remove BAR occur at most once in a message.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..=3).prop_map(|ops| {
        let (mut create_bar, mut remove_bar) = (false, false);
        ops.into_iter()
            .filter(|op| match op {
                Op::CreateBar(_) => !std::mem::replace(&mut create_bar, true),
                Op::RemoveBar(_) => !std::mem::replace(&mut remove_bar, true),
                _ => true,
            })
            .collect()
    })
}

fn op() -> impl Strategy<Value = Op> {
    let ids = || proptest::collection::vec(rule_id(), 0..=2);
    prop_oneof![
        (pdr_id(), pdr()).prop_map(|(i, p)| Op::CreatePdr(i, p)),
        (rule_id(), far()).prop_map(|(i, f)| Op::CreateFar(i, f)),
        (rule_id(), qer()).prop_map(|(i, q)| Op::CreateQer(i, q)),
        (rule_id(), urr()).prop_map(|(i, u)| Op::CreateUrr(i, u)),
        Just(Op::CreateBar(1)),
        (
            pdr_id(),
            proptest::option::of(0u32..300),
            proptest::option::of(rule_id()),
            ids(),
            ids()
        )
            .prop_map(|(id, precedence, far, qers, urrs)| Op::UpdatePdr {
                id,
                precedence,
                far,
                qers,
                urrs,
            }),
        (
            rule_id(),
            proptest::option::of(far()),
            proptest::option::of(dest())
        )
            .prop_map(|(id, f, dest)| Op::UpdateFar {
                id,
                action: f.as_ref().map(|f| f.action),
                // A FAR switched to forwarding is told where to.
                dest: f.and_then(|f| f.dest).or(dest),
            }),
        (
            rule_id(),
            proptest::option::of((any::<bool>(), any::<bool>())),
            proptest::option::of((1u64..1_000_000, 1u64..1_000_000))
        )
            .prop_map(|(id, gate, mbr)| Op::UpdateQer { id, gate, mbr }),
        (rule_id(), proptest::option::of(1u64..1 << 40))
            .prop_map(|(id, threshold)| Op::UpdateUrr { id, threshold }),
        pdr_id().prop_map(Op::RemovePdr),
        rule_id().prop_map(Op::RemoveFar),
        rule_id().prop_map(Op::RemoveQer),
        rule_id().prop_map(Op::RemoveUrr),
        Just(Op::RemoveBar(1)),
    ]
}

/// An establishment's rules: at least one PDR and one FAR (mandatory, Table 7.5.2.1-1).
fn establishment() -> impl Strategy<Value = Vec<Op>> {
    (
        proptest::collection::btree_map(pdr_id(), pdr(), 1..=3),
        // Mostly every FAR, QER and URR a PDR may name, so that most sessions are valid.
        proptest::collection::btree_map(rule_id(), far(), 2..=3),
        proptest::collection::btree_map(rule_id(), qer(), 1..=3),
        proptest::collection::btree_map(rule_id(), urr(), 1..=3),
        proptest::bool::weighted(0.8),
        proptest::bool::weighted(0.9),
    )
        .prop_map(|(mut pdrs, fars, qers, urrs, bar, consistent)| {
            // Mostly valid sessions: their PDRs name only rules that exist.
            if consistent {
                for p in pdrs.values_mut() {
                    p.far = p
                        .far
                        .filter(|f| fars.contains_key(f))
                        .or(fars.keys().next().copied());
                    p.qers.retain(|q| qers.contains_key(q));
                    p.urrs.retain(|u| urrs.contains_key(u));
                }
            }
            let mut ops: Vec<Op> = fars.into_iter().map(|(i, f)| Op::CreateFar(i, f)).collect();
            ops.extend(qers.into_iter().map(|(i, q)| Op::CreateQer(i, q)));
            ops.extend(urrs.into_iter().map(|(i, u)| Op::CreateUrr(i, u)));
            ops.extend(bar.then_some(Op::CreateBar(1)));
            ops.extend(pdrs.into_iter().map(|(i, p)| Op::CreatePdr(i, p)));
            ops
        })
}

fn establishment_request(ops: &[Op], cp_seid: u64) -> SessionEstablishmentRequest {
    let m = modification(ops);
    SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(SMF_IP),
        cp_f_seid: FSeid {
            seid: cp_seid,
            ipv4: Some(SMF_IP),
            ipv6: None,
        },
        create_pdrs: m.create_pdrs,
        create_fars: m.create_fars,
        create_urrs: m.create_urrs,
        create_qers: m.create_qers,
        create_bar: m.create_bar,
        ..Default::default()
    }
}

fn installed(smf: &Smf, seid: u64) -> Option<Model> {
    smf.agent
        .datapath()
        .session(upf_rules::Seid(seid))
        .map(|s| Model::of(s))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn accepted_requests_are_applied_and_refused_ones_change_nothing(
        est in establishment(),
        mods in proptest::collection::vec(ops(), 1..=12),
    ) {
        let mut smf = Smf::associated();
        smf.cp_seid += 1;
        let (_, r) = smf.establish_with(establishment_request(&est, smf.cp_seid));
        let expected = Model::default().apply(&est);
        prop_assert_eq!(r.cause == Cause::REQUEST_ACCEPTED, expected.is_some(), "{:?}", r);
        let Some(mut model) = expected else {
            prop_assert_eq!(smf.agent.datapath().len(), 0);
            return Ok(());
        };
        let seid = r.up_f_seid.unwrap().seid;
        prop_assert_eq!(installed(&smf, seid), Some(model.clone()));
        for ops in &mods {
            let r = smf.modify(seid, modification(ops));
            let next = model.apply(ops);
            prop_assert_eq!(
                r.cause == Cause::REQUEST_ACCEPTED, next.is_some(), "{:?} for {:?}", r, ops
            );
            if let Some(next) = next {
                model = next;
            }
            prop_assert_eq!(installed(&smf, seid), Some(model.clone()), "after {:?}", ops);
        }
        let (_, r) = smf.delete(seid);
        prop_assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
        prop_assert!(installed(&smf, seid).is_none());
    }
}
