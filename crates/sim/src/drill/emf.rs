//! CloudWatch Logs' side of Embedded Metric Format: a function's log line in, metric data
//! points out, as the EMF specification describes the extraction (each dimension set of each
//! directive makes one metric per declared name; the values are the document's field of that
//! name, a number or an array of numbers; the dimension values are the document's fields).
//! A line that is not an EMF document is ignored, as CloudWatch Logs keeps it as a log event
//! only.

use punctual_alarms::{MetricId, MetricStore};
use serde_json::Value;

/// Extracts `line`'s metrics into `store`.
pub fn extract(line: &str, store: &mut MetricStore) {
    let Ok(doc) = serde_json::from_str::<Value>(line) else { return };
    let Some(aws) = doc.get("_aws") else { return };
    let at = aws.get("Timestamp").and_then(Value::as_i64).unwrap_or_default() / 1000;
    for directive in aws.get("CloudWatchMetrics").and_then(Value::as_array).into_iter().flatten() {
        let namespace = directive.get("Namespace").and_then(Value::as_str).unwrap_or_default();
        let names: Vec<&str> = directive
            .get("Metrics")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("Name").and_then(Value::as_str))
            .collect();
        for set in directive.get("Dimensions").and_then(Value::as_array).into_iter().flatten() {
            let dims: Vec<(&str, &str)> = set
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter_map(|d| Some((d, doc.get(d)?.as_str()?)))
                .collect();
            for name in &names {
                let values: Vec<f64> = match doc.get(*name) {
                    Some(Value::Array(a)) => a.iter().filter_map(Value::as_f64).collect(),
                    Some(v) => v.as_f64().into_iter().collect(),
                    None => Vec::new(),
                };
                if !values.is_empty() {
                    store.put_many(&MetricId::new(namespace, name, &dims), at, &values);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use punctual_core::metrics::{Metrics, name};

    #[test]
    fn the_functions_documents_become_the_metrics_their_directives_declare() {
        let mut m = Metrics::new();
        m.count(name::DELIVERED, 3.0);
        m.count_reason(name::DEFERRED, "rate_limited", 2.0);
        m.observe(name::DELIVERY_LAG, 100.0);
        m.observe(name::DELIVERY_LAG, 300.0);
        m.slo("acme", name::SLO_MET, 1.0);
        let mut store = MetricStore::new();
        for line in m.lines("punctual/drill", "sender", 120_500) {
            extract(&line, &mut store);
        }
        let sum = |n: &str, dims: &[(&str, &str)]| {
            store.statistic(&MetricId::new("punctual/drill", n, dims), punctual_alarms::Stat::Sum, 60, 180)
        };
        assert_eq!(sum(name::DELIVERED, &[("Function", "sender")]), Some(3.0));
        assert_eq!(sum(name::DEFERRED, &[("Function", "sender"), ("Reason", "rate_limited")]), Some(2.0));
        assert_eq!(sum(name::DELIVERY_LAG, &[("Function", "sender")]), Some(400.0));
        assert_eq!(
            sum(name::SLO_MET, &[("Function", "sender")]),
            Some(1.0),
            "the tenant is a property, not a dimension"
        );
        assert_eq!(
            sum(name::DEFERRED, &[("Function", "sender")]),
            None,
            "a reasoned count has only its own dimension set"
        );
    }
}
