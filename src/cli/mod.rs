//! Command-line front end. Each subcommand lives in its own module; this one
//! holds the argument types, exit codes and the helpers they share.

mod compare;
mod graph;
mod min_memory;
mod mincut;
pub mod output;
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
use remat::{Chain, Problem};

/// Exit code when the budget cannot be met.
const EXIT_INFEASIBLE: u8 = 1;
/// Exit code for bad input or usage (also what clap uses).
const EXIT_BAD_INPUT: u8 = 2;
/// Exit code when the time limit passed before any schedule was found: not a
/// verdict on the budget (a larger --time-limit may find one).
const EXIT_TIME_LIMIT: u8 = 3;

/// A failure with the exit code it maps to.
pub struct Failure {
    code: u8,
    error: anyhow::Error,
}

impl Failure {
    /// Bad input or usage: exit 2.
    pub fn input(error: impl Into<anyhow::Error>) -> Failure {
        Failure { code: EXIT_BAD_INPUT, error: error.into() }
    }

    /// The budget cannot be met: exit 1.
    pub fn infeasible(error: impl Into<anyhow::Error>) -> Failure {
        Failure { code: EXIT_INFEASIBLE, error: error.into() }
    }

    /// No schedule within the time limit, and no verdict: exit 3.
    pub fn time_limit(error: impl Into<anyhow::Error>) -> Failure {
        Failure { code: EXIT_TIME_LIMIT, error: error.into() }
    }
}

impl From<remat::SolveError> for Failure {
    fn from(e: remat::SolveError) -> Failure {
        match e {
            remat::SolveError::Infeasible { .. } => Failure::infeasible(e),
            remat::SolveError::Rejected { .. } | remat::SolveError::Mispredicted { .. } => {
                Failure { code: 70, error: e.into() }
            }
            remat::SolveError::TooLarge { remedy, .. } => {
                let flags = match remedy {
                    remat::solve::Remedy::FewerSlots => "--slots N with a smaller N".to_string(),
                    remat::solve::Remedy::FewerSlotsOr(a) => format!("--slots N with a smaller N, or --algorithm {a}"),
                    remat::solve::Remedy::Use(a) => format!("--algorithm {a}"),
                    remat::solve::Remedy::FewerStages => "a chain with fewer, larger stages".to_string(),
                    remat::solve::Remedy::ExactMemoryAtMost(m) => {
                        format!(
                            "--exact-memory {} or less (0: always round)",
                            remat::size::format_size(m).replace(' ', "")
                        )
                    }
                };
                Failure::input(anyhow::anyhow!("{e}\nhint: pass {flags}"))
            }
            _ => Failure::input(e),
        }
    }
}

pub type CliResult = Result<(), Failure>;

const AFTER_HELP: &str = "\
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
gradients and transient workspace; subtract parameters and optimizer state first.

Exit codes: 0 success, 1 budget infeasible (the message gives the smallest
budget that works), 2 bad input or usage, 3 the time limit passed before any
schedule was found (a graph solve; with --json, {\"status\": \"time_limit\"}).";

/// Optimal activation rematerialization (gradient checkpointing) schedules.
///
/// remat reads a network as a chain of stages (times and sizes of each stage's
/// forward and backward) and computes the fastest training-step schedule that
/// fits a memory budget: which activations to keep, which to drop and recompute.
/// Every schedule is replayed by an exact simulator before it is shown.
#[derive(Parser)]
#[command(name = "remat", version, after_help = AFTER_HELP)]
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
}

/// Runs the CLI and maps failures to exit codes.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Solve(args) => solve::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::MinMemory(args) => min_memory::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Sweep(args) => sweep::run(args),
        Command::Show(args) => show::run(args),
        Command::Zoo(args) => zoo::run(args),
        Command::Mincut(args) => mincut::run(args),
    };
    // Whatever was printed must reach its reader before the exit code says
    // it did.
    output::flush_stdout();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { code, error }) => {
            eprintln!("error: {}", error_text(&error));
            ExitCode::from(code)
        }
    }
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
pub fn load_problem(path: &Path) -> Result<Problem, Failure> {
    let problem = Problem::read(path).map_err(Failure::input)?;
    for w in problem.warnings() {
        eprintln!("warning: {}: {w}", path.display());
    }
    Ok(problem)
}

/// Reads a chain input (a forward graph that is a path counts as its chain);
/// any other graph fails (exit 2) with a message naming `command` and what to
/// run instead.
pub fn load_chain(path: &Path, command: &str) -> Result<Chain, Failure> {
    load_problem(path)?.into_chain(&path.display().to_string(), command).map_err(Failure::input)
}

/// The makespan's overhead over no recomputation, as `+1.3%`; `None` when the
/// base time is 0. Float sums in another order can land a hair below the base:
/// that prints as `+0.0%`, not `+-0.0%`.
pub fn overhead(makespan: f64, base: f64) -> Option<String> {
    (base > 0.0).then(|| {
        let pct = 100.0 * (makespan / base - 1.0);
        format!("{:+.1}%", if pct.abs() < 0.05 { 0.0 } else { pct })
    })
}

/// Reads a schedule file (any form `parse_operations` accepts; `-` for
/// standard input), checks that it was computed for `chain` when it names
/// one, and replays it: the file's text, its operations and the replay, or a
/// failure (exit 2) naming the file and what is wrong.
pub fn replay_schedule_file(chain: &Chain, path: &Path) -> Result<(String, Vec<remat::Op>, remat::Replay), Failure> {
    let text = remat::problem::read_input(path, "schedule file").map_err(Failure::input)?;
    let ops = remat::schedule::parse_operations(&text)
        .map_err(|e| Failure::input(anyhow::anyhow!("schedule file `{}`: {e}", path.display())))?;
    if let Ok(recorded) = serde_json::from_str::<remat::Schedule>(&text) {
        recorded
            .check_chain(chain)
            .map_err(|e| Failure::input(anyhow::anyhow!("schedule file `{}`: {e}", path.display())))?;
    }
    let replay = remat::simulate(chain, &ops).map_err(|e| {
        Failure::input(anyhow::anyhow!("schedule `{}` is not valid on chain `{}`: {e}", path.display(), chain.name()))
    })?;
    Ok((text, ops, replay))
}

/// Fails (exit 2) when two inputs both read standard input.
pub fn one_stdin(paths: &[&Path]) -> CliResult {
    if paths.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        return Err(Failure::input(anyhow::anyhow!("only one input can be `-` (standard input)")));
    }
    Ok(())
}

/// `--exact-memory`, for the commands that solve chains.
#[derive(clap::Args)]
pub struct ExactArgs {
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
    /// when it is more than a solve may use ([`remat::guard::exact_memory`]):
    /// checked once before any command runs a solver.
    pub fn get(&self) -> Result<Option<u64>, Failure> {
        let opts = remat::solve::SolveOptions { exact_memory: self.exact_memory, ..Default::default() };
        remat::guard::exact_memory(&opts)?;
        Ok(self.exact_memory)
    }
}

/// Parses a SIZE argument for clap.
pub fn size_arg(s: &str) -> Result<u64, String> {
    remat::size::parse_size(s).map_err(|e| e.to_string())
}

pub use output::write_file;

/// The most memory slots a command accepts. Tables grow linearly with the
/// slot count; beyond this no table could be allocated anyway, and the
/// arithmetic on slot indices stays far from overflow.
pub const MAX_SLOTS: usize = 1_000_000_000;

/// Parses `--slots` for clap: a whole number from 1 to [`MAX_SLOTS`].
pub fn slots_arg(s: &str) -> Result<std::num::NonZeroUsize, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n >= 1 && n <= MAX_SLOTS as u64 => Ok(std::num::NonZeroUsize::new(n as usize).expect("n >= 1")),
        _ => Err(format!("`{s}` is not a slot count: give a whole number from 1 to {MAX_SLOTS}")),
    }
}

/// The most budgets one sweep accepts: each runs every algorithm, and a
/// chart cannot show more points than this anyway.
pub const MAX_STEPS: usize = 10_000;

/// Parses `--steps` for clap: a whole number from 1 to [`MAX_STEPS`].
pub fn steps_arg(s: &str) -> Result<usize, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 && n <= MAX_STEPS as u64 => Ok(n as usize),
        _ => Err(format!("`{s}` is not a number of steps: give a whole number from 1 to {MAX_STEPS}")),
    }
}

/// A progress bar on stderr when it is a terminal, for long solves.
pub struct Progress {
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
    use super::overhead;

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
