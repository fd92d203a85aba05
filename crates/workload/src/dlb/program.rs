//! A benchmark program's name, its usage errors and its exit.

static PROGRAM: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names the program in error messages (default `dlb-bench`).
pub fn set_program(name: &'static str) {
    let _ = PROGRAM.set(name);
}

/// A command line, flag combination or input file that cannot run, in words that name
/// it. The library returns it; only a program's own front end ([`fail`]) exits, with 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl UsageError {
    /// For a program's `main`: prints it and exits 2 ([`fail`]).
    pub fn exit(&self) -> ! {
        fail(2, &self.0)
    }
}

/// Prints `msg` as one line on stderr and exits with `code` (2: bad input; 1: failure).
pub fn fail(code: i32, msg: &str) -> ! {
    eprintln!(
        "{}: error: {msg}",
        PROGRAM.get().copied().unwrap_or("dlb-bench")
    );
    std::process::exit(code)
}

/// clap's error on one line: its message and hints, without the usage block.
pub fn clap_error_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let mut parts = Vec::new();
    for line in rendered.lines() {
        let line = line.trim();
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if !line.is_empty() {
            parts.push(line.trim_start_matches("error:").trim());
        }
    }
    parts.join(" ")
}

/// [`parse_args`] for `program`, which then names itself in every error ([`fail`]).
pub fn parse_args_of<T: clap::Parser>(program: &'static str) -> T {
    set_program(program);
    parse_args()
}

/// Parses the command line: help and version print and exit 0; an error prints one line
/// ([`clap_error_line`]) and exits 2.
pub fn parse_args<T: clap::Parser>() -> T {
    match T::try_parse() {
        Ok(t) => t,
        Err(e) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                let _ = e.print();
                std::process::exit(0)
            }
            _ => fail(2, &clap_error_line(&e)),
        },
    }
}
