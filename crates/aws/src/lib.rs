//! `punctual-aws`: the DynamoDB and SQS adapters of punctual, over the AWS SDK for Rust.
//!
//! Endpoints come only from the SDK's own configuration chain (`AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_SQS`, `AWS_ENDPOINT_URL_DYNAMODB`, profiles): there is no "local mode"
//! branch, so the code that runs against moto or LocalStack is the code that runs on AWS.

pub mod config;
pub mod control;
pub mod counting;
pub mod dynamodb;
pub mod emf;
pub mod ledger;
pub mod limiter;
pub mod outcomes;
pub mod recipients;
pub mod renewals;
pub mod secrets;
pub mod sqs;
