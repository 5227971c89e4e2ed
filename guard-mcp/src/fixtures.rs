//! What the unit tests of guard-mcp build listings from.

use guard::policy::{ArgDoc, ArgType};

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
