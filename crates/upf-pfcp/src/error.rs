//! Decode errors that carry what a PFCP response needs: the Cause and the Offending IE.

use crate::cause::Cause;
use serde::Serialize;

/// What went wrong, in the terms of TS 29.244 §7.6 (error handling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ErrorKind {
    /// A mandatory IE is absent (Cause 66).
    MissingMandatory,
    /// A conditional IE is absent where its condition holds (Cause 67).
    MissingConditional,
    /// An IE or header is shorter than its fields need, or its length runs past its parent (Cause 68).
    InvalidLength,
    /// A field holds a value the specification does not allow (Cause 69).
    IncorrectValue,
    /// The PFCP version is not 1 (answer with Version Not Supported Response, TS 29.244 §7.4.4.7).
    UnsupportedVersion,
    /// The message type is not one this codec knows.
    UnknownMessage,
}

const MAX_PATH: usize = 6;

/// A decode failure: the kind, the innermost IE it concerns (the Offending IE) and the grouped IEs
/// around it, so that `upf decode` can say `CreatePdr(1)/Pdi(2)/FTeid(21): invalid length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError {
    kind: ErrorKind,
    ie_type: Option<u16>,
    /// Enclosing IE types, outermost first; `depth` entries are valid.
    path: [u16; MAX_PATH],
    depth: u8,
    detail: &'static str,
}

impl DecodeError {
    pub const fn new(kind: ErrorKind, detail: &'static str) -> Self {
        Self {
            kind,
            ie_type: None,
            path: [0; MAX_PATH],
            depth: 0,
            detail,
        }
    }
    pub const fn invalid_length(detail: &'static str) -> Self {
        Self::new(ErrorKind::InvalidLength, detail)
    }
    pub const fn incorrect(detail: &'static str) -> Self {
        Self::new(ErrorKind::IncorrectValue, detail)
    }
    /// A mandatory IE of type `ie_type` is missing.
    pub const fn missing(ie_type: u16) -> Self {
        let mut e = Self::new(ErrorKind::MissingMandatory, "mandatory IE missing");
        e.ie_type = Some(ie_type);
        e
    }
    /// A conditional IE of type `ie_type` is missing where it is required.
    pub const fn missing_conditional(ie_type: u16, detail: &'static str) -> Self {
        let mut e = Self::new(ErrorKind::MissingConditional, detail);
        e.ie_type = Some(ie_type);
        e
    }

    /// Records that the error happened inside the IE of type `ie_type`: the first call names the
    /// offending IE, later calls (while unwinding through grouped IEs) add enclosing groups.
    #[must_use]
    pub fn within(mut self, ie_type: u16) -> Self {
        if self.ie_type.is_none() {
            self.ie_type = Some(ie_type);
        } else if usize::from(self.depth) < MAX_PATH {
            self.path.copy_within(0..usize::from(self.depth), 1);
            self.path[0] = ie_type;
            self.depth += 1;
        }
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    /// The innermost IE the error is about (for the Offending IE IE, TS 29.244 §8.2.22).
    pub fn offending_ie(&self) -> Option<u16> {
        self.ie_type
    }
    /// The outermost IE of the message body that contains the error (e.g. the Create PDR).
    pub fn top_level_ie(&self) -> Option<u16> {
        if self.depth > 0 {
            Some(self.path[0])
        } else {
            self.ie_type
        }
    }
    /// Enclosing grouped IE types, outermost first.
    pub fn path(&self) -> &[u16] {
        &self.path[..usize::from(self.depth)]
    }
    pub fn detail(&self) -> &'static str {
        self.detail
    }

    /// The PFCP Cause a response to the failed request carries (TS 29.244 §7.6).
    pub fn cause(&self) -> Cause {
        match self.kind {
            ErrorKind::MissingMandatory => Cause::MANDATORY_IE_MISSING,
            ErrorKind::MissingConditional => Cause::CONDITIONAL_IE_MISSING,
            ErrorKind::InvalidLength => Cause::INVALID_LENGTH,
            ErrorKind::IncorrectValue => Cause::MANDATORY_IE_INCORRECT,
            ErrorKind::UnsupportedVersion | ErrorKind::UnknownMessage => {
                Cause::SERVICE_NOT_SUPPORTED
            }
        }
    }
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for t in self.path() {
            write!(f, "{}({t})/", crate::ie::type_name(*t))?;
        }
        if let Some(t) = self.ie_type {
            write!(f, "{}({t}): ", crate::ie::type_name(t))?;
        }
        let kind = match self.kind {
            ErrorKind::MissingMandatory => "missing mandatory IE",
            ErrorKind::MissingConditional => "missing conditional IE",
            ErrorKind::InvalidLength => "invalid length",
            ErrorKind::IncorrectValue => "incorrect value",
            ErrorKind::UnsupportedVersion => "unsupported PFCP version",
            ErrorKind::UnknownMessage => "unknown message type",
        };
        write!(f, "{kind}")?;
        if !self.detail.is_empty() && self.kind != ErrorKind::MissingMandatory {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

impl std::error::Error for DecodeError {}

impl Serialize for DecodeError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_names_innermost_then_parents() {
        let e = DecodeError::invalid_length("F-TEID")
            .within(21)
            .within(2)
            .within(1);
        assert_eq!(e.offending_ie(), Some(21));
        assert_eq!(e.path(), &[1, 2]);
        assert_eq!(e.top_level_ie(), Some(1));
        assert_eq!(e.cause(), Cause::INVALID_LENGTH);
        let m = DecodeError::missing(56).within(1);
        assert_eq!(m.offending_ie(), Some(56));
        assert_eq!(m.top_level_ie(), Some(1));
        assert_eq!(m.cause(), Cause::MANDATORY_IE_MISSING);
    }
}
