//! The Python virtual environment the tests drive guard with: the official MCP SDK (`mcp` from
//! PyPI, the MCP client guard-mcp is tested with), the Prometheus org's client (whose parser
//! reads guardd's metrics), OpenTelemetry's protobuf types of OTLP (which decode what guardd's
//! OTLP export sends, in the tests' collector) and guard's own Python client
//! (`clients/python`, installed with pip as a user would). It lives in `target/venv`, so
//! `cargo clean` removes it and setup makes it again.

use std::{path::PathBuf, process::Command};

use anyhow::Result;

use crate::repo::root;

/// The MCP SDK's version, pinned: the tests assert on what it sends and reads.
pub const MCP_SDK: &str = "2.3.0";

/// The Prometheus org's Python client, pinned: its OpenMetrics parser reads guardd's /metrics in
/// the tests, as a Prometheus server would.
pub const PROMETHEUS_CLIENT: &str = "0.21.1";

/// OpenTelemetry's Python package of the OTLP protobuf types, pinned: the tests' collector
/// decodes guardd's OTLP/HTTP requests with it, as an OpenTelemetry Collector would.
pub const OTLP_PROTO: &str = "1.45.2";

/// Where the environment lives.
pub fn dir() -> PathBuf {
    root().join("target/venv")
}

/// True when the environment has the pinned packages and the client.
fn ready() -> bool {
    let check = format!(
        "import importlib.metadata as m, guard_client; assert m.version('mcp') == '{MCP_SDK}'; \
         assert m.version('prometheus_client') == '{PROMETHEUS_CLIENT}'; \
         assert m.version('opentelemetry-proto') == '{OTLP_PROTO}'; \
         from opentelemetry.proto.collector.logs.v1 import logs_service_pb2"
    );
    Command::new(dir().join("bin/python"))
        .args(["-c", &check])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A Python of at least 3.10 (the SDK's floor): python3.11 where the machine has it.
fn interpreter() -> Option<&'static str> {
    let ok = |p: &str| {
        Command::new(p)
            .args(["-c", "import sys, venv; assert sys.version_info >= (3, 10)"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    ["python3.11", "python3.12", "python3.13", "python3"]
        .into_iter()
        .find(|p| ok(p))
}

/// Makes the environment when it is missing or out of date; `Ok(None)` when it was in place,
/// `Ok(Some(what))` when it was made, `Err(why)` when it could not be.
pub fn ensure() -> Result<Option<String>, String> {
    if ready() {
        return Ok(None);
    }
    let Some(python) = interpreter() else {
        return Err("no python3 >= 3.10 with the venv module; install python3-venv".into());
    };
    let dir = dir();
    let run = |cmd: &mut Command| {
        let shown = format!("{cmd:?}");
        match cmd.status() {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!("{shown} failed: {s}")),
            Err(e) => Err(format!("{shown}: {e}")),
        }
    };
    run(Command::new(python)
        .args(["-m", "venv", "--clear"])
        .arg(&dir))?;
    let pip = dir.join("bin/pip");
    run(Command::new(&pip).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        &format!("mcp=={MCP_SDK}"),
        &format!("prometheus_client=={PROMETHEUS_CLIENT}"),
        &format!("opentelemetry-proto=={OTLP_PROTO}"),
    ]))?;
    run(Command::new(&pip)
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .arg(root().join("clients/python")))?;
    if !ready() {
        return Err(format!(
            "{} was made but does not import mcp and guard_client",
            dir.display()
        ));
    }
    Ok(Some(format!(
        "made {} with mcp {MCP_SDK}, prometheus_client {PROMETHEUS_CLIENT}, opentelemetry-proto \
         {OTLP_PROTO} and the Python client",
        dir.display()
    )))
}
