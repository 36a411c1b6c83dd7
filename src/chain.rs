//! The chain of [the model](crate::model): stages 1..=L, the loss as stage L+1, and the
//! JSON form they are read from and written to.
//!
//! A [`Chain`] can only be built through [`Chain::new`] or [`Chain::from_json`],
//! both of which validate every field, so every solver may assume: at least one
//! stage, finite non-negative times, `saved_size >= output_size`, and sizes whose
//! grand total fits in a `u64` (so no memory figure a solver or the simulator adds
//! up can overflow).

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One stage (a layer or block of layers) of a chain, or the loss.
///
/// Field names are those of the JSON chain format (see [the model](crate::model)).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Stage {
    /// Optional human-readable name (e.g. `layer3.2`); not used by solvers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// u_f: time of one forward of this stage.
    pub forward_time: f64,
    /// u_b: time of the backward of this stage.
    pub backward_time: f64,
    /// w_a: bytes of the output activation a^l.
    pub output_size: u64,
    /// w_abar: bytes a recorded forward keeps for the backward, a^l included.
    pub saved_size: u64,
    /// w_d: bytes of the gradient delta^l.
    pub gradient_size: u64,
    /// o_f: transient bytes while the forward runs.
    pub forward_overhead: u64,
    /// o_r: transient bytes while a recording forward (`F_all^l`, option 0)
    /// runs, when it differs from `forward_overhead` (a plain forward frees
    /// its intermediates as it goes, a recording one keeps them in `saved_size`,
    /// so its transient beyond them is often smaller); `None`:
    /// `forward_overhead`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_overhead: Option<u64>,
    /// o_b: transient bytes while the backward runs.
    pub backward_overhead: u64,
    /// f_b: bytes of abar^l the backward has freed by its peak (at most
    /// `saved_size`): `B^l` holds w_d^{l-1} + o_b - f_b beyond what was
    /// stored before it. 0 (the default): abar^l is held whole until `B^l` ends.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub backward_frees: u64,
    /// Further ways to record this stage (options 1, 2, ...; option 0 is the
    /// stage's own `saved_size`, `backward_time` and overheads): each saves
    /// less and recomputes the rest inside `B^l`. Empty for a plain stage.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<StageOption>,
}

/// One more way to record a stage (a selective-saving policy): what `F_all^l[o]`
/// keeps, and what its `B^l` then costs. See [the model](crate::model).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageOption {
    /// Optional human-readable name (`matmuls`, `input only`); not used by solvers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// w_abar^l\[o\]: bytes `F_all^l[o]` keeps for the backward, a^l included.
    pub saved_size: u64,
    /// r^l\[o\]: time `B^l` spends recomputing what this option did not keep
    /// (added to `backward_time`). At least `-backward_time`: negative where a
    /// compiler makes keeping less faster than keeping everything.
    pub recompute_time: f64,
    /// o_f^l\[o\]: transient bytes while `F_all^l[o]` runs.
    pub forward_overhead: u64,
    /// o_b^l\[o\]: transient bytes while `B^l` runs after `F_all^l[o]` (its
    /// recomputation included).
    pub backward_overhead: u64,
    /// f_b^l\[o\]: bytes of abar^l\[o\] that `B^l` has freed by its peak (at
    /// most `saved_size`; 0 by default, whatever the stage's figure).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub backward_frees: u64,
}

/// What recording stage `l` with option `o` costs: the figures `F_all^l[o]`
/// and the `B^l` after it use (option 0 is the stage's own fields).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recording {
    /// Bytes kept from `F_all^l[o]` to `B^l` (w_abar^l\[o\]).
    pub saved_size: u64,
    /// Time of `B^l` (u_b^l + r^l\[o\]).
    pub backward_time: f64,
    /// Transient bytes while `F_all^l[o]` runs.
    pub forward_overhead: u64,
    /// Transient bytes while `B^l` runs.
    pub backward_overhead: u64,
    /// Bytes of the saved set `B^l` has freed by its peak (at most `saved_size`).
    pub backward_frees: u64,
}

/// serde's `skip_serializing_if` for a figure whose default is 0: a chain
/// without it writes the JSON it wrote before.
fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// Most options a stage may have, option 0 included (the solvers' work grows
/// linearly with the count, exhaustive search's exponentially).
pub const MAX_OPTIONS: usize = 16;

impl Stage {
    /// A stage whose gradient has the size of its output and which has no
    /// transient overheads: the common case, convenient in tests and generators.
    pub fn simple(forward_time: f64, backward_time: f64, output_size: u64, saved_size: u64) -> Stage {
        Stage {
            name: None,
            forward_time,
            backward_time,
            output_size,
            saved_size,
            gradient_size: output_size,
            forward_overhead: 0,
            recording_overhead: None,
            backward_overhead: 0,
            backward_frees: 0,
            options: Vec::new(),
        }
    }

    /// Option `o` of recording this stage (0: the stage's own fields).
    ///
    /// # Panics
    /// If `o` is above the number of options.
    pub fn recording(&self, o: usize) -> Recording {
        if o == 0 {
            Recording {
                saved_size: self.saved_size,
                backward_time: self.backward_time,
                forward_overhead: self.recording_overhead.unwrap_or(self.forward_overhead),
                backward_overhead: self.backward_overhead,
                backward_frees: self.backward_frees,
            }
        } else {
            let x = &self.options[o - 1];
            Recording {
                saved_size: x.saved_size,
                backward_time: self.backward_time + x.recompute_time,
                forward_overhead: x.forward_overhead,
                backward_overhead: x.backward_overhead,
                backward_frees: x.backward_frees,
            }
        }
    }

    /// The number of ways to record this stage, option 0 included (at least 1).
    pub fn option_count(&self) -> usize {
        1 + self.options.len()
    }

    /// The loss stage with every field zero (the default when a file has no `loss`).
    pub fn zero_loss() -> Stage {
        Stage::simple(0.0, 0.0, 0, 0)
    }
}

/// A validated heterogeneous chain.
///
/// Index conventions follow the paper: `forward_time(l)` etc. take `l` in
/// `1..=L+1` (L+1 is the loss); `output_size(l)` and `gradient_size(l)` also take
/// `l = 0`, the network input.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Chain {
    name: String,
    input_size: u64,
    /// w_d^0 when it differs from `input_size` (a pipeline rank's input is
    /// the previous rank's output, and its gradient that stage's gradient).
    #[serde(skip_serializing_if = "Option::is_none")]
    input_gradient_size: Option<u64>,
    stages: Vec<Stage>,
    loss: Stage,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<serde_json::Value>,
    #[serde(skip)]
    warnings: Vec<String>,
}

/// Why a chain was rejected. Every variant names the stage and field at fault.
#[derive(Debug, Error, PartialEq)]
pub enum ChainError {
    /// The text is not JSON of the chain format (syntax, unknown or missing
    /// field, wrong type, a number that does not fit).
    #[error("{path}: {message}")]
    Format {
        /// Where in the file (`stages[2].output_size (stage 3)`).
        path: String,
        /// What is wrong there.
        message: String,
    },
    /// A time is negative, NaN or infinite.
    #[error("{stage}: {field} is {value}; times must be finite and non-negative")]
    BadTime {
        /// The stage (`stage 3 (conv2)` or `loss`).
        stage: String,
        /// `forward_time` or `backward_time`.
        field: &'static str,
        /// The value found.
        value: f64,
    },
    /// An option's recompute_time is not finite, or takes its `B^l` below 0.
    #[error(
        "{stage}: options[].recompute_time is {value}; it must be finite and at least -backward_time \
         ({min}): B^l may be faster under an option, never take less than no time"
    )]
    BadRecomputeTime {
        /// The stage (`stage 3 (conv2)`).
        stage: String,
        /// The value found.
        value: f64,
        /// -backward_time, the least it may be.
        min: f64,
    },
    /// The times add up to more than a makespan may hold: (L+2) times the sum
    /// of all times must stay below [`MAX_TIME_TOTAL`], so that no makespan,
    /// recomputations included, overflows to infinity.
    #[error(
        "{stage}: {field} {value:e} brings the sum of the chain's times to {sum:e}; ({len} stages + 2) x that sum \
         must stay below {max:e} so that no makespan (recomputations included) overflows: express the times in a \
         larger unit",
        max = MAX_TIME_TOTAL
    )]
    TimeOverflow {
        /// The stage at which the running sum becomes too large.
        stage: String,
        /// `forward_time` or `backward_time`.
        field: &'static str,
        /// The value of that field.
        value: f64,
        /// The running sum of times up to and including it.
        sum: f64,
        /// L, the number of stages.
        len: usize,
    },
    /// The chain has no stage.
    #[error("`stages` is empty: a chain needs at least one stage")]
    Empty,
    /// A stage has more options than [`MAX_OPTIONS`] allows.
    #[error("{stage}: {count} options (option 0 included); a stage has at most {max}", max = MAX_OPTIONS)]
    TooManyOptions {
        /// The stage.
        stage: String,
        /// Its number of options, option 0 included.
        count: usize,
    },
    /// A backward frees more of the saved set than its recording keeps.
    #[error(
        "{stage}: {field} is {value} bytes, above the {saved} bytes its recording keeps (saved_size): \
         a backward frees by its peak at most what the forward saved for it"
    )]
    FreesAboveSaved {
        /// The stage.
        stage: String,
        /// `backward_frees` or `options[k].backward_frees`.
        field: String,
        /// The value found.
        value: u64,
        /// The saved_size of that recording.
        saved: u64,
    },
    /// The sizes add up to more than `u64::MAX` bytes.
    #[error("the sizes of the chain add up to more than {} bytes (u64); at {stage}", u64::MAX)]
    Overflow {
        /// The stage at which the running total overflows.
        stage: String,
    },
}

/// (L+2) times the sum of a chain's times stays below this. Any schedule of
/// the solvers runs each stage's forward at most L+1 times and its backward
/// once, so every makespan, partial sums included, stays finite, with room to
/// spare for float error.
pub const MAX_TIME_TOTAL: f64 = 1e300;

/// The JSON shape of a stage, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StageJson {
    #[serde(default)]
    name: Option<String>,
    forward_time: f64,
    backward_time: f64,
    output_size: u64,
    saved_size: u64,
    #[serde(default)]
    gradient_size: Option<u64>,
    #[serde(default)]
    forward_overhead: u64,
    #[serde(default)]
    recording_overhead: Option<u64>,
    #[serde(default)]
    backward_overhead: u64,
    #[serde(default)]
    backward_frees: u64,
    #[serde(default)]
    options: Vec<Object<OptionJson>>,
}

/// The JSON shape of one option of a stage; the overheads default to the stage's.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OptionJson {
    #[serde(default)]
    name: Option<String>,
    saved_size: u64,
    #[serde(default)]
    recompute_time: f64,
    #[serde(default)]
    forward_overhead: Option<u64>,
    #[serde(default)]
    backward_overhead: Option<u64>,
    #[serde(default)]
    backward_frees: u64,
}

/// The JSON shape of the loss: every field optional, defaulting to 0.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LossJson {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    forward_time: f64,
    #[serde(default)]
    backward_time: f64,
    #[serde(default)]
    output_size: u64,
    #[serde(default)]
    saved_size: u64,
    #[serde(default)]
    gradient_size: Option<u64>,
    #[serde(default)]
    forward_overhead: u64,
    #[serde(default)]
    backward_overhead: u64,
    #[serde(default)]
    backward_frees: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChainJson {
    /// Optional, as documented: a chain without one is called `chain`.
    #[serde(default = "default_chain_name")]
    name: String,
    input_size: u64,
    #[serde(default)]
    input_gradient_size: Option<u64>,
    stages: Vec<Object<StageJson>>,
    #[serde(default)]
    loss: Option<Object<LossJson>>,
    /// Free-form provenance (how the file was made, units, device...).
    #[serde(default)]
    metadata: Option<serde_json::Value>,
}

fn default_chain_name() -> String {
    "chain".to_string()
}

impl From<StageJson> for Stage {
    fn from(s: StageJson) -> Stage {
        let options = s
            .options
            .into_iter()
            .map(|Object(o)| StageOption {
                name: o.name,
                saved_size: o.saved_size,
                recompute_time: o.recompute_time,
                forward_overhead: o.forward_overhead.unwrap_or(s.recording_overhead.unwrap_or(s.forward_overhead)),
                backward_overhead: o.backward_overhead.unwrap_or(s.backward_overhead),
                backward_frees: o.backward_frees,
            })
            .collect();
        Stage {
            name: s.name,
            forward_time: s.forward_time,
            backward_time: s.backward_time,
            output_size: s.output_size,
            saved_size: s.saved_size,
            gradient_size: s.gradient_size.unwrap_or(s.output_size),
            forward_overhead: s.forward_overhead,
            recording_overhead: s.recording_overhead,
            backward_overhead: s.backward_overhead,
            backward_frees: s.backward_frees,
            options,
        }
    }
}

impl From<LossJson> for Stage {
    fn from(s: LossJson) -> Stage {
        Stage {
            name: s.name,
            forward_time: s.forward_time,
            backward_time: s.backward_time,
            output_size: s.output_size,
            saved_size: s.saved_size,
            gradient_size: s.gradient_size.unwrap_or(s.output_size),
            forward_overhead: s.forward_overhead,
            recording_overhead: None,
            backward_overhead: s.backward_overhead,
            backward_frees: s.backward_frees,
            options: Vec::new(),
        }
    }
}

/// A struct read from a JSON object only. serde's derived structs also accept
/// a positional array (`[null, 1, 2, 100, 100]` for a stage), which reads
/// fields by declaration order: a file meaning something else would be
/// accepted silently, so every documented object goes through this.
pub(crate) struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Only<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Only<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object with named fields")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_map(Only(std::marker::PhantomData)).map(Object)
    }
}

/// Deserializes all of `text` as one JSON value of type `T`, or says where
/// and what is wrong as [`describe_json_error`] does (`list`, `item` and
/// `whole` as there). Unlike `serde_path_to_error::deserialize` on a stream,
/// data after the value (a second object, a stray `}`, any garbage) is an
/// error, not silently ignored. O(length of `text`).
pub(crate) fn from_json_strict<T: serde::de::DeserializeOwned>(
    text: &str,
    list: &str,
    item: &str,
    whole: &str,
) -> Result<T, (String, String)> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let at = e.inner().is_syntax().then(|| syntax_context(text, e.inner().line(), e.inner().column())).flatten();
        let (mut path, mut message) = describe_json_error(e, list, item, whole);
        // serde names the field after a malformed value `?` (it had not read
        // the next key yet): the key before the value is the field at fault.
        if let Some(q) = path.find(".?") {
            match &at {
                Some((key, _)) => path.replace_range(q..q + 2, &format!(".{key}")),
                None => path.replace_range(q..q + 2, ""),
            }
        } else if path == "?" {
            path = at.as_ref().map_or_else(|| whole.to_string(), |(key, _)| key.clone());
        }
        if let Some((_, value)) = &at {
            message = malformed_value_message(message, value);
        }
        (path, message)
    })?;
    de.end().map_err(|e| (whole.to_string(), format!("{e} (a file holds one JSON value; remove what follows it)")))?;
    Ok(value)
}

/// serde_json's message for a malformed `value`, with what is wrong with it:
/// the NaN/Infinity hint stays for those (and 1e999), anything else (`0x10`,
/// `+5`, `1_000`) gets the rules of JSON numbers instead.
pub(crate) fn malformed_value_message(message: String, value: &str) -> String {
    const FINITE: &str = " (numbers must be finite: JSON has no NaN or Infinity)";
    let lower = value.to_ascii_lowercase();
    if lower.contains("nan") || lower.contains("inf") || message.contains("number out of range") {
        return message;
    }
    format!(
        "{} (`{value}` is not a JSON value: numbers are decimal, without hex, a leading + or quotes)",
        message.replace(FINITE, "")
    )
}

/// For a JSON syntax error at `line`/`column` (1-based, as serde_json counts
/// them) inside a scalar value, the key the value belongs to and the value as
/// written (`("output_size", "0x10")`); `None` when the error is not inside a
/// `"key": value` pair (a trailing comma, a missing bracket). O(length of the
/// line).
pub(crate) fn syntax_context(text: &str, line: usize, column: usize) -> Option<(String, String)> {
    let row = text.lines().nth(line.checked_sub(1)?)?;
    let at = row.char_indices().nth(column.saturating_sub(1)).map_or(row.len(), |(i, _)| i);
    let before = &row[..at];
    let colon = before.rfind(':')?;
    let written = &before[colon + 1..];
    if written.contains(['{', '[', ',', '"', '}', ']']) {
        return None;
    }
    let key_end = before[..colon].trim_end().strip_suffix('"')?;
    let key = &key_end[key_end.rfind('"')? + 1..];
    let rest = &row[at..];
    let end = rest.find([',', '}', ']', ' ']).unwrap_or(rest.len());
    let value = format!("{}{}", written.trim(), &rest[..end]);
    (!value.is_empty() && !key.is_empty()).then(|| (key.to_string(), value))
}

/// Where and what a JSON error is, for people: serde's path with list items
/// also numbered from 1 (`stages[2].output_size (stage 3)` for `list` =
/// `stages`, `item` = `stage`; the whole document is `whole`), and the message,
/// with the range of sizes when a size is not a u64. Shared by every JSON form
/// remat reads.
pub(crate) fn describe_json_error(
    e: serde_path_to_error::Error<serde_json::Error>,
    list: &str,
    item: &str,
    whole: &str,
) -> (String, String) {
    let raw = e.path().to_string();
    let path = if raw == "." || raw.is_empty() {
        whole.to_string()
    } else if let Some(rest) = raw.strip_prefix(list).and_then(|r| r.strip_prefix('['))
        && let Some(end) = rest.find(']')
        && let Ok(i) = rest[..end].parse::<usize>()
    {
        format!("{raw} ({item} {})", i + 1)
    } else {
        raw
    };
    let inner = e.into_inner();
    let mut message = inner.to_string();
    if inner.is_data() && message.contains("expected u64") {
        message.push_str(" (sizes are whole bytes from 0 to 18446744073709551615)");
    } else if message.contains("number out of range") || message.starts_with("expected value") {
        // serde_json's wording for NaN, Infinity and 1e999.
        message.push_str(" (numbers must be finite: JSON has no NaN or Infinity)");
    }
    (path, message)
}

impl Chain {
    /// Builds and validates a chain. `loss` is stage L+1.
    ///
    /// A `saved_size` below `output_size` (it happens in real measurements:
    /// abar^l contains a^l by definition) is raised to `output_size` with a
    /// warning, available from [`Chain::warnings`].
    ///
    /// # Examples
    ///
    /// ```
    /// use remat::{Chain, Stage};
    ///
    /// let stage = |forward_time: f64| Stage {
    ///     name: None,
    ///     forward_time,
    ///     backward_time: 2.0 * forward_time,
    ///     output_size: 100,
    ///     saved_size: 300,
    ///     gradient_size: 100,
    ///     forward_overhead: 0,
    ///     recording_overhead: None,
    ///     backward_overhead: 0,
    ///     backward_frees: 0,
    ///     options: Vec::new(),
    /// };
    /// let loss = Stage { forward_time: 0.0, backward_time: 0.0, output_size: 0, saved_size: 0, ..stage(0.0) };
    /// let chain = Chain::new("two-layers", 100, vec![stage(1.0), stage(1.0)], loss.clone())?;
    /// assert_eq!(chain.len(), 2);
    /// // Invalid numbers are refused, never solved.
    /// assert!(Chain::new("bad", 100, vec![stage(f64::NAN)], loss).is_err());
    /// # Ok::<(), remat::ChainError>(())
    /// ```
    pub fn new(name: impl Into<String>, input_size: u64, stages: Vec<Stage>, loss: Stage) -> Result<Chain, ChainError> {
        let mut chain = Chain {
            name: name.into(),
            input_size,
            input_gradient_size: None,
            stages,
            loss,
            metadata: None,
            warnings: Vec::new(),
        };
        chain.validate()?;
        Ok(chain)
    }

    /// The same chain with delta^0, the gradient of its input, of `bytes`
    /// bytes instead of `input_size` (the JSON field `input_gradient_size`):
    /// a pipeline rank's chain, whose input is the previous stage's output
    /// and whose last backward makes that stage's gradient, which can differ
    /// in size. Validated again (the sizes must still add up within a `u64`).
    ///
    /// ```
    /// use remat::{Chain, Stage};
    /// let chain = Chain::new("one", 100, vec![Stage::simple(1.0, 2.0, 10, 20)], Stage::zero_loss())?;
    /// assert_eq!(chain.gradient_size(0), 100);
    /// let rank = chain.with_input_gradient_size(5000)?;
    /// assert_eq!((rank.output_size(0), rank.gradient_size(0)), (100, 5000));
    /// # Ok::<(), remat::ChainError>(())
    /// ```
    pub fn with_input_gradient_size(mut self, bytes: u64) -> Result<Chain, ChainError> {
        self.input_gradient_size = (bytes != self.input_size).then_some(bytes);
        // Raised sizes are raised already: validating again adds no warning.
        self.validate()?;
        Ok(self)
    }

    /// Parses and validates a chain from the JSON format of [the model](crate::model).
    ///
    /// Errors name the offending field by its path, e.g.
    /// `stages[2].output_size (stage 3): invalid value: integer -5, expected u64`.
    ///
    /// # Examples
    ///
    /// ```
    /// use remat::Chain;
    ///
    /// let chain = Chain::from_json(r#"{"name": "two-layers", "input_size": 100, "stages": [
    ///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300},
    ///     {"forward_time": 1.0, "backward_time": 2.0, "output_size": 100, "saved_size": 300}]}"#)?;
    /// assert_eq!((chain.name(), chain.len()), ("two-layers", 2));
    /// // A bad field is named by its path.
    /// let e = Chain::from_json(r#"{"input_size": 1, "stages": [{"forward_time": 1, "backward_time": 1,
    ///     "output_size": -5, "saved_size": 1}]}"#).unwrap_err();
    /// assert!(e.to_string().contains("stages[0].output_size"), "{e}");
    /// # Ok::<(), remat::ChainError>(())
    /// ```
    pub fn from_json(text: &str) -> Result<Chain, ChainError> {
        let Object(parsed): Object<ChainJson> = from_json_strict(text, "stages", "stage", "chain")
            .map_err(|(path, message)| ChainError::Format { path, message })?;
        let mut chain = Chain::new(
            parsed.name,
            parsed.input_size,
            parsed.stages.into_iter().map(|s| Stage::from(s.0)).collect(),
            parsed.loss.map(|l| l.0).unwrap_or_default().into(),
        )?;
        if let Some(bytes) = parsed.input_gradient_size {
            chain = chain.with_input_gradient_size(bytes)?;
        }
        chain.metadata = parsed.metadata;
        Ok(chain)
    }

    /// The chain's identity as schedules record it: its name and a hash of
    /// its numbers (input size, every field of every stage and of the loss;
    /// FNV-1a, 64 bits, stable across platforms and versions). Two chains
    /// with the same hash accept the same schedules. O(L).
    pub fn id(&self) -> ChainId {
        const PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |x: u64| {
            for byte in x.to_le_bytes() {
                hash = (hash ^ u64::from(byte)).wrapping_mul(PRIME);
            }
        };
        eat(self.input_size);
        eat(self.stages.len() as u64);
        // Only chains that set it hash it: older schedules keep their ids.
        if let Some(g) = self.input_gradient_size {
            eat(u64::MAX - 1);
            eat(g);
        }
        for s in self.stages.iter().chain([&self.loss]) {
            eat(s.forward_time.to_bits());
            eat(s.backward_time.to_bits());
            for size in [s.output_size, s.saved_size, s.gradient_size, s.forward_overhead, s.backward_overhead] {
                eat(size);
            }
            // Only stages that set it or options hash them: older schedules
            // keep their ids.
            if let Some(r) = s.recording_overhead {
                eat(u64::MAX);
                eat(r);
            }
            if s.backward_frees != 0 {
                eat(u64::MAX - 2);
                eat(s.backward_frees);
            }
            for o in &s.options {
                eat(o.saved_size);
                eat(o.recompute_time.to_bits());
                eat(o.forward_overhead);
                eat(o.backward_overhead);
                if o.backward_frees != 0 {
                    eat(u64::MAX - 2);
                    eat(o.backward_frees);
                }
            }
        }
        ChainId { name: self.name.clone(), hash: format!("{hash:016x}") }
    }

    /// The JSON form, readable again by [`Chain::from_json`].
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a chain always serializes")
    }

    fn validate(&mut self) -> Result<(), ChainError> {
        if self.stages.is_empty() {
            return Err(ChainError::Empty);
        }
        let n = self.stages.len();
        let mut total: u64 = self.input_size;
        let time_limit = MAX_TIME_TOTAL / (n as f64 + 2.0);
        let mut time_sum = 0.0;
        for (i, stage) in self.stages.iter_mut().chain(std::iter::once(&mut self.loss)).enumerate() {
            let label = if i == n {
                "loss".to_string()
            } else {
                match &stage.name {
                    Some(name) => format!("stage {} ({name})", i + 1),
                    None => format!("stage {}", i + 1),
                }
            };
            if stage.option_count() > MAX_OPTIONS {
                return Err(ChainError::TooManyOptions { stage: label, count: stage.option_count() });
            }
            // Negative where a compiler makes keeping less faster; B^l itself never takes less than 0.
            if let Some(bad) =
                stage.options.iter().map(|o| o.recompute_time).find(|t| !t.is_finite() || *t < -stage.backward_time)
            {
                return Err(ChainError::BadRecomputeTime { stage: label, value: bad, min: -stage.backward_time });
            }
            // A stage is recorded with one option at a time: its dearest one bounds the makespan.
            let recompute = stage.options.iter().map(|o| o.recompute_time).fold(0.0, f64::max);
            for (field, value) in [
                ("forward_time", stage.forward_time),
                ("backward_time", stage.backward_time),
                ("options[].recompute_time", recompute),
            ] {
                if !value.is_finite() || value < 0.0 {
                    return Err(ChainError::BadTime { stage: label, field, value });
                }
                time_sum += value;
                if time_sum >= time_limit {
                    return Err(ChainError::TimeOverflow { stage: label, field, value, sum: time_sum, len: n });
                }
            }
            if stage.saved_size < stage.output_size {
                self.warnings.push(format!(
                    "{label}: saved_size {} is below output_size {}; using output_size \
                     (what a recorded forward keeps includes its output)",
                    stage.saved_size, stage.output_size
                ));
                stage.saved_size = stage.output_size;
            }
            for (k, o) in stage.options.iter_mut().enumerate() {
                if o.saved_size < stage.output_size {
                    self.warnings.push(format!(
                        "{label}: options[{k}].saved_size {} is below output_size {}; using output_size",
                        o.saved_size, stage.output_size
                    ));
                    o.saved_size = stage.output_size;
                }
            }
            // Checked after the raise above: abar^l holds at least a^l.
            let frees = std::iter::once(("backward_frees".to_string(), stage.backward_frees, stage.saved_size)).chain(
                stage
                    .options
                    .iter()
                    .enumerate()
                    .map(|(k, o)| (format!("options[{k}].backward_frees"), o.backward_frees, o.saved_size)),
            );
            for (field, value, saved) in frees {
                if value > saved {
                    return Err(ChainError::FreesAboveSaved { stage: label, field, value, saved });
                }
            }
            let most_saved = stage.options.iter().map(|o| o.saved_size).fold(stage.saved_size, u64::max);
            let most_transient = stage.options.iter().map(|o| o.forward_overhead.max(o.backward_overhead)).fold(
                stage.forward_overhead.max(stage.backward_overhead).max(stage.recording_overhead.unwrap_or(0)),
                u64::max,
            );
            // Every figure the simulator adds up is at most this total, so
            // checking it once here rules out overflow everywhere else.
            for size in [stage.output_size, most_saved, stage.gradient_size, most_transient] {
                total = total.checked_add(size).ok_or_else(|| ChainError::Overflow { stage: label.clone() })?;
            }
        }
        // a^0 and delta^0 may both be alive.
        let field = if self.input_gradient_size.is_some() { "input_gradient_size" } else { "input_size" };
        total.checked_add(self.gradient_size(0)).ok_or_else(|| ChainError::Overflow { stage: field.into() })?;
        Ok(())
    }

    /// The chain's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Free-form metadata of the file, if any.
    pub fn metadata(&self) -> Option<&serde_json::Value> {
        self.metadata.as_ref()
    }

    /// Replaces the free-form metadata (generators record their provenance here).
    pub fn set_metadata(&mut self, metadata: serde_json::Value) {
        self.metadata = Some(metadata);
    }

    /// Warnings raised while validating (e.g. a raised `saved_size`).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// L, the number of stages without the loss.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Always false: validation rejects empty chains. Present for API symmetry.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// w_a^0 = w_d^0: bytes of the network input.
    pub fn input_size(&self) -> u64 {
        self.input_size
    }

    /// The stages 1..=L (index 0 is stage 1), without the loss.
    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// The loss, stage L+1.
    pub fn loss(&self) -> &Stage {
        &self.loss
    }

    /// Stage `l` for `l` in `1..=L+1` (L+1 is the loss).
    ///
    /// # Panics
    /// If `l` is 0 or above L+1.
    pub fn stage(&self, l: usize) -> &Stage {
        assert!(l >= 1 && l <= self.stages.len() + 1, "stage {l} is outside 1..={}", self.stages.len() + 1);
        if l == self.stages.len() + 1 { &self.loss } else { &self.stages[l - 1] }
    }

    /// u_f^l for `l` in `1..=L+1`.
    pub fn forward_time(&self, l: usize) -> f64 {
        self.stage(l).forward_time
    }

    /// u_b^l for `l` in `1..=L+1`.
    pub fn backward_time(&self, l: usize) -> f64 {
        self.stage(l).backward_time
    }

    /// w_a^l for `l` in `0..=L+1` (0 is the input).
    pub fn output_size(&self, l: usize) -> u64 {
        if l == 0 { self.input_size } else { self.stage(l).output_size }
    }

    /// w_abar^l for `l` in `1..=L+1` (always `>= output_size(l)`).
    pub fn saved_size(&self, l: usize) -> u64 {
        self.stage(l).saved_size
    }

    /// w_d^l for `l` in `0..=L+1` (0 is the input's gradient, of the input's size).
    pub fn gradient_size(&self, l: usize) -> u64 {
        if l == 0 { self.input_gradient_size.unwrap_or(self.input_size) } else { self.stage(l).gradient_size }
    }

    /// o_f^l for `l` in `1..=L+1`.
    pub fn forward_overhead(&self, l: usize) -> u64 {
        self.stage(l).forward_overhead
    }

    /// o_b^l for `l` in `1..=L+1`.
    pub fn backward_overhead(&self, l: usize) -> u64 {
        self.stage(l).backward_overhead
    }

    /// f_b^l for `l` in `1..=L+1` (option 0; an option's is in [`Chain::recording`]).
    pub fn backward_frees(&self, l: usize) -> u64 {
        self.stage(l).backward_frees
    }

    /// The ways to record stage `l` (`1..=L+1`), option 0 included: 1 for a
    /// stage without options (and for the loss).
    pub fn option_count(&self, l: usize) -> usize {
        self.stage(l).option_count()
    }

    /// What recording stage `l` with option `o` costs (option 0: the stage's
    /// own `saved_size`, `backward_time` and overheads). O(1).
    ///
    /// # Panics
    /// If `l` is outside `1..=L+1` or `o` is not below [`Chain::option_count`].
    pub fn recording(&self, l: usize, o: usize) -> Recording {
        self.stage(l).recording(o)
    }

    /// True when some stage has more than one way to be recorded.
    pub fn has_options(&self) -> bool {
        self.stages.iter().any(|s| !s.options.is_empty())
    }

    /// Sum of every forward and backward time: the makespan without recomputation.
    pub fn store_all_time(&self) -> f64 {
        (1..=self.len() + 1).map(|l| self.forward_time(l) + self.backward_time(l)).sum()
    }
}

/// Which chain a schedule was computed for: its name and a hash of its
/// content (every number of every stage and of the loss; names and metadata
/// left out, since they change no schedule's validity).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainId {
    /// The chain's name.
    pub name: String,
    /// 16 hex digits of FNV-1a over the chain's numbers ([`crate::Chain::id`]).
    pub hash: String,
}

impl std::fmt::Display for ChainId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` (content hash {})", self.name, self.hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_stage_json(stage2: &str) -> String {
        format!(
            r#"{{"name": "t", "input_size": 4, "stages": [
                {{"forward_time": 1, "backward_time": 2, "output_size": 8, "saved_size": 10}},
                {stage2}
            ]}}"#
        )
    }

    #[test]
    fn parses_defaults() {
        let c = Chain::from_json(&two_stage_json(
            r#"{"forward_time": 1.5, "backward_time": 2, "output_size": 6, "saved_size": 6, "gradient_size": 3}"#,
        ))
        .unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.gradient_size(1), 8);
        assert_eq!(c.gradient_size(2), 3);
        assert_eq!(c.gradient_size(0), 4);
        assert_eq!(c.output_size(3), 0);
        assert_eq!(c.forward_overhead(1), 0);
        assert_eq!(c.store_all_time(), 6.5);
    }

    #[test]
    fn names_the_field_at_fault() {
        let e = Chain::from_json(&two_stage_json(
            r#"{"forward_time": 1, "backward_time": 2, "output_size": -6, "saved_size": 6}"#,
        ))
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("stages[1].output_size (stage 2)"), "{msg}");
        assert!(msg.contains("-6"), "{msg}");
    }

    #[test]
    fn raises_small_saved_size_with_warning() {
        let c = Chain::from_json(&two_stage_json(
            r#"{"forward_time": 1, "backward_time": 2, "output_size": 6, "saved_size": 5}"#,
        ))
        .unwrap();
        assert_eq!(c.saved_size(2), 6);
        assert_eq!(c.warnings().len(), 1);
        assert!(c.warnings()[0].contains("stage 2"));
    }

    #[test]
    fn rejects_bad_times_and_overflow() {
        let mut s = Stage::simple(f64::NAN, 1.0, 1, 1);
        let e = Chain::new("x", 1, vec![s.clone()], Stage::zero_loss()).unwrap_err();
        assert!(matches!(e, ChainError::BadTime { field: "forward_time", .. }));
        s.forward_time = 1.0;
        s.output_size = u64::MAX / 2;
        s.saved_size = u64::MAX / 2;
        let e = Chain::new("x", 1, vec![s], Stage::zero_loss()).unwrap_err();
        assert!(matches!(e, ChainError::Overflow { .. }), "{e}");
        assert_eq!(Chain::new("x", 1, vec![], Stage::zero_loss()).unwrap_err(), ChainError::Empty);
    }

    #[test]
    fn options_parse_default_and_round_trip() {
        let c = Chain::from_json(&two_stage_json(
            r#"{"forward_time": 1, "backward_time": 2, "output_size": 6, "saved_size": 30, "forward_overhead": 5,
                "options": [{"name": "matmuls", "saved_size": 12, "recompute_time": 0.5, "backward_overhead": 9},
                            {"saved_size": 2}]}"#,
        ))
        .unwrap();
        assert_eq!((c.option_count(1), c.option_count(2), c.option_count(3)), (1, 3, 1));
        assert!(c.has_options());
        assert_eq!(
            c.recording(2, 0),
            Recording {
                saved_size: 30,
                backward_time: 2.0,
                forward_overhead: 5,
                backward_overhead: 0,
                backward_frees: 0
            }
        );
        // The overheads default to the stage's.
        assert_eq!(
            c.recording(2, 1),
            Recording {
                saved_size: 12,
                backward_time: 2.5,
                forward_overhead: 5,
                backward_overhead: 9,
                backward_frees: 0
            }
        );
        // Below the output: raised to it, with a warning.
        assert_eq!(c.recording(2, 2).saved_size, 6);
        assert!(c.warnings()[0].contains("options[1].saved_size 2 is below output_size 6"), "{:?}", c.warnings());
        let again = Chain::from_json(&c.to_json()).unwrap();
        assert_eq!((c.stages(), c.id()), (again.stages(), again.id()));
        // A chain without options hashes as before; options change the hash.
        let plain = Chain::from_json(&two_stage_json(
            r#"{"forward_time": 1, "backward_time": 2, "output_size": 6, "saved_size": 30, "forward_overhead": 5}"#,
        ))
        .unwrap();
        assert_ne!(plain.id(), c.id());
        assert!(!plain.has_options() && !plain.to_json().contains("options"));
    }

    #[test]
    fn bad_options_are_named() {
        let e = Chain::from_json(&two_stage_json(
            r#"{"forward_time": 1, "backward_time": 2, "output_size": 6, "saved_size": 6, "options": [{"recompute_time": 1}]}"#,
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("stages[1].options[0]") && e.contains("saved_size"), "{e}");
        let mut s = Stage::simple(1.0, 1.0, 1, 1);
        s.options.push(StageOption {
            name: None,
            saved_size: 1,
            recompute_time: -1.5,
            forward_overhead: 0,
            backward_overhead: 0,
            backward_frees: 0,
        });
        let e = Chain::new("x", 1, vec![s.clone()], Stage::zero_loss()).unwrap_err().to_string();
        assert!(
            e.contains("stage 1: options[].recompute_time is -1.5") && e.contains("at least -backward_time (-1)"),
            "{e}"
        );
        // Faster than option 0 (a compiled stage), B^l still at least 0: valid.
        s.options[0].recompute_time = -1.0;
        let c = Chain::new("x", 1, vec![s.clone()], Stage::zero_loss()).unwrap();
        assert_eq!(c.stages[0].recording(1).backward_time, 0.0);
        s.options[0].recompute_time = 0.0;
        s.options = vec![s.options[0].clone(); MAX_OPTIONS];
        let e = Chain::new("x", 1, vec![s], Stage::zero_loss()).unwrap_err().to_string();
        assert!(e.contains("17 options") && e.contains("at most 16"), "{e}");
    }

    #[test]
    fn json_round_trip() {
        let c = Chain::from_json(&two_stage_json(
            r#"{"name": "fc2", "forward_time": 1, "backward_time": 2, "output_size": 6, "saved_size": 7, "backward_overhead": 9}"#,
        ))
        .unwrap();
        let again = Chain::from_json(&c.to_json()).unwrap();
        assert_eq!(c, again);
    }
}
