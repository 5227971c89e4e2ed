//! Prometheus metrics for a fleet (`guardd --metrics-listen ADDR`, off by default): what guardd
//! decided, what calls did outside their approval, how long launches took, and what guardd holds
//! now, in the exposition format of the Prometheus org's `prometheus-client`, served over plain
//! HTTP at `/metrics`. Counts come from the event bus, so the metrics cost the calls nothing but
//! the events they already publish; a burst the bus drops for this reader is counted
//! (`guard_metrics_events_missed`), never waited for. With the OTLP export on (`crate::export`),
//! its records sent and dropped are counted too.

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
    sync::broadcast::error::RecvError,
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

    /// Counts what one event says.
    pub fn observe(&self, event: &Event) {
        let tool = || event.tool.clone().unwrap_or_default();
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
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(event) => metrics.observe(&event),
                    Err(RecvError::Lagged(n)) => {
                        metrics.missed.inc_by(n);
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
    }
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (daemon, metrics) = (Arc::clone(&daemon), Arc::clone(&metrics));
        tokio::spawn(async move {
            if let Err(e) = answer(stream, &daemon, &metrics).await {
                tracing::debug!("metrics request: {e}");
            }
        });
    }
}

/// One HTTP request: `GET /metrics` gets the metrics, anything else 404; the connection closes.
async fn answer(mut stream: TcpStream, daemon: &Daemon, metrics: &Metrics) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    // The request line and headers, within 5 s and 8 KiB: a scraper sends no body.
    let read = tokio::time::timeout(Duration::from_secs(5), async {
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
            ("200 OK", metrics.render(daemon))
        } else {
            (
                "404 Not Found",
                "not found: guardd serves /metrics\n".to_owned(),
            )
        };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/openmetrics-text; version=1.0.0; \
         charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}
