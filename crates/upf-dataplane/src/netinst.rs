//! Network instances (TS 29.244 §8.2.4): the names of the data networks this UPF has an N6
//! for, interned to the small ids that packets and tables carry (no strings on the packet
//! path).

/// The network instances of this UPF's N6 interfaces, by name: a name's id is its index + 1;
/// id 0 is the default instance, the N6 configured without a name.
///
/// With no names configured every Network Instance a rule names is the default one (a
/// single-network UPF, as SMFs name the DNN in every rule); with names, a rule's Network
/// Instance must be one of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkInstances(Vec<String>);

/// The default network instance's id.
pub const DEFAULT_INSTANCE: u8 = 0;

/// More named instances than a packet's octet can tell apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooManyInstances(pub usize);

impl core::fmt::Display for TooManyInstances {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "at most 255 named network instances, not {}", self.0)
    }
}

impl std::error::Error for TooManyInstances {}

impl NetworkInstances {
    /// The named instances, in the order of their ids (1, 2, …); duplicates share the first
    /// one's id.
    pub fn new(names: impl IntoIterator<Item = String>) -> Result<Self, TooManyInstances> {
        let mut v: Vec<String> = Vec::new();
        for n in names {
            if !v.contains(&n) {
                v.push(n);
            }
        }
        if v.len() > usize::from(u8::MAX) {
            return Err(TooManyInstances(v.len()));
        }
        Ok(Self(v))
    }

    /// The id of `name`, or `None` when names are configured and it is not one of them
    /// (no name, or no names configured: the default instance).
    pub fn id(&self, name: Option<&str>) -> Option<u8> {
        match name {
            Some(n) if !self.0.is_empty() => {
                let i = self.0.iter().position(|x| x == n)?;
                u8::try_from(i + 1).ok()
            }
            _ => Some(DEFAULT_INSTANCE),
        }
    }

    /// The name of instance `id` (`None` for the default one or an unknown id).
    pub fn name(&self, id: u8) -> Option<&str> {
        let i = usize::from(id).checked_sub(1)?;
        self.0.get(i).map(String::as_str)
    }

    /// Whether any instance has a name.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_get_ids_from_one_and_unknown_names_none() {
        let n = NetworkInstances::new(["dn-a".into(), "dn-b".into(), "dn-a".into()]).unwrap();
        assert_eq!(n.id(Some("dn-a")), Some(1));
        assert_eq!(n.id(Some("dn-b")), Some(2));
        assert_eq!(n.id(Some("internet")), None);
        assert_eq!(n.id(None), Some(DEFAULT_INSTANCE));
        assert_eq!(n.name(2), Some("dn-b"));
        assert_eq!(n.name(0), None);
        // No names: every name is the default instance, as a single-network UPF has it.
        assert_eq!(NetworkInstances::default().id(Some("internet")), Some(0));
        assert!(NetworkInstances::new((0..256).map(|i| i.to_string())).is_err());
    }
}
