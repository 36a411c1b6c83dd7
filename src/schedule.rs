//! Operations, schedules, their JSON form and the paper's notation.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One operation of `MODEL.md`'s table on stage `l` (1..=L+1, L+1 = loss).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "OpJson", try_from = "OpJson")]
pub enum Op {
    /// Forward recording everything the backward needs (abar^l); keeps the input.
    FAll(usize),
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
            Op::FAll(l) | Op::FCk(l) | Op::FNone(l) | Op::B(l) => l,
        }
    }

    /// True for the three forward kinds.
    pub fn is_forward(self) -> bool {
        !matches!(self, Op::B(_))
    }

    /// The name used in JSON (`F_all`, `F_ck`, `F_none`, `B`).
    pub fn kind_name(self) -> &'static str {
        match self {
            Op::FAll(_) => "F_all",
            Op::FCk(_) => "F_ck",
            Op::FNone(_) => "F_none",
            Op::B(_) => "B",
        }
    }
}

impl fmt::Display for Op {
    /// The paper's notation in ASCII: `F_ck^1`, `F_none^2`, `F_all^3`, `B^3`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}^{}", self.kind_name(), self.stage())
    }
}

/// A notation token that is not an operation.
#[derive(Debug, Error, PartialEq)]
#[error("`{token}` is not an operation: write F_all^l, F_ck^l, F_none^l or B^l with a stage number l >= 1")]
pub struct ParseOpError {
    /// The token as written.
    pub token: String,
}

impl FromStr for Op {
    type Err = ParseOpError;

    /// Parses `F_all^3`, `F_ck^1`, `F_none^2` (also `F_ø^2`, `F_∅^2`), `B^3`.
    fn from_str(token: &str) -> Result<Op, ParseOpError> {
        let err = || ParseOpError { token: token.to_string() };
        let (kind, stage) = token.split_once('^').ok_or_else(err)?;
        let l: usize = stage.parse().map_err(|_| err())?;
        if l == 0 {
            return Err(err());
        }
        match kind {
            "F_all" => Ok(Op::FAll(l)),
            "F_ck" => Ok(Op::FCk(l)),
            "F_none" | "F_ø" | "F_∅" | "F_0" => Ok(Op::FNone(l)),
            "B" => Ok(Op::B(l)),
            _ => Err(err()),
        }
    }
}

/// The JSON form of one operation: `{"op": "F_ck", "stage": 1}`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpJson {
    op: String,
    stage: usize,
}

impl From<Op> for OpJson {
    fn from(op: Op) -> OpJson {
        OpJson { op: op.kind_name().to_string(), stage: op.stage() }
    }
}

impl TryFrom<OpJson> for Op {
    type Error = String;

    fn try_from(j: OpJson) -> Result<Op, String> {
        if j.stage == 0 {
            return Err("stage 0 does not exist: stages are numbered from 1 (the loss is L+1)".into());
        }
        match j.op.as_str() {
            "F_all" => Ok(Op::FAll(j.stage)),
            "F_ck" => Ok(Op::FCk(j.stage)),
            "F_none" => Ok(Op::FNone(j.stage)),
            "B" => Ok(Op::B(j.stage)),
            other => Err(format!("unknown op `{other}`: expected F_all, F_ck, F_none or B")),
        }
    }
}

/// A schedule as remat prints and reads it.
///
/// `makespan` and `peak_memory` are the exact simulator's figures for
/// `operations` (solvers never report their own estimates here).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Which algorithm produced it (`persistent`, `exhaustive`, ...).
    pub algorithm: String,
    /// The memory budget it was computed for, in bytes.
    pub budget: u64,
    /// Sum of the operation times.
    pub makespan: f64,
    /// Largest memory in use while an operation runs, in bytes.
    pub peak_memory: u64,
    /// The operation sequence.
    pub operations: Vec<Op>,
}

/// Writes a sequence in the paper's notation, space separated.
pub fn notation(ops: &[Op]) -> String {
    ops.iter().map(Op::to_string).collect::<Vec<_>>().join(" ")
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
/// spaces, commas or newlines).
pub fn parse_operations(text: &str) -> Result<Vec<Op>, ScheduleParseError> {
    let trimmed = text.trim_start();
    let json_err = |e: serde_path_to_error::Error<serde_json::Error>| ScheduleParseError::Json {
        path: if e.path().to_string() == "." { "schedule".into() } else { e.path().to_string() },
        message: e.into_inner().to_string(),
    };
    if trimmed.starts_with('{') {
        let de = &mut serde_json::Deserializer::from_str(text);
        let s: Schedule = serde_path_to_error::deserialize(de).map_err(json_err)?;
        Ok(s.operations)
    } else if trimmed.starts_with('[') {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(json_err)
    } else {
        text.split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
            .enumerate()
            .map(|(i, t)| t.parse().map_err(|source| ScheduleParseError::Notation { index: i + 1, source }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notation_round_trips() {
        let ops = vec![Op::FCk(1), Op::FNone(2), Op::FAll(3), Op::B(3), Op::FAll(1), Op::B(2)];
        let text = notation(&ops);
        assert_eq!(text, "F_ck^1 F_none^2 F_all^3 B^3 F_all^1 B^2");
        assert_eq!(parse_operations(&text).unwrap(), ops);
    }

    #[test]
    fn json_forms() {
        let ops = vec![Op::FAll(1), Op::B(1)];
        let s = Schedule { algorithm: "x".into(), budget: 10, makespan: 2.0, peak_memory: 5, operations: ops.clone() };
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains(r#"{"op":"F_all","stage":1}"#), "{j}");
        assert_eq!(parse_operations(&j).unwrap(), ops);
        assert_eq!(parse_operations(r#"[{"op": "B", "stage": 1}]"#).unwrap(), vec![Op::B(1)]);
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
