//! Prometheus metrics for a fleet (`guardd --metrics-listen ADDR`, off by default): what guardd
//! decided, what calls did outside their approval, how long launches took, and what guardd holds
//! now, in the exposition format of the Prometheus org's `prometheus-client`, served over plain
//! HTTP at `/metrics`. Counts come from the event bus, so the metrics cost the calls nothing but
//! the events they already publish; a burst the bus drops for this reader is counted
//! (`guard_metrics_events_missed`), never waited for. With the OTLP export on (`crate::export`),
//! its records sent and dropped are counted too.
//!
//! What a scrape costs is bounded whatever callers and scrapers do: labels come from the
//! policy's own names (a tool it does not name is [`UNREGISTERED`]), so the text grows with the
//! policy, not with the calls; at most [`SCRAPES`] are answered at once, and a scraper that
//! sends no request, or reads no answer, within its deadline is dropped.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    sync::{Semaphore, broadcast::error::RecvError},
};

use crate::{
    bus::{Event, What},
    call::decision::Decision,
    daemon::Daemon,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    decision: String,
    agent: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DivergenceLabels {
    tool: String,
    effect: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    sha256: String,
}

/// Calls allowed and not yet launched, by id: when each was allowed.
type Allowed = HashMap<String, Instant>;

/// At most this many allowed calls are remembered while they wait for their launch: a call held
/// for a human may never launch.
const MAX_ALLOWED: usize = 10_000;

/// The `tool` label of the calls of every tool the policy does not name.
pub const UNREGISTERED: &str = "(unregistered)";

/// Scrapes answered at once; a connection past them gets a 503 at once and is closed.
const SCRAPES: usize = 4;

/// How long a scraper may take to send its request, and then to read the answer: one that
/// does not is dropped.
const READ_DEADLINE: Duration = Duration::from_secs(5);
const WRITE_DEADLINE: Duration = Duration::from_secs(10);

/// guardd's metrics, kept up to date from the bus and at each scrape.
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    divergences: Family<DivergenceLabels, Counter>,
    launch: Histogram,
    running: Gauge,
    events_lost: Counter,
    missed: Counter,
    audit_bytes: Gauge,
    policy: Family<PolicyLabels, Gauge>,
    /// The OTLP export's records sent and dropped; registered only when it is on.
    export: [Counter; 2],
    allowed: Mutex<Allowed>,
}

impl Default for Metrics {
    fn default() -> Self {
        let calls = Family::<CallLabels, Counter>::default();
        let divergences = Family::<DivergenceLabels, Counter>::default();
        // From 100 µs to about 6.5 s.
        let launch = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
            0.0001, 2.0, 17,
        ));
        let (running, events_lost, missed) =
            (Gauge::default(), Counter::default(), Counter::default());
        let (audit_bytes, policy) = (Gauge::default(), Family::<PolicyLabels, Gauge>::default());
        let mut registry = Registry::default();
        let help = [
            "Calls decided, by tool, decision and agent",
            "Effects calls had or attempted outside their approval, by tool and effect",
            "From a call's allow to its first process running",
            "Calls running now",
            "Kernel events the ring buffer had no room for",
            "Events the metrics missed (the bus dropped them for this reader)",
            "Size of the active audit log file",
            "The policy in force (its SHA-256)",
        ];
        registry.register("guard_calls", help[0], calls.clone());
        registry.register("guard_divergences", help[1], divergences.clone());
        registry.register("guard_launch_seconds", help[2], launch.clone());
        registry.register("guard_calls_running", help[3], running.clone());
        registry.register("guard_events_lost", help[4], events_lost.clone());
        registry.register("guard_metrics_events_missed", help[5], missed.clone());
        registry.register("guard_audit_bytes", help[6], audit_bytes.clone());
        registry.register("guard_policy_info", help[7], policy.clone());
        Self {
            registry,
            calls,
            divergences,
            launch,
            running,
            events_lost,
            missed,
            audit_bytes,
            policy,
            export: Default::default(),
            allowed: Mutex::new(HashMap::new()),
        }
    }
}

impl Metrics {
    /// With the OTLP export's counts: a host without them does not export.
    fn with_export(mut self) -> Self {
        let help = [
            "Records the OTLP collector accepted",
            "Records the OTLP export dropped (queue full, retries run out, refused)",
        ];
        let [sent, dropped] = &self.export;
        let (sent, dropped) = (sent.clone(), dropped.clone());
        self.registry.register("guard_export_sent", help[0], sent);
        self.registry
            .register("guard_export_dropped", help[1], dropped);
        self
    }

    /// Counts what one event says. A tool is labelled by its name only when `known` says the
    /// policy names it: a caller may name any tool, and each label kept is a series every
    /// scrape sends for good, so every call of a tool the policy does not know is counted
    /// under one label, [`UNREGISTERED`].
    pub fn observe(&self, event: &Event, known: impl Fn(&str) -> bool) {
        let tool = || match event.tool.as_deref() {
            Some(t) if known(t) => t.to_owned(),
            Some(_) => UNREGISTERED.to_owned(),
            None => String::new(),
        };
        match &event.what {
            What::Decision {
                decision, agent, ..
            } => {
                let labels = CallLabels {
                    tool: tool(),
                    decision: decision.to_string(),
                    agent: agent.clone().unwrap_or_default(),
                };
                self.calls.get_or_create(&labels).inc();
                if let (Decision::Allow, Some(id)) = (decision, &event.call_id) {
                    let mut allowed = self.allowed();
                    if allowed.len() >= MAX_ALLOWED {
                        allowed.retain(|_, t| t.elapsed() < Duration::from_secs(600));
                    }
                    allowed.insert(id.clone(), Instant::now());
                }
            }
            What::Launch { .. } => {
                let started = event
                    .call_id
                    .as_ref()
                    .and_then(|id| self.allowed().remove(id));
                if let Some(t) = started {
                    self.launch.observe(t.elapsed().as_secs_f64());
                }
            }
            What::Divergence(d) => {
                let effect = serde_json::to_value(&d.effect)
                    .ok()
                    .and_then(|v| v["effect"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                let labels = DivergenceLabels {
                    tool: tool(),
                    effect,
                };
                self.divergences.get_or_create(&labels).inc();
            }
            What::Exit { .. } => {
                // A call that ended without a launch event (it failed to start) is forgotten.
                if let Some(id) = &event.call_id {
                    self.allowed().remove(id);
                }
            }
            _ => {}
        }
    }

    /// The exposition text, with what guardd holds now.
    pub fn render(&self, daemon: &Daemon) -> String {
        self.running
            .set(i64::try_from(daemon.calls.running().len()).unwrap_or(i64::MAX));
        let lost = daemon.dropped_events();
        let counted = self.events_lost.get();
        if lost > counted {
            self.events_lost.inc_by(lost - counted);
        }
        if let Some(export) = daemon.export.get() {
            for (counter, now) in self.export.iter().zip([export.sent(), export.dropped()]) {
                counter.inc_by(now.saturating_sub(counter.get()));
            }
        }
        let bytes = std::fs::metadata(&daemon.options.audit).map_or(0, |m| m.len());
        self.audit_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        let sha256 = daemon
            .policy()
            .version()
            .trim_start_matches("sha256:")
            .to_owned();
        self.policy.clear();
        self.policy.get_or_create(&PolicyLabels { sha256 }).set(1);
        let mut text = String::new();
        if let Err(e) = encode(&mut text, &self.registry) {
            tracing::warn!("encoding the metrics: {e}");
        }
        text
    }

    fn allowed(&self) -> MutexGuard<'_, Allowed> {
        // Entries are inserted and removed whole.
        self.allowed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Serves `/metrics` on `listener` until guardd ends, and counts the bus's events meanwhile.
pub async fn serve(daemon: Arc<Daemon>, listener: TcpListener) {
    let metrics = Metrics::default();
    let metrics = Arc::new(match daemon.export.get() {
        Some(_) => metrics.with_export(),
        None => metrics,
    });
    let mut rx = daemon.bus.subscribe();
    {
        let (daemon, metrics) = (Arc::clone(&daemon), Arc::clone(&metrics));
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(event) => {
                        let policy = daemon.policy();
                        metrics.observe(&event, |t| policy.tool_info(t).is_some());
                    }
                    Err(RecvError::Lagged(n)) => {
                        metrics.missed.inc_by(n);
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
    }
    let scrapes = Arc::new(Semaphore::new(SCRAPES));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = Arc::clone(&scrapes).try_acquire_owned() else {
            // Without waiting: a socket just accepted has room for these few bytes.
            let _ = stream.try_write(BUSY);
            continue;
        };
        let (daemon, metrics) = (Arc::clone(&daemon), Arc::clone(&metrics));
        tokio::spawn(async move {
            let render = || metrics.render(&daemon);
            if let Err(e) = answer(stream, render, WRITE_DEADLINE).await {
                tracing::debug!("metrics request: {e}");
            }
            drop(permit);
        });
    }
}

/// The answer to a connection past [`SCRAPES`].
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n\
                      Connection: close\r\n\r\n";

/// One HTTP request: `GET /metrics` gets what `render` makes, anything else 404; the connection
/// closes. The request must come within [`READ_DEADLINE`] and the answer be read within
/// `write_deadline`, or the connection is dropped with what it holds.
async fn answer(
    mut stream: TcpStream,
    render: impl FnOnce() -> String,
    write_deadline: Duration,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    // The request line and headers, within 8 KiB: a scraper sends no body.
    let read = tokio::time::timeout(READ_DEADLINE, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(())
    });
    if read.await.is_err() {
        return Ok(());
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let path = line.split(|&b| b == b' ').nth(1).unwrap_or_default();
    let (status, body) =
        if line.starts_with(b"GET ") && (path == b"/metrics" || path.starts_with(b"/metrics?")) {
            ("200 OK", render())
        } else {
            (
                "404 Not Found",
                "not found: guardd serves /metrics\n".to_owned(),
            )
        };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/openmetrics-text; version=1.0.0; \
         charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(write_deadline, write).await {
        Ok(written) => written,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the scraper read no answer for {} s: dropped",
                write_deadline.as_secs()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd as _;

    use super::*;

    fn decided(tool: &str) -> Event {
        let what = What::Decision {
            decision: Decision::Block,
            reason: String::new(),
            uid: 1000,
            agent: None,
            would_block: None,
        };
        Event::of(None, Some(tool), what)
    }

    #[test]
    fn tools_the_policy_does_not_name_share_one_label() {
        let m = Metrics::default();
        let known = |t: &str| t == "read_file";
        m.observe(&decided("read_file"), known);
        for i in 0..1000 {
            m.observe(&decided(&format!("{i}{}", "x".repeat(256))), known);
        }
        let mut text = String::new();
        encode(&mut text, &m.registry).expect("encode");
        let calls: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("guard_calls_total{"))
            .collect();
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert!(
            calls
                .iter()
                .any(|l| l.contains("tool=\"(unregistered)\"") && l.ends_with(" 1000")),
            "{calls:?}"
        );
        assert!(text.len() < 4096, "{} bytes", text.len());
    }

    #[tokio::test]
    async fn a_scraper_that_does_not_read_is_dropped_at_the_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = std::net::TcpStream::connect(addr).expect("connect");
        // The least receive buffer: the answer waits in guardd's send buffer, not the client's.
        let one: libc::c_int = 1;
        // SAFETY: an int option of a socket of this test, its size passed.
        unsafe {
            libc::setsockopt(
                client.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&raw const one).cast(),
                std::mem::size_of_val(&one) as libc::socklen_t,
            )
        };
        std::io::Write::write_all(&mut &client, b"GET /metrics HTTP/1.1\r\n\r\n").expect("send");
        let (stream, _) = listener.accept().await.expect("accept");
        let started = std::time::Instant::now();
        let body = || "x".repeat(32 << 20);
        let e = answer(stream, body, Duration::from_millis(500))
            .await
            .expect_err("a scraper that reads nothing");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(client);
    }
}
