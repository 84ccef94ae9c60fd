//! `punctual-harness`: the whole pipeline on one machine. It starts the emulators (moto,
//! dynalite) and the provider double, provisions queues and tables, and plays the two
//! AWS pieces that call the functions — the EventBridge rule ([`eventbridge`]) and the SQS event
//! source mapping ([`esm`]) — against the **handlers** the Lambdas run, each function built by
//! its own composition root (`punctual_{sender,scheduler}::app::build`). On top: `run`,
//! `local up | drain | down`, `canary` and `bench-limiter`, all counted by the core's one
//! accounting ([`count`]).
//!
//! No in-memory fake is used here: every adapter is the real one, against the emulator.

pub mod bench;
pub mod bench_ingest;
pub mod canary;
pub mod commands;
pub mod count;
pub mod counted;
pub mod cpu;
pub mod env;
pub mod esm;
pub mod eventbridge;
pub mod local;
pub mod run;
pub mod ses;

/// Why a harness command failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The local environment (emulators, processes, provisioning).
    #[error(transparent)]
    Env(#[from] env::EnvError),
    /// A function's configuration, as the local pipeline composed it.
    #[error(transparent)]
    Config(#[from] punctual_lambda::config::ConfigError),
    /// No (readable) `local up` state.
    #[error(transparent)]
    State(#[from] punctual_ops::target::StateError),
    /// `local up` twice.
    #[error("a local pipeline is already up ({0}); `punctual local down` first")]
    AlreadyUp(String),
    /// A step failed.
    #[error("{what}")]
    Step {
        /// What was being done.
        what: &'static str,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A flag's value is invalid (named in the message); nothing was started.
    #[error("{0}")]
    Invalid(String),
    /// SIGINT or SIGTERM.
    #[error("interrupted ({0:?}); everything this run started was stopped")]
    Interrupted(crate::env::Stop),
}

/// Wraps a failure of `what`.
pub(crate) fn step<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    what: &'static str,
) -> impl FnOnce(E) -> HarnessError {
    move |e| HarnessError::Step { what, source: e.into() }
}

/// Serves the provider double on `127.0.0.1:port` until Ctrl-C (`punctual provider-double`,
/// which `local up` starts as its own process), printing its URL first.
pub async fn serve_provider_double(
    port: u16,
    quota: f64,
    burst: f64,
    token: Option<String>,
) -> Result<(), HarnessError> {
    let config = punctual_provider_double::Config { quota, burst, token, ..Default::default() };
    let double = punctual_provider_double::Double::start(config, port).await.map_err(step("starting the double"))?;
    println!("{}", double.url());
    let _ = tokio::signal::ctrl_c().await;
    Ok(())
}
