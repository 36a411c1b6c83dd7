//! `remat._core.main(argv)`: the `remat` command line, the same code as the
//! Rust binary's ([`remat::cli::run`]), so that `pip install` puts a `remat`
//! command on PATH (`remat.__main__:main` calls this).

use pyo3::prelude::*;

/// Runs the `remat` command line on `argv` (the program name first, as in
/// `sys.argv`) and returns its exit code (0 success, 1 infeasible budget, 2
/// bad input or usage, 3 time limit, 70 internal error; `remat --help` lists
/// them). It prints to the process's stdout and stderr directly, without the
/// GIL held.
#[pyfunction]
pub fn main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| remat::cli::run(argv))
}
