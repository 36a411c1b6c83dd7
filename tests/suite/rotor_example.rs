//! The Rotor paper's toy example (section 3.2, Table 2) as shipped in
//! chains/rotor-fc6.json.

use remat::solve::{Algorithm, SolveOptions, solve};
use remat::{Chain, Op};

const MIB: f64 = 1048576.0;

fn chain() -> Chain {
    Chain::from_json(&std::fs::read_to_string("chains/rotor-fc6.json").unwrap()).unwrap()
}

#[test]
fn store_all_matches_the_paper() {
    let c = chain();
    let sol = solve(&c, 1 << 30, Algorithm::Persistent, &SolveOptions::default()).unwrap();
    // The paper: 37.4 ms and 107 MB (B^5: a^0, abar^1..abar^5, delta^4, delta^5, o_b^5).
    assert!((sol.schedule.makespan - 37.38).abs() < 1e-9);
    assert_eq!(format!("{:.2}", sol.schedule.peak_memory as f64 / MIB), "107.00");
    assert_eq!(sol.replay.steps[sol.replay.peak_index].op, Op::B(5));
}

#[test]
fn at_90_mib_makespan_is_47_42() {
    let c = chain();
    // Table 2 lists abar^4 (10.66 MiB) below a^4 (10.68 MiB); remat raises it.
    assert_eq!(c.warnings().len(), 1);
    let budget = 90 << 20;
    for algorithm in [Algorithm::Persistent, Algorithm::Exhaustive] {
        let sol = solve(&c, budget, algorithm, &SolveOptions::default()).unwrap();
        let s = &sol.schedule;
        assert!((s.makespan - 47.42).abs() < 1e-9, "{algorithm}: {}", s.makespan);
        // The peak is at B^5 with abar^4 resident: 86.77 MiB with abar^4 raised
        // to a^4 as the model requires; with the table's 10.66 MiB it would be
        // the 86.75 MiB quoted for this example.
        assert_eq!(sol.replay.steps[sol.replay.peak_index].op, Op::B(5));
        assert_eq!(format!("{:.2}", s.peak_memory as f64 / MIB), "86.77");
        let raise = c.output_size(4) - (10.66 * MIB).round() as u64;
        assert_eq!(format!("{:.2}", (s.peak_memory - raise) as f64 / MIB), "86.75");
        assert!(s.operations.contains(&Op::FAll(4, 0)));
    }
}

#[test]
fn the_printed_sequence_is_not_valid_as_printed() {
    // Section 3.2 prints this sequence, but F_all^3 keeps its input a^2 (Table 1),
    // so a^2 is still in memory when the backward phase recomputes it. The
    // paper's Figure 2 evidently drops a^2 somewhere; the optimum remat finds at
    // 90 MiB (same makespan) keeps a^3 instead.
    let c = chain();
    let ops = remat::schedule::parse_operations(
        "F_ck^1 F_none^2 F_all^3 F_all^4 F_all^5 F_all^6 F_all^7 B^7 B^6 B^5 B^4 \
         F_ck^1 F_none^2 F_all^3 B^3 F_all^1 F_all^2 B^2 B^1",
    )
    .unwrap();
    let e = remat::simulate(&c, &ops).unwrap_err();
    assert_eq!(e.to_string(), "operation 13 (F_none^2) is invalid: a^2 is already in memory");
}
