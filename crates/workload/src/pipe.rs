//! A closed standard output ends a command-line program quietly.

/// Makes a closed standard output (`titus sim --json | head -1`) end the program quietly
/// with status 141, as a shell tool killed by SIGPIPE would, instead of a panic and a
/// backtrace from `println!`. Call first thing in `main`.
pub fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}
