//! `punctual import FILE`: renewals from CSV or JSON Lines into the renewals table.
//!
//! Every row is validated on its own (zone, date, time, window, ids); valid rows are written
//! whatever their neighbours look like, and each rejected line is reported with its number
//! and reason. Re-importing the same file writes nothing new (unchanged rows are skipped).

use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

use chrono::Utc;
use punctual_aws::renewals::{DynamoRenewals, RowOutcome};
use punctual_core::renewal::{Renewal, RenewalInput, RowError};
use serde::Serialize;
use serde_json::Value;

/// Rows per import round trip (BatchGet 100 + BatchWrite 25 inside).
const CHUNK: usize = 500;

/// Why an import could not run at all (rows with problems are not errors: they are reported).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file cannot be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The format cannot be told from the extension.
    #[error("cannot tell the format of {0}: use a .csv or .jsonl file, or --format csv|jsonl")]
    UnknownFormat(String),
    /// The CSV header lacks required columns.
    #[error("CSV header is missing required columns: {0}")]
    MissingColumns(String),
    /// The renewals table failed.
    #[error("writing to the renewals table failed")]
    Store(#[source] punctual_core::ports::RenewalsError),
    /// The file has addresses and there is nowhere to keep them.
    #[error(
        "the file has an email column but no recipients table is known: give --recipients-table or set RECIPIENTS_TABLE (addresses are never stored in the renewals table); nothing was imported"
    )]
    NoRecipientsTable,
    /// The recipients table failed (before any renewal was written).
    #[error("writing {0} to the recipients table failed; no renewal was imported (import again to retry)")]
    Recipients(String, #[source] punctual_aws::dynamodb::DynamoError),
    /// No table to import into.
    #[error("no renewals table: give --table, set RENEWALS_TABLE, or start a local pipeline with `punctual local up`")]
    NoTarget,
}

/// Input format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Comma-separated with a header row.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// One rejected line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reject {
    /// 1-based line number in the file (the CSV header is line 1).
    pub line: usize,
    /// Why.
    pub reason: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImportSummary {
    /// Data rows read.
    pub rows: usize,
    /// New renewals.
    pub inserted: usize,
    /// Changed renewals not yet released.
    pub updated: usize,
    /// Released renewals moved to another due date or time: re-armed for their new time (the
    /// copy released from the old version is dropped by its sender, `rescheduled`).
    pub rescheduled: usize,
    /// Already present and identical.
    pub unchanged: usize,
    /// Rejected lines (validation or conflict), with reasons.
    pub rejected: Vec<Reject>,
    /// Addresses written to the recipients table.
    pub recipients: usize,
    /// Columns (CSV header, or the first JSON object's keys) punctual does not read: a
    /// misspelled `email` would otherwise import no address without a word.
    pub ignored_columns: Vec<String>,
}

impl ImportSummary {
    /// Human report.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} rows: {} inserted, {} updated, {}{} unchanged, {} rejected{}\n",
            self.rows,
            self.inserted,
            self.updated,
            if self.rescheduled > 0 {
                format!("{} rescheduled after release, ", self.rescheduled)
            } else {
                String::new()
            },
            self.unchanged,
            self.rejected.len(),
            if self.recipients > 0 {
                format!("; {} addresses to the recipients table", self.recipients)
            } else {
                String::new()
            }
        );
        if !self.ignored_columns.is_empty() {
            out.push_str(&format!("  ignored columns (not read by punctual): {}\n", self.ignored_columns.join(", ")));
        }
        for r in &self.rejected {
            out.push_str(&format!("  line {}: {}\n", r.line, r.reason));
        }
        out
    }
}

const REQUIRED: &[&str] =
    &["tenant_id", "renewal_id", "recipient_ref", "channel", "zone", "local_due_date", "window_minutes"];
/// Every column punctual reads.
const KNOWN: &[&str] = &[
    "tenant_id",
    "renewal_id",
    "recipient_ref",
    "channel",
    "zone",
    "local_due_date",
    "local_send_time",
    "window_minutes",
    "status",
    "kind",
    "email",
];

/// The columns of `path` punctual does not read (see [`ImportSummary::ignored_columns`]).
fn ignored_columns(path: &Path, format: Option<Format>) -> Vec<String> {
    let Ok(file) = std::fs::File::open(path) else { return Vec::new() };
    let names: Vec<String> = match format_of(path, format) {
        Ok(Format::Csv) => csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(file)
            .headers()
            .map(|h| h.iter().map(str::to_owned).collect())
            .unwrap_or_default(),
        Ok(Format::Jsonl) => std::io::BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .find(|l| !l.trim().is_empty())
            .and_then(|l| serde_json::from_str::<serde_json::Map<String, Value>>(&l).ok())
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    names.into_iter().filter(|n| !KNOWN.contains(&n.as_str())).collect()
}

fn format_of(path: &Path, explicit: Option<Format>) -> Result<Format, ImportError> {
    if let Some(f) = explicit {
        return Ok(f);
    }
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("csv") => Ok(Format::Csv),
        Some("jsonl" | "ndjson") => Ok(Format::Jsonl),
        _ => Err(ImportError::UnknownFormat(path.display().to_string())),
    }
}

/// A parsed line: its number and the row, or why it could not be read.
pub type ParsedLine = (usize, Result<RenewalInput, String>);

/// Parses the file into lines.
pub fn parse(path: &Path, format: Option<Format>) -> Result<Vec<ParsedLine>, ImportError> {
    let read = |source| ImportError::Read { path: path.display().to_string(), source };
    let file = std::fs::File::open(path).map_err(read)?;
    match format_of(path, format)? {
        Format::Csv => {
            let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).flexible(true).from_reader(file);
            let headers = reader.headers().map_err(|e| read(std::io::Error::other(e)))?.clone();
            let missing: Vec<_> = REQUIRED.iter().filter(|c| !headers.iter().any(|h| h == **c)).copied().collect();
            if !missing.is_empty() {
                return Err(ImportError::MissingColumns(missing.join(", ")));
            }
            let mut rows = Vec::new();
            for (i, record) in reader.records().enumerate() {
                let line = i + 2;
                let row = record.map_err(|e| format!("unreadable CSV record: {e}")).and_then(|r| {
                    if r.len() != headers.len() {
                        return Err(format!("has {} fields, the header has {}", r.len(), headers.len()));
                    }
                    r.deserialize::<RenewalInput>(Some(&headers)).map_err(|e| format!("unreadable CSV record: {e}"))
                });
                rows.push((line, row));
            }
            Ok(rows)
        }
        Format::Jsonl => {
            let mut rows = Vec::new();
            for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
                let text = line.map_err(read)?;
                if text.trim().is_empty() {
                    continue;
                }
                rows.push((i + 1, json_row(&text)));
            }
            Ok(rows)
        }
    }
}

/// A JSON object into a row; numbers are accepted where the CSV would hold digits.
fn json_row(text: &str) -> Result<RenewalInput, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let Value::Object(obj) = v else { return Err("not a JSON object".into()) };
    let field = |name: &'static str| -> Result<String, String> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            Some(_) => Err(format!("{name} must be a string or a number")),
        }
    };
    Ok(RenewalInput {
        tenant_id: field("tenant_id")?,
        renewal_id: field("renewal_id")?,
        recipient_ref: field("recipient_ref")?,
        channel: field("channel")?,
        zone: field("zone")?,
        local_due_date: field("local_due_date")?,
        local_send_time: field("local_send_time")?,
        window_minutes: field("window_minutes")?,
        status: field("status")?,
        kind: field("kind")?,
        email: field("email")?,
    })
}

/// Validates every parsed row; later duplicates of a (tenant, renewal) are rejected.
pub fn validate(rows: Vec<ParsedLine>) -> (Vec<(usize, Renewal)>, Vec<Reject>) {
    let mut valid = Vec::new();
    let mut rejected = Vec::new();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for (line, row) in rows {
        match row.and_then(|r| Renewal::validate(&r).map_err(|e: RowError| e.to_string())) {
            Ok(r) => {
                let key = (r.tenant_id.to_string(), r.renewal_id.to_string());
                if let Some(first) = seen.get(&key) {
                    rejected.push(Reject {
                        line,
                        reason: format!("duplicate of line {first} (same tenant_id and renewal_id)"),
                    });
                    continue;
                }
                seen.insert(key, line);
                valid.push((line, r));
            }
            Err(reason) => rejected.push(Reject { line, reason }),
        }
    }
    (valid, rejected)
}

/// Where an import writes: found like every operator command's target
/// (docs/commands.md#finding-the-target): flags, then the environment (`RENEWALS_TABLE`, `RECIPIENTS_TABLE`, the SDK's
/// endpoint chain: `AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_DYNAMODB`), then the running `local
/// up` pipeline (its tables and both of its endpoints).
#[derive(Debug, Clone)]
pub struct ImportTarget {
    /// The renewals table.
    pub renewals: DynamoRenewals,
    /// The recipients table, when one is known.
    pub recipients: Option<punctual_aws::recipients::DynamoRecipients>,
    /// Where it is (for messages).
    pub describe: String,
}

impl ImportTarget {
    /// Resolves the target (see the type's docs).
    pub async fn resolve(
        table: Option<String>,
        recipients_table: Option<String>,
        endpoint: Option<&str>,
    ) -> Result<Self, ImportError> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let given = table.clone().or_else(|| env("RENEWALS_TABLE"));
        let recipients_given = recipients_table.or_else(|| env("RECIPIENTS_TABLE"));
        if let Some(table) = given {
            let sdk = match endpoint {
                Some(e) => punctual_aws::config::for_endpoint(e).await,
                None => punctual_aws::config::load().await,
            };
            let ddb = punctual_aws::config::dynamodb_client(&sdk, env("AWS_ENDPOINT_URL_DYNAMODB").as_deref());
            let recipients = recipients_given.map(|t| punctual_aws::recipients::DynamoRecipients::new(ddb.clone(), &t));
            return Ok(Self { renewals: DynamoRenewals::new(ddb, table.clone()), recipients, describe: table });
        }
        let Ok(state) = crate::target::load_state() else { return Err(ImportError::NoTarget) };
        let r = &state.resources;
        let sdk = punctual_aws::config::for_endpoint(endpoint.unwrap_or(&r.endpoint)).await;
        let ddb = punctual_aws::config::dynamodb_client(&sdk, state.dynamodb_endpoint.as_deref());
        let recipients = recipients_given
            .or_else(|| Some(r.recipients_table.clone()).filter(|t| !t.is_empty()))
            .map(|t| punctual_aws::recipients::DynamoRecipients::new(ddb.clone(), &t));
        Ok(Self {
            renewals: DynamoRenewals::new(ddb, r.renewals_table.clone()),
            recipients,
            describe: format!("{} (the local pipeline)", r.renewals_table),
        })
    }
}

/// Imports `path` into the resolved target.
pub async fn import_file(
    target: &ImportTarget,
    path: &Path,
    format: Option<Format>,
    progress: bool,
) -> Result<ImportSummary, ImportError> {
    run_with(&target.renewals, target.recipients.as_ref(), path, format, progress).await
}

/// Imports `path` into `store` (renewals only; a file with addresses is refused).
pub async fn run(
    store: &DynamoRenewals,
    path: &Path,
    format: Option<Format>,
    progress: bool,
) -> Result<ImportSummary, ImportError> {
    run_with(store, None, path, format, progress).await
}

/// Each line's address, checked: invalid ones and a second, different address for the same
/// `(tenant_id, recipient_ref)` reject their line (its renewal is not imported either: nothing
/// half-done). A reference is the tenant's own: another tenant's equal reference is another
/// customer, never a conflict.
fn addresses(rows: &[ParsedLine]) -> (HashMap<usize, punctual_core::ports::EmailAddress>, Vec<Reject>) {
    let mut out = HashMap::new();
    let mut rejected = Vec::new();
    let mut by_ref: HashMap<(String, String), (usize, String)> = HashMap::new();
    for (line, row) in rows {
        let Ok(r) = row else { continue };
        if r.email.trim().is_empty() {
            continue;
        }
        let key = (r.tenant_id.trim().to_owned(), r.recipient_ref.trim().to_owned());
        match punctual_core::ports::EmailAddress::parse(&r.email) {
            Err(e) => rejected.push(Reject { line: *line, reason: format!("email: {e}") }),
            Ok(a) => match by_ref.get(&key) {
                Some((first, prior)) if prior != a.expose() => rejected.push(Reject {
                    line: *line,
                    reason: format!(
                        "recipient_ref {:?} of tenant {:?} has another email on line {first}",
                        key.1, key.0
                    ),
                }),
                _ => {
                    by_ref.insert(key, (*line, a.expose().to_owned()));
                    out.insert(*line, a);
                }
            },
        }
    }
    (out, rejected)
}

async fn run_with(
    store: &DynamoRenewals,
    recipients: Option<&punctual_aws::recipients::DynamoRecipients>,
    path: &Path,
    format: Option<Format>,
    progress: bool,
) -> Result<ImportSummary, ImportError> {
    let rows = parse(path, format)?;
    let ignored = ignored_columns(path, format);
    let total = rows.len();
    let (emails, bad_emails) = addresses(&rows);
    if (!emails.is_empty() || !bad_emails.is_empty()) && recipients.is_none() {
        return Err(ImportError::NoRecipientsTable);
    }
    let bad: std::collections::HashSet<usize> = bad_emails.iter().map(|r| r.line).collect();
    let rows = rows.into_iter().filter(|(line, _)| !bad.contains(line)).collect();
    let (valid, mut rejected) = validate(rows);
    rejected.extend(bad_emails);
    // The addresses go in first (one per reference), so a renewal the scheduler releases the
    // moment it is written already finds its recipient; an address whose renewal is then
    // refused (a conflict) is harmless: nothing refers to it that did not before.
    if let Some(r) = recipients {
        let mut book: Vec<punctual_aws::recipients::Entry> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (line, renewal) in &valid {
            if let Some(address) = emails.get(line)
                && seen.insert((renewal.tenant_id.clone(), renewal.recipient_ref.clone()))
            {
                book.push((renewal.tenant_id.clone(), renewal.recipient_ref.clone(), address.clone()));
            }
        }
        if !book.is_empty() {
            r.put_all(&book, Utc::now().timestamp_millis())
                .await
                .map_err(|e| ImportError::Recipients(format!("{} addresses", book.len()), e))?;
        }
    }
    let mut bar = punctual_core::progress::Progress::new(valid.len() as u64);
    let started = std::time::Instant::now();
    let mut done = 0u64;
    let mut summary = ImportSummary { rows: total, ignored_columns: ignored, ..ImportSummary::default() };
    for chunk in valid.chunks(CHUNK) {
        let renewals: Vec<Renewal> = chunk.iter().map(|(_, r)| r.clone()).collect();
        let outcomes = store.import(&renewals, Utc::now()).await.map_err(ImportError::Store)?;
        for ((line, _), outcome) in chunk.iter().zip(outcomes) {
            match outcome {
                RowOutcome::Inserted => summary.inserted += 1,
                RowOutcome::Updated => summary.updated += 1,
                RowOutcome::Rescheduled => summary.rescheduled += 1,
                RowOutcome::Unchanged => summary.unchanged += 1,
                RowOutcome::Conflict(reason) => {
                    rejected.push(Reject { line: *line, reason });
                    continue;
                }
            }
            if emails.contains_key(line) {
                summary.recipients += 1;
            }
        }
        done += chunk.len() as u64;
        if progress {
            let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-3);
            bar.update(done, || format!("importing {done}/{} rows  {rate:.0} rows/s", valid.len()));
        }
    }
    bar.finish();
    rejected.sort_by_key(|r| r.line);
    summary.rejected = rejected;
    Ok(summary)
}
