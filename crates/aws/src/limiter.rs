//! The shared limiter's schedule in DynamoDB: a [`SlotStore`] whose every operation is one
//! conditional `UpdateItem` (two when the first guess about the schedule was wrong), never a
//! read-modify-write. Items live in the ledger table under `pk = limiter:{key}`.
//!
//! Attributes (milliseconds since the epoch): `next` (first unbooked slot), `near_until`
//! (deadline-near work booked recently), `cut_rate` + `cut_at` (the last 429 cut) +
//! `cut_recovered` (when that cut is back at the quota: a cut never raises the rate),
//! `paused_until` (Retry-After). Invariant: `next ≥ paused_until`, kept by [`pause`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use aws_sdk_dynamodb::Client;
use punctual_core::limiter::{Book, Booked, Lane, SlotStore, SlotView};
use punctual_core::ports::LimiterError;

use crate::dynamodb::{self, ConditionalUpdate, DynamoError, Item, get_i64, n};

/// The DynamoDB slot store. Clones share the write counter and the schedule cache.
#[derive(Debug, Clone)]
pub struct DynamoSlotStore {
    client: Client,
    table: String,
    writes: Arc<AtomicU64>,
    /// Last `next` seen per key: picks which conditional write to try first.
    seen: Arc<Mutex<HashMap<String, i64>>>,
}

fn err(e: DynamoError) -> LimiterError {
    LimiterError::Unknown(Box::new(e))
}

fn view_of(item: Option<&Item>) -> SlotView {
    let Some(item) = item else { return SlotView::default() };
    SlotView {
        next_ms: get_i64(item, "next").unwrap_or(0),
        near_until_ms: get_i64(item, "near_until").unwrap_or(0),
        cut_rate: item.get("cut_rate").and_then(|v| v.as_n().ok()).and_then(|s| s.parse().ok()),
        cut_at_ms: get_i64(item, "cut_at").unwrap_or(0),
        cut_recovered_ms: get_i64(item, "cut_recovered").unwrap_or(0),
        paused_until_ms: get_i64(item, "paused_until").unwrap_or(0),
    }
}

impl DynamoSlotStore {
    /// A store over `table` (the ledger table).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into(), writes: Arc::default(), seen: Arc::default() }
    }

    fn pk(key: &str) -> String {
        format!("limiter:{key}")
    }

    fn update(&self, key: &str) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.client.update_item().table_name(&self.table).key("pk", dynamodb::s(Self::pk(key)))
    }

    fn remember(&self, key: &str, next: i64) {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).insert(key.to_owned(), next);
    }

    /// The schedule is idle (`next < now`, or never booked): start a block at `now`.
    async fn reset(&self, key: &str, req: &Book) -> Result<ConditionalUpdate, LimiterError> {
        let mut set = "SET #n = :end".to_owned();
        let mut u = self
            .update(key)
            .expression_attribute_names("#n", "next")
            .expression_attribute_values(":end", n(req.now_ms + req.block_ms))
            .expression_attribute_values(":idle", n(req.now_ms - req.grace_ms))
            .condition_expression("attribute_not_exists(#n) OR #n < :idle");
        if let Lane::Near { hold_until_ms } = req.lane {
            set.push_str(", near_until = :hold");
            u = u.expression_attribute_values(":hold", n(hold_until_ms));
        }
        dynamodb::update_if(&self.client, u.update_expression(set)).await.map_err(err)
    }

    /// The schedule is busy: take the block at `next`, within the horizon and the lane rule.
    async fn advance(&self, key: &str, req: &Book) -> Result<ConditionalUpdate, LimiterError> {
        let mut set = "SET #n = #n + :blk".to_owned();
        let mut cond = "#n >= :idle AND #n <= :max".to_owned();
        let mut u = self
            .update(key)
            .expression_attribute_names("#n", "next")
            .expression_attribute_values(":blk", n(req.block_ms))
            .expression_attribute_values(":idle", n(req.now_ms - req.grace_ms))
            .expression_attribute_values(":max", n(req.now_ms + req.ahead_ms));
        match req.lane {
            Lane::Near { hold_until_ms } => {
                set.push_str(", near_until = :hold");
                u = u.expression_attribute_values(":hold", n(hold_until_ms));
            }
            Lane::Normal { fill_ms } => {
                cond.push_str(" AND (attribute_not_exists(near_until) OR near_until < :now OR #n <= :fill)");
                u = u
                    .expression_attribute_values(":now", n(req.now_ms))
                    .expression_attribute_values(":fill", n(req.now_ms + fill_ms));
            }
            Lane::Cap => {}
        }
        dynamodb::update_if(&self.client, u.update_expression(set).condition_expression(cond)).await.map_err(err)
    }
}

impl SlotStore for DynamoSlotStore {
    async fn book(&self, key: &str, req: &Book) -> Result<Booked, LimiterError> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner).get(key).copied();
        let idle_before = req.now_ms - req.grace_ms;
        let mut idle_first = seen.is_some_and(|next| next < idle_before);
        // At most three writes: a wrong guess, the right one, and one more if another sender
        // changed the schedule in between.
        let mut last = SlotView::default();
        for _ in 0..3 {
            let idle = idle_first;
            let outcome = if idle { self.reset(key, req).await? } else { self.advance(key, req).await? };
            match outcome {
                ConditionalUpdate::Written(item) => {
                    let view = view_of(item.as_ref());
                    self.remember(key, view.next_ms);
                    let start_ms = if idle { req.now_ms } else { view.next_ms - req.block_ms };
                    return Ok(Booked::Got { start_ms, view });
                }
                ConditionalUpdate::ConditionFailed(item) => {
                    last = view_of(item.as_ref());
                    self.remember(key, last.next_ms);
                    let now_idle = item.is_none() || last.next_ms < idle_before;
                    // The guess was right and the condition still failed: the horizon or the
                    // lane refused — when the item read says so. A refusal can come with no
                    // item (there was none: DynamoDB returns nothing then, dynalite never
                    // returns one) and the item read after it may be one a racing sender has
                    // just created: a busy schedule that does not refuse this booking. That
                    // refusal was the missing item, not the horizon: try again.
                    if now_idle == idle && (idle || req.refuses(&last)) {
                        return Ok(Booked::Full { view: last });
                    }
                    idle_first = now_idle;
                }
            }
        }
        Ok(Booked::Full { view: last })
    }

    async fn cut(
        &self,
        key: &str,
        now_ms: i64,
        rate: f64,
        recovered_ms: i64,
        min_gap_ms: i64,
    ) -> Result<(), LimiterError> {
        // Once per gap, and only ever lower: a cut that recovers no later than the stored one
        // would raise the rate (all cuts recover at the same slope; see `SlotStore::cut`).
        let u = self
            .update(key)
            .update_expression("SET cut_rate = :r, cut_at = :now, cut_recovered = :rec")
            .condition_expression(
                "(attribute_not_exists(cut_at) OR cut_at < :gap) \
                 AND (attribute_not_exists(cut_recovered) OR cut_recovered < :rec)",
            )
            .expression_attribute_values(":r", n(rate))
            .expression_attribute_values(":now", n(now_ms))
            .expression_attribute_values(":rec", n(recovered_ms))
            .expression_attribute_values(":gap", n(now_ms - min_gap_ms));
        dynamodb::update_if(&self.client, u).await.map_err(err)?;
        Ok(())
    }

    async fn pause(&self, key: &str, until_ms: i64) -> Result<(), LimiterError> {
        // next ≥ paused_until always, so raising `next` to `until` also raises the pause.
        let u = self
            .update(key)
            .update_expression("SET #n = :u, paused_until = :u")
            .condition_expression("attribute_not_exists(#n) OR #n < :u")
            .expression_attribute_names("#n", "next")
            .expression_attribute_values(":u", n(until_ms));
        if let ConditionalUpdate::ConditionFailed(_) = dynamodb::update_if(&self.client, u).await.map_err(err)? {
            let u = self
                .update(key)
                .update_expression("SET paused_until = :u")
                .condition_expression("attribute_not_exists(paused_until) OR paused_until < :u")
                .expression_attribute_values(":u", n(until_ms));
            dynamodb::update_if(&self.client, u).await.map_err(err)?;
        }
        Ok(())
    }

    async fn view(&self, key: &str) -> Result<Option<SlotView>, LimiterError> {
        let item = dynamodb::get(&self.client, &self.table, &Self::pk(key)).await.map_err(err)?;
        let view = item.as_ref().map(|i| view_of(Some(i)));
        // A read is as good a sighting as a write's answer: the next booking guesses idle or
        // busy from it (a guess from before a long wait behind near work is usually wrong,
        // and a wrong guess is a wasted write).
        if let Some(v) = &view {
            self.remember(key, v.next_ms);
        }
        Ok(view)
    }

    fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }
}
