//! The persistent DP's makespans on the committed chains (`chains/*.json`),
//! pinned, at 500 slots and two budgets per chain: a tenth and half of the
//! way from the smallest feasible budget to store-all's peak.
//!
//! The pinned values were produced by the straightforward triple loop of
//! `tests/suite/reference/mod.rs` (the DP as it was before the optimisation of
//! issue 8), by running
//! `cargo test --release --test suite persistent_pinned:: -- --ignored --nocapture print_pins`.
//! The test also runs that reference again on every case, so a wrong pin
//! cannot hide a wrong solver; if a chain file changes (its budget below no
//! longer matches), print the pins again and review the difference.

use crate::reference;

use rayon::prelude::*;
use reference::{Reference, store_all_peak};
use remat::Chain;
use remat::slots::{SlotChain, Slots};
use remat::solve::dp;
use remat::solve::persistent::Table;

const SLOTS: usize = 500;

/// (chain file, budget in bytes, makespan or `None` when infeasible).
#[rustfmt::skip]
const PINS: &[(&str, u64, Option<f64>)] = &[
    ("cheap-recompute.json", 528482394, Some(119.2)),
    ("cheap-recompute.json", 964689970, Some(81.95)),
    ("densenet121-224-b32.json", 1099136211, Some(25.4241942)),
    ("densenet121-224-b32.json", 2473313056, Some(22.5310282)),
    ("densenet121-224-b8.json", 274809147, Some(6.38066678)),
    ("densenet121-224-b8.json", 618453736, Some(5.65519428)),
    ("densenet201-224-b32.json", 1333215238, Some(40.077995200000004)),
    ("densenet201-224-b32.json", 3643708192, Some(35.6711112)),
    ("densenet201-224-b8.json", 333372526, Some(10.09467678)),
    ("densenet201-224-b8.json", 911270632, Some(8.990123780000001)),
    ("gpt2-small-s1024-b8.json", 8220218572, Some(516.2603599999999)),
    ("gpt2-small-s1024-b8.json", 14565394862, Some(479.0643599999998)),
    ("gpt2-xl-s1024-b4-bf16.json", 6904076483, Some(360.77380999999957)),
    ("gpt2-xl-s1024-b4-bf16.json", 21252534416, Some(320.4178099999998)),
    ("inception_v3-299-b32.json", 1151998912, Some(21.120665799999998)),
    ("inception_v3-299-b32.json", 2072058560, Some(19.0036658)),
    ("resnet1001-224-b32.json", 108156069819, Some(7601.559558112003)),
    ("resnet1001-224-b32.json", 488584565096, Some(6908.402893111994)),
    ("resnet1001-224-b8.json", 27039196965, Some(1900.2808497377998)),
    ("resnet1001-224-b8.json", 122147038826, Some(1726.9916660577978)),
    ("resnet101-1000-b1.json", 761445927, Some(20.885976846)),
    ("resnet101-1000-b1.json", 1571375638, Some(18.461676846000003)),
    ("resnet101-1000-b8.json", 6091199557, Some(166.95015478)),
    ("resnet101-1000-b8.json", 12569489788, Some(147.56075478000002)),
    ("resnet101-224-b32.json", 1218818179, Some(33.143349199999996)),
    ("resnet101-224-b32.json", 2504160898, Some(29.359749200000003)),
    ("resnet101-224-b8.json", 304743685, Some(8.313058779999997)),
    ("resnet101-224-b8.json", 626202428, Some(7.3503187799999985)),
    ("resnet152-224-b32.json", 1380684317, Some(47.92754919999999)),
    ("resnet152-224-b32.json", 3313491586, Some(42.0783492)),
    ("resnet152-224-b8.json", 345224044, Some(11.995288779999997)),
    ("resnet152-224-b8.json", 828604220, Some(10.53292878)),
    ("resnet18-224-b32.json", 553947180, Some(4.9816792)),
    ("resnet18-224-b32.json", 628891900, Some(4.860709199999999)),
    ("resnet18-224-b8.json", 138489900, Some(1.24806638)),
    ("resnet18-224-b8.json", 157237500, Some(1.21781638)),
    ("resnet200-224-b32.json", 1627319222, Some(67.80634919999999)),
    ("resnet200-224-b32.json", 4546666114, Some(59.7738492)),
    ("resnet200-224-b8.json", 406890143, Some(16.976928779999998)),
    ("resnet200-224-b8.json", 1136934716, Some(14.967438780000002)),
    ("resnet50-224-b32.json", 1087777718, Some(20.935749199999997)),
    ("resnet50-224-b32.json", 1848958594, Some(18.441949199999996)),
    ("resnet50-224-b8.json", 271967903, Some(5.24492878)),
    ("resnet50-224-b8.json", 462323516, Some(4.62059878)),
    ("rotor-fc6.json", 89130836, Some(56.17)),
    ("rotor-fc6.json", 99384181, Some(43.62)),
    ("vgg16-224-b32.json", 2109216900, Some(27.495775199999997)),
    ("vgg16-224-b32.json", 2242208500, Some(27.231175199999996)),
];

fn load(file: &str) -> Chain {
    let path = format!("{}/chains/{file}", env!("CARGO_MANIFEST_DIR"));
    Chain::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The chain files without recording options, sorted. The reference is the
/// DP before options (issue 24): chains with options are checked against a
/// brute force over the persistent class instead (`tests/suite/options_persistent.rs`),
/// and only the zoo's `-options` files have them.
fn chain_files() -> Vec<String> {
    let dir = format!("{}/chains", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".json"))
        .collect();
    files.sort();
    files.retain(|f| {
        let options = load(f).has_options();
        assert_eq!(options, f.ends_with("-options.json"), "{f}: only the zoo's -options files have options");
        !options
    });
    files
}

/// The pinned budgets of a chain: a tenth and half of the way from the
/// smallest budget the DP meets with 500 slots to store-all's peak.
fn budgets(chain: &Chain) -> [u64; 2] {
    let peak = store_all_peak(chain);
    let min = dp::min_budget::<dp::Persistent>(chain, SLOTS).unwrap();
    [min + (peak - min) / 10, min + (peak - min) / 2]
}

/// The reference's makespan at `budget`, or `None` when infeasible.
fn reference(chain: &Chain, budget: u64) -> Option<f64> {
    let sc = SlotChain::new(chain, Slots::new(budget, SLOTS));
    let table = Reference::<f64>::build(sc.clone());
    Some(table.makespan(sc.slots.capacity)).filter(|m| m.is_finite())
}

fn optimised(chain: &Chain, budget: u64) -> Option<f64> {
    let sc = SlotChain::new(chain, Slots::new(budget, SLOTS));
    let table = Table::build(sc.clone(), None);
    Some(table.makespan(sc.slots.capacity)).filter(|m| m.is_finite())
}

fn committed_chains_keep_their_pinned_makespans() {
    let files = chain_files();
    assert!(files.contains(&"rotor-fc6.json".to_string()));
    let pinned: Vec<&str> = PINS.iter().map(|p| p.0).collect();
    for file in &files {
        assert_eq!(pinned.iter().filter(|p| *p == file).count(), 2, "{file} has no pins: print them (see the top)");
    }
    PINS.par_iter().for_each(|&(file, budget, pin)| {
        let chain = load(file);
        assert!(budgets(&chain).contains(&budget), "{file} changed: print the pins again (see the top)");
        let want = reference(&chain, budget);
        assert_eq!(
            want.map(f64::to_bits),
            pin.map(f64::to_bits),
            "{file} at {budget}: reference {want:?}, pin {pin:?}"
        );
        let got = optimised(&chain, budget);
        assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "{file} at {budget}: {got:?}, reference {want:?}");
    });
}

/// Prints the pins with the reference implementation (see the top).
#[test]
#[ignore]
fn print_pins() {
    let cases: Vec<(String, u64)> =
        chain_files().into_iter().flat_map(|f| budgets(&load(&f)).map(|b| (f.clone(), b))).collect();
    let pins: Vec<String> = cases
        .par_iter()
        .map(|(file, budget)| format!("    ({file:?}, {budget}, {:?}),", reference(&load(file), *budget)))
        .collect();
    println!("{}", pins.join("\n"));
}

/// This file's case of half a minute or more: the README's test command
/// leaves it out (`cargo test -- --skip ::slow::`), CI runs it after
/// (`.ci/run`), as `tools/test-all.sh --slow` does.
mod slow {
    #[test]
    fn committed_chains_keep_their_pinned_makespans() {
        super::committed_chains_keep_their_pinned_makespans();
    }
}
