//! SQS adapter: batch sends with per-entry results, visibility, delete, receive, and the
//! sender's requeue and quarantine (DLQ with failure metadata as message attributes).

use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName, SendMessageBatchRequestEntry};
use chrono::{DateTime, Utc};
use punctual_core::contract::{ReminderMessage, format_instant};
use punctual_core::lanes::{LaneDepths, QueueLane};
use punctual_core::ports::{BoxError, Quarantine, QueueError, Release, SendQueue};

/// SQS's limit on `DelaySeconds` (15 minutes).
pub const MAX_DELAY: Duration = Duration::from_secs(900);
/// SQS's limit on entries in one batch call.
pub const MAX_BATCH: usize = 10;
/// DLQ `detail` attributes are cut to this many bytes.
pub const MAX_DETAIL_BYTES: usize = 1024;

/// The DLQ message attributes a quarantine sets (names are stable: the redrive and `explain`
/// read them). A DLQ message without `reason` arrived through the queue's redrive policy
/// (`maxReceiveCount`): reason `receive_count_backstop`.
pub mod attr {
    /// Reason code.
    pub const REASON: &str = "reason";
    /// Human-readable detail.
    pub const DETAIL: &str = "detail";
    /// Provider attempts made.
    pub const ATTEMPTS: &str = "attempts";
    /// Last provider HTTP status.
    pub const PROVIDER_STATUS: &str = "provider_status";
    /// The reminder id.
    pub const REMINDER_ID: &str = "reminder_id";
    /// When the chain was first enqueued.
    pub const FIRST_ENQUEUED: &str = "first_enqueued";
    /// The send queue's message id.
    pub const ORIGINAL_MESSAGE_ID: &str = "original_message_id";
    /// When it was quarantined.
    pub const QUARANTINED_AT: &str = "quarantined_at";
}

fn sdk<E: std::error::Error + Send + Sync + 'static>(e: E) -> QueueError {
    QueueError::Unknown(Box::new(e) as BoxError)
}

/// Whole seconds of delay for SQS: rounded **up** (never release early), capped at 15 min.
pub fn delay_seconds(d: Duration) -> i32 {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(secs.min(MAX_DELAY.as_secs())).unwrap_or(900)
}

/// One message to send in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Batch entry id (unique within the call; `[A-Za-z0-9_-]{1,80}`).
    pub id: String,
    /// The body.
    pub body: String,
    /// Delay before it becomes visible (rounded up to whole seconds, capped at 15 min).
    pub delay: Duration,
    /// `MessageGroupId`: the tenant, on the send queues (SQS fair queues: a quiet tenant's
    /// messages are delivered ahead of a noisy tenant's backlog); `None` for the DLQ.
    pub group: Option<String>,
}

/// The result of one batch entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryResult {
    /// Accepted with this message id.
    Sent {
        /// Entry id.
        id: String,
        /// SQS message id.
        message_id: String,
    },
    /// Refused; `sender_fault` says whether retrying the same entry can help.
    Failed {
        /// Entry id.
        id: String,
        /// SQS error code.
        code: String,
        /// SQS message.
        message: String,
        /// True when the entry itself is at fault.
        sender_fault: bool,
    },
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// SQS message id.
    pub message_id: String,
    /// Receipt handle for delete / visibility.
    pub receipt_handle: String,
    /// Body.
    pub body: String,
    /// `ApproximateReceiveCount`.
    pub receive_count: u32,
    /// `SentTimestamp`.
    pub sent_at: Option<DateTime<Utc>>,
    /// String message attributes.
    pub attributes: Vec<(String, String)>,
}

impl Received {
    /// This message as the parts a Lambda SQS record carries.
    pub fn parts(&self) -> (&str, &str, &str, u32, Option<i64>) {
        (
            &self.message_id,
            &self.receipt_handle,
            &self.body,
            self.receive_count,
            self.sent_at.map(|t| t.timestamp_millis()),
        )
    }
}

/// `ChangeMessageVisibilityBatch` calls a release makes side by side.
pub const RELEASES_IN_FLIGHT: usize = 8;

/// The two send queues (lanes) and their shared DLQ.
#[derive(Debug, Clone)]
pub struct SqsQueues {
    client: Client,
    send_url: String,
    urgent_url: String,
    dlq_url: String,
    /// (channel, URL) of each channel with a queue of its own.
    channel_urls: Vec<(String, String)>,
    /// (channel, URL) of each of those with an urgent lane of its own too.
    channel_urgent_urls: Vec<(String, String)>,
}

impl SqsQueues {
    /// Queues at known URLs: one lane (the urgent lane is the send queue) until
    /// [`SqsQueues::with_urgent`].
    pub fn new(client: Client, send_url: impl Into<String>, dlq_url: impl Into<String>) -> Self {
        let send_url = send_url.into();
        Self {
            client,
            urgent_url: send_url.clone(),
            send_url,
            dlq_url: dlq_url.into(),
            channel_urls: Vec::new(),
            channel_urgent_urls: Vec::new(),
        }
    }

    /// The channels with a queue of their own (`CHANNEL_{NAME}_QUEUE_URL`): a message whose
    /// `channel` is one of them is released, requeued and sent back there (urgent, to its own
    /// urgent lane when [`SqsQueues::with_channel_urgent_queues`] gives it one).
    pub fn with_channel_queues(mut self, queues: &[(String, String)]) -> Self {
        self.channel_urls = queues.to_vec();
        self
    }

    /// The urgent lanes of channels with a queue of their own (`CHANNEL_{NAME}_URGENT_QUEUE_URL`):
    /// such a channel's urgent messages go there instead of its queue.
    pub fn with_channel_urgent_queues(mut self, queues: &[(String, String)]) -> Self {
        self.channel_urgent_urls = queues.to_vec();
        self
    }

    /// Where `msg` goes on `lane`: its channel's own urgent lane (urgent, when it has one) or
    /// own queue if it has one, else the lane's.
    pub fn url_for(&self, msg: &ReminderMessage, lane: QueueLane) -> &str {
        let Some(c) = msg.channel.as_deref() else { return self.lane_url(lane) };
        let urgent = self.channel_urgent_urls.iter().filter(|_| lane == QueueLane::Urgent);
        urgent
            .chain(&self.channel_urls)
            .find(|(n, _)| n == c)
            .map_or_else(|| self.lane_url(lane), |(_, url)| url.as_str())
    }

    /// The urgent lane's queue (`URGENT_QUEUE_URL`; `None`: one lane).
    pub fn with_urgent(mut self, urgent_url: Option<&str>) -> Self {
        if let Some(url) = urgent_url {
            self.urgent_url = url.to_owned();
        }
        self
    }

    /// The send queue URL (the normal lane).
    pub fn send_url(&self) -> &str {
        &self.send_url
    }

    /// The urgent lane's URL (the send queue's when there is one lane).
    pub fn urgent_url(&self) -> &str {
        &self.urgent_url
    }

    /// The URL of `lane`.
    pub fn lane_url(&self, lane: QueueLane) -> &str {
        match lane {
            QueueLane::Normal => &self.send_url,
            QueueLane::Urgent => &self.urgent_url,
        }
    }

    /// True when the urgent lane is a queue of its own.
    pub fn has_urgent_lane(&self) -> bool {
        self.urgent_url != self.send_url
    }

    /// The DLQ URL.
    pub fn dlq_url(&self) -> &str {
        &self.dlq_url
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Sends any number of messages to `queue_url` in calls of at most 10, returning one
    /// result per entry in input order. Entry failures are values; only machinery failure of a
    /// whole call is an error.
    pub async fn send_batch(&self, queue_url: &str, messages: &[Outgoing]) -> Result<Vec<EntryResult>, QueueError> {
        let mut results = Vec::with_capacity(messages.len());
        for chunk in messages.chunks(MAX_BATCH) {
            let entries = chunk
                .iter()
                .map(|m| {
                    SendMessageBatchRequestEntry::builder()
                        .id(&m.id)
                        .message_body(&m.body)
                        .delay_seconds(delay_seconds(m.delay))
                        .set_message_group_id(m.group.clone())
                        .build()
                        .map_err(sdk)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = self
                .client
                .send_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(sdk)?;
            results.extend(batch_results(&out, chunk.iter().map(|m| m.id.as_str())));
        }
        Ok(results)
    }

    /// Receives up to `max` (≤ 10) messages from `queue_url`, long-polling up to `wait`.
    pub async fn receive(&self, queue_url: &str, max: i32, wait: Duration) -> Result<Vec<Received>, QueueError> {
        self.receive_holding(queue_url, max, wait, None).await
    }

    /// [`receive`](Self::receive), keeping the messages invisible for `hold` instead of the
    /// queue's visibility timeout (in the same request).
    pub async fn receive_holding(
        &self,
        queue_url: &str,
        max: i32,
        wait: Duration,
        hold: Option<Duration>,
    ) -> Result<Vec<Received>, QueueError> {
        let hold = hold.map(|h| i32::try_from(h.as_secs().min(12 * 3600)).unwrap_or(12 * 3600));
        let out = self
            .client
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(max.clamp(1, 10))
            .wait_time_seconds(i32::try_from(wait.as_secs().min(20)).unwrap_or(20))
            .set_visibility_timeout(hold)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(sdk)?;
        Ok(out
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                let sys = m.attributes();
                let get = |k: MessageSystemAttributeName| sys.and_then(|a| a.get(&k)).cloned();
                let mut attributes: Vec<(String, String)> = m
                    .message_attributes()
                    .map(|a| {
                        a.iter().filter_map(|(k, v)| v.string_value().map(|s| (k.clone(), s.to_owned()))).collect()
                    })
                    .unwrap_or_default();
                attributes.sort();
                Received {
                    message_id: m.message_id().unwrap_or_default().to_owned(),
                    receipt_handle: m.receipt_handle().unwrap_or_default().to_owned(),
                    body: m.body().unwrap_or_default().to_owned(),
                    receive_count: get(MessageSystemAttributeName::ApproximateReceiveCount)
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(1),
                    sent_at: get(MessageSystemAttributeName::SentTimestamp)
                        .and_then(|t| t.parse().ok())
                        .and_then(DateTime::<Utc>::from_timestamp_millis),
                    attributes,
                }
            })
            .collect())
    }

    /// Deletes a received message.
    pub async fn delete(&self, queue_url: &str, receipt_handle: &str) -> Result<(), QueueError> {
        self.client.delete_message().queue_url(queue_url).receipt_handle(receipt_handle).send().await.map_err(sdk)?;
        Ok(())
    }

    /// Deletes up to 10 received messages per call; returns the receipt handles SQS refused.
    pub async fn delete_batch(&self, queue_url: &str, receipt_handles: &[&str]) -> Result<Vec<String>, QueueError> {
        let mut refused = Vec::new();
        for chunk in receipt_handles.chunks(MAX_BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, h)| {
                    aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                        .id(format!("d{i}"))
                        .receipt_handle(*h)
                        .build()
                        .map_err(sdk)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let out = self
                .client
                .delete_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(sdk)?;
            for f in out.failed() {
                let i: usize = f.id().trim_start_matches('d').parse().unwrap_or(usize::MAX);
                if let Some(h) = chunk.get(i) {
                    refused.push((*h).to_owned());
                }
            }
        }
        Ok(refused)
    }

    /// Reads up to `limit` distinct messages of `queue_url` without taking them: each is held
    /// for 30 s while reading, and **every** message received — repeats and the last batch
    /// included — is made visible again before this returns, on success or error (ten per
    /// `ChangeMessageVisibilityBatch`). Each receive waits up to 1 s: a short poll samples only
    /// some of SQS's servers and can answer empty while messages remain. `stop` ends
    /// the read early once it returns true for a message (e.g. the one being looked for).
    /// Counting must never hide what it counts.
    pub async fn peek(
        &self,
        queue_url: &str,
        limit: usize,
        mut stop: impl FnMut(&Received) -> bool,
    ) -> Result<Vec<Received>, QueueError> {
        let mut seen = std::collections::HashSet::new();
        let mut handles = Vec::new();
        let mut out = Vec::new();
        let read = async {
            'read: while out.len() < limit {
                let batch =
                    self.receive_holding(queue_url, 10, Duration::from_secs(1), Some(Duration::from_secs(30))).await?;
                let before = out.len();
                for m in batch {
                    handles.push(m.receipt_handle.clone());
                    if seen.insert(m.message_id.clone()) {
                        let done = stop(&m);
                        out.push(m);
                        if done {
                            break 'read;
                        }
                    }
                }
                if out.len() == before {
                    break;
                }
            }
            Ok::<(), QueueError>(())
        }
        .await;
        // A handle SQS refuses has expired: that message is visible again already.
        let released = self.release_batch(queue_url, &handles).await;
        read?;
        released?;
        Ok(out)
    }

    /// Makes a received message visible again after `timeout` (≤ 12 h).
    pub async fn change_visibility(
        &self,
        queue_url: &str,
        receipt_handle: &str,
        timeout: Duration,
    ) -> Result<(), QueueError> {
        let secs = i32::try_from(timeout.as_secs().min(12 * 3600)).unwrap_or(12 * 3600);
        self.client
            .change_message_visibility()
            .queue_url(queue_url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(secs)
            .send()
            .await
            .map_err(sdk)?;
        Ok(())
    }

    /// Makes received messages visible again now, ten per `ChangeMessageVisibilityBatch`,
    /// [`RELEASES_IN_FLIGHT`] calls side by side (a redrive that passed over thousands of
    /// letters releases them at its end, inside the margin it keeps before its deadline: one
    /// call at a time, 5,000 letters were 500 round trips). Returns how many SQS refused (a
    /// handle that expired meanwhile is already visible); machinery failure is an error.
    pub async fn release_batch(&self, queue_url: &str, receipt_handles: &[String]) -> Result<usize, QueueError> {
        use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry as Entry;
        let call = |chunk: &[String]| {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, h)| Entry::builder().id(format!("v{i}")).receipt_handle(h).visibility_timeout(0).build())
                .collect::<Result<Vec<_>, _>>();
            async move {
                let entries = entries.map_err(|e| QueueError::Unknown(Box::new(e)))?;
                let out = self
                    .client
                    .change_message_visibility_batch()
                    .queue_url(queue_url)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .map_err(sdk)?;
                Ok::<usize, QueueError>(out.failed.len())
            }
        };
        let chunks: Vec<&[String]> = receipt_handles.chunks(10).collect();
        let mut refused = 0;
        for window in chunks.chunks(RELEASES_IN_FLIGHT) {
            // Every call of the window is made before a failed one is reported.
            for r in futures_util::future::join_all(window.iter().map(|c| call(c))).await {
                refused += r?;
            }
        }
        Ok(refused)
    }
}

/// A message with string attributes (a dead letter of the commands queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Letter {
    /// Batch entry id (unique within one call).
    pub id: String,
    /// Body.
    pub body: String,
    /// String message attributes, each value cut to [`MAX_ATTRIBUTE_CHARS`] bytes.
    pub attributes: Vec<(&'static str, String)>,
}

/// Longest attribute value a letter carries.
pub const MAX_ATTRIBUTE_CHARS: usize = 256;

/// Sends `letters` to `queue_url` in calls of at most 10, one result per letter in input order
/// (entry failures are values, as in [`SqsQueues::send_batch`]).
pub async fn send_letters(
    client: &Client,
    queue_url: &str,
    letters: &[Letter],
) -> Result<Vec<EntryResult>, QueueError> {
    let mut results = Vec::with_capacity(letters.len());
    for chunk in letters.chunks(MAX_BATCH) {
        let mut entries = Vec::with_capacity(chunk.len());
        for l in chunk {
            let mut entry = SendMessageBatchRequestEntry::builder().id(&l.id).message_body(&l.body);
            for (name, value) in &l.attributes {
                entry = entry.message_attributes(*name, string_attr(cut(value, MAX_ATTRIBUTE_CHARS))?);
            }
            entries.push(entry.build().map_err(sdk)?);
        }
        let out =
            client.send_message_batch().queue_url(queue_url).set_entries(Some(entries)).send().await.map_err(sdk)?;
        results.extend(batch_results(&out, chunk.iter().map(|l| l.id.as_str())));
    }
    Ok(results)
}

/// One result per entry id of a `SendMessageBatch` call, in input order.
fn batch_results<'a>(
    out: &aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput,
    ids: impl Iterator<Item = &'a str>,
) -> Vec<EntryResult> {
    let ok: Vec<(&str, &str)> = out.successful().iter().map(|s| (s.id(), s.message_id())).collect();
    let failed: Vec<(&str, &str, &str, bool)> =
        out.failed().iter().map(|f| (f.id(), f.code(), f.message().unwrap_or_default(), f.sender_fault())).collect();
    match_entries(ids, &ok, &failed)
}

/// Pairs each sent entry with its result, in input order. An entry SQS mentions in neither list
/// is reported as failed (retryable), never silently as sent.
fn match_entries<'a>(
    ids: impl Iterator<Item = &'a str>,
    ok: &[(&str, &str)],
    failed: &[(&str, &str, &str, bool)],
) -> Vec<EntryResult> {
    ids.map(|m| {
        if let Some((_, message_id)) = ok.iter().find(|(id, _)| *id == m) {
            EntryResult::Sent { id: m.to_owned(), message_id: (*message_id).to_owned() }
        } else if let Some((_, code, message, sender_fault)) = failed.iter().find(|f| f.0 == m) {
            EntryResult::Failed {
                id: m.to_owned(),
                code: (*code).to_owned(),
                message: (*message).to_owned(),
                sender_fault: *sender_fault,
            }
        } else {
            EntryResult::Failed {
                id: m.to_owned(),
                code: "MissingFromResponse".into(),
                message: "SQS answered neither success nor failure for this entry".into(),
                sender_fault: false,
            }
        }
    })
    .collect()
}

fn string_attr(v: &str) -> Result<MessageAttributeValue, QueueError> {
    MessageAttributeValue::builder().data_type("String").string_value(v).build().map_err(sdk)
}

fn number_attr(v: impl ToString) -> Result<MessageAttributeValue, QueueError> {
    MessageAttributeValue::builder().data_type("Number").string_value(v.to_string()).build().map_err(sdk)
}

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A queue's approximate depth, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    /// Ready to be received.
    pub visible: u64,
    /// Received, not yet deleted (in flight).
    pub in_flight: u64,
    /// Waiting out a `DelaySeconds`.
    pub delayed: u64,
}

impl Depth {
    /// Everything on the queue.
    pub fn total(self) -> u64 {
        self.visible + self.in_flight + self.delayed
    }
}

impl SqsQueues {
    /// The approximate depth of `queue_url`, by kind.
    pub async fn depth_of(&self, queue_url: &str) -> Result<Depth, QueueError> {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(A::ApproximateNumberOfMessages)
            .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(A::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(sdk)?;
        let attrs = out.attributes.unwrap_or_default();
        let get = |k: A| attrs.get(&k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        Ok(Depth {
            visible: get(A::ApproximateNumberOfMessages),
            in_flight: get(A::ApproximateNumberOfMessagesNotVisible),
            delayed: get(A::ApproximateNumberOfMessagesDelayed),
        })
    }
}

impl std::ops::AddAssign for Depth {
    fn add_assign(&mut self, d: Self) {
        self.visible += d.visible;
        self.in_flight += d.in_flight;
        self.delayed += d.delayed;
    }
}

impl SqsQueues {
    /// The channels' own queues together (one `GetQueueAttributes` each; none without them):
    /// what they hold counts with the normal lane wherever a backlog is read.
    pub async fn channel_depth(&self) -> Result<Depth, QueueError> {
        let mut sum = Depth::default();
        for (_, depth) in self.channel_depths().await? {
            sum += depth;
        }
        Ok(sum)
    }

    /// Each channel's own queues (its queue and its urgent lane, together) by the channel's
    /// name (one `GetQueueAttributes` each).
    pub async fn channel_depths(&self) -> Result<Vec<(String, Depth)>, QueueError> {
        Ok(self
            .own_depths()
            .await?
            .into_iter()
            .map(|(name, mut normal, urgent)| {
                normal += urgent;
                (name, normal)
            })
            .collect())
    }

    /// Each channel's own queue and its own urgent lane (empty without one), by name (one
    /// `GetQueueAttributes` per queue).
    pub async fn own_depths(&self) -> Result<Vec<(String, Depth, Depth)>, QueueError> {
        let mut out = Vec::with_capacity(self.channel_urls.len());
        for (name, url) in &self.channel_urls {
            let urgent = match self.channel_urgent_urls.iter().find(|(n, _)| n == name) {
                Some((_, u)) => self.depth_of(u).await?,
                None => Depth::default(),
            };
            out.push((name.clone(), self.depth_of(url).await?, urgent));
        }
        Ok(out)
    }

    /// Messages on each lane (visible + in flight + delayed); one `GetQueueAttributes` per lane.
    pub async fn lane_depths(&self) -> Result<LaneDepths, QueueError> {
        let mut normal = self.depth_of(&self.send_url).await?;
        let urgent = if self.has_urgent_lane() { self.depth_of(&self.urgent_url).await? } else { Depth::default() };
        // A channel's own queue and its own urgent lane are backlog too, counted with the normal
        // lane's: the scheduler's projection counts them ahead, and they do not hold back the
        // fleet's urgent pace (their own pollers drain them: counted as the fleet's urgent
        // work, an SMS overload would start email's urgent releases minutes late).
        for (_, own, own_urgent) in self.own_depths().await? {
            normal += own;
            normal += own_urgent;
        }
        Ok(LaneDepths {
            normal: normal.total(),
            urgent: urgent.total(),
            urgent_delayed: urgent.delayed,
            normal_delayed: normal.delayed,
        })
    }
}

impl punctual_core::ports::ReleaseQueue for SqsQueues {
    async fn release(&self, batch: &[Release]) -> Result<Vec<bool>, QueueError> {
        let mut accepted = vec![false; batch.len()];
        let mut failure = None;
        let mut tried = 0;
        // One batch call per queue (each lane's, each channel's own); each answer goes back to
        // its entry's place. A queue whose call fails leaves its entries refused (pending,
        // retried next tick) without undoing the answers of a queue that succeeded: those are
        // marked, not sent twice.
        let urls: Vec<&str> = batch.iter().map(|r| self.url_for(&r.message, r.lane)).collect();
        let mut queues: Vec<&str> = urls.clone();
        queues.sort_unstable();
        queues.dedup();
        for url in queues {
            let of_lane: Vec<usize> = (0..batch.len()).filter(|i| urls[*i] == url).collect();
            let lane = batch[of_lane[0]].lane;
            let out: Vec<Outgoing> = of_lane
                .iter()
                .map(|i| Outgoing {
                    id: format!("e{i}"),
                    body: batch[*i].message.encode(),
                    delay: batch[*i].delay,
                    group: Some(batch[*i].message.tenant_id.to_string()),
                })
                .collect();
            tried += 1;
            let results = match self.send_batch(url, &out).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, lane = lane.as_str(), "releasing to a lane failed; retried next tick");
                    failure = Some(e);
                    continue;
                }
            };
            for (i, r) in of_lane.iter().zip(&results) {
                match r {
                    EntryResult::Sent { .. } => accepted[*i] = true,
                    EntryResult::Failed { code, message, sender_fault, .. } => {
                        tracing::warn!(
                            code,
                            message,
                            sender_fault,
                            lane = lane.as_str(),
                            "send queue refused a released message; retried next tick"
                        );
                    }
                }
            }
        }
        match failure {
            // Every lane tried failed: the machinery failed, say so.
            Some(e) if tried == 1 || accepted.iter().all(|a| !*a) => Err(e),
            _ => Ok(accepted),
        }
    }

    async fn depth(&self) -> Result<LaneDepths, QueueError> {
        self.lane_depths().await
    }
}

impl SendQueue for SqsQueues {
    async fn requeue(&self, msg: &ReminderMessage, delay: Duration, lane: QueueLane) -> Result<(), QueueError> {
        self.client
            .send_message()
            .queue_url(self.url_for(msg, lane))
            .message_body(msg.encode())
            .delay_seconds(delay_seconds(delay))
            .message_group_id(msg.tenant_id.as_str())
            .send()
            .await
            .map_err(sdk)?;
        Ok(())
    }

    async fn dead_letter(&self, q: &Quarantine<'_>) -> Result<(), QueueError> {
        let mut send = self
            .client
            .send_message()
            .queue_url(&self.dlq_url)
            .message_body(q.body)
            .message_attributes(attr::REASON, string_attr(q.reason.as_str())?)
            .message_attributes(attr::ATTEMPTS, number_attr(q.attempts)?)
            .message_attributes(attr::ORIGINAL_MESSAGE_ID, string_attr(q.original_message_id)?)
            .message_attributes(attr::QUARANTINED_AT, string_attr(&format_instant(q.at))?);
        if !q.detail.is_empty() {
            send = send.message_attributes(attr::DETAIL, string_attr(cut(q.detail, MAX_DETAIL_BYTES))?);
        }
        if let Some(s) = q.provider_status {
            send = send.message_attributes(attr::PROVIDER_STATUS, number_attr(s)?);
        }
        if let Some(id) = q.reminder_id {
            send = send.message_attributes(attr::REMINDER_ID, string_attr(id.as_str())?);
        }
        if let Some(t) = q.first_enqueued {
            send = send.message_attributes(attr::FIRST_ENQUEUED, string_attr(&format_instant(t))?);
        }
        send.send().await.map_err(sdk)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_rounds_up_and_caps_at_fifteen_minutes() {
        assert_eq!(delay_seconds(Duration::ZERO), 0);
        assert_eq!(delay_seconds(Duration::from_millis(6_001)), 7);
        assert_eq!(delay_seconds(Duration::from_secs(7)), 7);
        assert_eq!(delay_seconds(Duration::from_secs(3600)), 900);
    }

    #[test]
    fn batch_results_keep_input_order_and_never_lose_an_entry() {
        let chunk: Vec<Outgoing> = ["a", "b", "c"]
            .iter()
            .map(|id| Outgoing { id: (*id).into(), body: "{}".into(), delay: Duration::ZERO, group: None })
            .collect();
        let got = match_entries(chunk.iter().map(|m| m.id.as_str()), &[("c", "m-c"), ("a", "m-a")], &[]);
        assert_eq!(got[0], EntryResult::Sent { id: "a".into(), message_id: "m-a".into() });
        assert!(
            matches!(&got[1], EntryResult::Failed { id, code, sender_fault: false, .. } if id == "b" && code == "MissingFromResponse")
        );
        assert_eq!(got[2], EntryResult::Sent { id: "c".into(), message_id: "m-c".into() });
        let got = match_entries(
            chunk[..1].iter().map(|m| m.id.as_str()),
            &[],
            &[("a", "InvalidMessageContents", "bad", true)],
        );
        assert!(
            matches!(&got[0], EntryResult::Failed { sender_fault: true, code, .. } if code == "InvalidMessageContents")
        );
    }

    #[test]
    fn detail_is_cut_on_a_char_boundary() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("abc", 10), "abc");
    }
}
