//! Immutable lists that many sessions' rules hold alike (the SDF filters of one PCC rule), kept
//! once and shared, and the interner that finds the copy to share.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// An immutable slice behind a shared pointer: cloning is a reference count, and an empty one
/// allocates nothing. Reads as a `&[T]`.
pub struct SharedSlice<T>(Option<Arc<[T]>>);

impl<T> SharedSlice<T> {
    pub const fn new() -> Self {
        Self(None)
    }

    pub fn as_slice(&self) -> &[T] {
        self.0.as_deref().unwrap_or(&[])
    }

    /// Whether both share one allocation (or are both empty).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl<T> Default for SharedSlice<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for SharedSlice<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Deref for SharedSlice<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T> AsRef<[T]> for SharedSlice<T> {
    fn as_ref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<'a, T> IntoIterator for &'a SharedSlice<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl<T> From<Vec<T>> for SharedSlice<T> {
    fn from(v: Vec<T>) -> Self {
        Self((!v.is_empty()).then(|| v.into()))
    }
}

impl<T: Clone> From<&[T]> for SharedSlice<T> {
    fn from(v: &[T]) -> Self {
        Self((!v.is_empty()).then(|| v.into()))
    }
}

impl<T> FromIterator<T> for SharedSlice<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        iter.into_iter().collect::<Vec<T>>().into()
    }
}

impl<T: PartialEq> PartialEq for SharedSlice<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Eq> Eq for SharedSlice<T> {}

impl<T: Hash> Hash for SharedSlice<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl<T: core::fmt::Debug> core::fmt::Debug for SharedSlice<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl<T: Serialize> Serialize for SharedSlice<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

/// A copy of its own: whoever reads rules back (the persisted state) shares them again.
impl<'de, T: Deserialize<'de>> Deserialize<'de> for SharedSlice<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<T>::deserialize(d)?;
        Ok(Self((!v.is_empty()).then(|| v.into())))
    }
}

/// A value many rules hold alike (a FAR's network instance, say), behind a shared pointer;
/// absent (no allocation) stands for the default value. Reads through [`Self::get`].
pub struct Shared<T>(Option<Arc<T>>);

impl<T> Shared<T> {
    pub const fn new() -> Self {
        Self(None)
    }

    /// The value, `None` standing for the default.
    pub fn get(&self) -> Option<&T> {
        self.0.as_deref()
    }

    /// Whether both share one copy (or are both absent).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl<T: Clone + Default> Shared<T> {
    /// The value to change: a copy of its own if it was shared.
    pub fn make_mut(&mut self) -> &mut T {
        Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: PartialEq + Default> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        match (self.get(), other.get()) {
            (Some(a), Some(b)) => a == b,
            (None, None) => true,
            (Some(x), None) | (None, Some(x)) => *x == T::default(),
        }
    }
}

impl<T: Eq + Default> Eq for Shared<T> {}

impl<T: core::fmt::Debug> core::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.0.fmt(f)
    }
}

/// As the value (the default when absent): every format reads the same fields back.
impl<T: Serialize + Default> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.get() {
            Some(v) => v.serialize(s),
            None => T::default().serialize(s),
        }
    }
}

/// The default value reads back as absent, as it was before it was written.
impl<'de, T: Deserialize<'de> + Default + PartialEq> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = T::deserialize(d)?;
        Ok(Self((v != T::default()).then(|| Arc::new(v))))
    }
}

/// Hands out one shared copy per distinct content ([`SharedSlice`]s, [`Shared`] values).
/// Copies nobody else holds any more are dropped whenever the table has doubled since the
/// last sweep, so it stays within twice the copies in use (plus a few).
#[derive(Debug)]
pub struct Interner<T: ?Sized> {
    copies: HashSet<Arc<T>>,
    sweep_at: usize,
}

const MIN_SWEEP: usize = 64;

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Self {
            copies: HashSet::new(),
            sweep_at: MIN_SWEEP,
        }
    }
}

impl<T: ?Sized + Hash + Eq> Interner<T> {
    fn get_or_insert(&mut self, v: &T, make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        if let Some(a) = self.copies.get(v) {
            return a.clone();
        }
        if self.copies.len() >= self.sweep_at {
            self.copies.retain(|a| Arc::strong_count(a) > 1);
            self.sweep_at = (self.copies.len() * 2).max(MIN_SWEEP);
        }
        let a = make();
        self.copies.insert(a.clone());
        a
    }

    /// Distinct copies held (some possibly no longer in use).
    pub fn len(&self) -> usize {
        self.copies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }
}

impl<T: Hash + Eq + Clone> Interner<[T]> {
    /// The shared copy of `items`, made on first sight.
    pub fn intern(&mut self, items: &[T]) -> SharedSlice<T> {
        if items.is_empty() {
            return SharedSlice::new();
        }
        SharedSlice(Some(self.get_or_insert(items, || items.into())))
    }
}

impl<T: Hash + Eq + Clone + Default> Interner<T> {
    /// Replaces `v`'s value by the shared copy of it (none for the default).
    pub fn share(&mut self, v: &mut Shared<T>) {
        let Some(own) = v.0.take() else {
            return;
        };
        if *own != T::default() {
            v.0 = Some(self.get_or_insert(&own, || own.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_lists_share_and_unused_ones_go() {
        let mut i = Interner::<[u32]>::default();
        let a = i.intern(&[1, 2]);
        let b = i.intern(&[1, 2]);
        assert!(a.ptr_eq(&b));
        assert_eq!(&*a, &[1, 2]);
        assert!(i.intern(&[]).is_empty());
        assert!(!i.intern(&[3]).ptr_eq(&a));
        drop((a, b));
        // Fill up to the sweep: every list but the ones still held goes.
        let keep = i.intern(&[7]);
        for n in 0..MIN_SWEEP {
            i.intern(&[100 + u32::try_from(n).unwrap()]);
        }
        assert!(i.len() < MIN_SWEEP);
        assert!(i.intern(&[7]).ptr_eq(&keep));
        assert_eq!(
            SharedSlice::from(vec![1, 2]),
            SharedSlice::from(&[1, 2][..])
        );
        assert_eq!(SharedSlice::<u8>::from(Vec::new()), SharedSlice::new());
    }

    #[test]
    fn shared_values() {
        let mut i = Interner::<(u8, u8)>::default();
        let mut a = Shared::<(u8, u8)>::new();
        assert_eq!(a.get(), None);
        a.make_mut().0 = 1;
        let mut b = a.clone();
        b.make_mut().1 = 2; // copy on write
        assert_eq!((a.get(), b.get()), (Some(&(1, 0)), Some(&(1, 2))));
        let mut c = Shared::new();
        *c.make_mut() = (1, 2);
        i.share(&mut b);
        i.share(&mut c);
        assert!(Arc::ptr_eq(b.0.as_ref().unwrap(), c.0.as_ref().unwrap()));
        let mut d = Shared::new();
        d.make_mut();
        assert_eq!(d, Shared::new(), "the default equals absence");
        i.share(&mut d);
        assert!(d.get().is_none(), "and is shared as absence");
    }
}
