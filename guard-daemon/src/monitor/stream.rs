//! The kernel's events, read from the ring buffer as it signals data.

use super::*;

/// Events from the kernel, read as the ring buffer signals data.
pub struct EventStream {
    pub(super) fd: AsyncFd<RingBuf<MapData>>,
}

impl EventStream {
    /// Waits for events and appends every available one to `out`.
    pub async fn next_batch(&mut self, out: &mut Vec<Event>) -> io::Result<()> {
        loop {
            let mut guard = self.fd.readable_mut().await?;
            drain(guard.get_inner_mut(), out);
            guard.clear_ready();
            if !out.is_empty() {
                return Ok(());
            }
        }
    }

    /// Appends every event already in the ring buffer to `out`, without waiting.
    pub fn drain_now(&mut self, out: &mut Vec<Event>) {
        drain(self.fd.get_mut(), out);
    }
}

pub(super) fn drain(ring: &mut RingBuf<MapData>, out: &mut Vec<Event>) {
    while let Some(item) = ring.next() {
        if item.len() >= size_of::<Event>() {
            // SAFETY: the kernel wrote a whole `Event` (repr(C), Pod) at this address;
            // read_unaligned because ring buffer records are only 8-byte aligned.
            out.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<Event>()) });
        }
    }
}
