//! The machine remat runs on: how much memory one solve may use. A leaf
//! below every solver, so that each solver family's limit (the chain
//! solvers' in [`crate::solve::limits`], the graph MILP's in `guard`) reads
//! the machine's memory from one place.

/// The memory, in bytes, one solve may use for its tables: half of the
/// machine's physical memory (`MemTotal` of `/proc/meminfo`; 4 GiB where it
/// cannot be read), and at most half of what the address-space
/// limit (`Max address space` of `/proc/self/limits`) leaves above the
/// process's current size. Half, because tables are not the only allocation
/// and a second copy may exist while a result is built. A fixed figure per
/// machine (without an address-space limit), so the same input gets the same
/// answer there. O(1) (two small file reads).
pub fn memory_limit() -> u64 {
    let physical = physical_memory().map_or(4 << 30, |b| b / 2);
    match address_space_left() {
        Some(left) => physical.min(left / 2),
        None => physical,
    }
}

fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Bytes of address space the process may still map: the soft
/// `RLIMIT_AS` less the current virtual size; `None` when unlimited or
/// unreadable (not Linux).
fn address_space_left() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let limit = address_space_limit(&limits)?;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let used = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |kib| kib.saturating_mul(1024));
    Some(limit.saturating_sub(used))
}

/// The soft address-space limit in bytes from the text of
/// `/proc/self/limits` (`Max address space  4294967296  unlimited  bytes`);
/// `None` when unlimited or absent.
fn address_space_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max address space"))?;
    line.trim_start_matches("Max address space").split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_address_space_limit() {
        let limited = "Limit                     Soft Limit           Hard Limit           Units\n\
                       Max cpu time              unlimited            unlimited            seconds\n\
                       Max address space         4294967296           unlimited            bytes\n";
        assert_eq!(address_space_limit(limited), Some(4_294_967_296));
        let unlimited = "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(address_space_limit(unlimited), None);
        assert_eq!(address_space_limit(""), None);
    }

    #[test]
    fn a_solve_may_use_some_memory() {
        assert!(memory_limit() > 0);
    }
}
