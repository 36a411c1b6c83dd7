//! Writes a stack of repeated blocks (issue 25) as a chain file on stdout:
//! the first HEAD stages of CHAIN, N copies of the BLOCK stages after them,
//! its last TAIL stages and its loss.
//!
//! ```text
//! cargo run --release --example stack -- chains/gpt2-xl-s1024-b4-bf16.json 1000 > stack1000.json
//! remat solve stack1000.json -m 79GiB
//! ```
//! HEAD, BLOCK and TAIL default to 1, 1 and 2: an embedding, N transformer
//! blocks, `ln_f` and the head.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        return Err("usage: stack CHAIN N [HEAD BLOCK TAIL]".into());
    }
    let chain = remat::Chain::from_json(&std::fs::read_to_string(&args[0])?)?;
    let n: usize = args[1].parse()?;
    let arg = |i: usize, default: usize| args.get(i).map_or(Ok(default), |a| a.parse());
    let stacked = remat::synthetic::stack(&chain, arg(2, 1)?, arg(3, 1)?, arg(4, 2)?, n);
    println!("{}", stacked.to_json());
    Ok(())
}
