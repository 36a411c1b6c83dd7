//! Output that cannot destroy data: files are written to a temporary file in
//! the target's folder and renamed over the target (so a failed or interrupted
//! write leaves the old file whole), an output path that names one of the
//! inputs is refused, and standard output goes through [`out!`]/[`outln!`],
//! which turn a write error into a clear exit instead of `println!`'s panic.

use std::io::Write;
use std::path::Path;

use super::{CliResult, Exit, Failure};

/// Writes formatted text to standard output; on failure ends the program (see
/// [`stdout_failed`]). Use instead of `print!`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::write_stdout(format_args!($($arg)*))
    };
}

/// Writes formatted text and a newline to standard output; on failure ends the
/// program (see [`stdout_failed`]). Use instead of `println!`.
macro_rules! outln {
    () => {
        $crate::cli::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {{
        $crate::cli::output::write_stdout(format_args!($($arg)*));
        $crate::cli::output::write_stdout(format_args!("\n"));
    }};
}

pub(crate) use {out, outln};

/// Writes to standard output, or ends the program when that fails.
pub fn write_stdout(args: std::fmt::Arguments) {
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        stdout_failed(&e);
    }
}

/// Flushes standard output at the end of a command (a final line without a
/// newline, or a pipe's buffer), ending the program the same way on failure.
pub fn flush_stdout() {
    if let Err(e) = std::io::stdout().lock().flush() {
        stdout_failed(&e);
    }
}

/// What a failed write to standard output means. A reader that has gone
/// (`remat ... | head`) has all it wanted: stop quietly with exit 0, like other
/// command-line tools. Anything else (a full disk, `> /dev/full`, an I/O
/// error) loses output the user asked for: say so and exit 2. Exiting here
/// rather than returning keeps every printing function simple; nothing is
/// left half-written, since files are written before anything is printed and
/// only through [`write_file`]'s rename.
pub fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(Exit::Success.code().into());
    }
    eprintln!("error: cannot write to standard output: {e}");
    std::process::exit(Exit::BadInput.code().into());
}

/// Fails (exit 2) when `output` is one of `inputs` (the same file after
/// resolving links and relative paths): writing it would destroy the input
/// the output was computed from. `-` (standard input) is never a file here.
pub fn refuse_input(output: &Path, flag: &str, inputs: &[&Path]) -> CliResult {
    let Ok(out) = std::fs::canonicalize(output) else {
        return Ok(()); // does not exist yet: it cannot be an input
    };
    for input in inputs.iter().filter(|p| p.as_os_str() != "-") {
        if std::fs::canonicalize(input).is_ok_and(|i| i == out) {
            return Err(Failure::input(anyhow::anyhow!(
                "{flag} `{}` is the input file `{}`: writing it would destroy the input; choose another path",
                output.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

/// Where `path` really writes: the file it names after resolving links and
/// relative folders, also when it does not exist yet (its folder resolved,
/// or a dangling link's target). Two paths with the same answer are the same
/// file.
fn resolved(path: &Path) -> std::path::PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    // A link to a file not yet written: where it points.
    let path = match std::fs::read_link(path) {
        Ok(target) if target.is_absolute() => target,
        Ok(target) => path.parent().unwrap_or(Path::new("")).join(target),
        Err(_) => path.to_path_buf(),
    };
    let parent = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    match (std::fs::canonicalize(&parent), path.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => path,
    }
}

/// Fails (exit 2) when two of a command's outputs (`(flag, path)`) are the
/// same file, directly or through a link: the second write would replace the
/// first, and one output would be lost with exit 0.
pub fn refuse_same_output(outputs: &[(&str, &Path)]) -> CliResult {
    for (i, (flag_a, a)) in outputs.iter().enumerate() {
        for (flag_b, b) in &outputs[i + 1..] {
            if resolved(a) == resolved(b) {
                return Err(Failure::input(anyhow::anyhow!(
                    "{flag_a} `{}` and {flag_b} `{}` are the same file: one would overwrite the other; choose two \
                     paths",
                    a.display(),
                    b.display()
                )));
            }
        }
    }
    Ok(())
}

/// The temporary files of [`write_file`] are named `.remat-PID-XXXXXX.tmp`
/// after the process writing them, so that one left by a process that was
/// killed mid-write (SIGKILL, a power cut) is recognised and removed by the
/// next write into that folder.
const TEMP_PREFIX: &str = ".remat-";
const TEMP_SUFFIX: &str = ".tmp";

/// The process id in a temporary file's name, if it is one of ours.
fn temp_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(TEMP_PREFIX)?.strip_suffix(TEMP_SUFFIX)?;
    rest.split_once('-')?.0.parse().ok()
}

/// Whether process `pid` is running (Linux: `/proc/PID` exists). Elsewhere
/// nothing is known, and a file is left alone unless it is a day old.
fn alive(pid: u32, modified: Option<std::time::SystemTime>) -> bool {
    if pid == std::process::id() {
        return true;
    }
    if Path::new("/proc/self").exists() {
        return Path::new("/proc").join(pid.to_string()).exists();
    }
    modified.and_then(|m| m.elapsed().ok()).is_none_or(|age| age < std::time::Duration::from_secs(86_400))
}

/// Removes the temporary files in `dir` left by writers that are no longer
/// running. Best effort: a file that cannot be removed is left. O(entries of
/// `dir`).
pub fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temp_owner) else { continue };
        let meta = entry.metadata().ok();
        if meta.as_ref().is_some_and(|m| m.is_file()) && !alive(pid, meta.and_then(|m| m.modified().ok())) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Writes `text` to `path` without ever leaving a truncated file: the text
/// goes to a temporary file in the target's folder, is synced, then renamed
/// over the target (atomic on POSIX file systems), so the old content stays
/// whole until the new one is complete; the temporary files of writers that
/// were killed mid-write are removed first ([`remove_stale_temporaries`]).
/// A target that exists and is not a
/// regular file (`/dev/stdout`, a named pipe) cannot be replaced by a rename
/// and is written directly. Fails with exit 2 naming the file.
pub fn write_file(path: &Path, text: &str) -> CliResult {
    let fail = |e: &dyn std::fmt::Display| Failure::input(anyhow::anyhow!("cannot write `{}`: {e}", path.display()));
    // Follow a link to the file it names, so the rename replaces that file
    // and not the link.
    let target = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if std::fs::metadata(&target).is_ok_and(|m| !m.is_file()) {
        return std::fs::write(&target, text).map_err(|e| fail(&e));
    }
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    remove_stale_temporaries(&dir);
    let prefix = format!("{TEMP_PREFIX}{}-", std::process::id());
    let mut tmp =
        tempfile::Builder::new().prefix(&prefix).suffix(TEMP_SUFFIX).tempfile_in(&dir).map_err(|e| fail(&e))?;
    tmp.write_all(text.as_bytes()).map_err(|e| fail(&e))?;
    tmp.as_file().sync_all().map_err(|e| fail(&e))?;
    // Keep the permissions of the file being replaced (the temporary file is
    // created 0600).
    if let Ok(meta) = std::fs::metadata(&target) {
        let _ = std::fs::set_permissions(tmp.path(), meta.permissions());
    } else {
        set_default_permissions(tmp.path());
    }
    tmp.persist(&target).map_err(|e| fail(&e.error))?;
    Ok(())
}

/// A new file gets the permissions `std::fs::write` would give it (0666 less
/// the umask, which cannot be read without unsafe code: 0644 is its usual
/// result), not the temporary file's private 0600.
#[cfg(unix)]
fn set_default_permissions(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644));
}

#[cfg(not(unix))]
fn set_default_permissions(_path: &Path) {}
