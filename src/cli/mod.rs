//! The `remat` command line (feature `cli`): [`run`] takes an argument
//! vector and returns the exit code ([`Exit`]). The `remat` binary and the
//! Python package's `remat` command (`remat._core.main`) both call it. Each
//! subcommand lives in its own module; this one holds the argument types,
//! exit codes and the helpers they share.

mod compare;
mod graph;
mod min_memory;
mod mincut;
pub(crate) mod output;
mod pipeline;
mod show;
mod simulate;
mod solve;
mod sweep;
mod zoo;

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::{Chain, Problem};

/// The exit codes of `remat`, defined once: `remat --help` lists them from
/// [`Exit::ALL`] and [`Exit::meaning`], and docs/guide.md repeats the list
/// (tests/suite/cli.rs checks that it matches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The command did what was asked.
    Success = 0,
    /// The answer is no: the budget cannot be met.
    Infeasible = 1,
    /// Bad input or usage (also clap's code for a bad command line), or
    /// output that cannot be written.
    BadInput = 2,
    /// The time limit passed before any schedule was found: not a verdict on
    /// the budget (a larger --time-limit may find one).
    TimeLimit = 3,
    /// A bug in remat (a schedule failed its replay, a solver's prediction
    /// disagrees with it) or a failure of the LP solver it calls: `EX_SOFTWARE`
    /// of sysexits.h.
    Internal = 70,
}

impl Exit {
    /// Every exit code, in the order `--help` lists them.
    pub const ALL: [Exit; 5] = [Exit::Success, Exit::Infeasible, Exit::BadInput, Exit::TimeLimit, Exit::Internal];

    /// The process exit status.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// What the code means, as `--help` says it.
    pub const fn meaning(self) -> &'static str {
        match self {
            Exit::Success => "success",
            Exit::Infeasible => "the budget is infeasible (the message names the smallest that works)",
            Exit::BadInput => "bad input or usage, or output that cannot be written",
            Exit::TimeLimit => "the time limit passed before any schedule was found (graphs)",
            Exit::Internal => "internal error: a bug in remat, or its LP solver failed (EX_SOFTWARE)",
        }
    }
}

/// The exit code of each kind of library error: the one place the CLI maps
/// errors to codes (every library error says its kind, [`crate::ErrorKind`]).
impl From<crate::ErrorKind> for Exit {
    fn from(kind: crate::ErrorKind) -> Exit {
        match kind {
            crate::ErrorKind::Infeasible => Exit::Infeasible,
            crate::ErrorKind::Input => Exit::BadInput,
            crate::ErrorKind::TimeLimit => Exit::TimeLimit,
            crate::ErrorKind::Internal => Exit::Internal,
        }
    }
}

/// A failure with the exit code it maps to.
pub(crate) struct Failure {
    code: Exit,
    error: anyhow::Error,
}

impl Failure {
    /// A library error of `kind`, with the exit code of that kind.
    pub fn of(kind: crate::ErrorKind, error: impl Into<anyhow::Error>) -> Failure {
        Failure { code: kind.into(), error: error.into() }
    }

    /// Bad input or usage: [`Exit::BadInput`].
    pub fn input(error: impl Into<anyhow::Error>) -> Failure {
        Failure { code: Exit::BadInput, error: error.into() }
    }

    /// The budget cannot be met: [`Exit::Infeasible`].
    pub fn infeasible(error: impl Into<anyhow::Error>) -> Failure {
        Failure { code: Exit::Infeasible, error: error.into() }
    }

    /// The exit code this failure maps to.
    pub fn exit(&self) -> Exit {
        self.code
    }
}

impl From<crate::SolveError> for Failure {
    fn from(e: crate::SolveError) -> Failure {
        // The exit code is the kind's; a refusal as too large also names the
        // flags that change it.
        match e {
            crate::SolveError::TooLarge { remedy, .. } => {
                let flags = match remedy {
                    crate::solve::Remedy::FewerSlots => "--slots N with a smaller N".to_string(),
                    crate::solve::Remedy::FewerSlotsOr(a) => format!("--slots N with a smaller N, or --algorithm {a}"),
                    crate::solve::Remedy::Use(a) => format!("--algorithm {a}"),
                    crate::solve::Remedy::FewerStages => "a chain with fewer, larger stages".to_string(),
                    crate::solve::Remedy::ExactMemoryAtMost(m) => {
                        format!(
                            "--exact-memory {} or less (0: always round)",
                            crate::size::format_size(m).replace(' ', "")
                        )
                    }
                };
                Failure::of(e.kind(), anyhow::anyhow!("{e}\nhint: pass {flags}"))
            }
            e => Failure::of(e.kind(), e),
        }
    }
}

pub(crate) type CliResult = Result<(), Failure>;

const EXAMPLES: &str = "\
Examples:
  remat solve chains/rotor-fc6.json --memory 90MiB
  remat solve chains/rotor-fc6.json --memory 90MiB --json -o schedule.json
  remat simulate chains/rotor-fc6.json schedule.json --memory 90MiB
  remat min-memory chains/rotor-fc6.json
  remat compare chains/rotor-fc6.json --memory 100MiB
  remat sweep chains/rotor-fc6.json --steps 40 --plot tradeoff.svg > curves.csv
  remat show chains/rotor-fc6.json schedule.json --plot timeline.svg
  remat zoo resnet101 --batch 32 -o resnet101.json
  remat solve chains/graphs/unet-tiny.json --memory 300MiB   (a graph: chain DP or MILP)

Sizes are bytes or a number with a unit: 90MiB, 8GiB, 1.5GB (kB/MB/GB are powers
of 1000, KiB/MiB/GiB powers of 1024). The budget counts activations, saved data,
gradients and transient workspace; subtract parameters and optimizer state first.";

/// `remat --help`'s closing text: the examples, then every exit code from
/// [`Exit::ALL`].
fn after_help() -> String {
    let mut text = format!("{EXAMPLES}\n\nExit codes:");
    for exit in Exit::ALL {
        text.push_str(&format!("\n  {:>2}  {}", exit.code(), exit.meaning()));
    }
    text.push_str(
        "\n\nWith --json, an infeasible budget and a time limit also print {\"status\": \"infeasible\", \
         \"min_budget\": ...} or {\"status\": \"time_limit\"} on stdout.",
    );
    text
}

/// Optimal activation rematerialization (gradient checkpointing) schedules.
///
/// remat reads a network as a chain of stages (times and sizes of each stage's
/// forward and backward) and computes the fastest training-step schedule that
/// fits a memory budget: which activations to keep, which to drop and recompute.
/// Every schedule is replayed by an exact simulator before it is shown.
#[derive(Parser)]
#[command(name = "remat", version, after_help = after_help())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Solve(solve::Args),
    Simulate(simulate::Args),
    MinMemory(min_memory::Args),
    Compare(compare::Args),
    Sweep(sweep::Args),
    Show(show::Args),
    Zoo(zoo::Args),
    Mincut(mincut::Args),
    Pipeline(pipeline::Args),
}

/// Runs the command line on `args` (the program name first, as
/// `std::env::args_os` gives it) and returns the exit code ([`Exit`]):
/// parses, runs the subcommand, prints its output on stdout and any error on
/// stderr. A reader of stdout that has gone (`remat ... | head -1`) ends the
/// process with exit 0 (see `output::stdout_failed`).
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help, --version (exit 0) or a usage error (exit 2), printed
            // as clap prints them; a closed stdout loses only the help text.
            let _ = e.print();
            return u8::try_from(e.exit_code()).unwrap_or(Exit::BadInput.code());
        }
    };
    let result = match cli.command {
        Command::Solve(args) => solve::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::MinMemory(args) => min_memory::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Pipeline(args) => pipeline::run(args),
        Command::Sweep(args) => sweep::run(args),
        Command::Show(args) => show::run(args),
        Command::Zoo(args) => zoo::run(args),
        Command::Mincut(args) => mincut::run(args),
    };
    // Whatever was printed must reach its reader before the exit code says
    // it did.
    output::flush_stdout();
    match result {
        Ok(()) => Exit::Success.code(),
        Err(failure) => {
            eprintln!("error: {}", error_text(&failure.error));
            failure.exit().code()
        }
    }
}

/// The `remat` binary's `main`: [`run`] on the process's arguments.
pub fn main() -> ExitCode {
    ExitCode::from(run(std::env::args_os()))
}

/// The error and its causes joined by `: `, each cause only when the text so
/// far does not already contain it (library errors such as "chain file `x`:
/// {source}" print their source themselves; `{:#}` would repeat it).
fn error_text(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// Reads an input once (a path, or `-` for standard input), recognises
/// whether it is a chain or a graph, and prints its warnings on stderr.
pub(crate) fn load_problem(path: &Path) -> Result<Problem, Failure> {
    let problem = Problem::read(path).map_err(Failure::input)?;
    for w in problem.warnings() {
        eprintln!("warning: {}: {w}", path.display());
    }
    Ok(problem)
}

/// Reads a chain input (a forward graph that is a path counts as its chain);
/// any other graph fails (exit 2) with a message naming `command` and what to
/// run instead.
pub(crate) fn load_chain(path: &Path, command: &str) -> Result<Chain, Failure> {
    load_problem(path)?.into_chain(&path.display().to_string(), command).map_err(Failure::input)
}

/// The makespan's overhead over no recomputation, as `+1.3%`; `None` when the
/// base time is 0. Float sums in another order can land a hair below the base:
/// that prints as `+0.0%`, not `+-0.0%`.
pub(crate) fn overhead(makespan: f64, base: f64) -> Option<String> {
    (base > 0.0).then(|| {
        let pct = 100.0 * (makespan / base - 1.0);
        format!("{:+.1}%", if pct.abs() < 0.05 { 0.0 } else { pct })
    })
}

/// A chain schedule as `simulate` and `show` read it: its operations, the
/// figures its file records (a JSON schedule), and their replay.
pub(crate) struct ScheduleFile {
    /// The operations.
    pub ops: Vec<crate::Op>,
    /// The schedule object of a JSON schedule file (`None` for notation or a
    /// bare array of operations).
    pub recorded: Option<crate::Schedule>,
    /// The exact simulator's replay of `ops` on the chain.
    pub replay: crate::Replay,
}

impl ScheduleFile {
    /// Micro-batches in flight to judge the schedule with: `--in-flight`
    /// when given, else the file's `in_flight`, else 1.
    pub fn in_flight(&self, flag: Option<std::num::NonZeroUsize>) -> usize {
        flag.map_or_else(|| self.recorded.as_ref().map_or(1, |s| s.in_flight), |n| n.get())
    }
}

/// The text of the SCHEDULE argument: a file, `-` for standard input, or,
/// when no file has that name and it reads as notation (it has a `^`, as
/// `F_ck^1 F_none^2 ... B^1` does), the notation itself. O(length).
fn schedule_text(path: &Path) -> Result<String, Failure> {
    let arg = path.to_string_lossy();
    if path.as_os_str() != "-" && arg.contains('^') && !path.exists() {
        return Ok(arg.into_owned());
    }
    crate::problem::read_input(path, "schedule file").map_err(Failure::input)
}

/// Reads a schedule (a file in any form `parse_operations` accepts, `-` for
/// standard input, or notation given as the argument itself), checks that it
/// was computed for `chain` when it names one, replays it, and, when it
/// names its chain, checks the figures it records against the replay
/// ([`crate::Replay::check_recorded`]): the schedule, or a failure (exit 2)
/// naming the file and what is wrong.
pub(crate) fn replay_schedule_file(chain: &Chain, path: &Path) -> Result<ScheduleFile, Failure> {
    let text = schedule_text(path)?;
    let ops = crate::schedule::parse_operations(&text)
        .map_err(|e| Failure::input(anyhow::anyhow!("schedule `{}`: {e}", path.display())))?;
    let recorded = serde_json::from_str::<crate::Schedule>(&text).ok();
    if let Some(recorded) = &recorded {
        recorded
            .check_chain(chain)
            .map_err(|e| Failure::input(anyhow::anyhow!("schedule file `{}`: {e}", path.display())))?;
    }
    let replay = crate::simulate(chain, &ops).map_err(|e| {
        Failure::of(
            e.kind(),
            anyhow::anyhow!("schedule `{}` is not valid on chain `{}`: {e}", path.display(), chain.name()),
        )
    })?;
    if let Some(recorded) = recorded.as_ref().filter(|s| s.chain.is_some()) {
        replay
            .check_recorded(recorded)
            .map_err(|e| Failure::of(e.kind(), anyhow::anyhow!("schedule file `{}`: {e}", path.display())))?;
    }
    Ok(ScheduleFile { ops, recorded, replay })
}

/// What `solve`, `simulate` and `show` print for a schedule run with
/// `in_flight` > 1 micro-batches on a rank: the residue and the rank peak
/// (one past `u64::MAX` bytes said as such).
pub(crate) fn in_flight_line(in_flight: usize, replay: &crate::Replay) -> String {
    let residue = replay.residue();
    let rank = match replay.rank_peak(in_flight) {
        Some(r) => format!("{} ({r} bytes)", crate::size::format_size(r)),
        None => format!("over {} (more than a u64 holds)", crate::size::format_size(u64::MAX)),
    };
    format!(
        "in flight:   {in_flight} micro-batches; residue {} ({residue} bytes) each; rank peak {rank} = peak + {} x \
         residue",
        crate::size::format_size(residue),
        in_flight - 1
    )
}

/// The JSON fields of [`in_flight_line`]: `in_flight`, `residue` and
/// `rank_peak` (null past `u64::MAX` bytes), written for any count.
pub(crate) fn in_flight_json(in_flight: usize, replay: &crate::Replay) -> serde_json::Value {
    serde_json::json!({
        "in_flight": in_flight, "residue": replay.residue(), "rank_peak": replay.rank_peak(in_flight),
    })
}

/// Fails (exit 2) when two inputs both read standard input.
pub(crate) fn one_stdin(paths: &[&Path]) -> CliResult {
    if paths.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        return Err(Failure::input(anyhow::anyhow!("only one input can be `-` (standard input)")));
    }
    Ok(())
}

/// `--exact-memory`, for the commands that solve chains.
#[derive(clap::Args)]
pub(crate) struct ExactArgs {
    /// Most memory the persistent optimum exact in bytes may take (persistent,
    /// floating, auto); past it they round sizes to --slots and say "not
    /// exact". Default: the slot table's memory, at least 256 MiB. 0: always
    /// round (fastest). ResNet-1001 (339 stages) at half of store-all takes
    /// about 750MB and 25 s exact, 1 s rounded.
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub exact_memory: Option<u64>,
}

impl ExactArgs {
    /// `--exact-memory`, refused (exit 2, with the most this machine allows)
    /// when it is more than a solve may use ([`crate::solve::SolveOptions::check`]):
    /// checked once before any command runs a solver.
    pub fn get(&self) -> Result<Option<u64>, Failure> {
        crate::solve::SolveOptions { exact_memory: self.exact_memory, ..Default::default() }.check()?;
        Ok(self.exact_memory)
    }
}

/// Parses a SIZE argument for clap.
pub(crate) fn size_arg(s: &str) -> Result<u64, String> {
    crate::size::parse_size(s).map_err(|e| e.to_string())
}

/// `--memory` of the commands with a chain at hand (solve, compare,
/// simulate, show): bytes, a size, or a share of the chain's store-all peak
/// (`90%`, as `remat.torch`'s `memory="90%"`).
#[derive(Clone, Debug)]
pub(crate) struct MemoryArg {
    text: String,
    value: crate::size::SizeOrShare,
}

/// Parses a [`MemoryArg`] for clap.
pub(crate) fn memory_arg(s: &str) -> Result<MemoryArg, String> {
    let value = crate::size::SizeOrShare::parse(s).map_err(|e| e.to_string())?;
    Ok(MemoryArg { text: s.trim().to_string(), value })
}

/// A plain number (no unit) below this fraction of the chain's store-all
/// peak gets a note asking whether a unit is missing (`--memory 90` for
/// `90MiB`): 1/1024, a unit step.
const PLAIN_NOTE_FRACTION: u64 = 1024;

impl MemoryArg {
    /// The budget in bytes on `chain`: a share of its store-all peak, or the
    /// bytes given. Says on stderr what a share came to, and, for a plain
    /// number below 1/1024 of that peak, that a unit may be missing.
    pub fn bytes_for(&self, chain: &Chain) -> u64 {
        let whole = crate::report::sweep::store_all_peak(chain);
        let bytes = self.value.of(whole);
        let peak = crate::size::format_size(whole);
        match self.value {
            crate::size::SizeOrShare::Share { .. } => eprintln!(
                "note: --memory {} of the chain's store-all peak ({peak}) is {} ({bytes} bytes)",
                self.text,
                crate::size::format_size(bytes)
            ),
            crate::size::SizeOrShare::Bytes { unit: false, .. } if bytes < whole / PLAIN_NOTE_FRACTION => eprintln!(
                "note: --memory {bytes} is {bytes} bytes, under 1/{PLAIN_NOTE_FRACTION} of this chain's store-all peak \
                 ({peak}); sizes take a unit: {bytes}MiB, {bytes}GiB"
            ),
            crate::size::SizeOrShare::Bytes { .. } => {}
        }
        bytes
    }

    /// The budget in bytes of `problem`: [`MemoryArg::bytes_for`] on a
    /// chain; on a graph the bytes given, a share refused (exit 2: a graph
    /// has no store-all peak here).
    pub fn bytes_of(&self, problem: &Problem) -> Result<u64, Failure> {
        match (problem, self.value) {
            (Problem::Chain(chain), _) => Ok(self.bytes_for(chain)),
            (Problem::Graph(_), crate::size::SizeOrShare::Bytes { bytes, .. }) => Ok(bytes),
            (Problem::Graph(_), crate::size::SizeOrShare::Share { .. }) => Err(Failure::input(anyhow::anyhow!(
                "--memory {}: a share is of a chain's store-all peak, and this input is a graph: give bytes or a size \
                 (300MiB)",
                self.text
            ))),
        }
    }
}

pub(crate) use output::write_file;

/// The most memory slots a command accepts. Tables grow linearly with the
/// slot count; beyond this no table could be allocated anyway, and the
/// arithmetic on slot indices stays far from overflow.
pub(crate) const MAX_SLOTS: usize = 1_000_000_000;

/// Parses `--slots` for clap: a whole number from 1 to [`MAX_SLOTS`].
pub(crate) fn slots_arg(s: &str) -> Result<std::num::NonZeroUsize, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n >= 1 && n <= MAX_SLOTS as u64 => Ok(std::num::NonZeroUsize::new(n as usize).expect("n >= 1")),
        _ => Err(format!("`{s}` is not a slot count: give a whole number from 1 to {MAX_SLOTS}")),
    }
}

/// Parses a count of micro-batches for clap (`--in-flight`, `--micro-batches`,
/// named by `flag`): a whole number from 1 to
/// [`crate::solve::MAX_IN_FLIGHT`], the limit the Python package shares.
fn micro_batches_arg(s: &str, flag: &str) -> Result<std::num::NonZeroUsize, String> {
    let most = crate::solve::MAX_IN_FLIGHT;
    let count = s
        .trim()
        .parse::<usize>()
        .map_err(|_| format!("`{s}` is not a number of micro-batches: give {flag} a whole number from 1 to {most}"))?;
    crate::solve::check_in_flight(count, flag)?;
    Ok(std::num::NonZeroUsize::new(count).expect("checked: at least 1"))
}

/// `--in-flight` ([`micro_batches_arg`]).
pub(crate) fn in_flight_arg(s: &str) -> Result<std::num::NonZeroUsize, String> {
    micro_batches_arg(s, "--in-flight")
}

/// `--micro-batches` ([`micro_batches_arg`]).
pub(crate) fn micro_batches_count_arg(s: &str) -> Result<std::num::NonZeroUsize, String> {
    micro_batches_arg(s, "--micro-batches")
}

/// The most budgets one sweep accepts: each runs every algorithm, and a
/// chart cannot show more points than this anyway.
pub(crate) const MAX_STEPS: usize = 10_000;

/// Parses `--steps` for clap: a whole number from 1 to [`MAX_STEPS`].
pub(crate) fn steps_arg(s: &str) -> Result<usize, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 && n <= MAX_STEPS as u64 => Ok(n as usize),
        _ => Err(format!("`{s}` is not a number of steps: give a whole number from 1 to {MAX_STEPS}")),
    }
}

/// A progress bar on stderr when it is a terminal, for long solves.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    start: std::time::Instant,
}

impl Progress {
    /// A bar labelled `what`, shown only when stderr is a terminal.
    pub fn new(what: &str) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::hidden();
            bar.set_style(
                ProgressStyle::with_template("{msg} [{bar:40}] {percent}% ({elapsed} elapsed, ~{eta} left)")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar.set_message(what.to_string());
            bar
        });
        Progress { bar, start: std::time::Instant::now() }
    }

    /// Records progress; the bar appears only if the work lasts over 300 ms,
    /// so quick solves print nothing.
    pub fn update(&self, done: u64, total: u64) {
        if let Some(bar) = &self.bar {
            if bar.is_hidden() && self.start.elapsed() > std::time::Duration::from_millis(300) {
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            }
            bar.set_length(total);
            bar.set_position(done);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Exit, Failure, overhead};
    use crate::graph::{GraphAlgorithm, GraphSolveError};
    use crate::problem::Error;

    #[test]
    fn internal_errors_exit_70_and_help_lists_every_code() {
        // No input makes remat's solvers disagree with their replay, so the
        // mapping is tested directly: a wildcard arm once sent this graph
        // error, a bug in remat, to exit 2 ("bad input"). The command line
        // sees graph errors through the router's error.
        let graph = |e: GraphSolveError| Failure::from(Error::Graph(e)).exit();
        let mispredicted =
            GraphSolveError::Mispredicted { algorithm: GraphAlgorithm::Checkmate, predicted: 1.0, replayed: 2.0 };
        assert_eq!(graph(mispredicted), Exit::Internal);
        let chain =
            crate::SolveError::Mispredicted { algorithm: crate::Algorithm::Persistent, predicted: 1.0, replayed: 2.0 };
        assert_eq!(Failure::from(chain).exit(), Exit::Internal);
        let wrapped = Error::Chain(crate::SolveError::Mispredicted {
            algorithm: crate::Algorithm::Floating,
            predicted: 1.0,
            replayed: 2.0,
        });
        assert_eq!(Failure::from(wrapped).exit(), Exit::Internal);
        assert_eq!(graph(GraphSolveError::Backend("x".into())), Exit::Internal);
        assert_eq!(graph(GraphSolveError::NoSolution { seconds: 1.0 }), Exit::TimeLimit);
        assert_eq!(graph(GraphSolveError::TooLarge("x".into())), Exit::BadInput);
        let not_a_chain =
            Error::NotAChain { algorithm: crate::Algorithm::Floating, graph: "g".into(), why: "a skip".into() };
        assert_eq!(Failure::from(not_a_chain).exit(), Exit::BadInput);
        assert_eq!(Failure::from(crate::SolveError::Options("x".into())).exit(), Exit::BadInput);
        // A rounded plan its replay rejects is a bug in remat, not a verdict.
        let invalid = crate::graph::approx::ApproxError::Invalid(crate::graph::GraphSimulateError::NoSuchNode {
            index: 0,
            node: 1,
            len: 1,
        });
        assert_eq!(graph(GraphSolveError::Rounding(invalid)), Exit::Internal);
        assert_eq!(Exit::Internal.code(), 70);
        let help = super::after_help();
        for exit in Exit::ALL {
            assert!(help.contains(&format!("{:>2}  {}", exit.code(), exit.meaning())), "{help}");
        }
    }

    #[test]
    fn overhead_never_prints_negative_zero() {
        // 0.1 + 0.2 != 0.3 in floating point, in both directions.
        assert_eq!(overhead(0.1 + 0.2, 0.3).as_deref(), Some("+0.0%"));
        assert_eq!(overhead(0.3, 0.1 + 0.2).as_deref(), Some("+0.0%"));
        assert_eq!(overhead(47.42, 37.38).as_deref(), Some("+26.9%"));
        assert_eq!(overhead(9.0, 10.0).as_deref(), Some("-10.0%"));
        assert_eq!(overhead(1.0, 0.0), None);
    }
}
