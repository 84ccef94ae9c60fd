//! `punctual import` against the emulator: mixed valid and invalid files, both formats,
//! idempotent re-import, through the library and through the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests state their preconditions by unwrapping

use std::path::PathBuf;

use punctual_aws::renewals::{DynamoRenewals, create_table};
use punctual_ops::import::{self, Reject};
use punctual_tests::{sdk_config, unique};

/// Writes a fixture file. `@DUE@` and `@DUE1@` stand for the dates 30 and 31 days after today:
/// an import refuses an active row whose window is already over, so fixed dates would turn
/// these tests red on the day after them.
fn write(name: &str, text: &str) -> PathBuf {
    let day = |n| (chrono::Utc::now() + chrono::TimeDelta::days(n)).format("%Y-%m-%d").to_string();
    let text = text.replace("@DUE1@", &day(31)).replace("@DUE@", &day(30));
    let dir = std::env::temp_dir().join(unique("punctual-import"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

async fn table() -> (String, DynamoRenewals) {
    let ddb = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let name = unique("punctual-renewals");
    create_table(&ddb, &name).await.unwrap();
    (name.clone(), DynamoRenewals::new(ddb, name))
}

const CSV: &str = "\
tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,local_send_time,window_minutes,status
acme,ren-1,cust-1,email,America/New_York,@DUE@,09:00,480,
acme,ren-2,cust-2,email,Mars/Olympus,@DUE@,09:00,480,
acme,ren-3,cust-3,sms,Europe/London,2026-02-30,09:00,480,
acme,ren-4,cust-4,sms,Asia/Kathmandu,@DUE@,09:00,0,
acme,ren-5,cust-5,email,Australia/Lord_Howe,@DUE@,9am,480,
acme,ren-6,cust-6,email,Europe/London,@DUE@,09:00,480,archived
acme,ren-7,cust-7,email,Europe/London,@DUE@,09:00,480,
acme,ren-1,cust-1,email,America/New_York,@DUE@,09:00,480,
acme corp,ren-9,cust-9,email,Europe/London,@DUE@,09:00,480,
acme,ren-10,cust-10,email,America/New_York,2026-03-08,02:30,60,cancelled
acme,ren-11,cust-11,email
";

#[tokio::test]
async fn a_mixed_csv_imports_every_valid_row_and_reports_each_invalid_line() {
    let (_, store) = table().await;
    let path = write("renewals.csv", CSV);
    let s = import::run(&store, &path, None, false).await.unwrap();
    assert_eq!((s.rows, s.inserted, s.updated, s.unchanged), (11, 3, 0, 0));
    let want = [
        (3, "unknown time zone \"Mars/Olympus\""),
        (4, "local_due_date \"2026-02-30\" is not a date"),
        (5, "window_minutes \"0\" must be a whole number of minutes from 1 to 10080"),
        (6, "local_send_time \"9am\" is not a time of day"),
        (7, "status \"archived\" must be active, cancelled or paid"),
        (9, "duplicate of line 2"),
        (10, "tenant_id contains ' ' at position 4"),
        (12, "has 4 fields, the header has 9"),
    ];
    let got: Vec<&Reject> = s.rejected.iter().collect();
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (r, (line, reason)) in got.iter().zip(want) {
        assert_eq!(r.line, line);
        assert!(r.reason.starts_with(reason), "line {line}: {:?} should start with {reason:?}", r.reason);
    }
    // Re-import: nothing new is written.
    let again = import::run(&store, &path, None, false).await.unwrap();
    assert_eq!((again.inserted, again.updated, again.unchanged), (0, 0, 3));
}

#[tokio::test]
async fn json_lines_accept_numbers_and_report_bad_lines() {
    let (_, store) = table().await;
    let text = concat!(
        r#"{"tenant_id":"acme","renewal_id":"j-1","recipient_ref":"c1","channel":"email","zone":"Europe/London","local_due_date":"@DUE@","window_minutes":480}"#,
        "\n",
        "{not json\n",
        "\n",
        r#"{"tenant_id":"acme","renewal_id":"j-2","recipient_ref":"c2","channel":"email","zone":"Europe/London","local_due_date":"@DUE@","window_minutes":[1]}"#,
        "\n",
        r#"["an","array"]"#,
        "\n",
        r#"{"tenant_id":"acme","renewal_id":"j-3","recipient_ref":"c3","channel":"sms","zone":"Asia/Kathmandu","local_due_date":"@DUE1@","local_send_time":"08:30","window_minutes":"120"}"#,
        "\n",
    );
    let path = write("renewals.jsonl", text);
    let s = import::run(&store, &path, None, false).await.unwrap();
    assert_eq!((s.rows, s.inserted), (5, 2));
    let lines: Vec<_> = s.rejected.iter().map(|r| (r.line, r.reason.as_str())).collect();
    assert_eq!(lines[0].0, 2);
    assert!(lines[0].1.starts_with("not valid JSON"));
    assert_eq!(lines[1], (4, "window_minutes must be a string or a number"));
    assert_eq!(lines[2], (5, "not a JSON object"));
}

#[tokio::test]
async fn the_binary_prints_a_json_summary_and_exits_3_when_rows_were_rejected() {
    let (name, _) = table().await;
    let path = write("renewals.csv", CSV);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["import", path.to_str().unwrap(), "--table", &name, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["inserted"], 3);
    assert_eq!(summary["rejected"].as_array().unwrap().len(), 8);

    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["import", "/nonexistent/renewals.csv", "--table", &name])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot read /nonexistent/renewals.csv"));

    // A table that fails from the first chunk on: the summary still comes first (nothing
    // written, the line it stopped at), then the error, exit 1.
    let gone = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["import", path.to_str().unwrap(), "--table", "punctual-no-such-table", "--json"])
        .output()
        .unwrap();
    assert_eq!(gone.status.code(), Some(1), "stderr: {}", String::from_utf8_lossy(&gone.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&gone.stdout).unwrap();
    assert_eq!((summary["inserted"].as_u64(), summary["stopped"]["line"].as_u64()), (Some(0), Some(2)), "{summary}");
    assert!(String::from_utf8_lossy(&gone.stderr).contains("the import stopped at line 2"), "{gone:?}");

    let header = write("bad.csv", "tenant_id,renewal_id\nacme,r1\n");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["import", header.to_str().unwrap(), "--table", &name])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("missing required columns: recipient_ref, channel, zone"));
}

/// The optional `email` column goes to the recipients table, never to the renewals table; a bad
/// address or a second address for one recipient rejects its line; a file with addresses and
/// no recipients table is refused whole, with nothing written.
#[tokio::test]
async fn emails_go_to_the_recipients_table_only() {
    use punctual_core::ports::Recipients;
    let (name, store) = table().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let recipients = unique("punctual-recipients");
    punctual_aws::recipients::create_table(&ddb, &recipients).await.unwrap();
    let path = write(
        "with-emails.csv",
        "tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,window_minutes,email\n\
         acme,ren-1,cust-1,email,Europe/London,@DUE@,480,ana@example.com\n\
         acme,ren-2,cust-2,email,Europe/London,@DUE@,480,not-an-address\n\
         acme,ren-3,cust-1,email,Europe/London,@DUE@,480,someone.else@example.com\n\
         acme,ren-4,cust-4,email,Europe/London,@DUE@,480,\n\
         acme,ren-5,cust-1,email,Europe/London,@DUE@,480,ana@example.com\n\
         acme,ren-6,bob@example.com,email,Europe/London,@DUE@,480,\n",
    );
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["import", path.to_str().unwrap(), "--table", &name])
        .env_remove("RECIPIENTS_TABLE")
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no recipients table"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["import", path.to_str().unwrap(), "--table", &name, "--recipients-table", &recipients, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // A customer with two renewals and one address (lines 2 and 6) is one recipient.
    assert_eq!((summary["inserted"].as_u64(), summary["recipients"].as_u64()), (Some(3), Some(2)), "{summary}");
    let lines: Vec<u64> = summary["rejected"].as_array().unwrap().iter().map(|r| r["line"].as_u64().unwrap()).collect();
    // Line 7 uses an address as its recipient_ref.
    assert_eq!(lines, vec![3, 4, 7], "{summary}");
    assert!(!summary.to_string().contains("not-an-address"), "a rejected value that may be an address is not echoed");
    assert!(!summary.to_string().contains("bob@"), "{summary}");
    // A misspelled column is named, not silently ignored.
    let typo = write(
        "typo.csv",
        "tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,window_minutes,Email\n\
         acme,ren-9,cust-9,email,Europe/London,@DUE@,480,zoe@example.com\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
        .args(["import", typo.to_str().unwrap(), "--table", &name, "--recipients-table", &recipients, "--json"])
        .output()
        .unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["ignored_columns"], serde_json::json!(["Email"]), "{summary}");
    let book = punctual_aws::recipients::DynamoRecipients::new(ddb.clone(), &recipients);
    let acme = punctual_core::TenantId::parse("acme").unwrap();
    assert_eq!(book.address(&acme, "cust-1").await.unwrap().unwrap().expose(), "ana@example.com");
    assert_eq!(book.address(&acme, "cust-4").await.unwrap(), None);
    // The renewals table holds the reference, never the address.
    let item = ddb
        .get_item()
        .table_name(&name)
        .key("pk", aws_sdk_dynamodb::types::AttributeValue::S("renewal:acme:ren-1".into()))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert!(!format!("{item:?}").contains("ana@example.com"), "{item:?}");
    drop(store);
}

/// Two tenants may use the same `recipient_ref` for two different customers: each tenant's
/// import keeps its own address, and neither replaces the other's (a reminder must never go to
/// another tenant's customer).
#[tokio::test]
async fn two_tenants_with_one_recipient_ref_keep_their_own_addresses() {
    let (name, store) = table().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let recipients = unique("punctual-recipients");
    punctual_aws::recipients::create_table(&ddb, &recipients).await.unwrap();
    let header = "tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,window_minutes,email\n";
    let a =
        write("tenant-a.csv", &format!("{header}acme,ren-1,cust-1,email,Europe/London,@DUE@,480,ana@acme.example\n"));
    let b = write(
        "tenant-b.csv",
        &format!("{header}globex,ren-1,cust-1,email,Europe/London,@DUE@,480,bo@globex.example\n"),
    );
    for path in [&a, &b] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
            .args(["import", path.to_str().unwrap(), "--table", &name, "--recipients-table", &recipients, "--json"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    }
    // Read the table raw: every address each import wrote must still be there.
    let items = ddb.scan().table_name(&recipients).send().await.unwrap().items.unwrap_or_default();
    let held: Vec<String> = items.iter().filter_map(|i| i.get("email")?.as_s().ok().cloned()).collect();
    assert!(held.contains(&"ana@acme.example".to_owned()), "tenant acme's address was replaced: {held:?}");
    assert!(held.contains(&"bo@globex.example".to_owned()), "{held:?}");
    // And each tenant's lookup answers with its own customer.
    use punctual_core::ports::Recipients;
    let book = punctual_aws::recipients::DynamoRecipients::new(ddb.clone(), &recipients);
    for (tenant, want) in [("acme", "ana@acme.example"), ("globex", "bo@globex.example")] {
        let tenant = punctual_core::TenantId::parse(tenant).unwrap();
        assert_eq!(book.address(&tenant, "cust-1").await.unwrap().unwrap().expose(), want);
    }
    let initech = punctual_core::TenantId::parse("initech").unwrap();
    assert_eq!(book.address(&initech, "cust-1").await.unwrap(), None, "no tenant reads another's address");
    drop(store);
}

/// A rejected line is named by its line in the file, as an editor shows it: blank lines and a
/// quoted field spanning two lines move every later row down.
#[tokio::test]
async fn csv_line_numbers_are_the_files_own_lines() {
    let (_, store) = table().await;
    let path = write(
        "lines.csv",
        "tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,window_minutes\n\
         acme,ren-1,cust-1,email,Europe/London,@DUE@,480\n\
         \n\
         acme,ren-2,\"cust-2\nsecond line\",email,Europe/London,@DUE@,480\n\
         \n\
         acme,ren-3,cust-3,email,Mars/Olympus,@DUE@,480\n\
         acme,ren-2,cust-2,email,Europe/London,@DUE@,480\n",
    );
    let s = import::run(&store, &path, None, false).await.unwrap();
    let got: Vec<(usize, &str)> = s.rejected.iter().map(|r| (r.line, r.reason.as_str())).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0, 7, "the bad zone is on line 7 of the file: {got:?}");
    assert!(got[0].1.starts_with("unknown time zone"), "{got:?}");
    assert_eq!(got[1], (8, "duplicate of line 4 (same tenant_id and renewal_id)"), "{got:?}");
}

/// The renewals table fails in the second chunk of 500 rows: the import stops, and what it
/// says keeps the summary of the chunk already written and the line it stopped at.
#[tokio::test]
async fn a_store_error_mid_import_keeps_the_summary_of_what_was_written() {
    let (name, _) = table().await;
    let mut text = "tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,window_minutes\n".to_owned();
    for i in 0..1200 {
        text.push_str(&format!("acme,ren-{i:04},cust-{i},email,Europe/London,@DUE@,480\n"));
    }
    let path = write("big.csv", &text);
    let config = sdk_config().await;
    // Every PutItem after the 700th fails: the second chunk of 500 rows breaks.
    let failing = punctual_tests::Operations::refusing(|op, n| op == "PutItem" && n >= 700);
    let client = failing.client(aws_sdk_dynamodb::config::Builder::from(&config));
    let store = DynamoRenewals::new(client, name.clone());
    let err = import::run(&store, &path, None, false).await.unwrap_err();
    let said = err.to_string();
    assert!(said.contains("stopped at line 502"), "{said}");
    assert!(said.contains("500 inserted"), "{said}");
    let import::ImportError::Stopped { summary, .. } = err else { panic!("{said}") };
    let stopped = summary.stopped.clone().unwrap();
    assert_eq!((summary.rows, summary.inserted, summary.rejected.len()), (1200, 500, 0), "{summary:?}");
    assert_eq!((stopped.line, stopped.rows_left), (502, 700), "{stopped:?}");
    assert!(summary.render().contains("STOPPED at line 502"), "{}", summary.render());
    // Imported again on a table that answers, the file finishes: the first chunk is unchanged.
    let healthy = DynamoRenewals::new(aws_sdk_dynamodb::Client::new(&config), name);
    let again = import::run(&healthy, &path, None, false).await.unwrap();
    assert_eq!(again.unchanged + again.inserted, 1200, "{again:?}");
    assert!(again.unchanged >= 500, "{again:?}");
}

/// A deployment that declares its channels (`CHANNELS`) refuses a row on any other, naming
/// the channel and the declared ones: the row and its address are not written (no sender
/// could deliver it; it would be dead-lettered `unknown_channel` on its day).
#[tokio::test]
async fn a_row_on_an_undeclared_channel_is_rejected_by_name_and_nothing_of_it_written() {
    use punctual_core::ports::Recipients;
    let (name, store) = table().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let recipients = unique("punctual-recipients");
    punctual_aws::recipients::create_table(&ddb, &recipients).await.unwrap();
    let path = write(
        "channels.csv",
        "tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,window_minutes,email\n\
         acme,ren-1,cust-1,email,Europe/London,@DUE@,480,ana@example.com\n\
         acme,ren-2,cust-2,sms,Europe/London,@DUE@,480,\n\
         acme,ren-3,cust-3,push,Europe/London,@DUE@,480,carl@example.com\n",
    );
    let import = |channels: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_punctual"))
            .args(["import", path.to_str().unwrap(), "--table", &name, "--recipients-table", &recipients, "--json"])
            .env("CHANNELS", channels)
            .output()
            .unwrap()
    };
    let out = import("email, sms");
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["inserted"].as_u64(), Some(2), "{summary}");
    assert_eq!(
        summary["rejected"],
        serde_json::json!([{"line": 4, "reason": "channel \"push\" is not declared by this deployment (declared: email, sms)"}]),
        "{summary}"
    );
    let acme = punctual_core::TenantId::parse("acme").unwrap();
    let book = punctual_aws::recipients::DynamoRecipients::new(ddb.clone(), &recipients);
    assert_eq!(book.address(&acme, "cust-3").await.unwrap(), None, "a refused row's address is not written");
    let row = |id: &str| {
        let (ddb, name) = (ddb.clone(), name.clone());
        let key = format!("renewal:acme:{id}");
        async move {
            ddb.get_item()
                .table_name(name)
                .key("pk", aws_sdk_dynamodb::types::AttributeValue::S(key))
                .send()
                .await
                .unwrap()
                .item
        }
    };
    assert!(row("ren-3").await.is_none(), "a refused row is not written");
    assert!(row("ren-2").await.is_some());
    // Declared, the same row imports.
    let out = import("email,sms,push");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((summary["inserted"].as_u64(), summary["unchanged"].as_u64()), (Some(1), Some(2)), "{summary}");
    drop(store);
}
