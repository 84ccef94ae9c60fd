//! What an AWS API emulator's SES counted (moto: SES v1 `GetSendQuota`, which moto answers from
//! the same backend its v2 `SendEmail` counts into). For the local pipeline and the tests: on
//! AWS, CloudWatch's `Send` metric is the count.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// SES's count of emails sent in the last 24 hours in `region`, as the emulator at `endpoint` keeps it
/// (SES v1 `GetSendQuota`; moto reads the service from the credential scope and does not check
/// the signature). `None` when it does not answer.
pub async fn sent_last_24_hours(endpoint: &str, region: &str) -> Option<u64> {
    let addr = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let body = "Action=GetSendQuota&Version=2010-12-01";
    let request = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/x-www-form-urlencoded\r\n\
         authorization: AWS4-HMAC-SHA256 Credential=testing/20261201/{region}/ses/aws4_request, SignedHeaders=host, Signature=0\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    let value = text.split("<SentLast24Hours>").nth(1)?.split('<').next()?;
    value.trim().parse::<f64>().ok().map(|v| v as u64)
}
