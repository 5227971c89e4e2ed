//! One decision against a generated policy of 100 tools and 100 rules (regexes and detectors),
//! over a mix of calls that are allowed, blocked by rules, and blocked by arguments.
//! `cargo xtask bench` reports the same workload next to its baselines.

use std::path::Path;

use guard::{call::intent::Intent, policy::Policy};

#[path = "support/policy100.rs"]
mod policy100;

fn main() {
    divan::main();
}

fn generated() -> Policy {
    match Policy::parse(Path::new("bench.toml"), &policy100::policy_text()) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

fn intents() -> Vec<Intent> {
    policy100::calls()
        .into_iter()
        .map(|(tool, args)| Intent::new(tool, args))
        .collect()
}

#[divan::bench]
fn decide(bencher: divan::Bencher) {
    let policy = generated();
    let intents = intents();
    let mut i = 0;
    bencher.bench_local(|| {
        i = (i + 1) % intents.len();
        divan::black_box(policy.decide(divan::black_box(&intents[i])))
    });
}
