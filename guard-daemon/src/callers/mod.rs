//! Who calls, over time: what a peer may do over the socket ([`access`]), which of the policy's
//! agents it is and what that agent has done ([`agents`]), the tools it was refused lately
//! ([`violations`], for the judges), whether it is barred for probing secrets ([`probes`]), and
//! why its recent calls did not run ([`reasons`]).

pub mod access;
pub mod agents;
pub mod probes;
pub mod reasons;
pub mod violations;
