//! guard's end-to-end tests. Privileged tests skip with a reason when not root, and fail
//! instead of skipping under `CI=true`.
mod suite;
