//! The event pump: the task that reads the kernel's events into the running calls' receipts
//! and onto the bus, and the flush a call's end waits for.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::Daemon;

impl Daemon {
    /// Starts the task that reads kernel events into receipts and onto the bus.
    pub fn spawn_event_pump(self: &Arc<Self>) {
        let Some(stream) = self.with_monitor(|m| m.take_events()).flatten() else {
            return;
        };
        let (flush_tx, mut flush_rx) = mpsc::channel::<oneshot::Sender<()>>(64);
        let _ = self.flush.set(flush_tx);
        let daemon = Arc::clone(self);
        tokio::spawn(async move {
            let mut stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!("kernel events unavailable: {e}");
                    return;
                }
            };
            let mut batch = Vec::new();
            loop {
                batch.clear();
                let flushed = tokio::select! {
                    read = stream.next_batch(&mut batch) => {
                        if let Err(e) = read {
                            tracing::error!("reading kernel events: {e}");
                            return;
                        }
                        None
                    }
                    Some(ack) = flush_rx.recv() => {
                        stream.drain_now(&mut batch);
                        Some(ack)
                    }
                };
                for event in &batch {
                    daemon.receipts.record(event, &daemon.bus);
                }
                if let Some(ack) = flushed {
                    let _ = ack.send(());
                }
            }
        });
    }

    /// Returns once every kernel event written before this call has been folded into its
    /// receipt. A call's events are in the ring buffer before its last task is reaped, so a
    /// receipt finished after this misses none of them.
    pub async fn flush_events(&self) {
        let Some(tx) = self.flush.get() else {
            return;
        };
        let (ack, done) = oneshot::channel();
        if tx.send(ack).await.is_ok() {
            let _ = done.await;
        }
    }

    /// Events the kernel could not report (ring buffer full).
    pub fn dropped_events(&self) -> u64 {
        self.with_monitor(|m| m.dropped().unwrap_or(0)).unwrap_or(0)
    }
}
