//! Where a client's calls work: its MCP roots (`roots/list`), when it offers them, the
//! folder an editor has open; else guard-mcp's own directory, where the client started it.
//! guardd picks the call's workspace from it, among the policy's roots, and checks it as it
//! checks any caller's: a client naming another directory gains nothing a shell would not.
#![expect(
    deprecated,
    reason = "roots are deprecated by the spec's SEP-2577, but the clients agents run in \
              (editors, Claude Code) still send them; once rmcp drops them, guard-mcp works in \
              its own directory, as for a client that offers none"
)]

use std::{path::PathBuf, sync::Mutex, time::Duration};

use rmcp::{Peer, RoleServer};

/// How long a client has to answer `roots/list`.
const ASK: Duration = Duration::from_secs(5);

/// The client's roots, asked once and again after each `roots/list_changed`.
#[derive(Default)]
pub struct Roots {
    /// `None` until asked (or since the list changed).
    known: Mutex<Option<Option<PathBuf>>>,
}

impl Roots {
    /// The client's roots changed: ask again at the next call.
    pub fn forget(&self) {
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The working directory to send with a call from `peer`'s client.
    pub async fn cwd(&self, peer: &Peer<RoleServer>) -> Option<PathBuf> {
        let own = std::env::current_dir().ok();
        let offered = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.roots.is_some());
        if !offered {
            return own;
        }
        if let Some(known) = self.known.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return known.or(own);
        }
        let chosen = match tokio::time::timeout(ASK, peer.list_roots()).await {
            Ok(Ok(list)) => {
                let paths: Vec<PathBuf> = list.roots.iter().filter_map(|r| path(&r.uri)).collect();
                // The root that holds guard-mcp's own directory, else the first.
                let holding = own
                    .as_ref()
                    .and_then(|o| paths.iter().find(|p| o.starts_with(p)));
                holding.or(paths.first()).cloned()
            }
            Ok(Err(e)) => {
                tracing::warn!("the client's roots/list failed: {e}; working in {own:?}");
                None
            }
            Err(_) => {
                tracing::warn!(
                    "the client did not answer roots/list in {ASK:?}; working in {own:?}"
                );
                None
            }
        };
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Some(chosen.clone());
        chosen.or(own)
    }
}

/// The local path of a `file://` URI (RFC 8089; percent-encoding decoded); `None` for another
/// scheme, another host, or what decodes to no absolute path.
fn path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        return None;
    }
    use std::os::unix::ffi::OsStringExt as _;
    Some(PathBuf::from(std::ffi::OsString::from_vec(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_are_paths_and_others_are_not() {
        assert_eq!(path("file:///srv/ws"), Some(PathBuf::from("/srv/ws")));
        assert_eq!(path("file://localhost/a%20b"), Some(PathBuf::from("/a b")));
        assert_eq!(path("https://example.com/x"), None);
        assert_eq!(path("file://otherhost/x"), None);
        assert_eq!(path("file:///a%00b"), None);
        assert_eq!(path("file:///a%zz"), None);
    }
}
