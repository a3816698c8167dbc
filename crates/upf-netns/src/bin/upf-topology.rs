//! `upf-topology up|down|status [OPTIONS]`: the end-to-end tests' three namespaces
//! (upf_netns::topology) by hand, for trying `upf run` with upf-loadgen, ping or iperf3.
//!
//! ```text
//! upf-topology up --tun uetun --forward        # PREFIX-ue, PREFIX-upf, PREFIX-dn (PREFIX: e2e)
//! ip netns exec e2e-upf target/release/upf run --config my.toml
//! ip netns exec e2e-ue target/release/upf-loadgen gnb --n4 192.168.4.1 --local 192.168.3.2 \
//!     --tun uetun --sessions 4 --ue-pool 10.60.0.0/16 &
//! ip netns exec e2e-ue ping -c 3 -I 10.60.0.1 192.168.6.2
//! upf-topology down
//! ```
//!
//! Options: `--prefix P` (e2e), `--tun NAME` (a UE TUN in PREFIX-ue), `--queues N` (veth
//! queues, 1), `--ue-pool CIDR` (10.60.0.0/16), `--forward` (the kernel forwards in PREFIX-upf:
//! for a UPF whose N6 is a TUN), `--no-n4-link`.

use std::io::Write;
use std::process::ExitCode;
use upf_netns::ip;
use upf_netns::topology::{self, Layout, Topology};

fn parse(args: &[String]) -> Result<(String, Layout), String> {
    let (verb, rest) = args.split_first().ok_or("give up, down or status")?;
    let mut l = Layout::new("e2e");
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--prefix" => l.prefix = value()?,
            "--tun" => l.ue_tun = Some(value()?),
            "--queues" => l.veth_queues = value()?.parse().map_err(|e| format!("--queues: {e}"))?,
            "--ue-pool" => l.ue_pool = value()?,
            "--forward" => l.ip_forward = true,
            "--no-n4-link" => l.n4_link = false,
            _ => return Err(format!("unknown option {a}")),
        }
    }
    Ok((verb.clone(), l))
}

/// Writes to stdout, ignoring a reader that has gone (`upf-topology status | head`).
fn out(s: &str) {
    let _ = std::io::stdout().write_all(s.as_bytes());
}

fn run(verb: &str, l: &Layout) -> Result<(), String> {
    match verb {
        "up" => {
            let t = Topology::up(l).map_err(|e| e.to_string())?;
            let [ue, upf, dn] = l.namespaces();
            out(&format!(
                "up: {ue} (gNB {}, SMF {}{}), {upf} (N3 {}, N4 {}, N6 {}), {dn} (DN {}, {} via the UPF)\n",
                topology::GNB,
                topology::SMF,
                l.ue_tun.as_ref().map_or(String::new(), |t| format!(", TUN {t}")),
                topology::UPF_N3,
                topology::UPF_N4,
                topology::UPF_N6,
                topology::DN,
                l.ue_pool,
            ));
            t.keep();
            Ok(())
        }
        "down" => {
            for ns in topology::existing(l) {
                ip(&["netns", "del", &ns]).map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        "status" => {
            let up = topology::existing(l);
            for ns in l.namespaces() {
                out(&format!("== netns {ns}\n"));
                if up.contains(&ns) {
                    for what in [&["-n", &ns, "-br", "addr"][..], &["-n", &ns, "route"][..]] {
                        out(&ip(what).map_err(|e| e.to_string())?);
                    }
                } else {
                    out("(absent)\n");
                }
            }
            Ok(())
        }
        _ => Err(format!("unknown command {verb}: give up, down or status")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args).and_then(|(verb, l)| run(&verb, &l)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("upf-topology: {e}");
            ExitCode::FAILURE
        }
    }
}
