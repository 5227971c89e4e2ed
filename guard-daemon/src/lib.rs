//! guard: decide, confine and watch the tool calls of AI agents.
//!
//! The way of a call, top-down: [`server`] accepts it on the socket ([`conn`], [`protocol`]),
//! [`access`] checks who sent it, [`fair`] counts its connection against its uid's share,
//! [`calls`] admits it, [`policy`] decides the [`intent`] ([`decision`], [`detect`]), [`audit`]
//! records the decision, [`approval`] holds a call for a human when the policy says so, and
//! [`call`] carries an allowed call through: a [`cgroup`], a resolver of its own ([`dns`]), the
//! kernel's allow-lists ([`monitor`], reading kernel structs at offsets from [`btf`]), the
//! confined launch ([`sandbox`]) of its [`plan`], and the [`receipt`] of what it did
//! ([`opens`]), published on the [`bus`]. [`daemon`] holds the shared state and the start-up,
//! proven by [`selftest`], guarded by [`lock`] and announced by `daemon::systemd`. [`stages`] times a
//! call's way through all of it; [`client`] and [`cli`] serve the binaries.
pub mod access;
pub mod addr;
pub mod agents;
pub mod approval;
pub mod approver;
pub mod audit;
pub mod btf;
pub mod bus;
pub mod call;
pub mod calls;
pub mod cgroup;
pub mod cli;
pub mod client;
pub mod confined;
pub mod conn;
pub mod daemon;
pub mod decision;
pub mod detect;
pub mod dns;
pub mod export;
pub mod fair;
pub mod hash;
pub mod hold;
pub mod hook;
pub mod intent;
pub mod judge;
pub mod lock;
pub mod metrics;
pub mod monitor;
pub mod notifier;
pub mod opens;
pub mod peer;
pub mod plan;
pub mod policy;
pub mod protocol;
pub mod receipt;
pub mod review;
pub mod sandbox;
pub mod selftest;
pub mod server;
pub mod stages;
pub mod sysname;
pub mod ts;
pub mod violations;
