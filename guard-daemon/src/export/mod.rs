//! OTLP export of the audit log and the event bus (`guardd --otlp-endpoint URL`, off by default):
//! every audit row, once durable, and every bus event become OTLP log records, POSTed in
//! batches as protobuf to a collector's `/v1/logs` (OTLP/HTTP).
//!
//! The contract: export never slows or blocks a call. Rows and events are handed to a bounded
//! queue with `try_send`; a full queue drops them, counted. One task batches and sends, retrying
//! a failed batch with exponential backoff a bounded number of times, then dropping it, counted.
//! Telemetry is not enforcement: an unreachable collector is logged (at most once a minute) and
//! counted (`guard_export_dropped_total`, `guardctl status`), and calls go on. The audit log
//! stays the record; each row's record carries its `seq` and `hash`, so a central store can
//! check the chain, and see the gaps drops leave, without the file.

mod endpoint;
mod record;
mod send;

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

use tokio::sync::{
    broadcast::error::RecvError,
    mpsc::{self, error::TrySendError},
};

pub use endpoint::{Endpoint, EndpointError};

use crate::{
    audit::{Appended, AuditLog},
    bus::{Bus, Event},
    protocol::status::ExportStatus,
};

/// Rows and events that may wait for the sender before new ones are dropped. A batch of rows
/// the audit log made durable together is one entry.
const QUEUE: usize = 8192;
/// Bytes that may wait (about): while a collector is down, the queue holds at most this much of
/// guardd's memory, however large the rows.
const QUEUE_BYTES: u64 = 64 << 20;
/// What an event is counted as in [`QUEUE_BYTES`] (its JSON is a few hundred bytes).
const EVENT_BYTES: u64 = 512;

/// What waits to be sent.
enum Item {
    /// Rows made durable together: their lines as written (each ending in `\n`), their places
    /// in the chain, and when.
    Rows {
        lines: Vec<u8>,
        rows: Vec<Appended>,
        at: u64,
    },
    /// An event of the bus, and when it was taken.
    Event { event: Arc<Event>, at: u64 },
}

impl Item {
    /// The log records it makes.
    fn records(&self) -> u64 {
        match self {
            Item::Rows { rows, .. } => rows.len() as u64,
            Item::Event { .. } => 1,
        }
    }

    /// About how much memory it holds while it waits.
    fn bytes(&self) -> u64 {
        match self {
            // Each row's place in the chain: a seq and a hash.
            Item::Rows { lines, rows, .. } => (lines.len() + rows.len() * 96) as u64,
            Item::Event { .. } => EVENT_BYTES,
        }
    }
}

/// The export's counts since guardd started.
#[derive(Default)]
struct Counters {
    /// Records the collector accepted.
    sent: AtomicU64,
    /// Records dropped: the queue was full, the bus dropped events for this reader, a batch
    /// failed every attempt, or the collector rejected them.
    dropped: AtomicU64,
    /// Attempts to send a batch that failed (each retry after one counts).
    failed: AtomicU64,
    /// Bytes in the queue now (see [`Item::bytes`]).
    queued: AtomicU64,
}

/// The export in force: where it sends, and its counts.
pub struct Export {
    endpoint: Endpoint,
    counters: Arc<Counters>,
}

impl Export {
    /// Records dropped since guardd started.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// Records the collector accepted since guardd started.
    pub fn sent(&self) -> u64 {
        self.counters.sent.load(Ordering::Relaxed)
    }

    /// What `guardctl status` shows of it.
    pub fn status(&self) -> ExportStatus {
        ExportStatus {
            endpoint: self.endpoint.to_string(),
            sent: self.sent(),
            dropped: self.dropped(),
            failed: self.counters.failed.load(Ordering::Relaxed),
        }
    }
}

/// Nanoseconds since the epoch, now (0 for a clock before it).
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Hands `item` to the sender, or counts it dropped: never waits.
fn offer(tx: &mpsc::Sender<Item>, counters: &Counters, item: Item) {
    let bytes = item.bytes();
    let before = counters.queued.fetch_add(bytes, Ordering::Relaxed);
    let refused = if before + bytes > QUEUE_BYTES {
        Some(item)
    } else {
        match tx.try_send(item) {
            Ok(()) => None,
            Err(TrySendError::Full(item) | TrySendError::Closed(item)) => Some(item),
        }
    };
    if let Some(item) = refused {
        counters.queued.fetch_sub(bytes, Ordering::Relaxed);
        counters
            .dropped
            .fetch_add(item.records(), Ordering::Relaxed);
    }
}

/// Starts exporting `audit`'s rows and `bus`'s events to `endpoint`: taps the audit log,
/// follows the bus and spawns the sender; the handle's counts say how it goes. Call it once,
/// before the first row to export (guardd does, before the rows of calls a guardd that died
/// left open).
pub fn start(audit: &AuditLog, bus: &Bus, endpoint: Endpoint) -> Export {
    let counters = Arc::new(Counters::default());
    let export = Export {
        endpoint: endpoint.clone(),
        counters: Arc::clone(&counters),
    };
    let (tx, rx) = mpsc::channel(QUEUE);
    {
        let (tx, counters) = (tx.clone(), Arc::clone(&counters));
        audit.tap(Box::new(move |lines: &[u8], rows: &[Appended]| {
            let (lines, rows, at) = (lines.to_vec(), rows.to_vec(), now_ns());
            offer(&tx, &counters, Item::Rows { lines, rows, at });
        }));
    }
    let mut events = bus.subscribe();
    {
        let counters = Arc::clone(&counters);
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(event) => offer(
                        &tx,
                        &counters,
                        Item::Event {
                            event,
                            at: now_ns(),
                        },
                    ),
                    Err(RecvError::Lagged(n)) => {
                        counters.dropped.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
    }
    let resource = record::resource(&record::host_name());
    tokio::spawn(send::run(rx, endpoint, resource, counters));
    export
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::What;

    fn rows(n: usize, bytes: usize) -> Item {
        let row = Appended {
            seq: 0,
            hash: String::new(),
        };
        Item::Rows {
            lines: vec![b'x'; bytes],
            rows: vec![row; n],
            at: 0,
        }
    }

    #[test]
    fn what_finds_no_room_is_dropped_and_counted_at_once() {
        let counters = Counters::default();
        let dropped = || counters.dropped.load(Ordering::Relaxed);
        let (tx, mut rx) = mpsc::channel(2);
        let event = Event::of(None, None, What::Kill { reason: "r".into() });
        offer(&tx, &counters, rows(3, 10));
        offer(
            &tx,
            &counters,
            Item::Event {
                event: Arc::new(event),
                at: 0,
            },
        );
        // No third entry: its two rows are dropped, counted.
        offer(&tx, &counters, rows(2, 10));
        assert_eq!(dropped(), 2);
        let queued = counters.queued.load(Ordering::Relaxed);
        assert_eq!(queued, 10 + 3 * 96 + EVENT_BYTES);
        while let Ok(item) = rx.try_recv() {
            counters.queued.fetch_sub(item.bytes(), Ordering::Relaxed);
        }
        // Room for entries, but not for so many bytes.
        offer(&tx, &counters, rows(4, QUEUE_BYTES as usize));
        assert_eq!(dropped(), 6);
        assert_eq!(counters.queued.load(Ordering::Relaxed), 0);
        offer(&tx, &counters, rows(1, 10));
        assert_eq!(
            (dropped(), rx.try_recv().map(|i| i.records()).ok()),
            (6, Some(1))
        );
    }
}
