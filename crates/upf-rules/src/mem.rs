//! A data path that forwards nothing and remembers everything: the agent's test double, and
//! the data path of `upf run` until a real one is configured. Tests feed it usage and events
//! and make it fail on demand.

use crate::datapath::{Datapath, DatapathError, DatapathEvent, InstallFlags, Installed};
use crate::ids::{Seid, UrrId};
use crate::session::Session;
use crate::urr::{UsageReport, UsageTrigger, Volume};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

/// One call the agent made, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Install { seid: Seid, flags: InstallFlags },
    Remove { seid: Seid },
    Query { seid: Seid, urrs: Vec<UrrId> },
}

#[derive(Debug, Clone, Copy)]
struct Meter {
    since: Instant,
    volume: Volume,
}

#[derive(Debug, Clone)]
struct Entry {
    rules: Arc<Session>,
    /// When the session was installed: where the measurement of a URR without a meter starts.
    since: Instant,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct MemDatapath {
    sessions: HashMap<Seid, Entry>,
    /// Only URRs that counted usage, were reported on, or came after their session: the
    /// others (most) measure nothing since [`Entry::since`], so a session costs one entry.
    meters: HashMap<(Seid, UrrId), Meter>,
    events: VecDeque<DatapathEvent>,
    /// Whether to keep [`Self::log`]; off for benchmarks so that memory stays flat.
    pub recording: bool,
    pub log: Vec<Op>,
    /// The next install / remove / query fails with this error.
    pub fail_next: Option<DatapathError>,
    /// Sessions beyond this are refused with `NoResources`.
    pub capacity: Option<usize>,
}

impl MemDatapath {
    /// Records every call in [`Self::log`].
    pub fn recording() -> Self {
        Self {
            recording: true,
            ..Self::default()
        }
    }

    pub fn session(&self, seid: Seid) -> Option<&Arc<Session>> {
        self.sessions.get(&seid).map(|e| &e.rules)
    }

    pub fn sessions(&self) -> impl Iterator<Item = &Arc<Session>> {
        self.sessions.values().map(|e| &e.rules)
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Pretends the URR measured `bytes` in one packet.
    pub fn add_usage(&mut self, seid: Seid, urr: UrrId, bytes: u64, uplink: bool) {
        let Some(e) = self.sessions.get(&seid) else {
            return;
        };
        if e.rules.urr(urr).is_some() {
            let since = e.since;
            self.meters
                .entry((seid, urr))
                .or_insert(Meter {
                    since,
                    volume: Volume::default(),
                })
                .volume
                .count(bytes, uplink);
        }
    }

    /// Queues an event for the agent.
    pub fn push_event(&mut self, e: DatapathEvent) {
        self.events.push_back(e);
    }

    fn record(&mut self, op: Op) {
        if self.recording {
            self.log.push(op);
        }
    }

    /// Reports the usage of a URR of a session installed at `installed`; the measurement
    /// restarts at `now`, or ends with the URR when `restart` is false.
    fn take_report(
        &mut self,
        now: Instant,
        seid: Seid,
        urr: UrrId,
        installed: Instant,
        trigger: UsageTrigger,
        restart: bool,
    ) -> UsageReport {
        let fresh = Meter {
            since: now,
            volume: Volume::default(),
        };
        let old = if restart {
            self.meters.insert((seid, urr), fresh)
        } else {
            self.meters.remove(&(seid, urr))
        };
        let m = old.unwrap_or(Meter {
            since: installed,
            volume: Volume::default(),
        });
        UsageReport {
            seid,
            urr,
            trigger,
            start: Some(m.since),
            end: now,
            volume: m.volume,
            duration: now.saturating_duration_since(m.since),
            first_packet: None,
            last_packet: None,
            usage_information: Default::default(),
        }
    }
}

impl Datapath for MemDatapath {
    fn install(
        &mut self,
        now: Instant,
        session: Arc<Session>,
        flags: InstallFlags,
    ) -> Result<Installed, DatapathError> {
        let seid = session.seid;
        self.record(Op::Install { seid, flags });
        if let Some(e) = self.fail_next.take() {
            return Err(e);
        }
        let replacing = self.sessions.contains_key(&seid);
        if !replacing && self.capacity.is_some_and(|c| self.sessions.len() >= c) {
            return Err(DatapathError::NoResources("session table full"));
        }
        let mut out = Installed::default();
        let since = match self.sessions.get(&seid).cloned() {
            Some(old) => {
                for u in old
                    .rules
                    .urrs
                    .iter()
                    .filter(|u| session.urr(u.id).is_none())
                {
                    let r =
                        self.take_report(now, seid, u.id, old.since, UsageTrigger::TERMR, false);
                    out.removed_urr_usage.push(r);
                }
                // URRs new to the session measure from now.
                for u in session
                    .urrs
                    .iter()
                    .filter(|u| old.rules.urr(u.id).is_none())
                {
                    self.meters.insert(
                        (seid, u.id),
                        Meter {
                            since: now,
                            volume: Volume::default(),
                        },
                    );
                }
                old.since
            }
            None => now,
        };
        self.sessions.insert(
            seid,
            Entry {
                rules: session,
                since,
            },
        );
        Ok(out)
    }

    fn remove(&mut self, now: Instant, seid: Seid) -> Result<Vec<UsageReport>, DatapathError> {
        self.record(Op::Remove { seid });
        if let Some(e) = self.fail_next.take() {
            return Err(e);
        }
        let e = self
            .sessions
            .remove(&seid)
            .ok_or(DatapathError::UnknownSession(seid))?;
        Ok(e.rules
            .urrs
            .iter()
            .map(|u| self.take_report(now, seid, u.id, e.since, UsageTrigger::TERMR, false))
            .collect())
    }

    fn query_usage(
        &mut self,
        now: Instant,
        seid: Seid,
        urrs: &[UrrId],
    ) -> Result<Vec<UsageReport>, DatapathError> {
        self.record(Op::Query {
            seid,
            urrs: urrs.to_vec(),
        });
        if let Some(e) = self.fail_next.take() {
            return Err(e);
        }
        let e = self
            .sessions
            .get(&seid)
            .cloned()
            .ok_or(DatapathError::UnknownSession(seid))?;
        Ok(urrs
            .iter()
            .filter(|&&u| e.rules.urr(u).is_some())
            .map(|&u| self.take_report(now, seid, u, e.since, UsageTrigger::IMMER, true))
            .collect())
    }

    fn poll_event(&mut self) -> Option<DatapathEvent> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::urr::Urr;
    use std::time::Duration;

    fn session(urrs: &[u32]) -> Arc<Session> {
        let mut s = Session::new(Seid(9), Seid(1), "192.0.2.1".parse().unwrap());
        for &u in urrs {
            s.insert_urr(Urr::new(UrrId(u))).unwrap();
        }
        Arc::new(s)
    }

    #[test]
    fn usage_of_removed_urrs_and_sessions() {
        let t0 = Instant::now();
        let mut dp = MemDatapath::recording();
        dp.install(t0, session(&[1, 2]), InstallFlags::default())
            .unwrap();
        dp.add_usage(Seid(9), UrrId(1), 100, true);
        dp.add_usage(Seid(9), UrrId(2), 40, false);
        let t1 = t0 + Duration::from_secs(3);
        let out = dp
            .install(t1, session(&[1]), InstallFlags::default())
            .unwrap();
        assert_eq!(out.removed_urr_usage.len(), 1);
        let r = out.removed_urr_usage[0];
        assert_eq!(
            (r.urr, r.trigger, r.volume.downlink_bytes, r.duration),
            (UrrId(2), UsageTrigger::TERMR, 40, Duration::from_secs(3))
        );
        let q = dp.query_usage(t1, Seid(9), &[UrrId(1)]).unwrap();
        assert_eq!(
            (q[0].volume.uplink_bytes, q[0].trigger),
            (100, UsageTrigger::IMMER)
        );
        dp.add_usage(Seid(9), UrrId(1), 7, true);
        let fin = dp.remove(t1, Seid(9)).unwrap();
        assert_eq!(
            fin[0].volume.total_bytes, 7,
            "query restarted the measurement"
        );
        assert!(dp.is_empty());
        assert_eq!(
            dp.remove(t1, Seid(9)),
            Err(DatapathError::UnknownSession(Seid(9)))
        );
        assert_eq!(dp.log.len(), 5);
    }

    #[test]
    fn urrs_measure_from_their_own_installation() {
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(2), t0 + Duration::from_secs(5));
        let mut dp = MemDatapath::default();
        dp.install(t0, session(&[1]), InstallFlags::default())
            .unwrap();
        dp.install(t1, session(&[1, 3]), InstallFlags::default())
            .unwrap();
        dp.add_usage(Seid(9), UrrId(3), 10, false);
        dp.add_usage(Seid(9), UrrId(4), 99, false); // not installed: ignored
        let q = dp
            .query_usage(t2, Seid(9), &[UrrId(1), UrrId(3), UrrId(4)])
            .unwrap();
        let got: Vec<_> = q
            .iter()
            .map(|r| (r.urr, r.start, r.duration, r.volume.total_bytes))
            .collect();
        assert_eq!(
            got,
            [
                (UrrId(1), Some(t0), Duration::from_secs(5), 0),
                (UrrId(3), Some(t1), Duration::from_secs(3), 10)
            ]
        );
        let fin = dp.remove(t2 + Duration::from_secs(1), Seid(9)).unwrap();
        assert!(fin.iter().all(|r| r.start == Some(t2)));
        assert!(dp.meters.is_empty(), "a removed session leaves no meter");
    }

    #[test]
    fn capacity_and_injected_failure_change_nothing() {
        let t0 = Instant::now();
        let mut dp = MemDatapath {
            capacity: Some(0),
            ..MemDatapath::default()
        };
        assert!(matches!(
            dp.install(t0, session(&[]), InstallFlags::default()),
            Err(DatapathError::NoResources(_))
        ));
        dp.capacity = None;
        dp.fail_next = Some(DatapathError::Internal("boom".into()));
        assert!(dp
            .install(t0, session(&[]), InstallFlags::default())
            .is_err());
        assert!(dp.is_empty());
    }
}
