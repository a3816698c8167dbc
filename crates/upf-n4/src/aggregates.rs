//! QER Correlation IDs (TS 29.244 §5.2.2, §8.2.10): the QERs of one CP node's sessions that
//! carry the same correlation id police one aggregate rate together (an APN/DNN-AMBR), on
//! whichever workers the sessions live. The agent names one aggregate ([`AggregateKey`]) per
//! (CP node, correlation id) while a session uses it, and puts the name in those QERs
//! before each install; the data path keeps the buckets, at the rate of the QER last
//! installed (so a refused install changes no rate).

use std::collections::HashMap;
use upf_pfcp::ie::NodeId;
use upf_rules::{AggregateKey, Session};

#[derive(Debug, Default)]
pub(crate) struct Aggregates {
    /// Each aggregate's name and the number of installed sessions using it.
    map: HashMap<(NodeId, u32), (AggregateKey, usize)>,
    /// The next name: names are not reused, so a data path that still holds an old
    /// aggregate's buckets never gives them to another.
    next: u64,
}

impl Aggregates {
    /// Gives each QER of `s` with a Correlation ID and an MBR the aggregate of (`node`, id),
    /// named anew if no session uses it. Returns the ids, which [`Aggregates::settle`]
    /// counts once the install is decided.
    pub fn attach(&mut self, node: &NodeId, s: &mut Session) -> Vec<u32> {
        for q in &mut s.qers {
            let (Some(id), Some(_)) = (q.correlation_id, q.mbr) else {
                q.aggregate = None;
                continue;
            };
            let next = &mut self.next;
            let (key, _) = self.map.entry((node.clone(), id)).or_insert_with(|| {
                *next += 1;
                (AggregateKey(*next), 0)
            });
            q.aggregate = Some(*key);
        }
        ids(Some(s))
    }

    /// A session of `node` was `before` (`None`: none) and its install with the ids
    /// `touched` gave `installed` (`None`: it failed and the session is as it was): the
    /// counts of the ids it gained or lost, and the aggregates no session uses any more
    /// released.
    pub fn settle(
        &mut self,
        node: &NodeId,
        touched: &[u32],
        before: Option<&Session>,
        installed: Option<&Session>,
    ) {
        self.count(node, touched, before, installed.or(before));
    }

    /// A session of `node` that was `before` is gone: its aggregates no other session uses
    /// released.
    pub fn release(&mut self, node: &NodeId, before: &Session) {
        self.count(node, &[], Some(before), None);
    }

    /// A session of `node` went from `before` to `after` (`None`: none): the counts of the
    /// ids it gained or lost, and the aggregates of `touched` (and of `before`) that no
    /// session uses any more released.
    fn count(
        &mut self,
        node: &NodeId,
        touched: &[u32],
        before: Option<&Session>,
        after: Option<&Session>,
    ) {
        let (old, new) = (ids(before), ids(after));
        for id in new.iter().filter(|i| !old.contains(i)) {
            if let Some((_, n)) = self.map.get_mut(&(node.clone(), *id)) {
                *n += 1;
            }
        }
        for id in old.iter().filter(|i| !new.contains(i)) {
            if let Some((_, n)) = self.map.get_mut(&(node.clone(), *id)) {
                *n = n.saturating_sub(1);
            }
        }
        for id in touched.iter().chain(&old) {
            let key = (node.clone(), *id);
            if self.map.get(&key).is_some_and(|(_, n)| *n == 0) {
                self.map.remove(&key);
            }
        }
    }
}

/// The correlation ids `s`'s QERs carry an aggregate for, each once.
fn ids(s: Option<&Session>) -> Vec<u32> {
    let mut v: Vec<u32> = s
        .into_iter()
        .flat_map(|s| &s.qers)
        .filter(|q| q.aggregate.is_some())
        .filter_map(|q| q.correlation_id)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}
