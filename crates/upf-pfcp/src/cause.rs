//! Cause values, TS 29.244 §8.2.1 Table 8.2.1-1.

use serde::Serialize;

/// TS 29.244 §8.2.1 Cause. Kept as the raw octet so that values from newer releases pass through.
/// The default is 0 (reserved): the state of a message's Cause before it is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[serde(transparent)]
pub struct Cause(pub u8);

macro_rules! causes {
    ($($name:ident = $v:literal, $text:literal;)*) => {
        impl Cause {
            $(#[doc = $text] pub const $name: Cause = Cause($v);)*
            /// The specification's name for this cause, or "unknown".
            pub fn name(self) -> &'static str {
                match self.0 { $($v => $text,)* _ => "unknown" }
            }
        }
    };
}

causes! {
    REQUEST_ACCEPTED = 1, "Request accepted (success)";
    MORE_USAGE_REPORT_TO_SEND = 2, "More Usage Report to send";
    REQUEST_PARTIALLY_ACCEPTED = 3, "Request partially accepted";
    REQUEST_REJECTED = 64, "Request rejected (reason not specified)";
    SESSION_CONTEXT_NOT_FOUND = 65, "Session context not found";
    MANDATORY_IE_MISSING = 66, "Mandatory IE missing";
    CONDITIONAL_IE_MISSING = 67, "Conditional IE missing";
    INVALID_LENGTH = 68, "Invalid length";
    MANDATORY_IE_INCORRECT = 69, "Mandatory IE incorrect";
    INVALID_FORWARDING_POLICY = 70, "Invalid Forwarding Policy";
    INVALID_F_TEID_ALLOCATION_OPTION = 71, "Invalid F-TEID allocation option";
    NO_ESTABLISHED_PFCP_ASSOCIATION = 72, "No established PFCP Association";
    RULE_CREATION_MODIFICATION_FAILURE = 73, "Rule creation/modification Failure";
    PFCP_ENTITY_IN_CONGESTION = 74, "PFCP entity in congestion";
    NO_RESOURCES_AVAILABLE = 75, "No resources available";
    SERVICE_NOT_SUPPORTED = 76, "Service not supported";
    SYSTEM_FAILURE = 77, "System failure";
    REDIRECTION_REQUESTED = 78, "Redirection Requested";
    ALL_DYNAMIC_ADDRESSES_ARE_OCCUPIED = 79, "All dynamic addresses are occupied";
    UNKNOWN_PRE_DEFINED_RULE = 80, "Unknown Pre-defined Rule";
    UNKNOWN_APPLICATION_ID = 81, "Unknown Application ID";
    L2TP_TUNNEL_ESTABLISHMENT_FAILURE = 82, "L2TP tunnel Establishment failure";
    L2TP_SESSION_ESTABLISHMENT_FAILURE = 83, "L2TP session Establishment failure";
    L2TP_TUNNEL_RELEASE = 84, "L2TP tunnel release";
    L2TP_SESSION_RELEASE = 85, "L2TP session release";
    PFCP_SESSION_RESTORATION_FAILURE_DUE_TO_REQUESTED_SEID_ALREADY_IN_USE = 86, "PFCP session restoration failure due to requested SEID already in use";
    L2TP_TUNNEL_ESTABLISHMENT_FAILURE_TUNNEL_AUTH_FAILURE = 87, "L2TP tunnel establishment failure - tunnel authentication failure";
    L2TP_SESSION_ESTABLISHMENT_FAILURE_SESSION_AUTH_FAILURE = 88, "L2TP session establishment failure - session authentication failure";
    L2TP_TUNNEL_ESTABLISHMENT_FAILURE_LNS_NOT_REACHABLE = 89, "L2TP tunnel establishment failure - LNS not reachable";
}

impl Cause {
    /// TS 29.244 §8.2.1: values 1..=63 are acceptances, 64..=255 rejections.
    pub fn is_accepted(self) -> bool {
        (1..64).contains(&self.0)
    }
}
