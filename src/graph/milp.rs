//! The Checkmate MILP ([the model](crate::model), General graphs; Checkmate §4.2-4.7),
//! modelled with good_lp and solved by microlp (pure Rust, always built in) or
//! HiGHS (`--features highs`).
//!
//! Variables, for stages t and nodes i, k in topological order:
//! - `R[t][i]` (i <= t), binary: node i is computed in stage t; `R[t][t] = 1`
//!   is a constant (frontier advancing);
//! - `S[t][i]` (i < t), binary: node i is held from stage t-1 into stage t.
//!   `S[t][i]` is fixed to 0 only when no node reads i at all (see
//!   `holdable` for why that is safe, and why "no node after `t - 1` reads
//!   i" is not);
//! - `FREE[t][(i,k)]` for every edge i -> k with k <= t, binary;
//! - `U[t][k]` (k <= t), continuous: bytes in use right after node k in stage
//!   t, before the frees that follow it.
//!
//! Constraints: `R[t][v] <= R[t][u] + S[t][u]` for each edge u -> v (1b);
//! `S[t+1][i] <= S[t][i] + R[t][i]` (1c); R and S lower triangular; FREE
//! linearised with hazards (7a-c): `num_hazards = (1 - R[t][k]) + S[t+1][i] +
//! sum of R[t][j] over users j of i with k < j <= t`, `1 - FREE <= num_hazards`,
//! `kappa (1 - FREE) >= num_hazards`; `U[t][0] = M_0 R[t][0] + sum_i M_i S[t][i]`,
//! `U[t][k+1] = U[t][k] + M_{k+1} R[t][k+1] - sum_{(i,k) in E} M_i FREE[t][(i,k)]`;
//! and `U[t][k] + overhead_k R[t][k] <= budget - input_size`. Objective:
//! `sum C_i R[t][i]`.
//!
//! Sizes are divided by the budget, so U lies in [0, 1] and the solver's
//! tolerances are relative to it. The budget row gets half a byte of slack
//! (sizes are whole bytes), so a schedule exactly at the budget is feasible;
//! whatever the solver returns is rebuilt into a plan and replayed by the exact
//! simulator, so a tolerance can never let an over-budget schedule through.
//!
//! Size: O(n^2) R, S, U and O(n |E|) FREE variables and constraints.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use good_lp::{Constraint, Expression, ProblemVariables, ResolutionError, Solution, SolverModel, Variable, variable};
use thiserror::Error;

use crate::error::ErrorKind;
use crate::graph::CheckmateGraph;
use crate::graph::staged::Staged;

/// The LP/MILP solver behind good_lp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// microlp: pure Rust, always available, fine for small graphs.
    Microlp,
    /// HiGHS: a C++ solver built from source with `--features highs`; much
    /// faster on real networks.
    #[cfg(feature = "highs")]
    Highs,
}

impl Backend {
    /// The backends this build has.
    pub const ALL: &'static [Backend] = &[
        #[cfg(feature = "highs")]
        Backend::Highs,
        Backend::Microlp,
    ];

    /// The name used on the command line (`microlp`, `highs`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Microlp => "microlp",
            #[cfg(feature = "highs")]
            Backend::Highs => "highs",
        }
    }

    /// HiGHS when this build has it, microlp otherwise.
    pub fn best_available() -> Backend {
        Backend::ALL[0]
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> Result<Backend, String> {
        if let Some(b) = Backend::ALL.iter().copied().find(|b| b.name() == s) {
            return Ok(b);
        }
        let names: Vec<_> = Backend::ALL.iter().map(|b| b.name()).collect();
        let mut msg = format!("unknown LP solver `{s}`; this build has: {}", names.join(", "));
        if s == "highs" {
            msg = "this remat was built without HiGHS; rebuild with `cargo install --features highs` \
                   (needs cmake and libclang) or use --lp-solver microlp"
                .to_string();
        }
        Err(msg)
    }
}

/// Above this many graph nodes HiGHS runs without presolve. Its presolve's
/// probing (the clique table, `HighsCliqueTable::findCommonCliqueId`) does not
/// look at the time limit: on the 443-node Checkmate graph of Inception v3 at a
/// 60 s limit it ran for over ten minutes without stopping, while without
/// presolve it stops (57 s at a 20 s limit, model building included) with the
/// same schedule. On the 101-node U-Net both settings give the same answer
/// at 20 s; below this size presolve helps HiGHS prove optimality.
#[cfg(feature = "highs")]
const HIGHS_PRESOLVE_MAX_NODES: usize = 300;

/// Called with the elapsed time while a solver runs (from a helper thread).
pub type Ticker<'a> = &'a (dyn Fn(Duration) + Sync);

/// How to run the solver.
#[derive(Clone, Copy)]
pub struct MilpOptions<'a> {
    /// Which solver.
    pub backend: Backend,
    /// Stop after this long and return the best solution found (None: run to
    /// proven optimality).
    pub time_limit: Option<Duration>,
    /// Called about ten times a second while the solver runs.
    pub ticker: Option<Ticker<'a>>,
}

impl Default for MilpOptions<'_> {
    fn default() -> Self {
        MilpOptions { backend: Backend::best_available(), time_limit: None, ticker: None }
    }
}

/// Why the solver returned no solution.
#[derive(Debug, Error, PartialEq)]
pub enum MilpError {
    /// The problem has no feasible solution (the budget is too small).
    #[error("the problem is infeasible")]
    Infeasible,
    /// The time limit passed before any feasible solution was found.
    #[error("no feasible solution was found within the time limit of {seconds:.1} s")]
    NoSolution {
        /// The time spent.
        seconds: f64,
    },
    /// The solver failed.
    #[error("{backend} failed: {message}")]
    Backend {
        /// Which one.
        backend: Backend,
        /// Its message.
        message: String,
    },
}

impl MilpError {
    /// What kind of failure this is: an infeasible problem is
    /// [`ErrorKind::Infeasible`], the time limit [`ErrorKind::TimeLimit`], a
    /// failed solver [`ErrorKind::Internal`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            MilpError::Infeasible => ErrorKind::Infeasible,
            MilpError::NoSolution { .. } => ErrorKind::TimeLimit,
            MilpError::Backend { .. } => ErrorKind::Internal,
        }
    }
}

/// What the solver found.
#[derive(Clone, Debug)]
pub struct MilpSolution {
    /// The solution's R and S, rounded to booleans.
    pub staged: Staged,
    /// Its objective, sum of `C_i R[t][i]`.
    pub objective: f64,
    /// The best proven lower bound on the objective, when known.
    pub bound: Option<f64>,
    /// Whether the solver proved optimality.
    pub optimal: bool,
    /// Wall-clock seconds spent in the solver.
    pub seconds: f64,
}

impl MilpSolution {
    /// Proven relative gap `(objective - bound) / objective` (0 when optimal).
    pub fn gap(&self) -> Option<f64> {
        if self.optimal {
            return Some(0.0);
        }
        let bound = self.bound?;
        Some(relative_gap(self.objective, bound))
    }
}

/// `(value - bound) / value`, clamped to [0, 1] and to 0 below 1e-9 (solver
/// round-off), for a minimisation with non-negative objective.
pub fn relative_gap(value: f64, bound: f64) -> f64 {
    if value.abs() < 1e-12 {
        return 0.0;
    }
    let gap = ((value - bound) / value).clamp(0.0, 1.0);
    if gap < 1e-9 { 0.0 } else { gap }
}

/// What the model minimises under its budget.
#[derive(Clone, Copy, PartialEq)]
enum Goal {
    /// The total cost.
    Cost,
    /// Nothing: any feasible point will do.
    Feasibility,
}

/// The model. Variables are referred to by column: their creation order, which
/// is also the column order of both backends.
struct Formulation {
    vars: ProblemVariables,
    order: Vec<Variable>,
    r: Vec<Vec<Option<usize>>>,
    s: Vec<Vec<Option<usize>>>,
    /// Per stage t: (i, k, column of FREE[t][(i,k)]).
    free: Vec<Vec<(usize, usize, usize)>>,
    u: Vec<Vec<usize>>,
    objective: Expression,
    /// Part of the objective that is constant (the C_t of R[t][t] = 1).
    objective_constant: f64,
    constraints: Vec<Constraint>,
    /// Bytes per model unit of memory.
    scale: f64,
}

impl Formulation {
    fn add(&mut self, relaxed: bool, continuous_max: Option<f64>) -> usize {
        let def = match continuous_max {
            Some(max) => variable().min(0.0).max(max),
            None if relaxed => variable().min(0.0).max(1.0),
            None => variable().binary(),
        };
        let v = self.vars.add(def);
        self.order.push(v);
        self.order.len() - 1
    }

    fn var(&self, column: usize) -> Expression {
        self.order[column].into()
    }

    /// R[t][i] as an expression (the constant 1 on the diagonal).
    fn r_expr(&self, t: usize, i: usize) -> Expression {
        match self.r[t][i] {
            Some(c) => self.var(c),
            None => Expression::from(1.0),
        }
    }

    /// S[t][i] as an expression (0 where fixed, and for t = n).
    fn s_expr(&self, t: usize, i: usize) -> Expression {
        match self.s.get(t).and_then(|row| row.get(i)).copied().flatten() {
            Some(c) => self.var(c),
            None => Expression::from(0.0),
        }
    }
}

/// Whether the model has a variable `S[t][i]` for a node `i` (for every stage
/// `t > i`), or fixes it to 0.
///
/// The one reduction kept: `S[t][i] = 0` for every `t` when no node reads `i`.
/// Proof that it cannot change the optimum or the feasibility: take any
/// feasible (R, S, FREE, U) and set every `S[.][i]` of such an `i` to 0.
/// (1b) never mentions `S[t][i]` (no edge leaves `i`); (1c) for `i` holds
/// since its left side is now 0, and (1c) for other nodes does not mention it.
/// No FREE variable exists for an edge out of `i`, and the hazards of the
/// other edges do not mention `S[.][i]`, so every FREE keeps its value. U only
/// loses the term `M_i S[t][i]` of `U[t][0]`, which propagates unchanged down
/// the recurrence, so every `U[t][k]` can only decrease and the budget rows
/// still hold. The objective does not mention S. So every feasible point maps
/// to a feasible point of the reduced model of the same cost.
///
/// Why a stronger rule is wrong (the bug this replaced): fixing `S[t][i] = 0`
/// once every user of `i` comes before `t` ("holding it later is useless")
/// forgets that a user `j < t` of `i` may be *recomputed* in stage `t` (to
/// rebuild a value a gradient of stage `t` reads), and then `i` must be
/// resident in stage `t`: held, or recomputed from its own inputs. Holding `i`
/// can be the cheaper of the two, so that rule cut off optimal schedules and,
/// near the smallest budget, every schedule.
fn holdable(graph: &CheckmateGraph, i: usize) -> bool {
    !graph.users(i).is_empty()
}

/// Builds the model of `graph` (see the module documentation), or None once
/// `deadline` has passed: the clock is read once a stage (O(n + |E|) work
/// between reads), so building stops within a stage's work of the deadline.
fn formulate(
    graph: &CheckmateGraph,
    budget: u64,
    goal: Goal,
    relaxed: bool,
    deadline: Option<Instant>,
) -> Option<Formulation> {
    let n = graph.len();
    let total: u64 = graph.nodes().iter().map(|x| x.size + x.overhead).sum::<u64>() + graph.input_size();
    let scale = budget.max(1) as f64;
    let mut f = Formulation {
        vars: ProblemVariables::new(),
        order: Vec::new(),
        r: Vec::with_capacity(n),
        s: Vec::with_capacity(n),
        free: Vec::with_capacity(n),
        u: Vec::with_capacity(n),
        objective: Expression::default(),
        objective_constant: 0.0,
        constraints: Vec::new(),
        scale,
    };
    for t in 0..n {
        if passed(deadline) {
            return None;
        }
        let row = (0..=t).map(|i| (i < t).then(|| f.add(relaxed, None))).collect();
        f.r.push(row);
        let row = (0..t).map(|i| holdable(graph, i).then(|| f.add(relaxed, None))).collect();
        f.s.push(row);
    }
    for t in 0..n {
        let mut row = Vec::new();
        for k in 0..=t {
            for &i in &graph.node(k).inputs {
                let v = f.add(relaxed, None);
                row.push((i, k, v));
            }
        }
        f.free.push(row);
    }
    // Bounds on U that cut nothing. Lower, 0: a value is freed only after the
    // last node of the stage that reads it (FREE needs R[t][k] and no later
    // reader computed), at most once per stage, and only once counted (its
    // reader k needs it held or computed by (1b)), so U never goes below 0.
    // Upper, total/budget + 1: never below the budget row's right side
    // ((budget - input + 0.5)/budget <= 1 + 0.5/budget) unless every size
    // is 0 (then U = 0), so the budget row is always the binding one; the
    // bound only keeps U finite for the solver.
    let u_max = total as f64 / scale + 1.0;
    for t in 0..n {
        let row = (0..=t).map(|_| f.add(relaxed, Some(u_max))).collect();
        f.u.push(row);
    }
    let limit = Expression::from((budget as f64 - graph.input_size() as f64 + 0.5) / scale);
    let m = |i: usize| graph.node(i).size as f64 / scale;

    let mut constraints = Vec::new();
    for t in 0..n {
        if passed(deadline) {
            return None;
        }
        // (1b): dependencies resident.
        for v in 0..=t {
            for &u in &graph.node(v).inputs {
                constraints.push(f.r_expr(t, v).leq(f.r_expr(t, u) + f.s_expr(t, u)));
            }
        }
        // (1c): a held value was computed or held in the stage before. The
        // row for i = t - 1 is left out, not cut: its right side contains
        // R[t-1][t-1] = 1, so it always holds.
        if t > 0 {
            for i in 0..t {
                if let Some(s) = f.s[t][i]
                    && i < t - 1
                {
                    constraints.push(f.var(s).leq(f.r_expr(t - 1, i) + f.s_expr(t - 1, i)));
                }
            }
        }
        // FREE via hazards (7a-c).
        for &(i, k, free) in &f.free[t] {
            let mut hazards = Expression::from(1.0) - f.r_expr(t, k) + f.s_expr(t + 1, i);
            let mut kappa = usize::from(k < t) + usize::from(f.s.get(t + 1).is_some_and(|row| row[i].is_some()));
            for &j in graph.users(i).iter().filter(|&&j| j > k && j <= t) {
                hazards += f.r_expr(t, j);
                kappa += 1;
            }
            constraints.push((Expression::from(1.0) - f.var(free)).leq(hazards.clone()));
            constraints.push(hazards.leq(kappa as f64 * (Expression::from(1.0) - f.var(free))));
        }
        // U recurrence and the budget.
        for k in 0..=t {
            let mut rhs = m(k) * f.r_expr(t, k);
            if k == 0 {
                for i in 0..t {
                    rhs += m(i) * f.s_expr(t, i);
                }
            } else {
                rhs += f.var(f.u[t][k - 1]);
                for &(i, _, free) in f.free[t].iter().filter(|e| e.1 == k - 1) {
                    rhs -= m(i) * f.var(free);
                }
            }
            constraints.push(f.var(f.u[t][k]).eq(rhs));
            let overhead = graph.node(k).overhead as f64 / scale;
            constraints.push((f.var(f.u[t][k]) + overhead * f.r_expr(t, k)).leq(limit.clone()));
        }
    }
    f.constraints = constraints;
    if goal == Goal::Cost {
        let mut objective = Expression::default();
        for t in 0..n {
            for i in 0..t {
                objective.add_mul(graph.node(i).cost, f.order[f.r[t][i].expect("off-diagonal R")]);
            }
            f.objective_constant += graph.node(t).cost;
        }
        f.objective = objective;
    }
    Some(f)
}

/// Values of every variable (in column order) for a staged schedule: the warm
/// start. Evaluates the same formulas as [`formulate`].
fn warm_values(graph: &CheckmateGraph, f: &Formulation, staged: &Staged) -> Vec<f64> {
    let mut values = vec![0.0; f.order.len()];
    let bit = |b: bool| if b { 1.0 } else { 0.0 };
    let acc = staged.accounting(graph);
    for t in 0..graph.len() {
        for i in 0..t {
            if let Some(c) = f.r[t][i] {
                values[c] = bit(staged.r[t][i]);
            }
            if let Some(c) = f.s[t][i] {
                values[c] = bit(staged.s[t][i]);
            }
        }
        for &(i, k, c) in &f.free[t] {
            values[c] = bit(staged.frees(graph, t, i, k));
        }
        for k in 0..=t {
            values[f.u[t][k]] = acc.u[t][k] as f64 / f.scale;
        }
    }
    values
}

/// The solver's raw answer, by column.
struct Raw {
    values: Vec<f64>,
    objective: f64,
    bound: Option<f64>,
    optimal: bool,
    seconds: f64,
}

/// How long before the deadline microlp is asked to stop: it reads its clock
/// only every thousand pivots, which on a large model can be seconds, so its
/// own limit is set this much early (or at half the time left, when that is
/// shorter) and it usually answers before the deadline; at the deadline
/// remat stops waiting for it and answers without it.
pub const GRACE: Duration = Duration::from_secs(1);

/// Why [`solve_by`] has no result.
enum Stop {
    /// The deadline passed first.
    Late,
    /// The work panicked.
    Panicked,
}

/// Runs `work` on a thread of its own and waits for it, calling `ticker`
/// every 100 ms, until `deadline`. A solver still running then is
/// abandoned: its thread runs on until the solver's own time limit stops it
/// (set [`GRACE`] earlier, so that is rare), and its result is dropped, so
/// the caller answers by the deadline whatever the solver does. A panic in
/// `work` is reported, not re-raised and never waited on forever.
fn solve_by<T: Send + 'static>(
    deadline: Option<Instant>,
    ticker: Option<Ticker<'_>>,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Stop> {
    let (tx, rx) = std::sync::mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        // The receiver may be gone (abandoned): nothing to do then.
        let _ = tx.send(work());
    });
    loop {
        let step = Duration::from_millis(100);
        let wait = deadline.map_or(step, |d| d.saturating_duration_since(Instant::now()).min(step));
        match rx.recv_timeout(wait) {
            Ok(value) => return Ok(value),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Err(Stop::Panicked),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if passed(deadline) {
                    return Err(Stop::Late);
                }
                if let Some(tick) = ticker {
                    tick(start.elapsed());
                }
            }
        }
    }
}

/// Runs `work` while a helper thread calls `ticker` with the elapsed time.
#[cfg_attr(not(feature = "highs"), allow(dead_code))]
fn with_ticker<T>(ticker: Option<Ticker<'_>>, work: impl FnOnce() -> T) -> T {
    let Some(tick) = ticker else { return work() };
    let done = AtomicBool::new(false);
    let start = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                tick(start.elapsed());
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        // Set `done` even when `work` panics: the scope joins the ticker
        // before it re-raises the panic, so a ticker left running would hang.
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _done = Done(&done);
        work()
    })
}

/// Solves `f`, stopping at `opts.time_limit` counted from `start` (so the
/// time spent building the model counts against the limit too).
fn run(f: Formulation, warm: Option<Vec<f64>>, opts: &MilpOptions, start: Instant) -> Result<Raw, MilpError> {
    let backend = opts.backend;
    #[cfg_attr(not(feature = "highs"), allow(unused_variables))]
    let nodes = f.r.len();
    let time_limit = opts.time_limit.map(|l| l.saturating_sub(start.elapsed()));
    if time_limit.is_some_and(|l| l.is_zero()) {
        return Err(late(start));
    }
    let Formulation { vars, order, objective, constraints, .. } = f;
    let failed = |message: String| MilpError::Backend { backend, message };
    let raw = match backend {
        Backend::Microlp => {
            use good_lp::{WithInitialSolution, WithTimeLimit};
            let mut model = vars.minimise(objective).using(good_lp::solvers::microlp::microlp);
            add_rows(&mut model, constraints, opts, start)?;
            if let Some(w) = warm {
                model = model.with_initial_solution(order.iter().copied().zip(w));
            }
            // What is left now that the model is built.
            let left = opts.time_limit.map(|l| l.saturating_sub(start.elapsed()));
            if let Some(limit) = left {
                if limit.is_zero() {
                    return Err(late(start));
                }
                // Early by the grace (see GRACE), so it answers by the deadline.
                let own = limit.saturating_sub(GRACE).max(limit / 2);
                model = model.with_time_limit(own.as_secs_f64());
            }
            let solved = match solve_by(deadline(opts, start), opts.ticker, move || model.solve()) {
                Ok(solved) => solved,
                Err(Stop::Late) => return Err(late(start)),
                Err(Stop::Panicked) => return Err(failed("the solver's thread panicked".into())),
            };
            let seconds = start.elapsed().as_secs_f64();
            match solved {
                Ok(solution) => {
                    let values: Vec<f64> = order.iter().map(|&v| solution.value(v)).collect();
                    let inner = solution.into_inner();
                    let optimal = inner.termination_reason() == microlp::TerminationReason::ProvenOptimal;
                    Raw { values, objective: inner.objective(), bound: inner.stats().best_bound, optimal, seconds }
                }
                Err(ResolutionError::Infeasible) => return Err(MilpError::Infeasible),
                // microlp gives up with an error once its time limit has
                // passed: judged by the clock, not by the error's wording.
                Err(ResolutionError::Other(_)) if opts.time_limit.is_some_and(|l| seconds >= l.as_secs_f64()) => {
                    return Err(MilpError::NoSolution { seconds });
                }
                Err(e) => return Err(failed(e.to_string())),
            }
        }
        #[cfg(feature = "highs")]
        Backend::Highs => {
            use highs::{HighsModelStatus, HighsSolutionStatus};
            let mut model = vars.minimise(objective).using(good_lp::solvers::highs::highs);
            add_rows(&mut model, constraints, opts, start)?;
            let mut inner = model.try_into_inner().map_err(|e| failed(e.to_string()))?;
            inner.make_quiet();
            // Prove optimality exactly (HiGHS stops at a 0.01% gap by default).
            inner.set_option("mip_rel_gap", 0.0);
            inner.set_option("mip_abs_gap", 1e-9);
            if nodes > HIGHS_PRESOLVE_MAX_NODES {
                inner.set_option("presolve", "off");
            }
            if let Some(limit) = time_limit {
                inner.set_option("time_limit", limit.as_secs_f64());
            }
            if let Some(w) = &warm {
                inner.try_set_solution(Some(w), None, None, None).map_err(|e| failed(format!("{e:?}")))?;
            }
            let solved = with_ticker(opts.ticker, || inner.try_solve()).map_err(|e| failed(format!("{e:?}")))?;
            let seconds = start.elapsed().as_secs_f64();
            let optimal = match solved.status() {
                HighsModelStatus::Optimal => true,
                HighsModelStatus::Infeasible | HighsModelStatus::UnboundedOrInfeasible => {
                    return Err(MilpError::Infeasible);
                }
                HighsModelStatus::ReachedTimeLimit => false,
                other => return Err(failed(format!("stopped with status {other:?}"))),
            };
            if solved.primal_solution_status() != HighsSolutionStatus::Feasible {
                return Err(MilpError::NoSolution { seconds });
            }
            let values = solved.get_solution().columns().to_vec();
            let objective = solved.objective_value();
            let bound = solved.double_info_value(c"mip_dual_bound").ok().filter(|b| b.is_finite()).or(Some(objective));
            Raw { values, objective, bound, optimal, seconds }
        }
    };
    Ok(raw)
}

/// Hands `constraints` to the solver's `model`. That is part of the build,
/// so the clock is read every 4096 rows: the time-limit error once the
/// deadline of `opts` (counted from `start`) has passed.
fn add_rows<M: SolverModel>(
    model: &mut M,
    constraints: Vec<Constraint>,
    opts: &MilpOptions,
    start: Instant,
) -> Result<(), MilpError> {
    let deadline = deadline(opts, start);
    for (k, c) in constraints.into_iter().enumerate() {
        if k % 4096 == 0 && passed(deadline) {
            return Err(late(start));
        }
        model.add_constraint(c);
    }
    Ok(())
}

/// Whether `deadline` has passed (never, without one).
pub(crate) fn passed(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// When a call started at `start` under `opts` must stop.
fn deadline(opts: &MilpOptions, start: Instant) -> Option<Instant> {
    opts.time_limit.and_then(|l| start.checked_add(l))
}

/// The error for a time limit reached before the solver had a solution.
fn late(start: Instant) -> MilpError {
    MilpError::NoSolution { seconds: start.elapsed().as_secs_f64() }
}

fn staged_from(graph: &CheckmateGraph, r: &[Vec<Option<usize>>], s: &[Vec<Option<usize>>], values: &[f64]) -> Staged {
    let mut staged = Staged::frontier(graph.len());
    for t in 0..graph.len() {
        for i in 0..t {
            staged.r[t][i] = r[t][i].is_some_and(|c| values[c] > 0.5);
            staged.s[t][i] = s[t][i].is_some_and(|c| values[c] > 0.5);
        }
    }
    staged
}

/// Solves the Checkmate MILP of `graph` under `budget` bytes, warm-started
/// from `warm` (a staged schedule whose MILP memory fits, e.g. the best
/// baseline) when given.
pub fn solve_milp(
    graph: &CheckmateGraph,
    budget: u64,
    warm: Option<&Staged>,
    opts: &MilpOptions,
) -> Result<MilpSolution, MilpError> {
    // Below the widest working set nothing fits: no need to ask a solver
    // (microlp can fail numerically proving it).
    if budget < graph.working_set_bound() {
        return Err(MilpError::Infeasible);
    }
    let start = Instant::now();
    let f = formulate(graph, budget, Goal::Cost, false, deadline(opts, start)).ok_or_else(|| late(start))?;
    let warm = warm.map(|w| warm_values(graph, &f, w));
    let (r, s, constant) = (f.r.clone(), f.s.clone(), f.objective_constant);
    let raw = run(f, warm, opts, start)?;
    let staged = staged_from(graph, &r, &s, &raw.values);
    let (objective, bound) = (raw.objective + constant, raw.bound.map(|b| b + constant));
    Ok(MilpSolution { staged, objective, bound, optimal: raw.optimal, seconds: raw.seconds })
}

/// Whether any staged schedule fits `budget` by the MILP's memory accounting:
/// one that does, or None when the MILP is infeasible. Cheaper than
/// [`solve_milp`]: the solver stops at the first feasible point.
pub fn feasible(graph: &CheckmateGraph, budget: u64, opts: &MilpOptions) -> Result<Option<Staged>, MilpError> {
    if budget < graph.working_set_bound() {
        return Ok(None);
    }
    let start = Instant::now();
    let f = formulate(graph, budget, Goal::Feasibility, false, deadline(opts, start)).ok_or_else(|| late(start))?;
    let (r, s) = (f.r.clone(), f.s.clone());
    match run(f, None, opts, start) {
        Ok(raw) => Ok(Some(staged_from(graph, &r, &s, &raw.values))),
        Err(MilpError::Infeasible) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The LP relaxation (R, S, FREE in [0, 1]) under `budget`: its optimum, a
/// lower bound on the MILP's, and the fractional `S*` (`s[t][i]`, 0 where S is
/// fixed).
pub fn relaxation(graph: &CheckmateGraph, budget: u64, opts: &MilpOptions) -> Result<(f64, Vec<Vec<f64>>), MilpError> {
    // Below the widest working set nothing fits: no need to ask a solver
    // (microlp can fail numerically proving it).
    if budget < graph.working_set_bound() {
        return Err(MilpError::Infeasible);
    }
    let start = Instant::now();
    let f = formulate(graph, budget, Goal::Cost, true, deadline(opts, start)).ok_or_else(|| late(start))?;
    let (s, constant) = (f.s.clone(), f.objective_constant);
    let raw = run(f, None, opts, start)?;
    let s_star = s.iter().map(|row| row.iter().map(|c| c.map_or(0.0, |c| raw.values[c])).collect()).collect();
    Ok((raw.objective + constant, s_star))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::CheckmateNode;

    fn node(name: &str, inputs: Vec<usize>) -> CheckmateNode {
        CheckmateNode { name: name.into(), cost: 1.0, size: 1, overhead: 0, inputs }
    }

    #[test]
    fn backend_names_parse() {
        assert_eq!("microlp".parse::<Backend>(), Ok(Backend::Microlp));
        let e = "gurobi".parse::<Backend>().unwrap_err();
        assert!(e.contains("unknown LP solver `gurobi`"), "{e}");
    }

    #[test]
    fn warm_start_values_satisfy_the_model() {
        // The warm start of checkpoint-all must be a feasible point: check
        // every constraint of the model on it.
        let g =
            CheckmateGraph::new("g", 0, vec![node("a", vec![]), node("b", vec![0]), node("c", vec![0, 1])]).unwrap();
        let staged = Staged::keeping(&g, |_, _| true);
        let f = formulate(&g, 3, Goal::Cost, false, None).unwrap();
        let values = warm_values(&g, &f, &staged);
        struct Values<'a>(&'a [Variable], &'a [f64]);
        impl Solution for Values<'_> {
            fn status(&self) -> good_lp::SolutionStatus {
                good_lp::SolutionStatus::Optimal
            }
            fn value(&self, v: Variable) -> f64 {
                self.1[self.0.iter().position(|&o| o == v).unwrap()]
            }
        }
        let sol = Values(&f.order, &values);
        for c in &f.constraints {
            let lhs = c.expression().eval_with(&sol);
            if c.is_equality() {
                assert!(lhs.abs() < 1e-9, "equality off by {lhs}");
            } else {
                assert!(lhs <= 1e-9, "inequality violated by {lhs}");
            }
        }
    }
}
