//! URR measurement on the fast path (TS 29.244 §5.2.2): volumes and packet times counted per
//! packet, thresholds and quotas checked as they are crossed, time-based triggers checked by
//! the timer, and each firing turned into a [`UsageReport`] for the agent.

use smallvec::SmallVec;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use upf_rules::{
    DatapathEvent, MeasurementInfo, QuotaUse, ReportingTriggers, Seid, Urr, UrrId,
    UsageInformation, UsageReport, UsageTrigger, Volume, VolumeLimit,
};

#[derive(Debug, Clone)]
pub(crate) struct UrrState {
    pub id: UrrId,
    triggers: ReportingTriggers,
    threshold: Option<VolumeLimit>,
    quota: Option<VolumeLimit>,
    period: Option<Duration>,
    time_threshold: Option<Duration>,
    time_quota: Option<Duration>,
    /// Quota Holding Time, when QUHTI asks for its report (§5.2.2.3.1): idle that long after
    /// traffic or a grant, the URR reports once, and again only after new traffic.
    quota_holding: Option<Duration>,
    holding_armed: bool,
    /// Quota Validity Time, when QUVTI asks for its report: the grant expires that long
    /// after it was made, and the URR reports once (until the next grant).
    validity: Option<Duration>,
    validity_reported: bool,
    /// The last packet counted, or the last grant: what the holding time runs from.
    last_seen: Instant,
    /// Usage since the last report.
    volume: Volume,
    /// Usage since the quota was granted.
    quota_used: Volume,
    quota_since: Instant,
    /// Start of the current measurement (last report or installation).
    start: Instant,
    first_packet: Option<Instant>,
    last_packet: Option<Instant>,
    start_reported: bool,
    pub exhausted: bool,
    /// The Linked URR IDs when LIUSA is set (§5.2.2.4): this URR reports whenever one of
    /// them does. Empty otherwise.
    liusa: SmallVec<[UrrId; 1]>,
    /// The FAR (index in the compiled session) whose treatment the URR's PDRs' packets get
    /// while its quota is exhausted, instead of being dropped (§5.2.2.3.1).
    pub quota_far: Option<u16>,
    /// Number of Reports (§8.2.133) as provisioned, and how many of them are left: at 0 the
    /// URR sends no more reports of its triggers (quotas are still enforced, usage still
    /// measured for Query URR, Remove URR and deletion). A changed number counts anew.
    number_of_reports: Option<u16>,
    reports_left: Option<u16>,
    /// With an Inactivity Detection Time: the time measurement as usage time, and STOPT.
    /// Boxed: most URRs have none, and their state stays as small as it was.
    activity: Option<Box<Activity>>,
    /// With a Monitoring Time or a Dropped DL Traffic Threshold. Boxed: rare.
    rare: Option<Box<Rare>>,
    /// A session on several workers: its volume thresholds and quotas are counted over
    /// all of them, through these draws, instead of by this worker's count alone.
    pub shared: Option<Box<crate::budgets::UrrDraw>>,
}

/// The state of the URR features few URRs use, behind one pointer.
#[derive(Debug, Clone, Default)]
struct Rare {
    /// Where the measurement splits at a Monitoring Time.
    monitor: Option<Monitor>,
    /// With DROTH: what was dropped.
    dropped: Option<Dropped>,
    /// MBQE (§8.2.68): packets a QER drops are measured too.
    before_qos: bool,
}

/// Dropped DL Traffic Threshold (§8.2.49) in packets and/or octets, and the downlink
/// traffic dropped while buffering since the last report.
#[derive(Debug, Clone)]
struct Dropped {
    limit: (Option<u64>, Option<u64>),
    packets: u64,
    octets: u64,
}

/// A Monitoring Time (§5.2.2.3.1). There the usage measured so far is set apart, to go
/// with the next report as the usage before it (BEF; the rest is AFT), the measurement
/// starts anew, and the subsequent thresholds and quotas replace the ones they follow (a
/// subsequent quota is a new grant from the monitoring time). No report is sent then. A
/// subsequent value stays in force until the SMF changes the IE it replaced (a new Volume
/// Quota after the monitoring time is a new grant, not overridden).
#[derive(Debug, Clone)]
struct Monitor {
    at: Instant,
    passed: bool,
    next: Subsequent,
    /// The URR's own threshold and quota IEs as last provisioned.
    base: Subsequent,
    /// The usage before `at`, until the next report.
    before: Option<UsageReport>,
}

/// Subsequent Volume Threshold, Volume Quota, Time Threshold, Time Quota (or the ones they
/// follow).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Subsequent {
    volume_threshold: Option<VolumeLimit>,
    volume_quota: Option<VolumeLimit>,
    time_threshold: Option<Duration>,
    time_quota: Option<Duration>,
}

/// Usage time under an Inactivity Detection Time (§5.2.2.2.1, §8.2.24): time counts from a
/// packet until the next one, or for at most the inactivity detection time when none comes
/// sooner. With STOPT, that much silence after traffic is the stop of traffic.
#[derive(Debug, Clone)]
struct Activity {
    idle: Duration,
    /// The last packet, across reports.
    prev: Option<Instant>,
    /// Usage time is counted up to here.
    credited: Instant,
    /// Usage time since the last report.
    usage: Duration,
    /// Usage time since the time quota was granted (§5.2.2.2.1: the quota is used up by
    /// usage time too).
    granted: Duration,
    /// Traffic came since the last STOPT (or ever): its stop is to be reported.
    stopt_armed: bool,
}

impl Activity {
    /// Credits the usage time up to `t`: the rest of the active time after the last
    /// packet, ending at `t` or after the inactivity detection time.
    fn credit(&mut self, t: Instant) {
        if let Some((from, end)) = self.uncredited(t) {
            self.usage += end - from;
            self.granted += end - from;
            self.credited = end;
        }
    }

    /// The active time up to `t` not credited yet, as (from, end), if any.
    fn uncredited(&self, t: Instant) -> Option<(Instant, Instant)> {
        let p = self.prev?;
        let (from, end) = (p.max(self.credited), t.min(p + self.idle));
        (end > from).then_some((from, end))
    }

    /// The usage time since the last report, and since the grant, up to `t`.
    fn at(&self, t: Instant) -> (Duration, Duration) {
        let d = self.uncredited(t).map_or(Duration::ZERO, |(f, e)| e - f);
        (self.usage + d, self.granted + d)
    }

    fn packet(&mut self, t: Instant, stopt: bool) {
        self.credit(t);
        self.prev = Some(self.prev.map_or(t, |p| p.max(t)));
        self.credited = self.credited.max(t);
        self.stopt_armed |= stopt;
    }
}

impl UrrState {
    pub fn new(now: Instant, urr: &Urr) -> Self {
        let mut s = Self {
            id: urr.id,
            triggers: ReportingTriggers::default(),
            threshold: None,
            quota: None,
            period: None,
            time_threshold: None,
            time_quota: None,
            quota_holding: None,
            holding_armed: false,
            last_seen: now,
            validity: None,
            validity_reported: false,
            volume: Volume::default(),
            quota_used: Volume::default(),
            quota_since: now,
            start: now,
            first_packet: None,
            last_packet: None,
            start_reported: false,
            exhausted: false,
            liusa: SmallVec::new(),
            quota_far: None,
            number_of_reports: None,
            reports_left: None,
            activity: None,
            rare: None,
            shared: None,
        };
        s.update(now, urr);
        s
    }

    /// Takes a modified URR's parameters, keeping what was measured. A changed quota is a
    /// new grant: it counts from now.
    pub fn update(&mut self, now: Instant, urr: &Urr) {
        let secs = |s: Option<u32>| s.filter(|&s| s > 0).map(|s| Duration::from_secs(s.into()));
        let base = Subsequent {
            volume_threshold: urr.volume_threshold,
            volume_quota: urr.volume_quota,
            time_threshold: secs(urr.time_threshold_s),
            time_quota: secs(urr.time_quota_s),
        };
        self.set_monitor(urr, base);
        let limit = urr
            .extra
            .as_ref()
            .and_then(|x| x.dropped_dl_threshold)
            .filter(|_| urr.triggers.contains(ReportingTriggers::DROTH));
        let before_qos = urr.info.contains(MeasurementInfo::MBQE);
        if limit.is_some() || before_qos || self.rare.is_some() {
            let rare = self.rare.get_or_insert_with(Default::default);
            rare.before_qos = before_qos;
            match (&mut rare.dropped, limit) {
                (Some(d), Some(l)) => d.limit = l,
                (d, None) => *d = None,
                (d @ None, Some(limit)) => {
                    *d = Some(Dropped {
                        limit,
                        packets: 0,
                        octets: 0,
                    });
                }
            }
        }
        if self
            .rare
            .as_deref()
            .is_some_and(|r| r.monitor.is_none() && r.dropped.is_none() && !r.before_qos)
        {
            self.rare = None;
        }
        // Past a Monitoring Time its subsequent values are the ones in force.
        let after = self
            .monitor()
            .filter(|m| m.passed)
            .map_or(Subsequent::default(), |m| m.next);
        let volume_quota = after.volume_quota.or(base.volume_quota);
        let time_quota = after.time_quota.or(base.time_quota);
        if volume_quota != self.quota {
            self.quota_used = Volume::default();
            self.quota_since = now;
        }
        if time_quota != self.time_quota {
            self.quota_since = now;
        }
        self.triggers = urr.triggers;
        let idle = secs(urr.inactivity_detection_time_s);
        match (&mut self.activity, idle) {
            (Some(a), Some(idle)) => a.idle = idle,
            (a, None) => *a = None,
            (a @ None, Some(idle)) => {
                *a = Some(Box::new(Activity {
                    idle,
                    prev: None,
                    credited: now,
                    usage: Duration::ZERO,
                    granted: Duration::ZERO,
                    stopt_armed: false,
                }));
            }
        }
        if self.quota_since == now {
            // A new grant: its usage time counts from now.
            if let Some(a) = &mut self.activity {
                a.credit(now);
                a.granted = Duration::ZERO;
            }
        }
        let n = urr
            .extra
            .as_ref()
            .and_then(|x| x.number_of_reports)
            .filter(|&n| n > 0);
        if n != self.number_of_reports {
            self.number_of_reports = n;
            self.reports_left = n;
        }
        self.liusa = if urr.triggers.contains(ReportingTriggers::LIUSA) {
            urr.linked_urrs().into()
        } else {
            SmallVec::new()
        };
        // A threshold reports only when VOLTH asks for it (§8.2.19); a quota is enforced
        // either way, and reported when VOLQU asks.
        self.threshold = after
            .volume_threshold
            .or(base.volume_threshold)
            .filter(|_| urr.triggers.contains(ReportingTriggers::VOLTH));
        self.quota = volume_quota;
        self.period = secs(urr.measurement_period_s);
        self.time_threshold = after.time_threshold.or(base.time_threshold);
        self.time_quota = time_quota;
        let validity = secs(urr.extra.as_ref().and_then(|x| x.quota_validity_time_s))
            .filter(|_| urr.triggers.contains(ReportingTriggers::QUVTI));
        if validity != self.validity || self.quota_since == now {
            self.validity = validity;
            self.validity_reported = false;
        }
        let holding = secs(urr.quota_holding_time_s)
            .filter(|_| urr.triggers.contains(ReportingTriggers::QUHTI));
        if holding != self.quota_holding {
            self.quota_holding = holding;
            self.holding_armed = holding.is_some();
            self.last_seen = now;
        }
        self.exhausted = self.quota.is_some_and(|q| q.reached_by(&self.quota_used));
    }

    /// Takes a URR's Monitoring Time and subsequent values (`base`: its own thresholds
    /// and quotas); a new time is to come again.
    fn set_monitor(&mut self, urr: &Urr, base: Subsequent) {
        let Some(x) = urr.extra.as_deref() else {
            return;
        };
        let Some(at) = x.monitoring_time else {
            return;
        };
        let secs = |s: Option<u32>| s.filter(|&s| s > 0).map(|s| Duration::from_secs(s.into()));
        let next = Subsequent {
            volume_threshold: x.subsequent_volume_threshold,
            volume_quota: x.subsequent_volume_quota,
            time_threshold: secs(x.subsequent_time_threshold_s),
            time_quota: secs(x.subsequent_time_quota_s),
        };
        let rare = self.rare.get_or_insert_with(Default::default);
        let m = rare.monitor.get_or_insert(Monitor {
            at,
            passed: false,
            next,
            base,
            before: None,
        });
        if m.at != at {
            m.at = at;
            m.passed = false;
        }
        if !m.passed {
            m.next = next;
        } else {
            // Past it, an IE the SMF changes takes over from its subsequent value.
            let (n, was) = (&mut m.next, m.base);
            if base.volume_threshold != was.volume_threshold {
                n.volume_threshold = None;
            }
            if base.volume_quota != was.volume_quota {
                n.volume_quota = None;
            }
            if base.time_threshold != was.time_threshold {
                n.time_threshold = None;
            }
            if base.time_quota != was.time_quota {
                n.time_quota = None;
            }
        }
        m.base = base;
    }

    /// The usage measured since the last report.
    pub fn unreported(&self) -> Volume {
        self.volume
    }

    /// When the measurement of [`UrrState::unreported`] started: a report restarts it.
    pub fn measuring_since(&self) -> Instant {
        self.start
    }

    /// MBQE: the URR measures before QoS enforcement, packets a QER drops too.
    pub fn before_qos(&self) -> bool {
        self.rare.as_deref().is_some_and(|r| r.before_qos)
    }

    fn monitor(&self) -> Option<&Monitor> {
        self.rare.as_deref()?.monitor.as_ref()
    }

    /// At or past the Monitoring Time (once): the usage so far is set apart and the
    /// subsequent values take over. Out of line: URRs without one pay only the branch.
    #[cold]
    #[inline(never)]
    fn monitored(&mut self, now: Instant) {
        let Some(at) = self
            .monitor()
            .filter(|m| !m.passed && now >= m.at)
            .map(|m| m.at)
        else {
            return;
        };
        let mut b = self.report(at, Seid(0), UsageTrigger::empty());
        let Some(m) = self.rare.as_deref_mut().and_then(|r| r.monitor.as_mut()) else {
            return;
        };
        m.passed = true;
        // A second Monitoring Time before any report: one usage before the latest.
        if let Some(old) = m.before.take() {
            b.start = old.start;
            b.volume.add(&old.volume);
            b.duration += old.duration;
            b.first_packet = old.first_packet.or(b.first_packet);
            b.last_packet = b.last_packet.or(old.last_packet);
        }
        m.before = Some(b);
        let next = m.next;
        if let Some(t) = next.volume_threshold {
            self.threshold = Some(t).filter(|_| self.triggers.contains(ReportingTriggers::VOLTH));
        }
        self.time_threshold = next.time_threshold.or(self.time_threshold);
        if next.volume_quota.is_some() || next.time_quota.is_some() {
            self.quota = next.volume_quota.or(self.quota);
            self.time_quota = next.time_quota.or(self.time_quota);
            self.quota_used = Volume::default();
            self.quota_since = at;
            self.validity_reported = false;
            if let Some(a) = &mut self.activity {
                a.granted = Duration::ZERO;
            }
            self.exhausted = self.quota.is_some_and(|q| q.reached_by(&self.quota_used));
        }
    }

    /// Whether the URR watches dropped downlink traffic (DROTH).
    pub fn counts_dropped(&self) -> bool {
        self.rare.as_deref().is_some_and(|r| r.dropped.is_some())
    }

    /// A downlink packet of `octets` dropped while buffering: DROTH when that reaches the
    /// Dropped DL Traffic Threshold.
    fn dropped_dl(&mut self, octets: u64) -> Option<UsageTrigger> {
        let done = self.done();
        let d = self.rare.as_deref_mut()?.dropped.as_mut()?;
        d.packets += 1;
        d.octets += octets;
        let (packets, bytes) = d.limit;
        let reached =
            packets.is_some_and(|l| d.packets >= l) || bytes.is_some_and(|l| d.octets >= l);
        (reached && !done).then_some(UsageTrigger::DROTH)
    }

    /// Prefetches what [`UrrState::count`] reads and writes.
    #[inline(always)]
    pub fn prefetch(&self) {
        use crate::prefetch::line;
        line(&self.volume);
        line(&self.quota_used);
        line(&self.threshold);
        line(&self.quota);
        line(&self.first_packet);
        line(&self.last_packet);
        line(&self.triggers);
        line(&self.exhausted);
    }

    /// Counts one packet; returns the trigger to report, if one fired.
    #[inline]
    pub fn count(&mut self, now: Instant, bytes: u64, uplink: bool) -> Option<UsageTrigger> {
        if self.rare.is_some() {
            self.monitored(now);
        }
        self.volume.count(bytes, uplink);
        self.quota_used.count(bytes, uplink);
        if self.first_packet.is_none() {
            self.first_packet = Some(now);
        }
        self.last_packet = Some(now);
        self.seen(now);
        if self.activity.is_some() {
            self.active(now);
        }
        self.check()
    }

    /// A packet at `at` under an Inactivity Detection Time (out of line: URRs without one
    /// pay only the branch on `activity`).
    #[inline(never)]
    fn active(&mut self, at: Instant) {
        let stopt = self.triggers.contains(ReportingTriggers::STOPT);
        if let Some(a) = &mut self.activity {
            a.packet(at, stopt);
        }
    }

    /// Adds what a hot record counted since its last sync: (octets, packets) each way, and
    /// the times of its first and last packet.
    pub fn add_pending(&mut self, ul: (u64, u64), dl: (u64, u64), first: Instant, last: Instant) {
        self.add_usage(ul, dl, (first, last), true);
    }

    /// As [`UrrState::add_pending`]; `quota`: whether it is used of the quota too (not when
    /// the quota's use is set from the count of the engine that measured it, `set_quota_use`).
    pub fn add_usage(
        &mut self,
        ul: (u64, u64),
        dl: (u64, u64),
        (first, last): (Instant, Instant),
        quota: bool,
    ) {
        let v = Volume {
            total_bytes: ul.0 + dl.0,
            uplink_bytes: ul.0,
            downlink_bytes: dl.0,
            total_packets: ul.1 + dl.1,
            uplink_packets: ul.1,
            downlink_packets: dl.1,
        };
        self.volume.add(&v);
        if quota {
            self.quota_used.add(&v);
        }
        // Everything synced before was counted earlier than this.
        self.first_packet = Some(self.first_packet.map_or(first, |f| f.min(first)));
        self.last_packet = Some(self.last_packet.map_or(last, |l| l.max(last)));
        self.seen(last);
    }

    /// The octets used of the Volume Quota since its grant (total, uplink, downlink), for
    /// another engine to go on from; none without a quota, or when the session's workers
    /// share it (their draws are the use, not this worker's count).
    pub fn quota_use(&self) -> Option<QuotaUse> {
        self.quota.filter(|_| !self.shares_quota())?;
        let u = &self.quota_used;
        Some(QuotaUse {
            urr: self.id,
            total: u.total_bytes,
            uplink: u.uplink_bytes,
            downlink: u.downlink_bytes,
        })
    }

    /// The quota's use is another engine's `used` (read as the session left it; it counted
    /// everything since the grant): exhausted when that reaches the quota. No report: the
    /// engine that counted it made the quota's.
    pub fn set_quota_use(&mut self, used: &QuotaUse) {
        if self.quota.is_none() || self.shares_quota() {
            return;
        }
        let u = &mut self.quota_used;
        u.total_bytes = used.total;
        u.uplink_bytes = used.uplink;
        u.downlink_bytes = used.downlink;
        self.exhausted = self.quota.is_some_and(|q| q.reached_by(&self.quota_used));
    }

    fn shares_quota(&self) -> bool {
        (self.shared.as_deref()).is_some_and(|d| d.quota.iter().any(Option::is_some))
    }

    /// Traffic at `at`: the holding time runs from here.
    fn seen(&mut self, at: Instant) {
        if self.quota_holding.is_some() {
            self.last_seen = self.last_seen.max(at);
            self.holding_armed = true;
        }
    }

    /// The triggers what was counted so far fires (START, then quota or threshold).
    pub fn check(&mut self) -> Option<UsageTrigger> {
        // START and a volume trigger may fire on the same packet: both go in the one
        // report (the trigger is a set of flags); returning START alone left the quota
        // unmarked, so the next packet went through and VOLQU came one packet late.
        let mut t = UsageTrigger::empty();
        if self.done() {
            if self.quota_reached() {
                self.exhausted = true;
            }
            return None;
        }
        if !self.start_reported && self.triggers.contains(ReportingTriggers::START) {
            self.start_reported = true;
            t = t.union(UsageTrigger::START);
        }
        if self.quota_reached() {
            self.exhausted = true;
            if self.triggers.contains(ReportingTriggers::VOLQU) && self.claim_quota() {
                t = t.union(UsageTrigger::VOLQU);
            }
        } else if self.threshold_reached() {
            t = t.union(UsageTrigger::VOLTH);
        }
        (!t.is_empty()).then_some(t)
    }

    /// Whether the quota is reached: by this worker's count, or (a session on several
    /// workers) its total over all of them.
    #[inline]
    fn quota_reached(&mut self) -> bool {
        let used = crate::budgets::volumes(&self.quota_used);
        match self.shared.as_deref_mut() {
            Some(d) if d.quota.iter().any(Option::is_some) => (d.quota.iter_mut())
                .zip(used)
                .any(|(v, c)| v.as_mut().is_some_and(|v| v.reached(c))),
            _ => self.quota.is_some_and(|q| q.reached_by(&self.quota_used)),
        }
    }

    /// Whether the threshold is reached and this worker reports it (see
    /// [`UrrState::quota_reached`]; over several workers, one reports).
    #[inline]
    fn threshold_reached(&mut self) -> bool {
        let counted = crate::budgets::volumes(&self.volume);
        match self.shared.as_deref_mut() {
            Some(d) if d.threshold.iter().any(Option::is_some) => (d.threshold.iter_mut())
                .zip(counted)
                .any(|(v, c)| v.as_mut().is_some_and(|v| v.reached(c) && v.rearm(c))),
            _ => self.threshold.is_some_and(|l| l.reached_by(&self.volume)),
        }
    }

    /// Whether this worker reports the quota reached: the first of the session's workers
    /// to find it does.
    fn claim_quota(&self) -> bool {
        // Every worker claims the same one of the shared volumes.
        let d = self
            .shared
            .as_deref()
            .and_then(|d| d.quota.iter().flatten().next());
        d.is_none_or(|d| d.claim())
    }

    /// Octets that may still be counted with no trigger possibly firing: 0 while START is
    /// due, else the least distance to a volume threshold or quota.
    pub fn budget(&self) -> u64 {
        let done = self.done();
        if !done && !self.start_reported && self.triggers.contains(ReportingTriggers::START) {
            return 0;
        }
        let mut left = u64::MAX;
        // A URR out of reports watches its quota only.
        let threshold = if done { &None } else { &self.threshold };
        for (limit, used) in [(threshold, &self.volume), (&self.quota, &self.quota_used)] {
            let Some(l) = limit else { continue };
            for (t, u) in [
                (l.total, used.total_bytes),
                (l.uplink, used.uplink_bytes),
                (l.downlink, used.downlink_bytes),
            ] {
                if let Some(t) = t {
                    left = left.min(t.saturating_sub(u));
                }
            }
        }
        left
    }

    /// The usage since the last report, restarting the measurement: one report, or two
    /// after a Monitoring Time, the usage before it (BEF) and after it (AFT).
    pub fn reports(
        &mut self,
        now: Instant,
        seid: Seid,
        trigger: UsageTrigger,
    ) -> SmallVec<[UsageReport; 1]> {
        let mut out = SmallVec::new();
        let mut before = None;
        if self.rare.is_some() {
            self.monitored(now);
            if let Some(r) = self.rare.as_deref_mut() {
                before = r.monitor.as_mut().and_then(|m| m.before.take());
                if let Some(d) = &mut r.dropped {
                    (d.packets, d.octets) = (0, 0);
                }
            }
        }
        let mut r = self.report(now, seid, trigger);
        if let Some(mut b) = before {
            (b.seid, b.trigger) = (seid, trigger);
            b.usage_information = UsageInformation::BEF;
            r.usage_information = UsageInformation::AFT;
            out.push(b);
        }
        out.push(r);
        out
    }

    /// The usage since the last report (or the Monitoring Time), restarting the measurement.
    fn report(&mut self, now: Instant, seid: Seid, trigger: UsageTrigger) -> UsageReport {
        let duration = match &mut self.activity {
            Some(a) => {
                a.credit(now);
                std::mem::take(&mut a.usage)
            }
            None => now.saturating_duration_since(self.start),
        };
        let r = UsageReport {
            seid,
            urr: self.id,
            trigger,
            start: Some(self.start),
            end: now,
            volume: self.volume,
            duration,
            first_packet: self.first_packet,
            last_packet: self.last_packet,
            usage_information: UsageInformation::empty(),
        };
        if let Some(d) = self.shared.as_deref_mut() {
            let counted = crate::budgets::volumes(&self.volume);
            for (v, c) in d.threshold.iter_mut().zip(counted) {
                if let Some(v) = v {
                    v.restart(c);
                }
            }
        }
        self.volume = Volume::default();
        self.start = now;
        self.first_packet = None;
        self.last_packet = None;
        r
    }

    /// Whether the URR has sent its Number of Reports: it reports no more.
    #[inline]
    pub fn done(&self) -> bool {
        self.reports_left == Some(0)
    }

    /// A report of a trigger is sent: one fewer left.
    fn reported(&mut self) {
        if let Some(n) = &mut self.reports_left {
            *n = n.saturating_sub(1);
        }
    }

    /// The measured time at `now` (§5.2.2.2.1): since the last report, and since the time
    /// quota's grant. Usage time under an Inactivity Detection Time, else the wall clock.
    fn measured(&self, now: Instant) -> (Duration, Duration) {
        match &self.activity {
            Some(a) => a.at(now),
            None => (
                now.saturating_duration_since(self.start),
                now.saturating_duration_since(self.quota_since),
            ),
        }
    }

    /// When `limit` of measured time (the part `which` of [`UrrState::measured`]) is
    /// reached at the earliest: exactly on the wall clock; under an Inactivity Detection
    /// Time, if traffic went on from `now` without a gap (usage time grows no faster than
    /// that), and the timer looks again then: a packet cannot set a timer.
    fn reached_at(
        &self,
        now: Instant,
        limit: Duration,
        which: fn((Duration, Duration)) -> Duration,
    ) -> Instant {
        now + limit.saturating_sub(which(self.measured(now)))
    }

    /// The next instant a time-based trigger may fire.
    pub fn deadline(&self, now: Instant) -> Option<Instant> {
        let time_quota = self
            .time_quota
            .filter(|_| !self.exhausted && self.triggers.contains(ReportingTriggers::TIMQU))
            .map(|q| self.reached_at(now, q, |m| m.1));
        if self.done() {
            // Out of reports: only the time quota still runs out (unreported).
            return time_quota;
        }
        let mut d: Option<Instant> = None;
        let mut at = |t: Instant| d = Some(d.map_or(t, |d| d.min(t)));
        if self.triggers.contains(ReportingTriggers::PERIO) {
            if let Some(p) = self.period {
                at(self.start + p);
            }
        }
        if self.triggers.contains(ReportingTriggers::TIMTH) {
            if let Some(t) = self.time_threshold {
                at(self.reached_at(now, t, |m| m.0));
            }
        }
        if let Some(q) = time_quota {
            at(q);
        }
        if let Some(h) = self.quota_holding.filter(|_| self.holding_armed) {
            at(self.last_seen + h);
        }
        if let Some(v) = self.validity.filter(|_| !self.validity_reported) {
            at(self.quota_since + v);
        }
        if let Some(m) = self.monitor().filter(|m| !m.passed) {
            at(m.at);
        }
        if let Some(a) = self.activity.as_ref().filter(|a| a.stopt_armed) {
            if let Some(p) = a.prev {
                at(p + a.idle);
            }
        }
        d
    }

    /// With STOPT under an Inactivity Detection Time and no traffic since the last stop:
    /// when to look again (the packet that arms it cannot set a timer).
    pub fn stopt_poll(&self, now: Instant) -> Option<Instant> {
        let a = self.activity.as_ref()?;
        let poll =
            !a.stopt_armed && !self.done() && self.triggers.contains(ReportingTriggers::STOPT);
        poll.then(|| now + a.idle)
    }

    /// The time-based trigger due at `now`, if any (the caller then reports).
    pub fn due(&mut self, now: Instant) -> Option<UsageTrigger> {
        if self.rare.is_some() {
            self.monitored(now);
        }
        let t = self.triggers;
        if !self.exhausted && t.contains(ReportingTriggers::TIMQU) {
            if let Some(q) = self.time_quota {
                if self.measured(now).1 >= q {
                    self.exhausted = true;
                    return (!self.done()).then_some(UsageTrigger::TIMQU);
                }
            }
        }
        if self.done() {
            return None;
        }
        if t.contains(ReportingTriggers::PERIO)
            && self.period.is_some_and(|p| now >= self.start + p)
        {
            return Some(UsageTrigger::PERIO);
        }
        if t.contains(ReportingTriggers::TIMTH)
            && self
                .time_threshold
                .is_some_and(|p| self.measured(now).0 >= p)
        {
            return Some(UsageTrigger::TIMTH);
        }
        if self.holding_armed
            && self
                .quota_holding
                .is_some_and(|h| now >= self.last_seen + h)
        {
            self.holding_armed = false;
            return Some(UsageTrigger::QUHTI);
        }
        if !self.validity_reported && self.validity.is_some_and(|v| now >= self.quota_since + v) {
            self.validity_reported = true;
            return Some(UsageTrigger::QUVTI);
        }
        if let Some(a) = self.activity.as_mut().filter(|a| a.stopt_armed) {
            if a.prev.is_some_and(|p| now >= p + a.idle) {
                // Traffic stopped; the next packet is a start of traffic again.
                a.stopt_armed = false;
                self.start_reported = false;
                return Some(UsageTrigger::STOPT);
            }
        }
        None
    }
}

/// A downlink packet of `octets` dropped while buffering, for the URRs `which` (indices in
/// `urrs`): each whose Dropped DL Traffic Threshold that reaches reports DROTH.
pub(crate) fn dropped_dl(
    urrs: &mut [UrrState],
    which: &[usize],
    octets: u64,
    now: Instant,
    seid: Seid,
    events: &mut VecDeque<DatapathEvent>,
) {
    let fired: Fired = which
        .iter()
        .filter_map(|&i| Some((i, urrs.get_mut(i)?.dropped_dl(octets)?)))
        .collect();
    if !fired.is_empty() {
        report_fired(urrs, &fired, now, seid, events);
    }
}

/// The URRs that fired on one packet or timer round, as (index in the session's URRs,
/// trigger): few, kept inline.
pub(crate) type Fired = SmallVec<[(usize, UsageTrigger); 2]>;

/// Reports the URRs in `fired`, then every URR that lists one of them as a Linked URR and
/// has the LIUSA trigger, with trigger LIUSA (TS 29.244 §5.2.2.4), and so on for the URRs
/// linked to those; each URR reports at most once. Only runs when a report fired; for a
/// session without LIUSA the linked part is one scan of its URRs.
pub(crate) fn report_fired(
    urrs: &mut [UrrState],
    fired: &[(usize, UsageTrigger)],
    now: Instant,
    seid: Seid,
    events: &mut VecDeque<DatapathEvent>,
) {
    let mut reported: SmallVec<[UrrId; 4]> = SmallVec::new();
    for &(i, t) in fired {
        if let Some(u) = urrs.get_mut(i).filter(|u| !u.done()) {
            reported.push(u.id);
            u.reported();
            events.extend(
                u.reports(now, seid, t)
                    .into_iter()
                    .map(DatapathEvent::Usage),
            );
        }
    }
    if urrs.iter().all(|u| u.liusa.is_empty()) {
        return;
    }
    let mut next = 0;
    while let Some(&from) = reported.get(next) {
        next += 1;
        for u in urrs.iter_mut() {
            if u.liusa.contains(&from) && !reported.contains(&u.id) && !u.done() {
                reported.push(u.id);
                u.reported();
                let r = u.reports(now, seid, UsageTrigger::LIUSA);
                events.extend(r.into_iter().map(DatapathEvent::Usage));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urr() -> Urr {
        let mut u = Urr::new(UrrId(1));
        u.triggers = ReportingTriggers::VOLTH.union(ReportingTriggers::VOLQU);
        u.volume_threshold = Some(VolumeLimit {
            total: Some(3000),
            ..Default::default()
        });
        u.volume_quota = Some(VolumeLimit {
            total: Some(5000),
            ..Default::default()
        });
        u
    }

    #[test]
    fn threshold_then_quota() {
        let t0 = Instant::now();
        let mut s = UrrState::new(t0, &urr());
        assert_eq!(s.count(t0, 1000, true), None);
        assert_eq!(s.count(t0, 2000, false), Some(UsageTrigger::VOLTH));
        let r = s.report(t0, Seid(7), UsageTrigger::VOLTH);
        assert_eq!(
            (
                r.volume.total_bytes,
                r.volume.uplink_bytes,
                r.volume.total_packets
            ),
            (3000, 1000, 2)
        );
        assert_eq!(s.count(t0, 1000, true), None);
        assert_eq!(s.count(t0, 1000, true), Some(UsageTrigger::VOLQU));
        assert!(s.exhausted);
        // A new grant counts from now.
        let mut more = urr();
        more.volume_quota = Some(VolumeLimit {
            total: Some(10_000),
            ..Default::default()
        });
        s.update(t0, &more);
        assert!(!s.exhausted);
    }

    #[test]
    fn volume_triggers_report_only_when_asked() {
        let t0 = Instant::now();
        let mut u = urr();
        u.triggers = ReportingTriggers::empty();
        let mut s = UrrState::new(t0, &u);
        // The threshold (3000) passes unreported; the quota (5000) stops traffic unreported.
        assert_eq!(s.count(t0, 4000, true), None);
        assert_eq!(s.budget(), 1000, "only the quota is left to watch");
        assert_eq!(s.count(t0, 1000, true), None);
        assert!(s.exhausted);
    }

    #[test]
    fn quota_holding_time_reports_idleness_once() {
        let t0 = Instant::now();
        let s10 = Duration::from_secs(10);
        let mut u = urr();
        u.triggers = ReportingTriggers::VOLQU | ReportingTriggers::QUHTI;
        u.quota_holding_time_s = Some(10);
        let mut s = UrrState::new(t0, &u);
        assert_eq!(s.deadline(t0), Some(t0 + s10), "from the grant");
        let t1 = t0 + Duration::from_secs(4);
        s.count(t1, 100, true);
        assert_eq!(s.deadline(t1), Some(t1 + s10), "from the last packet");
        assert_eq!(s.due(t1 + Duration::from_secs(9)), None);
        assert_eq!(s.due(t1 + s10), Some(UsageTrigger::QUHTI));
        assert_eq!(s.deadline(t1 + s10), None, "once, until traffic comes back");
        assert_eq!(s.due(t1 + 3 * s10), None);
        let t2 = t1 + 4 * s10;
        s.count(t2, 100, false);
        assert_eq!(s.deadline(t2), Some(t2 + s10));
        // Without QUHTI the holding time has nothing to report.
        u.triggers = ReportingTriggers::VOLQU;
        s.update(t2, &u);
        assert_eq!(s.deadline(t2), None);
    }

    #[test]
    fn quota_validity_time_reports_the_grant_expired_once() {
        let t0 = Instant::now();
        let mut u = urr();
        u.triggers = ReportingTriggers::VOLQU | ReportingTriggers::QUVTI;
        u.extra_mut().quota_validity_time_s = Some(60);
        let mut s = UrrState::new(t0, &u);
        let end = t0 + Duration::from_secs(60);
        assert_eq!(s.deadline(t0), Some(end));
        s.count(t0 + Duration::from_secs(30), 100, true);
        assert_eq!(s.deadline(t0), Some(end), "traffic does not move it");
        assert_eq!(s.due(end), Some(UsageTrigger::QUVTI));
        assert_eq!(s.deadline(end), None);
        // A new grant (another quota) runs a new validity time.
        u.volume_quota = Some(VolumeLimit {
            total: Some(9000),
            ..Default::default()
        });
        s.update(end, &u);
        assert_eq!(s.deadline(end), Some(end + Duration::from_secs(60)));
    }

    #[test]
    fn periodic() {
        let t0 = Instant::now();
        let mut u = Urr::new(UrrId(2));
        u.triggers = ReportingTriggers::PERIO;
        u.measurement_period_s = Some(10);
        let mut s = UrrState::new(t0, &u);
        assert_eq!(s.deadline(t0), Some(t0 + Duration::from_secs(10)));
        assert_eq!(s.due(t0 + Duration::from_secs(9)), None);
        let t = t0 + Duration::from_secs(10);
        assert_eq!(s.due(t), Some(UsageTrigger::PERIO));
        s.report(t, Seid(1), UsageTrigger::PERIO);
        assert_eq!(s.deadline(t), Some(t + Duration::from_secs(10)));
    }
}
