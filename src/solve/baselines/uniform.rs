//! The uniform-policy baseline: one selective-saving policy applied to every
//! stage, nothing recomputed but what the policy recomputes inside each
//! backward. This is what torchtitan's selective activation checkpointing and
//! PyTorch's `create_selective_checkpoint_contexts` do when wrapped around
//! every block: the same policy everywhere, chosen by hand.
//!
//! A policy is a recording option of [the model](crate::model) named the same
//! on every stage (`matmuls`, say); an unnamed option is its index (`option 2`).
//! A stage without that option records with option 0. The candidates are
//! option 0 everywhere (store-all) and each policy found in the chain; the
//! baseline is the fastest candidate that fits, as the other baselines pick
//! theirs.

use crate::chain::Chain;
use crate::schedule::Op;

/// A policy's key: the option's name, or its index for an unnamed one.
fn key(chain: &Chain, l: usize, o: usize) -> String {
    match chain.stage(l).options.get(o - 1).and_then(|x| x.name.clone()) {
        Some(name) => name,
        None => format!("option {o}"),
    }
}

/// The policies of `chain`, in first-seen order: `(name, the option each stage
/// 1..=L+1 records with)`, option 0 everywhere first. O(L x options).
pub fn policies(chain: &Chain) -> Vec<(String, Vec<usize>)> {
    let n = chain.len() + 1;
    let mut names: Vec<String> = Vec::new();
    for l in 1..=n {
        for o in 1..chain.option_count(l) {
            let k = key(chain, l, o);
            if !names.contains(&k) {
                names.push(k);
            }
        }
    }
    let mut out = vec![("save all".to_string(), vec![0; n])];
    for name in names {
        let per_stage =
            (1..=n).map(|l| (1..chain.option_count(l)).find(|&o| key(chain, l, o) == name).unwrap_or(0)).collect();
        out.push((name, per_stage));
    }
    out
}

/// Store-all with stage l recorded with option `options[l - 1]`:
/// `F_all^1[o_1] .. F_all^{L+1}[o_{L+1}] B^{L+1} .. B^1`. O(L).
pub fn ops(options: &[usize]) -> Vec<Op> {
    let n = options.len();
    (1..=n).map(|l| Op::FAll(l, options[l - 1])).chain((1..=n).rev().map(Op::B)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{Stage, StageOption};
    use crate::schedule::notation;

    #[test]
    fn policies_by_name_and_index() {
        let opt = |name: Option<&str>, saved| StageOption {
            name: name.map(String::from),
            saved_size: saved,
            recompute_time: 1.0,
            forward_overhead: 0,
            backward_overhead: 0,
            backward_frees: 0,
        };
        let mut a = Stage::simple(1.0, 1.0, 1, 10);
        a.options = vec![opt(Some("matmuls"), 5), opt(None, 2)];
        let mut b = Stage::simple(1.0, 1.0, 1, 10);
        b.options = vec![opt(Some("input"), 1), opt(Some("matmuls"), 4)];
        let c = Chain::new("c", 1, vec![a, b, Stage::simple(1.0, 1.0, 1, 10)], Stage::zero_loss()).unwrap();
        let p = policies(&c);
        let names: Vec<&str> = p.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["save all", "matmuls", "option 2", "input"]);
        assert_eq!(p[1].1, [1, 2, 0, 0]);
        assert_eq!(notation(&ops(&p[1].1)), "F_all^1[1] F_all^2[2] F_all^3 F_all^4 B^4 B^3 B^2 B^1");
        assert_eq!(p[3].1, [0, 1, 0, 0]);
    }
}
