//! `punctual`, the operator and developer CLI. Each subcommand is a module whose `run` returns
//! a report value; `main.rs` parses flags and prints (human or `--json`).

pub mod bench;
pub mod chart;
pub mod env;
pub mod esm;
pub mod import;
pub mod local;
pub mod ops;
pub mod run;
pub mod simulate_chart;
