//! The sender's one composition root: configuration + clients → the ready [`App`]. The
//! Lambda's `main.rs`, the local harness (`punctual run`, `local drain`, `canary`) and the
//! integration tests all call [`build`], so every sender runs the same wiring: the DynamoDB
//! ledger and renewals, the one shared limiter schedule in the ledger table, the provider,
//! SQS, and the operator pause switch.

use aws_sdk_dynamodb::Client as DynamoClient;
use aws_sdk_sqs::Client as SqsClient;
use punctual_aws::control::DynamoControl;
use punctual_aws::ledger::DynamoLedger;
use punctual_aws::limiter::DynamoSlotStore;
use punctual_aws::recipients::DynamoRecipients;
use punctual_aws::renewals::DynamoRenewals;
use punctual_aws::sqs::SqsQueues;
use punctual_core::limiter::SharedLimiter;
use punctual_core::pause::PauseGate;
use punctual_core::ports::{Provider, ProviderError, ProviderRequest};
use punctual_core::provider::{ProviderOutcome, ProviderProfile};
use punctual_core::sender::{ChannelRoute, Sender};
use punctual_lambda::SystemClock;
use punctual_provider::HttpProvider;
use punctual_ses::SesProvider;

use crate::config::{ProviderConfig, SenderConfig};
use crate::handler::Deps;

/// A sender instance as production composes it.
pub type App = Deps<LiveSender>;

/// The sender service over the AWS adapters, the shared DynamoDB limiter and the HTTP provider.
pub type LiveSender = Sender<
    DynamoLedger,
    DynamoRenewals,
    SharedLimiter<DynamoSlotStore, SystemClock>,
    AnyProvider,
    SqsQueues,
    SystemClock,
>;

/// The provider a deployment chose (`PROVIDER_KIND`): one sender type for both, so the
/// handler, the harness and the tests compose one thing.
#[derive(Debug, Clone)]
pub enum AnyProvider {
    /// A vendor HTTP API.
    Http(HttpProvider),
    /// Amazon SES v2, addresses from the recipients table.
    Ses(SesProvider<DynamoRecipients>),
}

impl Provider for AnyProvider {
    fn profile(&self) -> ProviderProfile {
        match self {
            Self::Http(p) => p.profile(),
            Self::Ses(p) => p.profile(),
        }
    }

    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        match self {
            Self::Http(p) => p.send(req).await,
            Self::Ses(p) => p.send(req).await,
        }
    }
}

impl From<HttpProvider> for AnyProvider {
    fn from(p: HttpProvider) -> Self {
        Self::Http(p)
    }
}

impl AnyProvider {
    /// Opens the provider's connection during init (HTTP only: the SES client connects on its
    /// first call). True when an answer came back.
    pub async fn warm_up(&self) -> bool {
        match self {
            Self::Http(p) => p.warm_up().await,
            Self::Ses(_) => true,
        }
    }
}

/// The clients an instance is built from (built once per cold start by the caller, which
/// decides endpoints and credentials).
#[derive(Debug, Clone)]
pub struct Clients {
    /// DynamoDB (ledger, renewals, limiter schedule, pause switch).
    pub dynamodb: DynamoClient,
    /// SQS (requeue, DLQ).
    pub sqs: SqsClient,
    /// The provider (with channels declared: the first channel's, the default route no
    /// message takes).
    pub provider: AnyProvider,
    /// Each declared channel's provider, in the order of `config.channels`.
    pub channels: Vec<AnyProvider>,
}

/// Builds one sender instance. `seed` seeds its backoff jitter, owner-token nonces and limiter
/// pool (each instance its own; many instances share one schedule).
pub fn build(config: &SenderConfig, clients: Clients, seed: u64) -> App {
    let clock = SystemClock;
    let ddb = clients.dynamodb;
    let sender = Sender::new(
        DynamoLedger::new(ddb.clone(), &config.ledger_table),
        DynamoRenewals::new(ddb.clone(), &config.renewals_table),
        // One schedule in the ledger table, shared by every sender instance and by redrive.
        SharedLimiter::new(
            DynamoSlotStore::new(ddb.clone(), &config.ledger_table),
            clock,
            config.limiter.clone(),
            seed,
        ),
        clients.provider,
        SqsQueues::new(clients.sqs, &config.send_queue_url, &config.dlq_url)
            .with_urgent(config.urgent_queue_url.as_deref())
            .with_channel_queues(&config.channel_queues),
        clock,
        config.settings,
        seed.rotate_left(32),
    )
    .with_pause(PauseGate::new(DynamoControl::new(ddb.clone(), &config.ledger_table), clock, config.pause_check))
    .with_channels(
        // Each declared channel: its own schedule in the ledger table, its own provider and its
        // own pause switch (`control:pause#{channel}`); a 401 on one stops that one only.
        config
            .channels
            .iter()
            .zip(clients.channels)
            .zip(1u64..)
            .map(|((c, provider), i)| ChannelRoute {
                name: c.name.clone(),
                limiter: SharedLimiter::new(
                    DynamoSlotStore::new(ddb.clone(), &config.ledger_table),
                    clock,
                    c.limiter.clone(),
                    seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ),
                provider,
                pause: Some(PauseGate::new(
                    DynamoControl::for_channel(ddb.clone(), &config.ledger_table, &c.name),
                    clock,
                    config.pause_check,
                )),
            })
            .collect(),
    );
    Deps { sender, concurrency: config.concurrency, slo: config.slo, max_receive_count: config.max_receive_count }
}

/// The SES provider over `sdk` (its endpoint and credentials) and the recipients table.
pub fn ses_provider(
    sdk: &aws_config::SdkConfig,
    dynamodb: DynamoClient,
    settings: punctual_ses::SesSettings,
    recipients_table: &str,
) -> AnyProvider {
    let recipients = DynamoRecipients::new(dynamodb, recipients_table);
    AnyProvider::Ses(SesProvider::new(&aws_sdk_sesv2::config::Config::from(sdk), recipients, settings))
}

/// Every provider `config` names, as a cold start builds them: the sender's own and each
/// declared channel's (see [`provider_of`]).
pub async fn providers(
    config: &mut SenderConfig,
    sdk: &aws_config::SdkConfig,
    dynamodb: &DynamoClient,
) -> Result<(AnyProvider, Vec<AnyProvider>), Box<dyn std::error::Error + Send + Sync>> {
    let mut channels = Vec::with_capacity(config.channels.len());
    for c in &mut config.channels {
        let named = |e: Box<dyn std::error::Error + Send + Sync>| format!("channel {}: {e}", c.name);
        channels.push(provider_of(&c.provider, &mut c.limiter, &c.prefix, sdk, dynamodb).await.map_err(named)?);
    }
    let own = match (config.channels.first(), channels.first()) {
        (Some(first), Some(p)) => {
            config.limiter = first.limiter.clone();
            p.clone()
        }
        _ => provider_of(&config.provider, &mut config.limiter, "", sdk, dynamodb).await?,
    };
    Ok((own, channels))
}

/// The provider `kind` names, as a cold start builds it: the HTTP client with its token (the
/// variables under `prefix`, from the environment or Secrets Manager, re-read after a
/// rotation) and vendor dialect, or SES. With `PROVIDER_RATE_FROM_ACCOUNT=true`, lowers
/// `limiter.quota` to the account's `MaxSendRate` when that is lower; a failed read fails the
/// cold start (Lambda retries it): an instance on another rate than its peers would book the
/// one shared schedule at its own density, and SES would see the difference as 429s.
pub async fn provider_of(
    kind: &ProviderConfig,
    limiter: &mut punctual_core::limiter::LimiterSettings,
    prefix: &str,
    sdk: &aws_config::SdkConfig,
    dynamodb: &DynamoClient,
) -> Result<AnyProvider, Box<dyn std::error::Error + Send + Sync>> {
    match kind {
        ProviderConfig::Http { url, vendor } => {
            let token = punctual_aws::secrets::provider_token_under(sdk, prefix).await?;
            let mut http = HttpProvider::new(url, &token, std::time::Duration::from_secs(2))?
                .with_vendor(vendor.clone(), &token)?;
            // A token from Secrets Manager is read again after a 401/403: a rotation must not
            // dead-letter the morning on instances that started before it (docs/design.md#providers-and-idempotency-profiles).
            if let Some(source) = punctual_aws::secrets::SecretsManagerToken::from_env_under(sdk, prefix) {
                http = http.with_token_source(std::sync::Arc::new(source));
            }
            Ok(AnyProvider::Http(http))
        }
        ProviderConfig::Ses { settings, recipients_table, rate_from_account } => {
            let provider = ses_provider(sdk, dynamodb.clone(), settings.clone(), recipients_table);
            if *rate_from_account && let AnyProvider::Ses(ses) = &provider {
                match ses.max_send_rate().await {
                    Ok(rate) if rate > 0.0 && rate < limiter.quota => {
                        tracing::info!(
                            configured = limiter.quota,
                            account = rate,
                            "using the SES account's MaxSendRate"
                        );
                        limiter.quota = rate;
                    }
                    Ok(rate) => {
                        tracing::info!(configured = limiter.quota, account = rate, "keeping the configured rate")
                    }
                    Err(e) => {
                        return Err(format!(
                            "{prefix}PROVIDER_RATE_FROM_ACCOUNT=true but the SES account's MaxSendRate could not be read: {e}"
                        )
                        .into());
                    }
                }
            }
            Ok(provider)
        }
    }
}
