//! What people look at: comparison tables, trade-off sweeps, the gain over
//! checkpoint_sequential, and SVG charts. Every figure here comes from
//! [`crate::solve::solve`], so from the simulator's replay.

pub mod compare;
pub mod gain;
pub mod pipeline;
pub mod plot;
pub(crate) mod svg;
pub mod sweep;

pub use compare::{Comparison, GainOverSequential, Verdict, compare, reported};
pub use gain::{SequentialGain, sequential_gain};
pub use plot::{timeline_svg, tradeoff_svg};
pub use sweep::{Sweep, sweep};
