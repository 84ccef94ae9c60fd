//! `punctual import FILE`: renewals from CSV or JSON Lines into the renewals table.
//!
//! Every row is validated on its own (zone, date, time, window, ids); valid rows are written
//! whatever their neighbours look like, and each rejected line is reported with its line in
//! the file and its reason. Re-importing the same file writes nothing new (unchanged rows are
//! skipped).
//!
//! The file is streamed, never held. A first pass reads it to check every line (validation,
//! duplicates, addresses) and writes the addresses; a second reads it again and writes the
//! renewals, [`CHUNK`] rows at a time. What stays in memory is one chunk and, for the checks
//! that span the whole file, a 128-bit digest of each row's key (and of each recipient and its
//! address): ~40 bytes a row, against ~1 KB a row when the whole file was parsed and then
//! validated into a second copy before the first write (measured in docs/measurements.md).
//! Two passes because the first decides what the second may write: a file with addresses
//! and no recipients table is refused before anything is written, and every address is in
//! before any renewal that needs it.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::io::BufRead;
use std::path::Path;

use chrono::Utc;
use punctual_aws::renewals::{DynamoRenewals, RowOutcome};
use punctual_core::ports::RenewalsError;
use punctual_core::renewal::{CheckedRow, Renewal, RenewalInput, check_row};
use serde::Serialize;
use serde_json::Value;

/// Rows per write round trip (BatchGet 100 + conditional writes inside): also what a store
/// failure can leave half-written.
pub const CHUNK: usize = 500;

/// Why an import could not run, or stopped (rows with problems are not errors: they are
/// reported).
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
    /// The file has addresses and there is nowhere to keep them.
    #[error(
        "the file has an email column but no recipients table is known: give --recipients-table or set RECIPIENTS_TABLE (addresses are never stored in the renewals table); nothing was imported"
    )]
    NoRecipientsTable,
    /// The recipients table failed (the addresses are written before any renewal).
    #[error("writing {0} to the recipients table failed; no renewal was imported (import again to retry)")]
    Recipients(String, #[source] punctual_aws::dynamodb::DynamoError),
    /// The renewals table (or the file) failed part-way: `summary` says what was written
    /// before, and [`Stopped`] where it stopped.
    #[error(
        "the import stopped at line {}: {} ({}); the rows from that line on were not all imported: import the file again to finish (rows already in are reported unchanged)",
        .summary.stopped.as_ref().map_or(0, |s| s.line),
        .summary.stopped.as_ref().map_or("", |s| s.what.as_str()),
        .summary.counts()
    )]
    Stopped {
        /// What the import did before it stopped.
        summary: Box<ImportSummary>,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `CHANNELS` is set but is not a list of channel names (named in the message).
    #[error("{0}; nothing was imported")]
    Channels(String),
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
    /// 1-based line number in the file (the CSV header is line 1), as an editor shows it:
    /// blank lines and quoted fields spanning lines count. A record spanning lines is named by
    /// its first.
    pub line: usize,
    /// Why.
    pub reason: String,
}

/// Where and why an import stopped part-way (see [`ImportError::Stopped`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stopped {
    /// The first line of the chunk being written when it failed: every row before it is
    /// accounted for in the summary.
    pub line: usize,
    /// Valid rows from that line on that the summary does not account for: the failed chunk's
    /// (at most [`CHUNK`], possibly some of them written) and every later one (not written).
    pub rows_left: usize,
    /// What failed.
    pub what: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImportSummary {
    /// Data rows in the file.
    pub rows: usize,
    /// New renewals.
    pub inserted: usize,
    /// Changed renewals not yet released.
    pub updated: usize,
    /// Released renewals moved to another due date or time: re-armed for their new time (the
    /// copy released from the old version is dropped by its sender, `rescheduled`).
    pub rescheduled: usize,
    /// Released renewals active again (they were cancelled or paid) before their deadline:
    /// re-armed and released again; the reminder is sent if it was not delivered already.
    pub reactivated: usize,
    /// Already present and identical.
    pub unchanged: usize,
    /// Rows with a `version` column not newer than the stored one: nothing written
    /// (docs/design.md#versions).
    pub stale: usize,
    /// Rejected lines (validation or conflict), with reasons.
    pub rejected: Vec<Reject>,
    /// Imported rows that carry an address (written to the recipients table).
    pub recipients: usize,
    /// Columns (CSV header, or the first JSON object's keys) punctual does not read: a
    /// misspelled `email` would otherwise import no address without a word.
    pub ignored_columns: Vec<String>,
    /// Set when a store failure stopped the import part-way (absent when it finished).
    pub stopped: Option<Stopped>,
}

impl ImportSummary {
    /// The outcome counts, as one phrase.
    pub fn counts(&self) -> String {
        let after_release =
            [(self.rescheduled, "rescheduled after release"), (self.reactivated, "active again after release")]
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}, "))
                .collect::<String>();
        let stale = if self.stale > 0 { format!("{} stale, ", self.stale) } else { String::new() };
        format!(
            "{} inserted, {} updated, {after_release}{} unchanged, {stale}{} rejected",
            self.inserted,
            self.updated,
            self.unchanged,
            self.rejected.len(),
        )
    }

    /// Human report.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} rows: {}{}\n",
            self.rows,
            self.counts(),
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
        if let Some(s) = &self.stopped {
            out.push_str(&format!(
                "  STOPPED at line {}: {}; the counts above are every row before it; {} valid rows from line {} on were not all written (the {} of the chunk that failed may be in part): import the file again to finish\n",
                s.line,
                s.what,
                s.rows_left,
                s.line,
                s.rows_left.min(CHUNK)
            ));
        }
        out
    }
}

const REQUIRED: &[&str] =
    &["tenant_id", "renewal_id", "recipient_ref", "channel", "zone", "local_due_date", "window_minutes"];
/// Every column punctual reads.
const KNOWN: &[&str] = &punctual_core::renewal::COLUMNS;

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

/// A parsed line: its line in the file, and the row or why it could not be read.
pub type ParsedLine = (usize, Result<RenewalInput, String>);

/// The rows of a file, read one at a time (nothing else of the file is held).
pub struct Rows {
    path: String,
    inner: Inner,
    /// Columns punctual does not read (CSV header, or the first JSON object's keys).
    ignored: Vec<String>,
}

enum Inner {
    Csv {
        reader: csv::Reader<Breaks<std::fs::File>>,
        headers: csv::StringRecord,
        record: csv::StringRecord,
        lines: LineBreaks,
    },
    Jsonl {
        reader: std::io::BufReader<std::fs::File>,
        line: usize,
        bytes: u64,
        buf: Vec<u8>,
    },
}

impl Rows {
    /// Opens `path` and reads its header (CSV: refused when a required column is missing).
    pub fn open(path: &Path, format: Option<Format>) -> Result<Self, ImportError> {
        let name = path.display().to_string();
        let read = |source| ImportError::Read { path: name.clone(), source };
        let format = format_of(path, format)?;
        let file = std::fs::File::open(path).map_err(read)?;
        let unknown = |names: Vec<String>| names.into_iter().filter(|n| !KNOWN.contains(&n.as_str())).collect();
        match format {
            Format::Csv => {
                let lines = LineBreaks::default();
                let file = Breaks { inner: file, offset: 0, lines: lines.clone() };
                let mut reader = csv::ReaderBuilder::new().trim(csv::Trim::All).flexible(true).from_reader(file);
                let headers = reader.headers().map_err(|e| read(std::io::Error::other(e)))?.clone();
                let missing: Vec<_> = REQUIRED.iter().filter(|c| !headers.iter().any(|h| h == **c)).copied().collect();
                if !missing.is_empty() {
                    return Err(ImportError::MissingColumns(missing.join(", ")));
                }
                let ignored = unknown(headers.iter().map(str::to_owned).collect());
                let record = csv::StringRecord::new();
                Ok(Self { path: name, inner: Inner::Csv { reader, headers, record, lines }, ignored })
            }
            Format::Jsonl => {
                // The first object's keys name the columns (one line read, then the file again).
                let first = std::io::BufReader::new(std::fs::File::open(path).map_err(read)?)
                    .lines()
                    .map_while(Result::ok)
                    .find(|l| !l.trim().is_empty())
                    .and_then(|l| serde_json::from_str::<serde_json::Map<String, Value>>(&l).ok())
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                let reader = std::io::BufReader::new(file);
                Ok(Self {
                    path: name,
                    inner: Inner::Jsonl { reader, line: 0, bytes: 0, buf: Vec::new() },
                    ignored: unknown(first),
                })
            }
        }
    }

    /// Bytes of the file read so far (for progress).
    pub fn bytes_read(&self) -> u64 {
        match &self.inner {
            Inner::Csv { reader, .. } => reader.position().byte(),
            Inner::Jsonl { bytes, .. } => *bytes,
        }
    }
}

/// Where the lines of a file end, as far as csv has read it: what names a record by the line
/// it starts on, as an editor shows it. csv's own position does not do it: a record's
/// position is where the reader stood after the previous record, before the blank lines it
/// then skipped, and its line count leaves those blank lines out. Only the breaks csv has
/// read beyond the last record asked about are kept.
#[derive(Debug, Clone, Default)]
struct LineBreaks(std::sync::Arc<std::sync::Mutex<BreaksSeen>>);

#[derive(Debug, Default)]
struct BreaksSeen {
    /// `\n` and `\r` bytes read and not yet passed, with their offsets.
    ahead: std::collections::VecDeque<(u64, u8)>,
    /// Lines ended before the first of `ahead`.
    passed: usize,
}

impl LineBreaks {
    /// The line (1-based) of the first content at or after byte `from`: blank lines there
    /// (`\n`, `\r\n`) are the ones csv skips before a record.
    fn line_at(&self, from: u64) -> usize {
        let mut seen = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let BreaksSeen { ahead, passed } = &mut *seen;
        while let Some(&(at, byte)) = ahead.front() {
            if at >= from {
                break;
            }
            *passed += usize::from(byte == b'\n');
            ahead.pop_front();
        }
        let mut at = from;
        loop {
            match (ahead.front().copied(), ahead.get(1).copied()) {
                (Some((o, b'\n')), _) if o == at => {
                    *passed += 1;
                    at += 1;
                    ahead.pop_front();
                }
                (Some((o, b'\r')), Some((n, b'\n'))) if o == at && n == at + 1 => {
                    *passed += 1;
                    at += 2;
                    ahead.pop_front();
                    ahead.pop_front();
                }
                _ => break,
            }
        }
        *passed + 1
    }
}

/// The file as csv reads it, noting every line break in [`LineBreaks`].
struct Breaks<R> {
    inner: R,
    offset: u64,
    lines: LineBreaks,
}

impl<R: std::io::Read> std::io::Read for Breaks<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut seen = self.lines.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (i, b) in buf[..n].iter().enumerate() {
            if matches!(b, b'\n' | b'\r') {
                seen.ahead.push_back((self.offset + i as u64, *b));
            }
        }
        self.offset += n as u64;
        Ok(n)
    }
}

fn failed(path: &str, source: std::io::Error) -> ImportError {
    ImportError::Read { path: path.to_owned(), source }
}

impl Iterator for Rows {
    type Item = Result<ParsedLine, ImportError>;

    fn next(&mut self) -> Option<Self::Item> {
        let Self { path, inner, .. } = self;
        match inner {
            Inner::Csv { reader, headers, record, lines } => {
                // The line a record starts on in the file (see `LineBreaks`).
                let at = |p: Option<&csv::Position>| p.map_or(0, |p| lines.line_at(p.byte()));
                match reader.read_record(record) {
                    Ok(false) => None,
                    Ok(true) => {
                        let line = at(record.position());
                        let row = if record.len() != headers.len() {
                            Err(format!("has {} fields, the header has {}", record.len(), headers.len()))
                        } else {
                            record
                                .deserialize::<RenewalInput>(Some(headers))
                                .map_err(|e| format!("unreadable CSV record: {e}"))
                        };
                        Some(Ok((line, row)))
                    }
                    Err(e) => match e.kind() {
                        csv::ErrorKind::Io(_) => Some(Err(failed(path, std::io::Error::other(e.to_string())))),
                        _ => {
                            let line = at(e.position()).max(1);
                            Some(Ok((line, Err(format!("unreadable CSV record: {e}")))))
                        }
                    },
                }
            }
            Inner::Jsonl { reader, line, bytes, buf } => loop {
                buf.clear();
                match reader.read_until(b'\n', buf) {
                    Ok(0) => return None,
                    Ok(n) => {
                        *line += 1;
                        *bytes += n as u64;
                    }
                    Err(e) => return Some(Err(failed(path, e))),
                }
                let Ok(text) = std::str::from_utf8(buf) else {
                    return Some(Ok((*line, Err("not valid UTF-8".into()))));
                };
                if text.trim().is_empty() {
                    continue;
                }
                return Some(Ok((*line, json_row(text.trim_end_matches(['\n', '\r'])))));
            },
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
        version: field("version")?,
    })
}

/// A 128-bit digest of `parts` (each followed by a NUL), for the checks that span the whole
/// file: a row's key, a recipient, an address. Two SipHash-1-3 states with different
/// prefixes; two different rows collide with probability ~2⁻¹²⁸, so keeping the digest instead
/// of the strings loses nothing an import could notice.
fn digest(parts: &[&str]) -> u128 {
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        salt.hash(&mut h);
        for p in parts {
            h.write(p.as_bytes());
            h.write_u8(0);
        }
        h.finish()
    };
    (u128::from(half(1)) << 64) | u128::from(half(2))
}

/// What the first pass found: every line rejected, and the rows it read.
#[derive(Debug, Default)]
struct Checked {
    rows: usize,
    rejected: Vec<Reject>,
    valid: usize,
}

/// The first pass: checks every line and writes the addresses (a batch of [`CHUNK`] at a
/// time, one per tenant's `recipient_ref`), so the second pass writes only renewals whose
/// line is sound and whose address is already in.
///
/// Per line, in this order: unreadable; `email` not a bare address (the value is never
/// echoed); invalid row; a channel the deployment does not declare; a later duplicate of a (tenant, renewal); a second, different address
/// for a tenant's `recipient_ref`. A rejected line's renewal is not imported, nor its address:
/// nothing half-imported. A reference is the tenant's own: another tenant's equal reference is
/// another customer, never a conflict. A file with an address and no recipients table is
/// refused before anything is written.
async fn check(
    rows: Rows,
    recipients: Option<&punctual_aws::recipients::DynamoRecipients>,
    channels: &[String],
    progress: bool,
) -> Result<Checked, ImportError> {
    let total = std::fs::metadata(&rows.path).map_or(0, |m| m.len());
    let mut bar = punctual_core::progress::Progress::new(total);
    let mut out = Checked::default();
    // Row key → its first line; recipient → (its first line, its address).
    let mut keys: HashMap<u128, usize> = HashMap::new();
    let mut refs: HashMap<u128, (usize, u128)> = HashMap::new();
    let mut book: Vec<punctual_aws::recipients::Entry> = Vec::new();
    let mut written = 0usize;
    let mut rows = rows;
    while let Some(next) = rows.next() {
        let (line, row) = next?;
        out.rows += 1;
        let reject = |reason: String| Reject { line, reason };
        let row = match row {
            Ok(r) => r,
            Err(reason) => {
                out.rejected.push(reject(reason));
                continue;
            }
        };
        if !row.email.trim().is_empty() && recipients.is_none() {
            return Err(ImportError::NoRecipientsTable);
        }
        let (r, address) = match check_row(&row, channels) {
            Ok(CheckedRow { renewal, address }) => (renewal, address),
            Err(e) => {
                out.rejected.push(reject(e.to_string()));
                continue;
            }
        };
        let key = digest(&[r.tenant_id.as_str(), r.renewal_id.as_str()]);
        if let Some(first) = keys.get(&key) {
            out.rejected.push(reject(format!("duplicate of line {first} (same tenant_id and renewal_id)")));
            continue;
        }
        if let (Some(a), Some(_)) = (address, recipients) {
            let whose = digest(&[r.tenant_id.as_str(), r.recipient_ref.as_str()]);
            let this = digest(&[a.expose()]);
            match refs.get(&whose) {
                Some((first, prior)) if *prior != this => {
                    out.rejected.push(reject(format!(
                        "recipient_ref {:?} of tenant {:?} has another email on line {first}",
                        r.recipient_ref,
                        r.tenant_id.as_str()
                    )));
                    continue;
                }
                Some(_) => {}
                None => {
                    refs.insert(whose, (line, this));
                    book.push((r.tenant_id.clone(), r.recipient_ref.clone(), a));
                }
            }
        }
        keys.insert(key, line);
        out.valid += 1;
        if book.len() >= CHUNK {
            written += put_addresses(recipients, &mut book, written).await?;
        }
        if progress {
            let done = rows.bytes_read();
            bar.update(done, || format!("checking {} rows ({} MB)", out.rows, done / 1_000_000));
        }
    }
    put_addresses(recipients, &mut book, written).await?;
    bar.finish();
    Ok(out)
}

/// Writes (and empties) `book`; `before` addresses were written by earlier batches.
async fn put_addresses(
    recipients: Option<&punctual_aws::recipients::DynamoRecipients>,
    book: &mut Vec<punctual_aws::recipients::Entry>,
    before: usize,
) -> Result<usize, ImportError> {
    let (Some(r), false) = (recipients, book.is_empty()) else { return Ok(0) };
    let n = book.len();
    r.put_all(book, Utc::now().timestamp_millis()).await.map_err(|e| {
        let written = if before > 0 { format!(" ({before} written before)") } else { String::new() };
        ImportError::Recipients(format!("{n} addresses{written}"), e)
    })?;
    book.clear();
    Ok(n)
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
    /// The deployment's declared channels (`CHANNELS`, or the local pipeline's): a row whose
    /// channel is not one is rejected, naming it. Empty: none declared, any channel accepted
    /// (one provider sends every renewal).
    pub channels: Vec<String>,
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
            let channels = punctual_lambda::config::channel_names(&punctual_lambda::config::process_env())
                .map_err(|e| ImportError::Channels(e.to_string()))?;
            return Ok(Self {
                renewals: DynamoRenewals::new(ddb, table.clone()),
                recipients,
                describe: table,
                channels,
            });
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
            channels: r.channels.iter().map(|c| c.name.clone()).collect(),
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
    run_with(&target.renewals, target.recipients.as_ref(), &target.channels, path, format, progress).await
}

/// Imports `path` into `store` (renewals only; a file with addresses is refused).
pub async fn run(
    store: &DynamoRenewals,
    path: &Path,
    format: Option<Format>,
    progress: bool,
) -> Result<ImportSummary, ImportError> {
    run_with(store, None, &[], path, format, progress).await
}

/// The rows of one chunk: each with its line and whether it carries an address.
#[derive(Default)]
struct Chunk {
    renewals: Vec<Renewal>,
    lines: Vec<(usize, bool)>,
}

impl Chunk {
    /// Writes the chunk and adds its outcomes to `summary` (a conflict to `rejected`).
    async fn write(
        &mut self,
        store: &DynamoRenewals,
        summary: &mut ImportSummary,
        rejected: &mut Vec<Reject>,
    ) -> Result<(), RenewalsError> {
        let outcomes = store.import(&self.renewals, Utc::now()).await?;
        for ((line, addressed), outcome) in self.lines.iter().zip(outcomes) {
            match outcome {
                RowOutcome::Inserted => summary.inserted += 1,
                RowOutcome::Updated => summary.updated += 1,
                RowOutcome::Rescheduled => summary.rescheduled += 1,
                RowOutcome::Reactivated => summary.reactivated += 1,
                RowOutcome::Unchanged => summary.unchanged += 1,
                RowOutcome::Stale { .. } => {
                    summary.stale += 1;
                    continue;
                }
                RowOutcome::Conflict(reason) => {
                    rejected.push(Reject { line: *line, reason });
                    continue;
                }
            }
            if *addressed {
                summary.recipients += 1;
            }
        }
        self.renewals.clear();
        self.lines.clear();
        Ok(())
    }
}

async fn run_with(
    store: &DynamoRenewals,
    recipients: Option<&punctual_aws::recipients::DynamoRecipients>,
    channels: &[String],
    path: &Path,
    format: Option<Format>,
    progress: bool,
) -> Result<ImportSummary, ImportError> {
    let first = Rows::open(path, format)?;
    let ignored = first.ignored.clone();
    let checked = check(first, recipients, channels, progress).await?;
    let mut summary = ImportSummary { rows: checked.rows, ignored_columns: ignored, ..ImportSummary::default() };
    let skip: HashSet<usize> = checked.rejected.iter().map(|r| r.line).collect();
    let mut rejected = checked.rejected;
    let mut bar = punctual_core::progress::Progress::new(checked.valid as u64);
    let started = std::time::Instant::now();
    // Valid rows written so far, and the last line read.
    let (mut done, mut last) = (0usize, 0usize);
    let mut chunk = Chunk::default();
    let mut rows = Rows::open(path, format)?;
    loop {
        let end = match rows.next() {
            None => true,
            Some(Err(e)) => {
                let line = chunk.lines.first().map_or(last + 1, |(l, _)| *l);
                let left = checked.valid - done;
                return Err(stopped(summary, rejected, line, left, "reading the file failed", e));
            }
            Some(Ok((line, row))) => {
                last = line;
                if skip.contains(&line) {
                    continue;
                }
                // The first pass checked it; a line that fails now changed between the passes.
                let r = row.and_then(|r| {
                    let checked = check_row(&r, channels).map_err(|e| e.to_string())?;
                    Ok((checked.renewal, checked.address.is_some()))
                });
                match r {
                    Ok((r, addressed)) => {
                        chunk.renewals.push(r);
                        chunk.lines.push((line, addressed));
                    }
                    Err(why) => {
                        rejected.push(Reject { line, reason: format!("{why} (the file changed during the import)") })
                    }
                }
                false
            }
        };
        if chunk.renewals.len() >= CHUNK || (end && !chunk.renewals.is_empty()) {
            let (line, n) = (chunk.lines.first().map_or(last, |(l, _)| *l), chunk.renewals.len());
            if let Err(e) = chunk.write(store, &mut summary, &mut rejected).await {
                let left = checked.valid - done;
                return Err(stopped(summary, rejected, line, left, "writing to the renewals table failed", e));
            }
            done += n;
            if progress {
                let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-3);
                bar.update(done as u64, || format!("importing {done}/{} rows  {rate:.0} rows/s", checked.valid));
            }
        }
        if end {
            break;
        }
    }
    bar.finish();
    rejected.sort_by_key(|r| r.line);
    summary.rejected = rejected;
    Ok(summary)
}

/// The error of an import that stopped at `line` (`what` failed) with `rows_left` valid rows
/// not accounted for, keeping what it did before.
fn stopped(
    mut summary: ImportSummary,
    mut rejected: Vec<Reject>,
    line: usize,
    rows_left: usize,
    what: &str,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> ImportError {
    rejected.sort_by_key(|r| r.line);
    summary.rejected = rejected;
    summary.stopped = Some(Stopped { line, rows_left, what: what.to_owned() });
    ImportError::Stopped { summary: Box::new(summary), source: source.into() }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests state their preconditions by unwrapping
    use super::*;

    fn file(name: &str, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("punctual-import-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn lines(path: &Path) -> Vec<(usize, bool)> {
        Rows::open(path, None).unwrap().map(|r| r.map(|(line, row)| (line, row.is_ok())).unwrap()).collect()
    }

    #[test]
    fn rows_are_named_by_their_line_in_the_file() {
        let csv = file(
            "lines.csv",
            "tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,window_minutes\n\
             a,r1,c1,email,UTC,2030-01-01,60\n\
             \n\
             a,r2,\"c2\nstill c2\",email,UTC,2030-01-01,60\n\
             a,r3\n\
             \r\n\
             a,r4,c4,email,UTC,2030-01-01,60\n",
        );
        assert_eq!(lines(&csv), [(2, true), (4, true), (6, false), (8, true)]);
        let jsonl = file("lines.jsonl", "{\"tenant_id\":\"a\"}\n\n  \r\n{not json\n{}");
        let got: Vec<usize> = lines(&jsonl).into_iter().map(|(l, _)| l).collect();
        assert_eq!(got, [1, 4, 5], "blank lines count, and are not rows");
    }

    #[test]
    fn a_line_that_is_not_utf8_is_a_rejected_line_not_a_failed_import() {
        let path = file("bytes.jsonl", "");
        std::fs::write(&path, b"{\"a\":1}\n\xff\xfe\n{\"b\":2}\n").unwrap();
        let rows: Vec<ParsedLine> = Rows::open(&path, None).unwrap().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[1].0, rows[1].1.clone().unwrap_err()), (2, "not valid UTF-8".to_owned()));
    }

    #[test]
    fn a_digest_tells_apart_what_concatenation_would_not() {
        assert_ne!(digest(&["acme", "eu42"]), digest(&["acme:eu", "42"]));
        assert_ne!(digest(&["ab", "c"]), digest(&["a", "bc"]));
        assert_eq!(digest(&["acme", "r1"]), digest(&["acme", "r1"]));
    }
}
