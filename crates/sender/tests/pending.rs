//! A declared channel whose token its cold start could not read (`PendingToken`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use punctual_core::ports::{Provider, ProviderRequest};
use punctual_core::provider::ProviderOutcome;
use punctual_core::secret::Secret;
use punctual_provider::HttpProvider;

use punctual_sender::app::{AnyProvider, BuildHttp, PendingToken};

/// A channel whose token cannot be read answers `AccountBlocked` (which trips the channel's
/// own switch) without reaching its vendor, reads again at each call, and sends once a read
/// succeeds; after that the client is built and never read for again.
#[tokio::test]
async fn an_unreadable_channel_token_blocks_that_channel_until_a_read_succeeds() {
    let builds = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&builds);
    let build: BuildHttp = Arc::new(move || {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if n < 2 {
                return Err("could not read secret arn:…:sms-AbCdEf from Secrets Manager".into());
            }
            // Nothing listens on port 9: a sent call is refused, not blocked.
            Ok(HttpProvider::new("http://127.0.0.1:9/v1/messages", &Secret::new("t"), Duration::from_secs(1))?)
        })
    });
    let provider = AnyProvider::Pending(PendingToken::new(
        "sms",
        punctual_core::provider::ProviderProfile { honours_keys: true },
        build,
    ));
    assert!(provider.profile().honours_keys, "its dialect's profile, before any read");
    assert!(!provider.warm_up().await);
    let m =
        punctual_core::testing::message("sms-1", chrono::Utc::now(), chrono::Utc::now() + chrono::TimeDelta::hours(2));
    let req = ProviderRequest {
        message: &m,
        recipient_ref: Some("r-1"),
        channel: Some("sms"),
        data: None,
        timeout: Duration::from_secs(1),
    };
    for _ in 0..2 {
        match provider.send(&req).await.unwrap() {
            ProviderOutcome::AccountBlocked { detail } => {
                assert!(detail.starts_with("channel sms: its token could not be read"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }
    for _ in 0..2 {
        let outcome = provider.send(&req).await.unwrap();
        assert!(matches!(outcome, ProviderOutcome::Transient { status: None, .. }), "sent, and refused: {outcome:?}");
    }
    assert_eq!(builds.load(Ordering::SeqCst), 3, "read at each blocked call, then built once");
}
