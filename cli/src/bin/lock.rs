//! `lock`: the same program as `latchkey lock`, under its older name.

fn main() {
    let args = std::env::args_os().skip(1).collect();
    std::process::exit(latchkey_cli::lock(args));
}
