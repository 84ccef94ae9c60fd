"""Invariants of infra/template.yaml that cfn-lint cannot know (the design's, not the schema's).

Run by `make test` after cfn-lint. Prints one line per invariant and `N passed, N failed`;
exits 1 when any fails.
"""
import json
import re
import sys

from cfnlint.decode import decode

path = sys.argv[1] if len(sys.argv) > 1 else "infra/template.yaml"
template, matches = decode(path)
if matches:
    for m in matches:
        print(f"cannot read {path}: {m}")
    sys.exit(1)
res = template["Resources"]
parameters = template.get("Parameters", {})


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


def default(v):
    """A literal, or the default of the parameter it refs (None when neither)."""
    name = ref_name(v)
    if name is None:
        return v
    return parameters.get(name, {}).get("Default")


def as_list(v):
    return v if isinstance(v, list) else [v]


checks = []


def check(name, ok, detail=""):
    checks.append((name, bool(ok), detail))


functions = of_type("AWS::Serverless::Function")
sender = functions.get("SenderFunction", {}).get("Properties", {})
queues = of_type("AWS::SQS::Queue")
dlq = queues.get("DeadLetterQueue", {}).get("Properties", {})
# The deadline lanes (issue 14): every queue but the DLQ is one, and the sender polls each.
LANES = {"SendQueue": "normal lane", "UrgentQueue": "urgent lane"}
check("the queues are the two lanes and the DLQ", set(queues) == set(LANES) | {"DeadLetterQueue"}, str(sorted(queues)))

# --- the sender's event source mappings: one per lane -----------------------------------
sqs_events = [e["Properties"] for e in sender.get("Events", {}).values() if e.get("Type") == "SQS"]
polled = [ref_name(e.get("Queue")) for e in sqs_events]
check("the sender polls each lane exactly once", sorted(map(str, polled)) == sorted(LANES), str(polled))
by_lane = {ref_name(e.get("Queue")): e for e in sqs_events}
for lane in LANES:
    e = by_lane.get(lane, {})
    check(f"{lane} mapping: ReportBatchItemFailures is on", "ReportBatchItemFailures" in e.get("FunctionResponseTypes", []))
    mc = e.get("ScalingConfig", {}).get("MaximumConcurrency")
    check(f"{lane} mapping: MaximumConcurrency is set", mc is not None)
    if ref_name(mc) in parameters:
        p = parameters[ref_name(mc)]
        ok = int(p.get("MinValue", 0)) >= 2 and int(p.get("MaxValue", 10**9)) <= 1000
        check(f"{lane} mapping: MaximumConcurrency bounded to SQS's 2..1000", ok, f"{p.get('MinValue')}..{p.get('MaxValue')}")
    elif mc is not None:
        check(f"{lane} mapping: MaximumConcurrency in SQS's 2..1000", 2 <= int(mc) <= 1000, str(mc))
maxima = [e.get("ScalingConfig", {}).get("MaximumConcurrency") for e in by_lane.values()]
check(
    "each lane's mapping has its own MaximumConcurrency (pollers reserved for the urgent lane)",
    len(maxima) == len(LANES) and len({json.dumps(m, sort_keys=True) for m in maxima}) == len(maxima),
    json.dumps(maxima),
)
for prop in ["BatchSize", "MaximumBatchingWindowInSeconds"]:
    values = {json.dumps(e.get(prop), sort_keys=True) for e in by_lane.values()}
    check(f"both lanes' mappings share {prop}", len(values) == 1, ", ".join(sorted(values)))
reserved = sender.get("ReservedConcurrentExecutions")
if reserved is None:
    check("the sender has no reserved concurrency (the lanes' maxima need no fitting)", True)
else:
    total = sum(int(default(m) or 0) for m in maxima)
    check("the sender's reserved concurrency holds both lanes' maxima", total <= int(default(reserved) or 0), f"{total} > {default(reserved)}")

# --- the queues ----------------------------------------------------------------------------
timeout = sender.get("Timeout", 3)
dlq_retention = int(dlq.get("MessageRetentionPeriod", 345600))
allowed_sources = [a.get("Fn::Sub") if isinstance(a, dict) else a for a in dlq.get("RedriveAllowPolicy", {}).get("sourceQueueArns", [])]
check("DLQ has a redrive allow policy", "RedriveAllowPolicy" in dlq)
for lane in LANES:
    q = queues.get(lane, {}).get("Properties", {})
    check(
        f"{lane} visibility >= 6 x sender timeout",
        int(q.get("VisibilityTimeout", 30)) >= 6 * int(timeout),
        f"{q.get('VisibilityTimeout')} vs 6 x {timeout}",
    )
    check(f"DLQ retention > {lane} retention", dlq_retention > int(q.get("MessageRetentionPeriod", 345600)))
    check(f"{lane} is encrypted at rest", q.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in q)
# Every queue but the DLQ is a source of it: no message can be lost to a crash loop.
for name, queue in queues.items():
    if name == "DeadLetterQueue":
        continue
    q = queue.get("Properties", {})
    redrive = q.get("RedrivePolicy", {})
    check(f"{name} redrives to the DLQ", ref_name(redrive.get("deadLetterTargetArn")) == "DeadLetterQueue")
    check(f"{name} maxReceiveCount is a backstop (>= 3)", int(redrive.get("maxReceiveCount", 0)) >= 3)
    # byQueue refuses any source not listed; the list is built from names (a cycle otherwise).
    qname = q.get("QueueName")
    suffix = qname.get("Fn::Sub") if isinstance(qname, dict) else qname
    check(
        f"the DLQ's redrive allow policy lists {name}",
        isinstance(suffix, str) and any(isinstance(a, str) and a.endswith(f":{suffix}") for a in allowed_sources),
        f"QueueName {json.dumps(qname)} not in {allowed_sources}",
    )
send_q = queues.get("SendQueue", {}).get("Properties", {})
urgent_q = queues.get("UrgentQueue", {}).get("Properties", {})
alike = ["VisibilityTimeout", "MessageRetentionPeriod", "SqsManagedSseEnabled"]
differ = [k for k in alike if send_q.get(k) != urgent_q.get(k)]
if send_q.get("RedrivePolicy", {}).get("maxReceiveCount") != urgent_q.get("RedrivePolicy", {}).get("maxReceiveCount"):
    differ.append("maxReceiveCount")
check("the urgent queue is configured like the send queue", not differ, ", ".join(differ))

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


def sqs_grants(f):
    """(action, queue) pairs a function's inline policies allow."""
    out = set()
    for policy in f.get("Properties", {}).get("Policies", []):
        if not isinstance(policy, dict):
            continue
        for st in policy.get("Statement", []):
            if st.get("Effect") != "Allow":
                continue
            for a in as_list(st.get("Action", [])):
                if a.startswith("sqs:"):
                    out |= {(a, ref_name(r)) for r in as_list(st.get("Resource", []))}
    return out


POLL = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"]
# What each function does with each queue (least privilege: exactly these, nothing more).
SQS_NEEDS = {
    "sender": {  # polls both lanes, requeues by lane, quarantines to the DLQ
        "SendQueue": POLL + ["sqs:SendMessage"],
        "UrgentQueue": POLL + ["sqs:SendMessage"],
        "DeadLetterQueue": ["sqs:SendMessage"],
    },
    "scheduler": {  # releases to either lane, reads both depths for the backlog
        "SendQueue": ["sqs:SendMessage", "sqs:GetQueueAttributes"],
        "UrgentQueue": ["sqs:SendMessage", "sqs:GetQueueAttributes"],
    },
    "redrive": {  # reads the DLQ, sends each letter back to its lane
        "DeadLetterQueue": ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"],
        "SendQueue": ["sqs:SendMessage"],
        "UrgentQueue": ["sqs:SendMessage"],
    },
}
for name, f in functions.items():
    binary = f.get("Metadata", {}).get("BuildProperties", {}).get("Binary")
    grants = sqs_grants(f)
    needs = {(a, q) for q, actions in SQS_NEEDS.get(binary, {}).items() for a in actions}
    missing = sorted(f"{a} on {q}" for a, q in needs - grants)
    check(f"{binary}: every SQS permission it needs, per queue", not missing, ", ".join(missing))
    extra = sorted(f"{a} on {q}" for a, q in grants - needs)
    check(f"{binary}: no SQS permission beyond what it needs", not extra, ", ".join(extra))
    # Whatever queue a function is handed as a *_QUEUE_URL, it sends to.
    env = f.get("Properties", {}).get("Environment", {}).get("Variables", {})
    sends = sorted(ref_name(v) for k, v in env.items() if k.endswith("_QUEUE_URL") and ref_name(v) in queues)
    unsendable = [q for q in sends if ("sqs:SendMessage", q) not in grants]
    check(f"{binary} may SendMessage to every queue it is given a URL for", not unsendable, ", ".join(unsendable))
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
age_alarms = {}
for name, a in alarms.items():
    p = a["Properties"]
    if p.get("Namespace") == "AWS/SQS" and p.get("MetricName") == "ApproximateAgeOfOldestMessage":
        for d in p.get("Dimensions", []):
            if d.get("Name") == "QueueName":
                age_alarms[ref_name(d.get("Value"))] = p
for lane in LANES:
    check(f"an age alarm watches {lane}", lane in age_alarms)
if "SendQueue" in age_alarms and "UrgentQueue" in age_alarms:
    u, n = age_alarms["UrgentQueue"], age_alarms["SendQueue"]
    check(
        "the urgent lane's age alarm is tighter than the normal lane's",
        float(u["Threshold"]) < float(n["Threshold"])
        and int(u["Period"]) * int(u["EvaluationPeriods"]) <= int(n["Period"]) * int(n["EvaluationPeriods"]),
        f"urgent {u['Threshold']} s over {u['EvaluationPeriods']}, normal {n['Threshold']} s over {n['EvaluationPeriods']}",
    )
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
    "sender": ["SEND_QUEUE_URL", "URGENT_QUEUE_URL", "DLQ_URL", "LEDGER_TABLE", "RENEWALS_TABLE", "PROVIDER_URL"],
    "scheduler": ["RENEWALS_TABLE", "SEND_QUEUE_URL", "URGENT_QUEUE_URL", "LEDGER_TABLE"],
    "redrive": ["SEND_QUEUE_URL", "URGENT_QUEUE_URL", "DLQ_URL", "LEDGER_TABLE"],
}
# …and each queue variable names the right queue (swapped lanes would still start).
QUEUE_VARS = {"SEND_QUEUE_URL": "SendQueue", "URGENT_QUEUE_URL": "UrgentQueue", "DLQ_URL": "DeadLetterQueue"}
for binary, names in required.items():
    env = binaries.get(binary, {}).get("Properties", {}).get("Environment", {}).get("Variables", {})
    missing = [n for n in names if n not in env]
    check(f"{binary} gets every variable its config requires", not missing, ", ".join(missing))
    wrong = [f"{k}={ref_name(env[k])}" for k, q in QUEUE_VARS.items() if k in env and ref_name(env[k]) != q]
    check(f"{binary}'s queue variables name the right queues", not wrong, ", ".join(wrong))
dashboards = of_type("AWS::CloudWatch::Dashboard")
body = json.dumps(next(iter(dashboards.values()), {}).get("Properties", {}).get("DashboardBody", ""))
for title in ["Backlog", "Delivered per second vs quota", "Oldest age", "DLQ by reason"]:
    check(f"the dashboard shows {title}", title in body)


def dashboard_rows():
    """(metric, queue resource, label) for every AWS/SQS row, with "." shorthand resolved."""
    body = next(iter(dashboards.values()), {}).get("Properties", {}).get("DashboardBody")
    sub = body.get("Fn::Sub") if isinstance(body, dict) else body
    text, names = (sub if isinstance(sub, list) and len(sub) == 2 else [sub, {}])
    if not isinstance(text, str):
        return None
    # "${X}" stays a string token; a bare ${X} (a number, e.g. the quota) becomes 0.
    text = re.sub(r'(?<!")\$\{[^}]+\}(?!")', "0", text)
    try:
        widgets = json.loads(text)["widgets"]
    except (ValueError, KeyError):
        return None
    rows = []
    for w in widgets:
        prev = []
        for row in w.get("properties", {}).get("metrics", []):
            opts = row[-1] if row and isinstance(row[-1], dict) else {}
            dims = [x for x in row if not isinstance(x, dict)]
            dims = [prev[i] if x == "." and i < len(prev) else x for i, x in enumerate(dims)]
            if dims:
                prev = dims
            if len(dims) >= 4 and dims[0] == "AWS/SQS" and dims[2] == "QueueName":
                var = re.fullmatch(r"\$\{(\w+)\}", str(dims[3]))
                rows.append((dims[1], ref_name(names.get(var.group(1))) if var else None, opts.get("label", "")))
    return rows


rows = dashboard_rows()
check("the dashboard body is valid JSON", rows is not None)
for lane, label in LANES.items():
    for metric in ["ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"]:
        check(
            f"the dashboard shows {metric} for the {label} ({lane}), labelled",
            any(m == metric and q == lane and label in lbl for m, q, lbl in rows or []),
        )

outputs = template.get("Outputs", {})
for lane in LANES:
    check(f"an output gives {lane}'s URL", any(ref_name(o.get("Value")) == lane for o in outputs.values()))

failed = [c for c in checks if not c[1]]
for name, ok, detail in checks:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'  (' + detail + ')' if detail and not ok else ''}")
print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
