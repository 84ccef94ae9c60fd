//! `punctual local up | drain | down`: leave the emulator and the provider double running so
//! a developer can poke the pipeline (AWS CLI, `punctual import`, hand-written messages), drain
//! what is queued through the real sender handler, and tear it all down.
//!
//! State lives in `$PUNCTUAL_STATE_DIR` (default `target/local`): `state.json` (endpoints,
//! names, pids, the double's local token) and the processes' logs.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{TimeDelta, Utc};
use punctual_aws::config::{dynamodb_client, for_endpoint};
use punctual_aws::emf::Metrics;
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::renewals::DynamoRenewals;
use punctual_core::accounting::DeliveryCounts;
use punctual_core::ports::ReleaseQueue;
use punctual_core::secret::Secret;
use punctual_ops::target::{LocalState, load_state as load, state_dir, state_file};
use serde::Serialize;

use crate::count::{Observed, count, peek_dlq};
use crate::counted::{CountedPipeline, PipelineRequests, Shape};
use crate::env::{Emulator, free_port, provision};
use crate::esm::EsmStats;
use crate::eventbridge;
use crate::{HarnessError as LocalError, step};

/// Reads the state left by `up`.
pub fn load_state() -> Result<LocalState, LocalError> {
    Ok(load()?)
}

/// `local up`: start (or reuse) the emulator, start the provider double as its own process,
/// create the resources, seed three demo renewals, write the state file. With `channels`
/// (`NAME=http|ses[:RATE]`, comma-separated, as `run --channels`), each channel is declared with
/// its own provider (its own double, or SES on the emulator) and quota, every channel after the
/// first gets a queue and an urgent lane of its own, and the demo renewals take the channels in turn.
pub async fn up(quota: f64, provider: &str, channels: Option<&str>) -> Result<LocalState, LocalError> {
    let dir = state_dir();
    if state_file().exists() {
        return Err(LocalError::AlreadyUp(state_file().display().to_string()));
    }
    // Refused before anything starts.
    let channels = match channels {
        Some(spec) => crate::run::parse_channel_spec(spec, quota).map_err(LocalError::Invalid)?,
        None => Vec::new(),
    };
    std::fs::create_dir_all(&dir).map_err(step("creating the state directory"))?;
    let emulator = Emulator::start(Some(&dir), true)?;
    // Everything started from here on is stopped again if `up` fails before writing its state
    // (without the state file, `local down` could not find it).
    let mut spawned: Vec<u32> = emulator.pids();
    // A signal while provisioning (the children are in their own process groups, so a
    // terminal's Ctrl-C reaches only this process) stops them too.
    let result = tokio::select! {
        r = up_on(&dir, &emulator, quota, provider, &channels, &mut spawned) => r,
        stop = crate::env::shutdown_signal() => Err(LocalError::Interrupted(stop)),
    };
    if let Err(e) = result {
        crate::env::stop_pids(&spawned);
        return Err(LocalError::Step {
            what: "local up (every process it had started was stopped)",
            source: format!("{e} [stopped pids: {}]", spawned.iter().map(u32::to_string).collect::<Vec<_>>().join(" "))
                .into(),
        });
    }
    result
}

/// Starts a provider double as its own process (its log `{name}.log` in `dir`), recorded in
/// `spawned` at once, and waits until it listens: (its pid, its messages URL).
async fn spawn_double(
    dir: &std::path::Path,
    name: &str,
    quota: f64,
    token: &str,
    spawned: &mut Vec<u32>,
) -> Result<(u32, String), LocalError> {
    let port = free_port()?;
    let exe = std::env::current_exe().map_err(step("finding the punctual binary"))?;
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).map_err(step("creating the double's log"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["provider-double", "--port", &port.to_string(), "--quota", &quota.to_string(), "--token", token])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log));
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let double = cmd.spawn().map_err(step("starting the provider double"))?;
    spawned.push(double.id());
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if started.elapsed() > Duration::from_secs(10) {
            return Err(LocalError::Step { what: "the provider double did not start", source: "timeout".into() });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((double.id(), format!("http://127.0.0.1:{port}/v1/messages")))
}

async fn up_on(
    dir: &std::path::Path,
    emulator: &Emulator,
    quota: f64,
    provider: &str,
    channels: &[(String, String, f64)],
    spawned: &mut Vec<u32>,
) -> Result<LocalState, LocalError> {
    let config = for_endpoint(&emulator.endpoint).await;
    let ddb = emulator.dynamodb(&config);
    let token = format!("local-{:x}", Utc::now().timestamp_nanos_opt().unwrap_or_default());
    let (double, provider_url) = spawn_double(dir, "provider-double", quota, &token, spawned).await?;
    let mut named = vec![("provider-double".to_owned(), double)];
    // Each declared channel's own provider: a double of its own, or SES on the emulator.
    let mut declared = Vec::new();
    for (name, kind, rate) in channels {
        let mut url = String::new();
        if kind == "ses" {
            crate::ses::verify(&config, crate::ses::LOCAL_FROM).await?;
        } else {
            let own = format!("provider-double-{name}");
            let (pid, u) = spawn_double(dir, &own, *rate, &token, spawned).await?;
            named.push((own, pid));
            url = u;
        }
        declared.push(punctual_ops::target::ChannelResources {
            name: name.clone(),
            kind: kind.clone(),
            quota: *rate,
            provider_url: url,
            queue_url: String::new(),
            urgent_queue_url: String::new(),
        });
    }
    // The pid too: two `local up`s started together (parallel tests) once got the same
    // millisecond, and the second failed creating a table the first had just made.
    let prefix = format!("punctual-local-{}-{}", Utc::now().timestamp_millis(), std::process::id());
    let mut resources = provision(&config, &ddb, &prefix, &provider_url).await?;
    resources.endpoint = emulator.endpoint.clone();
    // Every channel after the first on a queue and an urgent lane of its own, as `run
    // --channels` has them.
    resources.channels = declared;
    for i in 1..resources.channels.len() {
        let (url, urgent) =
            crate::env::provision_channel_queue(&config, &resources, &resources.channels[i].name).await?;
        (resources.channels[i].queue_url, resources.channels[i].urgent_queue_url) = (url, urgent);
    }
    if provider == "ses" {
        // SES on the emulator; the double keeps running beside it (harmless, and `--provider`
        // can be switched by editing the state file).
        crate::ses::verify(&config, crate::ses::LOCAL_FROM).await?;
        resources.provider_kind = "ses".into();
    }
    let book = punctual_aws::recipients::DynamoRecipients::new(ddb.clone(), &resources.recipients_table);
    // Demo renewals, so hand-written messages for them are delivered (see `demo_message`).
    let renewals = DynamoRenewals::new(ddb, &resources.renewals_table);
    for n in 0..DEMO_RENEWALS {
        let (tenant, renewal) = demo_ids(n).map_err(step("naming demo renewals"))?;
        let reference = format!("demo-recipient-{n}");
        let channel = resources.channels.get(n % resources.channels.len().max(1)).map_or("email", |c| c.name.as_str());
        renewals.put(&tenant, &renewal, "active", &reference, channel).await.map_err(step("seeding demo renewals"))?;
        let address = punctual_core::ports::EmailAddress::parse(&crate::ses::local_address(&reference))
            .map_err(step("naming demo recipients"))?;
        book.put(&tenant, &reference, &address, Utc::now().timestamp_millis())
            .await
            .map_err(step("seeding demo recipients"))?;
    }
    // Fault injection for the lifecycle test (docs/commands.md#punctual-local-up--drain--down): fail after everything
    // was started, before the state is written, the way a late provisioning error does.
    if std::env::var("PUNCTUAL_FAULT").is_ok_and(|f| f == "local-up-before-state") {
        return Err(LocalError::Step {
            what: "writing the state file",
            source: "injected fault (PUNCTUAL_FAULT)".into(),
        });
    }
    let pids = spawned.clone();
    let mut processes: std::collections::BTreeMap<String, u32> =
        emulator.named_pids().into_iter().map(|(name, pid)| (name.to_owned(), pid)).collect();
    processes.extend(named);
    let pid_starts =
        pids.iter().filter_map(|pid| punctual_ops::target::process_start(*pid).map(|t| (*pid, t))).collect();
    let state = LocalState {
        resources,
        dynamodb_endpoint: emulator.dynamodb_endpoint.clone(),
        pids,
        processes,
        pid_starts,
        provider_token: token,
        quota,
    };
    std::fs::write(state_file(), serde_json::to_string_pretty(&state).unwrap_or_default())
        .map_err(step("writing the state file"))?;
    Ok(state)
}

/// Demo renewals `local up` seeds (`tenant-N` / `demo-N`).
pub const DEMO_RENEWALS: usize = 3;

fn demo_ids(n: usize) -> Result<(punctual_core::TenantId, punctual_core::RenewalId), punctual_core::ids::IdError> {
    Ok((punctual_core::TenantId::parse(format!("tenant-{n}"))?, punctual_core::RenewalId::parse(format!("demo-{n}"))?))
}

/// A valid message body for demo renewal `n`, due now (window: the next 4 hours), for
/// `aws sqs send-message`: built as the scheduler builds its releases.
pub fn demo_message(n: usize) -> Result<String, punctual_core::ids::IdError> {
    let now = Utc::now();
    let (tenant, renewal) = demo_ids(n)?;
    Ok(message_for(tenant, renewal, now - TimeDelta::minutes(1), now + TimeDelta::hours(4)).encode())
}

/// A release message for `tenant`/`renewal` (kind `renewal_due`) with the window
/// `[after, by)`, exactly as the scheduler would release it (`scheduler::message_for`).
pub fn message_for(
    tenant: punctual_core::TenantId,
    renewal: punctual_core::RenewalId,
    after: chrono::DateTime<Utc>,
    by: chrono::DateTime<Utc>,
) -> punctual_core::ReminderMessage {
    let kind = punctual_core::ReminderKind::renewal_due();
    let pending = punctual_core::ports::Pending::new(tenant, renewal, kind, after, by);
    punctual_core::scheduler::message_for(&pending, after)
}

/// A renewal command (docs/integration.md) for `tenant-0`/`cmd-1`, due in 2 minutes (UTC,
/// window 60 minutes), version 1, for `aws sqs send-message` to the commands queue.
pub fn demo_command() -> String {
    let at = Utc::now() + TimeDelta::minutes(2);
    serde_json::json!({
        "v": 1, "version": 1, "tenant_id": "tenant-0", "renewal_id": "cmd-1", "recipient_ref": "demo-recipient-0",
        "channel": "email", "zone": "UTC", "local_due_date": at.format("%Y-%m-%d").to_string(),
        "local_send_time": at.format("%H:%M").to_string(), "window_minutes": 60,
        "data": {"plan": "pro"},
    })
    .to_string()
}

/// Human description of a running local pipeline.
pub fn describe(s: &LocalState) -> String {
    let r = &s.resources;
    let mut out = format!(
        "endpoint          {}\n{}send_queue_url    {}\ndlq_url           {}\nledger_table      {}\nrenewals_table    {}\nprovider_url      {}\n",
        r.endpoint,
        s.dynamodb_endpoint.as_ref().map(|d| format!("dynamodb_endpoint {d}\n")).unwrap_or_default(),
        r.send_queue_url,
        r.dlq_url,
        r.ledger_table,
        r.renewals_table,
        r.provider_url
    );
    if !r.commands_queue_url.is_empty() {
        out.push_str(&format!(
            "commands_queue_url {}\ncommands_dlq_url  {}\noutcomes_queue_url {}\n",
            r.commands_queue_url, r.commands_dlq_url, r.outcomes_queue_url
        ));
    }
    for c in &r.channels {
        let provider = if c.kind == "ses" { "Amazon SES on the emulator".to_owned() } else { c.provider_url.clone() };
        let queue = match (c.queue_url.is_empty(), c.urgent_queue_url.is_empty()) {
            (true, _) => "the lanes".to_owned(),
            // A state file from before a channel's own urgent lane.
            (false, true) => c.queue_url.clone(),
            (false, false) => format!("{} (urgent: {})", c.queue_url, c.urgent_queue_url),
        };
        out.push_str(&format!("channel {:<9} {provider} (quota {}/s), on {queue}\n", c.name, c.quota));
    }
    out.push_str(&format!(
        "\nTry it (dummy credentials are fine for the emulator):\n  export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1\n  aws --endpoint-url {} sqs send-message --queue-url {} --message-body '{}'\n  aws --endpoint-url {} sqs send-message --queue-url {} --message-body '{{\"v\":1}}'\n",
        r.endpoint,
        r.send_queue_url,
        demo_message(0).unwrap_or_default(),
        r.endpoint,
        r.send_queue_url
    ));
    if !r.commands_queue_url.is_empty() {
        out.push_str(&format!(
            "  aws --endpoint-url {} sqs send-message --queue-url {} --message-body '{}'\n",
            r.endpoint,
            r.commands_queue_url,
            demo_command()
        ));
    }
    out.push_str("  punctual local drain\n  punctual local down\n");
    out
}

/// `local drain`'s report (the keys of `punctual run`'s report that apply; the delivery
/// figures are the one accounting's, [`DeliveryCounts`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DrainReport {
    /// Reminders the ledger knows plus messages quarantined as malformed.
    pub reminders: u64,
    /// What happened to them (docs/design.md#the-one-accounting).
    #[serde(flatten)]
    pub counts: DeliveryCounts,
    /// Messages handed to the sender during this drain.
    pub records: u64,
    /// Seconds the drain took.
    pub drain_seconds: f64,
    /// Reminders whose ledger record this drain wrote: the messages the request figures below
    /// are divided by.
    pub handled: u64,
    /// The functions' requests per handled reminder, as in `punctual run`'s report (the same
    /// keys).
    #[serde(flatten)]
    pub requests: PipelineRequests,
    /// CPU seconds of the emulators, the double and this process over the drain.
    pub cpu: crate::cpu::CpuShare,
    /// The local pipeline's last 24 hours of due renewals, reconciled as `punctual reconcile`
    /// does (renewals the scheduler never released included), with their deadline SLO.
    pub window: Option<crate::count::WindowCheck>,
    /// `local up --channels`: each channel's own figures, as `punctual run --channels` reports
    /// them (its reminders are the ledger's records whose renewal's row names it; an SES channel's
    /// provider count is not read: SES's is a 24-hour one).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub channels: std::collections::BTreeMap<String, crate::run::RunChannel>,
    /// What the ingest did with the commands queue, before the pipeline ran.
    pub commands: crate::commands::CommandsReport,
    /// The outcome events published onto the outcomes queue after the pipeline drained.
    pub outcomes: punctual_core::outcome::SweepReport,
}

impl DrainReport {
    /// Human report.
    pub fn render(&self) -> String {
        let c = &self.counts;
        let dlq: Vec<String> = c.dead_lettered.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "drained in {:.1} s ({} messages handled)\nreminders      {}\ndelivered      {}\ncancelled      {}\nexpired        {}\ndead-lettered  {}\nlate           {}\nduplicates     {}\nlost           {}\n",
            self.drain_seconds,
            self.records,
            self.reminders,
            c.delivered,
            c.cancelled,
            c.expired,
            if dlq.is_empty() { "0".to_owned() } else { dlq.join(", ") },
            c.late,
            c.duplicates,
            c.lost
        ) + &format!(
            "records        {} reminders written by this drain (the requests below are per one of them)\n",
            self.handled
        ) + &self.commands.render()
            + &format!(
                "outcomes       {} events published to the outcomes queue{}\n",
                self.outcomes.published,
                if self.outcomes.left > 0 {
                    format!(", {} records could not be cleared (published again next drain)", self.outcomes.left)
                } else {
                    String::new()
                }
            )
            + &self.requests.render(15)
            + &self.cpu.render(15)
            + &self
                .channels
                .iter()
                .map(|(name, c)| {
                    format!(
                        "channel {name:<6} {} of {} delivered, {} late, {} at {}/s ({}); provider {}\n",
                        c.delivered,
                        c.reminders,
                        c.late,
                        c.provider,
                        c.quota,
                        if c.delivered > 0 { format!("utilisation {:.3}", c.utilisation) } else { "none sent".into() },
                        c.provider_effects.map_or_else(|| "not read".to_owned(), |n| format!("holds {n}")),
                    )
                })
                .collect::<String>()
            + &self.window.as_ref().map_or_else(String::new, |w| w.render())
    }
}

/// `local drain`: run the scheduler (its handler, playing EventBridge) and the event source
/// mapping (the sender handler) until the send queue holds nothing visible, in flight or
/// delayed, then account for every reminder.
pub async fn drain(progress: bool) -> Result<DrainReport, LocalError> {
    let state = load_state()?;
    let r = &state.resources;
    let config = for_endpoint(&r.endpoint).await;
    let ddb = dynamodb_client(&config, state.dynamodb_endpoint.as_deref());
    let queues = r.queues(aws_sdk_sqs::Client::new(&config));
    // The functions' requests are counted below the SDK as in `punctual run`; this command's
    // own reads (depth, reconcile) go through `queues` and `ddb`, uncounted. Two mappings of
    // ten: the normal lane's and the urgent lane's pollers.
    let pipeline = CountedPipeline::build(
        r,
        &config,
        state.dynamodb_endpoint.as_deref(),
        &Secret::new(state.provider_token.clone()),
        state.quota,
        Shape {
            concurrency: 10,
            urgent_concurrency: 10,
            seed: 7,
            release_rate: punctual_core::scheduler::SchedulerSettings::default().sustainable_rate,
            channel_concurrency: 2,
        },
    )?;
    let scheduler = &pipeline.scheduler;
    // The producers' commands first, through the ingest handler, until the queue is empty.
    let sqs = aws_sdk_sqs::Client::new(&config);
    let commands = if r.commands_queue_url.is_empty() {
        crate::commands::CommandsReport::default()
    } else {
        let ingest = crate::commands::ingest_for(r, &ddb, &sqs);
        let plain = punctual_aws::sqs::SqsQueues::new(sqs.clone(), "", "");
        let mut line = punctual_core::progress::Progress::timed(Duration::from_secs(10));
        let line = Mutex::new(&mut line);
        let report = crate::commands::drain_commands(&ingest, &plain, &r.commands_queue_url, 4, |n| {
            if progress && let Ok(mut l) = line.lock() {
                l.update(0, || format!("ingesting  {n:>6} commands   "));
            }
        })
        .await;
        if let Ok(l) = line.into_inner() {
            l.finish();
        }
        report
    };
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(EsmStats::default());
    let metrics = Arc::new(Mutex::new(Metrics::new()));
    // A pid reused by another process since `up` is not measured as an emulator.
    let processes: Vec<(&str, u32)> =
        state.processes.iter().filter(|(_, pid)| state.is_ours(**pid)).map(|(k, v)| (k.as_str(), *v)).collect();
    let cpu = crate::cpu::CpuMeter::start(&processes);
    let started = Instant::now();
    let drain_from = Utc::now();
    let pollers = pipeline.poll(Arc::clone(&stop), Arc::clone(&stats), Arc::clone(&metrics));
    let mut line = punctual_core::progress::Progress::timed(Duration::from_secs(10));
    let watch = async {
        let mut idle = 0;
        let mut last_tick = Instant::now() - Duration::from_secs(60);
        let result = loop {
            if last_tick.elapsed() >= crate::run::TICK {
                if let Err(e) = eventbridge::tick(scheduler).await {
                    eprintln!("scheduler tick failed: {e}");
                }
                last_tick = Instant::now();
            }
            let depth = match queues.depth().await {
                Ok(d) => d,
                Err(e) => break Err(step("reading the queue depth")(e)),
            };
            if progress {
                line.update(0, || {
                    format!(
                        "draining  {:>5.1}s  in queue {:>6} normal {:>6} urgent  handled {:>6}   ",
                        started.elapsed().as_secs_f64(),
                        depth.normal,
                        depth.urgent,
                        stats.records.load(Ordering::Relaxed)
                    )
                });
            }
            idle = if depth.total() == 0 { idle + 1 } else { 0 };
            if idle >= 3 {
                break Ok(());
            }
            tokio::time::sleep(Duration::from_millis(700)).await;
        };
        stop.store(true, Ordering::Relaxed);
        result
    };
    let ((), watched) = tokio::join!(pollers, watch);
    watched?;
    line.finish();
    let cpu = cpu.stop();
    let as_of = Utc::now();
    let records =
        DynamoLedger::new(ddb.clone(), &r.ledger_table).scan_all().await.map_err(step("reading the ledger"))?;
    // The DLQ itself says what is in it; every message read is made visible again.
    let dlq = peek_dlq(&queues, 100_000).await.map_err(step("reading the DLQ"))?;
    let malformed = dlq.anonymous.len() as u64;
    let provider = if r.is_ses() { None } else { provider_stats(&r.provider_url).await };
    let observed = Observed {
        records,
        dlq,
        on_queue: 0,
        expired_at_release: 0,
        repeated_key_requests: provider.map_or(0, |s| s.duplicate_key_attempts),
        double_effects: 0,
    };
    let reminders = observed.records.len() as u64 + malformed;
    // This drain's messages: the reminders whose ledger record it wrote (earlier drains'
    // records stay in the ledger and cost nothing now).
    let handled = observed.records.iter().filter(|rec| rec.history.iter().any(|h| h.at >= drain_from)).count() as u64;
    let m = metrics.lock().map(|m| m.clone()).unwrap_or_default();
    let calls = m.total(punctual_aws::emf::name::ATTEMPTS) as u64;
    let (counts, _) = count(&observed, as_of, None);
    let mut channels = std::collections::BTreeMap::new();
    if !r.channels.is_empty() {
        let channel_of = reminder_channels(&ddb, &r.renewals_table, &r.ledger_table)
            .await
            .map_err(step("reading the renewals' channels"))?;
        for c in &r.channels {
            let on = |id: &punctual_core::ids::ReminderId| channel_of.get(id.as_str()) == Some(&c.name);
            let reminders = observed.records.iter().filter(|rec| on(&rec.reminder_id)).count() as u64;
            let double = if c.kind == "http" { provider_stats(&c.provider_url).await } else { None };
            let ses = (c.kind == "ses").then_some(None);
            channels.insert(
                c.name.clone(),
                crate::run::RunChannel::measure(&c.kind, c.quota, reminders, &observed.records, on, double, ses),
            );
        }
    }
    // Not the ledger's span: a renewal that never reached the ledger is what this must catch.
    let window = Some(
        crate::count::check_window(
            r,
            state.dynamodb_endpoint.clone(),
            ddb.clone(),
            &queues,
            as_of - TimeDelta::hours(24),
            as_of + TimeDelta::milliseconds(1),
        )
        .await?,
    );
    // Every outcome event, before the drain returns.
    let outcomes = if r.outcomes_queue_url.is_empty() {
        punctual_core::outcome::SweepReport::default()
    } else {
        crate::commands::publish_outcomes(r, &ddb, &sqs).await.map_err(step("publishing the outcome events"))?
    };
    Ok(DrainReport {
        commands,
        outcomes,
        reminders,
        counts,
        records: stats.records.load(Ordering::Relaxed),
        drain_seconds: started.elapsed().as_secs_f64(),
        window,
        requests: pipeline.requests(handled, calls, None),
        handled,
        cpu,
        channels,
    })
}

/// Each reminder's channel, as the sender routed it: its renewal's row's `channel`. Read by
/// scanning the whole renewals table (tenant, renewal, channel) and the whole ledger (each
/// `reminder:` record's tenant and renewal): local tables, where a `Scan` is cheap and needs no
/// window (a deployed table of millions would not want one: `reconcile` reads a window's rows,
/// with their channel, through the `by_day_channel` index).
async fn reminder_channels(
    ddb: &aws_sdk_dynamodb::Client,
    renewals_table: &str,
    ledger_table: &str,
) -> Result<std::collections::HashMap<String, String>, aws_sdk_dynamodb::Error> {
    use aws_sdk_dynamodb::types::AttributeValue;
    type Item = std::collections::HashMap<String, AttributeValue>;
    async fn scan(
        ddb: &aws_sdk_dynamodb::Client,
        table: &str,
        projection: &str,
    ) -> Result<Vec<Item>, aws_sdk_dynamodb::Error> {
        let (mut items, mut start) = (Vec::new(), None);
        loop {
            let page = ddb
                .scan()
                .table_name(table)
                .projection_expression(projection)
                .expression_attribute_names("#c", "channel")
                .set_exclusive_start_key(start.take())
                .send()
                .await?;
            items.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(k) => start = Some(k),
                None => return Ok(items),
            }
        }
    }
    let text = |item: &Item, k: &str| item.get(k).and_then(|v| v.as_s().ok()).cloned();
    let renewal = |item: &Item| text(item, "tenant_id").zip(text(item, "renewal_id"));
    let channels: std::collections::HashMap<(String, String), String> =
        scan(ddb, renewals_table, "tenant_id, renewal_id, #c")
            .await?
            .iter()
            .filter_map(|item| renewal(item).zip(text(item, "channel")))
            .collect();
    Ok(scan(ddb, ledger_table, "pk, tenant_id, renewal_id, #c")
        .await?
        .iter()
        .filter_map(|item| {
            let id = text(item, "pk")?.strip_prefix("reminder:")?.to_owned();
            Some((id, channels.get(&renewal(item)?)?.clone()))
        })
        .collect())
}

/// The provider double's own counters (`GET /stats`), `None` when it does not answer.
pub async fn provider_stats(provider_url: &str) -> Option<punctual_provider_double::Stats> {
    let base = provider_url.trim_end_matches("/v1/messages");
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(format!("GET /stats HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut buf = Vec::new();
    // The double keeps connections open: read until the declared body length arrives.
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    let body = text.split("\r\n\r\n").nth(1)?;
    serde_json::from_str(body).ok()
}

/// `local down`: stop the processes `up` started and forget the state. Resources die with
/// the emulator (moto and dynalite run in memory).
///
/// A pid whose process is no longer the one `up` started (it died and the kernel gave the pid
/// to another process) is not signalled: `down` after a crash or a reboot must not kill a
/// stranger. Returns the pids stopped.
pub fn down() -> Result<Vec<u32>, LocalError> {
    let state = load_state()?;
    let stopped = stop_ours(&state);
    std::fs::remove_file(state_file()).map_err(step("removing the state file"))?;
    Ok(stopped)
}

/// Sends SIGTERM to each of `state`'s pids that is still its own process; returns those.
fn stop_ours(state: &LocalState) -> Vec<u32> {
    let ours: Vec<u32> = state.pids.iter().copied().filter(|pid| state.is_ours(*pid)).collect();
    for pid in &ours {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    ours
}
