//! Recording options (issue 24) in exhaustive search and the floating DP, on
//! thousands of random small chains (`synthetic::small_chain` with
//! `synthetic::with_options`: one to three options a stage), at every budget
//! from infeasible to store-all.
//!
//! - **Exhaustive search with options** is never slower than on the same
//!   chain with its options stripped, its schedules replay within the budget
//!   at the makespan it claims, and it equals an independent oracle: a
//!   schedule records each stage exactly once (abar^l is only freed by B^l,
//!   after which no forward of l may run), so the optimum with options is the
//!   best, over every assignment of one option to each stage, of exhaustive
//!   search on the chain whose stages *are* those options (exact when an
//!   option's forward overhead is its stage's, which those chains are made
//!   to have). Nested search is checked the same way.
//! - **The floating DP** with exact slots equals `exhaustive::fastest_nested`
//!   (the class it is exact for) at every budget, its smallest budget equals
//!   nested search's, every schedule it emits replays at the makespan it
//!   claims, it is never slower than on the stripped chain, and never slower
//!   than the baselines (store-all, checkpoint_sequential, Chen, revolve:
//!   nested schedules that record with option 0).
//! - **auto** on chains with options returns schedules that replay, and the
//!   guards keep exhaustive search from running away on chains with many
//!   options.
//! - **Repeated stages that differ only in their options** do not share the
//!   floating DP's rows (issue 25's sharing keys stages by their own
//!   figures), and its work estimate counts the F_all options.

use remat::slots::{SlotChain, Slots};
use remat::solve::{Algorithm, SolveError, SolveOptions, auto_choice, baselines, exhaustive, floating, solve};
use remat::synthetic::{Rng, small_chain, with_options};
use remat::{Chain, Op, simulate_within};

use crate::common;
use common::exact;

type Search = fn(&Chain, u64) -> Option<(f64, Vec<Op>)>;

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(1.0)
}

/// `chain` without its options.
fn stripped(chain: &Chain) -> Chain {
    let mut stages = chain.stages().to_vec();
    stages.iter_mut().for_each(|s| s.options.clear());
    Chain::new("stripped", chain.input_size(), stages, chain.loss().clone()).unwrap()
}

/// `chain` whose stage l is recorded as its option `pick[l - 1]` (its own
/// figures replaced by the option's, no options left). The same model as
/// `chain` restricted to that option when the option's forward overhead is
/// the stage's (F_ck and F_none keep using o_f^l).
fn assigned(chain: &Chain, pick: &[usize]) -> Chain {
    let mut stages = chain.stages().to_vec();
    for (l, (s, &o)) in stages.iter_mut().zip(pick).enumerate() {
        let r = chain.recording(l + 1, o);
        assert_eq!(r.forward_overhead, s.forward_overhead, "the oracle needs equal forward overheads");
        s.saved_size = r.saved_size;
        s.backward_time = r.backward_time;
        s.backward_overhead = r.backward_overhead;
        s.options.clear();
    }
    Chain::new("assigned", chain.input_size(), stages, chain.loss().clone()).unwrap()
}

/// Every assignment of one option to each stage of `chain`.
fn assignments(chain: &Chain) -> Vec<Vec<usize>> {
    let mut all = vec![Vec::new()];
    for l in 1..=chain.len() {
        all = all
            .into_iter()
            .flat_map(|p| {
                (0..chain.option_count(l)).map(move |o| {
                    let mut q = p.clone();
                    q.push(o);
                    q
                })
            })
            .collect();
    }
    all
}

/// The optimum of `search` at every budget in `lo..=hi` (a step function of
/// the budget: a schedule found at M with peak p is optimal on p..=M), each
/// schedule replayed within its budget at the makespan the search claims.
fn profile(chain: &Chain, lo: u64, hi: u64, search: Search) -> Vec<Option<f64>> {
    let mut best = vec![None; (hi - lo + 1) as usize];
    let mut m = hi;
    while let Some((time, ops)) = search(chain, m) {
        let replay = simulate_within(chain, &ops, m).unwrap_or_else(|e| panic!("{e}: {chain:?} at {m}"));
        assert!(same(replay.makespan, time), "claimed {time}, replayed {}: {chain:?} at {m}", replay.makespan);
        for b in replay.peak_memory.max(lo)..=m {
            best[(b - lo) as usize] = Some(time);
        }
        if replay.peak_memory <= lo {
            break;
        }
        m = replay.peak_memory - 1;
    }
    best
}

/// A random small chain with one to three options a stage; with `oracle`,
/// every option's forward overhead is its stage's (see [`assigned`]).
fn chain_with_options(rng: &mut Rng, len: usize, oracle: bool) -> Chain {
    let plain = small_chain(rng, len, 8, 5);
    let chain = with_options(rng, &plain, 3, 5);
    if !oracle {
        return chain;
    }
    let mut stages = chain.stages().to_vec();
    for s in &mut stages {
        let of = s.forward_overhead;
        s.options.iter_mut().for_each(|o| o.forward_overhead = of);
    }
    Chain::new(chain.name(), chain.input_size(), stages, chain.loss().clone()).unwrap()
}

fn store_all_peak(chain: &Chain) -> u64 {
    exhaustive::fastest(chain, u64::MAX / 4).map(|(_, ops)| remat::simulate(chain, &ops).unwrap().peak_memory).unwrap()
}

#[derive(Default, Debug)]
struct Counts {
    chains: usize,
    cases: usize,
    options_faster: usize,
    options_feasible_only: usize,
    option_used: usize,
    oracle_chains: usize,
    oracle_checks: usize,
}

/// (a) Exhaustive search with options against the stripped chain and, on
/// chains of at most 4 stages, against every option assignment.
#[test]
fn exhaustive_search_takes_the_best_option() {
    const CHAINS: usize = 2000;
    let mut rng = Rng::new(2424);
    let mut c = Counts::default();
    for i in 0..CHAINS {
        let len = 1 + i % 5;
        let oracle = len <= 4 && i % 2 == 0;
        let chain = chain_with_options(&mut rng, len, oracle);
        let plain = stripped(&chain);
        c.chains += 1;
        let (min_opt, ops) = exhaustive::min_peak(&chain);
        assert_eq!(simulate_within(&chain, &ops, min_opt).unwrap().peak_memory, min_opt);
        let min_plain = exhaustive::min_peak(&plain).0;
        assert!(min_opt <= min_plain, "options raise the smallest budget: {chain:?}");
        let hi = store_all_peak(&chain).max(store_all_peak(&plain));
        let lo = min_opt.saturating_sub(1);
        let with = profile(&chain, lo, hi, exhaustive::fastest);
        let without = profile(&plain, lo, hi, exhaustive::fastest);
        assert_eq!(with[0].is_some(), lo == min_opt, "feasibility starts at the smallest budget: {chain:?}");
        for (k, (w, p)) in with.iter().zip(&without).enumerate() {
            c.cases += 1;
            let budget = lo + k as u64;
            match (w, p) {
                (Some(w), Some(p)) => {
                    assert!(*w <= p + 1e-9, "options slower: {w} > {p}: {chain:?} at {budget}");
                    c.options_faster += (!same(*w, *p)) as usize;
                }
                (Some(_), None) => c.options_feasible_only += 1,
                (None, Some(_)) => panic!("stripped feasible, options not: {chain:?} at {budget}"),
                (None, None) => {}
            }
        }
        c.option_used += ops.iter().any(|op| op.option() > 0) as usize;
        if oracle {
            c.oracle_chains += 1;
            // Three budgets: the smallest, store-all's, and one between.
            for budget in [min_opt, (min_opt + hi) / 2, hi] {
                for (search, nested) in [(exhaustive::fastest as Search, false), (exhaustive::fastest_nested, true)] {
                    let best = assignments(&chain)
                        .iter()
                        .filter_map(|pick| search(&assigned(&chain, pick), budget).map(|(t, _)| t))
                        .fold(None, |b: Option<f64>, t| Some(b.map_or(t, |b| b.min(t))));
                    let got = search(&chain, budget);
                    match (got.as_ref().map(|g| g.0), best) {
                        (Some(g), Some(b)) => {
                            assert!(same(g, b), "nested {nested}: {g} != oracle {b}: {chain:?} at {budget}")
                        }
                        (None, None) => {}
                        (g, b) => panic!("nested {nested}: {g:?} against oracle {b:?}: {chain:?} at {budget}"),
                    }
                    if let Some((time, ops)) = got {
                        let replay = simulate_within(&chain, &ops, budget).unwrap();
                        assert!(same(replay.makespan, time));
                    }
                    c.oracle_checks += 1;
                }
            }
            let min_oracle = assignments(&chain).iter().map(|p| exhaustive::min_peak(&assigned(&chain, p)).0).min();
            assert_eq!(Some(min_opt), min_oracle, "smallest budget against the oracle: {chain:?}");
        }
    }
    println!("exhaustive with options: {c:?}");
    assert_eq!(c.chains, CHAINS);
    // The sample exercises the options: they must win somewhere.
    assert!(c.options_faster > 100 && c.options_feasible_only > 10 && c.option_used > 100, "{c:?}");
    assert!(c.oracle_checks >= 3000, "{c:?}");
}

/// (b) and (c): the floating DP with options at every budget, against nested
/// exhaustive search, the stripped chain and the baselines.
#[test]
fn floating_is_the_nested_optimum_with_options() {
    const CHAINS: usize = 2500;
    let mut rng = Rng::new(2425);
    let mut c = Counts::default();
    let (mut baseline_checks, mut beats_baselines) = (0usize, 0usize);
    for i in 0..CHAINS {
        let chain = chain_with_options(&mut rng, 1 + i % 5, false);
        let plain = stripped(&chain);
        c.chains += 1;
        let nested_min = exhaustive::min_peak_nested(&chain).0;
        assert_eq!(remat::solve::dp::min_peak_exact::<remat::solve::dp::Floating>(&chain), nested_min, "{chain:?}");
        let min_any = exhaustive::min_peak(&chain).0;
        assert!(floating::any_peak_lower_bound(&chain) <= min_any, "lower bound: {chain:?}");
        let hi = store_all_peak(&chain).max(store_all_peak(&plain));
        let lo = min_any.saturating_sub(1);
        let nested = profile(&chain, lo, hi, exhaustive::fastest_nested);
        // One table at exact slots answers every budget up to hi.
        let table = floating::Thresholds::new(SlotChain::new(&chain, Slots::with_slot(hi, 1))).fill(None);
        let table_plain = floating::Thresholds::new(SlotChain::new(&plain, Slots::with_slot(hi, 1))).fill(None);
        for budget in lo..=hi {
            c.cases += 1;
            let k = (budget - lo) as usize;
            let m = budget as usize;
            let time = table.makespan(m);
            let want = nested[k].unwrap_or(f64::INFINITY);
            assert!(
                (time.is_infinite() && want.is_infinite()) || same(time, want),
                "floating {time} != nested optimum {want}: {chain:?} at {budget}"
            );
            let plain_time = table_plain.makespan(m);
            assert!(time <= plain_time + 1e-9, "options slower: {chain:?} at {budget}");
            if !time.is_finite() {
                assert_eq!(table.sequence(m), None);
                continue;
            }
            c.options_faster += (time < plain_time - 1e-9) as usize;
            let ops = table.sequence(m).unwrap();
            c.option_used += ops.iter().any(|op| op.option() > 0) as usize;
            let replay = simulate_within(&chain, &ops, budget).unwrap_or_else(|e| panic!("{e}: {chain:?} at {budget}"));
            assert!(same(replay.makespan, time), "claimed {time}, replayed {}: {chain:?}", replay.makespan);
            // (c) never slower than a baseline at the same budget.
            for b in [
                Algorithm::StoreAll,
                Algorithm::Sequential,
                Algorithm::ChenGreedy,
                Algorithm::ChenSqrt,
                Algorithm::Revolve,
            ] {
                match baselines::schedule(&chain, budget, b, &exact(budget)) {
                    Ok(plan) => {
                        baseline_checks += 1;
                        assert!(time <= plan.makespan + 1e-9, "{b} beats floating: {chain:?} at {budget}");
                        beats_baselines += (time < plan.makespan - 1e-9) as usize;
                    }
                    Err(SolveError::Infeasible { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
        // The whole `--algorithm floating` path (table, exact persistent, replay) at three budgets.
        for budget in [nested_min, (nested_min + hi) / 2, hi] {
            let sol = solve(&chain, budget, Algorithm::Floating, &exact(budget)).unwrap();
            let want = nested[(budget - lo) as usize].unwrap();
            assert!(same(sol.schedule.makespan, want), "solve floating: {chain:?} at {budget}");
        }
    }
    println!(
        "floating with options: {c:?}; {baseline_checks} baseline comparisons, strictly faster in {beats_baselines}"
    );
    assert_eq!(c.chains, CHAINS);
    assert!(c.options_faster > 100 && c.option_used > 100, "{c:?}");
    assert!(baseline_checks > 10_000 && beats_baselines > 1000);
}

/// `auto` on chains with options, short (exhaustive) and longer (a DP):
/// every schedule replays (solve checks it) and options are used.
#[test]
fn auto_replays_on_chains_with_options() {
    let mut rng = Rng::new(2426);
    let mut used = 0;
    for i in 0..200 {
        let len = if i % 4 == 0 { 14 } else { 1 + i % 6 };
        let chain = chain_with_options(&mut rng, len, false);
        // Store-all's peak is at most every figure added up (the loss included).
        let n = chain.len() + 1;
        let hi = (0..=n).map(|l| chain.output_size(l) + chain.gradient_size(l)).sum::<u64>()
            + (1..=n)
                .map(|l| {
                    chain.saved_size(l).max(chain.stage(l).options.iter().map(|o| o.saved_size).max().unwrap_or(0))
                })
                .sum::<u64>()
            + (1..=n).map(|l| chain.forward_overhead(l) + chain.backward_overhead(l) + 3).sum::<u64>();
        let min = remat::solve::min_budget(&chain, Algorithm::Auto, &SolveOptions::default()).unwrap().unwrap();
        assert!(min <= hi, "{chain:?}");
        for budget in [min, (min + hi) / 2, hi] {
            let sol = solve(&chain, budget, Algorithm::Auto, &SolveOptions::default())
                .unwrap_or_else(|e| panic!("{e}: {chain:?} at {budget}"));
            assert!(sol.replay.peak_memory <= budget);
            used += sol.schedule.operations.iter().any(|op| op.option() > 0) as usize;
        }
    }
    assert!(used > 50, "{used}");
}

/// Exhaustive search counts options in its size: a chain with many options
/// is refused with a clear error, and `auto` does not send it there.
#[test]
fn exhaustive_limits_count_options() {
    let mut rng = Rng::new(7);
    let plain = small_chain(&mut rng, 8, 8, 5);
    assert_eq!(exhaustive::equivalent_stages(&plain), 8);
    let mut stages = plain.stages().to_vec();
    for s in &mut stages {
        for k in 0..15 {
            s.options.push(remat::chain::StageOption {
                name: None,
                saved_size: s.output_size + k % 3,
                recompute_time: k as f64,
                forward_overhead: 0,
                backward_overhead: 0,
                backward_frees: 0,
            });
        }
    }
    let many = Chain::new("many", plain.input_size(), stages, plain.loss().clone()).unwrap();
    // 8 stages of 18 states each (absent, plain, 16 options): 3^21 < 18^8 <= 3^22.
    assert_eq!(exhaustive::equivalent_stages(&many), 22);
    let e = solve(&many, 1 << 20, Algorithm::Exhaustive, &SolveOptions::default()).unwrap_err();
    assert!(matches!(e, SolveError::TooLarge { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("as many memory states as 22 stages without options"), "{text}");
    let e = remat::solve::min_budget(&many, Algorithm::Exhaustive, &SolveOptions::default()).unwrap_err();
    assert!(e.to_string().contains("22 stages"), "{e}");
    let choice = auto_choice(&many, 1 << 20, &SolveOptions::default());
    assert_ne!(choice.algorithm, Algorithm::Exhaustive, "{choice:?}");
    let sol = solve(&many, 1 << 20, Algorithm::Auto, &SolveOptions::default()).unwrap();
    assert!(sol.replay.peak_memory <= 1 << 20);
    // Two options on each of 8 stages: 3^10 < 4^8 <= 3^11, over auto's 10.
    let mut stages = plain.stages().to_vec();
    stages.iter_mut().for_each(|s| s.options = many.stages()[0].options[..1].to_vec());
    let two = Chain::new("two", plain.input_size(), stages, plain.loss().clone()).unwrap();
    assert_eq!(exhaustive::equivalent_stages(&two), 11);
    assert_ne!(auto_choice(&two, 1 << 20, &SolveOptions::default()).algorithm, Algorithm::Exhaustive);
}

/// Repeated stages that differ only in their options: the floating DP that
/// shares rows between equal groups (issue 25) must not share theirs. The
/// shared plan equals the plain one at every budget, and its estimate counts
/// the F_all options it evaluates (the progress total is the work done).
#[test]
fn repeated_stages_with_different_options_are_not_shared() {
    use remat::chain::{Stage, StageOption};
    let option = |saved: u64, recompute: f64| StageOption {
        name: None,
        saved_size: saved,
        recompute_time: recompute,
        forward_overhead: 0,
        backward_overhead: 1,
        backward_frees: 0,
    };
    let mut stages = vec![Stage::simple(1.0, 2.0, 4, 9); 12];
    for (l, s) in stages.iter_mut().enumerate() {
        s.options = match l {
            3 => vec![option(4, 0.5)],
            8 => vec![option(5, 0.25), option(4, 3.0)],
            _ => vec![option(6, 1.0)],
        };
    }
    let chain = Chain::new("stack-options", 4, stages, Stage::zero_loss()).unwrap();
    let top = 200;
    let slots = Slots::with_slot(top, 1);
    let plan = floating::Thresholds::new(SlotChain::new(&chain, slots));
    let est = plan.estimate();
    let upper = floating::upper_estimate_shared(&chain, slots);
    assert!(est.work <= upper.work && est.table_bytes <= upper.table_bytes, "{est:?} {upper:?}");
    let done = std::sync::atomic::AtomicU64::new(0);
    let progress = |d: u64, total: u64| {
        assert_eq!(total, est.work);
        done.store(d, std::sync::atomic::Ordering::Relaxed);
    };
    let shared = plan.fill(Some(&progress));
    assert_eq!(done.load(std::sync::atomic::Ordering::Relaxed), est.work);
    let plain = floating::Thresholds::new_plain(SlotChain::new(&chain, slots)).fill(None);
    let mut feasible = 0;
    for m in 0..=top as usize {
        let (a, b) = (shared.makespan(m), plain.makespan(m));
        assert!(a.to_bits() == b.to_bits(), "at {m}: shared {a}, plain {b}");
        if let Some(ops) = shared.sequence(m) {
            let replay = simulate_within(&chain, &ops, m as u64).unwrap();
            assert!(same(replay.makespan, a));
            feasible += 1;
        }
    }
    assert!(feasible > 50, "{feasible}");
}
