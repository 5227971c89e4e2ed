//! The streams a client follows: `tools` with `follow`, and `subscribe`. A follower has no idle
//! timeout (it may have nothing to say for days), so each uid follows a bounded number of
//! streams ([`crate::socket::fair`]), and each stream gets a keepalive whenever it has been quiet for
//! the keepalive interval: a follower that has not read what it was sent by then, and reads
//! nothing within the write deadline, is dropped. A streaming subscription ends quietly when its
//! client goes.

use std::io;

use tokio::{
    sync::broadcast::{self, error::RecvError},
    time::{Instant, MissedTickBehavior, interval_at},
};

use super::listing::tools as tool_list;
use crate::{
    bus::{Event, What},
    call::peer::Peer,
    daemon::Daemon,
    protocol::{
        self, ProtocolError, Reply, SubscribeRequest,
        conn::{Conn, Deadlines},
        reply::Keepalive,
    },
    socket::fair::{Connections, Follower, Slot},
};

/// A place among the uid's followers for the connection of `slot`; `None` when its uid follows
/// as many streams as it may, after telling the client (the connection stays for its next
/// request).
pub(super) async fn place(
    connections: &std::sync::Arc<Connections>,
    slot: &Slot,
    conn: &mut Conn,
) -> io::Result<Option<Follower>> {
    match connections.follow(slot) {
        Ok(follower) => Ok(Some(follower)),
        Err(refused) => {
            let error = ProtocolError {
                message: refused.to_string(),
                field: None,
            };
            conn.write(&protocol::error_frame(&error)).await?;
            Ok(None)
        }
    }
}

/// What a followed stream does next.
enum Next {
    /// The client hung up (or its half of the connection).
    Gone,
    /// Quiet for a keepalive interval.
    Quiet,
    /// Something happened on the bus.
    Bus(Result<std::sync::Arc<Event>, RecvError>),
}

/// Waits for the next thing a follower must hear of; the keepalive clock restarts whenever
/// something was sent.
struct Stream {
    rx: broadcast::Receiver<std::sync::Arc<Event>>,
    deadlines: Deadlines,
    quiet_since: Instant,
}

impl Stream {
    fn new(daemon: &Daemon, deadlines: Deadlines) -> Self {
        Self {
            rx: daemon.bus.subscribe(),
            deadlines,
            quiet_since: Instant::now(),
        }
    }

    async fn next(&mut self, conn: &mut Conn) -> Next {
        let every = self.deadlines.keepalive;
        let mut tick = interval_at(self.quiet_since + every, every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tokio::select! {
            r = conn.closed() => {
                if let Err(e) = r {
                    tracing::debug!("follower: {e}");
                }
                Next::Gone
            }
            _ = tick.tick() => Next::Quiet,
            event = self.rx.recv() => Next::Bus(event),
        }
    }

    /// Sends one frame, and restarts the keepalive clock.
    async fn send(&mut self, conn: &mut Conn, reply: Reply) -> io::Result<()> {
        conn.reply(&reply).await?;
        self.quiet_since = Instant::now();
        Ok(())
    }

    /// A keepalive, once the client has read (some of) what it was sent before: one that reads
    /// nothing within the write deadline is dropped.
    async fn keepalive(&mut self, conn: &mut Conn) -> io::Result<()> {
        conn.reading(self.deadlines.write).await?;
        self.send(conn, Reply::Keepalive(Keepalive {})).await
    }
}

/// `tools` with `follow`: the list now, and again after each reload that put a policy in force,
/// until the client goes away. A client that falls behind gets the list in force when it
/// catches up: only the latest list matters.
pub(super) async fn tools(
    daemon: &Daemon,
    peer: &Peer,
    mut conn: Conn,
    _place: Follower,
    deadlines: Deadlines,
) -> io::Result<()> {
    let mut stream = Stream::new(daemon, deadlines);
    stream.send(&mut conn, tool_list(daemon, peer)).await?;
    loop {
        match stream.next(&mut conn).await {
            Next::Gone | Next::Bus(Err(RecvError::Closed)) => return Ok(()),
            Next::Quiet => stream.keepalive(&mut conn).await?,
            Next::Bus(Ok(event)) if matches!(event.what, What::Reload { error: None, .. }) => {
                stream.send(&mut conn, tool_list(daemon, peer)).await?;
            }
            Next::Bus(Ok(_)) => {}
            Next::Bus(Err(RecvError::Lagged(_))) => {
                stream.send(&mut conn, tool_list(daemon, peer)).await?;
            }
        }
    }
}

/// `subscribe`: every event that passes the filters, until the client goes away. A subscriber
/// that falls behind is told how many it missed and dropped, rather than allowed to slow the
/// calls it watches.
pub(super) async fn subscribe(
    daemon: &Daemon,
    mut conn: Conn,
    req: SubscribeRequest,
    _place: Follower,
    deadlines: Deadlines,
) -> io::Result<()> {
    let mut stream = Stream::new(daemon, deadlines);
    stream
        .send(&mut conn, Reply::Subscribed(Default::default()))
        .await?;
    loop {
        let event = match stream.next(&mut conn).await {
            Next::Gone | Next::Bus(Err(RecvError::Closed)) => return Ok(()),
            Next::Quiet => {
                stream.keepalive(&mut conn).await?;
                continue;
            }
            Next::Bus(Ok(event)) => event,
            Next::Bus(Err(RecvError::Lagged(missed))) => {
                let lagged = Event::of(None, None, What::Lagged { missed });
                let _ = conn.reply(&Reply::Event(lagged)).await;
                return Ok(());
            }
        };
        if req
            .call
            .as_ref()
            .is_some_and(|c| event.call_id.as_ref() != Some(c))
        {
            continue;
        }
        if let (Some(glob), Some(tool)) = (&req.tool, &event.tool)
            && !crate::policy::glob_match(glob, tool)
        {
            continue;
        }
        stream
            .send(&mut conn, Reply::Event(Event::clone(&event)))
            .await?;
    }
}
