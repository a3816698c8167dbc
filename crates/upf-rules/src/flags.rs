//! Sets of flags as the IEs carry them (bitflags), serialised as their integer.

/// A set of named flags over an integer (bit positions as in the IE, octet 5 the low byte):
/// bitflags' set operations, and JSON as the integer (what the admin API has always shown).
macro_rules! flags {
    // Flag attributes as tokens: bitflags! cannot match an opaque `meta` fragment.
    ($(#[$m:meta])* $name:ident($t:ty) { $($(#[$($cm:tt)*])* $c:ident = $v:literal,)* }) => {
        bitflags::bitflags! {
            $(#[$m])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
            pub struct $name: $t {
                $($(#[$($cm)*])* const $c = $v;)*
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.bits().serialize(s)
            }
        }

        /// Bits no flag names are kept: they were accepted once.
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <$t as serde::Deserialize>::deserialize(d).map(Self::from_bits_retain)
            }
        }
    };
}

pub(crate) use flags;
