//! `punctual`, the operator and developer CLI. Each subcommand is a module whose `run` returns
//! a report value; `main.rs` parses flags and prints (human or `--json`).

pub mod import;
