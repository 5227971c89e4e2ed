//! tracefs: mounted when missing, and the field offsets of the tracepoints' formats.

use super::*;

const TRACEFS: &str = "/sys/kernel/tracing";

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

#[cfg(test)]
mod tests {
    use super::*;

    const FORMAT: &str = "name: sched_process_exec\nID: 316\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n\
        \tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n";

    #[test]
    fn finds_field_offsets_in_a_tracefs_format() {
        assert_eq!(parse_field_offset(FORMAT, "filename"), Some(8));
        assert_eq!(parse_field_offset(FORMAT, "pid"), Some(12));
        assert_eq!(parse_field_offset(FORMAT, "common_pid"), Some(4));
        assert_eq!(parse_field_offset(FORMAT, "nope"), None);
    }
}
