//! A refused request, in the terms of a PFCP response (TS 29.244 §7.6 / §8.2.1).

use upf_pfcp::ie::FailedRuleId;
use upf_pfcp::{Cause, DecodeError};
use upf_rules::RuleRef;

/// Why a request (or a part of it) was refused: the Cause, the Offending IE and the Failed
/// Rule ID a response carries, and a line for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject {
    pub cause: Cause,
    pub offending_ie: Option<u16>,
    pub failed_rule: Option<RuleRef>,
    pub detail: &'static str,
}

impl Reject {
    pub fn new(cause: Cause, detail: &'static str) -> Self {
        Self {
            cause,
            offending_ie: None,
            failed_rule: None,
            detail,
        }
    }

    /// A rule that cannot be created or modified (cause 73, with its Failed Rule ID).
    pub fn rule(rule: RuleRef, offending_ie: u16, detail: &'static str) -> Self {
        Self {
            cause: Cause::RULE_CREATION_MODIFICATION_FAILURE,
            offending_ie: Some(offending_ie),
            failed_rule: Some(rule),
            detail,
        }
    }

    pub fn ie(mut self, ie: u16) -> Self {
        self.offending_ie = Some(ie);
        self
    }

    pub fn on_rule(mut self, rule: RuleRef) -> Self {
        self.failed_rule.get_or_insert(rule);
        self
    }

    pub fn failed_rule_id(&self) -> Option<FailedRuleId> {
        use upf_pfcp::ie as p;
        self.failed_rule.map(|r| match r {
            RuleRef::Pdr(id) => FailedRuleId::Pdr(p::PdrId(id.0)),
            RuleRef::Far(id) => FailedRuleId::Far(p::FarId(id.0)),
            RuleRef::Qer(id) => FailedRuleId::Qer(p::QerId(id.0)),
            RuleRef::Urr(id) => FailedRuleId::Urr(p::UrrId(id.0)),
            RuleRef::Bar(id) => FailedRuleId::Bar(p::BarId(id.0)),
        })
    }
}

impl From<DecodeError> for Reject {
    fn from(e: DecodeError) -> Self {
        Self {
            cause: e.cause(),
            offending_ie: e.offending_ie(),
            failed_rule: None,
            detail: e.detail(),
        }
    }
}

impl core::fmt::Display for Reject {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} ({})", self.cause.name(), self.detail)?;
        if let Some(r) = self.failed_rule {
            write!(f, ", rule {r:?}")?;
        }
        if let Some(ie) = self.offending_ie {
            write!(f, ", IE {} ({ie})", upf_pfcp::ie::type_name(ie))?;
        }
        Ok(())
    }
}
