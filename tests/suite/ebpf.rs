//! Kernel programs, end to end.
