//! `punctual-provider-double [--port N] [--quota R] [--burst B] [--token T] [--latency-ms L]
//! [--rate-headers retry-after|ietf|ietf-split|x-delta|x-epoch] [--no-keys]`
//!
//! Runs the provider double on 127.0.0.1 until interrupted; prints its URL first.

use std::time::Duration;

use punctual_provider_double::{Config, Double, RateHeaders};

fn usage(problem: &str) -> ! {
    eprintln!("punctual-provider-double: {problem}");
    eprintln!(
        "usage: punctual-provider-double [--port N] [--quota CALLS_PER_S] [--burst N] [--token T] [--latency-ms MS] \
         [--rate-headers retry-after|ietf|ietf-split|x-delta|x-epoch] [--no-keys]"
    );
    std::process::exit(2)
}

fn parse<T: std::str::FromStr>(flag: &str, v: Option<String>) -> T {
    let Some(v) = v else { usage(&format!("{flag} needs a value")) };
    v.parse().unwrap_or_else(|_| usage(&format!("{flag}: cannot parse {v:?}")))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut config = Config::default();
    let mut port = 0u16;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--port" => port = parse(&flag, args.next()),
            "--quota" => config.quota = parse(&flag, args.next()),
            "--burst" => config.burst = parse(&flag, args.next()),
            "--token" => config.token = Some(parse(&flag, args.next())),
            "--latency-ms" => config.latency = Duration::from_millis(parse(&flag, args.next())),
            "--rate-headers" => {
                let v: String = parse(&flag, args.next());
                config.rate_headers =
                    RateHeaders::parse(&v).unwrap_or_else(|| usage(&format!("--rate-headers: {v:?}")));
            }
            "--no-keys" => config.keys = false,
            "-h" | "--help" => usage("help"),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    if config.quota <= 0.0 || config.burst < 1.0 {
        usage("--quota must be > 0 and --burst >= 1");
    }
    let double = Double::start(config, port).await.unwrap_or_else(|e| usage(&format!("cannot listen: {e}")));
    println!("{}", double.url());
    let _ = tokio::signal::ctrl_c().await;
    println!("{}", serde_json::to_string(&double.stats()).unwrap_or_default());
}
