//! Every sample payload under `events/` deserialises into the event type its function takes, so
//! none can rot (handler tests, `cargo lambda invoke` and `sam local invoke` all use them).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::path::{Path, PathBuf};

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use aws_lambda_events::event::sqs::SqsEvent;

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() { out.extend(files(&path)) } else { out.push(path) }
    }
    out
}

#[test]
fn every_sample_event_deserialises_into_its_function_event_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../events");
    let all = files(&root);
    assert!(all.len() >= 10, "expected the sample events, found {}", all.len());
    for path in all {
        let text = std::fs::read_to_string(&path).unwrap();
        let kind = path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        let shown = path.display();
        match kind.as_str() {
            "sender" => {
                let e: SqsEvent = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{shown}: {e}"));
                assert!(
                    !e.records.is_empty() && e.records.iter().all(|r| r.message_id.is_some() && r.body.is_some()),
                    "{shown}"
                );
            }
            "scheduler" => {
                let e: EventBridgeEvent = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{shown}: {e}"));
                assert_eq!(e.detail_type, "Scheduled Event", "{shown}");
            }
            _ if shown.to_string().ends_with(".schema.json") || shown.to_string().ends_with(".expect") => {
                serde_json::from_str::<serde_json::Value>(&text).ok();
            }
            // A producer's commands (docs/integration.md): each decodes and passes the row rules.
            "commands" => {
                let (command, row) = punctual_core::command::RenewalCommand::read(&text, &["email".to_owned()])
                    .unwrap_or_else(|e| panic!("{shown}: {e}"));
                assert_eq!(row.renewal.version, Some(command.version), "{shown}");
            }
            // Each bad command is refused with the reason its `.expect` names.
            "invalid" => {
                let expect = std::fs::read_to_string(path.with_extension("expect")).unwrap();
                let e = punctual_core::command::RenewalCommand::read(&text, &["email".to_owned()])
                    .err()
                    .unwrap_or_else(|| panic!("{shown} was accepted"));
                assert!(e.to_string().contains(expect.trim_end()), "{shown}: {e} should contain {expect:?}");
            }
            // Outcome events as a rule's SQS target delivers them.
            "outcomes" => {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{shown}: {e}"));
                assert_eq!(
                    (v["source"].as_str(), v["detail-type"].as_str()),
                    (Some("punctual"), Some("punctual.outcome"))
                );
                let detail: punctual_core::outcome::OutcomeEvent =
                    serde_json::from_value(v["detail"].clone()).unwrap_or_else(|e| panic!("{shown}: {e}"));
                assert!(detail.event_id.starts_with("evt_"), "{shown}");
            }
            other => {
                // Other functions' payloads are plain JSON until their event types exist.
                serde_json::from_str::<serde_json::Value>(&text).unwrap_or_else(|e| panic!("{shown} ({other}): {e}"));
            }
        }
    }
}
