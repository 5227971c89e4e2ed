//! Room kept for the rows of running calls. A call whose write effects share the audit log's
//! file system can fill it; the row that records what that call did (its `finished` row, with
//! the divergence) must still be written. So a reserve file of [`RESERVE_BYTES`] is allocated
//! beside the log at start; when a batch cannot be written, the writer releases the reserve
//! and tries again once, and guardd admits no new call until the reserve can be allocated
//! again (fail closed), so what room there is goes to the rows of the calls already running.

use std::{
    fs::{self, File},
    io,
    os::fd::AsFd as _,
    path::{Path, PathBuf},
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
};

/// Bytes reserved: the `finished` rows of thousands of calls (a row is about 1-2 KiB).
pub const RESERVE_BYTES: u64 = 8 << 20;

/// The reserve file and whether it is in place.
#[derive(Debug)]
pub struct Reserve {
    path: PathBuf,
    bytes: u64,
    file: Mutex<Option<File>>,
    released: AtomicBool,
}

impl Reserve {
    /// Allocates `bytes` in `<log>.reserve` (blocks, not a sparse file).
    pub fn allocate(log: &Path, bytes: u64) -> io::Result<Self> {
        let mut name = log.as_os_str().to_owned();
        name.push(".reserve");
        let me = Self {
            path: PathBuf::from(name),
            bytes,
            file: Mutex::new(None),
            released: AtomicBool::new(true),
        };
        me.restore()?;
        Ok(me)
    }

    /// (Re)allocates the reserve; true once it is in place.
    pub fn restore(&self) -> io::Result<()> {
        let mut slot = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.path)?;
        nix::fcntl::posix_fallocate(file.as_fd(), 0, self.bytes as i64).map_err(io::Error::from)?;
        *slot = Some(file);
        self.released.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Frees the reserved blocks for the log's rows. Returns false when there was nothing left
    /// to release.
    pub fn release(&self) -> bool {
        let mut slot = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let Some(file) = slot.take() else {
            return false;
        };
        if let Err(e) = file.set_len(0) {
            tracing::error!(path = %self.path.display(), "releasing the audit reserve: {e}");
        }
        self.released.store(true, Ordering::SeqCst);
        true
    }

    /// Whether the reserve was used up (guardd then admits no call until it is restored).
    pub fn released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_holds_real_blocks_and_gives_them_back() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = std::env::temp_dir().join(format!("guard-reserve-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("dir");
        let log = dir.join("audit.jsonl");
        let r = Reserve::allocate(&log, 1 << 20).expect("allocate");
        let file = dir.join("audit.jsonl.reserve");
        // Allocated, not sparse: 512-byte blocks for the whole MiB.
        assert!(fs::metadata(&file).expect("reserve").blocks() * 512 >= 1 << 20);
        assert!(!r.released());
        assert!(r.release());
        assert!(r.released());
        assert_eq!(fs::metadata(&file).expect("reserve").len(), 0);
        assert!(!r.release(), "nothing left to release");
        r.restore().expect("restore");
        assert!(!r.released());
        let _ = fs::remove_dir_all(&dir);
    }
}
