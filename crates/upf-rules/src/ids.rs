//! Identifiers. PFCP rule ids are the SMF's names for rules within one session; data-path
//! slots are a back-end's business and never appear here.

use serde::{Deserialize, Serialize};

macro_rules! id {
    ($(#[$m:meta])* $name:ident($t:ty)) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $t);

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

id!(
    /// Session Endpoint Identifier (TS 29.244 §8.2.37); the UP function's own for a session.
    Seid(u64)
);
id!(
    /// GTP-U Tunnel Endpoint Identifier (TS 29.281 §5.1).
    Teid(u32)
);
id!(
    /// PDR ID, unique within a session (TS 29.244 §8.2.36).
    PdrId(u16)
);
id!(
    /// FAR ID, unique within a session (TS 29.244 §8.2.74).
    FarId(u32)
);
id!(
    /// QER ID, unique within a session (TS 29.244 §8.2.75).
    QerId(u32)
);
id!(
    /// URR ID, unique within a session (TS 29.244 §8.2.54).
    UrrId(u32)
);
id!(
    /// BAR ID, unique within a session (TS 29.244 §8.2.90).
    BarId(u8)
);
id!(
    /// PDR precedence: the lower the value, the earlier the PDR is tried (TS 29.244 §5.2.1).
    Precedence(u32)
);
id!(
    /// QoS Flow Identifier, 6 bits (TS 23.501 §5.7.1).
    Qfi(u8)
);
