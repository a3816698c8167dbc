//! QER Correlation IDs (TS 29.244 §5.2.2, §8.2.10): the QERs of one CP node's sessions that
//! carry the same correlation id police one aggregate rate together (an APN/DNN-AMBR), on
//! whichever workers the sessions live. The agent keeps one [`Aggregate`] per (CP node,
//! correlation id) while a session uses it and puts it in those QERs before each install.

use std::collections::HashMap;
use std::time::Instant;
use upf_pfcp::ie::NodeId;
use upf_rules::budget::Aggregate;
use upf_rules::Session;

#[derive(Debug, Default)]
pub(crate) struct Aggregates {
    /// Each aggregate and the number of installed sessions using it.
    map: HashMap<(NodeId, u32), (Aggregate, usize)>,
}

impl Aggregates {
    /// Gives each QER of `s` with a Correlation ID and an MBR the aggregate of (`node`, id),
    /// made at the QER's MBR if it is new, else set to it (the last installed wins).
    /// Returns the ids of `s`; [`Aggregates::settle`] counts them once the install is
    /// decided.
    pub fn attach(&mut self, now: Instant, node: &NodeId, s: &mut Session) -> Vec<u32> {
        for q in &mut s.qers {
            let (Some(id), Some(mbr)) = (q.correlation_id, q.mbr) else {
                q.aggregate = None;
                continue;
            };
            let window = q.averaging_window();
            let (a, _) = self
                .map
                .entry((node.clone(), id))
                .and_modify(|(a, _)| a.set_rate(mbr, window))
                .or_insert_with(|| (Aggregate::new(now, id, mbr, window), 0));
            q.aggregate = Some(a.clone());
        }
        ids(Some(s))
    }

    /// A session of `node` went from `before` to `after` (`None`: none; an install that
    /// failed leaves it as it was): the counts of the ids it gained or lost, and the
    /// aggregates of `touched` (and of `before`) that no session uses any more released.
    pub fn settle(
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
