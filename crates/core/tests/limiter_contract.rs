#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The slot-store contract on the in-memory store (the DynamoDB store runs the same suite in
//! `tests/tests/limiter.rs`).

use punctual_core::testing::{MemorySlotStore, limiter_contract};

#[tokio::test]
async fn memory_slot_store_obeys_the_contract() {
    limiter_contract::run(&MemorySlotStore::default(), "contract", 1_796_115_600_000).await;
}
