//! The AWS-side models the simulator's runs share: virtual time ([`SimClock`]), SQS standard
//! queues with fair queues, delays, visibility and receive counts ([`SimQueue`], the two lanes
//! [`SimLanes`] and their dead-letter queue), and the request counts the cost model prices
//! ([`Usage`]). `simulate`, `check`'s neighbour `drill` and `forecast` run over the same models.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use punctual_core::backoff::{Jitter, SplitMix64};
use punctual_core::clock::Clock;
use punctual_core::contract::ReminderMessage;
use punctual_core::lanes::{LaneDepths, QueueLane};
use punctual_core::ports::{Quarantine, QueueError, Release, ReleaseQueue, SendQueue};
use punctual_core::reason::ReasonCode;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Virtual time: tokio's paused clock, which jumps to the next timer whenever every worker
/// waits. Concurrent workers (and their limiter waits) interleave in time order, as real
/// Lambda instances would, and nothing sleeps for real.
#[derive(Debug, Clone)]
pub(crate) struct SimClock {
    pub(crate) t0: DateTime<Utc>,
    pub(crate) start: tokio::time::Instant,
}

impl SimClock {
    pub(crate) fn new(t0: DateTime<Utc>) -> Self {
        Self { t0, start: tokio::time::Instant::now() }
    }
}

impl Clock for SimClock {
    fn now(&self) -> DateTime<Utc> {
        punctual_core::clock::add(self.t0, tokio::time::Instant::now().duration_since(self.start))
    }

    fn sleep(&self, d: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(d)
    }
}

// ---- SQS model ------------------------------------------------------------------------------

/// Laid out for the queue's table, which holds a million of them at the start of a
/// 1,000,000-reminder morning: the body at its length, a 32-bit generation.
#[derive(Debug, Clone)]
pub(crate) struct SimMsg {
    pub(crate) body: Box<str>,
    pub(crate) receive_count: u32,
    /// Bumped at each receive; a timer of an older generation is stale.
    pub(crate) generation: u32,
    /// Its `MessageGroupId` (the tenant), interned; 0 for none.
    pub(crate) group: u32,
    /// Received and neither deleted nor visible again.
    pub(crate) in_flight: bool,
    /// When it was sent (ms): SQS's `SentTimestamp`.
    pub(crate) sent_ms: i64,
    /// When it first became visible (its delay over), ms; [`NOT_YET`] before (an `Option`
    /// would take 8 bytes more of every slot).
    pub(crate) visible_ms: i64,
}

/// [`SimMsg::visible_ms`] of a message still in its delay.
pub(crate) const NOT_YET: i64 = i64::MIN;

impl SimMsg {
    /// When it first became visible, if it has.
    pub(crate) fn visible(&self) -> Option<i64> {
        (self.visible_ms != NOT_YET).then_some(self.visible_ms)
    }
}

/// One message of the dead-letter queue.
#[derive(Debug, Clone)]
pub(crate) struct Letter {
    pub(crate) id: u64,
    pub(crate) body: String,
    pub(crate) reason: ReasonCode,
    /// It decodes as a reminder.
    pub(crate) healthy: bool,
    /// When it entered the DLQ (ms): what the DLQ's `ApproximateAgeOfOldestMessage` counts
    /// from (SQS Developer Guide, "Setting-up dead-letter queue retention").
    pub(crate) sent_ms: i64,
    /// Received (by a redrive) and invisible until then, ms.
    pub(crate) hidden_until_ms: i64,
}

/// The dead-letter queue both lanes' redrive policies and the sender's quarantines send to.
#[derive(Debug, Default)]
pub(crate) struct DlqState {
    pub(crate) letters: Vec<Letter>,
    pub(crate) next_id: u64,
    /// Letters that entered it since the start.
    pub(crate) sent: u64,
}

impl DlqState {
    /// A letter enters at `now_ms`.
    pub(crate) fn push(&mut self, body: String, reason: ReasonCode, now_ms: i64) {
        let healthy = ReminderMessage::decode(&body).is_ok();
        self.next_id += 1;
        self.sent += 1;
        let id = self.next_id;
        self.letters.push(Letter { id, body, reason, healthy, sent_ms: now_ms, hidden_until_ms: i64::MIN });
    }

    /// What SQS reports of the DLQ at `now_ms`.
    pub(crate) fn stats(&self, now_ms: i64) -> QueueStats {
        let hidden = self.letters.iter().filter(|l| l.hidden_until_ms > now_ms).count() as u64;
        QueueStats {
            visible: self.letters.len() as u64 - hidden,
            not_visible: hidden,
            delayed: 0,
            oldest_age: self.letters.iter().map(|l| l.sent_ms).min().map(|s| (now_ms - s) as f64 / 1000.0),
            received: 0,
            sent: self.sent,
        }
    }
}

/// What SQS reports of a queue at one instant (the AWS/SQS metrics the alarms read).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct QueueStats {
    /// `ApproximateNumberOfMessagesVisible`.
    pub(crate) visible: u64,
    /// `ApproximateNumberOfMessagesNotVisible` (in flight).
    pub(crate) not_visible: u64,
    /// `ApproximateNumberOfMessagesDelayed`.
    pub(crate) delayed: u64,
    /// `ApproximateAgeOfOldestMessage`, seconds (None: empty).
    pub(crate) oldest_age: Option<f64>,
    /// `NumberOfMessagesReceived` so far (cumulative: the metric is its per-period difference).
    pub(crate) received: u64,
    /// `NumberOfMessagesSent` so far (cumulative).
    pub(crate) sent: u64,
}

/// Where SQS counts a message's age from. The documentation does not say whether the age of a
/// message sent with `DelaySeconds` includes its delay; the drill takes the reading least
/// favourable to what it checks (from the send for "a normal morning pages nobody", from the
/// end of the delay for "an incident pages in time").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AgeFrom {
    /// `SentTimestamp`: a delayed message is as old as its delay the moment it is visible.
    Sent,
    /// The end of its delay.
    Visible,
}

/// The in-memory SQS standard queue. With `fair` (SQS fair queues, 2025) a receive serves the
/// message groups with the fewest messages in flight first — a quiet tenant's messages are not
/// stuck behind a noisy tenant's backlog — and picks at random within a group; without it, at
/// random among every ready message.
#[derive(Debug, Default)]
pub(crate) struct QueueState {
    pub(crate) next_id: u64,
    pub(crate) msgs: HashMap<u64, SimMsg>,
    pub(crate) ready: Vec<u64>,
    /// (visible at ms, id, generation).
    pub(crate) waiting: BinaryHeap<Reverse<(i64, u64, u64)>>,
    /// Messages handed out by receives, and sent, since the start.
    pub(crate) received: u64,
    pub(crate) sent: u64,
    pub(crate) fair: bool,
    pub(crate) groups: HashMap<String, u32>,
    /// `fair`: the ready messages of each group, and each group's messages in flight.
    pub(crate) ready_by_group: Vec<Vec<u64>>,
    pub(crate) in_flight: Vec<u32>,
    pub(crate) ready_len: usize,
    /// The instant of the last promotion (what `make_ready` stamps as visible).
    pub(crate) now_ms: i64,
}

impl QueueState {
    pub(crate) fn group_of(&mut self, group: Option<&str>) -> u32 {
        let Some(g) = group else { return 0 };
        let next = self.groups.len() as u32 + 1;
        let id = *self.groups.entry(g.to_owned()).or_insert(next);
        let need = id as usize + 1;
        if self.in_flight.len() < need {
            self.in_flight.resize(need, 0);
            self.ready_by_group.resize_with(need, Vec::new);
        }
        id
    }

    /// Gives back the room of a drained queue (neither a table nor a heap shrinks by itself:
    /// a million messages released at once would hold theirs to the end of the run), once
    /// three quarters of it is empty; amortised, as each shrink halves it at least.
    pub(crate) fn fit(&mut self) {
        let sparse = |len: usize, cap: usize| cap > 1024 && len * 4 < cap;
        if sparse(self.msgs.len(), self.msgs.capacity()) {
            self.msgs.shrink_to_fit();
        }
        if sparse(self.waiting.len(), self.waiting.capacity()) {
            self.waiting.shrink_to_fit();
        }
    }

    pub(crate) fn make_ready(&mut self, id: u64) {
        let Some(m) = self.msgs.get_mut(&id) else { return };
        if m.visible_ms == NOT_YET {
            m.visible_ms = m.sent_ms.max(self.now_ms);
        }
        let g = m.group as usize;
        if std::mem::take(&mut m.in_flight) {
            self.in_flight[g] = self.in_flight[g].saturating_sub(1);
        }
        if self.fair {
            self.ready_by_group[g].push(id);
        } else {
            self.ready.push(id);
        }
        self.ready_len += 1;
    }

    /// The next ready message to hand out, removed from the ready set.
    pub(crate) fn take_ready(&mut self, rng: &mut SplitMix64) -> Option<u64> {
        if self.ready_len == 0 {
            return None;
        }
        let id = if self.fair {
            // The group with the fewest in flight (ties: the first after a random start).
            let n = self.ready_by_group.len();
            let start = (rng.next_u64() % n as u64) as usize;
            let g = (0..n)
                .map(|k| (start + k) % n)
                .filter(|g| !self.ready_by_group[*g].is_empty())
                .min_by_key(|g| self.in_flight[*g])?;
            let list = &mut self.ready_by_group[g];
            let i = (rng.next_u64() % list.len() as u64) as usize;
            list.swap_remove(i)
        } else {
            let i = (rng.next_u64() % self.ready.len() as u64) as usize;
            self.ready.swap_remove(i)
        };
        self.ready_len -= 1;
        Some(id)
    }
}

/// Pollers an SQS event source mapping keeps long-polling a queue with no messages, when it
/// has a `MaximumConcurrency` (the template's default mode): "When traffic is low, Lambda scales
/// back the processing to five concurrent batches, and can optimize to as few as 2 concurrent
/// batches to reduce the SQS calls and corresponding costs. However, this optimization is not
/// available when you enable the maximum concurrency setting." (Lambda Developer Guide,
/// "Configuring scaling behavior for SQS event source mappings"). A lane's workers past these
/// stand for the pollers the mapping adds while the queue has messages: their empty waits
/// are not requests. A receive that returns messages is a request whoever makes it.
pub(crate) const IDLE_POLLERS: usize = 5;

#[derive(Debug, Clone)]
pub(crate) struct SimQueue {
    pub(crate) state: Arc<Mutex<QueueState>>,
    /// Where the redrive policy moves a message received more than `max_receives` times.
    pub(crate) dlq: Arc<Mutex<DlqState>>,
    /// The redrive policy's `maxReceiveCount`.
    pub(crate) max_receives: u32,
    pub(crate) clock: SimClock,
    pub(crate) usage: Arc<Usage>,
    /// Wakes long-polling workers when a message is pushed.
    pub(crate) pushed: Arc<tokio::sync::Notify>,
}

impl SimQueue {
    pub(crate) fn push(&self, body: String, visible_at: DateTime<Utc>, group: Option<&str>) {
        // Held at its length: an encoded body (serde_json's buffer, doubled from 128 bytes)
        // keeps 512 bytes of room for its ~300, and a million of them wait here at once. A
        // fresh exact copy, not a shrink in place, so the freed buffer is the next encode's.
        let body = Box::<str>::from(body.as_str());
        let mut s = lock(&self.state);
        let id = s.next_id;
        s.next_id += 1;
        let group = s.group_of(group);
        let sent_ms = self.clock.now().timestamp_millis();
        s.sent += 1;
        s.msgs.insert(
            id,
            SimMsg { body, receive_count: 0, generation: 0, group, in_flight: false, sent_ms, visible_ms: NOT_YET },
        );
        s.waiting.push(Reverse((visible_at.timestamp_millis(), id, 0)));
        drop(s);
        self.pushed.notify_waiters();
    }

    /// A queue whose redrive policy moves a message to `dlq` on its receive after the
    /// `max_receives`th (SQS's `maxReceiveCount`).
    pub(crate) fn new(
        clock: &SimClock,
        usage: &Arc<Usage>,
        fair: bool,
        dlq: &Arc<Mutex<DlqState>>,
        max_receives: u32,
    ) -> Self {
        let mut state = QueueState { fair, ..QueueState::default() };
        state.group_of(None);
        state.in_flight.resize(1, 0);
        state.ready_by_group.resize_with(1, Vec::new);
        Self {
            state: Arc::new(Mutex::new(state)),
            dlq: Arc::clone(dlq),
            max_receives,
            clock: clock.clone(),
            usage: Arc::clone(usage),
            pushed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// One long poll (one request): waits up to 20 s for ready messages, and receives them.
    /// `idle_poller`: whether a poll that comes back empty is a request — true for the pollers
    /// an event source mapping keeps on an idle queue ([`IDLE_POLLERS`]), false for the ones it
    /// adds only while the queue has messages (their wait is the mapping's scaling, not a
    /// `ReceiveMessage`).
    pub(crate) async fn long_poll<S: AsMut<SplitMix64>>(
        &self,
        vt: Duration,
        dup: f64,
        shared: &std::cell::RefCell<S>,
        idle_poller: bool,
    ) -> Vec<(u64, String, u32)> {
        let end = self.clock.now().timestamp_millis() + 20_000;
        loop {
            let now = self.clock.now();
            let batch = self.receive(now, vt, dup, shared.borrow_mut().as_mut());
            let at = now.timestamp_millis();
            if !batch.is_empty() || at >= end {
                if !batch.is_empty() {
                    self.usage.sqs_request(&self.usage.sqs.receives);
                } else if idle_poller {
                    self.usage.sqs_request(&self.usage.sqs.empty_receives);
                }
                return batch;
            }
            let wake = self.next_visible().map_or(end, |v| v.clamp(at + 1, end));
            let pushed = self.pushed.notified();
            tokio::select! {
                () = self.clock.sleep(Duration::from_millis((wake - at) as u64)) => {}
                () = pushed => {}
            }
        }
    }

    pub(crate) fn promote(s: &mut QueueState, now_ms: i64) {
        s.now_ms = now_ms;
        while let Some(Reverse((at, id, generation))) = s.waiting.peek().copied() {
            if at > now_ms {
                break;
            }
            s.waiting.pop();
            if s.msgs.get(&id).is_some_and(|m| u64::from(m.generation) == generation) {
                s.make_ready(id);
            }
        }
    }

    /// Receives up to 10 ready messages (see [`QueueState`] for which); each becomes
    /// invisible for `vt`.
    pub(crate) fn receive(
        &self,
        now: DateTime<Utc>,
        vt: Duration,
        dup: f64,
        rng: &mut SplitMix64,
    ) -> Vec<(u64, String, u32)> {
        let mut s = lock(&self.state);
        let now_ms = now.timestamp_millis();
        Self::promote(&mut s, now_ms);
        let mut out = Vec::new();
        while out.len() < 10 {
            let Some(id) = s.take_ready(rng) else { break };
            let again = now_ms + vt.as_millis() as i64;
            let Some(m) = s.msgs.get_mut(&id) else { continue };
            if m.receive_count >= self.max_receives {
                // The redrive policy: this receive would exceed maxReceiveCount, so SQS moves
                // the message to the DLQ instead of handing it out.
                if let Some(m) = s.msgs.remove(&id) {
                    lock(&self.dlq).push(m.body.into(), ReasonCode::ReceiveCountBackstop, now_ms);
                }
                continue;
            }
            let (body, count, generation, group) = {
                m.receive_count += 1;
                m.generation += 1;
                m.in_flight = true;
                (String::from(&*m.body), m.receive_count, u64::from(m.generation), m.group)
            };
            s.received += 1;
            s.in_flight[group as usize] += 1;
            s.waiting.push(Reverse((again, id, generation)));
            if rng.next_unit() < dup {
                // At-least-once: SQS also hands out a copy.
                let cid = s.next_id;
                s.next_id += 1;
                s.msgs.insert(
                    cid,
                    SimMsg {
                        body: body.as_str().into(),
                        receive_count: 0,
                        generation: 0,
                        group,
                        in_flight: false,
                        sent_ms: now_ms,
                        visible_ms: NOT_YET,
                    },
                );
                s.make_ready(cid);
            }
            out.push((id, body, count));
        }
        out
    }

    pub(crate) fn delete(&self, id: u64) {
        let mut s = lock(&self.state);
        if let Some(m) = s.msgs.remove(&id)
            && m.in_flight
        {
            let g = m.group as usize;
            s.in_flight[g] = s.in_flight[g].saturating_sub(1);
        }
        s.fit();
    }

    pub(crate) fn depth(&self) -> usize {
        lock(&self.state).msgs.len()
    }

    /// What SQS reports of this queue now. A message received 3 or more times and not deleted
    /// is left out of the age, as SQS documents for its poison-pill handling (Developer Guide,
    /// "Available CloudWatch metrics for Amazon SQS", `ApproximateAgeOfOldestMessage`); a
    /// delayed message is counted as delayed, not visible, and is in no age.
    pub(crate) fn stats(&self, age_from: AgeFrom) -> QueueStats {
        let now_ms = self.clock.now().timestamp_millis();
        let mut s = lock(&self.state);
        Self::promote(&mut s, now_ms);
        let mut out = QueueStats { received: s.received, sent: s.sent, ..QueueStats::default() };
        let mut oldest: Option<i64> = None;
        for m in s.msgs.values() {
            match (m.in_flight, m.visible()) {
                (true, _) => out.not_visible += 1,
                (false, Some(_)) => out.visible += 1,
                (false, None) => {
                    out.delayed += 1;
                    continue;
                }
            }
            if m.receive_count >= 3 {
                continue;
            }
            let from = match age_from {
                AgeFrom::Sent => m.sent_ms,
                AgeFrom::Visible => m.visible().unwrap_or(m.sent_ms),
            };
            oldest = Some(oldest.map_or(from, |o| o.min(from)));
        }
        out.oldest_age = oldest.map(|o| (now_ms - o).max(0) as f64 / 1000.0);
        out
    }

    pub(crate) fn next_visible(&self) -> Option<i64> {
        let s = lock(&self.state);
        if s.ready_len > 0 {
            return Some(i64::MIN);
        }
        s.waiting.peek().map(|Reverse((at, _, _))| *at)
    }
}

/// The two lanes, and a channel's own queue when it has one; the DLQ is the normal queue's.
#[derive(Debug, Clone)]
pub(crate) struct SimLanes {
    pub(crate) normal: SimQueue,
    pub(crate) urgent: SimQueue,
    /// (channel, its queue): every send of that channel's messages goes there, whatever the
    /// lane, as `SqsQueues::url_for` sends them (`CHANNEL_{NAME}_QUEUE_URL`).
    pub(crate) channel: Option<(&'static str, SimQueue)>,
    /// That channel's own urgent lane (`CHANNEL_{NAME}_URGENT_QUEUE_URL`), when it has one: its
    /// urgent messages go there, as `SqsQueues::url_for` sends them.
    pub(crate) channel_urgent: Option<SimQueue>,
}

impl SimLanes {
    pub(crate) fn of(&self, lane: QueueLane) -> &SimQueue {
        match lane {
            QueueLane::Normal => &self.normal,
            QueueLane::Urgent => &self.urgent,
        }
    }

    pub(crate) fn depth(&self) -> usize {
        self.normal.depth()
            + self.urgent.depth()
            + self.channel.as_ref().map_or(0, |(_, q)| q.depth())
            + self.channel_urgent.as_ref().map_or(0, SimQueue::depth)
    }

    /// Where a message of `channel` on `lane` goes: its channel's own urgent lane (urgent, when
    /// it has one) or own queue if it has one.
    pub(crate) fn queue_for(&self, channel: Option<&str>, lane: QueueLane) -> &SimQueue {
        match (&self.channel, &self.channel_urgent) {
            (Some((name, _)), Some(u)) if channel == Some(*name) && lane == QueueLane::Urgent => u,
            (Some((name, q)), _) if channel == Some(*name) => q,
            _ => self.of(lane),
        }
    }

    /// Sends to `q` with `DelaySeconds` as the real adapter does: rounded up to whole seconds,
    /// ≤ 900; the tenant is the message group, as the real adapter sets it.
    pub(crate) fn send_to(&self, q: &SimQueue, body: String, delay: Duration, group: Option<&str>) {
        let secs = (delay.as_secs() + u64::from(delay.subsec_nanos() > 0)).min(900);
        q.push(body, q.clock.now() + TimeDelta::seconds(secs as i64), group);
    }

    pub(crate) fn dlq(&self) -> &Arc<Mutex<DlqState>> {
        &self.normal.dlq
    }
}

impl SendQueue for SimLanes {
    async fn requeue(&self, msg: &ReminderMessage, delay: Duration, lane: QueueLane) -> Result<(), QueueError> {
        let usage = &self.normal.usage;
        usage.sqs_request(&usage.sqs.requeues);
        let q = self.queue_for(msg.channel.as_deref(), lane);
        self.send_to(q, msg.encode(), delay, Some(msg.tenant_id.as_str()));
        Ok(())
    }

    async fn dead_letter(&self, q: &Quarantine<'_>) -> Result<(), QueueError> {
        let usage = &self.normal.usage;
        usage.sqs_request(&usage.sqs.dead_letters);
        let now_ms = self.normal.clock.now().timestamp_millis();
        lock(self.dlq()).push(q.body.to_owned(), q.reason, now_ms);
        Ok(())
    }
}

impl ReleaseQueue for SimLanes {
    async fn release(&self, batch: &[Release]) -> Result<Vec<bool>, QueueError> {
        for r in batch {
            let q = self.queue_for(r.message.channel.as_deref(), r.lane);
            self.send_to(q, r.message.encode(), r.delay, Some(r.message.tenant_id.as_str()));
        }
        Ok(vec![true; batch.len()])
    }

    async fn depth(&self) -> Result<LaneDepths, QueueError> {
        let now = self.urgent.clock.now().timestamp_millis();
        let delayed = |q: &SimQueue| {
            lock(&q.state).waiting.iter().filter(|Reverse((at, _, g))| *at > now && *g == 0).count() as u64
        };
        // A channel's own queue and its own urgent lane count with the normal lane, as
        // `SqsQueues::lane_depths` counts them.
        let own = self.channel.as_ref().map(|(_, q)| q).into_iter().chain(self.channel_urgent.as_ref());
        let (own_depth, own_delayed) = own.fold((0, 0), |(d, l), q| (d + q.depth(), l + delayed(q)));
        Ok(LaneDepths {
            normal: (self.normal.depth() + own_depth) as u64,
            urgent: self.urgent.depth() as u64,
            urgent_delayed: delayed(&self.urgent),
            normal_delayed: delayed(&self.normal) + own_delayed,
        })
    }
}

/// What a run asked of AWS, for the cost model.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    /// Every sender-side SQS request (the sum of `sqs`).
    pub(crate) sqs_requests: std::sync::atomic::AtomicU64,
    /// The same requests by kind.
    pub(crate) sqs: SqsKinds,
    pub(crate) ddb_writes: std::sync::atomic::AtomicU64,
    pub(crate) ddb_reads: std::sync::atomic::AtomicU64,
    pub(crate) invocations: std::sync::atomic::AtomicU64,
    /// Invocation time, milliseconds.
    pub(crate) busy_ms: std::sync::atomic::AtomicU64,
}

/// Sender-side SQS requests by kind.
#[derive(Debug, Default)]
pub(crate) struct SqsKinds {
    /// `ReceiveMessage` calls that returned messages.
    pub(crate) receives: std::sync::atomic::AtomicU64,
    /// `ReceiveMessage` calls (20 s long polls) that returned nothing.
    pub(crate) empty_receives: std::sync::atomic::AtomicU64,
    /// The event source mapping's `DeleteMessageBatch`, one per invocation.
    pub(crate) deletes: std::sync::atomic::AtomicU64,
    /// The sender's `SendMessage` of a deferred copy.
    pub(crate) requeues: std::sync::atomic::AtomicU64,
    /// The sender's `SendMessage` of a quarantined message to the DLQ.
    pub(crate) dead_letters: std::sync::atomic::AtomicU64,
    /// A redrive's requests on the DLQ (receive, send back, delete).
    pub(crate) redrive: std::sync::atomic::AtomicU64,
}

impl Usage {
    /// One SQS request of `kind` (a field of `self.sqs`).
    pub(crate) fn sqs_request(&self, kind: &std::sync::atomic::AtomicU64) {
        Self::add(kind, 1);
        Self::add(&self.sqs_requests, 1);
    }

    pub(crate) fn add(counter: &std::sync::atomic::AtomicU64, n: u64) {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn get(counter: &std::sync::atomic::AtomicU64) -> u64 {
        counter.load(std::sync::atomic::Ordering::Relaxed)
    }
}
