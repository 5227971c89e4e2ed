//! What the unit tests of guard-mcp build listings from.

use guard::{
    call::{decision::RiskTier, plan::OnDivergence},
    policy::{ArgDoc, ArgType, ToolSpec},
};

/// A LOW tool that only reads, with no argument.
pub fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: None,
        tier: RiskTier::Low,
        irreversible: false,
        held: false,
        read_only: true,
        network: false,
        unix: false,
        exec_writes: false,
        root: false,
        shadow: false,
        on_divergence: OnDivergence::Kill,
        args: Vec::new(),
        stdin: None,
        runnable: true,
    }
}

/// A required argument of type `ty` with no other constraint.
pub fn arg(name: &str, ty: ArgType) -> ArgDoc {
    ArgDoc {
        name: name.into(),
        ty,
        required: true,
        pattern: None,
        values: Vec::new(),
        max_len: None,
        min: None,
        max: None,
        within: Vec::new(),
        base: None,
        hosts: Vec::new(),
        schemes: Vec::new(),
    }
}
