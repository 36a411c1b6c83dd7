//! The `remat` command line: parse, call the library, print.

#![deny(unsafe_code)]

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
