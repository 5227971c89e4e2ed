//! The DNS a call gets: answers for the host names of its approved connects, nothing else.
//!
//! A call that connects to a host by name needs to resolve it, and a resolver that forwards any
//! name is a channel out (`<data>.attacker.example`). So guardd resolves the call's names itself
//! before launch (pinning the addresses the kernel allows), runs a [`Responder`] on a loopback
//! UDP port for the call, and the `connect4`/`sendmsg4` programs send every DNS query of the call
//! (UDP to port 53, whatever the server) there; `recvmsg4` makes the answer look as if it came
//! from the server the call asked. The responder answers A and AAAA for the approved names with
//! the pinned addresses and refuses every other name; the receipt lists every name asked, and
//! one outside the approved names is a divergence. Nothing the call asks leaves the host.
//!
//! The wire format is in [`wire`].

use std::{
    collections::HashMap,
    io,
    net::{IpAddr, Ipv4Addr},
    sync::{Arc, Mutex},
};

use serde::Serialize;
use tokio::{net::UdpSocket, task::JoinHandle};

#[cfg(test)]
mod tests;
mod wire;

/// Names kept per receipt.
const LISTED: usize = 64;

/// One question a call asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Asked {
    /// Lowercase, without the trailing dot.
    pub name: String,
    /// "A", "AAAA", or the type's number.
    #[serde(rename = "type")]
    pub qtype: String,
    /// Whether the name is one of the call's approved hosts (answered), or was refused.
    pub approved: bool,
}

/// A call's resolver: a task answering on a loopback UDP port until it is finished.
pub struct Responder {
    port: u16,
    asked: Arc<Mutex<Vec<Asked>>>,
    task: JoinHandle<()>,
}

impl Responder {
    /// Starts answering `names` (host name -> its pinned addresses) on 127.0.0.1.
    pub async fn start(names: HashMap<String, Vec<IpAddr>>) -> io::Result<Self> {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = socket.local_addr()?.port();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let names: HashMap<String, Vec<IpAddr>> =
            names.into_iter().map(|(k, v)| (normalize(&k), v)).collect();
        let log = asked.clone();
        let task = tokio::spawn(async move {
            let mut buf = [0u8; 512];
            loop {
                let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
                    continue;
                };
                let Some((reply, question)) = wire::answer(&buf[..n], &names) else {
                    continue;
                };
                if let Some(q) = question {
                    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                    if log.len() < LISTED && !log.contains(&q) {
                        log.push(q);
                    }
                }
                let _ = socket.send_to(&reply, peer).await;
            }
        });
        Ok(Self { port, asked, task })
    }

    /// The port the kernel sends the call's queries to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops answering and hands back what was asked.
    pub fn finish(self) -> Vec<Asked> {
        self.task.abort();
        let asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        asked.clone()
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}
