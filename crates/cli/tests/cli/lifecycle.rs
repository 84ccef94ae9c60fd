//! Process lifecycle: a signal to `punctual run` alone (SIGTERM from `timeout`, a CI runner or
//! `docker stop`; SIGINT from a supervisor's `kill -INT`) stops it promptly and stops every
//! process it started; a `local up` that fails while provisioning stops what it started.
//!
//! These start their own emulator processes (the test unsets `AWS_ENDPOINT_URL`), so they run
//! one after another in one test, and prove each process is gone by its port no longer
//! answering.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use punctual_tests::unique;

/// Collects a child's stderr as it comes (progress lines use `\r`, not `\n`).
fn collect(child: &mut Child) -> Arc<Mutex<String>> {
    let out = Arc::new(Mutex::new(String::new()));
    let mut stderr = child.stderr.take().unwrap();
    let sink = Arc::clone(&out);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    out
}

fn wait_for(text: &Arc<Mutex<String>>, needle: &str, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if text.lock().unwrap().contains(needle) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Every `http://127.0.0.1:PORT` the text names.
fn ports(text: &str) -> Vec<u16> {
    text.split("http://127.0.0.1:")
        .skip(1)
        .filter_map(|rest| rest.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok())
        .collect()
}

fn answers(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300)).is_ok()
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").args(["-s", sig, &child.id().to_string()]).status().unwrap().success();
    assert!(ok, "kill -s {sig}");
}

fn punctual(dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_punctual"));
    cmd.current_dir(dir)
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_ENDPOINT_URL_DYNAMODB")
        .env("PUNCTUAL_STATE_DIR", dir.join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn a_signal_or_a_failed_start_leaves_no_process_behind() {
    for sig in ["TERM", "INT"] {
        let dir = std::env::temp_dir().join(unique("punctual-lifecycle"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = punctual(&dir).args(["run", "--reminders", "3000"]).spawn().unwrap();
        let err = collect(&mut child);
        assert!(wait_for(&err, "imported", Duration::from_secs(120)), "run never got going: {}", err.lock().unwrap());
        let started = ports(&err.lock().unwrap());
        assert!(!started.is_empty() && started.iter().all(|p| answers(*p)), "{started:?}");
        std::thread::sleep(Duration::from_millis(1500)); // mid-delivery
        let sent = Instant::now();
        signal(&child, sig);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if sent.elapsed() > Duration::from_secs(15) {
                let _ = child.kill();
                panic!("SIG{sig}: run did not stop within 15 s: {}", err.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let took = sent.elapsed();
        let want = if sig == "TERM" { 143 } else { 130 };
        assert_eq!(status.code(), Some(want), "SIG{sig}: exits as interrupted (128 + signal), not killed: {status:?}");
        for p in &started {
            assert!(!answers(*p), "SIG{sig}: port {p} still answers: a process run started outlived it");
        }
        eprintln!("SIG{sig}: run stopped in {} ms, {} processes with it", took.as_millis(), started.len());
        let _ = std::fs::remove_dir_all(&dir);
    }

    // A `local up` that fails after starting everything, before writing its state (a fault
    // injected where a late provisioning error would strike), stops what it started: without a
    // state file `local down` could not find it. The error names the pids it stopped.
    let dir = std::env::temp_dir().join(unique("punctual-lifecycle-up"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = punctual(&dir).args(["local", "up"]).env("PUNCTUAL_FAULT", "local-up-before-state").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{err}");
    assert!(!dir.join("state/state.json").exists());
    let pids: Vec<u32> = err
        .split("[stopped pids: ")
        .nth(1)
        .and_then(|r| r.split(']').next())
        .map(|p| p.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default();
    // moto and the provider double at least (and dynalite).
    assert!(pids.len() >= 2, "{err}");
    let gone = |pid: u32| {
        (0..50).any(|_| {
            let alive =
                Command::new("kill").args(["-0", &pid.to_string()]).stderr(Stdio::null()).status().unwrap().success();
            if alive {
                std::thread::sleep(Duration::from_millis(100));
            }
            !alive
        })
    };
    for pid in &pids {
        assert!(gone(*pid), "pid {pid} outlived the failed local up: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
