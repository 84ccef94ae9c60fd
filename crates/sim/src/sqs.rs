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

#[derive(Debug, Clone)]
pub(crate) struct SimMsg {
    pub(crate) body: String,
    pub(crate) receive_count: u32,
    pub(crate) generation: u64,
    /// Its `MessageGroupId` (the tenant), interned; 0 for none.
    pub(crate) group: u32,
    /// Received and neither deleted nor visible again.
    pub(crate) in_flight: bool,
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
    pub(crate) dlq: Vec<(String, ReasonCode, bool)>,
    pub(crate) fair: bool,
    pub(crate) groups: HashMap<String, u32>,
    /// `fair`: the ready messages of each group, and each group's messages in flight.
    pub(crate) ready_by_group: Vec<Vec<u64>>,
    pub(crate) in_flight: Vec<u32>,
    pub(crate) ready_len: usize,
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

    pub(crate) fn make_ready(&mut self, id: u64) {
        let Some(m) = self.msgs.get_mut(&id) else { return };
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

#[derive(Debug, Clone)]
pub(crate) struct SimQueue {
    pub(crate) state: Arc<Mutex<QueueState>>,
    pub(crate) clock: SimClock,
    pub(crate) usage: Arc<Usage>,
    /// Wakes long-polling workers when a message is pushed.
    pub(crate) pushed: Arc<tokio::sync::Notify>,
}

impl SimQueue {
    pub(crate) fn push(&self, body: String, visible_at: DateTime<Utc>, group: Option<&str>) {
        let mut s = lock(&self.state);
        let id = s.next_id;
        s.next_id += 1;
        let group = s.group_of(group);
        s.msgs.insert(id, SimMsg { body, receive_count: 0, generation: 0, group, in_flight: false });
        s.waiting.push(Reverse((visible_at.timestamp_millis(), id, 0)));
        drop(s);
        self.pushed.notify_waiters();
    }

    pub(crate) fn new(clock: &SimClock, usage: &Arc<Usage>, fair: bool) -> Self {
        let mut state = QueueState { fair, ..QueueState::default() };
        state.group_of(None);
        state.in_flight.resize(1, 0);
        state.ready_by_group.resize_with(1, Vec::new);
        Self {
            state: Arc::new(Mutex::new(state)),
            clock: clock.clone(),
            usage: Arc::clone(usage),
            pushed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// One long poll (one request): waits up to 20 s for ready messages, and receives them.
    pub(crate) async fn long_poll<S: AsMut<SplitMix64>>(
        &self,
        vt: Duration,
        dup: f64,
        shared: &std::cell::RefCell<S>,
    ) -> Vec<(u64, String, u32)> {
        Usage::add(&self.usage.sqs_requests, 1);
        let end = self.clock.now().timestamp_millis() + 20_000;
        loop {
            let now = self.clock.now();
            let batch = self.receive(now, vt, dup, shared.borrow_mut().as_mut());
            let at = now.timestamp_millis();
            if !batch.is_empty() || at >= end {
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
        while let Some(Reverse((at, id, generation))) = s.waiting.peek().copied() {
            if at > now_ms {
                break;
            }
            s.waiting.pop();
            if s.msgs.get(&id).is_some_and(|m| m.generation == generation) {
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
            let (body, count, generation, group) = {
                let Some(m) = s.msgs.get_mut(&id) else { continue };
                m.receive_count += 1;
                m.generation += 1;
                m.in_flight = true;
                (m.body.clone(), m.receive_count, m.generation, m.group)
            };
            s.in_flight[group as usize] += 1;
            s.waiting.push(Reverse((again, id, generation)));
            if rng.next_unit() < dup {
                // At-least-once: SQS also hands out a copy.
                let cid = s.next_id;
                s.next_id += 1;
                s.msgs.insert(
                    cid,
                    SimMsg { body: body.clone(), receive_count: 0, generation: 0, group, in_flight: false },
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
    }

    pub(crate) fn depth(&self) -> usize {
        lock(&self.state).msgs.len()
    }

    pub(crate) fn next_visible(&self) -> Option<i64> {
        let s = lock(&self.state);
        if s.ready_len > 0 {
            return Some(i64::MIN);
        }
        s.waiting.peek().map(|Reverse((at, _, _))| *at)
    }
}

/// The two lanes; the DLQ is the normal queue's.
#[derive(Debug, Clone)]
pub(crate) struct SimLanes {
    pub(crate) normal: SimQueue,
    pub(crate) urgent: SimQueue,
}

impl SimLanes {
    pub(crate) fn of(&self, lane: QueueLane) -> &SimQueue {
        match lane {
            QueueLane::Normal => &self.normal,
            QueueLane::Urgent => &self.urgent,
        }
    }

    pub(crate) fn depth(&self) -> usize {
        self.normal.depth() + self.urgent.depth()
    }

    /// Sends with `DelaySeconds` as the real adapter does: rounded up to whole seconds, ≤ 900;
    /// the tenant is the message group, as the real adapter sets it.
    pub(crate) fn send(&self, body: String, delay: Duration, lane: QueueLane, group: Option<&str>) {
        let secs = (delay.as_secs() + u64::from(delay.subsec_nanos() > 0)).min(900);
        let q = self.of(lane);
        q.push(body, q.clock.now() + TimeDelta::seconds(secs as i64), group);
    }

    pub(crate) fn dlq(&self) -> &Arc<Mutex<QueueState>> {
        &self.normal.state
    }
}

impl SendQueue for SimLanes {
    async fn requeue(&self, msg: &ReminderMessage, delay: Duration, lane: QueueLane) -> Result<(), QueueError> {
        Usage::add(&self.normal.usage.sqs_requests, 1);
        self.send(msg.encode(), delay, lane, Some(msg.tenant_id.as_str()));
        Ok(())
    }

    async fn dead_letter(&self, q: &Quarantine<'_>) -> Result<(), QueueError> {
        let healthy = ReminderMessage::decode(q.body).is_ok();
        Usage::add(&self.normal.usage.sqs_requests, 1);
        lock(self.dlq()).dlq.push((q.body.to_owned(), q.reason, healthy));
        Ok(())
    }
}

impl ReleaseQueue for SimLanes {
    async fn release(&self, batch: &[Release]) -> Result<Vec<bool>, QueueError> {
        for r in batch {
            self.send(r.message.encode(), r.delay, r.lane, Some(r.message.tenant_id.as_str()));
        }
        Ok(vec![true; batch.len()])
    }

    async fn depth(&self) -> Result<LaneDepths, QueueError> {
        let now = self.urgent.clock.now().timestamp_millis();
        let delayed =
            lock(&self.urgent.state).waiting.iter().filter(|Reverse((at, _, g))| *at > now && *g == 0).count();
        Ok(LaneDepths {
            normal: self.normal.depth() as u64,
            urgent: self.urgent.depth() as u64,
            urgent_delayed: delayed as u64,
        })
    }
}

/// What a run asked of AWS, for the cost model.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    pub(crate) sqs_requests: std::sync::atomic::AtomicU64,
    pub(crate) ddb_writes: std::sync::atomic::AtomicU64,
    pub(crate) ddb_reads: std::sync::atomic::AtomicU64,
    pub(crate) invocations: std::sync::atomic::AtomicU64,
    /// Invocation time, milliseconds.
    pub(crate) busy_ms: std::sync::atomic::AtomicU64,
}

impl Usage {
    pub(crate) fn add(counter: &std::sync::atomic::AtomicU64, n: u64) {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn get(counter: &std::sync::atomic::AtomicU64) -> u64 {
        counter.load(std::sync::atomic::Ordering::Relaxed)
    }
}
