//! CPU seconds per process over a run: the emulators this command started and `punctual`
//! itself, read from `/proc/PID/stat` (user + system time). On these machines the local
//! pipeline is emulator-bound (every request per message costs emulator CPU), so the report
//! says who spent the cores: a change that moves work onto the emulators shows as a higher
//! `emulator_share` before it shows as a lower utilisation.
//!
//! Linux only: elsewhere (or for an emulator this command did not start, at
//! `AWS_ENDPOINT_URL`) the figures are absent, never guessed.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

/// Clock ticks per second of `/proc/PID/stat`'s times (`getconf CLK_TCK`; 100 on every Linux
/// this runs on, read once).
fn ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// User + system CPU seconds of one process so far (`None` when unreadable).
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_ticks(&stat).map(|t| t / ticks_per_second())
}

/// utime + stime of one `/proc/PID/stat` line, in clock ticks: fields 14 and 15 (the 12th and
/// 13th after the command name).
fn stat_ticks(stat: &str) -> Option<f64> {
    let mut fields = punctual_ops::target::stat_fields(stat)?.skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The processes whose CPU is the emulators' (the provider double, when it runs as its own
/// process under `local up`, is measured beside them but is not one).
pub const EMULATORS: [&str; 2] = ["moto", "dynalite"];

/// A start reading of named processes (`punctual` is this process).
#[derive(Debug, Clone)]
pub struct CpuMeter {
    started: Instant,
    start: Vec<(String, String, f64)>,
}

/// CPU seconds each process spent over the measured span.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CpuShare {
    /// Wall seconds measured.
    pub wall_seconds: f64,
    /// CPU seconds per process (`moto`, `dynalite`, `punctual`, and `provider-double` when it
    /// is a process of its own).
    pub seconds: BTreeMap<String, f64>,
    /// The emulators' CPU seconds ÷ all measured CPU seconds (0..1); `None` when no emulator's
    /// time could be read.
    pub emulator_share: Option<f64>,
    /// All measured CPU seconds ÷ (wall seconds × cores): how busy the machine was.
    pub cores_busy: f64,
}

impl CpuMeter {
    /// Reads the named processes now (`punctual` is added as this process).
    pub fn start(processes: &[(&str, u32)]) -> Self {
        let mut start: Vec<(String, String, f64)> = processes
            .iter()
            .filter_map(|(name, pid)| {
                let pid = pid.to_string();
                cpu_seconds(&pid).map(|s| ((*name).to_owned(), pid, s))
            })
            .collect();
        if let Some(s) = cpu_seconds("self") {
            start.push(("punctual".to_owned(), "self".to_owned(), s));
        }
        Self { started: Instant::now(), start }
    }

    /// What each process spent since [`CpuMeter::start`].
    pub fn stop(&self) -> CpuShare {
        let wall = self.started.elapsed().as_secs_f64();
        let mut seconds = BTreeMap::new();
        for (name, pid, before) in &self.start {
            if let Some(now) = cpu_seconds(pid) {
                *seconds.entry(name.clone()).or_insert(0.0) += round3(now - before);
            }
        }
        let total: f64 = seconds.values().sum();
        let emulators: Vec<f64> =
            seconds.iter().filter(|(k, _)| EMULATORS.contains(&k.as_str())).map(|(_, v)| *v).collect();
        let emulator_share =
            (!emulators.is_empty() && total > 0.0).then(|| round3(emulators.iter().sum::<f64>() / total));
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get) as f64;
        let cores_busy = if wall > 0.0 { round3(total / (wall * cores)) } else { 0.0 };
        CpuShare { wall_seconds: round3(wall), seconds, emulator_share, cores_busy }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl CpuShare {
    /// One line for the human report, its label padded to `width` (the report's column).
    pub fn render(&self, width: usize) -> String {
        let each: Vec<String> = self.seconds.iter().map(|(k, v)| format!("{k} {v:.1} s")).collect();
        let share = self.emulator_share.map_or_else(|| "unknown".to_owned(), |s| format!("{:.0} %", s * 100.0));
        format!(
            "{:width$}{} over {:.1} s; emulators' share {share}; cores busy {:.0} %\n",
            "cpu",
            each.join(", "),
            self.wall_seconds,
            self.cores_busy * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn this_process_spends_cpu_that_the_meter_sees() {
        let meter = CpuMeter::start(&[]);
        // Busy for a while: the reading must grow and be attributed to `punctual`.
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 150 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let share = meter.stop();
        let own = share.seconds["punctual"];
        assert!(own > 0.0, "{share:?}");
        assert_eq!(share.emulator_share, None, "no emulator was measured: {share:?}");
        assert!(share.render(4).starts_with("cpu punctual") && share.render(4).contains("emulators' share unknown"));
    }

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped_correctly() {
        // A process named "a) b": utime 250 and stime 50 are fields 14 and 15.
        assert_eq!(stat_ticks("42 (a) b) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0"), Some(300.0));
        assert_eq!(stat_ticks("42 (x) S 1 2"), None, "a short line is unreadable, not zero");
    }
}
