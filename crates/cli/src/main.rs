//! `punctual` — operator and developer CLI. Flag names are a contract (scripts depend on them).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use punctual::import;
use punctual_aws::renewals::DynamoRenewals;

#[derive(Parser)]
#[command(
    name = "punctual",
    version,
    about = "Deadline-aware, rate-limited reminder delivery on AWS Lambda + SQS + DynamoDB"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Import renewals from a CSV or JSON Lines file into the renewals table.
    ///
    /// Exit status: 0 all rows imported, 3 some rows rejected (the rest imported), 1 failure.
    Import {
        /// The file (.csv with a header row, or .jsonl).
        file: PathBuf,
        /// The renewals table.
        #[arg(long, env = "RENEWALS_TABLE")]
        table: String,
        /// Format, when the extension does not say.
        #[arg(long, value_enum)]
        format: Option<import::Format>,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn fail(e: &dyn std::error::Error) -> ExitCode {
    eprintln!("punctual: {e}");
    let mut source = e.source();
    while let Some(s) = source {
        eprintln!("  caused by: {s}");
        source = s.source();
    }
    ExitCode::from(1)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Import { file, table, format, json } => {
            let sdk = punctual_aws::config::load().await;
            let store = DynamoRenewals::new(aws_sdk_dynamodb::Client::new(&sdk), table);
            match import::run(&store, &file, format, !json).await {
                Ok(summary) => {
                    if json {
                        println!("{}", serde_json::to_string_pretty(&summary).unwrap_or_default());
                    } else {
                        print!("{}", summary.render());
                    }
                    if summary.rejected.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(3) }
                }
                Err(e) => fail(&e),
            }
        }
    }
}
