//! `--otlp-endpoint`: where the records go. Plain `http://` only (a collector on this host or
//! the management network; one on loopback forwards with TLS if it must), given either as the
//! collector's base URL (`http://127.0.0.1:4318`, which gets the OTLP/HTTP path `/v1/logs`
//! appended, as `OTEL_EXPORTER_OTLP_ENDPOINT` does) or as the full path of its logs
//! (`http://collector:4318/v1/logs`, used as it is, as `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` is).

use std::{fmt, str::FromStr};

/// The OTLP/HTTP path of logs.
const LOGS_PATH: &str = "/v1/logs";

/// Why a URL is no endpoint guardd can send to (a start-up error, naming the option).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error(
        "{0}: https is not supported; send over plain http to a collector on this host or the \
         management network (an OpenTelemetry Collector there forwards with TLS)"
    )]
    Https(String),
    #[error("{0}: not an http:// URL")]
    Scheme(String),
    #[error("{0}: no host")]
    Host(String),
    #[error("{0}: the port is not a number from 1 to 65535")]
    Port(String),
    #[error("{0}: a query, fragment, user name or space has no place in an OTLP endpoint")]
    Extra(String),
}

/// A collector's OTLP/HTTP logs endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port` as given (an IPv6 address in brackets), for the `Host` header.
    authority: String,
    /// The host, without brackets, to connect to.
    host: String,
    port: u16,
    /// The path POSTed to, ending in `/v1/logs`.
    path: String,
}

impl Endpoint {
    /// Where to connect: the host (a name is resolved at each connect) and the port.
    pub fn addr(&self) -> (&str, u16) {
        (&self.host, self.port)
    }

    /// The `Host` header's value.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The path POSTed to.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path)
    }
}

impl FromStr for Endpoint {
    type Err = EndpointError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let rest = match url.split_once("://") {
            Some((s, rest)) if s.eq_ignore_ascii_case("http") => rest,
            Some((s, _)) if s.eq_ignore_ascii_case("https") => {
                return Err(EndpointError::Https(url.into()));
            }
            _ => return Err(EndpointError::Scheme(url.into())),
        };
        if rest.contains(['?', '#', '@']) || rest.chars().any(char::is_whitespace) {
            return Err(EndpointError::Extra(url.into()));
        }
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        // `[v6]:port`, `[v6]`, `host:port` or `host`.
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (host, after) = v6
                    .split_once(']')
                    .ok_or_else(|| EndpointError::Host(url.into()))?;
                (host, after.strip_prefix(':'))
            }
            None => match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            },
        };
        if host.is_empty() {
            return Err(EndpointError::Host(url.into()));
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| EndpointError::Port(url.into()))?,
        };
        let path = if path.ends_with(LOGS_PATH) {
            path.to_owned()
        } else {
            format!("{}{LOGS_PATH}", path.trim_end_matches('/'))
        };
        Ok(Self {
            authority: authority.to_owned(),
            host: host.to_owned(),
            port,
            path,
        })
    }
}

impl<'de> serde::Deserialize<'de> for Endpoint {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let url = String::deserialize(d)?;
        url.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Endpoint, EndpointError> {
        url.parse()
    }

    #[test]
    fn a_base_url_gets_the_logs_path_and_a_full_one_is_kept() {
        let e = parse("http://127.0.0.1:4318").expect("base");
        assert_eq!((e.addr(), e.path()), (("127.0.0.1", 4318), "/v1/logs"));
        assert_eq!(e.to_string(), "http://127.0.0.1:4318/v1/logs");
        for url in ["http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/logs"] {
            assert_eq!(parse(url).expect(url).path(), "/v1/logs", "{url}");
        }
        let e = parse("http://collector.example/otlp/").expect("a base with a path");
        assert_eq!(
            (e.addr(), e.path()),
            (("collector.example", 80), "/otlp/v1/logs")
        );
        let e = parse("HTTP://[::1]:4318/v1/logs").expect("v6");
        assert_eq!((e.addr(), e.authority()), (("::1", 4318), "[::1]:4318"));
    }

    #[test]
    fn what_guardd_cannot_send_to_is_refused_saying_why() {
        let refused = [
            ("https://c:4318", "https is not supported"),
            ("c:4318", "not an http:// URL"),
            ("ftp://c", "not an http:// URL"),
            ("http://:4318", "no host"),
            ("http://[::1", "no host"),
            ("http://c:0", "port"),
            ("http://c:99999", "port"),
            ("http://c:x", "port"),
            ("http://u@c:4318", "query"),
            ("http://c:4318/v1/logs?x=1", "query"),
            ("http://c 1:4318", "query"),
        ];
        for (url, why) in refused {
            let e = parse(url).expect_err(url).to_string();
            assert!(e.starts_with(url) && e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn a_settings_file_value_is_parsed_the_same_way() {
        #[derive(serde::Deserialize)]
        struct File {
            otlp_endpoint: Endpoint,
        }
        let f: File = toml::from_str("otlp_endpoint = \"http://127.0.0.1:4318\"").expect("ok");
        assert_eq!(f.otlp_endpoint.path(), "/v1/logs");
        let e = toml::from_str::<File>("otlp_endpoint = \"https://c\"")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("otlp_endpoint") && e.contains("https"), "{e}");
    }
}
