//! An etcd server for the tests and benchmarks of the cluster store (#29): Debian's
//! `etcd-server`, one member, its data in a directory of its own, stopped and deleted when
//! the value is dropped.

use crate::Netns;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A running etcd.
#[derive(Debug)]
pub struct Etcd {
    child: Option<Child>,
    /// The command line (`ip netns exec NS etcd ...`), for a restart.
    args: Vec<String>,
    ns: Option<String>,
    dir: PathBuf,
    /// Where clients reach it.
    pub client: SocketAddr,
}

impl Etcd {
    /// Starts etcd listening on `ip:client_port` (peer port `client_port + 1`), inside `ns`
    /// if given, and waits until it answers as healthy (at most 10 s).
    pub fn start(ns: Option<&Netns>, ip: IpAddr, client_port: u16) -> io::Result<Etcd> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "upf-etcd-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let client = SocketAddr::new(ip, client_port);
        let peer = SocketAddr::new(ip, client_port + 1);
        let url = |a: SocketAddr| format!("http://{a}");
        let mut args: Vec<String> = Vec::new();
        if let Some(ns) = ns {
            args.extend(["ip", "netns", "exec", ns.name()].map(String::from));
        }
        args.push("etcd".into());
        args.extend([
            "--name".into(),
            "upf-test".into(),
            "--data-dir".into(),
            dir.display().to_string(),
            "--listen-client-urls".into(),
            url(client),
            "--advertise-client-urls".into(),
            url(client),
            "--listen-peer-urls".into(),
            url(peer),
            "--initial-advertise-peer-urls".into(),
            url(peer),
            "--initial-cluster".into(),
            format!("upf-test={}", url(peer)),
            "--log-level".into(),
            "error".into(),
        ]);
        let mut e = Etcd {
            child: None,
            args,
            ns: ns.map(|n| n.name().to_string()),
            dir,
            client,
        };
        e.restart()?;
        Ok(e)
    }

    /// Starts it again after [`Etcd::kill`], with the data it had, and waits until it
    /// answers as healthy (at most 10 s).
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        let child = Command::new(&self.args[0])
            .args(&self.args[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("starting etcd (scripts/setup.sh installs etcd-server): {e}"),
                )
            })?;
        self.child = Some(child);
        let e = self;
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if e.healthy() {
                return Ok(());
            }
            if let Some(c) = e.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(io::Error::other(format!("etcd exited: {status}")));
                }
            }
            if Instant::now() > until {
                return Err(io::Error::other("etcd did not become healthy in 10 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// [`Etcd::start`] on 127.0.0.1, on two free ports in a row (client, peer).
    pub fn on_loopback() -> io::Result<Etcd> {
        let lo = std::net::Ipv4Addr::LOCALHOST;
        let port = loop {
            let p = std::net::TcpListener::bind((lo, 0))?.local_addr()?.port();
            if p < u16::MAX && std::net::TcpListener::bind((lo, p + 1)).is_ok() {
                break p;
            }
        };
        Etcd::start(None, IpAddr::V4(lo), port)
    }

    /// `http://IP:PORT`, for clients.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.client)
    }

    /// Whether it answers `/health` with `"health":"true"` (from inside its namespace).
    fn healthy(&self) -> bool {
        let client = self.client;
        let ask = move || -> io::Result<String> {
            let mut s = TcpStream::connect_timeout(&client, Duration::from_millis(200))?;
            s.set_read_timeout(Some(Duration::from_millis(500)))?;
            s.write_all(b"GET /health HTTP/1.0\r\n\r\n")?;
            let mut out = String::new();
            s.read_to_string(&mut out)?;
            Ok(out)
        };
        let out = match &self.ns {
            Some(ns) => crate::in_netns(ns, ask).and_then(|r| r),
            None => ask(),
        };
        out.is_ok_and(|o| o.contains("\"health\":\"true\""))
    }

    /// Kills it (SIGKILL) and waits for it: what an etcd that went away looks like.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
