//! The Claude Code hook (`guard-exec hook claude-code`).
