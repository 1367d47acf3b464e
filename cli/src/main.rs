//! `latchkey`: run a command under a ZooKeeper lock (`latchkey lock`), and
//! an operator's view of recipe nodes (`latchkey inspect`, `latchkey watch`).

fn main() {
    let args = std::env::args_os().skip(1).collect();
    std::process::exit(latchkey_cli::latchkey(args));
}
