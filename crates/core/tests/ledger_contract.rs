//! The ledger contract suite against the in-memory fake (the same suite runs against DynamoDB
//! on moto and dynalite in `tests/`).

use chrono::Utc;
use punctual_core::testing::{MemoryLedger, ledger_contract};

#[tokio::test]
async fn memory_ledger_obeys_the_ledger_contract() {
    ledger_contract::run(&MemoryLedger::new(), Utc::now()).await;
}

#[tokio::test]
async fn memory_ledger_serialises_racing_writers() {
    ledger_contract::run_concurrent(&MemoryLedger::new(), Utc::now(), 16).await;
}

#[tokio::test]
async fn memory_ledger_keeps_its_outbox_as_the_contract_says() {
    punctual_core::testing::outbox_contract::run(&MemoryLedger::with_outbox(), Utc::now()).await;
}
