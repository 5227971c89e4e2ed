//! The sender: takes what waits in the queue, a batch at a time, and POSTs it to the collector
//! over HTTP/1.1 (one connection per batch, closed after the answer: a batch goes at most every
//! [`LINGER`] while calls are few, and a connect on the management network costs less than
//! keeping one open that a collector's restart breaks). A batch that fails is tried again after
//! 100 ms, 200 ms, ... up to [`ATTEMPTS`] times, then dropped and counted; meanwhile the queue
//! fills and, full, drops what comes (counted too). The answers OTLP/HTTP says to retry (429,
//! 502, 503, 504, a connection that fails) are retried, with the collector's `Retry-After`
//! where it gives one; any other is final.

use std::{
    io,
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use opentelemetry_proto::tonic::{
    collector::logs::v1::ExportLogsServiceResponse, resource::v1::Resource,
};
use prost::Message as _;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    sync::mpsc,
};

use super::{Counters, Endpoint, Item, record::Batch};

/// Most records in one request.
const MAX_RECORDS: usize = 512;
/// Most bytes of records' bodies in one request (a collector refuses bodies past some MiB).
const MAX_BYTES: usize = 4 << 20;
/// How long a batch waits for more records after its first: a call makes a few rows and events
/// over its life, and one request for all of them costs the host less than one for each.
pub(super) const LINGER: Duration = Duration::from_millis(200);
/// Tries of one batch before it is dropped.
const ATTEMPTS: u32 = 5;
/// The wait before the first retry; each next one doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// One try: connect, send, and the answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an answer read (a collector's answer is a few bytes of protobuf).
const MAX_ANSWER: usize = 64 << 10;
/// A failing export warns at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// guardd's version, in the `User-Agent`.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Sends what `rx` brings until every sender of it is gone.
pub(super) async fn run(
    mut rx: mpsc::Receiver<Item>,
    endpoint: Endpoint,
    resource: Resource,
    counters: Arc<Counters>,
) {
    let mut log = Failures::default();
    let take = |batch: &mut Batch, item: Item| {
        counters.queued.fetch_sub(item.bytes(), Ordering::Relaxed);
        batch.add(item);
    };
    while let Some(first) = rx.recv().await {
        let mut batch = Batch::default();
        take(&mut batch, first);
        let until = tokio::time::Instant::now() + LINGER;
        while batch.len() < MAX_RECORDS && batch.bytes() < MAX_BYTES {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(item)) => take(&mut batch, item),
                Ok(None) | Err(_) => break,
            }
        }
        let n = batch.len() as u64;
        let body = batch.encode(&resource);
        let (sent, dropped) = match deliver(&endpoint, &body, &counters, &mut log).await {
            Some(rejected) => (n.saturating_sub(rejected), rejected.min(n)),
            None => (0, n),
        };
        counters.sent.fetch_add(sent, Ordering::Relaxed);
        counters.dropped.fetch_add(dropped, Ordering::Relaxed);
    }
}

/// Sends `body`, retrying as OTLP/HTTP says; the records the collector rejected once it took
/// the request, or `None` when it never did.
async fn deliver(
    endpoint: &Endpoint,
    body: &[u8],
    counters: &Counters,
    log: &mut Failures,
) -> Option<u64> {
    let mut backoff = FIRST_BACKOFF;
    for attempt in 1..=ATTEMPTS {
        let answer = tokio::time::timeout(ATTEMPT_TIMEOUT, post(endpoint, body))
            .await
            .unwrap_or_else(|_| Err(io::Error::other("no answer within 10 s")));
        let (why, after) = match answer {
            Ok(a) if (200..300).contains(&a.status) => {
                log.delivered(endpoint);
                let rejected = rejected(&a.body);
                if let Some((n, message)) = &rejected {
                    log.failed(endpoint, &format!("it rejected {n} records: {message}"));
                }
                return Some(rejected.map_or(0, |(n, _)| n));
            }
            Ok(a) if matches!(a.status, 429 | 502 | 503 | 504) => {
                (format!("it answered {}", a.status), a.retry_after)
            }
            Ok(a) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                log.failed(endpoint, &format!("it answered {}; not retried", a.status));
                return None;
            }
            Err(e) => (e.to_string(), None),
        };
        counters.failed.fetch_add(1, Ordering::Relaxed);
        log.failed(endpoint, &why);
        if attempt < ATTEMPTS {
            tokio::time::sleep(after.map_or(backoff, |a| a.min(MAX_RETRY_AFTER))).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
    None
}

/// The records a collector's answer says it rejected, and why; `None` when it took them all
/// (or its answer does not say).
fn rejected(body: &[u8]) -> Option<(u64, String)> {
    let partial = ExportLogsServiceResponse::decode(body)
        .ok()?
        .partial_success?;
    let n = u64::try_from(partial.rejected_log_records).ok()?;
    (n > 0).then_some((n, partial.error_message))
}

/// What matters of an HTTP answer.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    retry_after: Option<Duration>,
    body: Vec<u8>,
}

/// One POST of `body`, on a connection of its own.
async fn post(endpoint: &Endpoint, body: &[u8]) -> io::Result<Answer> {
    let mut stream = TcpStream::connect(endpoint.addr()).await?;
    stream.set_nodelay(true)?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: guardd/{VERSION}\r\nContent-Type: \
         application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.path(),
        endpoint.authority(),
        body.len()
    );
    // One write: a collector that answers as soon as it has read the headers sees the body too.
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await?;
        buf.extend_from_slice(&chunk[..n]);
        if let Some(answer) = answer(&buf, n == 0)? {
            return Ok(answer);
        }
        if buf.len() > MAX_ANSWER {
            return Err(io::Error::other("an answer of more than 64 KiB"));
        }
    }
}

/// The answer in `buf` once it is whole (`eof`: the collector closed the connection).
fn answer(buf: &[u8], eof: bool) -> io::Result<Option<Answer>> {
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_owned());
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if eof {
            Err(bad("the connection closed before an HTTP answer"))
        } else {
            Ok(None)
        };
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| bad("an unreadable HTTP answer"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .filter(|l| l.starts_with("HTTP/1."))
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad("no HTTP status line"))?;
    let (mut length, mut chunked, mut retry_after) = (None, false, None);
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse::<usize>().ok(),
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            // Seconds; an HTTP date is not honoured (the backoff's wait is used).
            "retry-after" => retry_after = value.parse::<u64>().ok().map(Duration::from_secs),
            _ => {}
        }
    }
    let rest = &buf[end + 4..];
    let body = match length {
        // A chunked body is not read: only a partial success would be in it.
        _ if chunked => Vec::new(),
        Some(n) if rest.len() >= n => rest[..n].to_vec(),
        Some(_) if eof => return Err(bad("the connection closed within the answer's body")),
        Some(_) => return Ok(None),
        None if eof => rest.to_vec(),
        None => return Ok(None),
    };
    Ok(Some(Answer {
        status,
        retry_after,
        body,
    }))
}

/// The log of a failing export: a warning at most once a [`WARN_EVERY`], and a line when it
/// delivers again after one.
#[derive(Default)]
struct Failures {
    /// When the last warning was logged.
    warned: Option<Instant>,
    /// Failures since then, not logged at warn.
    quiet: u64,
    /// A warning was logged since the export last delivered.
    failing: bool,
}

impl Failures {
    fn failed(&mut self, endpoint: &Endpoint, why: &str) {
        if self.warned.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            self.quiet += 1;
            tracing::debug!(%endpoint, "OTLP export: {why}");
            return;
        }
        tracing::warn!(
            %endpoint,
            "OTLP export: {why}; what cannot be sent is dropped and counted \
             (guard_export_dropped_total), calls go on ({} more failures since the last warning)",
            self.quiet
        );
        (self.warned, self.quiet, self.failing) = (Some(Instant::now()), 0, true);
    }

    fn delivered(&mut self, endpoint: &Endpoint) {
        if std::mem::take(&mut self.failing) {
            tracing::info!(%endpoint, "OTLP export: the collector takes records again");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsPartialSuccess;
    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn answers_are_read_whole_and_no_further() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab";
        let want = |status, body: &[u8]| Answer {
            status,
            retry_after: None,
            body: body.to_vec(),
        };
        assert_eq!(answer(ok, false).expect("ok"), Some(want(200, b"ab")));
        assert_eq!(answer(&ok[..ok.len() - 1], false).expect("part"), None);
        assert!(answer(&ok[..ok.len() - 1], true).is_err());
        let close = b"HTTP/1.0 503 Busy\r\nretry-after: 3\r\n\r\nxyz";
        assert_eq!(answer(close, false).expect("open"), None);
        let busy = answer(close, true).expect("closed").expect("whole");
        assert_eq!(busy.retry_after, Some(Duration::from_secs(3)));
        assert_eq!((busy.status, busy.body), (503, b"xyz".to_vec()));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(answer(chunked, false).expect("ok"), Some(want(200, b"")));
        assert!(answer(b"SSH-2.0\r\n\r\n", false).is_err());
        assert!(answer(b"", true).is_err());
    }

    /// Reads a request to the end of its body.
    async fn read_request(s: &mut tokio::net::TcpStream) {
        let (mut buf, mut chunk) = (Vec::new(), [0u8; 4096]);
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let length = head
                    .split("content-length:")
                    .nth(1)
                    .and_then(|r| r.lines().next())
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + length {
                    return;
                }
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// A collector on loopback giving `answers` in turn (the last one for good), counting the
    /// requests it gets.
    async fn collector(answers: Vec<Vec<u8>>) -> (Endpoint, Arc<std::sync::atomic::AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = Arc::clone(&seen);
        tokio::spawn(async move {
            for i in 0.. {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                read_request(&mut s).await;
                counted.fetch_add(1, Ordering::Relaxed);
                let a = &answers[usize::min(i, answers.len() - 1)];
                let _ = s.write_all(a).await;
            }
        });
        let endpoint = format!("http://127.0.0.1:{port}")
            .parse()
            .expect("endpoint");
        (endpoint, seen)
    }

    #[tokio::test]
    async fn a_busy_collector_is_tried_again_and_a_dead_one_given_up_counted() {
        let busy = b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n".to_vec();
        let partial = ExportLogsServiceResponse {
            partial_success: Some(ExportLogsPartialSuccess {
                rejected_log_records: 2,
                error_message: "too old".into(),
            }),
        }
        .encode_to_vec();
        let mut ok = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            partial.len()
        )
        .into_bytes();
        ok.extend_from_slice(&partial);
        let (endpoint, seen) = collector(vec![busy.clone(), busy, ok]).await;
        let (counters, mut log) = (Counters::default(), Failures::default());
        let rejected = deliver(&endpoint, b"records", &counters, &mut log).await;
        assert_eq!(rejected, Some(2));
        assert_eq!(seen.load(Ordering::Relaxed), 3);
        assert_eq!(counters.failed.load(Ordering::Relaxed), 2);

        // Nothing listens: every attempt fails, then the batch is given up.
        let closed = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = closed.local_addr().expect("addr").port();
        drop(closed);
        let endpoint: Endpoint = format!("http://127.0.0.1:{port}").parse().expect("url");
        let counters = Counters::default();
        assert_eq!(deliver(&endpoint, b"x", &counters, &mut log).await, None);
        assert_eq!(counters.failed.load(Ordering::Relaxed), u64::from(ATTEMPTS));

        // A request the collector refuses is not sent again.
        let (endpoint, seen) = collector(vec![
            b"HTTP/1.1 400 Bad\r\nContent-Length: 0\r\n\r\n".to_vec(),
        ])
        .await;
        assert_eq!(deliver(&endpoint, b"x", &counters, &mut log).await, None);
        assert_eq!(seen.load(Ordering::Relaxed), 1);
    }
}
