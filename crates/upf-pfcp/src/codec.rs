//! The `IeValue` trait every IE implements, the `Multi` list type, and the macros that define
//! integer IEs and grouped IEs (message bodies are grouped IEs too).

use crate::error::DecodeError;
use serde::Serialize;
use smallvec::SmallVec;

/// The value part of an IE (after type and length): decode from and encode to octets.
/// `decode` accepts every legal variant and ignores trailing octets (TS 29.244 §7.6.2: octets
/// beyond the known fields are ignored); `encode` writes the canonical form.
pub trait IeValue: Sized {
    fn decode(value: &[u8]) -> Result<Self, DecodeError>;
    fn encode(&self, out: &mut Vec<u8>);

    /// Decodes into `self`, which holds `Default::default()` (for grouped IEs: their state
    /// before any IE of theirs was read); on error `self` is left in an unspecified state.
    /// Grouped IEs decode their children in place, so that large rule structs are written once
    /// where they end up instead of being moved out through every level of the decode.
    #[doc(hidden)]
    #[inline]
    fn decode_into(&mut self, value: &[u8]) -> Result<(), DecodeError> {
        *self = Self::decode(value)?;
        Ok(())
    }

    /// Decodes into `slot`, which is `None`.
    #[doc(hidden)]
    #[inline]
    fn decode_into_option(slot: &mut Option<Self>, value: &[u8]) -> Result<(), DecodeError> {
        *slot = Some(Self::decode(value)?);
        Ok(())
    }

    /// Makes room in the empty `list` for the `n` IEs about to be decoded into it; grouped IEs
    /// fill it with `n` empty values then, to be decoded in place with `decode_into`.
    #[doc(hidden)]
    #[inline]
    fn prepare_list<const N: usize>(list: &mut Multi<Self, N>, n: usize) {
        list.0.reserve_exact(n);
    }

    /// Decodes and appends to `list`.
    #[doc(hidden)]
    #[inline]
    fn decode_push<const N: usize>(
        list: &mut Multi<Self, N>,
        value: &[u8],
    ) -> Result<(), DecodeError> {
        list.push(Self::decode(value)?);
        Ok(())
    }
}

/// A list of IEs of one type inside a group. `N` elements live inline (two by default), so a
/// typical rule (one QER id, one URR id, one SDF filter) decodes without heap allocation;
/// `Multi<T, 0>` keeps large grouped IEs on the heap so that message bodies stay small to move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Multi<T, const N: usize = 2>(pub SmallVec<[T; N]>);

/// The rule lists of message bodies (Create PDR, Usage Report…): all on the heap.
pub type List<T> = Multi<T, 0>;

impl<T, const N: usize> Multi<T, N> {
    #[inline]
    pub fn new() -> Self {
        Self(SmallVec::new())
    }
    #[inline]
    pub fn with_capacity(n: usize) -> Self {
        Self(SmallVec::with_capacity(n))
    }
    #[inline]
    pub fn push(&mut self, v: T) {
        self.0.push(v);
    }
    /// Appends `v` and returns the element in its place in the list.
    #[inline]
    pub(crate) fn push_mut(&mut self, v: T) -> &mut T {
        self.0.push(v);
        let last = self.0.len() - 1;
        &mut self.0[last]
    }
}

impl<T, const N: usize> Default for Multi<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize> core::ops::Deref for Multi<T, N> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T, const N: usize> core::ops::DerefMut for Multi<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T, const N: usize> FromIterator<T> for Multi<T, N> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

impl<T, const N: usize> From<Vec<T>> for Multi<T, N> {
    fn from(v: Vec<T>) -> Self {
        Self(SmallVec::from_vec(v))
    }
}

impl<'a, T, const N: usize> IntoIterator for &'a Multi<T, N> {
    type Item = &'a T;
    type IntoIter = core::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
impl<T: proptest::arbitrary::Arbitrary + core::fmt::Debug + 'static, const N: usize>
    proptest::arbitrary::Arbitrary for Multi<T, N>
{
    type Parameters = ();
    type Strategy = proptest::strategy::BoxedStrategy<Self>;
    fn arbitrary_with(_: ()) -> Self::Strategy {
        use proptest::strategy::Strategy;
        proptest::collection::vec(proptest::arbitrary::any::<T>(), 0..3)
            .prop_map(Multi::from)
            .boxed()
    }
}

/// For JSON output: absent optional IEs and empty lists are left out.
pub trait Presence {
    fn is_absent(&self) -> bool;
}
impl<T: IeValue> Presence for T {
    fn is_absent(&self) -> bool {
        false
    }
}
impl<T> Presence for Option<T> {
    fn is_absent(&self) -> bool {
        self.is_none()
    }
}
impl<T, const N: usize> Presence for Multi<T, N> {
    fn is_absent(&self) -> bool {
        self.is_empty()
    }
}
pub fn is_absent<T: Presence>(v: &T) -> bool {
    v.is_absent()
}

/// Defines a grouped IE (or a message body) as a struct of IEs, each marked
/// `M` (mandatory: `T`), `O` (optional or conditional: `Option<T>`), `N` (any number, kept
/// inline when few: `Multi<T>`) or `V` (any number of large grouped IEs, on the heap: `List<T>`,
/// used for the rule lists of message bodies so that a message stays small to move), with the
/// IE type that carries it. Decoding skips unknown and vendor-specific
/// IEs, keeps the first instance of a single-instance IE, and names the offending IE on error.
///
/// Groups decode in place (`IeValue::decode_into`): the struct starts as `Default::default()`
/// and each child group is decoded where it lives (its `Option` slot, or its element of a rule
/// list filled with empty values once the list's IEs are counted), so a rule struct is written
/// once instead of being moved out through every level of the decode. M fields must therefore
/// have a `Default` (the value before decoding; a missing M IE is still an error).
///
/// ```ignore
/// ie_group! {
///     /// TS 29.244 §7.5.2.2-2 PDI
///     pub struct Pdi {
///         source_interface: M SourceInterface = 20,
///         local_f_teid: O FTeid = 21,
///         sdf_filters: N SdfFilter = 23,
///     }
/// }
/// ```
macro_rules! ie_group {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                $field:ident : $kind:ident $ty:ty = $code:literal
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        pub struct $name {
            $(
                $(#[$fmeta])*
                #[serde(skip_serializing_if = "crate::codec::is_absent")]
                pub $field: $crate::codec::ie_field_ty!($kind $ty),
            )*
        }

        impl $crate::codec::IeValue for $name {
            #[inline]
            fn decode(value: &[u8]) -> Result<Self, $crate::error::DecodeError> {
                let mut this = Self::default();
                this.decode_into(value)?;
                Ok(this)
            }

            // Each field is decoded where it lives: a local of the field's name tracks what the
            // walk needs (M: seen yet; V: how many decoded; O, N: nothing).
            #[allow(unused_mut, unused_variables, clippy::let_unit_value)]
            fn decode_into(&mut self, value: &[u8]) -> Result<(), $crate::error::DecodeError> {
                // Rule lists are sized up front (one allocation per list instead of one per
                // doubling) by one counting walk over the IEs from the first list IE on, for
                // all the lists at once; a group without list IEs is walked once.
                #[allow(dead_code)]
                fn prepare_lists(this: &mut $name, rest: &[u8]) {
                    $( let mut $field = $crate::codec::ie_counter!($kind); )*
                    $crate::tlv::for_each_type(rest, |ie_type| match ie_type {
                        $( $code => $crate::codec::ie_count!($kind $field), )*
                        _ => {}
                    });
                    $( $crate::codec::ie_reserve!($kind this.$field, $field); )*
                }
                $( let mut $field = $crate::codec::ie_local!($kind); )*
                let mut lists_ready = false;
                let mut iter = $crate::tlv::TlvIter::new(value);
                loop {
                    let here = iter.remaining();
                    let Some(ie) = iter.next() else { break };
                    let ie = ie?;
                    if ie.enterprise_id.is_some() {
                        continue;
                    }
                    match ie.ie_type {
                        $( $code => $crate::codec::ie_store!(
                            $kind self.$field, $field, $ty, ie, (self, lists_ready, here, prepare_lists)
                        ), )*
                        _ => {}
                    }
                }
                $( $crate::codec::ie_finish!($kind $field, $code); )*
                Ok(())
            }

            #[inline]
            fn decode_into_option(
                slot: &mut Option<Self>,
                value: &[u8],
            ) -> Result<(), $crate::error::DecodeError> {
                slot.insert(Self::default()).decode_into(value)
            }

            #[inline]
            fn prepare_list<const N: usize>(list: &mut $crate::codec::Multi<Self, N>, n: usize) {
                list.0.reserve_exact(n);
                // `extend` writes each value straight into the list (`push` builds it aside
                // and copies it in).
                list.0.extend(core::iter::repeat_with(Self::default).take(n));
            }

            #[inline]
            fn decode_push<const N: usize>(
                list: &mut $crate::codec::Multi<Self, N>,
                value: &[u8],
            ) -> Result<(), $crate::error::DecodeError> {
                list.push_mut(Self::default()).decode_into(value)
            }

            #[allow(unused_variables)]
            fn encode(&self, out: &mut Vec<u8>) {
                $( $crate::codec::ie_emit!($kind &self.$field, $code, out); )*
            }
        }

        #[allow(dead_code)]
        impl $name {
            /// The IEs this group carries: (IE type, field name), in declaration order.
            pub const IES: &'static [(u16, &'static str)] = &[$(($code, stringify!($field))),*];

            /// Calls `f` with the type of every IE present (a mandatory one always is).
            #[allow(unused_variables, unused_mut)]
            pub fn for_each_present(&self, mut f: impl FnMut(u16)) {
                $( if !$crate::codec::is_absent(&self.$field) { f($code); } )*
            }

            /// Makes IE `ie_type` present with its default value (one more of a list);
            /// false if the group has no such IE. For tests that need each IE present once.
            #[allow(unused_variables)]
            pub fn add_default_ie(&mut self, ie_type: u16) -> bool {
                match ie_type {
                    $( $code => { $crate::codec::ie_add_default!($kind self.$field); true } )*
                    _ => false,
                }
            }
        }
    };
}

/// Makes a field present with its type's default value (see `add_default_ie`).
macro_rules! ie_add_default {
    (M $slot:expr) => {{}};
    (O $slot:expr) => {
        $slot = Some(Default::default())
    };
    (N $slot:expr) => {
        $slot.push(Default::default())
    };
    (V $slot:expr) => {
        $slot.push(Default::default())
    };
}

macro_rules! ie_field_ty {
    (M $ty:ty) => { $ty };
    (O $ty:ty) => { Option<$ty> };
    (N $ty:ty) => { $crate::codec::Multi<$ty> };
    (V $ty:ty) => { $crate::codec::List<$ty> };
}

/// The decode-time local of a field: M, whether it was seen; V, how many of it there are.
macro_rules! ie_local {
    (M) => {
        false
    };
    (V) => {
        0usize
    };
    ($kind:ident) => {
        ()
    };
}

/// The counter of a field in the counting walk (lists only).
macro_rules! ie_counter {
    (V) => {
        0usize
    };
    ($kind:ident) => {
        ()
    };
}

macro_rules! ie_count {
    (V $n:ident) => {
        $n += 1
    };
    ($kind:ident $n:ident) => {{}};
}

/// Sizes a list for the `$n` IEs it will hold (grouped IEs: fills it with `$n` empty ones).
macro_rules! ie_reserve {
    (V $list:expr, $n:ident) => {
        $crate::codec::IeValue::prepare_list(&mut $list, $n)
    };
    ($kind:ident $list:expr, $n:ident) => {
        ()
    };
}

macro_rules! ie_store {
    (M $slot:expr, $seen:ident, $ty:ty, $ie:ident, $lists:tt) => {
        if !$seen {
            $seen = true;
            <$ty as $crate::codec::IeValue>::decode_into(&mut $slot, $ie.value)
                .map_err(|e| e.within($ie.ie_type))?
        }
    };
    (O $slot:expr, $local:ident, $ty:ty, $ie:ident, $lists:tt) => {
        if $slot.is_none() {
            <$ty as $crate::codec::IeValue>::decode_into_option(&mut $slot, $ie.value)
                .map_err(|e| e.within($ie.ie_type))?
        }
    };
    (V $slot:expr, $i:ident, $ty:ty, $ie:ident, ($this:ident, $ready:ident, $here:ident, $prepare:ident)) => {{
        if !$ready {
            $ready = true;
            $prepare($this, $here);
        }
        let r = match $slot.0.get_mut($i) {
            Some(slot) => <$ty as $crate::codec::IeValue>::decode_into(slot, $ie.value),
            None => <$ty as $crate::codec::IeValue>::decode_push(&mut $slot, $ie.value),
        };
        $i += 1;
        r.map_err(|e| e.within($ie.ie_type))?
    }};
    (N $slot:expr, $local:ident, $ty:ty, $ie:ident, $lists:tt) => {
        <$ty as $crate::codec::IeValue>::decode_push(&mut $slot, $ie.value)
            .map_err(|e| e.within($ie.ie_type))?
    };
}

macro_rules! ie_finish {
    (M $seen:ident, $code:literal) => {
        if !$seen {
            return Err($crate::error::DecodeError::missing($code));
        }
    };
    ($kind:ident $local:ident, $code:literal) => {};
}

macro_rules! ie_emit {
    (M $v:expr, $code:literal, $out:ident) => {
        $crate::tlv::put_ie($out, $code, |o| $crate::codec::IeValue::encode($v, o))
    };
    (O $v:expr, $code:literal, $out:ident) => {
        if let Some(v) = $v {
            $crate::tlv::put_ie($out, $code, |o| $crate::codec::IeValue::encode(v, o))
        }
    };
    (N $v:expr, $code:literal, $out:ident) => {
        $crate::codec::ie_emit!(V $v, $code, $out)
    };
    (V $v:expr, $code:literal, $out:ident) => {
        for v in $v {
            $crate::tlv::put_ie($out, $code, |o| $crate::codec::IeValue::encode(v, o))
        }
    };
}

/// Defines a newtype over an unsigned integer whose IE value is that integer, big-endian.
/// `ie_uint!(/// doc, PdrId(u16));` Decoding accepts longer values (extra octets ignored).
macro_rules! ie_uint {
    ($(#[$meta:meta])* $name:ident($int:ty)) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize)]
        #[cfg_attr(test, derive(proptest_derive::Arbitrary))]
        #[serde(transparent)]
        pub struct $name(pub $int);

        impl $crate::codec::IeValue for $name {
            fn decode(value: &[u8]) -> Result<Self, $crate::error::DecodeError> {
                $crate::tlv::Reader::new(value).array().map(|a| Self(<$int>::from_be_bytes(a)))
            }
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.0.to_be_bytes());
            }
        }
    };
}

/// Reads up to `max` flag octets (at least `min`), octet 5 into the low byte.
pub(crate) fn flags_decode(
    value: &[u8],
    min: usize,
    max: usize,
) -> Result<u32, crate::error::DecodeError> {
    if value.len() < min {
        return Err(crate::error::DecodeError::invalid_length(
            "fewer flag octets than required",
        ));
    }
    let mut le = [0u8; 4];
    for (d, s) in le.iter_mut().zip(value.iter().take(max)) {
        *d = *s;
    }
    Ok(u32::from_le_bytes(le))
}

pub(crate) fn flags_encode(v: u32, octets: usize, out: &mut Vec<u8>) {
    out.extend(v.to_le_bytes().iter().take(octets));
}

/// Defines a set of named flags (bitflags) carried in `min..=max` octets, the first octet
/// (octet 5) in the low byte of the integer. Spare bits are ignored on decode and sent as zero;
/// the longest form is sent. JSON is the list of the names of the flags set.
macro_rules! ie_flags {
    (
        $(#[$meta:meta])* $name:ident($int:ty), octets = $min:literal..=$max:literal {
            // Attributes as tokens: bitflags! cannot match an opaque `meta` fragment.
            $($(#[$($fm:tt)*])* $flag:ident = $bit:literal,)*
        }
    ) => {
        bitflags::bitflags! {
            $(#[$meta])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
            pub struct $name: $int {
                $($(#[$($fm)*])* const $flag = $bit;)*
            }
        }

        impl $name {
            /// The names of the flags set, in bit order.
            pub fn names(self) -> impl Iterator<Item = &'static str> {
                self.iter_names().map(|(n, _)| n)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.names())
            }
        }

        impl $crate::codec::IeValue for $name {
            fn decode(value: &[u8]) -> Result<Self, $crate::error::DecodeError> {
                $crate::codec::flags_decode(value, $min, $max).map(|v| {
                    let known = v & u32::from(Self::all().bits());
                    Self::from_bits_truncate(<$int>::try_from(known).unwrap_or_default())
                })
            }
            fn encode(&self, out: &mut Vec<u8>) {
                $crate::codec::flags_encode(u32::from(self.bits() & Self::all().bits()), $max, out);
            }
        }

        #[cfg(test)]
        impl proptest::arbitrary::Arbitrary for $name {
            type Parameters = ();
            type Strategy = proptest::strategy::BoxedStrategy<Self>;
            fn arbitrary_with(_: ()) -> Self::Strategy {
                use proptest::strategy::Strategy;
                proptest::arbitrary::any::<$int>().prop_map(Self::from_bits_truncate).boxed()
            }
        }
    };
}

pub(crate) use {
    ie_add_default, ie_count, ie_counter, ie_emit, ie_field_ty, ie_finish, ie_flags, ie_group,
    ie_local, ie_reserve, ie_store, ie_uint,
};

/// Round-trip checks shared by the property tests of every IE module.
#[cfg(test)]
pub(crate) mod check {
    use super::IeValue;

    /// `decode(encode(x)) == x`, and re-encoding gives the same octets.
    pub fn roundtrip<T: IeValue + PartialEq + core::fmt::Debug>(x: &T) {
        let mut buf = Vec::new();
        x.encode(&mut buf);
        let back =
            T::decode(&buf).unwrap_or_else(|e| panic!("decode of {x:?} failed: {e} ({buf:02x?})"));
        assert_eq!(&back, x, "octets {buf:02x?}");
        let mut again = Vec::new();
        back.encode(&mut again);
        assert_eq!(buf, again);
    }

    /// Octets from a hex string (test vectors).
    pub fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The value of the single IE in `tlv`, checking its type.
    pub fn value_of(tlv: &[u8], ie_type: u16) -> &[u8] {
        let ie = crate::tlv::TlvIter::new(tlv).next().unwrap().unwrap();
        assert_eq!(ie.ie_type, ie_type);
        ie.value
    }

    /// `encode(decode(bytes)) == bytes` for canonical input.
    pub fn canonical<T: IeValue + core::fmt::Debug>(bytes: &[u8]) -> T {
        let v = T::decode(bytes).unwrap_or_else(|e| panic!("decode of {bytes:02x?} failed: {e}"));
        let mut out = Vec::new();
        v.encode(&mut out);
        assert_eq!(out, bytes, "re-encoding {v:?}");
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ie::{PdrId, Precedence, QerId};
    use proptest::prelude::*;

    ie_group! {
        /// A group shaped like Create PDR, to test the macro itself.
        pub struct Sample {
            pdr_id: M PdrId = 56,
            precedence: O Precedence = 29,
            qer_ids: N QerId = 109,
        }
    }

    #[test]
    fn group_decodes_skips_unknown_and_vendor_ies() {
        // PDR ID 1, unknown IE 999, vendor IE, QER ID 5, QER ID 6.
        let buf = [
            0, 56, 0, 2, 0, 1, 0x03, 0xe7, 0, 1, 0xff, 0x80, 0x10, 0, 3, 0, 1, 9, 0, 109, 0, 4, 0,
            0, 0, 5, 0, 109, 0, 4, 0, 0, 0, 6,
        ];
        let g = Sample::decode(&buf).unwrap();
        assert_eq!(g.pdr_id, PdrId(1));
        assert_eq!(g.precedence, None);
        assert_eq!(&g.qer_ids[..], &[QerId(5), QerId(6)]);
    }

    #[test]
    fn missing_mandatory_and_bad_child_name_the_ie() {
        let e = Sample::decode(&[0, 29, 0, 4, 0, 0, 0, 1]).unwrap_err();
        assert_eq!(
            (e.kind(), e.offending_ie()),
            (crate::ErrorKind::MissingMandatory, Some(56))
        );
        let e = Sample::decode(&[0, 56, 0, 1, 7]).unwrap_err();
        assert_eq!(
            (e.kind(), e.offending_ie()),
            (crate::ErrorKind::InvalidLength, Some(56))
        );
    }

    proptest! {
        #[test]
        fn group_roundtrip(s: Sample) { check::roundtrip(&s); }
    }
}
