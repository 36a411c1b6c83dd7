//! Where the floating DP is not optimal: chains whose every optimum works below
//! a held activation (not nested), so no recurrence over (s, t, l, m) states
//! finds it. The paper's Lemma 4.4 claims an optimum that is weakly persistent
//! (nested) always exists; in this model it does not. Each case replays the
//! better schedule with the simulator, checks exhaustive search finds it, and
//! checks the floating DP equals the nested optimum instead.

use remat::solve::dp;
use remat::solve::{Algorithm, SolveError, any_min_budget, exhaustive, floating, solve};
use remat::{Chain, Op, schedule::parse_operations, simulate, simulate_within};

use crate::common;
use common::exact;

/// Index of the first forward whose input is not the highest activation held.
fn first_non_nested(chain: &Chain, ops: &[Op]) -> Option<usize> {
    // 0: absent, 1: plain a^l, 2: abar^l (docs/model.md's operation table).
    let mut held = vec![0u8; chain.len() + 2];
    held[0] = 1;
    for (i, &op) in ops.iter().enumerate() {
        let top = held.iter().rposition(|&h| h != 0).unwrap();
        let l = op.stage();
        match op {
            Op::FAll(..) | Op::FCk(_) | Op::FNone(_) if l - 1 != top => return Some(i),
            Op::FAll(..) => held[l] = 2,
            Op::FCk(_) => held[l] = 1,
            Op::FNone(_) => (held[l], held[l - 1]) = (1, 0),
            Op::B(_) => {
                held[l] = 0;
                if held[l - 1] == 1 {
                    held[l - 1] = 0;
                }
            }
        }
    }
    None
}

/// Two stages: the loss's forward needs 15 bytes of workspace, stage 1's 10,
/// and delta^2 is 10 bytes. a^1 (5 bytes) must not be held during F_all^3 nor
/// recomputed beside delta^2, so the only way to 15 bytes recomputes it below
/// a^2 after F_all^3, before B^3: F_all^1 runs while a^2 is held.
const TWO_STAGES: &str = r#"{"name": "non-nested-min-peak", "input_size": 0, "stages": [
    {"forward_time": 1, "backward_time": 1, "output_size": 5, "saved_size": 5, "gradient_size": 0, "forward_overhead": 10},
    {"forward_time": 1, "backward_time": 1, "output_size": 0, "saved_size": 0, "gradient_size": 10}],
    "loss": {"forward_overhead": 15}}"#;

#[test]
fn smallest_budget_can_need_a_non_nested_schedule() {
    let chain = Chain::from_json(TWO_STAGES).unwrap();
    let better = parse_operations("F_ck^1 F_none^2 F_all^3 F_all^1 B^3 F_all^2 B^2 B^1").unwrap();
    let replay = simulate(&chain, &better).unwrap();
    assert_eq!(first_non_nested(&chain, &better), Some(3), "F_all^1 runs below a^2");
    let (any, _) = exhaustive::min_peak(&chain);
    assert_eq!(any, replay.peak_memory, "the hand schedule reaches the true minimum");
    let nested = exhaustive::min_peak_nested(&chain).0;
    assert_eq!(dp::min_peak_exact::<dp::Floating>(&chain), nested);
    assert!(nested > any, "nested {nested} vs any {any}");
    println!("smallest budget: any schedule {any} bytes, nested schedules {nested} bytes");

    // The user-facing consequences: floating refuses a budget that works, and
    // names its own minimum; the any-schedule minimum is still exact.
    match solve(&chain, any, Algorithm::Floating, &exact(any)) {
        Err(SolveError::Infeasible { min_budget, .. }) => assert_eq!(min_budget, Some(nested)),
        other => panic!("expected infeasible, got {other:?}"),
    }
    assert!(solve(&chain, any, Algorithm::Exhaustive, &exact(any)).is_ok());
    assert!(solve(&chain, any, Algorithm::Auto, &exact(any)).is_ok(), "auto runs exhaustive on small chains");
    assert_eq!(
        {
            let a = any_min_budget(&chain).unwrap();
            (a.lower == a.upper).then_some(a.upper)
        },
        Some(any)
    );
    let bounds = any_min_budget(&chain).unwrap();
    assert_eq!((bounds.lower, bounds.upper), (any, any));
    assert!(floating::any_peak_lower_bound(&chain) <= any);
}

/// Four stages, only F^3 takes time. a^3 is free to keep (0 bytes); a^2 must
/// not be held beside abar^5 nor recomputed beside delta^3 (4 bytes, while F^2
/// needs 4 of workspace). The fastest schedule keeps a^3 through B^5 and
/// rebuilds a^2 below it in phase 4; nested schedules recompute F^3 instead.
const FOUR_STAGES: &str = r#"{"name": "non-nested-time", "input_size": 0, "stages": [
    {"forward_time": 0, "backward_time": 0, "output_size": 0, "saved_size": 0},
    {"forward_time": 0, "backward_time": 0, "output_size": 1, "saved_size": 1, "gradient_size": 0, "forward_overhead": 4},
    {"forward_time": 1, "backward_time": 0, "output_size": 0, "saved_size": 1, "gradient_size": 4},
    {"forward_time": 0, "backward_time": 0, "output_size": 0, "saved_size": 1}],
    "loss": {"output_size": 2, "saved_size": 6, "gradient_size": 0}}"#;

#[test]
fn fastest_schedule_can_be_non_nested() {
    let chain = Chain::from_json(FOUR_STAGES).unwrap();
    let budget = 6;
    let better = parse_operations(
        "F_ck^1 F_none^2 F_none^3 F_ck^4 F_all^5 B^5 F_ck^1 F_none^2 F_all^4 B^4 F_all^3 B^3 \
         F_ck^1 F_all^2 B^2 F_all^1 B^1",
    )
    .unwrap();
    let replay = simulate_within(&chain, &better, budget).unwrap();
    assert_eq!(first_non_nested(&chain, &better), Some(6), "F_ck^1 runs below the kept a^3");
    let (any, _) = exhaustive::fastest(&chain, budget).unwrap();
    assert_eq!(any, replay.makespan, "the hand schedule is optimal");
    let (nested, ops) = exhaustive::fastest_nested(&chain, budget).unwrap();
    assert_eq!(first_non_nested(&chain, &ops), None);
    let floating = solve(&chain, budget, Algorithm::Floating, &exact(budget)).unwrap();
    assert_eq!(floating.schedule.makespan, nested);
    assert!(nested > any, "nested {nested} vs any {any}");
    println!("budget {budget}: fastest schedule {any}, fastest nested (floating) {nested}");
    // The nested optimum recomputes F^3 once more; with a budget one byte
    // larger a nested schedule keeps a^2 and both agree again.
    let roomier = solve(&chain, budget + 1, Algorithm::Floating, &exact(budget + 1)).unwrap();
    assert_eq!(roomier.schedule.makespan, exhaustive::fastest(&chain, budget + 1).unwrap().0);
}
