//! Room kept for the rows of running calls, inside the log's own file. A call whose write
//! effects share the audit log's file system can fill it, and so can any other writer there;
//! the row that records what a running call did (its `finished` row, with the divergence) must
//! still be written. So the active file always has blocks allocated past its end
//! (`fallocate` with `FALLOC_FL_KEEP_SIZE`: its size, and what readers see, unchanged), which
//! the next rows fill without asking the file system for a block, and which no other writer
//! can take: a reserve file beside the log, released when the disk was full, went to whoever
//! asked next. After each batch the writer tops the room up again; when the file system has
//! no room for that, the reserve is short, and guardd admits no new call until it is whole
//! again (fail closed), so what is left goes to the rows of the calls already running.

use std::{
    fs::File,
    os::fd::AsFd as _,
    sync::{
        Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use nix::fcntl::{FallocateFlags, fallocate};

/// Bytes kept allocated past the active file's end: the `finished` rows of thousands of calls
/// (a row is about 1-2 KiB; one listing 64 paths of each kind, tens).
pub const RESERVE_BYTES: u64 = 8 << 20;

/// The room past the end of the active file.
#[derive(Debug)]
pub struct Reserve {
    /// The room kept: this much past the end, after each top-up.
    target: u64,
    /// The active file (a second descriptor, so that an admission can top up too).
    file: Mutex<Option<File>>,
    /// The bytes of rows in it, as the writer last wrote them.
    len: AtomicU64,
    /// How far its blocks are allocated.
    end: AtomicU64,
    /// The last top-up failed: the room is less than `target`.
    short: AtomicBool,
}

impl Reserve {
    /// A reserve of `target` bytes, for no file yet.
    pub fn new(target: u64) -> Self {
        Self {
            target,
            file: Mutex::new(None),
            len: AtomicU64::new(0),
            end: AtomicU64::new(0),
            short: AtomicBool::new(true),
        }
    }

    /// Takes `file`, whose rows end at `len` and whose blocks are allocated at least to
    /// `allocated` (`len` when unknown), as the active file, and tops its room up.
    pub fn adopt(&self, file: &File, len: u64, allocated: u64) {
        match file.try_clone() {
            Ok(f) => *self.file.lock().unwrap_or_else(|p| p.into_inner()) = Some(f),
            Err(e) => tracing::error!("audit log: keeping its reserve: {e}"),
        }
        self.len.store(len, Ordering::SeqCst);
        self.end.store(allocated.max(len), Ordering::SeqCst);
        self.top_up();
    }

    /// The rows now end at `len` (a batch was written): tops the room up, whole again.
    pub fn wrote(&self, len: u64) {
        self.len.store(len, Ordering::SeqCst);
        self.top_up();
    }

    /// The file was cut back to `len` (a failed batch): what was allocated past it may be gone
    /// with the cut, so it is allocated again.
    pub fn cut(&self, len: u64) {
        self.len.store(len, Ordering::SeqCst);
        self.end.store(len, Ordering::SeqCst);
        self.top_up();
    }

    /// Allocates `target` bytes past the end; false (and short) when the file system has no
    /// room for them.
    pub fn top_up(&self) -> bool {
        match self.try_top_up() {
            Ok(()) => true,
            Err(e) => {
                if !self.short.swap(true, Ordering::SeqCst) {
                    tracing::error!(
                        room = self.room(),
                        "audit log: no room to keep its reserve ({e}); admitting new calls of \
                         root and admins only, while half of it is left, until there is"
                    );
                }
                false
            }
        }
    }

    /// [`top_up`](Self::top_up), with the file system's reason when it could not.
    pub fn try_top_up(&self) -> nix::Result<()> {
        let slot = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let file = slot.as_ref().ok_or(nix::Error::EBADF)?;
        let len = self.len.load(Ordering::SeqCst);
        let want = len + self.target;
        // Only what lies past the blocks allocated already: a batch's few KiB, not the whole
        // room again (which had the file system walk its extents at every batch: 30-50 µs a
        // row's sync, measured).
        let from = self.end.load(Ordering::SeqCst).clamp(len, want);
        if want > from {
            let keep = FallocateFlags::FALLOC_FL_KEEP_SIZE;
            fallocate(file.as_fd(), keep, from as i64, (want - from) as i64)?;
        }
        self.end.fetch_max(want, Ordering::SeqCst);
        self.short.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// The bytes allocated past the rows' end.
    pub fn room(&self) -> u64 {
        let end = self.end.load(Ordering::SeqCst);
        end.saturating_sub(self.len.load(Ordering::SeqCst))
    }

    /// Whether a new call may be admitted: the reserve is whole. The writer makes it whole
    /// again after every batch, so it is short only when the file system refused that, and
    /// then it is asked again here: once another writer has taken its free blocks, the room
    /// left (however large) is kept, and new calls wait. No row was written since a top-up
    /// that succeeded but the batch in flight, so the room is whole then; the allocation stays
    /// off the admission's path (and out of the journal a row's fdatasync commits).
    ///
    /// A `privileged` caller's (root's, an admin's: see `share`) is admitted on a short
    /// reserve too, while half of it is left: the callers who filled the file system must not
    /// lock its operator out, and the other half stays the running calls'.
    pub fn admits(&self, privileged: bool) -> bool {
        !self.short.load(Ordering::SeqCst)
            || self.top_up()
            || (privileged && self.room() >= self.target / 2)
    }

    /// Gives back what `file` has allocated past `len` (a file rotated out): its room is the
    /// next file's now. A truncation to its own size does it (ext4, xfs and tmpfs free the
    /// blocks past the end; a hole cannot be punched there).
    pub fn give_back(file: &File, len: u64, allocated: u64) {
        if allocated <= len {
            return;
        }
        if let Err(e) = file.set_len(len) {
            tracing::warn!("audit log: giving back a rotated file's reserve: {e}");
        }
    }

    /// How far the active file's blocks are allocated.
    pub fn allocated(&self) -> u64 {
        self.end.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::{fs, io::Write as _, os::unix::fs::MetadataExt as _};

    use super::*;

    #[test]
    fn the_room_is_real_blocks_past_the_end_and_kept_whole() {
        let dir = crate::audit::testdir::TestDir::new("reserve");
        let path = dir.path().join("audit.jsonl");
        let mut file = fs::File::create(&path).expect("create");
        file.write_all(b"row\n").expect("write");
        let r = Reserve::new(1 << 20);
        r.adopt(&file, 4, 4);
        // Allocated, not sparse, and the file's size unchanged: what readers see is the rows.
        let meta = fs::metadata(&path).expect("stat");
        assert!(meta.blocks() * 512 >= 1 << 20, "{} blocks", meta.blocks());
        assert_eq!(meta.len(), 4);
        assert_eq!(r.room(), 1 << 20);
        assert!(r.admits(false));
        // Used up to under half: topped up again.
        r.wrote(4 + (600 << 10));
        assert_eq!(r.room(), 1 << 20);
        // Given back when the file is rotated out.
        Reserve::give_back(&file, 4, r.allocated());
        assert!(fs::metadata(&path).expect("stat").blocks() * 512 < 64 << 10);
    }
}
