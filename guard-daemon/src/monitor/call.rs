//! What the kernel holds one call to: its destinations (each host resolved just before launch),
//! the programs it may run and the files it may write, and the resolver that answers its DNS.

use std::{collections::HashMap, net::IpAddr, path::PathBuf};

use guard_common::{
    call::{
        CallConfig, FLAG_ENFORCE_EXEC, FLAG_KILL_ON_DIVERGENCE, FLAG_NET, FLAG_OWN_NET, FLAG_SHADOW,
    },
    net::PROTO_TCP,
};

use super::{Destination, Watch};
use crate::{
    call::plan::{Endpoint, Enforce, LaunchPlan, OnDivergence},
    monitor::dns::Responder,
};

/// Why a call's watch could not be made: it does not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("starting the call's DNS responder: {0}")]
    Dns(std::io::Error),
    #[error("resolving {host}: {reason}")]
    Resolve { host: String, reason: String },
}

/// What the kernel holds a plan's call to, and the resolver that answers the host names it may
/// connect to (none when it names no host).
pub async fn watch_of(plan: &LaunchPlan) -> Result<(Watch, Option<Responder>), WatchError> {
    let effects = &plan.effects;
    let shadow = plan.enforce == Enforce::Shadow;
    let (destinations, names) = resolve(&effects.connect).await?;
    // A call in shadow has a resolver whatever it names: the names it asks are what it is
    // watched for.
    let responder = if names.is_empty() && !shadow {
        None
    } else {
        let started = Responder::start(names, shadow).await;
        Some(started.map_err(WatchError::Dns)?)
    };
    let mut flags = FLAG_ENFORCE_EXEC;
    if shadow {
        flags |= FLAG_SHADOW;
    } else if effects.on_divergence == OnDivergence::Kill {
        flags |= FLAG_KILL_ON_DIVERGENCE;
    }
    if !effects.connect.is_empty() {
        // Only a call that connects may create inet sockets at all...
        flags |= FLAG_NET;
    }
    if plan.own_network() {
        // ...or one cloned into a network namespace of its own, where they reach itself only.
        flags |= FLAG_OWN_NET;
    }
    let execs = plan
        .argv
        .first()
        .map(PathBuf::from)
        .into_iter()
        .chain(effects.exec.iter().cloned())
        .collect();
    let watch = Watch {
        config: CallConfig {
            flags,
            dns_port: responder.as_ref().map_or(0, Responder::port),
            ..CallConfig::default()
        },
        destinations,
        execs,
        writes: effects.write.clone(),
        traced: shadow,
    };
    Ok((watch, responder))
}

/// The kernel's allow-list for a call's connect effects: each host resolved now, just before
/// launch, so the call reaches exactly the addresses guardd saw; and the names resolved, which
/// the call's DNS responder answers (see `dns`). No nameserver is a destination of the call.
async fn resolve(
    endpoints: &[Endpoint],
) -> Result<(Vec<Destination>, HashMap<String, Vec<IpAddr>>), WatchError> {
    let mut dests = Vec::new();
    let mut names: HashMap<String, Vec<IpAddr>> = HashMap::new();
    // What the policy names by address or network, by port.
    let literal = |port: u16| -> Vec<(IpAddr, u8)> {
        endpoints
            .iter()
            .filter(|e| e.port == port)
            .filter_map(|e| match crate::policy::addr::parse_network(&e.host) {
                Some(net) => net.ok(),
                None => e
                    .host
                    .parse()
                    .ok()
                    .map(|ip: IpAddr| (ip, crate::policy::addr::full(ip))),
            })
            .collect()
    };
    for ep in endpoints {
        let destination = |addr: IpAddr, prefix: Option<u8>| Destination {
            addr,
            port: ep.port,
            proto: PROTO_TCP,
            prefix,
        };
        if let Some(net) = crate::policy::addr::parse_network(&ep.host) {
            let (addr, len) = net.map_err(|reason| WatchError::Resolve {
                host: ep.host.clone(),
                reason,
            })?;
            dests.push(destination(addr, Some(len)));
            continue;
        }
        let addrs: Vec<IpAddr> = match ep.host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => {
                let addrs = answers(ep, &literal(ep.port)).await?;
                let known = names.entry(ep.host.clone()).or_default();
                known.extend(addrs.iter().copied());
                addrs
            }
        };
        dests.extend(addrs.into_iter().map(|addr| destination(addr, None)));
    }
    dests.sort_by_key(|d| (d.addr, d.port, d.proto, d.prefix));
    dests.dedup();
    Ok((dests, names))
}

/// The addresses `ep`'s host name stands for now, but for those of the host or its network
/// that the call names neither by address nor by network (`literal`): a name answering there is
/// DNS rebinding.
async fn answers(ep: &Endpoint, literal: &[(IpAddr, u8)]) -> Result<Vec<IpAddr>, WatchError> {
    let failed = |reason: String| WatchError::Resolve {
        host: ep.host.clone(),
        reason,
    };
    let found: Vec<IpAddr> = tokio::net::lookup_host((ep.host.as_str(), ep.port))
        .await
        .map_err(|e| failed(e.to_string()))?
        .map(|sa| sa.ip())
        .collect();
    let addrs: Vec<IpAddr> = found
        .iter()
        .copied()
        .filter(|&ip| crate::policy::addr::answer_allowed(&ep.host, ip, literal))
        .collect();
    if addrs.is_empty() {
        return Err(failed(format!(
            "it answers with the host's own or its network's addresses ({found:?}), which a \
             name may not stand for (DNS rebinding): name the address or its network in the \
             tool's connect to reach it"
        )));
    }
    Ok(addrs)
}
