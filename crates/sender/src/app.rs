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

use punctual_aws::secrets::Vars;

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
    /// A channel's vendor whose token could not be read at cold start ([`PendingToken`]).
    Pending(PendingToken),
}

/// How a [`PendingToken`] builds its vendor's client: reads the token, then builds.
pub type BuildHttp = std::sync::Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<HttpProvider, punctual_core::ports::BoxError>> + Send>,
        > + Send
        + Sync,
>;

/// A declared channel's HTTP vendor whose token could not be read at cold start (its secret
/// missing, empty, or unreadable with the sender's grants). One channel's secret must not stop
/// the others: the cold start goes on, and each call through this channel reads the token
/// again first. Until a read succeeds, the call answers
/// [`ProviderOutcome::AccountBlocked`] without reaching the vendor, so the sender trips that
/// channel's own switch (which pages as `ChannelTrippedAlarm`, naming the channel) and defers
/// the reminder; once an operator fixes the secret and resumes the channel, the next call
/// builds the client and sends. While the channel is paused its messages are held before
/// their claim, so no call (and no read) is made.
#[derive(Clone)]
pub struct PendingToken {
    channel: String,
    profile: ProviderProfile,
    build: BuildHttp,
    built: std::sync::Arc<tokio::sync::Mutex<Option<HttpProvider>>>,
}

impl std::fmt::Debug for PendingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingToken").field("channel", &self.channel).finish_non_exhaustive()
    }
}

impl PendingToken {
    /// `channel`'s vendor, built by `build` at its first call that can read the token; its
    /// `profile` is its dialect's ([`punctual_provider::VendorProfile::profile`]).
    pub fn new(channel: &str, profile: ProviderProfile, build: BuildHttp) -> Self {
        Self { channel: channel.to_owned(), profile, build, built: std::sync::Arc::default() }
    }

    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        let provider = {
            let mut built = self.built.lock().await;
            match &*built {
                Some(p) => p.clone(),
                None => match (self.build)().await {
                    Ok(p) => built.insert(p).clone(),
                    Err(e) => {
                        tracing::error!(channel = %self.channel, error = %e, "the channel's token is still unreadable");
                        return Ok(ProviderOutcome::AccountBlocked {
                            detail: format!("channel {}: its token could not be read: {e}", self.channel),
                        });
                    }
                },
            }
        };
        provider.send(req).await
    }
}

impl Provider for AnyProvider {
    fn profile(&self) -> ProviderProfile {
        match self {
            Self::Http(p) => p.profile(),
            Self::Ses(p) => p.profile(),
            Self::Pending(p) => p.profile,
        }
    }

    async fn send(&self, req: &ProviderRequest<'_>) -> Result<ProviderOutcome, ProviderError> {
        match self {
            Self::Http(p) => p.send(req).await,
            Self::Ses(p) => p.send(req).await,
            Self::Pending(p) => p.send(req).await,
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
            Self::Pending(_) => false,
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
            .with_channel_queues(&config.channel_queues)
            .with_channel_urgent_queues(&config.channel_urgent_queues),
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

/// The HTTP client of the vendor at `url`: its token (the variables under `prefix`, from the
/// environment or Secrets Manager, re-read after a rotation) and dialect. A token that cannot
/// be read is a [`punctual_aws::secrets::TokenError`].
async fn http_provider(
    url: &str,
    vendor: &punctual_provider::VendorProfile,
    prefix: &str,
    sdk: &aws_config::SdkConfig,
    vars: &Vars,
) -> Result<HttpProvider, Box<dyn std::error::Error + Send + Sync>> {
    let token = punctual_aws::secrets::provider_token_in(sdk, prefix, vars).await?;
    let mut http =
        HttpProvider::new(url, &token, std::time::Duration::from_secs(2))?.with_vendor(vendor.clone(), &token)?;
    // A token from Secrets Manager is read again after a 401/403: a rotation must not
    // dead-letter the morning on instances that started before it (docs/design.md#providers-and-idempotency-profiles).
    if let Some(source) = punctual_aws::secrets::SecretsManagerToken::from_vars(sdk, prefix, vars) {
        http = http.with_token_source(std::sync::Arc::new(source));
    }
    Ok(http)
}

/// Every provider `config` names, as a cold start builds them: the sender's own and each
/// declared channel's (see [`provider_of`]).
pub async fn providers(
    config: &mut SenderConfig,
    sdk: &aws_config::SdkConfig,
    dynamodb: &DynamoClient,
) -> Result<(AnyProvider, Vec<AnyProvider>), Box<dyn std::error::Error + Send + Sync>> {
    providers_in(config, sdk, dynamodb, &punctual_aws::secrets::process_vars()).await
}

/// [`providers`], each token read through `vars` (a test's map; the Lambda's is its
/// environment).
pub async fn providers_in(
    config: &mut SenderConfig,
    sdk: &aws_config::SdkConfig,
    dynamodb: &DynamoClient,
    vars: &Vars,
) -> Result<(AnyProvider, Vec<AnyProvider>), Box<dyn std::error::Error + Send + Sync>> {
    let mut channels = Vec::with_capacity(config.channels.len());
    for c in &mut config.channels {
        let named = |e: Box<dyn std::error::Error + Send + Sync>| format!("channel {}: {e}", c.name);
        let provider = match &c.provider {
            // A channel's unreadable token holds that channel only (PendingToken).
            ProviderConfig::Http { url, vendor } => match http_provider(url, vendor, &c.prefix, sdk, vars).await {
                Ok(p) => AnyProvider::Http(p),
                // Its secret unreadable (missing, empty, refused): not a variable left unset,
                // which is the deployment's mistake and fails the cold start as before.
                Err(e)
                    if e.downcast_ref::<punctual_aws::secrets::TokenError>().is_some_and(|t| {
                        !matches!(
                            t,
                            punctual_aws::secrets::TokenError::NotConfigured
                                | punctual_aws::secrets::TokenError::ChannelNotConfigured(_)
                        )
                    }) =>
                {
                    tracing::error!(channel = %c.name, error = %e, "the channel's token could not be read: its calls trip its own pause until it can");
                    let profile = vendor.profile();
                    let (url, vendor, prefix, sdk, vars) =
                        (url.clone(), vendor.clone(), c.prefix.clone(), sdk.clone(), vars.clone());
                    let build: BuildHttp = std::sync::Arc::new(move || {
                        let (url, vendor, prefix, sdk, vars) =
                            (url.clone(), vendor.clone(), prefix.clone(), sdk.clone(), vars.clone());
                        Box::pin(async move { http_provider(&url, &vendor, &prefix, &sdk, &vars).await })
                    });
                    AnyProvider::Pending(PendingToken::new(&c.name, profile, build))
                }
                Err(e) => return Err(named(e).into()),
            },
            _ => provider_of(&c.provider, &mut c.limiter, &c.prefix, sdk, dynamodb, vars).await.map_err(named)?,
        };
        channels.push(provider);
    }
    let own = match (config.channels.first(), channels.first()) {
        (Some(first), Some(p)) => {
            config.limiter = first.limiter.clone();
            p.clone()
        }
        _ => provider_of(&config.provider, &mut config.limiter, "", sdk, dynamodb, vars).await?,
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
    vars: &Vars,
) -> Result<AnyProvider, Box<dyn std::error::Error + Send + Sync>> {
    match kind {
        ProviderConfig::Http { url, vendor } => {
            Ok(AnyProvider::Http(http_provider(url, vendor, prefix, sdk, vars).await?))
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
