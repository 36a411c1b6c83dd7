//! The interface the three slot dynamic programs share ([`Persistent`],
//! [`Floating`], [`Revolve`]), and everything written once on top of it:
//! feasibility, the smallest budget, the limits' checks and the solve itself.
//!
//! A slot DP works on a [`SlotChain`] (sizes rounded up to slots of
//! budget / S bytes, see [the model](crate::model)) in three steps: a *plan*
//! knows the smallest peak it can meet and how large its table will be
//! (both cheap, before any table exists), then *fills* a [`SlotTable`] that
//! answers every budget in slots up to its own.

use crate::chain::Chain;
use crate::schedule::Op;
use crate::slots::{SlotChain, Slots, smallest_feasible_budget};
use crate::solve::{Algorithm, Progress, SolveError, floating, limits, persistent};

/// A filled table: the fastest makespan and its schedule at every budget
/// `m` (in slots) up to the table's own.
pub trait SlotTable {
    /// The discretization the table was built with.
    fn slots(&self) -> Slots;
    /// The fastest makespan within `m` slots; infinite when none fits.
    fn makespan(&self, m: usize) -> f64;
    /// The schedule reaching [`SlotTable::makespan`], `None` when none fits.
    fn sequence(&self, m: usize) -> Option<Vec<Op>>;
}

macro_rules! slot_table {
    ($table:ty, $slots:expr) => {
        impl SlotTable for $table {
            fn slots(&self) -> Slots {
                $slots(self)
            }
            fn makespan(&self, m: usize) -> f64 {
                <$table>::makespan(self, m)
            }
            fn sequence(&self, m: usize) -> Option<Vec<Op>> {
                <$table>::sequence(self, m)
            }
        }
    };
}

slot_table!(persistent::Table, persistent::Table::slots);
slot_table!(floating::Table, floating::Table::slots);
slot_table!(crate::solve::baselines::revolve::Table, crate::solve::baselines::revolve::Table::slots);

/// What a DP knows before it fills its table.
pub trait DpPlan {
    /// The table it fills.
    type Table: SlotTable;
    /// The smallest peak, in slots (a^0 included), of any schedule of the
    /// DP's family under this rounding: the table at budget m is feasible
    /// exactly when m >= this.
    fn min_peak_slots(&self) -> usize;
    /// The bytes its table will take.
    fn table_bytes(&self) -> u64;
    /// Fills the table, reporting `(done, total)` to `progress`.
    fn fill(self, progress: Option<Progress>) -> Self::Table;
}

/// A slot dynamic program.
pub trait SlotDp {
    /// The algorithm it implements.
    const ALGORITHM: Algorithm;
    /// Its plan.
    type Plan: DpPlan;
    /// Prepares a solve of `sc` (cost: see each DP; below its table's).
    fn plan(sc: SlotChain) -> Self::Plan;
    /// Refuses a chain the DP cannot take before anything is allocated: by
    /// default one longer than its stage limit (`limits::dp_stages`).
    fn check(chain: &Chain, _slots: usize) -> Result<(), SolveError> {
        limits::dp_stages(Self::ALGORITHM, chain.len())
    }
}

/// Rotor's persistent DP ([`persistent`]): O(S L^3) time, O(S L^2) memory.
pub struct Persistent;
/// The floating (nested) DP ([`floating`]): O(S L^4) time, O(S L^3) memory.
pub struct Floating;
/// The checkpoint-only DP behind the `revolve` baseline
/// ([`crate::solve::baselines::revolve`]): O(S L^3).
pub struct Revolve;

/// The plan of [`Persistent`] and [`Revolve`]: their min-peak recurrences are
/// O(L^3) and need nothing kept between the steps.
pub struct CubicPlan<const REVOLVE: bool> {
    sc: SlotChain,
}

impl DpPlan for CubicPlan<false> {
    type Table = persistent::Table;
    fn min_peak_slots(&self) -> usize {
        persistent::min_peak_slots(&self.sc)
    }
    fn table_bytes(&self) -> u64 {
        persistent::table_bytes_estimate(&self.sc)
    }
    fn fill(self, progress: Option<Progress>) -> persistent::Table {
        persistent::Table::build(self.sc, progress)
    }
}

impl DpPlan for CubicPlan<true> {
    type Table = crate::solve::baselines::revolve::Table;
    fn min_peak_slots(&self) -> usize {
        crate::solve::baselines::revolve::min_peak_slots(&self.sc)
    }
    fn table_bytes(&self) -> u64 {
        crate::solve::baselines::revolve::table_bytes_estimate(&self.sc)
    }
    fn fill(self, progress: Option<Progress>) -> Self::Table {
        crate::solve::baselines::revolve::Table::build(self.sc, progress)
    }
}

impl DpPlan for floating::Thresholds {
    type Table = floating::Table;
    fn min_peak_slots(&self) -> usize {
        self.min_peak()
    }
    fn table_bytes(&self) -> u64 {
        self.estimate().table_bytes
    }
    fn fill(self, progress: Option<Progress>) -> floating::Table {
        floating::Thresholds::fill(self, progress)
    }
}

impl SlotDp for Persistent {
    const ALGORITHM: Algorithm = Algorithm::Persistent;
    type Plan = CubicPlan<false>;
    fn plan(sc: SlotChain) -> Self::Plan {
        CubicPlan { sc }
    }
}

impl SlotDp for Revolve {
    const ALGORITHM: Algorithm = Algorithm::Revolve;
    type Plan = CubicPlan<true>;
    fn plan(sc: SlotChain) -> Self::Plan {
        CubicPlan { sc }
    }
}

impl SlotDp for Floating {
    const ALGORITHM: Algorithm = Algorithm::Floating;
    type Plan = floating::Thresholds;
    fn plan(sc: SlotChain) -> floating::Thresholds {
        floating::Thresholds::new(sc)
    }
    /// Also refuses a chain whose tables would not fit even at 0 slots (they
    /// grow as L^3 before any slot is counted).
    fn check(chain: &Chain, slots: usize) -> Result<(), SolveError> {
        limits::dp_stages(Algorithm::Floating, chain.len())?;
        let tables = floating::upper_estimate(chain.len(), 0).table_bytes;
        limits::table_memory(Algorithm::Floating, tables, chain.len(), slots)
    }
}

/// The smallest peak, in bytes, of any schedule of `D`'s family (exact, no
/// slot rounding). The cost of `D`'s plan at one-byte slots.
pub fn min_peak_exact<D: SlotDp>(chain: &Chain) -> u64 {
    D::plan(SlotChain::new(chain, Slots::with_slot(u64::MAX, 1))).min_peak_slots() as u64
}

/// True when `D` with `slots` slots finds a schedule at `budget` bytes.
pub fn feasible<D: SlotDp>(chain: &Chain, budget: u64, slots: usize) -> bool {
    let disc = Slots::new(budget, slots);
    D::plan(SlotChain::new(chain, disc)).min_peak_slots() <= disc.capacity
}

/// The smallest budget in bytes at which `D` with `slots` slots finds a
/// schedule, up to slot rounding (see [`smallest_feasible_budget`]): a
/// doubling search and a bisection above [`min_peak_exact`]. `None` if no
/// budget works (fewer slots than values a schedule must hold).
/// O(log M) plans.
pub fn min_budget<D: SlotDp>(chain: &Chain, slots: usize) -> Option<u64> {
    smallest_feasible_budget(min_peak_exact::<D>(chain), slots, |b| feasible::<D>(chain, b, slots))
}

/// `D`'s answer at `budget` bytes with `slots` slots: its schedule, the slot
/// size and the makespan it predicts. Checks the chain ([`SlotDp::check`]),
/// feasibility (an [`SolveError::Infeasible`] names the smallest budget it
/// meets) and the table's memory before filling the table.
pub(crate) fn solve_dp<D: SlotDp>(
    chain: &Chain,
    budget: u64,
    slots: usize,
    progress: Option<Progress>,
) -> Result<(Vec<Op>, u64, f64), SolveError> {
    D::check(chain, slots)?;
    let disc = Slots::new(budget, slots);
    let plan = D::plan(SlotChain::new(chain, disc));
    if plan.min_peak_slots() > disc.capacity {
        return Err(SolveError::Infeasible {
            algorithm: D::ALGORITHM,
            budget,
            min_budget: min_budget::<D>(chain, slots),
        });
    }
    limits::table_memory(D::ALGORITHM, plan.table_bytes(), chain.len(), slots)?;
    let table = plan.fill(progress);
    let ops = table.sequence(disc.capacity).expect("feasible by the min-peak check");
    Ok((ops, disc.slot, table.makespan(disc.capacity)))
}

/// The table `D` fills for budgets up to `budget` bytes with slots of
/// `slot` bytes, after the same checks as [`solve_dp`]; `None` when no
/// budget up to it is feasible.
pub(crate) fn table_up_to<D: SlotDp>(
    chain: &Chain,
    budget: u64,
    slot: u64,
    slots: usize,
    progress: Option<Progress>,
) -> Result<Option<<D::Plan as DpPlan>::Table>, SolveError> {
    D::check(chain, slots)?;
    let disc = Slots::with_slot(budget, slot);
    let plan = D::plan(SlotChain::new(chain, disc));
    if plan.min_peak_slots() > disc.capacity {
        return Ok(None);
    }
    limits::table_memory(D::ALGORITHM, plan.table_bytes(), chain.len(), slots)?;
    Ok(Some(plan.fill(progress)))
}
