"""Invariants of infra/template.yaml that cfn-lint cannot know (the design's, not the schema's).

Run by `make test` after cfn-lint. Prints one line per invariant and `N passed, N failed`;
exits 1 when any fails.
"""
import json
import sys

from cfnlint.decode import decode

path = sys.argv[1] if len(sys.argv) > 1 else "infra/template.yaml"
template, matches = decode(path)
if matches:
    for m in matches:
        print(f"cannot read {path}: {m}")
    sys.exit(1)
res = template["Resources"]


def of_type(t):
    return {k: v for k, v in res.items() if v.get("Type") == t}


def ref_name(v):
    if isinstance(v, dict):
        if "Ref" in v:
            return v["Ref"]
        if "Fn::GetAtt" in v:
            ga = v["Fn::GetAtt"]
            return ga[0] if isinstance(ga, list) else ga.split(".")[0]
    return None


checks = []


def check(name, ok, detail=""):
    checks.append((name, bool(ok), detail))


functions = of_type("AWS::Serverless::Function")
sender = functions.get("SenderFunction", {}).get("Properties", {})
sqs_events = [e["Properties"] for e in sender.get("Events", {}).values() if e.get("Type") == "SQS"]
check("sender has an SQS event source", len(sqs_events) == 1)
for e in sqs_events:
    check("ReportBatchItemFailures is on", "ReportBatchItemFailures" in e.get("FunctionResponseTypes", []))
    check("MaximumConcurrency is set", "MaximumConcurrency" in e.get("ScalingConfig", {}))

queues = of_type("AWS::SQS::Queue")
send = queues.get("SendQueue", {}).get("Properties", {})
dlq = queues.get("DeadLetterQueue", {}).get("Properties", {})
timeout = sender.get("Timeout", 3)
check(
    "send-queue visibility >= 6 x sender timeout",
    int(send.get("VisibilityTimeout", 30)) >= 6 * int(timeout),
    f"{send.get('VisibilityTimeout')} vs 6 x {timeout}",
)
check(
    "DLQ retention > send-queue retention",
    int(dlq.get("MessageRetentionPeriod", 345600)) > int(send.get("MessageRetentionPeriod", 345600)),
)
redrive = send.get("RedrivePolicy", {})
check("send queue redrives to the DLQ", ref_name(redrive.get("deadLetterTargetArn")) == "DeadLetterQueue")
check("maxReceiveCount is a backstop (>= 3)", int(redrive.get("maxReceiveCount", 0)) >= 3)
check("DLQ has a redrive allow policy", "RedriveAllowPolicy" in dlq)

star_actions = []
for name, f in functions.items():
    for policy in f.get("Properties", {}).get("Policies", []):
        if not isinstance(policy, dict):
            continue
        for st in policy.get("Statement", []):
            actions = st.get("Action", [])
            actions = [actions] if isinstance(actions, str) else actions
            star_actions += [f"{name}: {a}" for a in actions if "*" in a]
check("no IAM action contains *", not star_actions, ", ".join(star_actions))
check("no function gets the provider token in plain text", all(
    "PROVIDER_TOKEN" not in f.get("Properties", {}).get("Environment", {}).get("Variables", {}) for f in functions.values()
))

alarms = of_type("AWS::CloudWatch::Alarm")
metrics = set()
for a in alarms.values():
    p = a["Properties"]
    if "MetricName" in p:
        metrics.add(p["MetricName"])
    for m in p.get("Metrics", []):
        if "MetricStat" in m:
            metrics.add(m["MetricStat"]["Metric"]["MetricName"])
for wanted in [
    "ApproximateAgeOfOldestMessage",
    "ApproximateNumberOfMessagesVisible",
    "ProjectedDeadlineBreach",
    "Provider429",
    "OldestDueUndeliveredSeconds",
]:
    check(f"an alarm watches {wanted}", wanted in metrics)
check("every alarm notifies the topic", all(ref_name(a["Properties"]["AlarmActions"][0]) == "AlarmTopicArn" for a in alarms.values()))

tables = of_type("AWS::DynamoDB::Table")
check("tables are on demand", all(t["Properties"].get("BillingMode") == "PAY_PER_REQUEST" for t in tables.values()))
check("tables have point-in-time recovery", all(
    t["Properties"].get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled") for t in tables.values()
))
check("the ledger has a TTL for cleanup", "TimeToLiveSpecification" in tables.get("LedgerTable", {}).get("Properties", {}))
gsis = tables.get("RenewalsTable", {}).get("Properties", {}).get("GlobalSecondaryIndexes", [])
check("renewals has the sparse due index", any(g["IndexName"] == "due" for g in gsis))
check("functions build with cargo-lambda", all(
    f.get("Metadata", {}).get("BuildMethod") == "rust-cargolambda" for f in functions.values()
))

binaries = {f.get("Metadata", {}).get("BuildProperties", {}).get("Binary"): f for f in functions.values()}
check("three functions: sender, scheduler, redrive", set(binaries) == {"sender", "scheduler", "redrive"}, str(sorted(map(str, binaries))))
check("the redrive function has no trigger", not binaries.get("redrive", {}).get("Properties", {}).get("Events"))
# The variables each binary's config requires (crates/*/src/config.rs): a missing one would
# fail the cold start.
required = {
    "sender": ["SEND_QUEUE_URL", "DLQ_URL", "LEDGER_TABLE", "RENEWALS_TABLE", "PROVIDER_URL"],
    "scheduler": ["RENEWALS_TABLE", "SEND_QUEUE_URL", "LEDGER_TABLE"],
    "redrive": ["SEND_QUEUE_URL", "DLQ_URL", "LEDGER_TABLE"],
}
for binary, names in required.items():
    env = binaries.get(binary, {}).get("Properties", {}).get("Environment", {}).get("Variables", {})
    missing = [n for n in names if n not in env]
    check(f"{binary} gets every variable its config requires", not missing, ", ".join(missing))
dashboards = of_type("AWS::CloudWatch::Dashboard")
body = json.dumps(next(iter(dashboards.values()), {}).get("Properties", {}).get("DashboardBody", ""))
for title in ["Backlog", "Delivered per second vs quota", "Oldest age", "DLQ by reason"]:
    check(f"the dashboard shows {title}", title in body)

failed = [c for c in checks if not c[1]]
for name, ok, detail in checks:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'  (' + detail + ')' if detail and not ok else ''}")
print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
