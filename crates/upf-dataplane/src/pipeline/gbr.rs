//! Which packets are a GBR QoS flow's, asked before they are processed: priority processing
//! (issue #28) serves them ahead of non-GBR traffic of their class.

use super::Pipeline;
use crate::fast::gpdu_v4;
use crate::parse::flow_of;
use crate::session::Compiled;
use upf_packet::{Packet, Port};
use upf_wire::encap::decapsulate;
use upf_wire::gtpu::MessageType;

impl Pipeline {
    /// Whether some session has a GBR QER.
    pub fn has_gbr(&self) -> bool {
        self.gbr_sessions > 0
    }

    /// Whether `p` belongs to a QoS flow with a Guaranteed Bit Rate: the PDR that processing
    /// would match it with (a G-PDU on N3/N9 by its TEID and QFI, an N6 packet by its UE
    /// address and network instance) has a GBR QER. A lookup and a classification, the same
    /// as processing's; nothing while no session has a GBR ([`Pipeline::has_gbr`]). What
    /// processing would drop is not one.
    pub fn gbr_flow(&self, p: &Packet) -> bool {
        if self.gbr_sessions == 0 {
            return false;
        }
        let d = p.data();
        match p.port() {
            Port::N6 => {
                let Some(flow) = flow_of(d) else {
                    return false;
                };
                let Some(s) = (self.ue.lookup(p.instance(), flow.dst))
                    .and_then(|slot| self.slots.get(slot as usize)?.as_ref())
                else {
                    return false;
                };
                Compiled::classify(&s.ip_pdrs, None, None, Some(p.instance()), &flow)
                    .is_some_and(|i| s.ip_pdrs[i].gbr)
            }
            _ => {
                let (teid, qfi, inner) = match gpdu_v4(d) {
                    Some(g) => (g.teid, g.qfi, g.inner),
                    None => match decapsulate(d) {
                        Ok(g) if g.gtpu.msg_type == MessageType::GPdu => {
                            (g.gtpu.teid, g.gtpu.ext.psc.map(|c| c.qfi), g.inner)
                        }
                        _ => return false,
                    },
                };
                let Some(s) =
                    (self.teids.get(teid)).and_then(|slot| self.slots.get(slot as usize)?.as_ref())
                else {
                    return false;
                };
                let Some(flow) = d.get(inner).and_then(flow_of) else {
                    return false;
                };
                Compiled::classify(&s.gtp_pdrs, Some(teid), qfi, None, &flow)
                    .is_some_and(|i| s.gtp_pdrs[i].gbr)
            }
        }
    }
}
