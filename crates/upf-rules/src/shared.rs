//! Immutable lists that many sessions' rules hold alike (the SDF filters of one PCC rule), kept
//! once and shared, and the interner that finds the copy to share.

use serde::{Serialize, Serializer};
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

/// Hands out one [`SharedSlice`] per distinct content. Lists nobody else holds any more are
/// dropped whenever the table has doubled since the last sweep, so it stays within twice the
/// lists in use (plus a few).
#[derive(Debug)]
pub struct Interner<T> {
    lists: HashSet<Arc<[T]>>,
    sweep_at: usize,
}

const MIN_SWEEP: usize = 64;

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Self {
            lists: HashSet::new(),
            sweep_at: MIN_SWEEP,
        }
    }
}

impl<T: Hash + Eq + Clone> Interner<T> {
    /// The shared copy of `items`, made on first sight.
    pub fn intern(&mut self, items: &[T]) -> SharedSlice<T> {
        if items.is_empty() {
            return SharedSlice::new();
        }
        if let Some(a) = self.lists.get(items) {
            return SharedSlice(Some(a.clone()));
        }
        if self.lists.len() >= self.sweep_at {
            self.lists.retain(|a| Arc::strong_count(a) > 1);
            self.sweep_at = (self.lists.len() * 2).max(MIN_SWEEP);
        }
        let a: Arc<[T]> = items.into();
        self.lists.insert(a.clone());
        SharedSlice(Some(a))
    }

    /// Distinct lists held (some possibly no longer in use).
    pub fn len(&self) -> usize {
        self.lists.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_lists_share_and_unused_ones_go() {
        let mut i = Interner::default();
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
            i.intern(&[100 + n]);
        }
        assert!(i.len() < MIN_SWEEP);
        assert!(i.intern(&[7]).ptr_eq(&keep));
        assert_eq!(
            SharedSlice::from(vec![1, 2]),
            SharedSlice::from(&[1, 2][..])
        );
        assert_eq!(SharedSlice::<u8>::from(Vec::new()), SharedSlice::new());
    }
}
