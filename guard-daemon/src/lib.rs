//! guard: decide, confine and watch the tool calls of AI agents.
//!
//! The folders follow a call, top-down, and each imports only the ones below it:
//!
//! - [`socket`]: guardd's socket accepts a connection, admits it fairly, reads its requests
//!   and answers them; an `exec` is admitted, reviewed, and launched from here.
//! - [`launch`]: an approved call is bound to the kernel, started confined, followed to its end
//!   and its receipt recorded.
//! - [`review`]: the policy's decision, recorded before anything happens, then the judges and
//!   approvers, or a hold for a human.
//! - [`daemon`]: the state every stage reads, guardd's start-up and its locks.
//! - [`callers`]: who may do what, which agent a caller is, and what it was refused.
//! - [`export`]: audit rows and events sent to a fleet's collector (OTLP).
//! - [`protocol`]: the frames on the socket and the connection that carries them.
//! - [`approval`]: held calls and approved sessions, kept durably.
//! - [`audit`]: the append-only, hash-chained log of every decision and effect.
//! - [`receipt`]: what a call did, held against what it was allowed.
//! - [`monitor`]: the kernel programs that watch and deny, and a call's own resolver.
//! - [`policy`]: the rules a call is decided by, with the argument checks and DLP detectors.
//! - [`sandbox`]: the confined launch (namespaces, landlock, seccomp, cgroup, limits).
//! - [`bus`]: what guard does and sees, fanned out as events.
//! - [`call`]: what every stage knows of a call (its peer, intent, decision, plan).
//!
//! [`client`] is the other side of the socket, for the binaries.
pub mod approval;
pub mod audit;
pub mod bus;
pub mod call;
pub mod callers;
pub mod client;
pub mod daemon;
pub mod export;
pub mod launch;
pub mod monitor;
pub mod policy;
pub mod protocol;
pub mod receipt;
pub mod review;
pub mod sandbox;
pub mod socket;
