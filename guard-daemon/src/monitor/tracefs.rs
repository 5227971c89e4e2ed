//! tracefs: mounted when missing, and the field offsets of the tracepoints' formats.

use super::*;

/// Mounts tracefs at its usual place if it is not there yet.
pub fn ensure_tracefs() -> Result<(), MonitorError> {
    if Path::new(TRACEFS).join("events").exists() {
        return Ok(());
    }
    nix::mount::mount(
        Some("tracefs"),
        TRACEFS,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| MonitorError::Tracefs(format!("mount tracefs at {TRACEFS}: {e}")))
}

/// The offset of `field` in a tracepoint's record, from its tracefs format file.
pub(super) fn field_offset(format_file: &str, field: &str) -> Result<u32, MonitorError> {
    let format = fs::read_to_string(format_file)
        .map_err(|e| MonitorError::Tracefs(format!("read {format_file}: {e}")))?;
    parse_field_offset(&format, field)
        .ok_or_else(|| MonitorError::Tracefs(format!("{format_file} has no field `{field}`")))
}

/// Finds `offset:N;` on the line declaring `field` in a tracefs format file.
pub(super) fn parse_field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?.split(';').next()?;
        if decl.split_whitespace().last()? != field {
            return None;
        }
        let offset = line
            .split(';')
            .find_map(|part| part.trim().strip_prefix("offset:"))?;
        offset.trim().parse().ok()
    })
}
