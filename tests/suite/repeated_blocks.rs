//! Issue 25: the exact fronts key sub-chains by content and solve each
//! distinct one once. On thousands of random chains built of repeated stages,
//! and on every chain of `chains/`, the shared fronts must give the makespans
//! of the plain ones (each sub-chain solved on its own) and of the slot DP at
//! one byte per slot bit for bit, the same schedules operation for operation,
//! schedules that replay within the budget, and never beat exhaustive search.

use crate::reference;

use reference::store_all_peak;
use remat::slots::{SlotChain, Slots};
use remat::solve::fronts::Fronts;
use remat::solve::persistent::Table;
use remat::solve::{Algorithm, SolveOptions, exhaustive, solve};
use remat::synthetic::{Rng, small_chain, stack};
use remat::{Chain, Stage, simulate};

/// A chain of runs of repeated stages: a pool of 1 to 3 distinct stages
/// (random figures, overheads, gradients and loss as in `small_chain`), a
/// block of 1 to 3 of them repeated 1 to `max_copies` times, between a head
/// and a tail of 0 to 2 stages from the same pool; sometimes a second block.
fn repeated_chain(rng: &mut Rng, max_copies: u64, max_stages: usize) -> Chain {
    let kinds = rng.range(1, 3) as usize;
    let pool = small_chain(rng, kinds, 8, 5);
    let pick = |rng: &mut Rng| -> Stage { pool.stages()[rng.range(0, kinds as u64 - 1) as usize].clone() };
    let mut stages: Vec<Stage> = (0..rng.range(0, 2)).map(|_| pick(rng)).collect();
    for _ in 0..rng.range(1, 2) {
        let block: Vec<Stage> = (0..rng.range(1, 3)).map(|_| pick(rng)).collect();
        for _ in 0..rng.range(1, max_copies) {
            stages.extend(block.iter().cloned());
        }
    }
    stages.extend((0..rng.range(0, 2)).map(|_| pick(rng)));
    stages.truncate(max_stages);
    Chain::new("repeated", pool.input_size(), stages, pool.loss().clone()).expect("valid")
}

/// Shared fronts against plain fronts and the one-byte slot DP at every
/// budget from 0 to above store-all's peak: the same makespan bit for bit,
/// the same schedule, and a replay within the budget at that makespan.
fn shared_fronts_equal_plain_fronts_and_the_one_byte_slot_dp() {
    let mut rng = Rng::new(2501);
    let (mut chains, mut shared_fewer, mut feasible) = (0, 0, 0);
    for _ in 0..2000 {
        let chain = repeated_chain(&mut rng, 8, 24);
        let top = store_all_peak(&chain) + 2;
        let table = Table::build(SlotChain::new(&chain, Slots::new(top, top as usize)), None);
        let plain = Fronts::build_unshared(&chain, top);
        let shared = Fronts::build(&chain, top);
        chains += 1;
        shared_fewer += usize::from(shared.distinct_cells() < plain.distinct_cells());
        for budget in 0..=top {
            let want = table.makespan(budget as usize);
            // Built at the top budget, and (every third budget) at this
            // one: other caps.
            let here = (budget % 3 == 0).then(|| Fronts::build(&chain, budget));
            let here = here.as_ref().unwrap_or(&shared);
            for (what, got) in [("plain", plain.makespan(budget)), ("shared", shared.makespan(budget))] {
                assert_eq!(got.to_bits(), want.to_bits(), "{what} {chain:?} at {budget}");
            }
            assert_eq!(here.makespan(budget).to_bits(), want.to_bits(), "{chain:?} at {budget}");
            let ops = shared.sequence(budget);
            assert_eq!(ops, plain.sequence(budget), "{chain:?} at {budget}");
            assert_eq!(ops, here.sequence(budget), "{chain:?} at {budget}");
            assert_eq!(ops, table.sequence(budget as usize), "{chain:?} at {budget}");
            if let Some(ops) = ops {
                let replay = simulate(&chain, &ops).expect("a valid schedule");
                assert!(replay.peak_memory <= budget, "{chain:?} at {budget}");
                assert!((replay.makespan - want).abs() <= 1e-9 * want.max(1.0), "{chain:?} at {budget}");
                feasible += 1;
            }
        }
    }
    assert!(shared_fewer * 2 > chains, "only {shared_fewer} of {chains} chains shared a sub-chain");
    assert!(feasible > 10_000, "{feasible}");
}

/// The slot table keyed by content against the plain tiled one, at slot
/// counts that round sizes together (more sub-chains share) and at one byte
/// a slot: the same makespan bit for bit at every budget and the same
/// schedule; and the shared smallest peak equals the plain table's
/// threshold.
#[test]
fn shared_slot_table_equals_the_plain_one() {
    let mut rng = Rng::new(2504);
    let mut shared_path = 0;
    for i in 0..1500 {
        let chain = repeated_chain(&mut rng, 12, 40);
        let top = store_all_peak(&chain) + 2;
        let slots = [3, 10, 40, top as usize][i % 4];
        let disc = Slots::new(top, slots);
        let plain = Table::build_plain(SlotChain::new(&chain, disc));
        let shared = Table::build(SlotChain::new(&chain, disc), None);
        let n = chain.len() + 1;
        shared_path += usize::from(shared.distinct_cells() * 4 <= n * (n + 1) / 2);
        for m in 0..=disc.capacity {
            assert_eq!(shared.makespan(m).to_bits(), plain.makespan(m).to_bits(), "{chain:?} at {m} of {disc:?}");
            assert_eq!(shared.sequence(m), plain.sequence(m), "{chain:?} at {m} of {disc:?}");
        }
        let first = (0..=disc.capacity).find(|&m| plain.makespan(m).is_finite());
        let min_peak = remat::solve::persistent::min_peak_slots(&SlotChain::new(&chain, disc));
        assert_eq!(first, (min_peak <= disc.capacity).then_some(min_peak), "{chain:?} of {disc:?}");
    }
    assert!(shared_path > 300, "{shared_path}");
}

/// The floating DP keyed by content against the plain one (every group of
/// stages filled on its own), at slot counts that round sizes together and
/// at one byte a slot: the same makespan bit for bit at every budget, the
/// same schedule; and at one byte a slot on short chains, the optimum over
/// nested schedules (exhaustive search over that class).
#[test]
fn shared_floating_table_equals_the_plain_one() {
    use remat::solve::floating::Thresholds;
    let mut rng = Rng::new(2505);
    let mut nested = 0;
    for i in 0..800 {
        let chain = repeated_chain(&mut rng, 8, 24);
        let top = store_all_peak(&chain) + 2;
        let slots = [3, 10, 40, top as usize][i % 4];
        let disc = Slots::new(top, slots);
        let plain = Thresholds::new_plain(SlotChain::new(&chain, disc)).fill(None);
        let shared = Thresholds::new(SlotChain::new(&chain, disc)).fill(None);
        for m in 0..=disc.capacity {
            assert_eq!(shared.makespan(m).to_bits(), plain.makespan(m).to_bits(), "{chain:?} at {m} of {disc:?}");
            assert_eq!(shared.sequence(m), plain.sequence(m), "{chain:?} at {m} of {disc:?}");
        }
        if disc.slot == 1 && chain.len() <= 7 {
            for budget in (0..=top).step_by(3) {
                let want = exhaustive::fastest_nested(&chain, budget).map_or(f64::INFINITY, |(t, _)| t);
                let got = shared.makespan(budget as usize);
                assert!((got - want).abs() <= 1e-9 * want.max(1.0) || got == want, "{chain:?} at {budget}");
                nested += 1;
            }
        }
    }
    assert!(nested > 200, "{nested}");
}

/// With a ceiling (the makespan of some schedule: here the optimum itself,
/// or a little above), points are cut by each occurrence's limit; the shared
/// fronts cut at the largest of them and still answer the same.
#[test]
fn shared_fronts_with_a_ceiling_answer_the_same() {
    let mut rng = Rng::new(2502);
    for _ in 0..1000 {
        let chain = repeated_chain(&mut rng, 10, 30);
        let top = store_all_peak(&chain);
        for budget in [top / 3, top / 2, 2 * top / 3, top] {
            let exact = Fronts::build_unshared(&chain, budget);
            let want = exact.makespan(budget);
            if !want.is_finite() {
                continue;
            }
            for ceiling in [want, want + 1.0, 2.0 * want] {
                let cut = Fronts::build_bounded(&chain, budget, u64::MAX, ceiling).unwrap();
                assert_eq!(cut.makespan(budget).to_bits(), want.to_bits(), "{chain:?} at {budget} below {ceiling}");
                assert_eq!(cut.sequence(budget), exact.sequence(budget), "{chain:?} at {budget} below {ceiling}");
            }
        }
    }
}

/// On chains short enough for exhaustive search, the shared persistent
/// answer (through `solve`) replays within the budget and is never faster
/// than the optimum over every schedule.
#[test]
fn shared_persistent_never_beats_exhaustive_search() {
    let mut rng = Rng::new(2503);
    let mut checked = 0;
    for _ in 0..400 {
        let chain = repeated_chain(&mut rng, 4, 7);
        let top = store_all_peak(&chain);
        for budget in (0..=top).step_by(2) {
            let Some((best, _)) = exhaustive::fastest(&chain, budget) else { continue };
            let Ok(sol) = solve(&chain, budget, Algorithm::Persistent, &SolveOptions::default()) else {
                continue;
            };
            assert!(sol.schedule.peak_memory <= budget, "{chain:?} at {budget}");
            assert!(sol.schedule.makespan >= best - 1e-9 * best.max(1.0), "{chain:?} at {budget}");
            checked += 1;
        }
    }
    assert!(checked > 1000, "{checked}");
}

fn chain_files() -> Vec<(String, Chain)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("chains");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, Chain::from_json(&std::fs::read_to_string(&p).unwrap()).unwrap())
        })
        .collect()
}

/// The shared and the plain fronts at 1/2, 1/3 and 1/5 of store-all's peak.
fn assert_same_on(name: &str, chain: &Chain) {
    let peak = store_all_peak(chain);
    for budget in [peak / 2, peak / 3, peak / 5] {
        let plain = Fronts::build_unshared(chain, budget);
        let shared = Fronts::build(chain, budget);
        assert_eq!(shared.makespan(budget).to_bits(), plain.makespan(budget).to_bits(), "{name} at {budget}");
        assert_eq!(shared.sequence(budget), plain.sequence(budget), "{name} at {budget}");
        assert!(shared.distinct_cells() <= plain.distinct_cells());
        if let Some(ops) = shared.sequence(budget) {
            assert!(simulate(chain, &ops).unwrap().peak_memory <= budget, "{name} at {budget}");
        }
    }
}

/// Every chain of `chains/` but ResNet-1001 (its plain fronts take 10 to 25
/// s a budget: see `resnet1001_shared_equals_plain`), and GPT-2 XL stacks.
#[test]
fn every_shipped_chain_answers_the_same_shared() {
    for (name, chain) in chain_files() {
        if !name.starts_with("resnet1001") {
            assert_same_on(&name, &chain);
        }
    }
    let (_, gpt2) = chain_files().into_iter().find(|(n, _)| n.starts_with("gpt2-xl")).unwrap();
    for copies in [1, 2, 48, 60] {
        assert_same_on(&format!("gpt2-xl stack {copies}"), &stack(&gpt2, 1, 1, 2, copies));
    }
}

/// ResNet-1001 (batch 8 and 32): minutes in a release build, so run on
/// demand: `cargo test --release --test suite repeated_blocks:: -- --ignored`.
#[test]
#[ignore]
fn resnet1001_shared_equals_plain() {
    for (name, chain) in chain_files() {
        if name.starts_with("resnet1001") {
            assert_same_on(&name, &chain);
        }
    }
}

/// This file's case of half a minute or more: the README's test command
/// leaves it out (`cargo test -- --skip ::slow::`), CI runs it after
/// (`.ci/run`), as `tools/test-all.sh --slow` does.
mod slow {
    #[test]
    fn shared_fronts_equal_plain_fronts_and_the_one_byte_slot_dp() {
        super::shared_fronts_equal_plain_fronts_and_the_one_byte_slot_dp();
    }
}
