//! A session: the rules of one PFCP session, kept sorted by id, and their cross-references.

use crate::far::{Bar, Far};
use crate::ids::{BarId, FarId, PdrId, QerId, Seid, UrrId};
use crate::pdr::Pdr;
use crate::qer::Qer;
use crate::urr::Urr;
use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// One PFCP session's rules. Immutable once handed to a data path (it is shared as an `Arc`);
/// a modification builds a new `Session` and installs it whole, so packets see the old
/// session or the new one, never a mix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The UP function's SEID for this session.
    pub seid: Seid,
    /// The CP function's SEID and address (the F-SEID it sent).
    pub cp_seid: Seid,
    pub cp_addr: IpAddr,
    pub pdrs: Vec<Pdr>,
    pub fars: Vec<Far>,
    pub qers: Vec<Qer>,
    pub urrs: Vec<Urr>,
    pub bar: Option<Bar>,
    /// User Plane Inactivity Timer (§8.2.83), seconds.
    pub inactivity_timer_s: Option<u32>,
    pub dnn: Option<CompactString>,
}

/// Names a rule of a session (what a Failed Rule ID carries, TS 29.244 §8.2.80).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RuleRef {
    Pdr(PdrId),
    Far(FarId),
    Qer(QerId),
    Urr(UrrId),
    Bar(BarId),
}

/// What is wrong with a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RuleErrorKind {
    /// A rule with this id exists already.
    Duplicate,
    /// The rule to update or remove does not exist.
    NotFound,
    UnknownFar(FarId),
    UnknownQer(QerId),
    UnknownUrr(UrrId),
    UnknownBar(BarId),
}

/// A rule that makes a session inconsistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleError {
    pub rule: RuleRef,
    pub kind: RuleErrorKind,
}

macro_rules! rule_access {
    ($list:ident, $get:ident, $get_mut:ident, $insert:ident, $remove:ident, $ty:ty, $id:ty, $refv:ident) => {
        pub fn $get(&self, id: $id) -> Option<&$ty> {
            self.$list
                .binary_search_by_key(&id, |r| r.id)
                .ok()
                .map(|i| &self.$list[i])
        }
        pub fn $get_mut(&mut self, id: $id) -> Option<&mut $ty> {
            let i = self.$list.binary_search_by_key(&id, |r| r.id).ok()?;
            Some(&mut self.$list[i])
        }
        /// Adds a rule; a rule with the same id is an error.
        pub fn $insert(&mut self, rule: $ty) -> Result<(), RuleError> {
            match self.$list.binary_search_by_key(&rule.id, |r| r.id) {
                Ok(_) => Err(RuleError {
                    rule: RuleRef::$refv(rule.id),
                    kind: RuleErrorKind::Duplicate,
                }),
                Err(i) => {
                    self.$list.insert(i, rule);
                    Ok(())
                }
            }
        }
        pub fn $remove(&mut self, id: $id) -> Result<$ty, RuleError> {
            match self.$list.binary_search_by_key(&id, |r| r.id) {
                Ok(i) => Ok(self.$list.remove(i)),
                Err(_) => Err(RuleError {
                    rule: RuleRef::$refv(id),
                    kind: RuleErrorKind::NotFound,
                }),
            }
        }
    };
}

impl Session {
    pub fn new(seid: Seid, cp_seid: Seid, cp_addr: IpAddr) -> Self {
        Self {
            seid,
            cp_seid,
            cp_addr,
            pdrs: Vec::new(),
            fars: Vec::new(),
            qers: Vec::new(),
            urrs: Vec::new(),
            bar: None,
            inactivity_timer_s: None,
            dnn: None,
        }
    }

    rule_access!(pdrs, pdr, pdr_mut, insert_pdr, remove_pdr, Pdr, PdrId, Pdr);
    rule_access!(fars, far, far_mut, insert_far, remove_far, Far, FarId, Far);
    rule_access!(qers, qer, qer_mut, insert_qer, remove_qer, Qer, QerId, Qer);
    rule_access!(urrs, urr, urr_mut, insert_urr, remove_urr, Urr, UrrId, Urr);

    /// The PDR that applies to a packet: the matching one with the best (lowest) precedence,
    /// TS 29.244 §5.2.1. This is the reference semantics compiled tables must agree with.
    pub fn classify(&self, p: &crate::pdr::PacketMeta) -> Option<&Pdr> {
        self.pdrs
            .iter()
            .filter(|pdr| pdr.matches(p))
            .min_by_key(|pdr| (pdr.precedence, pdr.id))
    }

    /// Removes every reference to a rule that was removed (TS 29.244 §6.3.3.3: the UP
    /// function removes the rule and its ID from the rules that refer to it): a FAR from the
    /// PDRs (they then detect and drop) and from quota actions, a QER or URR from the PDRs'
    /// lists, a URR from linked URRs, the BAR from the FARs.
    pub fn drop_references(&mut self, removed: RuleRef) {
        match removed {
            RuleRef::Pdr(_) => {}
            RuleRef::Far(id) => {
                for p in self.pdrs.iter_mut().filter(|p| p.far == Some(id)) {
                    p.far = None;
                }
                for u in &mut self.urrs {
                    if u.far_for_quota_action() == Some(id) {
                        u.extra_mut().far_for_quota_action = None;
                    }
                }
            }
            RuleRef::Qer(id) => {
                for p in &mut self.pdrs {
                    p.qers.retain(|q| *q != id);
                }
            }
            RuleRef::Urr(id) => {
                for p in &mut self.pdrs {
                    p.urrs.retain(|u| *u != id);
                }
                for u in &mut self.urrs {
                    if u.linked_urrs().contains(&id) {
                        u.extra_mut().linked_urrs.retain(|l| *l != id);
                    }
                }
            }
            RuleRef::Bar(id) => {
                for f in self.fars.iter_mut().filter(|f| f.bar == Some(id)) {
                    f.bar = None;
                }
            }
        }
    }

    /// Checks that every reference between rules resolves (TS 29.244 §5.2: a PDR's FAR,
    /// QERs and URRs, a FAR's BAR, a URR's linked URRs and quota FAR). The first broken
    /// reference is reported against the rule holding it.
    pub fn validate(&self) -> Result<(), RuleError> {
        let err = |rule, kind| Err(RuleError { rule, kind });
        for p in &self.pdrs {
            let r = RuleRef::Pdr(p.id);
            if let Some(f) = p.far.filter(|&f| self.far(f).is_none()) {
                return err(r, RuleErrorKind::UnknownFar(f));
            }
            if let Some(&q) = p.qers.iter().find(|&&q| self.qer(q).is_none()) {
                return err(r, RuleErrorKind::UnknownQer(q));
            }
            if let Some(&u) = p.urrs.iter().find(|&&u| self.urr(u).is_none()) {
                return err(r, RuleErrorKind::UnknownUrr(u));
            }
        }
        for f in &self.fars {
            if let Some(b) = f.bar.filter(|&b| self.bar.is_none_or(|bar| bar.id != b)) {
                return err(RuleRef::Far(f.id), RuleErrorKind::UnknownBar(b));
            }
        }
        for u in &self.urrs {
            let r = RuleRef::Urr(u.id);
            if let Some(&l) = u.linked_urrs().iter().find(|&&l| self.urr(l).is_none()) {
                return err(r, RuleErrorKind::UnknownUrr(l));
            }
            if let Some(f) = u.far_for_quota_action().filter(|&f| self.far(f).is_none()) {
                return err(r, RuleErrorKind::UnknownFar(f));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::far::ApplyAction;
    use crate::ids::Precedence;
    use crate::pdr::{Interface, Pdi};
    use smallvec::smallvec;

    fn pdr(id: u16, far: u32, qers: &[u32]) -> Pdr {
        Pdr {
            id: PdrId(id),
            precedence: Precedence(100),
            pdi: Pdi::any(Interface::Access),
            outer_header_removal: None,
            far: Some(FarId(far)),
            qers: qers.iter().map(|&q| QerId(q)).collect(),
            urrs: smallvec![],
        }
    }

    fn far(id: u32) -> Far {
        Far {
            id: FarId(id),
            action: ApplyAction::FORW,
            forwarding: None,
            duplicating: Box::default(),
            bar: None,
        }
    }

    #[test]
    fn references_must_resolve() {
        let mut s = Session::new(Seid(1), Seid(2), "192.0.2.1".parse().unwrap());
        s.insert_pdr(pdr(2, 1, &[])).unwrap();
        s.insert_pdr(pdr(1, 1, &[7])).unwrap();
        assert_eq!(s.pdrs[0].id, PdrId(1), "kept sorted by id");
        assert_eq!(
            s.insert_pdr(pdr(1, 1, &[])),
            Err(RuleError {
                rule: RuleRef::Pdr(PdrId(1)),
                kind: RuleErrorKind::Duplicate
            })
        );
        assert_eq!(
            s.validate(),
            Err(RuleError {
                rule: RuleRef::Pdr(PdrId(1)),
                kind: RuleErrorKind::UnknownFar(FarId(1))
            })
        );
        s.insert_far(far(1)).unwrap();
        assert_eq!(
            s.validate().unwrap_err().kind,
            RuleErrorKind::UnknownQer(QerId(7))
        );
        s.insert_qer(crate::Qer::open(QerId(7))).unwrap();
        assert_eq!(s.validate(), Ok(()));
        let mut f = far(2);
        f.bar = Some(BarId(1));
        s.insert_far(f).unwrap();
        assert_eq!(s.validate().unwrap_err().rule, RuleRef::Far(FarId(2)));
        assert_eq!(
            s.remove_far(FarId(9)).unwrap_err().kind,
            RuleErrorKind::NotFound
        );
    }
}
