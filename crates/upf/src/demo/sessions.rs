//! The sessions: established through the SMF emulator, deleted with their final usage.

use super::summary::thousands;
use super::{Args, Demo, DL_TEID_BASE, GNB, SMF, UE_NS, UPF_N4};
use anyhow::{bail, Context};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};
use upf_loadgen::smf::{ue_pool, Qos, SessionSpec, Smf, SmfConfig, UeAddr, Usage};
use upf_netns::in_netns;

impl Demo {
    pub(super) fn establish(&mut self, a: &Args, stop: &AtomicBool) -> anyhow::Result<()> {
        let smf = in_netns(UE_NS, || {
            let mut c = SmfConfig::new(SocketAddr::from((UPF_N4, 8805)));
            c.bind = SocketAddr::from((SMF, 0));
            c.t1 = Duration::from_millis(1000);
            c.n1 = 3;
            c.window = 64;
            Smf::new(c)
        })?
        .context("SMF emulator")?;
        let smf = self.smf.insert(smf);
        let assoc = smf.associate().context("PFCP association")?;
        let ues = ue_pool(Ipv4Addr::new(10, 60, 0, 0), 16, 0, a.sessions)?;
        let specs: Vec<SessionSpec> = ues
            .into_iter()
            .zip(0u32..)
            .map(|(ue, i)| {
                let mut s = SessionSpec::new(UeAddr::Static(ue), DL_TEID_BASE + i, GNB);
                s.qos = Some(Qos {
                    mbr_kbps: Some((a.mbr_kbps, a.mbr_kbps)),
                    ..Qos::default()
                });
                s
            })
            .collect();
        let start = Instant::now();
        for chunk in specs.chunks(250) {
            for r in smf.establish_many(chunk) {
                match r {
                    Ok(s) => self.sessions.push(s),
                    Err(e) => {
                        bail!("session {}: {e}", self.sessions.len() + 1);
                    }
                }
            }
            if stop.load(Relaxed) {
                bail!("interrupted");
            }
        }
        self.established = self.sessions.len();
        let t = start.elapsed().as_secs_f64();
        say!(
            "upf demo: associated with the UPF ({}), {} sessions established in {t:.2} s \
             ({:.0}/s), each: UL + DL PDR and FAR, QER (MBR {} kbit/s each way), URR",
            assoc.upf_node,
            thousands(self.sessions.len() as u64),
            self.sessions.len() as f64 / t.max(1e-6),
            thousands(a.mbr_kbps)
        );
        Ok(())
    }

    /// Deletes the sessions (their URRs' final usage comes back) and releases the association.
    pub(super) fn delete_sessions(&mut self) -> Option<Usage> {
        let mut smf = self.smf.take()?;
        let sessions = std::mem::take(&mut self.sessions);
        let alive = self.check_daemon().is_ok() && self.daemon.is_some();
        if !alive {
            return None;
        }
        let start = Instant::now();
        let mut usage = Usage::default();
        let mut failed = Vec::new();
        for r in smf.delete_many(&sessions) {
            match r {
                Ok(u) => {
                    usage.reports += u.reports;
                    usage.total_octets += u.total_octets;
                    usage.uplink_octets += u.uplink_octets;
                    usage.downlink_octets += u.downlink_octets;
                    usage.uplink_packets += u.uplink_packets;
                    usage.downlink_packets += u.downlink_packets;
                }
                Err(e) => failed.push(e),
            }
        }
        let released = smf.release();
        say!(
            "upf demo: {} sessions deleted in {:.2} s{}; association {}",
            thousands((sessions.len() - failed.len()) as u64),
            start.elapsed().as_secs_f64(),
            failed
                .first()
                .map(|e| format!(" ({} failed, the first: {e})", failed.len()))
                .unwrap_or_default(),
            match released {
                Ok(()) => "released".to_string(),
                Err(e) => format!("release failed: {e}"),
            }
        );
        Some(usage)
    }
}
