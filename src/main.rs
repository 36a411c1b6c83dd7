//! The `remat` command line: the library's [`remat::cli`] (feature `cli`)
//! on the process's arguments.

#![deny(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    remat::cli::main()
}
