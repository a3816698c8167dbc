//! Malformed input replayed against the agent (TS 29.244 §7.6): truncated, garbage, over-long
//! and wrong-length messages, each built from a valid request and named. For every vector:
//! a request gets exactly one response of the right type with its sequence number and the
//! Cause (and Offending IE) the error calls for; anything else gets no answer; nothing panics;
//! a rejected request leaves the sessions as they were.
mod harness;

use harness::*;
use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};
use std::net::Ipv4Addr;
use upf_pfcp::ie::*;
use upf_pfcp::messages::*;
use upf_pfcp::{Cause, Message, Pdu};
use upf_smf::{self as smf, UeAddr};

// ---- a PFCP message as a tree of IEs, to corrupt and re-encode ----------------------------

/// Grouped IE types this file looks into.
const GROUPED: &[u16] = &[1, 2, 3, 4, 6, 7, 10, 11, 85];

const IE_CREATE_PDR: u16 = 1;
const IE_PDI: u16 = 2;
const IE_CREATE_FAR: u16 = 3;
const IE_UPDATE_FAR: u16 = 10;
const IE_F_TEID: u16 = 21;
const IE_PDR_ID: u16 = 56;
const IE_F_SEID: u16 = 57;
const IE_NODE_ID: u16 = 60;
const IE_RECOVERY_TIME_STAMP: u16 = 96;
const IE_FAR_ID: u16 = 108;
const IE_PDN_TYPE: u16 = 113;

#[derive(Debug, Clone)]
struct Ie {
    t: u16,
    /// The value of a leaf IE.
    v: Vec<u8>,
    /// The children of a grouped IE.
    kids: Option<Vec<Ie>>,
    /// The length field to write instead of the real one.
    len_override: Option<u16>,
}

fn parse_ies(mut b: &[u8]) -> Vec<Ie> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let t = u16::from_be_bytes([b[0], b[1]]);
        let n = usize::from(u16::from_be_bytes([b[2], b[3]]));
        let v = &b[4..4 + n];
        out.push(Ie {
            t,
            v: v.to_vec(),
            kids: GROUPED.contains(&t).then(|| parse_ies(v)),
            len_override: None,
        });
        b = &b[4 + n..];
    }
    assert!(b.is_empty());
    out
}

fn encode_ies(ies: &[Ie], out: &mut Vec<u8>) {
    for ie in ies {
        let mut v = Vec::new();
        match &ie.kids {
            Some(k) => encode_ies(k, &mut v),
            None => v.extend_from_slice(&ie.v),
        }
        out.extend_from_slice(&ie.t.to_be_bytes());
        let n = ie
            .len_override
            .unwrap_or_else(|| u16::try_from(v.len()).unwrap());
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(&v);
    }
}

#[derive(Debug, Clone)]
struct Msg {
    flags: u8,
    mtype: u8,
    seid: Option<u64>,
    seq: u32,
    body: Vec<Ie>,
}

impl Msg {
    fn parse(b: &[u8]) -> Self {
        let s = b[0] & 1 != 0;
        let h = if s { 16 } else { 8 };
        Self {
            flags: b[0],
            mtype: b[1],
            seid: s.then(|| u64::from_be_bytes(b[4..12].try_into().unwrap())),
            seq: u32::from_be_bytes([0, b[h - 4], b[h - 3], b[h - 2]]),
            body: parse_ies(&b[h..]),
        }
    }

    fn body_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        encode_ies(&self.body, &mut v);
        v
    }

    /// Header with the length patched to `body.len()`, then `body`.
    fn with_body(&self, body: &[u8]) -> Vec<u8> {
        let mut out = vec![self.flags, self.mtype, 0, 0];
        if let Some(s) = self.seid {
            out.extend_from_slice(&s.to_be_bytes());
        }
        out.extend_from_slice(&self.seq.to_be_bytes()[1..]);
        out.push(0);
        let len = u16::try_from(out.len() - 4 + body.len()).unwrap();
        out[2..4].copy_from_slice(&len.to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn bytes(&self) -> Vec<u8> {
        self.with_body(&self.body_bytes())
    }

    /// The `n`th top-level IE of type `t`.
    fn ie(&mut self, t: u16, n: usize) -> &mut Ie {
        self.body.iter_mut().filter(|i| i.t == t).nth(n).unwrap()
    }
}

impl Ie {
    fn kid(&mut self, t: u16) -> &mut Ie {
        self.kids
            .as_mut()
            .unwrap()
            .iter_mut()
            .find(|i| i.t == t)
            .unwrap()
    }
    fn remove_kid(&mut self, t: u16) {
        self.kids.as_mut().unwrap().retain(|i| i.t != t);
    }
}

// ---- the requests the vectors are made of ----------------------------------------------

const SEQ: u32 = 0x00_0777;
/// Stands for the UP SEID of the session every run establishes first: SEIDs are random, so
/// `run` writes the one the agent handed out over it.
const SEID: u64 = 0x5E1D_0000_0000_0001;
const CP_SEID: u64 = 0x2000;

fn smf_node() -> NodeId {
    NodeId::Ipv4(SMF_IP)
}

fn establishment() -> Msg {
    let req = smf::establishment(smf_node(), CP_SEID, SMF_IP, UeAddr::Choose);
    Msg::parse(&smf::encode(Some(0), SEQ, req))
}

fn heartbeat(seq: u32) -> Msg {
    Msg::parse(&smf::encode(
        None,
        seq,
        HeartbeatRequest {
            recovery_time_stamp: RecoveryTimeStamp(1234),
            source_ip_address: None,
        },
    ))
}

fn modification() -> Msg {
    let mut m = smf::modification();
    m.update_fars = [smf::update_far_to_gnb(
        4,
        0x0200_0002,
        Ipv4Addr::new(10, 0, 1, 2),
    )]
    .into_iter()
    .collect();
    Msg::parse(&smf::encode(Some(SEID), SEQ, m))
}

/// Garbage from a seeded generator (deterministic).
fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut b = vec![0; n];
    SmallRng::seed_from_u64(seed).fill_bytes(&mut b);
    b
}

// ---- expectations -----------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offending {
    Any,
    No,
    Ie(u16),
}

#[derive(Debug, Clone, Copy)]
struct Reply {
    mtype: u8,
    seq: u32,
    /// None: the response type has no Cause (Heartbeat, Version Not Supported).
    cause: Option<Cause>,
    offending: Offending,
}

fn reply(mtype: u8, cause: Cause, offending: Offending) -> Reply {
    Reply {
        mtype,
        seq: SEQ,
        cause: Some(cause),
        offending,
    }
}

struct Case {
    name: String,
    bytes: Vec<u8>,
    want: Vec<Reply>,
    /// Sessions after the vector, relative to before.
    sessions_added: usize,
}

fn case(name: impl Into<String>, bytes: Vec<u8>, want: Vec<Reply>) -> Case {
    Case {
        name: name.into(),
        bytes,
        want,
        sessions_added: 0,
    }
}

fn cause_of(m: &Message) -> (Option<Cause>, Option<u16>) {
    match m {
        Message::SessionEstablishmentResponse(m) => (Some(m.cause), m.offending_ie.map(|o| o.0)),
        Message::SessionModificationResponse(m) => (Some(m.cause), m.offending_ie.map(|o| o.0)),
        Message::SessionDeletionResponse(m) => (Some(m.cause), m.offending_ie.map(|o| o.0)),
        Message::AssociationSetupResponse(m) => (Some(m.cause), None),
        Message::SessionSetDeletionResponse(m) => (Some(m.cause), m.offending_ie.map(|o| o.0)),
        _ => (None, None),
    }
}

/// `bytes` with [`SEID`] in any message header replaced by `seid`.
fn with_seid(bytes: &[u8], seid: u64) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let mut off = 0;
    while let Some(h) = b.get_mut(off..off + 12) {
        if h[0] & 1 != 0 && h[4..12] == SEID.to_be_bytes() {
            h[4..12].copy_from_slice(&seid.to_be_bytes());
        }
        if h[0] & 2 == 0 {
            break;
        }
        off += 4 + usize::from(u16::from_be_bytes([h[2], h[3]]));
    }
    b
}

/// Runs one vector against a fresh associated agent holding one session; returns a
/// description of every mismatch.
fn run(c: &Case) -> Vec<String> {
    let mut s = Smf::associated();
    let seid = s.establish_ok();
    let rules_before = s.agent.session(upf_rules::Seid(seid)).cloned();
    let before = s.agent.session_count();
    let out = s.send_bytes(&with_seid(&c.bytes, seid));
    let mut errs = Vec::new();
    let mut got = Vec::new();
    for t in &out {
        if t.dest != s.addr {
            errs.push(format!("sent to {}", t.dest));
        }
        match Pdu::decode(&t.payload) {
            Ok((p, [])) => got.push(p),
            other => errs.push(format!("our own message does not decode: {other:?}")),
        }
    }
    if got.len() != c.want.len() {
        errs.push(format!(
            "{} responses, want {}: {:?}",
            got.len(),
            c.want.len(),
            got.iter()
                .map(|p| (p.message.message_type(), cause_of(&p.message)))
                .collect::<Vec<_>>()
        ));
    }
    for (p, w) in got.iter().zip(&c.want) {
        let (cause, off) = cause_of(&p.message);
        let ok_off = match w.offending {
            Offending::Any => true,
            Offending::No => off.is_none(),
            Offending::Ie(t) => off == Some(t),
        };
        if p.message.message_type() != w.mtype
            || p.header.sequence != w.seq
            || cause != w.cause
            || !ok_off
        {
            errs.push(format!(
                "got type {} seq {:#x} cause {:?} offending {:?}; want {:?}",
                p.message.message_type(),
                p.header.sequence,
                cause,
                off,
                w
            ));
        }
    }
    let after = s.agent.session_count();
    if after != before + c.sessions_added {
        errs.push(format!("sessions {before} → {after}"));
    }
    if c.sessions_added == 0 && s.agent.session(upf_rules::Seid(seid)).cloned() != rules_before {
        errs.push("the existing session's rules changed".into());
    }
    errs
}

fn check(cases: &[Case]) {
    let mut failed = Vec::new();
    for c in cases {
        let errs = run(c);
        if !errs.is_empty() {
            failed.push(format!("{}: {}", c.name, errs.join("; ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} vectors failed:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

const EST_RSP: u8 = 51;
const MOD_RSP: u8 = 53;

// ---- the vectors --------------------------------------------------------------------------

/// Every prefix of the establishment body, with the header length patched to match: a cut
/// inside an IE is an IE running past its parent (68, that IE); a cut between IEs leaves
/// mandatory IEs out (66, the first missing one) or rules referring to rules not created.
fn truncated_patched() -> Vec<Case> {
    let m = establishment();
    let body = m.body_bytes();
    // Top-level IE boundaries.
    let mut bounds = vec![(0usize, 0u16)];
    let mut off = 0;
    for ie in &m.body {
        let mut one = Vec::new();
        encode_ies(std::slice::from_ref(ie), &mut one);
        off += one.len();
        bounds.push((off, ie.t));
    }
    let mut cases = Vec::new();
    for k in 0..body.len() {
        let name = format!("establishment_truncated_patched_{k}");
        let bytes = m.with_body(&body[..k]);
        let j = bounds.iter().rposition(|&(b, _)| b <= k).unwrap();
        let want = if bounds[j].0 != k {
            // Inside IE j (0-based: m.body[j]).
            let t = m.body[j].t;
            let offending = if k - bounds[j].0 < 4 {
                Offending::Any
            } else {
                Offending::Ie(t)
            };
            reply(EST_RSP, Cause::INVALID_LENGTH, offending)
        } else {
            let present: Vec<u16> = m.body[..j].iter().map(|i| i.t).collect();
            let missing = [IE_NODE_ID, IE_F_SEID, IE_CREATE_PDR, IE_CREATE_FAR]
                .into_iter()
                .find(|t| !present.contains(t));
            match missing {
                Some(t) => reply(EST_RSP, Cause::MANDATORY_IE_MISSING, Offending::Ie(t)),
                None => {
                    let all_fars = present.iter().filter(|&&t| t == IE_CREATE_FAR).count() == 4;
                    let has = |t: u16| present.contains(&t);
                    // PDRs refer to FARs 1-4, QERs 1-2, URRs 1-2; FAR 4 to BAR 1.
                    if all_fars && has(6) && has(7) && has(85) {
                        let mut c = case(
                            name,
                            bytes,
                            vec![reply(EST_RSP, Cause::REQUEST_ACCEPTED, Offending::No)],
                        );
                        c.sessions_added = 1;
                        cases.push(c);
                        continue;
                    }
                    reply(
                        EST_RSP,
                        Cause::RULE_CREATION_MODIFICATION_FAILURE,
                        Offending::Any,
                    )
                }
            }
        };
        cases.push(case(name, bytes, vec![want]));
    }
    cases
}

#[test]
fn establishment_every_prefix_length_patched() {
    check(&truncated_patched());
}

/// Every prefix of the establishment, header length not patched. Shorter than the header:
/// silently discarded (§7.6.3). With the header whole, the datagram is shorter than the
/// Length field says: answered with Invalid Length (§7.6.3, the test below).
fn truncated_unpatched(strict: bool) -> Vec<Case> {
    let full = establishment().bytes();
    (0..full.len())
        .map(|k| {
            let want = if k < 16 || !strict {
                vec![]
            } else {
                vec![reply(EST_RSP, Cause::INVALID_LENGTH, Offending::Any)]
            };
            case(
                format!("establishment_truncated_unpatched_{k}"),
                full[..k].to_vec(),
                want,
            )
        })
        .collect()
}

/// TS 29.244 §7.6.3: "If a PFCP entity receives a Request message within an IP/UDP packet
/// that has a length that is inconsistent with the value specified in the Length field of the
/// PFCP header, then the receiving PFCP entity should log the error and shall send the
/// Response message with Cause IE value set to Invalid Length."
#[test]
fn establishment_shorter_than_length_field_gets_invalid_length() {
    check(&truncated_unpatched(true));
}

fn ie_vectors() -> Vec<Case> {
    let mut v = Vec::new();

    // A PDR ID (IE 56, 2 octets) claiming 200 octets inside its Create PDR.
    let mut m = establishment();
    m.ie(IE_CREATE_PDR, 0).kid(IE_PDR_ID).len_override = Some(200);
    v.push(case(
        "pdr_id_length_past_create_pdr",
        m.bytes(),
        vec![reply(
            EST_RSP,
            Cause::INVALID_LENGTH,
            Offending::Ie(IE_PDR_ID),
        )],
    ));

    // The last top-level IE claiming more than the message holds.
    let mut m = establishment();
    m.ie(IE_PDN_TYPE, 0).len_override = Some(0xffff);
    v.push(case(
        "pdn_type_length_past_message",
        m.bytes(),
        vec![reply(
            EST_RSP,
            Cause::INVALID_LENGTH,
            Offending::Ie(IE_PDN_TYPE),
        )],
    ));

    // A Create PDR one octet longer than its content: its last child is cut.
    let mut m = establishment();
    let real = {
        let mut b = Vec::new();
        encode_ies(m.ie(IE_CREATE_PDR, 1).kids.as_ref().unwrap(), &mut b);
        b.len()
    };
    m.ie(IE_CREATE_PDR, 1).len_override = Some(u16::try_from(real - 1).unwrap());
    v.push(case(
        "create_pdr_length_one_short",
        m.bytes(),
        vec![reply(EST_RSP, Cause::INVALID_LENGTH, Offending::Any)],
    ));

    let mut m = establishment();
    m.ie(IE_CREATE_PDR, 2).remove_kid(IE_PDR_ID);
    v.push(case(
        "create_pdr_without_pdr_id",
        m.bytes(),
        vec![reply(
            EST_RSP,
            Cause::MANDATORY_IE_MISSING,
            Offending::Ie(IE_PDR_ID),
        )],
    ));

    let mut m = establishment();
    m.ie(IE_CREATE_PDR, 0).remove_kid(IE_PDI);
    v.push(case(
        "create_pdr_without_pdi",
        m.bytes(),
        vec![reply(
            EST_RSP,
            Cause::MANDATORY_IE_MISSING,
            Offending::Ie(IE_PDI),
        )],
    ));

    let mut m = establishment();
    m.ie(IE_CREATE_PDR, 1).remove_kid(IE_FAR_ID);
    v.push(case(
        "create_pdr_without_far_id",
        m.bytes(),
        vec![reply(
            EST_RSP,
            Cause::CONDITIONAL_IE_MISSING,
            Offending::Ie(IE_FAR_ID),
        )],
    ));

    let mut m = establishment();
    m.body.retain(|i| i.t != IE_NODE_ID);
    v.push(case(
        "establishment_without_node_id",
        m.bytes(),
        vec![reply(
            EST_RSP,
            Cause::MANDATORY_IE_MISSING,
            Offending::Ie(IE_NODE_ID),
        )],
    ));

    let mut m = establishment();
    m.body.retain(|i| i.t != IE_CREATE_FAR);
    v.push(case(
        "establishment_without_create_far",
        m.bytes(),
        vec![reply(
            EST_RSP,
            Cause::MANDATORY_IE_MISSING,
            Offending::Ie(IE_CREATE_FAR),
        )],
    ));

    // F-TEID of bad length: empty; CHOOSE with CHID but no CHID octet; v4 with 3 address octets.
    for (name, value) in [
        ("f_teid_empty", vec![]),
        ("f_teid_choose_chid_missing_octet", vec![0x0d]),
        ("f_teid_v4_address_cut", vec![0x01, 0, 0, 0, 9, 10, 0, 0]),
    ] {
        let mut m = establishment();
        m.ie(IE_CREATE_PDR, 0).kid(IE_PDI).kid(IE_F_TEID).v = value;
        v.push(case(
            name,
            m.bytes(),
            vec![reply(
                EST_RSP,
                Cause::INVALID_LENGTH,
                Offending::Ie(IE_F_TEID),
            )],
        ));
    }

    // A CP F-SEID with neither address flag: the SMF cannot be answered.
    let mut m = establishment();
    m.ie(IE_F_SEID, 0).v = CP_SEID
        .to_be_bytes()
        .iter()
        .copied()
        .fold(vec![0], |mut a, b| {
            a.push(b);
            a
        });
    v.push(case(
        "cp_f_seid_without_address",
        m.bytes(),
        vec![reply(
            EST_RSP,
            Cause::MANDATORY_IE_INCORRECT,
            Offending::Ie(IE_F_SEID),
        )],
    ));

    // Modification of the existing session: Update FAR without its FAR ID.
    let mut m = modification();
    m.ie(IE_UPDATE_FAR, 0).remove_kid(IE_FAR_ID);
    v.push(case(
        "update_far_without_far_id",
        m.bytes(),
        vec![reply(
            MOD_RSP,
            Cause::MANDATORY_IE_MISSING,
            Offending::Ie(IE_FAR_ID),
        )],
    ));
    let mut m = modification();
    m.ie(IE_UPDATE_FAR, 0).kid(IE_FAR_ID).len_override = Some(3);
    v.push(case(
        "update_far_far_id_length_past_parent",
        m.bytes(),
        vec![reply(MOD_RSP, Cause::INVALID_LENGTH, Offending::Any)],
    ));
    let mut m = modification();
    m.ie(IE_UPDATE_FAR, 0).kid(IE_FAR_ID).v = vec![0, 0];
    v.push(case(
        "update_far_far_id_too_short",
        m.bytes(),
        vec![reply(
            MOD_RSP,
            Cause::INVALID_LENGTH,
            Offending::Ie(IE_FAR_ID),
        )],
    ));

    // Node messages.
    let mut m = heartbeat(SEQ);
    m.body.clear();
    v.push(case(
        "heartbeat_without_recovery_time_stamp",
        m.bytes(),
        // The Heartbeat Response has no Cause: it is answered anyway (§6.2.2).
        vec![Reply {
            mtype: 2,
            seq: SEQ,
            cause: None,
            offending: Offending::No,
        }],
    ));
    let mut m = heartbeat(SEQ);
    m.ie(IE_RECOVERY_TIME_STAMP, 0).v = vec![1, 2];
    v.push(case(
        "heartbeat_recovery_time_stamp_too_short",
        m.bytes(),
        vec![Reply {
            mtype: 2,
            seq: SEQ,
            cause: None,
            offending: Offending::No,
        }],
    ));
    let mut m = Msg::parse(&smf::encode(
        None,
        SEQ,
        smf::association_setup(smf_node(), 1234),
    ));
    m.body.retain(|i| i.t != IE_NODE_ID);
    v.push(case(
        "association_setup_without_node_id",
        m.bytes(),
        vec![reply(6, Cause::MANDATORY_IE_MISSING, Offending::No)],
    ));
    v
}

#[test]
fn ie_level_errors() {
    check(&ie_vectors());
}

fn framing_vectors() -> Vec<Case> {
    let mut v = Vec::new();
    let hb = |seq| Reply {
        mtype: 2,
        seq,
        cause: None,
        offending: Offending::No,
    };
    let vns = |seq| Reply {
        mtype: 11,
        seq,
        cause: None,
        offending: Offending::No,
    };

    v.push(case("zero_length_datagram", vec![], vec![]));
    v.push(case("one_octet", vec![0x20], vec![]));
    v.push(case("header_cut_at_3", vec![0x21, 0x32, 0x00], vec![]));
    // S=1 with a Length of 4: shorter than its own header.
    v.push(case(
        "length_shorter_than_header",
        vec![0x21, 0x32, 0x00, 0x04, 0, 0, 0, 0],
        vec![],
    ));

    // Unknown message types: silently discarded (§7.6.4), request-like or not.
    for t in [40u8, 100, 0, 255] {
        let mut m = heartbeat(SEQ);
        m.mtype = t;
        v.push(case(format!("unknown_message_type_{t}"), m.bytes(), vec![]));
    }

    // Version 2 header: Version Not Supported Response, header only (§7.6.2 / §7.4.4.7).
    let mut m = heartbeat(SEQ);
    m.flags = (m.flags & 0x1f) | (2 << 5);
    v.push(case("heartbeat_version_2", m.bytes(), vec![vns(SEQ)]));
    let mut m = establishment();
    m.flags = (m.flags & 0x1f) | (2 << 5);
    v.push(case("establishment_version_2", m.bytes(), vec![vns(SEQ)]));

    // Trailing octets after a complete message: the message is handled, the rest dropped.
    let mut b = heartbeat(SEQ).bytes();
    b.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0x00]);
    v.push(case("heartbeat_then_garbage", b, vec![hb(SEQ)]));
    let mut b = establishment().bytes();
    b.extend_from_slice(&[0x00; 3]);
    let mut c = case(
        "establishment_then_zeros",
        b,
        vec![reply(EST_RSP, Cause::REQUEST_ACCEPTED, Offending::No)],
    );
    c.sessions_added = 1;
    v.push(c);

    // Two messages in one datagram (FO set on the first, §7.2.1A): both answered, in order.
    let mut first = heartbeat(SEQ + 1);
    first.flags |= 0x04;
    let mut b = first.bytes();
    b.extend_from_slice(&establishment().bytes());
    let mut c = case(
        "heartbeat_fo_then_establishment",
        b,
        vec![
            hb(SEQ + 1),
            reply(EST_RSP, Cause::REQUEST_ACCEPTED, Offending::No),
        ],
    );
    c.sessions_added = 1;
    v.push(c);
    // The second one malformed: the first is still answered, the second rejected.
    let mut bad = establishment();
    bad.ie(IE_CREATE_PDR, 0).remove_kid(IE_PDR_ID);
    let mut b = first.bytes();
    b.extend_from_slice(&bad.bytes());
    v.push(case(
        "heartbeat_fo_then_bad_establishment",
        b,
        vec![
            hb(SEQ + 1),
            reply(
                EST_RSP,
                Cause::MANDATORY_IE_MISSING,
                Offending::Ie(IE_PDR_ID),
            ),
        ],
    ));

    // Responses nobody asked for: no answer.
    v.push(case(
        "unsolicited_heartbeat_response",
        smf::encode(
            None,
            SEQ,
            HeartbeatResponse {
                recovery_time_stamp: RecoveryTimeStamp(1),
            },
        ),
        vec![],
    ));
    let mut b = smf::encode(
        None,
        SEQ,
        HeartbeatResponse {
            recovery_time_stamp: RecoveryTimeStamp(1),
        },
    );
    b.truncate(b.len() - 2);
    let n = u16::try_from(b.len() - 4).unwrap();
    b[2..4].copy_from_slice(&n.to_be_bytes());
    v.push(case("malformed_heartbeat_response", b, vec![]));
    v.push(case(
        "unsolicited_establishment_response",
        smf::encode(
            Some(CP_SEID),
            SEQ,
            SessionEstablishmentResponse {
                node_id: smf_node(),
                cause: Cause::REQUEST_ACCEPTED,
                ..Default::default()
            },
        ),
        vec![],
    ));

    // 64 KiB of random octets (the largest UDP payload there is, and more than a Length
    // field can describe).
    for seed in 1..=4u64 {
        let mut b = random_bytes(65_536, seed);
        // Version 0, S = 0: the header splits whatever the Length octets say (the datagram is
        // longer than any Length), so the answer is a Version Not Supported Response (§7.6.2)
        // with the sequence number from octets 5-7.
        b[0] = 0x00;
        let seq = u32::from_be_bytes([0, b[4], b[5], b[6]]);
        v.push(case(format!("random_64k_{seed}"), b, vec![vns(seq)]));
    }
    // A valid establishment header whose body is 64 KiB - 17 random octets.
    let m = establishment();
    let body = random_bytes(65_535 - 12, 99);
    v.push(case(
        "establishment_header_random_body",
        m.with_body(&body),
        // The first random IE whose length runs past the message.
        vec![reply(EST_RSP, Cause::INVALID_LENGTH, Offending::Any)],
    ));
    v
}

#[test]
fn framing_errors() {
    check(&framing_vectors());
}

/// Random datagrams from seeds: whatever the agent makes of them, it answers at most once per
/// request, always well-formed, never changes the session it holds without accepting.
#[test]
fn random_datagrams_do_not_panic() {
    for seed in 1..=200u64 {
        let len = usize::try_from(seed * 37 % 2048).unwrap();
        let mut b = random_bytes(len, seed);
        if b.len() > 4 {
            b[0] = 0x21; // version 1, S
        }
        let mut s = Smf::associated();
        s.establish_ok();
        let out = s.send_bytes(&b);
        for t in out {
            let (_, rest) = Pdu::decode(&t.payload).unwrap();
            assert!(rest.is_empty());
        }
        assert!(s.agent.session_count() <= 2);
    }
}
