//! What every stage knows of a call: who asked ([`peer`]), what for ([`intent`]), what the
//! policy decided ([`decision`]) and what that lets it run ([`plan`]), its place among the calls
//! at work ([`calls`]), where its time went ([`stages`]), and the [`gate`] its process waits at
//! until its decision is on disk; with the two ways guard writes things down everywhere,
//! [`hash`]es and timestamps ([`ts`]), and names no one can guess ([`random`]). Nothing here
//! imports a stage.

pub mod calls;
pub mod decision;
pub mod gate;
pub mod hash;
pub mod intent;
pub mod peer;
pub mod plan;
pub mod random;
pub mod stages;
pub mod ts;
