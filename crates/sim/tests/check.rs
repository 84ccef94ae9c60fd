//! The fault checker checks what it claims: every fault class is injected, the invariants
//! hold for punctual, and a broken guarantee is reported with the seed that replays it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use punctual_sim::check::{CheckConfig, FAULT_CLASSES, INVARIANTS, check, run_seed};

#[test]
fn punctual_keeps_every_invariant_while_every_fault_class_is_injected() {
    let r = check(&CheckConfig::new(150, 1), |_, _| {});
    assert_eq!(r.violations.len(), INVARIANTS.len());
    assert!(r.violations.values().all(|n| *n == 0), "{:#?}", r.first_violation);
    for class in FAULT_CLASSES {
        assert!(r.faults_injected[class] > 0, "{class} was never injected: {:#?}", r.faults_injected);
    }
}

#[test]
fn a_provider_without_idempotency_keys_shows_up_as_double_effects_with_a_replayable_seed() {
    let r = check(&CheckConfig { honours_keys: false, ..CheckConfig::new(60, 1) }, |_, _| {});
    assert!(r.violations["I1"] > 0, "{:#?}", r.violations);
    let v = r.first_violation.expect("a violation");
    assert!(v.replay.contains(&format!("--first-seed {}", v.seed)), "{v:?}");
    // The seed replays exactly.
    let again = run_seed(v.seed, 40, false);
    assert!(again.violations.iter().any(|w| w.invariant == v.invariant && w.reminder_id == v.reminder_id));
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let (a, b) = (run_seed(7, 40, true), run_seed(7, 40, true));
    assert_eq!(a.faults, b.faults);
    assert_eq!(a.outcomes, b.outcomes);
}
