//! `/etc/guard/guardd.toml`: guardd's settings in a file, each overridden by its flag. Keys are
//! the long flags with `_` for `-` (`max_calls = 32`); an unknown key or a wrong type is an
//! error naming the file, line and key, and guardd does not start.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::Deserialize;

/// Where guardd looks when `--config` is not given; a missing file there is no error.
pub const DEFAULT_PATH: &str = "/etc/guard/guardd.toml";

/// The settings a file may give; absent ones keep the flag's default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub policy: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub audit: Option<PathBuf>,
    pub audit_rotate_bytes: Option<u64>,
    pub audit_keep_rotated: Option<u64>,
    pub audit_keep_rotated_seconds: Option<u64>,
    pub audit_bytes_per_uid: Option<u64>,
    pub socket_group: Option<String>,
    pub cgroup: Option<String>,
    pub max_calls: Option<usize>,
    pub max_calls_per_uid: Option<usize>,
    pub max_queue: Option<usize>,
    pub max_held_per_uid: Option<usize>,
    pub max_connections: Option<usize>,
    pub max_connections_per_uid: Option<usize>,
    pub reserved_connections_per_uid: Option<usize>,
    pub max_followers_per_uid: Option<usize>,
    pub idle_timeout: Option<u64>,
    pub write_timeout: Option<u64>,
    pub keepalive: Option<u64>,
    pub drain_seconds: Option<u64>,
    pub allow_unenforced: Option<bool>,
    pub trace_syscalls: Option<bool>,
    pub event_ring_bytes: Option<u32>,
    pub approval_timeout: Option<u64>,
    pub allow_writes_on_audit_fs: Option<bool>,
    pub worker_threads: Option<u64>,
    pub metrics_listen: Option<std::net::SocketAddr>,
    pub otlp_endpoint: Option<guard::export::Endpoint>,
}

/// Reads `path`; `None` when it is the default path and does not exist.
pub fn load(path: &Path, explicit: bool) -> Result<Option<FileConfig>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("config {}", path.display())),
    };
    toml::from_str(&text)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("config {}: {}", path.display(), e.to_string().trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_and_wrong_types_name_the_line_and_key() {
        let dir = std::env::temp_dir().join(format!("guardd-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("guardd.toml");
        std::fs::write(&file, "socket = \"/run/x.sock\"\nmax_calls = \"many\"\n").expect("write");
        let e = load(&file, true)
            .expect_err("a string for a number")
            .to_string();
        assert!(e.contains("line 2") && e.contains("max_calls"), "{e}");
        std::fs::write(&file, "sockett = \"/run/x.sock\"\n").expect("write");
        let e = load(&file, true).expect_err("unknown key").to_string();
        assert!(e.contains("line 1") && e.contains("sockett"), "{e}");
        std::fs::write(&file, "max_calls = 3\n").expect("write");
        assert_eq!(
            load(&file, true).expect("ok").expect("some").max_calls,
            Some(3)
        );
        assert!(
            load(&dir.join("none.toml"), false)
                .expect("absent default")
                .is_none()
        );
        assert!(load(&dir.join("none.toml"), true).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
