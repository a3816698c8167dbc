//! QER Correlation IDs (TS 29.244 §5.2.2, §8.2.10): the QERs of one CP node's sessions that
//! carry the same correlation id police one aggregate rate together (an APN/DNN-AMBR), on
//! whichever workers the sessions live. The agent keeps one [`Aggregate`] per (CP node,
//! correlation id) while a session uses it and puts it in those QERs before each install.

use std::collections::HashMap;
use std::time::{Duration, Instant};
use upf_pfcp::ie::NodeId;
use upf_rules::budget::Aggregate;
use upf_rules::Session;

/// A [`upf_rules::budget::SharedRate`]'s `(units, per, depth)`.
type Rate = (u64, Duration, u64);

/// What [`Aggregates::attach`] did to one session, for [`Aggregates::settle`].
#[derive(Debug, Default)]
pub(crate) struct Attached {
    /// The correlation ids the session's QERs now carry an aggregate for.
    ids: Vec<u32>,
    /// The aggregates it gave a new rate, with their rates (uplink, downlink) before: put
    /// back if the install fails, so that a refused request changes nothing.
    rerated: Vec<(Aggregate, [Rate; 2])>,
}

#[derive(Debug, Default)]
pub(crate) struct Aggregates {
    /// Each aggregate and the number of installed sessions using it.
    map: HashMap<(NodeId, u32), (Aggregate, usize)>,
}

impl Aggregates {
    /// Gives each QER of `s` with a Correlation ID and an MBR the aggregate of (`node`, id),
    /// made at the QER's MBR if it is new, else set to it (the last installed wins).
    /// [`Aggregates::settle`] counts its ids, or undoes it, once the install is decided.
    pub fn attach(&mut self, now: Instant, node: &NodeId, s: &mut Session) -> Attached {
        let mut rerated: Vec<(Aggregate, [Rate; 2])> = Vec::new();
        for q in &mut s.qers {
            let (Some(id), Some(mbr)) = (q.correlation_id, q.mbr) else {
                q.aggregate = None;
                continue;
            };
            let window = q.averaging_window();
            let (a, _) = self
                .map
                .entry((node.clone(), id))
                .and_modify(|(a, _)| {
                    if !rerated.iter().any(|(r, _)| r == a) {
                        rerated.push((a.clone(), [a.0.uplink.rate(), a.0.downlink.rate()]));
                    }
                    a.set_rate(mbr, window);
                })
                .or_insert_with(|| (Aggregate::new(now, id, mbr, window), 0));
            q.aggregate = Some(a.clone());
        }
        Attached {
            ids: ids(Some(s)),
            rerated,
        }
    }

    /// A session of `node` was `before` (`None`: none) and its install of what `attached`
    /// describes gave `installed` (`None`: it failed, the session is as it was, and so are
    /// the rates `attach` changed): the counts of the ids it gained or lost, and the
    /// aggregates no session uses any more released.
    pub fn settle(
        &mut self,
        node: &NodeId,
        attached: Attached,
        before: Option<&Session>,
        installed: Option<&Session>,
    ) {
        if installed.is_none() {
            for (a, [up, down]) in &attached.rerated {
                a.0.uplink.set_rate(up.0, up.1, up.2);
                a.0.downlink.set_rate(down.0, down.1, down.2);
            }
        }
        self.count(node, &attached.ids, before, installed.or(before));
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
