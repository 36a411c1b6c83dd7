//! Operations, schedules, their JSON form and the paper's notation.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One operation of [the model](crate::model)'s table on stage `l` (1..=L+1, L+1 = loss).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "OpJson", try_from = "OpJson")]
pub enum Op {
    /// Forward recording what the backward needs (abar^l) with option `o` of
    /// the stage (0: everything, as the stage's own `saved_size` says; see
    /// [`crate::chain::StageOption`]); keeps the input.
    FAll(usize, usize),
    /// Forward keeping the input and the output a^l.
    FCk(usize),
    /// Forward that deletes its (plain) input and keeps only a^l.
    FNone(usize),
    /// Backward of stage l: consumes delta^l and abar^l, produces delta^{l-1}.
    B(usize),
}

impl Op {
    /// The stage the operation acts on.
    pub fn stage(self) -> usize {
        match self {
            Op::FAll(l, _) | Op::FCk(l) | Op::FNone(l) | Op::B(l) => l,
        }
    }

    /// The recording option of an `F_all` (0 for every other operation).
    pub fn option(self) -> usize {
        match self {
            Op::FAll(_, o) => o,
            _ => 0,
        }
    }

    /// True for the three forward kinds.
    pub fn is_forward(self) -> bool {
        !matches!(self, Op::B(_))
    }

    /// The name used in JSON (`F_all`, `F_ck`, `F_none`, `B`).
    pub fn kind_name(self) -> &'static str {
        match self {
            Op::FAll(..) => "F_all",
            Op::FCk(_) => "F_ck",
            Op::FNone(_) => "F_none",
            Op::B(_) => "B",
        }
    }
}

impl fmt::Display for Op {
    /// The paper's notation in ASCII: `F_ck^1`, `F_none^2`, `F_all^3`, `B^3`;
    /// an `F_all` with option o > 0 as `F_all^3[o]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.option() {
            0 => write!(f, "{}^{}", self.kind_name(), self.stage()),
            o => write!(f, "{}^{}[{o}]", self.kind_name(), self.stage()),
        }
    }
}

/// A notation token that is not an operation, or a run too long to hold.
#[derive(Debug, Error, PartialEq)]
#[error("{}", match reason {
    Some(r) => format!("`{token}` is refused: {r}"),
    None => format!(
        "`{token}` is not an operation: write F_all^l, F_ck^l, F_none^l or B^l with a stage number l >= 1 \
         (F_all^l[o] records with the stage's option o), or a run (F_none^2..35 forwards up, B^35..2 backwards down)"
    ),
})]
pub struct ParseOpError {
    /// The token as written.
    pub token: String,
    /// Why a well-formed token is refused (a run past [`MAX_OPERATIONS`]);
    /// `None` when the token is not an operation at all.
    pub reason: Option<String>,
}

impl FromStr for Op {
    type Err = ParseOpError;

    /// Parses `F_all^3`, `F_all^3[1]`, `F_ck^1`, `F_none^2` (also `F_ø^2`, `F_∅^2`), `B^3`.
    fn from_str(token: &str) -> Result<Op, ParseOpError> {
        let err = || ParseOpError { token: token.to_string(), reason: None };
        let (kind, stage) = token.split_once('^').ok_or_else(err)?;
        let (stage, option) = match stage.strip_suffix(']').and_then(|s| s.split_once('[')) {
            Some((stage, o)) if kind == "F_all" => (stage, Some(o.parse::<usize>().map_err(|_| err())?)),
            Some(_) => return Err(err()),
            None => (stage, None),
        };
        let l: usize = stage.parse().map_err(|_| err())?;
        if l == 0 {
            return Err(err());
        }
        match kind {
            "F_all" => Ok(Op::FAll(l, option.unwrap_or(0))),
            "F_ck" => Ok(Op::FCk(l)),
            "F_none" | "F_ø" | "F_∅" | "F_0" => Ok(Op::FNone(l)),
            "B" => Ok(Op::B(l)),
            _ => Err(err()),
        }
    }
}

/// The JSON form of one operation: `{"op": "F_ck", "stage": 1}`, and
/// `{"op": "F_all", "stage": 3, "option": 1}` for an option other than 0.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpJson {
    op: String,
    stage: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    option: usize,
}

fn is_zero(o: &usize) -> bool {
    *o == 0
}

impl From<Op> for OpJson {
    fn from(op: Op) -> OpJson {
        OpJson { op: op.kind_name().to_string(), stage: op.stage(), option: op.option() }
    }
}

impl TryFrom<OpJson> for Op {
    type Error = String;

    fn try_from(j: OpJson) -> Result<Op, String> {
        if j.stage == 0 {
            return Err("stage 0 does not exist: stages are numbered from 1 (the loss is L+1)".into());
        }
        if j.option != 0 && j.op != "F_all" {
            return Err(format!("`option` {} on a `{}`: only F_all records with an option", j.option, j.op));
        }
        match j.op.as_str() {
            "F_all" => Ok(Op::FAll(j.stage, j.option)),
            "F_ck" => Ok(Op::FCk(j.stage)),
            "F_none" => Ok(Op::FNone(j.stage)),
            "B" => Ok(Op::B(j.stage)),
            other => Err(format!("unknown op `{other}`: expected F_all, F_ck, F_none or B")),
        }
    }
}

/// The most micro-batches remat plans for, in flight on a rank
/// ([`crate::solve::SolveOptions::in_flight`]) or in a pipeline step (`remat pipeline
/// --micro-batches`): 2^20, far past any pipeline (a step of more
/// micro-batches than that is a data-parallel job), and small enough that
/// the residues it multiplies stay exact. The command line and the Python
/// package refuse more, naming their own flag or argument and this figure
/// (issue 36: `--micro-batches 18446744073709551615` wrapped around and
/// saturated into budgets that "fitted").
pub const MAX_IN_FLIGHT: usize = 1 << 20;

/// Checks a count of micro-batches, `what` naming it in the message (a flag
/// or an argument): a whole number from 1 to [`MAX_IN_FLIGHT`]. O(1).
///
/// ```
/// use remat::schedule::{MAX_IN_FLIGHT, check_in_flight};
/// assert!(check_in_flight(8, "--micro-batches").is_ok());
/// let e = check_in_flight(MAX_IN_FLIGHT + 1, "--micro-batches").unwrap_err();
/// assert_eq!(e, "--micro-batches 1048577 is more than remat plans for: give from 1 to 1048576 micro-batches");
/// ```
pub fn check_in_flight(count: usize, what: &str) -> Result<(), String> {
    if count == 0 {
        return Err(format!("{what} must be at least 1 (got 0)"));
    }
    if count > MAX_IN_FLIGHT {
        return Err(format!(
            "{what} {count} is more than remat plans for: give from 1 to {MAX_IN_FLIGHT} micro-batches"
        ));
    }
    Ok(())
}

/// Which chain a schedule was computed for (defined beside the chain, whose
/// identity it is, so that `chain` needs nothing from this module).
pub use crate::chain::ChainId;

/// A schedule replayed on another chain than the one it names.
#[derive(Debug, Error, PartialEq)]
#[error(
    "this schedule was computed for chain {expected}, not for chain {actual}: replay it on the chain it was \
     computed for (or solve this chain with `remat solve`)"
)]
pub struct ChainMismatch {
    /// The chain the schedule names.
    pub expected: ChainId,
    /// The chain it was given.
    pub actual: ChainId,
}

/// A schedule as remat prints and reads it.
///
/// `makespan` and `peak_memory` are the exact simulator's figures for
/// `operations` (solvers never report their own estimates here). Read from
/// JSON, its fields must agree with each other ([`Schedule::check_fields`]);
/// whether they agree with a replay on the chain is
/// [`crate::simulate::Replay::check_recorded`]'s question.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ScheduleJson")]
pub struct Schedule {
    /// The chain it was computed for (absent in files written by hand or by
    /// older versions: those replay on any chain they are valid for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainId>,
    /// Which algorithm produced it (`persistent`, `exhaustive`, ...).
    pub algorithm: String,
    /// The memory budget it was computed for, in bytes.
    pub budget: u64,
    /// Sum of the operation times.
    pub makespan: f64,
    /// Largest memory in use while an operation runs, in bytes.
    pub peak_memory: u64,
    /// Micro-batches a pipeline rank holds at once (issue 28): the schedule
    /// was planned so that `peak_memory + (in_flight - 1) x residue` fits
    /// `budget`. 1, and left out of the JSON, for plain training.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub in_flight: usize,
    /// The bytes the schedule stores just before its first backward,
    /// [`crate::simulate::Replay::residue`]; written when `in_flight` > 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residue: Option<u64>,
    /// The operation sequence.
    pub operations: Vec<Op>,
}

/// The JSON shape of a [`Schedule`], before [`Schedule::check_fields`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleJson {
    #[serde(default)]
    chain: Option<ChainId>,
    algorithm: String,
    budget: u64,
    makespan: f64,
    peak_memory: u64,
    #[serde(default = "one")]
    in_flight: usize,
    #[serde(default)]
    residue: Option<u64>,
    operations: Vec<Op>,
}

impl TryFrom<ScheduleJson> for Schedule {
    type Error = String;

    fn try_from(j: ScheduleJson) -> Result<Schedule, String> {
        let schedule = Schedule {
            chain: j.chain,
            algorithm: j.algorithm,
            budget: j.budget,
            makespan: j.makespan,
            peak_memory: j.peak_memory,
            in_flight: j.in_flight,
            residue: j.residue,
            operations: j.operations,
        };
        schedule.check_fields()?;
        Ok(schedule)
    }
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

impl Schedule {
    /// Checks that the fields agree with each other, as every schedule remat
    /// writes does: `in_flight` from 1 to [`MAX_IN_FLIGHT`]; a `residue`
    /// exactly when `in_flight` is above 1 (what a rank's other
    /// micro-batches hold: without it the rank peak is unknown); a residue
    /// of at most `peak_memory` (what is stored before a backward counts in
    /// the peak); a makespan that is a finite time. The message names the
    /// field. Issue 36: a residue the operations do not have was accepted,
    /// and `rank_peak` computed from it. O(1).
    ///
    /// ```
    /// use remat::Schedule;
    /// let text = r#"{"algorithm": "x", "budget": 10, "makespan": 2.0, "peak_memory": 5,
    ///     "in_flight": 3, "residue": 7, "operations": [{"op": "F_all", "stage": 1}, {"op": "B", "stage": 1}]}"#;
    /// let e = serde_json::from_str::<Schedule>(text).unwrap_err().to_string();
    /// assert!(e.starts_with("`residue` 7 is above `peak_memory` 5"), "{e}");
    /// ```
    pub fn check_fields(&self) -> Result<(), String> {
        check_in_flight(self.in_flight, "`in_flight`")?;
        match (self.in_flight, self.residue) {
            (1, Some(r)) => {
                return Err(format!(
                    "`residue` {r} is given for one micro-batch in flight: it is written (and read) only with \
                     `in_flight` above 1; leave it out or give `in_flight`"
                ));
            }
            (n, None) if n > 1 => {
                return Err(format!(
                    "`in_flight` is {n} but `residue` is missing: a schedule planned for micro-batches in flight \
                     records what each holds before its backward (`remat simulate` prints it)"
                ));
            }
            (_, Some(r)) if r > self.peak_memory => {
                return Err(format!(
                    "`residue` {r} is above `peak_memory` {}: what a schedule stores before its first backward \
                     counts in its peak",
                    self.peak_memory
                ));
            }
            _ => {}
        }
        if !self.makespan.is_finite() || self.makespan < 0.0 {
            return Err(format!("`makespan` is {}: a makespan is a finite time, not negative", self.makespan));
        }
        Ok(())
    }

    /// Checks that the schedule was computed for `chain` (same content hash);
    /// a schedule that names no chain passes.
    pub fn check_chain(&self, chain: &crate::Chain) -> Result<(), ChainMismatch> {
        match &self.chain {
            Some(expected) if expected.hash != chain.id().hash => {
                Err(ChainMismatch { expected: expected.clone(), actual: chain.id() })
            }
            _ => Ok(()),
        }
    }
}

/// Writes a sequence in the paper's notation, space separated, one token per
/// operation.
pub fn notation(ops: &[Op]) -> String {
    ops.iter().map(Op::to_string).collect::<Vec<_>>().join(" ")
}

/// The paper's notation with runs folded: consecutive forwards of one kind on
/// stages l, l+1, ..., m print as `F_none^l..m`, consecutive backwards
/// l, l-1, ..., m as `B^l..m`. [`parse_operations`] reads it back. O(n).
pub fn compact_notation(ops: &[Op]) -> String {
    let mut tokens: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ops.len() {
        let step: isize = if ops[i].is_forward() { 1 } else { -1 };
        let mut j = i;
        while j + 1 < ops.len()
            && ops[j + 1].kind_name() == ops[i].kind_name()
            && ops[j + 1].option() == 0
            && ops[i].option() == 0
            && ops[j + 1].stage() as isize == ops[j].stage() as isize + step
        {
            j += 1;
        }
        tokens.push(if j == i {
            ops[i].to_string()
        } else {
            format!("{}^{}..{}", ops[i].kind_name(), ops[i].stage(), ops[j].stage())
        });
        i = j + 1;
    }
    tokens.join(" ")
}

/// [`compact_notation`] broken into lines of at most `width` characters (a
/// token longer than that gets a line of its own).
pub fn wrapped_notation(ops: &[Op], width: usize) -> String {
    let mut out = String::new();
    let mut line_len = 0;
    for token in compact_notation(ops).split(' ') {
        if line_len > 0 && line_len + 1 + token.len() > width {
            out.push('\n');
            line_len = 0;
        } else if line_len > 0 {
            out.push(' ');
            line_len += 1;
        }
        out.push_str(token);
        line_len += token.len();
    }
    out
}

/// One line on what a chain schedule keeps and recomputes: how the first
/// forward pass treats the stages (`F_ck`: checkpointed, listed by stage,
/// the first six at most; `F_all`: recorded; `F_none`: dropped) and how
/// many forwards run again. `stages` is L (the loss is not counted). O(n).
pub fn summary(ops: &[Op], stages: usize) -> String {
    let mut first: Vec<Option<Op>> = vec![None; stages + 2];
    for &op in ops {
        if op.is_forward() && op.stage() < first.len() && first[op.stage()].is_none() {
            first[op.stage()] = Some(op);
        }
    }
    let at = |kind: &str| -> Vec<usize> {
        (1..=stages).filter(|&l| first[l].is_some_and(|op| op.kind_name() == kind)).collect()
    };
    let (all, ck, none) = (at("F_all"), at("F_ck"), at("F_none"));
    let recomputed = ops.iter().filter(|op| op.is_forward()).count().saturating_sub(stages + 1);
    let mut parts = Vec::new();
    if !ck.is_empty() {
        const SHOWN: usize = 6;
        let mut list: Vec<String> = ck.iter().take(SHOWN).map(usize::to_string).collect();
        if ck.len() > SHOWN {
            list.push("...".into());
        }
        parts.push(format!("{} F_ck (at {})", ck.len(), list.join(", ")));
    }
    if !all.is_empty() {
        parts.push(format!("{} F_all", all.len()));
    }
    if !none.is_empty() {
        parts.push(format!("{} F_none", none.len()));
    }
    format!("{}; {recomputed} forwards recomputed", parts.join(", "))
}

/// The most operations a schedule may hold (about 270 MB of operations):
/// far above any schedule remat writes for a chain it can solve, and small
/// enough that reading one can never exhaust memory. [`parse_operations`]
/// counts a run's length before it expands it, so `F_none^1..18446744073709551615`
/// is refused at once, not after allocating.
pub const MAX_OPERATIONS: usize = 1 << 24;

/// Parses one notation token, an operation (`F_ck^3`) or a run
/// (`F_none^2..35`, `B^35..2`) in the directions [`compact_notation`] writes,
/// and appends its operations to `ops`; a run that would take `ops` past
/// [`MAX_OPERATIONS`] is refused before anything is allocated. O(run length).
fn parse_token(token: &str, ops: &mut Vec<Op>) -> Result<(), ParseOpError> {
    let Some((head, end)) = token.split_once("..") else {
        ops.push(token.parse()?);
        return too_many(token, ops.len(), 0);
    };
    let err = || ParseOpError { token: token.to_string(), reason: None };
    let first: Op = head.parse().map_err(|_| err())?;
    let end: usize = end.parse().map_err(|_| err())?;
    let start = first.stage();
    let (low, high) = match first {
        Op::B(_) if end <= start && end >= 1 => (end, start),
        Op::B(_) => return Err(err()),
        _ if end >= start => (start, end),
        _ => return Err(err()),
    };
    // high - low + 1 cannot overflow past the check: high - low < usize::MAX.
    too_many(token, ops.len(), (high - low).saturating_add(1))?;
    if first.option() != 0 {
        return Err(err()); // a run records with option 0 only
    }
    let make = |l| match first {
        Op::FAll(..) => Op::FAll(l, 0),
        Op::FCk(_) => Op::FCk(l),
        Op::FNone(_) => Op::FNone(l),
        Op::B(_) => Op::B(l),
    };
    if matches!(first, Op::B(_)) {
        ops.extend((low..=high).rev().map(make));
    } else {
        ops.extend((low..=high).map(make));
    }
    Ok(())
}

/// Refuses a token that takes a schedule of `held` operations `more` past
/// [`MAX_OPERATIONS`].
fn too_many(token: &str, held: usize, more: usize) -> Result<(), ParseOpError> {
    if held.saturating_add(more) <= MAX_OPERATIONS {
        return Ok(());
    }
    Err(ParseOpError {
        token: token.to_string(),
        reason: Some(format!(
            "it would make the schedule {} operations long{}; a schedule holds at most {MAX_OPERATIONS}",
            held.saturating_add(more),
            if more > 1 { format!(" (a run of {more})") } else { String::new() }
        )),
    })
}

/// The notation in `text`: all of it, or, for the report `remat solve`
/// prints (its first word a label such as `chain:` or `graph:`), its last
/// line, where the schedule is; so what `solve` prints can be saved and
/// replayed as it is. O(length of `text`).
pub fn schedule_line(text: &str) -> &str {
    let first = text.split_whitespace().next().unwrap_or("");
    if first.len() > 1 && first.ends_with(':') {
        text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("")
    } else {
        text
    }
}

/// Why a schedule file could not be read.
#[derive(Debug, Error)]
pub enum ScheduleParseError {
    /// JSON that is not a schedule.
    #[error("{path}: {message}")]
    Json {
        /// Where in the file.
        path: String,
        /// What is wrong there.
        message: String,
    },
    /// Notation with a bad token.
    #[error("token {index}: {source}")]
    Notation {
        /// 1-based position of the token.
        index: usize,
        /// The token's error.
        source: ParseOpError,
    },
}

/// Reads the operations of a schedule from any of the forms remat accepts: a
/// schedule object (as written by `remat solve --json`), a bare JSON array of
/// operations, or the paper's notation (`F_ck^1 F_none^2 ... B^1`, separated by
/// spaces, commas or newlines), runs such as `F_none^2..35` and `B^35..2`
/// included.
///
/// # Examples
///
/// ```
/// use remat::Op;
/// use remat::schedule::{compact_notation, parse_operations};
///
/// let ops = parse_operations("F_ck^1 F_none^2..3 B^3 F_all^2, B^2 B^1")?;
/// assert_eq!(ops[..3], [Op::FCk(1), Op::FNone(2), Op::FNone(3)]);
/// assert_eq!(ops.len(), 7);
/// // The notation remat prints reads back as the same operations.
/// assert_eq!(parse_operations(&compact_notation(&ops))?, ops);
/// assert!(parse_operations("F_ck^0").is_err());
/// # Ok::<(), remat::schedule::ScheduleParseError>(())
/// ```
pub fn parse_operations(text: &str) -> Result<Vec<Op>, ScheduleParseError> {
    let trimmed = text.trim_start();
    let json_err = |e: serde_path_to_error::Error<serde_json::Error>| ScheduleParseError::Json {
        path: if e.path().to_string() == "." { "schedule".into() } else { e.path().to_string() },
        message: e.into_inner().to_string(),
    };
    // Data after the JSON value is an error, not silently ignored.
    let trailing = |e: serde_json::Error| ScheduleParseError::Json {
        path: "schedule".into(),
        message: format!("{e} (a file holds one JSON value; remove what follows it)"),
    };
    if trimmed.starts_with('{') {
        let de = &mut serde_json::Deserializer::from_str(text);
        let s: Schedule = serde_path_to_error::deserialize(&mut *de).map_err(json_err)?;
        de.end().map_err(trailing)?;
        Ok(s.operations)
    } else if trimmed.starts_with('[') {
        let de = &mut serde_json::Deserializer::from_str(text);
        let ops = serde_path_to_error::deserialize(&mut *de).map_err(json_err)?;
        de.end().map_err(trailing)?;
        Ok(ops)
    } else {
        let mut ops = Vec::new();
        let text = schedule_line(text);
        let tokens = text.split(|c: char| c.is_whitespace() || c == ',').filter(|t| !t.is_empty());
        for (i, t) in tokens.enumerate() {
            parse_token(t, &mut ops).map_err(|source| ScheduleParseError::Notation { index: i + 1, source })?;
        }
        Ok(ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notation_round_trips() {
        let ops = vec![Op::FCk(1), Op::FNone(2), Op::FAll(3, 0), Op::B(3), Op::FAll(1, 0), Op::B(2)];
        let text = notation(&ops);
        assert_eq!(text, "F_ck^1 F_none^2 F_all^3 B^3 F_all^1 B^2");
        assert_eq!(parse_operations(&text).unwrap(), ops);
    }

    #[test]
    fn options_in_notation_and_json() {
        let ops = vec![Op::FAll(1, 2), Op::FAll(2, 0), Op::FAll(3, 0), Op::B(3), Op::B(2), Op::B(1)];
        let text = compact_notation(&ops);
        assert_eq!(text, "F_all^1[2] F_all^2..3 B^3..1");
        assert_eq!(parse_operations(&text).unwrap(), ops);
        let j = serde_json::to_string(&ops).unwrap();
        assert!(j.contains(r#"{"op":"F_all","stage":1,"option":2}"#) && j.contains(r#"{"op":"F_all","stage":2}"#));
        assert_eq!(parse_operations(&j).unwrap(), ops);
        for bad in ["F_ck^1[1]", "F_all^1[x]", "F_all^1[2]..3", "B^2[1]"] {
            assert!(parse_operations(bad).is_err(), "{bad}");
        }
        let e = parse_operations(r#"[{"op": "B", "stage": 1, "option": 1}]"#).unwrap_err().to_string();
        assert!(e.contains("only F_all records with an option"), "{e}");
    }

    #[test]
    fn json_forms() {
        let ops = vec![Op::FAll(1, 0), Op::B(1)];
        let s = Schedule {
            chain: None,
            algorithm: "x".into(),
            budget: 10,
            makespan: 2.0,
            peak_memory: 5,
            in_flight: 1,
            residue: None,
            operations: ops.clone(),
        };
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains(r#"{"op":"F_all","stage":1}"#), "{j}");
        assert_eq!(parse_operations(&j).unwrap(), ops);
        assert_eq!(parse_operations(r#"[{"op": "B", "stage": 1}]"#).unwrap(), vec![Op::B(1)]);
    }

    #[test]
    fn runs_fold_and_read_back() {
        let mut ops: Vec<Op> = vec![Op::FCk(1)];
        ops.extend((2..=35).map(Op::FNone));
        ops.extend([Op::FAll(36, 0), Op::B(36)]);
        ops.extend((1..=35).rev().map(Op::B));
        let text = compact_notation(&ops);
        assert_eq!(text, "F_ck^1 F_none^2..35 F_all^36 B^36..1");
        assert_eq!(parse_operations(&text).unwrap(), ops);
        // Not a run: stages that do not follow each other, or other kinds.
        let ops = vec![Op::FNone(1), Op::FNone(3), Op::FAll(4, 0), Op::B(4), Op::B(2)];
        assert_eq!(compact_notation(&ops), notation(&ops));
        for bad in ["F_none^5..2", "B^2..5", "B^2..0", "F_all^1..x"] {
            assert!(parse_operations(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wrapping_keeps_lines_short_and_reads_back() {
        let ops: Vec<Op> = (1..=300).flat_map(|l| [Op::FCk(l), Op::FAll(l + 1, 0)]).collect();
        let text = wrapped_notation(&ops, 80);
        assert!(text.lines().all(|line| line.len() <= 80), "{text}");
        assert_eq!(parse_operations(&text).unwrap(), ops);
    }

    #[test]
    fn summary_names_what_is_kept() {
        let ops = parse_operations("F_ck^1 F_none^2..3 F_all^4..5 B^5..4 F_ck^1 F_all^2..3 B^3..1").unwrap();
        assert_eq!(summary(&ops, 4), "1 F_ck (at 1), 1 F_all, 2 F_none; 3 forwards recomputed");
        let ops: Vec<Op> = (1..=20).map(Op::FCk).chain([Op::FAll(21, 0)]).chain((1..=21).rev().map(Op::B)).collect();
        assert_eq!(summary(&ops, 20), "20 F_ck (at 1, 2, 3, 4, 5, 6, ...); 0 forwards recomputed");
    }

    #[test]
    fn bad_tokens_are_named() {
        let e = parse_operations("F_all^1 G^2").unwrap_err().to_string();
        assert!(e.contains("token 2") && e.contains("`G^2`"), "{e}");
        let e = parse_operations(r#"[{"op": "F_some", "stage": 1}]"#).unwrap_err().to_string();
        assert!(e.contains("F_some"), "{e}");
        assert!(parse_operations("B^0").is_err());
    }
}
