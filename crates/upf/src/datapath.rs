//! The data path as the daemon drives it: the workers, with every install and removal logged
//! (debug, target `upf::datapath`: the SEID and the session's rule counts) and counted by
//! result for /metrics.

use std::sync::Arc;
use std::time::Instant;
use tracing::debug;
use upf_rules::mem::MemDatapath;
use upf_rules::{
    Datapath, DatapathError, DatapathEvent, InstallFlags, Installed, Seid, Session, UrrId,
    UsageReport,
};
use upf_runtime::Engines;

/// Installs and removals the data path did and refused, since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstallCounts {
    pub installs_ok: u64,
    pub installs_failed: u64,
    pub removals_ok: u64,
    pub removals_failed: u64,
}

/// A data path that can say which session it holds under a SEID (for the log line of a
/// removal, which names only the SEID).
pub trait Holds {
    fn holds(&self, seid: Seid) -> Option<&Session>;
}

impl Holds for Engines {
    fn holds(&self, seid: Seid) -> Option<&Session> {
        self.workers().installed(seid).map(|s| &**s)
    }
}

impl Holds for MemDatapath {
    fn holds(&self, seid: Seid) -> Option<&Session> {
        self.session(seid).map(|s| &**s)
    }
}

/// `D` with its installs and removals logged and counted.
#[derive(Debug)]
pub struct Observed<D> {
    inner: D,
    counts: InstallCounts,
}

impl<D> Observed<D> {
    /// An install's outcome, counted and logged.
    fn installed(&mut self, seid: Seid, rules: Rules, r: &Result<Installed, DatapathError>) {
        match r {
            Ok(_) => self.counts.installs_ok += 1,
            Err(_) => self.counts.installs_failed += 1,
        }
        log(
            ("installed", "install"),
            seid,
            Some(rules),
            r.as_ref().err(),
        );
    }

    pub fn new(inner: D) -> Self {
        Self {
            inner,
            counts: InstallCounts::default(),
        }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    pub fn counts(&self) -> InstallCounts {
        self.counts
    }
}

/// What the log line of an install or removal says of the session's rules.
#[derive(Debug, Clone, Copy)]
struct Rules {
    pdrs: usize,
    fars: usize,
    qers: usize,
    urrs: usize,
    bar: bool,
}

impl Rules {
    fn of(s: &Session) -> Self {
        Self {
            pdrs: s.pdrs.len(),
            fars: s.fars.len(),
            qers: s.qers.len(),
            urrs: s.urrs.len(),
            bar: s.bar.is_some(),
        }
    }
}

/// The line of one install or removal (`what`: what was done, `failed`: what failed);
/// `rules` is None for a removal of a SEID the data path does not hold.
fn log(
    (what, failed): (&str, &str),
    seid: Seid,
    rules: Option<Rules>,
    error: Option<&DatapathError>,
) {
    let field = |f: fn(&Rules) -> usize| rules.as_ref().map(f);
    let (pdrs, fars) = (field(|r| r.pdrs), field(|r| r.fars));
    let (qers, urrs) = (field(|r| r.qers), field(|r| r.urrs));
    let bar = rules.map(|r| r.bar);
    match error {
        None => debug!(
            target: "upf::datapath",
            seid = format!("{:#x}", seid.0), pdrs, fars, qers, urrs, bar,
            "session {what}"
        ),
        Some(e) => debug!(
            target: "upf::datapath",
            seid = format!("{:#x}", seid.0), pdrs, fars, qers, urrs, bar, error = %e,
            "session {failed} failed"
        ),
    }
}

impl<D: Datapath + Holds> Datapath for Observed<D> {
    fn install(
        &mut self,
        now: Instant,
        session: Arc<Session>,
        flags: InstallFlags,
    ) -> Result<Installed, DatapathError> {
        let (seid, rules) = (session.seid, Rules::of(&session));
        let r = self.inner.install(now, session, flags);
        self.installed(seid, rules, &r);
        r
    }

    fn install_new(
        &mut self,
        now: Instant,
        sessions: Vec<Arc<Session>>,
    ) -> Vec<Result<Installed, DatapathError>> {
        let about: Vec<(Seid, Rules)> = sessions.iter().map(|s| (s.seid, Rules::of(s))).collect();
        let results = self.inner.install_new(now, sessions);
        for ((seid, rules), r) in about.into_iter().zip(&results) {
            self.installed(seid, rules, r);
        }
        results
    }

    fn remove(&mut self, now: Instant, seid: Seid) -> Result<Vec<UsageReport>, DatapathError> {
        let rules = self.inner.holds(seid).map(Rules::of);
        let r = self.inner.remove(now, seid);
        match &r {
            Ok(_) => self.counts.removals_ok += 1,
            Err(_) => self.counts.removals_failed += 1,
        }
        log(("removed", "removal"), seid, rules, r.as_ref().err());
        r
    }

    fn query_usage(
        &mut self,
        now: Instant,
        seid: Seid,
        urrs: &[UrrId],
    ) -> Result<Vec<UsageReport>, DatapathError> {
        self.inner.query_usage(now, seid, urrs)
    }

    fn poll_event(&mut self) -> Option<DatapathEvent> {
        self.inner.poll_event()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn installs_and_removals_are_counted_by_result() {
        let mut d = Observed::new(MemDatapath::default());
        let now = Instant::now();
        let s = |seid| {
            Arc::new(Session::new(
                Seid(seid),
                Seid(1),
                IpAddr::V4(Ipv4Addr::LOCALHOST),
            ))
        };
        d.install(now, s(1), InstallFlags::default()).unwrap();
        d.install(now, s(2), InstallFlags::default()).unwrap();
        d.inner.fail_next = Some(DatapathError::NoResources("test"));
        assert!(d.install(now, s(3), InstallFlags::default()).is_err());
        d.remove(now, Seid(1)).unwrap();
        assert!(d.remove(now, Seid(1)).is_err(), "already removed");
        assert_eq!(
            d.counts(),
            InstallCounts {
                installs_ok: 2,
                installs_failed: 1,
                removals_ok: 1,
                removals_failed: 1,
            }
        );
        assert!(d.inner().session(Seid(2)).is_some());
    }
}
