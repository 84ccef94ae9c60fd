"""Invariants of infra/template.yaml that cfn-lint cannot know (the design's, not the schema's).

Run by `make test` after cfn-lint. Prints one line per invariant and `N passed, N failed`;
exits 1 when any fails. Some invariants compare the template with the code: the parameter and
variable bounds and the DynamoDB key prefixes are read from the Rust source (crates/ in the
repository this script belongs to), so a change on either side that makes them disagree fails.
Where the template depends on Conditions (provider kind, poller mode, …), an invariant is checked
on what each combination of those parameters deploys (SCENARIOS), not on the raw Fn::If tree.
"""
import fnmatch
import json
import pathlib
import re
import sys
import tomllib

from cfnlint.decode import decode

path = sys.argv[1] if len(sys.argv) > 1 else "infra/template.yaml"
template, matches = decode(path)
if matches:
    for m in matches:
        print(f"cannot read {path}: {m}")
    sys.exit(1)
res = template["Resources"]
parameters = template.get("Parameters", {})
conditions = template.get("Conditions", {})


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


# --- Conditions: the template is checked once per scenario -------------------------------------
# A scenario gives every parameter a value (its Default unless overridden); Fn::If is resolved
# with the template's own Conditions and AWS::NoValue dropped, so an invariant is checked on
# what CloudFormation would deploy for that choice of parameters, not on the raw Fn::If tree.
NO_VALUE = {"Ref": "AWS::NoValue"}


def scenario(**overrides):
    values = {n: str(p.get("Default", "")) for n, p in parameters.items()}
    values.update({k: str(v) for k, v in overrides.items()})
    return values


def cond_value(expr, params):
    """The truth of a condition expression for the parameter values `params`."""
    if isinstance(expr, dict) and len(expr) == 1:
        (fn, arg), = expr.items()
        if fn == "Condition":
            return cond_value(conditions[arg], params)
        if fn == "Fn::Equals":
            a, b = (params.get(x["Ref"]) if isinstance(x, dict) and "Ref" in x else str(x) for x in arg)
            return a == b
        if fn == "Fn::Not":
            return not cond_value(arg[0], params)
        if fn == "Fn::And":
            return all(cond_value(x, params) for x in arg)
        if fn == "Fn::Or":
            return any(cond_value(x, params) for x in arg)
    raise ValueError(f"cannot evaluate condition {json.dumps(expr)}")


def resolve(node, params):
    """`node` with every Fn::If decided for `params`, and AWS::NoValue removed."""
    if isinstance(node, dict):
        if set(node) == {"Fn::If"}:
            name, yes, no = node["Fn::If"]
            return resolve(yes if cond_value(conditions[name], params) else no, params)
        out = {}
        for k, v in node.items():
            r = resolve(v, params)
            if r != NO_VALUE:
                out[k] = r
        return out
    if isinstance(node, list):
        return [r for r in (resolve(v, params) for v in node) if r != NO_VALUE]
    return node


# Every combination of the values the Conditions can tell apart: AllowedValues, or the Default
# and one other value (the conditions compare with the Default, e.g. "" for "none").
# KeepOldDayIndex decides one index of the renewals table and nothing else: section 16 checks
# both of its values, the scenarios keep its default (each value would double them).
TABLE_ONLY = {"KeepOldDayIndex"}
decided = sorted({m for c in conditions.values() for m in re.findall(r'"Ref": "(\w+)"', json.dumps(c))} & set(parameters) - TABLE_ONLY)
SCENARIOS = [{}]
for pname in decided:
    p = parameters[pname]
    values = [str(v) for v in p.get("AllowedValues", [])] or [str(p.get("Default", "")), "example"]
    SCENARIOS = [dict(s, **{pname: v}) for s in SCENARIOS for v in values]
SCENARIOS = [scenario(**s) for s in SCENARIOS]


def refused_by_rules(params):
    """The template's Rules that refuse `params` (CloudFormation refuses such a deploy before
    anything changes, so no invariant needs to hold for it). Only assertions on the parameters
    the scenarios vary are evaluated; the others (ProviderUrl, …) are taken as given."""
    out = []
    for rname, rule in template.get("Rules", {}).items():
        if "RuleCondition" in rule and not cond_value(rule["RuleCondition"], params):
            continue
        judged = [a["Assert"] for a in rule.get("Assertions", [])
                  if set(re.findall(r'"Ref": "(\w+)"', json.dumps(a["Assert"]))) <= set(decided)]
        if not all(cond_value(a, params) for a in judged):
            out.append(rname)
    return out


SCENARIOS = [s for s in SCENARIOS if not refused_by_rules(s)]
DEFAULTS = scenario()


def role_of(f):
    """(logical id, resource) of the AWS::IAM::Role a function's Role names (!GetAtt X.Arn),
    or (None, None) when it has no Role or it is not a role of this template."""
    name = ref_name(f.get("Properties", {}).get("Role"))
    r = res.get(name) if name else None
    return (name, r) if r is not None and r.get("Type") == "AWS::IAM::Role" else (None, None)


def policy_documents(f, params):
    """A function's policy documents for `params`: its Role's inline policies when it names a
    role of this template (SAM takes no Policies then), else its own SAM Policies."""
    _, role = role_of(f)
    if role is not None:
        return [p.get("PolicyDocument", {}) for p in resolve(role.get("Properties", {}).get("Policies", []), params)
                if isinstance(p, dict)]
    return [p for p in resolve(f.get("Properties", {}).get("Policies", []), params) if isinstance(p, dict)]


def statements(f, params=None):
    """The Allow/Deny statements of a function's inline policies (its Role's, when it has one)
    for `params`; with none, the union over every scenario (each distinct statement once)."""
    out, seen = [], set()
    for ps in [params] if params is not None else SCENARIOS:
        for policy in policy_documents(f, ps):
            for st in policy.get("Statement", []):
                key = json.dumps(st, sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    out.append(st)
    return out


checks = []


def check(name, ok, detail=""):
    checks.append((name, bool(ok), detail))


functions = of_type("AWS::Serverless::Function")
sender = functions.get("SenderFunction", {}).get("Properties", {})
queues = of_type("AWS::SQS::Queue")
dlq = queues.get("DeadLetterQueue", {}).get("Properties", {})
# The deadline lanes (docs/design.md#lanes-and-pacing): every queue but the DLQ is one, and the sender polls each.
LANES = {"SendQueue": "normal lane", "UrgentQueue": "urgent lane"}
# A channel's own queue (docs/configuration.md#channels), with the condition that declares the
# channel: the sms channel's (SmsProviderUrl).
CHANNEL_QUEUES = {"SmsQueue": ("sms", "HasSms"), "SmsUrgentQueue": ("sms", "HasSms")}
# The producers' commands queue and its own DLQ (docs/integration.md): drained by the ingest.
COMMANDS_QUEUES = {"CommandsQueue": "CommandsDeadLetterQueue"}
check("the queues are the two lanes, the channels' own, the DLQ, and the commands queue with its DLQ",
      set(queues) == set(LANES) | set(CHANNEL_QUEUES) | {"DeadLetterQueue"} | set(COMMANDS_QUEUES) | set(COMMANDS_QUEUES.values()),
      str(sorted(queues)))

# --- the sender's event source mappings: one per lane -----------------------------------
# As deployed with the default parameters (SenderPollerMode max_concurrency); the provisioned
# mode's mappings are checked with the fair-queue and lanes' fleet invariants below.
sqs_events = [resolve(e["Properties"], DEFAULTS) for e in sender.get("Events", {}).values() if e.get("Type") == "SQS"]
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
def branches(value):
    """The values a node may take: each side of an Fn::If, none for AWS::NoValue."""
    if isinstance(value, dict) and "Fn::If" in value:
        return [v for side in value["Fn::If"][1:] for v in branches(side)]
    if isinstance(value, dict) and value.get("Ref") == "AWS::NoValue":
        return []
    return [value]


allowed_sources = [a.get("Fn::Sub") if isinstance(a, dict) else a
                   for item in dlq.get("RedriveAllowPolicy", {}).get("sourceQueueArns", []) for a in branches(item)]
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
# Every queue but a DLQ is a source of its DLQ (the commands queue of its own): no message can
# be lost to a crash loop.
for name, queue in queues.items():
    if name == "DeadLetterQueue" or name in COMMANDS_QUEUES.values():
        continue
    q = queue.get("Properties", {})
    redrive = q.get("RedrivePolicy", {})
    target = COMMANDS_QUEUES.get(name, "DeadLetterQueue")
    check(f"{name} redrives to {target}", ref_name(redrive.get("deadLetterTargetArn")) == target)
    check(f"{name} maxReceiveCount is a backstop (>= 3)", int(redrive.get("maxReceiveCount", 0)) >= 3)
    # byQueue refuses any source not listed; the list is built from names (a cycle otherwise).
    qname = q.get("QueueName")
    suffix = qname.get("Fn::Sub") if isinstance(qname, dict) else qname
    sources = allowed_sources if target == "DeadLetterQueue" else [
        a.get("Fn::Sub") if isinstance(a, dict) else a
        for item in queues.get(target, {}).get("Properties", {}).get("RedriveAllowPolicy", {}).get("sourceQueueArns", [])
        for a in branches(item)]
    check(
        f"{target}'s redrive allow policy lists {name}",
        isinstance(suffix, str) and any(isinstance(a, str) and a.endswith(f":{suffix}") for a in sources),
        f"QueueName {json.dumps(qname)} not in {sources}",
    )
send_q = queues.get("SendQueue", {}).get("Properties", {})
urgent_q = queues.get("UrgentQueue", {}).get("Properties", {})
alike = ["VisibilityTimeout", "MessageRetentionPeriod", "SqsManagedSseEnabled"]
differ = [k for k in alike if send_q.get(k) != urgent_q.get(k)]
if send_q.get("RedrivePolicy", {}).get("maxReceiveCount") != urgent_q.get("RedrivePolicy", {}).get("maxReceiveCount"):
    differ.append("maxReceiveCount")
check("the urgent queue is configured like the send queue", not differ, ", ".join(differ))
# A channel's queue: created only with its channel, configured like the lanes, drained by a
# mapping of its own (with the same condition) to the sender, with its own ceiling.
mappings = of_type("AWS::Lambda::EventSourceMapping")


def alias_target(m):
    """The function whose alias `live` a mapping resource invokes (FunctionName !Sub
    "${Function}:live", DependsOn SAM's alias resource FunctionAliaslive, so the alias exists
    first), else None. Not !Ref Function.Alias: only SAM resolves that, and LocalStack's engine
    refuses it before the transform."""
    fn = m.get("Properties", {}).get("FunctionName")
    hit = re.fullmatch(r"\$\{(\w+)\}:live", fn.get("Fn::Sub", "")) if isinstance(fn, dict) and isinstance(fn.get("Fn::Sub"), str) else None
    return hit.group(1) if hit and f"{hit.group(1)}Aliaslive" in as_list(m.get("DependsOn", [])) else None


for qname, (channel, cond) in CHANNEL_QUEUES.items():
    q = queues.get(qname, {})
    qp = q.get("Properties", {})
    # Whether or not the channel is on (docs/deployment.md#turning-the-sms-channel-on-and-off): turning
    # it off must not delete a queue holding released reminders (retained, undrained, unwatched)
    # nor make turning it on again collide with the retained fixed name.
    check(f"{qname} exists whether or not the {channel} channel is on (no Condition)", "Condition" not in q, str(q.get("Condition")))
    differ = [k for k in alike if qp.get(k) != send_q.get(k)]
    if qp.get("RedrivePolicy", {}).get("maxReceiveCount") != send_q.get("RedrivePolicy", {}).get("maxReceiveCount"):
        differ.append("maxReceiveCount")
    check(f"{qname} is configured like the send queue", not differ, ", ".join(differ))
    ms = [m for m in mappings.values() if ref_name(m.get("Properties", {}).get("EventSourceArn")) == qname]
    m = ms[0] if len(ms) == 1 else {}
    mp = m.get("Properties", {})
    mc = ref_name(mp.get("ScalingConfig", {}).get("MaximumConcurrency"))
    check(
        f"{qname} is drained by one mapping of its own to the sender's alias (channel on or off, partial failures, "
        "the lanes' batch and window, its own MaximumConcurrency in 2..1000)",
        len(ms) == 1 and "Condition" not in m and alias_target(m) == "SenderFunction"
        and "ReportBatchItemFailures" in mp.get("FunctionResponseTypes", [])
        and ref_name(mp.get("BatchSize")) == "SenderBatchSize"
        and ref_name(mp.get("MaximumBatchingWindowInSeconds")) == "SenderBatchingWindowSeconds"
        and mc in parameters and mc not in {"SenderMaximumConcurrency", "SenderUrgentMaximumConcurrency"}
        and float(parameters[mc].get("MinValue", 0)) >= 2 and float(parameters[mc].get("MaxValue", 1e9)) <= 1000,
        json.dumps(m),
    )

# With the channel off, what was released to its queues is still polled by the sender and
# watched: the sender's role may receive from both queues, and their age and stalled alarms
# exist, in every scenario.
off = [ps for ps in SCENARIOS if not cond_value(conditions["HasSms"], ps)]
unpolled = sorted({q for ps in off for q in CHANNEL_QUEUES
                   if not any("sqs:ReceiveMessage" in as_list(st.get("Action", [])) and q in [ref_name(r) for r in as_list(st.get("Resource", []))]
                              for st in statements(functions.get("SenderFunction", {}), ps))})
check("with the sms channel off the sender may still receive from its queues", off and not unpolled, ", ".join(unpolled))
star_actions = []
for name, f in functions.items():
    for st in statements(f):
        actions = st.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        star_actions += [f"{name}: {a}" for a in actions if "*" in a]
check("no IAM action contains *", not star_actions, ", ".join(star_actions))


def sqs_grants(f):
    """(action, queue) pairs a function's inline policies allow."""
    out = set()
    for st in statements(f):
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
        "SmsQueue": POLL + ["sqs:SendMessage"],  # the sms channel's: polled by its mapping, requeued to
        "SmsUrgentQueue": POLL + ["sqs:SendMessage"],  # and its urgent lane's
        "DeadLetterQueue": ["sqs:SendMessage"],
    },
    "scheduler": {  # releases to either lane, reads both depths for the backlog
        "SendQueue": ["sqs:SendMessage", "sqs:GetQueueAttributes"],
        "UrgentQueue": ["sqs:SendMessage", "sqs:GetQueueAttributes"],
        "SmsQueue": ["sqs:SendMessage", "sqs:GetQueueAttributes"],
        "SmsUrgentQueue": ["sqs:SendMessage", "sqs:GetQueueAttributes"],
    },
    "ingest": {  # polls the commands queue, sends what it cannot apply to the commands DLQ
        "CommandsQueue": POLL,
        "CommandsDeadLetterQueue": ["sqs:SendMessage"],
    },
    "redrive": {  # reads the DLQ, sends each letter back to its lane
        "DeadLetterQueue": ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"],
        "SendQueue": ["sqs:SendMessage"],
        "UrgentQueue": ["sqs:SendMessage"],
        "SmsQueue": ["sqs:SendMessage"],
        "SmsUrgentQueue": ["sqs:SendMessage"],
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
    "NumberOfMessagesReceived",
    "ProjectedDeadlineBreach",
    "Provider429",
    "ProviderFailures",
    "ProviderLatencyMs",
    "OldestDueUndeliveredSeconds",
    "ReleasedWaitSeconds",
    "Paused",
    "FleetPaused",
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
# Composite alarms: each names its components in its AlarmRule, ALARM("${Logical}").
composites = of_type("AWS::CloudWatch::CompositeAlarm")


def alarm_rule(c):
    rule = c.get("Properties", {}).get("AlarmRule")
    # A !Sub string, or a !Join of them (CausePagingAlarm's, with a part per channel's condition).
    return rule.get("Fn::Sub", rule) if isinstance(rule, dict) else rule


def components_of(c):
    return re.findall(r'ALARM\("?\$\{(\w+)\}"?\)', str(alarm_rule(c)))


components = {x for c in composites.values() for x in components_of(c)}


def notifies_topic(p):
    return [ref_name(x) for x in p.get("AlarmActions", [])] == ["AlarmTopicArn"]


# Three classes of alarm (the template's "Alarms" note; `punctual drill` proves them against
# incidents): a page notifies AlarmTopicArn, a ticket TicketTopicArn when one is given, a
# dashboard alarm nobody. Each says which it is first in its description, and the all-clear
# goes where the alarm went (OKActions = AlarmActions).
TICKET_ACTIONS = {"Fn::If": ["HasTicketTopic", [{"Ref": "TicketTopicArn"}], {"Ref": "AWS::NoValue"}]}


def alarm_class(p):
    acts = p.get("AlarmActions")
    if acts is None:
        return "dashboard"
    if notifies_topic(p):
        return "page"
    if acts == TICKET_ACTIONS:
        return "ticket"
    return "unknown"


everything = {**alarms, **composites}
watching = {q: sorted(n for n, a in alarms.items() if q in json.dumps(a.get("Properties", {}))) for q in CHANNEL_QUEUES}
conditional = sorted(n for ns in watching.values() for n in ns if "Condition" in alarms[n])
check("the sms queues' alarms (age, stalled) exist whether or not the channel is on",
      all(len(ns) >= 2 for ns in watching.values()) and not conditional, f"{watching}; conditional: {conditional}")

classes = {n: alarm_class(a["Properties"]) for n, a in everything.items()}
odd = sorted(n for n, c in classes.items() if c == "unknown")
check("every alarm is a page (AlarmTopicArn), a ticket (TicketTopicArn when given) or dashboard-only", not odd, ", ".join(odd))
wrong_ok = sorted(n for n, a in everything.items() if a["Properties"].get("OKActions") != a["Properties"].get("AlarmActions"))
check("every page and ticket sends its all-clear where it sent the alarm (OKActions = AlarmActions)", not wrong_ok, ", ".join(wrong_ok))
CLASS_WORD = {"page": "Page.", "ticket": "Ticket.", "dashboard": "Dashboard"}
misnamed = sorted(n for n, a in everything.items()
                  if classes[n] in CLASS_WORD and not str(a["Properties"].get("AlarmDescription", "")).strip().startswith(CLASS_WORD[classes[n]]))
check("every alarm's description starts with its class (Page. / Ticket. / Dashboard)", not misnamed, ", ".join(misnamed))
# Every alarm names its runbook section, and the section exists in docs/operations.md.
runbook_path = pathlib.Path(__file__).resolve().parent.parent / "docs" / "operations.md"
runbook_text = runbook_path.read_text() if runbook_path.exists() else ""


def anchors_of(markdown):
    """GitHub's anchors for the headings of a Markdown text."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


runbook_anchors = anchors_of(runbook_text)
no_runbook, dangling = [], []
for n, a in sorted(everything.items()):
    m = re.search(r"Runbook: docs/operations\.md#([\w-]+)", str(a["Properties"].get("AlarmDescription", "")))
    if not m:
        no_runbook.append(n)
    elif m.group(1) not in runbook_anchors:
        dangling.append(f"{n} → #{m.group(1)}")
check("every alarm's description names its runbook section (Runbook: docs/operations.md#…)", not no_runbook, ", ".join(no_runbook))
check("every runbook section an alarm names exists in docs/operations.md", not dangling, ", ".join(dangling))
check("every component a composite alarm names is an alarm of this stack", components <= set(everything), ", ".join(sorted(components - set(everything))))
# Components of a composite that notifies; the ones read only by a composite without actions
# (CausePagingAlarm, an actions suppressor) page on their own.
notified_components = {x for c in composites.values() if c.get("Properties", {}).get("AlarmActions")
                       for x in components_of(c)}
loud = sorted(n for n in notified_components if n in alarms and any(alarms[n]["Properties"].get(k) for k in ["AlarmActions", "OKActions", "InsufficientDataActions"]))
check("a notifying composite's components have no actions of their own (the composite pages once)", not loud, ", ".join(loud))
ticket_param = parameters.get("TicketTopicArn", {})
check("TicketTopicArn is optional (default empty) and an SNS topic ARN when given",
      ticket_param.get("Default") == "" and re.fullmatch(ticket_param.get("AllowedPattern", "x"), "")
      and re.fullmatch(ticket_param.get("AllowedPattern", "x"), "arn:aws:sns:eu-west-1:123456789012:tickets"))

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
check("four functions: sender, scheduler, redrive, ingest", set(binaries) == {"sender", "scheduler", "redrive", "ingest"}, str(sorted(map(str, binaries))))
check("the redrive function has no trigger", not binaries.get("redrive", {}).get("Properties", {}).get("Events"))
# The variables each binary's config requires (crates/*/src/config.rs): a missing one would
# fail the cold start.
required = {
    "sender": ["SEND_QUEUE_URL", "URGENT_QUEUE_URL", "DLQ_URL", "LEDGER_TABLE", "RENEWALS_TABLE", "PROVIDER_URL"],
    "scheduler": ["RENEWALS_TABLE", "SEND_QUEUE_URL", "URGENT_QUEUE_URL", "LEDGER_TABLE"],
    "redrive": ["SEND_QUEUE_URL", "URGENT_QUEUE_URL", "DLQ_URL", "LEDGER_TABLE"],
    "ingest": ["RENEWALS_TABLE", "COMMANDS_DLQ_URL"],
}
# …and each queue variable names the right queue (swapped lanes would still start).
QUEUE_VARS = {"SEND_QUEUE_URL": "SendQueue", "URGENT_QUEUE_URL": "UrgentQueue", "DLQ_URL": "DeadLetterQueue",
              "COMMANDS_DLQ_URL": "CommandsDeadLetterQueue"}
for binary, names in required.items():
    # As deployed with the defaults (ProviderKind http); the ses kind's variables are checked below.
    env = resolve(binaries.get(binary, {}).get("Properties", {}).get("Environment", {}).get("Variables", {}), DEFAULTS)
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
# Every queue that holds reminders: the lanes and the sms channel's two (found by review: the
# dashboard showed only the lanes).
for lane, label in {**LANES, "SmsQueue": "sms queue", "SmsUrgentQueue": "sms urgent lane"}.items():
    for metric in ["ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"]:
        check(
            f"the dashboard shows {metric} for the {label} ({lane}), labelled",
            any(m == metric and q == lane and label in lbl for m, q, lbl in rows or []),
        )

outputs = template.get("Outputs", {})
for lane in LANES:
    check(f"an output gives {lane}'s URL", any(ref_name(o.get("Value")) == lane for o in outputs.values()))

# ============================================================================================
# A deploy that cannot fail silently (docs/deployment.md#what-a-deploy-cannot-do-silently). Each block below checks one decision the
# template comments explain; each was shown to fail on a broken copy of the template.
# ============================================================================================
ROOT = pathlib.Path(__file__).resolve().parent.parent
by_binary = {f.get("Metadata", {}).get("BuildProperties", {}).get("Binary"): (name, f) for name, f in functions.items()}


def rust(rel):
    """The text of a Rust source file (read-only: the code is the authority on its limits)."""
    try:
        return (ROOT / rel).read_text()
    except OSError:
        return ""


def metric_of(p):
    """(namespace, metric, {dimension: value}) of a single-metric alarm."""
    dims = {d.get("Name"): d.get("Value") for d in p.get("Dimensions", [])}
    return p.get("Namespace"), p.get("MetricName"), dims


# --- 1. Alarms that fire when the pipeline stops --------------------------------------------
def metrics_of(p):
    """Every (namespace, metric, {dimension: value}) an alarm reads: its one metric, or each
    metric of its metric math (`Metrics[].MetricStat.Metric`)."""
    out = [metric_of(p)]
    for q in p.get("Metrics", []) or []:
        m = (q.get("MetricStat") or {}).get("Metric")
        if m:
            out.append(metric_of(m))
    return out


def lambda_alarms(metric):
    """Function logical ids that an AWS/Lambda `metric` alarm watches (alone or in its math)."""
    out = {}
    for name, a in alarms.items():
        for ns, m, dims in metrics_of(a["Properties"]):
            if ns == "AWS/Lambda" and m == metric and "FunctionName" in dims:
                out.setdefault(ref_name(dims["FunctionName"]), []).append(name)
    return out


for metric in ["Errors", "Throttles"]:
    watched = lambda_alarms(metric)
    for name in functions:
        check(f"an AWS/Lambda {metric} alarm watches {name}", name in watched)
sched_name = by_binary.get("scheduler", (None, {}))[0]


def heartbeat_ok(p):
    """The scheduler's Invocations, summed per minute, below 1, missing data breaching, one
    period: CloudWatch skips missing datapoints while enough real ones remain in the few extra
    periods it retrieves, so this fires after 3 silent minutes; a 5-minute period would wait 20.
    No FILL: a datapoint not yet ingested must not read as a 0."""
    ns, m, dims = metric_of(p)
    return (ns == "AWS/Lambda" and m == "Invocations" and ref_name(dims.get("FunctionName")) == sched_name
            and p.get("Statistic") == "Sum" and int(p.get("Period", 0)) == 60 and int(p.get("EvaluationPeriods", 0)) == 1
            and p.get("ComparisonOperator") == "LessThanThreshold" and float(p.get("Threshold", 0)) == 1
            and p.get("TreatMissingData") == "breaching")


check(
    "a heartbeat alarm fires when the scheduler is not invoked (Invocations < 1 a minute, missing breaching, one period)",
    any(heartbeat_ok(a["Properties"]) for a in alarms.values()),
)

# How each alarm behaves when its metric disappears: the deliberate value, and for
# notBreaching alarms which other alarms fire when the metric's *producer* stops. A new alarm
# must be added here. (`punctual drill` checks the same against incidents: a scheduler not
# invoked, a lane not polled, a throttled sender.)
HEARTBEAT = ["SchedulerNotTickingAlarm"]
SENDER_STOPPED = ["SenderErrorsAlarm", "SenderThrottlesAlarm", "NormalLaneStalledAlarm", "UrgentLaneStalledAlarm"]
MISSING_DATA = {
    "SchedulerErrorsAlarm": ("notBreaching", HEARTBEAT),
    "SenderErrorsAlarm": ("notBreaching", ["NormalLaneStalledAlarm", "UrgentLaneStalledAlarm"]),
    "RedriveErrorsAlarm": ("notBreaching", []),  # absent = no operator run: nothing to watch
    # The producers' side: SQS keeps a queue with messages active; absent = no command, nothing
    # to watch. The outbox's age is the scheduler's: its silence is the heartbeat's.
    "CommandsOldestMessageAgeAlarm": ("notBreaching", []),
    "CommandsQueueStalledAlarm": ("notBreaching", []),
    "CommandsDeadLetterAlarm": ("notBreaching", []),
    "IngestErrorsAlarm": ("notBreaching", []),
    "IngestThrottlesAlarm": ("notBreaching", []),
    "OutboxOldestAgeAlarm": ("notBreaching", HEARTBEAT + ["OutboxSweepFailingAlarm"]),
    "OutboxSweepFailingAlarm": ("notBreaching", HEARTBEAT),
    "SchedulerThrottlesAlarm": ("notBreaching", HEARTBEAT),
    "SenderThrottlesAlarm": ("notBreaching", ["NormalLaneStalledAlarm", "UrgentLaneStalledAlarm"]),
    "RedriveThrottlesAlarm": ("notBreaching", []),
    # The deploy guards: absent = no invocation failed (or none happened), nothing to hold back.
    "SenderDeployGuardAlarm": ("notBreaching", []),
    "SchedulerDeployGuardAlarm": ("notBreaching", []),
    "IngestDeployGuardAlarm": ("notBreaching", []),
    # FILL(…, 0): a missing minute is a real 0 below the threshold.
    "SchedulerNotTickingAlarm": ("breaching", []),
    "SenderInfrastructureFailuresAlarm": ("notBreaching", SENDER_STOPPED),
    "OldestMessageAgeAlarm": ("notBreaching", SENDER_STOPPED + HEARTBEAT),
    "UrgentOldestMessageAgeAlarm": ("notBreaching", SENDER_STOPPED + HEARTBEAT),
    "SmsOldestMessageAgeAlarm": ("notBreaching", ["SmsQueueStalledAlarm", "SenderErrorsAlarm"] + HEARTBEAT),
    "SmsUrgentOldestMessageAgeAlarm": ("notBreaching", ["SmsUrgentQueueStalledAlarm", "SenderErrorsAlarm"] + HEARTBEAT),
    "DlqNotEmptyAlarm": ("notBreaching", []),  # SQS keeps a queue with messages active
    "DlqOldestLetterAlarm": ("notBreaching", []),
    "DlqNewLettersSignalAlarm": ("notBreaching", SENDER_STOPPED),  # FILL(records, 0): backstop letters still count
    "ProjectedDeadlineBreachAlarm": ("notBreaching", HEARTBEAT + ["OldestDueUndeliveredSignalAlarm"]),
    "OldestDueUndeliveredSignalAlarm": ("notBreaching", HEARTBEAT),
    "FleetPausedAlarm": ("notBreaching", HEARTBEAT),
    "ChannelTrippedAlarm": ("notBreaching", HEARTBEAT),
    "PauseHoldingDueWorkAlarm": ("notBreaching", HEARTBEAT + ["ReleasedWorkWaitingSignalAlarm"]),
    "ReleasedWorkWaitingSignalAlarm": ("notBreaching", SENDER_STOPPED),
    # Below their volume floors the point is missing and the state holds (ignore): an outage
    # that has dead-lettered everything in flight is not over until calls succeed again. The
    # 15-minute windows read 0 when their few calls all succeeded (checked below: never latched).
    "ProviderFailingMinuteAlarm": ("notBreaching", SENDER_STOPPED + ["ProviderFailing15mAlarm"]),
    "ProviderFailing15mAlarm": ("ignore", SENDER_STOPPED + ["ReleasedWorkWaitingSignalAlarm"]),
    # The same over one channel's calls (FirstChannel, SecondChannel).
    **{f"{c}FailingMinuteAlarm": ("notBreaching", SENDER_STOPPED + [f"{c}Failing15mAlarm"])
       for c in ["FirstChannel", "SecondChannel"]},
    **{f"{c}Failing15mAlarm": ("ignore", SENDER_STOPPED + ["ReleasedWorkWaitingSignalAlarm"])
       for c in ["FirstChannel", "SecondChannel"]},
    "ProviderSlowAlarm": ("ignore", SENDER_STOPPED + ["ReleasedWorkWaitingSignalAlarm"]),
    "ThrottleRatioAlarm": ("ignore", SENDER_STOPPED),
    "NormalLaneStalledAlarm": ("notBreaching", []),  # SQS keeps a queue with messages active
    "UrgentLaneStalledAlarm": ("notBreaching", []),
    "SmsQueueStalledAlarm": ("notBreaching", []),
    "SmsUrgentQueueStalledAlarm": ("notBreaching", []),
    "SesBounceRateAlarm": ("notBreaching", ["FleetPausedAlarm"]),  # SES's own metric; a paused account pauses the fleet
    "SesComplaintRateAlarm": ("notBreaching", ["FleetPausedAlarm"]),
    # Emitted only for an active fair queue; dashboard-only.
    "QuietGroupsOldestMessageAgeAlarm": ("notBreaching", SENDER_STOPPED),
    "UrgentQuietGroupsOldestMessageAgeAlarm": ("notBreaching", SENDER_STOPPED),
    # The deadline SLO's burn rates (components of SloFastBurnAlarm and SloSlowBurnAlarm): no
    # verdict is no burn. A stopped scheduler or sender stops the series too; the heartbeat, the
    # lanes' stall alarms and the age of released work fire.
    **{name: ("notBreaching", HEARTBEAT + SENDER_STOPPED + ["ReleasedWorkWaitingSignalAlarm"])
       for name in ["SloFastBurn1hAlarm", "SloFastBurn5mAlarm", "SloSlowBurn6hAlarm", "SloSlowBurn30mAlarm"]},
}
# A window that holds its state below its volume floor must still end: the 15-minute provider
# windows (components of the ProviderFailingAlarm composite) return 0 for a window of calls that
# all succeeded, or a quiet recovery latches them in ALARM and the next outage pages nobody.
for name in ["ProviderFailing15mAlarm"] + [f"{c}Failing15mAlarm" for c in ["FirstChannel", "SecondChannel"]]:
    exprs = [m.get("Expression", "") for m in alarms.get(name, {}).get("Properties", {}).get("Metrics", [])
             if m.get("ReturnData")]
    check(f"{name}: a window whose calls all succeeded reads 0 (the ignore cannot latch)",
          any("FILL(failed, 0) == 0, 0)" in e for e in exprs), str(exprs))
unlisted = sorted(set(alarms) - set(MISSING_DATA))
check("every alarm's missing-data behaviour is a listed decision", not unlisted, ", ".join(unlisted))
for name, a in sorted(alarms.items()):
    if name not in MISSING_DATA:
        continue
    want, covered_by = MISSING_DATA[name]
    got = a["Properties"].get("TreatMissingData")
    check(f"{name}: TreatMissingData is {want}", got == want, f"got {got}")
    gone = [c for c in covered_by if c not in alarms]
    check(f"{name}: the alarms covering its producer's silence exist", not gone, ", ".join(gone))


def custom_namespace(p):
    ns = p.get("Namespace")
    return ns is not None and ns != "AWS/Lambda" and not (isinstance(ns, str) and ns.startswith("AWS/"))


# No alarm on the code's own metrics may stay silent when its producer stops: either missing
# data breaches, or a listed alarm fires instead (above), and a breaching one on the scheduler
# covers the scheduler's metrics.
def reads_custom(p):
    """Whether the alarm reads a metric the code emits (in the stack's namespace)."""
    if custom_namespace(p):
        return True
    return any(custom_namespace(m["MetricStat"]["Metric"]) for m in p.get("Metrics", []) if "MetricStat" in m)


custom = {n: a["Properties"] for n, a in alarms.items() if reads_custom(a["Properties"])}
for name, p in sorted(custom.items()):
    want, covered_by = MISSING_DATA.get(name, (None, []))
    check(
        f"{name} (a custom metric) is not silent when its producer stops",
        p.get("TreatMissingData") == "breaching" or bool(covered_by),
        f"{p.get('TreatMissingData')}, covered by {covered_by}",
    )

# The scheduler's metrics arrive once per completed tick, at most (timeout + 60 s interval)
# apart. A breaching alarm needs a tick in every period; a notBreaching M-of-N alarm needs its
# DatapointsToAlarm ticks to fit in its window.
sched_timeout = int(by_binary.get("scheduler", (None, {}))[1].get("Properties", {}).get("Timeout", 3))
tick_gap = sched_timeout + 60
def reads_scheduler(p):
    """Whether the alarm reads a metric the scheduler's ticks write (plain or in metric math)."""
    if metric_of(p)[2].get("Function") == "scheduler":
        return True
    return any({d.get("Name"): d.get("Value") for d in m["MetricStat"]["Metric"].get("Dimensions", [])}.get("Function") == "scheduler"
               for m in p.get("Metrics", []) if "MetricStat" in m)


def period_of(p):
    return int(p.get("Period") or max([int(m["MetricStat"].get("Period", 0)) for m in p.get("Metrics", []) if "MetricStat" in m] or [0]))


for name, p in sorted(custom.items()):
    if not reads_scheduler(p):
        continue
    period, n = period_of(p), int(p.get("EvaluationPeriods", 0))
    m = int(p.get("DatapointsToAlarm", n))
    if p.get("TreatMissingData") == "breaching":
        check(f"{name}: every {period} s period holds a tick ({tick_gap} s apart at worst)", period >= tick_gap)
    else:
        check(
            f"{name}: {m} of {n} × {period} s fit ticks {tick_gap} s apart",
            period * n >= m * tick_gap,
            f"{period} × {n} < {m} × {tick_gap}",
        )

# The 429 ratio: FILL on the sparse Provider429 (written only when non-zero), and M-of-N over
# a few minutes so bursts alarm.
ratio = alarms.get("ThrottleRatioAlarm", {}).get("Properties", {})
expr = " ".join(m.get("Expression", "") for m in ratio.get("Metrics", []) if m.get("ReturnData"))
ids = {m["MetricStat"]["Metric"]["MetricName"]: m["Id"] for m in ratio.get("Metrics", []) if "MetricStat" in m}
check(
    "the 429 ratio FILLs both Provider429 and ProviderAttempts with 0",
    all(re.search(rf"FILL\(\s*{re.escape(ids.get(k, '?'))}\s*,\s*0\s*\)", expr) for k in ["Provider429", "ProviderAttempts"]),
    expr,
)
r_n = int(ratio.get("EvaluationPeriods", 0))
r_m = int(ratio.get("DatapointsToAlarm", r_n))
r_period = max([int(m["MetricStat"].get("Period", 0)) for m in ratio.get("Metrics", []) if "MetricStat" in m] or [0])
check(
    "the 429 ratio alarms on a burst (M < N, window <= 5 minutes)",
    r_m < r_n and r_n * r_period <= 300,
    f"{r_m} of {r_n} × {r_period} s",
)

# --- 3. One metrics namespace per stack, used everywhere -------------------------------------
NAMESPACE = {"Fn::Sub": "punctual/${AWS::StackName}"}
glob_env = template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
check("METRICS_NAMESPACE is punctual/${AWS::StackName} for every function (Globals)", glob_env.get("METRICS_NAMESPACE") == NAMESPACE, json.dumps(glob_env.get("METRICS_NAMESPACE")))
overridden = [n for n, f in functions.items() if "METRICS_NAMESPACE" in f.get("Properties", {}).get("Environment", {}).get("Variables", {})]
check("no function overrides METRICS_NAMESPACE", not overridden, ", ".join(overridden))
wrong_ns = []
for name, a in alarms.items():
    p = a["Properties"]
    spaces = [p.get("Namespace")] + [m["MetricStat"]["Metric"].get("Namespace") for m in p.get("Metrics", []) if "MetricStat" in m]
    wrong_ns += [f"{name}: {json.dumps(ns)}" for ns in spaces if ns is not None and not (isinstance(ns, str) and ns.startswith("AWS/")) and ns != NAMESPACE]
check("every alarm on the code's metrics reads the stack's namespace", not wrong_ns, "; ".join(wrong_ns))
dash_body = next(iter(dashboards.values()), {}).get("Properties", {}).get("DashboardBody", {})
dash_sub = dash_body.get("Fn::Sub") if isinstance(dash_body, dict) else None
dash_text, dash_vars = (dash_sub if isinstance(dash_sub, list) and len(dash_sub) == 2 else [str(dash_sub), {}])
bare = re.findall(r'"punctual"|\{punctual,', dash_text)
check("the dashboard reads the stack's namespace (no bare \"punctual\")", not bare and dash_vars.get("Namespace") == NAMESPACE and "${Namespace}" in dash_text, f"{bare} {json.dumps(dash_vars.get('Namespace'))}")
# Dashboards are global to the account: a name without the region collides when the same stack
# name is deployed in a second region.
dash_names = [d.get("Properties", {}).get("DashboardName") for d in dashboards.values()]
check("the dashboard's name is ${AWS::StackName}-${AWS::Region}-punctual (dashboards are global; one per stack and region)",
      dash_names == [{"Fn::Sub": "${AWS::StackName}-${AWS::Region}-punctual"}], json.dumps(dash_names))

# --- 2. What outlives the stack -------------------------------------------------------------
# Every stateful resource is kept on replacement (UpdateReplacePolicy Retain) and on delete. The
# tables are Retain on delete, always (and deletion-protected). The queues and log groups are
# RetainExceptOnCreate: kept on every delete and rollback but the rollback of the create that
# made them, so a failed first deploy leaves no fixed-name `<stack>-send/-urgent/-dlq` behind
# for the next one to collide with (nothing is in them yet then).
DELETION_POLICY = {
    "AWS::DynamoDB::Table": "Retain",
    "AWS::SQS::Queue": "RetainExceptOnCreate",
    "AWS::Logs::LogGroup": "RetainExceptOnCreate",
}
for name, r in sorted(res.items()):
    want = DELETION_POLICY.get(r.get("Type"))
    if want:
        check(
            f"{name} is {want} on delete and Retain on replacement",
            r.get("DeletionPolicy") == want and r.get("UpdateReplacePolicy") == "Retain",
            f"DeletionPolicy {r.get('DeletionPolicy')}, UpdateReplacePolicy {r.get('UpdateReplacePolicy')}",
        )
# A fixed physical name (QueueName, TableName, LogGroupName) is what a retained leftover of a
# failed create collides with: every such resource must be RetainExceptOnCreate (or Delete).
fixed = sorted(n for n, r in res.items() if r.get("Type") in DELETION_POLICY
               and any(k in r.get("Properties", {}) for k in ["QueueName", "TableName", "LogGroupName"])
               and r.get("DeletionPolicy") not in ("RetainExceptOnCreate", "Delete"))
check("no fixed-name stateful resource outlives a failed first create (RetainExceptOnCreate)", not fixed, ", ".join(fixed))
for name, t in sorted(tables.items()):
    check(f"{name} has deletion protection", t["Properties"].get("DeletionProtectionEnabled") is True)


# --- 4. Parameters bounded by what the code accepts -------------------------------------------
def rust_call(text, var):
    """The argument list of the `.parse("VAR", …)` call, split at top-level commas."""
    m = re.search(r'\.parse(?:::<[^>]+>)?\(\s*"' + re.escape(var) + '"', text)
    if not m:
        return None
    i, depth, args, cur = text.index("(", m.start()) + 1, 1, [], ""
    while i < len(text) and depth:
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 1:
            args.append(cur.strip())
            cur = ""
        elif depth:
            cur += c
        i += 1
    args.append(cur.strip())
    return [a for a in args if a]


def number(s):
    return float(re.sub(r"(f32|f64|u8|u16|u32|u64|usize)$", "", s.replace("_", "")))


def code_bounds(rel, var):
    """(lo, lo_inclusive, hi, hi_inclusive) the Rust parser of `var` accepts, from its source;
    None when it cannot be read (the check then fails: a parser that moved must be re-read)."""
    text = rust(rel)
    args = rust_call(text, var)
    if not args or len(args) < 4:
        return None
    default, predicate = args[1], args[3]
    if re.fullmatch(r"\w+", predicate):  # a named closure: `let share = |v: &f64| …;`
        m = re.search(r"let\s+" + predicate + r"\s*=\s*(\|[^;]+);", text)
        if not m:
            return None
        predicate = m.group(1)
    integer = "f64" not in predicate and not re.fullmatch(r"[\d_]+\.[\d_]*", default)
    lo, lo_inc, hi, hi_inc = (0.0, True, None, True) if integer else (None, True, None, True)
    for op, val in re.findall(r"\*v\s*(>=|>|<=|<)\s*([\d_.]+)", predicate):
        if op in (">", ">="):
            lo, lo_inc = number(val), op == ">="
        else:
            hi, hi_inc = number(val), op == "<="
    m = re.search(r"\(([\d_]+)\.\.=([\d_]+)\)\.contains\(v\)", predicate)
    if m:
        lo, lo_inc, hi, hi_inc = number(m.group(1)), True, number(m.group(2)), True
    m = re.search(r"Duration::from_secs\(\*v\)\s*<=\s*(\w+)", predicate)
    if m:  # a named Duration constant, in core
        c = re.search(m.group(1) + r":\s*Duration\s*=\s*Duration::from_secs\(([\d_]+)\)", rust("crates/core/src/scheduler.rs"))
        if not c:
            return None
        hi, hi_inc = number(c.group(1)), True
    if lo is None and hi is None:
        return None
    return lo, lo_inc, hi, hi_inc


# Which parser reads each variable the template sets (the file the bound is read from).
PARSERS = {
    "PROVIDER_RATE_PER_SEC": "crates/lambda/src/config.rs",
    "REDRIVE_SHARE": "crates/lambda/src/config.rs",
    "SUSTAINABLE_RATE_PER_SEC": "crates/scheduler/src/config.rs",
    "LOOKAHEAD_SECS": "crates/scheduler/src/config.rs",
    "REDRIVE_MAX_MESSAGES": "crates/redrive/src/config.rs",
    "REDRIVE_MAX_PER_SECOND": "crates/redrive/src/config.rs",
}
# The template's expected bounds for every numeric parameter, and where each comes from. Where
# the code's lower bound is exclusive (> 0) a Number parameter cannot say so: the MinValue is
# the smallest value the template admits, chosen here and in the template together.
BOUNDS = {
    # crates/lambda/src/config.rs, limiter_settings: PROVIDER_RATE_PER_SEC in (0, 100000]
    # (also SUSTAINABLE_RATE_PER_SEC, crates/scheduler/src/config.rs: > 0). 0.01 chosen.
    "ProviderRatePerSecond": (0.01, 100000),
    # crates/lambda/src/config.rs, limiter_settings: REDRIVE_SHARE in (0, 1]. 0.01 chosen.
    "RedriveShare": (0.01, 1),
    # Not read by the code: the event source mapping's limits (BatchSize 1..10 without a
    # window is SQS's; kept at 10 with a window, the sender's 60 s timeout is sized for 10).
    "SenderBatchSize": (1, 10),
    # The mapping accepts 0..300; 20 is the template's own cap: both lanes share the window, and
    # a lone urgent message waits up to it before it is invoked.
    "SenderBatchingWindowSeconds": (0, 20),
    "SenderMaximumConcurrency": (2, 1000),
    "SenderUrgentMaximumConcurrency": (2, 1000),
    # Not read by the code: SQS's ProvisionedPollerConfig (MinimumPollers 2..200, MaximumPollers
    # 2..2000; the CloudFormation schema's lower bound of 1 is for Kafka sources).
    "SenderMinimumPollers": (2, 200),
    "SenderMaximumPollers": (2, 2000),
    "SenderUrgentMinimumPollers": (2, 200),
    "SenderUrgentMaximumPollers": (2, 2000),
    # The deadline SLO: a reminder meets it when delivered within this many seconds of its
    # deliver_after. crates/core/src/slo.rs (SloPolicy::parse): 1..=86400, compared below (15).
    "SloWithinSecs": (1, 86400),
    # The sms channel: its quota as ProviderRatePerSecond's; its mapping's ceiling as the lanes'.
    "SmsProviderRatePerSecond": (0.01, 100000),
    "SmsMaximumConcurrency": (2, 1000),
}
for pname, (lo, hi) in sorted(BOUNDS.items()):
    p = parameters.get(pname, {})
    got = (p.get("MinValue"), p.get("MaxValue"))
    check(
        f"parameter {pname} is bounded to [{lo}, {hi}]",
        got[0] is not None and got[1] is not None and float(got[0]) == lo and float(got[1]) == hi,
        f"template {got}",
    )
unbounded = sorted(n for n, p in parameters.items() if p.get("Type") == "Number" and n not in BOUNDS and "AllowedValues" not in p)
check("every Number parameter is bounded (a BOUNDS entry or AllowedValues)", not unbounded, ", ".join(unbounded))


def within(lo, hi, b):
    """[lo, hi] ⊆ the code's interval b."""
    clo, clo_inc, chi, chi_inc = b
    ok_lo = clo is None or (lo >= clo if clo_inc else lo > clo)
    ok_hi = chi is None or (hi <= chi if chi_inc else hi < chi)
    return ok_lo and ok_hi


# Every variable the template sets, from a parameter or a literal, lies within its parser's
# range, and a parameter's bounds are the code's: the same inclusive bounds, and just inside
# an exclusive one (the BOUNDS choice).
def channel_prefix(name):
    """Where a channel's variables are read: CHANNEL_{NAME}_ (crates/lambda/src/config.rs, channel_prefix)."""
    return "CHANNEL_" + name.upper().replace("-", "_") + "_"


def channel_prefixes(env):
    """CHANNEL_{NAME}_ of each channel the CHANNELS variable may declare."""
    names = {n for v in branches(env.get("CHANNELS", "")) if isinstance(v, str) for n in v.split(",") if n}
    return [channel_prefix(n) for n in names]


for fname, f in sorted(functions.items()):
    env = f.get("Properties", {}).get("Environment", {}).get("Variables", {})
    prefixes = channel_prefixes(env)
    for full, choice in sorted((k, v) for k, val in env.items() for v in branches(val)):
        # A channel's variable is parsed as the deployment's of the same name (one parser).
        var = next((full[len(p):] for p in prefixes if full.startswith(p)), full)
        value = choice
        if var not in PARSERS:
            continue
        b = code_bounds(PARSERS[var], var)
        check(f"the bound of {var} is read from {PARSERS[var]}", b is not None)
        if b is None:
            continue
        clo, clo_inc, chi, chi_inc = b
        pname = ref_name(value)
        if pname in parameters:
            p = parameters[pname]
            lo, hi = float(p.get("MinValue", float("-inf"))), float(p.get("MaxValue", float("inf")))
            same_lo = clo is None or (lo == clo if clo_inc else lo > clo)
            same_hi = chi is None or (hi == chi if chi_inc else hi < chi)
            check(
                f"{fname}: {pname} → {var}: the template's bounds are the code's",
                within(lo, hi, b) and same_lo and same_hi,
                f"template [{lo}, {hi}], code {'[' if clo_inc else '('}{clo}, {chi}{']' if chi_inc else ')'} in {PARSERS[var]}",
            )
        else:
            v = float(value)
            check(f"{fname}: {var}={value} is within the code's range", within(v, v, b), f"code {b}")

# The parameters a ProviderKind needs, from the Rules section: {kind: {parameter, …}} for every
# rule "RuleCondition Fn::Equals [ProviderKind, kind]" asserting "Fn::Not [Fn::Equals [param, ""]]".
needed_by_kind = {}
for rule in template.get("Rules", {}).values():
    rc = rule.get("RuleCondition", {}).get("Fn::Equals", [])
    if len(rc) != 2 or {"Ref": "ProviderKind"} not in rc:
        continue
    kind = next(str(x) for x in rc if x != {"Ref": "ProviderKind"})
    for a in rule.get("Assertions", []):
        inner = a.get("Assert", {}).get("Fn::Not", [{}])[0].get("Fn::Equals", [])
        if len(inner) == 2 and "" in inner:
            needed_by_kind.setdefault(kind, set()).add(ref_name(next(x for x in inner if x != "")))

# PROVIDER_URL: the template's pattern accepts only what the sender's prefix check accepts
# (and the empty string only because a rule refuses it with ProviderKind http, the one kind
# that is given PROVIDER_URL).
sender_cfg = rust("crates/sender/src/config.rs")
prefixes = re.findall(r'(?:provider_url|url)\.starts_with\("([^"]+)"\)', sender_cfg)
check("the sender's PROVIDER_URL prefixes are read from crates/sender/src/config.rs", len(prefixes) >= 1, str(prefixes))
url_pattern = parameters.get("ProviderUrl", {}).get("AllowedPattern")
if url_pattern and prefixes:
    rx = re.compile(url_pattern)
    samples = ["https://api.provider.example/v1/messages", "http://127.0.0.1:9/v1/messages", "api.provider.example",
               "ftp://x", "", "https//x", "HTTPS://x", " https://x", "https://"]
    empty_refused = "ProviderUrl" in needed_by_kind.get("http", set())
    lies = [s for s in samples if rx.fullmatch(s) and not s.startswith(tuple(prefixes)) and not (s == "" and empty_refused)]
    refused = [p + "host/path" for p in prefixes if not rx.fullmatch(p + "host/path")]
    check("ProviderUrl's AllowedPattern accepts only URLs the sender accepts", not lies and not refused, f"accepts {lies}, refuses {refused}")
else:
    check("ProviderUrl has an AllowedPattern", False)
def check_pattern(param, claim, good, bad):
    """A parameter's AllowedPattern admits every `good` value and none of the `bad` ones."""
    pattern = parameters.get(param, {}).get("AllowedPattern")
    if not pattern:
        check(f"{param} has an AllowedPattern", False)
        return
    rx = re.compile(pattern)
    check(
        f"{param} {claim}",
        all(rx.fullmatch(s) for s in good) and not any(rx.fullmatch(s) for s in bad),
        f"{[s for s in good if not rx.fullmatch(s)]} refused, {[s for s in bad if rx.fullmatch(s)]} accepted",
    )


check_pattern(
    "ProviderTokenSecretArn",
    "accepts only a complete secret ARN (with its 6-character suffix)",
    ["arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/provider-token-AbC123"],
    ["prod/provider-token", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/provider-token",
     "arn:aws:secretsmanager:eu-west-1:123456789012:secret:", "arn:aws:ssm:eu-west-1:123456789012:parameter/x-AbC123"]
    # empty is admitted only because the http rule refuses it
    + ([] if "ProviderTokenSecretArn" in needed_by_kind.get("http", set()) else [""]),
)

# --- 5. Async invocation, reserved concurrency, log retention --------------------------------
# The reserved concurrency each defaults to: none for the scheduler (overlapping ticks are
# harmless, and the stack deploys on small accounts), one for the redrive (a retried
# synchronous invoke must be throttled, not start a second redrive on the same DLQ).
RESERVED_DEFAULT = {"scheduler": ("0", "none (deploys on small accounts)"),
                    "redrive": ("1", "one at a time (a retried invoke cannot start a second redrive)")}
for binary, (age_lo, age_hi, retries_max) in {"scheduler": (60, 120, 1), "redrive": (60, 21600, 0)}.items():
    p = by_binary.get(binary, (None, {}))[1].get("Properties", {})
    eic = p.get("EventInvokeConfig", {})
    age, retries = eic.get("MaximumEventAgeInSeconds"), eic.get("MaximumRetryAttempts")
    check(
        f"{binary}: EventInvokeConfig (event age {age_lo}..{age_hi} s, at most {retries_max} retries)",
        age is not None and retries is not None and age_lo <= int(age) <= age_hi and int(retries) <= retries_max,
        json.dumps(eic),
    )
    rce = p.get("ReservedConcurrentExecutions")
    cond = rce.get("Fn::If") if isinstance(rce, dict) else None
    pname = ref_name(cond[1]) if isinstance(cond, list) and len(cond) == 3 else None
    param = parameters.get(pname, {})
    want_default, meaning = RESERVED_DEFAULT[binary]
    check(
        f"{binary}: reserved concurrency is a parameter (0 = no reservation, 1 = one) that defaults to {meaning}",
        cond is not None and cond[2] == {"Ref": "AWS::NoValue"} and cond[0] in conditions
        and conditions[cond[0]] == {"Fn::Equals": [{"Ref": pname}, "1"]}
        and str(param.get("Default")) == want_default and [str(v) for v in param.get("AllowedValues", [])] == ["0", "1"],
        f"{json.dumps(rce)}, default {param.get('Default')}",
    )
log_groups = of_type("AWS::Logs::LogGroup")
used = []
for name, f in sorted(functions.items()):
    lg = ref_name(f.get("Properties", {}).get("LoggingConfig", {}).get("LogGroup"))
    used.append(lg)
    props = log_groups.get(lg, {}).get("Properties", {})
    ret = default(props.get("RetentionInDays"))
    check(f"{name} logs to its own log group with a retention", lg in log_groups and ret is not None, f"{lg}, retention {ret}")
check("no two functions share a log group", len(set(used)) == len(used), str(used))
check("log retention defaults to 30 days", str(parameters.get("LogRetentionInDays", {}).get("Default")) == "30")

# --- 6. Least privilege on ledger writes (dynamodb:LeadingKeys) -------------------------------
WRITES = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"}
# The keys each function writes, each read back from the Rust source that builds it.
KEY_SOURCES = {
    "sender": [("reminder:", "crates/aws/src/ledger.rs"), ("limiter:", "crates/aws/src/limiter.rs")],
    # Its audit records, and the `redriven` event into each moved reminder's record.
    "redrive": [("redrive:", "crates/aws/src/control.rs"), ("reminder:", "crates/aws/src/ledger.rs")],
    "scheduler": [("reminder:", "crates/aws/src/ledger.rs")],
}
control = rust("crates/aws/src/control.rs")
OPERATOR_KEYS = [k for k in re.findall(r'PAUSE_PK: &str = "([^"]+)"', control)] + [
    p + "1" for p in re.findall(r'format!\("(audit:pause:)\{', control)
]
check("the operator's keys (pause switch, its audit) are read from crates/aws/src/control.rs", len(OPERATOR_KEYS) == 2, str(OPERATOR_KEYS))


def ledger_writes(f):
    """The Allow statements granting a write action on the ledger table."""
    out = []
    for st in statements(f):
        acts = set(as_list(st.get("Action", [])))
        if st.get("Effect") == "Allow" and acts & WRITES and "LedgerTable" in [ref_name(r) for r in as_list(st.get("Resource", []))]:
            out.append(st)
    return out


def is_pause_trip(st):
    """The sender's one write of the switch: PutItem only (it can set a pause, never lift it:
    that is DeleteItem), on the switch and its audit records and nothing else."""
    patterns = as_list(st.get("Condition", {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys", []))
    return set(as_list(st.get("Action", []))) == {"dynamodb:PutItem"} and sorted(patterns) == sorted(["control:pause", "control:pause#*", "audit:pause:*"])


sender_trips = [st for st in ledger_writes(by_binary.get("sender", (None, {}))[1]) if is_pause_trip(st)]
check(
    "sender: may set the pause switch on a persistent credential refusal (PutItem on control:pause, a channel's control:pause#* and audit:pause:* only; crates/core/src/pause.rs trip)",
    len(sender_trips) == 1 and "fn trip" in rust("crates/core/src/pause.rs"),
)
for binary, (name, f) in sorted((b, v) for b, v in by_binary.items() if b):
    writes = [st for st in ledger_writes(f) if not (binary == "sender" and is_pause_trip(st))]
    # Every key prefix it writes is allowed by one of its write statements (the redrive's two:
    # PutItem of its audit records, UpdateItem of the reminders' outboxes).
    every = [p for st in writes for p in as_list(st.get("Condition", {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys", []))]
    for prefix, rel in KEY_SOURCES.get(binary, []):
        in_code = f'format!("{prefix}{{' in rust(rel)
        check(f"{binary}: writes {prefix}… ({rel}) and a condition allows it",
              in_code and any(fnmatch.fnmatchcase(prefix + "x", p) for p in every), f"in code: {in_code}, patterns {every}")
    for st in writes:
        patterns = st.get("Condition", {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
        check(f"{binary}: its ledger writes are restricted by dynamodb:LeadingKeys (ForAllValues:StringLike)", bool(patterns), json.dumps(st.get("Condition")))
        patterns = as_list(patterns or [])
        allowed = lambda key: any(fnmatch.fnmatchcase(key, p) for p in patterns)
        # Only operators write the pause switch and its audit; only the redrive its records.
        keep_out = OPERATOR_KEYS + ([] if binary == "redrive" else ["redrive:x"])
        forbidden = [k for k in keep_out if allowed(k)]
        check(f"{binary}: may not write {', '.join(keep_out)}", not forbidden, ", ".join(forbidden))
        extra = [p for p in patterns if not any(p == prefix + "*" for prefix, _ in KEY_SOURCES.get(binary, []))]
        check(f"{binary}: LeadingKeys allow nothing but the keys it writes", not extra, ", ".join(extra))
check("the sender has a ledger write statement (claims, settles, limiter)", bool(ledger_writes(by_binary.get("sender", (None, {}))[1])))

# ============================================================================================
# Fair queues, the lanes' fleet, the provider kind (http | ses). Checked per
# scenario (see SCENARIOS): on what each choice of parameters deploys.
# ============================================================================================

# --- 7. The lanes' fleet: MaximumConcurrency or provisioned pollers, never both ----------------
def lane_mappings(params):
    return {ref_name(e.get("Queue")): e for e in (
        resolve(ev["Properties"], params) for ev in sender.get("Events", {}).values() if ev.get("Type") == "SQS")}


mode_param = parameters.get("SenderPollerMode", {})
check(
    "SenderPollerMode is max_concurrency | provisioned, default max_concurrency",
    sorted(map(str, mode_param.get("AllowedValues", []))) == ["max_concurrency", "provisioned"]
    and mode_param.get("Default") == "max_concurrency",
    json.dumps(mode_param),
)
both, neither, wrong_mode = set(), set(), set()
pollers = {}
for ps in SCENARIOS:
    mode = ps.get("SenderPollerMode")
    for lane, e in lane_mappings(ps).items():
        mc = e.get("ScalingConfig", {}).get("MaximumConcurrency")
        ppc = e.get("ProvisionedPollerConfig")
        if mc is not None and ppc is not None:
            both.add(f"{lane} ({mode})")
        if mc is None and ppc is None:
            neither.add(f"{lane} ({mode})")
        if (mode == "provisioned") != (ppc is not None):
            wrong_mode.add(f"{lane} ({mode})")
        if ppc is not None:
            pollers[lane] = (ref_name(ppc.get("MinimumPollers")), ref_name(ppc.get("MaximumPollers")))
check("no mapping has both MaximumConcurrency and ProvisionedPollerConfig (AWS refuses them together)", not both, ", ".join(sorted(both)))
check("every lane's mapping has MaximumConcurrency or ProvisionedPollerConfig, in every scenario", not neither, ", ".join(sorted(neither)))
check("SenderPollerMode decides which one each mapping has", not wrong_mode, ", ".join(sorted(wrong_mode)))
for lane in LANES:
    lo, hi = pollers.get(lane, (None, None))
    lo_p, hi_p = parameters.get(lo, {}), parameters.get(hi, {})
    check(
        f"{lane} mapping (provisioned): MinimumPollers and MaximumPollers are parameters, bounded to SQS's 2..200 and 2..2000",
        lo in parameters and hi in parameters
        and float(lo_p.get("MinValue", 0)) >= 2 and float(lo_p.get("MaxValue", 1e9)) <= 200
        and float(hi_p.get("MinValue", 0)) >= 2 and float(hi_p.get("MaxValue", 1e9)) <= 2000,
        f"{lo}, {hi}",
    )
    check(
        f"{lane} mapping (provisioned): the default MinimumPollers <= the default MaximumPollers",
        lo in parameters and hi in parameters and float(lo_p.get("Default", 0)) <= float(hi_p.get("Default", 0)),
        f"{lo_p.get('Default')} > {hi_p.get('Default')}",
    )
check(
    "each lane's provisioned pollers are its own parameters (pollers reserved for the urgent lane)",
    len(pollers) == len(LANES) and len(set(pollers.values())) == len(LANES) and not (set(pollers["SendQueue"]) & set(pollers["UrgentQueue"])),
    json.dumps(pollers),
)

# --- 8. Fair queues: the quiet groups' age per lane, and the noisy tenants on the dashboard -----
QUIET_AGE = "ApproximateAgeOfOldestMessageInQuietGroups"
quiet_alarms = {}
for name, a in alarms.items():
    ns, m, dims = metric_of(a["Properties"])
    if ns == "AWS/SQS" and m == QUIET_AGE:
        quiet_alarms[ref_name(dims.get("QueueName"))] = a["Properties"]
for lane in LANES:
    q = quiet_alarms.get(lane)
    check(f"a quiet-group age alarm ({QUIET_AGE}) watches {lane}", q is not None)
    if q is not None:
        # A subset of the lane's own delay: paging on it too would page one problem twice.
        check(f"{lane}: the quiet-group age alarm is dashboard-only (no actions)", alarm_class(q) == "dashboard")
for metric in [QUIET_AGE, "ApproximateNumberOfNoisyGroups"]:
    for lane, label in LANES.items():
        check(f"the dashboard shows {metric} for the {label} ({lane})", any(m == metric and q == lane for m, q, _ in rows or []))

# --- 9. The provider kind: each kind gets its own variables and grants, nothing more -----------
kind_param = parameters.get("ProviderKind", {})
check(
    "ProviderKind is http | ses, default http",
    sorted(map(str, kind_param.get("AllowedValues", []))) == ["http", "ses"] and kind_param.get("Default") == "http",
    json.dumps(kind_param),
)
idem_param = parameters.get("ProviderIdempotency", {})
check(
    "ProviderIdempotency is at_most_once | at_least_once, default at_most_once",
    sorted(map(str, idem_param.get("AllowedValues", []))) == ["at_least_once", "at_most_once"] and idem_param.get("Default") == "at_most_once",
    json.dumps(idem_param),
)
for kind, params_needed in [("http", {"ProviderUrl", "ProviderTokenSecretArn"}), ("ses", {"SesFromAddress", "SesIdentityName"})]:
    missing = sorted(params_needed - needed_by_kind.get(kind, set()))
    check(f"a rule refuses ProviderKind {kind} without {', '.join(sorted(params_needed))}", not missing, ", ".join(missing))

# What the sender is given, per kind (the rest must be unset: AWS::NoValue).
KIND_VARS = {
    "http": {"PROVIDER_URL": {"Ref": "ProviderUrl"}, "PROVIDER_TOKEN_SECRET_ARN": {"Ref": "ProviderTokenSecretArn"}},
    "ses": {"SES_FROM_ADDRESS": {"Ref": "SesFromAddress"}},
}
ALWAYS = {"PROVIDER_KIND": {"Ref": "ProviderKind"}, "PROVIDER_IDEMPOTENCY": {"Ref": "ProviderIdempotency"},
          "RECIPIENTS_TABLE": {"Ref": "TenantRecipientsTable"}}
SES_ONLY = {"SES_FROM_ADDRESS", "SES_CONFIGURATION_SET", "SES_TEMPLATE_PREFIX", "PROVIDER_RATE_FROM_ACCOUNT"}
HTTP_ONLY = {"PROVIDER_URL", "PROVIDER_TOKEN_SECRET_ARN"}
SES_PREFIX = "arn:${AWS::Partition}:ses:${AWS::Region}:${AWS::AccountId}:"
# Tracing: Active sends segments with the function's role; X-Ray has no resource types.
XRAY_WRITES = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
env_wrong, iam_wrong = set(), set()
for ps in SCENARIOS:
    kind, cs, acct = ps.get("ProviderKind"), ps.get("SesConfigurationSet", ""), ps.get("SesUseAccountSendRate") == "true"
    tag = f"kind={kind} set={cs or '-'} account_rate={acct}"
    env = resolve(sender.get("Environment", {}).get("Variables", {}), ps)
    for var, want in {**ALWAYS, **KIND_VARS.get(kind, {})}.items():
        if env.get(var) != want:
            env_wrong.add(f"{tag}: {var}={json.dumps(env.get(var))}")
    for var in sorted((SES_ONLY if kind != "ses" else HTTP_ONLY) & set(env)):
        env_wrong.add(f"{tag}: {var} is set")
    # The stack's own prefix (SesTemplatePrefix): templates are the account's, so two stacks
    # sharing one would render and send each other's.
    prefix = "${SesTemplatePrefix}"
    if kind == "ses":
        if env.get("SES_TEMPLATE_PREFIX") != {"Ref": "SesTemplatePrefix"}:
            env_wrong.add(f"{tag}: SES_TEMPLATE_PREFIX={json.dumps(env.get('SES_TEMPLATE_PREFIX'))} (want !Ref SesTemplatePrefix)")
        if (env.get("SES_CONFIGURATION_SET") == {"Ref": "SesConfigurationSet"}) != bool(cs):
            env_wrong.add(f"{tag}: SES_CONFIGURATION_SET={json.dumps(env.get('SES_CONFIGURATION_SET'))}")
        if (env.get("PROVIDER_RATE_FROM_ACCOUNT") == "true") != acct:
            env_wrong.add(f"{tag}: PROVIDER_RATE_FROM_ACCOUNT={json.dumps(env.get('PROVIDER_RATE_FROM_ACCOUNT'))}")

    # The sender's SES and secret grants for this scenario.
    sts = statements(functions.get("SenderFunction", {}), ps)
    ses_sts = [st for st in sts if any(str(a).startswith("ses:") for a in as_list(st.get("Action", [])))]
    for st in sts:
        acts = set(as_list(st.get("Action", [])))
        if "*" in as_list(st.get("Resource", [])) and acts != {"ses:GetAccount"} and acts != XRAY_WRITES:
            iam_wrong.add(f"{tag}: Resource * for {sorted(acts)}")
    for st in ses_sts:
        acts = set(as_list(st.get("Action", [])))
        if not acts <= {"ses:SendEmail", "ses:GetAccount"} or len(acts) != 1:
            iam_wrong.add(f"{tag}: SES actions {sorted(acts)} (only ses:SendEmail, and ses:GetAccount alone)")
    send = [st for st in ses_sts if "ses:SendEmail" in as_list(st.get("Action", []))]
    get_account = [st for st in ses_sts if "ses:GetAccount" in as_list(st.get("Action", []))]
    secret = [st for st in sts if "secretsmanager:GetSecretValue" in as_list(st.get("Action", []))]
    sms_secret = ["SmsProviderTokenSecretArn"] if cond_value(conditions["HasSms"], ps) else []
    if kind == "ses":
        resources = sorted((r.get("Fn::Sub") if isinstance(r, dict) else r) for st in send for r in as_list(st.get("Resource", [])))
        want = sorted([SES_PREFIX + "identity/${SesIdentityName}", SES_PREFIX + f"template/{prefix}*"]
                      + ([SES_PREFIX + "configuration-set/${SesConfigurationSet}"] if cs else []))
        if len(send) != 1 or resources != want:
            iam_wrong.add(f"{tag}: ses:SendEmail on {resources}, want {want}")
        if bool(get_account) != acct or any(as_list(st.get("Resource")) != ["*"] for st in get_account):
            iam_wrong.add(f"{tag}: ses:GetAccount {json.dumps(get_account)} (only with PROVIDER_RATE_FROM_ACCOUNT, on *)")
        # The sms channel's token is the one secret an SES email channel may sit beside.
        if [ref_name(r) for st in secret for r in as_list(st.get("Resource", []))] != sms_secret:
            iam_wrong.add(f"{tag}: the provider token is readable without an http provider")
    else:
        if ses_sts:
            iam_wrong.add(f"{tag}: SES actions without ProviderKind ses")
        if [ref_name(r) for st in secret for r in as_list(st.get("Resource", []))] != ["ProviderTokenSecretArn"] + sms_secret:
            iam_wrong.add(f"{tag}: secretsmanager:GetSecretValue on {json.dumps(secret)}")
check("sender: each provider kind gets exactly its variables (the other kind's are unset)", not env_wrong, "; ".join(sorted(env_wrong)))

# The channels (docs/configuration.md#channels), per scenario: a channel reads nothing from the
# top-level variables, so each declared channel must be given in full what its kind needs
# (crates/sender/src/config.rs, channel_configs: PROVIDER_KIND and PROVIDER_RATE_PER_SEC
# required, then the kind's own), the email channel exactly the provider's own values, and the
# scheduler and the redrive function the same channels and channel queues as the sender.
CHANNEL_REQUIRED = {"PROVIDER_KIND", "PROVIDER_RATE_PER_SEC"}
channel_wrong, channels_seen = set(), set()
for ps in SCENARIOS:
    tag = f"kind={ps.get('ProviderKind')} sms={'yes' if ps.get('SmsProviderUrl') else 'no'}"
    envs = {f.get("Metadata", {}).get("BuildProperties", {}).get("Binary"):
            resolve(f.get("Properties", {}).get("Environment", {}).get("Variables", {}), ps) for f in functions.values()}
    senv = envs.get("sender", {})
    names = [n for n in str(senv.get("CHANNELS", "")).split(",") if n]
    channels_seen.add(tuple(names))
    for n in names:
        pre = channel_prefix(n)
        own = {k[len(pre):]: v for k, v in senv.items() if k.startswith(pre)}
        kind = own.get("PROVIDER_KIND")
        kind = ps.get("ProviderKind") if kind == {"Ref": "ProviderKind"} else kind
        need = CHANNEL_REQUIRED | (set(KIND_VARS.get(kind, {})) | ({"SES_TEMPLATE_PREFIX"} if kind == "ses" else set()))
        missing = sorted(need - set(own))
        if missing:
            channel_wrong.add(f"{tag}: {n} lacks {', '.join(pre + m for m in missing)}")
        wrong_kind = sorted((SES_ONLY if kind != "ses" else HTTP_ONLY) & set(own))
        if wrong_kind:
            channel_wrong.add(f"{tag}: {n} ({kind}) is given {', '.join(pre + m for m in wrong_kind)}")
        if n == "email":
            differ = sorted(k for k, v in own.items() if k in senv and senv[k] != v)
            if differ:
                channel_wrong.add(f"{tag}: email's {', '.join(pre + k for k in differ)} differ from the provider's own")
    queues_of = {b: {k: v for k, v in e.items() if k.startswith("CHANNEL_") and k.endswith("_QUEUE_URL")} for b, e in envs.items()}
    for other in ["scheduler", "redrive"]:
        oenv = envs.get(other, {})
        if [n for n in str(oenv.get("CHANNELS", "")).split(",") if n] != names:
            channel_wrong.add(f"{tag}: {other} CHANNELS={oenv.get('CHANNELS')!r}, the sender's {senv.get('CHANNELS')!r}")
        if queues_of.get(other) != queues_of.get("sender"):
            channel_wrong.add(f"{tag}: {other}'s channel queues {queues_of.get(other)} are not the sender's {queues_of.get('sender')}")
    sched = envs.get("scheduler", {})
    if names and "PROVIDER_RATE_PER_SEC" not in sched:
        unrated = [n for n in names if channel_prefix(n) + "PROVIDER_RATE_PER_SEC" not in sched]
        if unrated:
            channel_wrong.add(f"{tag}: the scheduler has no fleet rate and no rate for {', '.join(unrated)} (it would run at 97/s)")
check("the channels: each declared channel is given in full what its kind needs, email the provider's own values, "
      "the scheduler and the redrive function the sender's channels and channel queues",
      not channel_wrong, "; ".join(sorted(channel_wrong)))
check("the scenarios deploy both one provider and the two channels", channels_seen == {(), ("email", "sms")}, str(channels_seen))
check(
    "sender: SES IAM is scoped (ses:SendEmail on the identity, the template prefix and the set; ses:GetAccount alone on *; "
    "no other Resource * but X-Ray's two writes)",
    not iam_wrong, "; ".join(sorted(iam_wrong)),
)
other_ses = sorted(n for n, f in functions.items() if n != "SenderFunction"
                   and any(str(a).startswith("ses:") for st in statements(f) for a in as_list(st.get("Action", []))))
check("no function but the sender has an SES permission", not other_ses, ", ".join(other_ses))
check_pattern(
    "SesIdentityName",
    "admits a domain or an address, never a wildcard (the grant stays one identity)",
    ["", "example.com", "mail.example.co.uk", "noreply@example.com"],
    ["*", "example.*", "*.example.com", "*@example.com", "example.com/x", "arn:aws:ses:eu-west-1:123456789012:identity/x"],
)

# --- 10. The recipients table: addresses readable by the sender only, by key -------------------
RECIPIENTS = "TenantRecipientsTable"
recipients = tables.get(RECIPIENTS, {}).get("Properties", {})
# The key the adapter reads and writes (crates/aws/src/recipients.rs TENANT, KEY): the pair, so
# one tenant's reference can never reach another tenant's address.
recipients_src = rust("crates/aws/src/recipients.rs")
r_tenant = (re.findall(r'pub const TENANT: &str = "([^"]+)"', recipients_src) or [None])[0]
r_key = (re.findall(r'pub const KEY: &str = "([^"]+)"', recipients_src) or [None])[0]
check(
    f"the recipients table is keyed by ({r_tenant}, {r_key}), both S, as the adapter reads it",
    r_tenant is not None and r_key is not None
    and recipients.get("KeySchema") == [{"AttributeName": r_tenant, "KeyType": "HASH"},
                                        {"AttributeName": r_key, "KeyType": "RANGE"}]
    and sorted(recipients.get("AttributeDefinitions", []), key=lambda d: d["AttributeName"])
    == sorted([{"AttributeName": r_tenant, "AttributeType": "S"}, {"AttributeName": r_key, "AttributeType": "S"}],
              key=lambda d: d["AttributeName"]),
    json.dumps(recipients.get("KeySchema")),
)
check("no recipients table keyed by recipient_ref alone remains in the template",
      "RecipientsTable" not in template["Resources"])
check("the recipients table is encrypted at rest", recipients.get("SSESpecification", {}).get("SSEEnabled") is True)


def key_builder(text, fn):
    """"prefix:*" of `fn name(…) -> String { format!("prefix:{…}") }` in `text`, else None."""
    m = re.search(r"fn " + fn + r"\([^)]*\) -> String \{\s*format!\(\"([a-z_]+:)\{", text)
    return m.group(1) + "*" if m else None


def mentions(node, logical_id):
    """Whether a policy resource or variable names `logical_id` (Ref, GetAtt or ${…} in a Sub)."""
    text = json.dumps(node)
    return ref_name(node) == logical_id or f'"{logical_id}"' in text or "${" + logical_id in text


for name, f in sorted(functions.items()):
    binary = f.get("Metadata", {}).get("BuildProperties", {}).get("Binary")
    acts = sorted({a for st in statements(f) for a in as_list(st.get("Action", []))
                   if any(mentions(r, RECIPIENTS) for r in as_list(st.get("Resource", [])))})
    # The sender reads an address at the call; the ingest writes a command's `email`.
    want = {"sender": ["dynamodb:GetItem"], "ingest": ["dynamodb:BatchWriteItem"]}.get(binary, [])
    check(f"{binary}: recipients table access is {want or 'none'}", acts == want, ", ".join(acts))
    env_all = [resolve(f.get("Properties", {}).get("Environment", {}).get("Variables", {}), ps) for ps in SCENARIOS]
    given = sorted({k for env in env_all for k, v in env.items() if mentions(v, RECIPIENTS)})
    reads = binary in ("sender", "ingest")
    check(f"{binary}: {'is given RECIPIENTS_TABLE' if reads else 'is not given the recipients table'}",
          given == (["RECIPIENTS_TABLE"] if reads else []), ", ".join(given))
check("an output gives the recipients table's name", any(ref_name(o.get("Value")) == RECIPIENTS for o in outputs.values()))
# The sender reads an address only with ProviderKind ses: an http stack is granted no read of it.
reads_by_kind = {}
for ps in SCENARIOS:
    sts = statements(functions.get("SenderFunction", {}), ps)
    got = any(any(mentions(r, RECIPIENTS) for r in as_list(st.get("Resource", []))) for st in sts)
    reads_by_kind.setdefault(ps.get("ProviderKind"), set()).add(got)
check("the sender may read the recipients table with ProviderKind ses, and not with http",
      reads_by_kind.get("ses") == {True} and reads_by_kind.get("http") == {False}, json.dumps({k: sorted(v) for k, v in reads_by_kind.items()}))

# --- The renewals table's item grants, by key prefix -------------------------------------------
# Its rows are `renewal:{tenant}:{renewal}` (renewals.rs renewal_key()); every function's item
# action on them is conditioned on that prefix, so no grant reads or writes a key of another
# shape, but for the scheduler's watermark (below), granted by its exact key. Table-level
# (DescribeTable) and index (Query) grants carry no item key.
renewals_src = rust("crates/aws/src/renewals.rs")
renewal_prefix = key_builder(renewals_src, "renewal_key")
_wm = re.search(r'const WATERMARK_KEY: &str = "([^"]+)";', renewals_src)
wm_key = _wm.group(1) if _wm else None
WATERMARK_ONLY = {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [wm_key or "?"]}}
ITEM_ACTIONS = {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
loose = []
for name, f in sorted(functions.items()):
    for st in statements(f):
        if st.get("Effect") != "Allow" or "RenewalsTable" not in [ref_name(r) for r in as_list(st.get("Resource", []))]:
            continue
        acts = set(as_list(st.get("Action", [])))
        keys = st.get("Condition", {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
        if st.get("Condition") == WATERMARK_ONLY:
            continue  # the scheduler's watermark, checked below
        if acts & ITEM_ACTIONS and (as_list(keys) != [renewal_prefix] or len(st.get("Condition", {})) != 1):
            loose.append(f"{name}: {sorted(acts & ITEM_ACTIONS)} {json.dumps(st.get('Condition'))}")
check(f"every item grant on the renewals table is under {renewal_prefix} (dynamodb:LeadingKeys), or is the watermark's",
      renewal_prefix == "renewal:*" and not loose, "; ".join(loose))
# Beside the rows, one item: the scheduler's watermark (renewals.rs WATERMARK_KEY), read and
# advanced by every tick (core scheduler.rs watermark()/advance_watermark(), failing the tick if
# refused). Found by review: a renewal:* grant alone denied it.
wm_grants = {}
for name, f in sorted(functions.items()):
    for st in statements(f):
        if st.get("Effect") != "Allow" or "RenewalsTable" not in [ref_name(r) for r in as_list(st.get("Resource", []))]:
            continue
        keys = as_list(st.get("Condition", {}).get("ForAllValues:StringEquals", {}).get("dynamodb:LeadingKeys"))
        if wm_key in keys:
            wm_grants.setdefault(name, set()).update(set(as_list(st.get("Action", []))) & ITEM_ACTIONS)
check(f"the scheduler may GetItem and UpdateItem the watermark ({wm_key}), exactly that key, and no other function any",
      wm_key is not None and wm_grants == {"SchedulerFunction": {"dynamodb:GetItem", "dynamodb:UpdateItem"}},
      json.dumps({k: sorted(v) for k, v in wm_grants.items()}))

# The ledger's sparse `dead` index: the name, keys and projection `punctual status` queries
# (crates/aws/src/ledger.rs DEAD_INDEX and its attributes), so status never needs a scan.
ledger_src = rust("crates/aws/src/ledger.rs")
dead_name = (re.findall(r'pub const DEAD_INDEX: &str = "([^"]+)"', ledger_src) or [None])[0]
ledger_props = template["Resources"].get("LedgerTable", {}).get("Properties", {})
dead = [g for g in ledger_props.get("GlobalSecondaryIndexes", []) if g.get("IndexName") == dead_name]
keys = [(k.get("AttributeName"), k.get("KeyType")) for k in (dead[0].get("KeySchema", []) if dead else [])]
check(f"LedgerTable has the sparse index {dead_name!r} status queries", bool(dead_name) and len(dead) == 1, str(dead_name))
check("its keys are dead_reason (HASH) and deliver_by_ms (RANGE), as the code writes them",
      keys == [("dead_reason", "HASH"), ("deliver_by_ms", "RANGE")] and "dead_reason = :r AND deliver_by_ms >= :since" in ledger_src,
      str(keys))
check("it projects keys only (status counts; nothing else is read from it)",
      bool(dead) and dead[0].get("Projection", {}).get("ProjectionType") == "KEYS_ONLY")
types = {a.get("AttributeName"): a.get("AttributeType") for a in ledger_props.get("AttributeDefinitions", [])}
check("dead_reason is a string and deliver_by_ms a number", types.get("dead_reason") == "S" and types.get("deliver_by_ms") == "N", str(types))

# ============================================================================================
# A deadline SLO over the due population (docs/design.md#the-deadline-slo-and-reconciliation). The template's SLO alarms, dashboard and
# Contributor Insights rule read exactly the metrics the code emits: names and the tenant
# property from crates/core/src/metrics.rs, emitters as below, the stack's namespace, the one
# dimension Function. The by_day_channel index (DAY_INDEX) is checked against crates/aws/src/renewals.rs.
# ============================================================================================

# --- 11. The metrics: names from the code, and who emits each ---------------------------------
emf_src = rust("crates/core/src/metrics.rs")
SLO_CONSTS = ["SLO_DUE", "SLO_MET", "SLO_BREACHED", "SLO_EXCLUDED"]
slo_names = {c: (re.findall(r'pub const ' + c + r': &str = "([^"]+)";', emf_src) or [None])[0] for c in SLO_CONSTS}
check("the SLO metric names are read from crates/core/src/metrics.rs (SLO_DUE, SLO_MET, SLO_BREACHED, SLO_EXCLUDED)",
      all(slo_names.values()) and len(set(slo_names.values())) == len(SLO_CONSTS), json.dumps(slo_names))
tenant_prop = (re.findall(r'pub const TENANT_PROPERTY: &str = "([^"]+)";', emf_src) or [None])[0]
check("the SLO documents' tenant property is read from crates/core/src/metrics.rs (TENANT_PROPERTY)", bool(tenant_prop), str(tenant_prop))
DUE, MET, BREACHED, EXCLUDED = (slo_names[c] or f"<{c}>" for c in SLO_CONSTS)
# Which function emits each (dimension Function): the due population is counted at release, its
# outcome by the sender, and a reminder the scheduler finds expired is a breach of both.
EMITTERS = {DUE: {"scheduler"}, MET: {"sender"}, BREACHED: {"sender", "scheduler"}, EXCLUDED: {"sender"}}


def slo_metric_wrong(name, namespace, dims, want_namespace):
    """What is wrong with one reference to an SLO metric ("" when it is what the code emits)."""
    if name not in EMITTERS:
        return f"{name}: not a metric metrics.rs emits"
    if namespace != want_namespace:
        return f"{name}: namespace {json.dumps(namespace)}"
    if set(dims) != {"Function"} or dims["Function"] not in EMITTERS[name]:
        return f"{name}: dimensions {json.dumps(dims)} (emitted with Function = {' | '.join(sorted(EMITTERS[name]))} only)"
    return ""


# --- A small evaluator of the metric math the SLO uses (IF, FILL, + - * /, comparisons) --------
# Expressions are evaluated on sample counts, so a check states what an expression computes
# (the error ratio, the burn rate), not how it is spelled. None is a missing datapoint.
class MathValue:
    def __init__(self, v):
        self.v = v

    def _op(self, other, f):
        b = other.v if isinstance(other, MathValue) else other
        return MathValue(None if self.v is None or b is None else f(self.v, b))

    def _rop(self, other, f):
        return MathValue(other)._op(self, f)

    __add__ = lambda s, o: s._op(o, lambda a, b: a + b)
    __radd__ = lambda s, o: s._rop(o, lambda a, b: a + b)
    __sub__ = lambda s, o: s._op(o, lambda a, b: a - b)
    __rsub__ = lambda s, o: s._rop(o, lambda a, b: a - b)
    __mul__ = lambda s, o: s._op(o, lambda a, b: a * b)
    __rmul__ = lambda s, o: s._rop(o, lambda a, b: a * b)
    __truediv__ = lambda s, o: s._op(o, lambda a, b: a / b if b else float("nan"))
    __rtruediv__ = lambda s, o: s._rop(o, lambda a, b: a / b if b else float("nan"))
    __gt__ = lambda s, o: s._op(o, lambda a, b: float(a > b))
    __ge__ = lambda s, o: s._op(o, lambda a, b: float(a >= b))
    __lt__ = lambda s, o: s._op(o, lambda a, b: float(a < b))
    __le__ = lambda s, o: s._op(o, lambda a, b: float(a <= b))
    __neg__ = lambda s: MathValue(None if s.v is None else -s.v)


def math_if(c, a, b):
    c = c if isinstance(c, MathValue) else MathValue(c)
    return MathValue(None) if c.v is None else (a if c.v else b)


def math_fill(x, c):
    return MathValue(c) if x.v is None else x


def math_eval(queries, target, counts, slo_target):
    """The value of query `target`. queries: {id: ("expr", text) | ("metric", name, function, period)};
    counts: {(name, function): value}; ${SloTarget} in an expression is `slo_target`."""
    cache = {}

    def val(i, depth=0):
        if i in cache:
            return cache[i]
        if depth > 20:
            raise ValueError("a cycle")
        q = queries[i]
        if q[0] == "metric":
            r = MathValue(counts.get((q[1], q[2])))
        else:
            text = q[1].replace("${SloTarget}", slo_target)
            if not re.fullmatch(r"[\w\s.+\-*/<>=(),]*", text):
                raise ValueError(f"unsupported syntax in {text}")
            env = {n: val(n, depth + 1) for n in set(re.findall(r"[A-Za-z_]\w*", text)) - {"IF", "FILL"}}
            r = eval(text, {"__builtins__": {}, "IF": math_if, "FILL": math_fill}, env)  # noqa: S307 (the template's own text)
            r = r if isinstance(r, MathValue) else MathValue(r)
        cache[i] = r
        return r

    return val(target).v


def leaves(queries, target, depth=0):
    """The metric queries an expression reads, transitively."""
    q = queries.get(target)
    if q is None or depth > 20:
        return set()
    if q[0] == "metric":
        return {target}
    return set().union(*[leaves(queries, n, depth + 1) for n in set(re.findall(r"[A-Za-z_]\w*", q[1])) - {"IF", "FILL"}])


# Sample counts (None = not written this period) and the error ratio each must give: the
# breaches of both emitters over the population (due − excluded); SloMet is not in it; a
# missing series counts 0 (FILL); an empty population is no burn.
SLO_SAMPLES = [
    ({(BREACHED, "sender"): 20, (BREACHED, "scheduler"): 10, (MET, "sender"): 970, (DUE, "scheduler"): 5000, (EXCLUDED, "sender"): 7}, 30 / 1000),
    ({(BREACHED, "scheduler"): 400}, 1.0),
    ({(BREACHED, "sender"): 40, (MET, "sender"): 360, (DUE, "scheduler"): 40}, 40 / 400),
    ({}, 0.0),
    # Below every window's minimum volume: one late reminder of three at night is no burn.
    ({(BREACHED, "sender"): 1, (MET, "sender"): 2}, 0.0),
    ({(BREACHED, "sender"): 19}, 0.0),
]
TARGETS = ["0.99", "0.9995"]


# The same counts without a minimum volume (the dashboard's attainment and budget show any
# population, however small): the plain ratio errors / (met + errors).
SLO_SAMPLES_RAW = [
    (counts, (counts.get((BREACHED, "sender"), 0) + counts.get((BREACHED, "scheduler"), 0))
     / max(1, counts.get((BREACHED, "sender"), 0) + counts.get((BREACHED, "scheduler"), 0) + counts.get((MET, "sender"), 0)))
    for counts, _ in SLO_SAMPLES
]


def computes(queries, target, want, samples=None):
    """Whether `target` computes want(ratio, slo_target) on every sample; (ok, first mismatch)."""
    for counts, ratio in samples or SLO_SAMPLES:
        for t in TARGETS:
            try:
                got = math_eval(queries, target, counts, t)
            except Exception as e:  # an unknown id, a syntax the evaluator refuses, a cycle
                return False, f"{target}: {e}"
            w = want(ratio, float(t))
            if got is None or got != got or abs(got - w) > 1e-9 * max(1.0, abs(w)):  # got != got: NaN (x / 0)
                return False, f"{target} = {got} for {json.dumps({f'{k[0]}/{k[1]}': v for k, v in counts.items()})}, target {t}; want {w}"
    return True, ""


BURN = lambda ratio, t: ratio / (1 - t)

# --- 12. The burn-rate alarms: two windows each, ANDed, thresholds of the SRE workbook ----------
# {composite: (threshold, {long window, short window})}: a fast burn of 14.4 (2 % of a 30-day
# budget in an hour) over 1 h and 5 min; a slow burn of 6 (5 % in 6 h) over 6 h and 30 min.
# Every metric the code emits (a `pub const NAME: &str = "Metric"` of a metrics module) is read
# by the template, by an alarm or the dashboard (found by review: 23 were read by neither, the
# scheduler's failed ticks and the sender's possible double effects among them).
emitted = set()
for f in sorted((ROOT / "crates").rglob("*.rs")):
    rel = str(f.relative_to(ROOT))
    if "/tests/" in rel or "testing" in rel or not re.search(r"metrics\.rs$|ingest/src/handler\.rs$", rel):
        continue
    emitted |= set(re.findall(r'pub const [A-Z_0-9]+: &str = "([A-Z][A-Za-z0-9]+)";', f.read_text()))
template_text = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "infra" / "template.yaml").read_text()
unread = sorted(n for n in emitted if not re.search(rf'\b{n}\b', template_text))
check("every metric the code emits is read by an alarm or the dashboard", len(emitted) > 40 and not unread,
      f"{len(emitted)} emitted; unread: {', '.join(unread)}")

# The alarm counts docs/deployment.md gives are the template's (found by review: the page said
# 32 alarms and 3 composites when the template had 41 and 3).
deployment_md = (ROOT / "docs" / "deployment.md").read_text() if (ROOT / "docs" / "deployment.md").exists() else ""
said = re.search(r"(\d+) alarms and\s+(\d+) composite alarms", deployment_md)
check("docs/deployment.md counts the template's alarms and composite alarms",
      said is not None and (int(said.group(1)), int(said.group(2))) == (len(alarms), len(composites)),
      f"says {said.groups() if said else None}, the template has {len(alarms)} and {len(composites)}")

# One page per incident (docs/operations.md#one-page-per-incident; the drill bars more than
# MAX_NOTIFICATIONS per incident): every page is a cause (a component of CausePagingAlarm) or a
# consequence held by an actions suppressor, so a new page alarm must be placed in one or the
# other; a held consequence is a composite with both periods, and its suppressor is a composite
# of this stack without actions (it pages nobody itself).
CONSEQUENCES = {"DlqNewLettersAlarm": "CausePagingAlarm", "ReleasedWorkWaitingAlarm": "CausePagingAlarm",
                "OldestDueUndeliveredAlarm": "CausePagingAlarm", "SloFastBurnAlarm": "SymptomPagingAlarm"}
# Pages of their own kind, outside the delivery's causes: the producers' queue (its age follows
# its stall, two notifications at most) .
APART = {"CommandsOldestMessageAgeAlarm", "CommandsQueueStalledAlarm"}
causes = set(components_of(composites.get("CausePagingAlarm", {})))
pages = {n for n, a in everything.items() if alarm_class(a["Properties"]) == "page"}
unplaced = sorted(pages - causes - set(CONSEQUENCES) - APART)
check("every page is a cause (in CausePagingAlarm) or a consequence its actions suppressor holds",
      bool(causes) and not unplaced, ", ".join(unplaced))
check("no consequence is also a cause", not (causes & set(CONSEQUENCES)), ", ".join(sorted(causes & set(CONSEQUENCES))))
for name, by in CONSEQUENCES.items():
    p = composites.get(name, {}).get("Properties", {})
    held = ref_name(p.get("ActionsSuppressor")) if p.get("ActionsSuppressor") is not None else None
    check(f"{name}: a composite whose actions {by} holds, with a wait and an extension period",
          held == by and isinstance(p.get("ActionsSuppressorWaitPeriod"), int)
          and isinstance(p.get("ActionsSuppressorExtensionPeriod"), int), f"{held}")
    # A wait the first page of an incident paged only by it can afford (the drill's 300 s bar
    # minus the 240 s a page takes at most).
    check(f"{name}: its wait for a cause is at most 120 s", (p.get("ActionsSuppressorWaitPeriod") or 0) <= 120,
          str(p.get("ActionsSuppressorWaitPeriod")))
for name in set(CONSEQUENCES.values()):
    p = composites.get(name, {}).get("Properties", {})
    check(f"{name}: a composite of this stack that notifies nobody", name in composites and "AlarmActions" not in p)
symptoms = set(components_of(composites.get("SymptomPagingAlarm", {})))
check("SymptomPagingAlarm reads CausePagingAlarm and the other consequences' signals",
      {"CausePagingAlarm", "DlqNewLettersSignalAlarm", "ReleasedWorkWaitingSignalAlarm", "OldestDueUndeliveredSignalAlarm"} <= symptoms,
      ", ".join(sorted(symptoms)))

BURN_ALARMS = {"SloFastBurnAlarm": (14.4, {3600, 300}), "SloSlowBurnAlarm": (6.0, {21600, 1800})}


def alarm_queries(p):
    """({id: query} as math_eval takes them, [ids with ReturnData], [(name, namespace, dims, stat)])."""
    queries, returned, refs = {}, [], []
    for m in p.get("Metrics", []):
        if "MetricStat" in m:
            ms = m["MetricStat"]
            met = ms.get("Metric", {})
            dims = {d.get("Name"): d.get("Value") for d in met.get("Dimensions", [])}
            queries[m["Id"]] = ("metric", met.get("MetricName"), dims.get("Function"), int(ms.get("Period", 0)))
            refs.append((met.get("MetricName"), met.get("Namespace"), dims, ms.get("Stat")))
        else:
            e = m.get("Expression")
            queries[m["Id"]] = ("expr", e.get("Fn::Sub") if isinstance(e, dict) else str(e))
        if m.get("ReturnData", True):
            returned.append(m["Id"])
    return queries, returned, refs


for cname, (threshold, windows) in BURN_ALARMS.items():
    c = composites.get(cname, {}).get("Properties", {})
    rule = str(alarm_rule(composites.get(cname, {})))
    parts = re.fullmatch(r'ALARM\("\$\{(\w+)\}"\) AND ALARM\("\$\{(\w+)\}"\)', rule)
    check(f"{cname}: a composite alarm that is ALARM(one window) AND ALARM(the other), nothing else", cname in composites and parts, rule)
    kids = list(parts.groups()) if parts else []
    seen_windows, wrong = set(), []
    for kid in kids:
        p = alarms.get(kid, {}).get("Properties", {})
        queries, returned, refs = alarm_queries(p)
        periods = {q[3] for q in queries.values() if q[0] == "metric"}
        seen_windows |= periods
        if len(periods) != 1:
            wrong.append(f"{kid}: periods {sorted(periods)} (one window per alarm)")
        if (float(p.get("Threshold", -1)), p.get("ComparisonOperator")) != (threshold, "GreaterThanThreshold"):
            wrong.append(f"{kid}: {p.get('ComparisonOperator')} {p.get('Threshold')}")
        if int(p.get("EvaluationPeriods", 0)) != 1 or int(p.get("DatapointsToAlarm", 1)) != 1:
            wrong.append(f"{kid}: {p.get('DatapointsToAlarm')} of {p.get('EvaluationPeriods')} (one window = one period)")
    check(f"{cname}: burn rate > {threshold:g} over {' and '.join(f'{w // 60} min' if w < 3600 else f'{w // 3600} h' for w in sorted(windows, reverse=True))}",
          len(kids) == 2 and seen_windows == windows and not wrong, "; ".join(wrong) + f" windows {sorted(seen_windows)}")
    want_class = "page" if cname == "SloFastBurnAlarm" else "ticket"
    check(f"{cname} is a {want_class} with a runbook section",
          alarm_class(c) == want_class and "Runbook: docs/operations.md#" in str(c.get("AlarmDescription")),
          str(c.get("AlarmDescription")))
    for kid in kids:
        p = alarms.get(kid, {}).get("Properties", {})
        queries, returned, refs = alarm_queries(p)
        check(f"{kid}: one expression is returned (the burn rate)", len(returned) == 1 and queries.get(returned[0], ("",))[0] == "expr", str(returned))
        if len(returned) != 1:
            continue
        ok, why = computes(queries, returned[0], BURN)
        check(f"{kid}: it computes (SloBreached{{sender}} + SloBreached{{scheduler}}) / (SloMet + both) / (1 − SloTarget): one population, FILLed, 0 below a minimum volume", ok, why)
        texts = " ".join(q[1] for q in queries.values() if q[0] == "expr")
        check(f"{kid}: the expression divides by (1 - ${{SloTarget}}), SloTarget substituted by !Sub",
              re.search(r"/\s*\(\s*1\s*-\s*\$\{SloTarget\}\s*\)", texts)
              and any(isinstance(m.get("Expression"), dict) and "${SloTarget}" in m["Expression"].get("Fn::Sub", "") for m in p.get("Metrics", [])),
              texts)
        bad = [w for w in (slo_metric_wrong(n, ns, d, NAMESPACE) for n, ns, d, _ in refs) if w]
        bad += [f"{n}: {st}" for n, _, _, st in refs if st != "Sum"]
        pairs = sorted({(q[1], q[2]) for q in queries.values() if q[0] == "metric"})
        want_pairs = sorted({(n, f) for n in [BREACHED, MET] for f in EMITTERS[n]})
        check(f"{kid}: reads SloBreached (sender, scheduler) and SloMet (sender): names, namespace and dimensions as emitted, Sum",
              not bad and pairs == want_pairs, "; ".join(bad) + f" reads {pairs}")

# Any alarm at all that reads an SLO metric reads it as emitted (catches a typo'd name too).
slo_refs = []
for name, a in sorted(alarms.items()):
    p = a["Properties"]
    refs = [(p.get("MetricName"), p.get("Namespace"), metric_of(p)[2])] if "MetricName" in p else []
    refs += [(n, ns, d) for n, ns, d, _ in alarm_queries(p)[2]]
    slo_refs += [f"{name}: {w}" for w in (slo_metric_wrong(n, ns, d, NAMESPACE) for n, ns, d in refs if str(n).startswith("Slo")) if w]
check("every alarm that reads an Slo* metric reads one metrics.rs emits, in the stack's namespace, with its emitters' Function", not slo_refs, "; ".join(slo_refs))


# --- 13. The dashboard's SLO widgets ------------------------------------------------------------
def dashboard_widgets():
    """The dashboard's widgets, with ${SloTarget} kept in expressions (None when unreadable)."""
    text = dash_text.replace("${SloTarget}", "__SLO_TARGET__")
    text = re.sub(r'(?<!")\$\{[^}]+\}(?!")', "0", text)
    try:
        return json.loads(text.replace("__SLO_TARGET__", "${SloTarget}"))["widgets"]
    except (ValueError, KeyError, TypeError):
        return None


def widget_queries(w):
    """({id: query}, [visible expression ids], [(name, namespace, dims, stat)]) of a metric widget."""
    props = w.get("properties", {})
    queries, shown, refs, prev = {}, [], [], []
    for row in props.get("metrics", []):
        opts = row[-1] if row and isinstance(row[-1], dict) else {}
        dims = [x for x in row if not isinstance(x, dict)]
        dims = [prev[i] if x == "." and i < len(prev) else x for i, x in enumerate(dims)]
        if dims:
            prev = dims
            d = dict(zip(dims[2::2], dims[3::2]))
            refs.append((dims[1], dims[0], d, opts.get("stat", props.get("stat"))))
            if "id" in opts:
                queries[opts["id"]] = ("metric", dims[1], d.get("Function"), int(opts.get("period", props.get("period", 300))))
        elif "expression" in opts:
            queries[opts.get("id", f"e{len(queries)}")] = ("expr", opts["expression"])
            if opts.get("visible", True):
                shown.append(opts.get("id", f"e{len(queries) - 1}"))
    return queries, shown, refs


widgets = dashboard_widgets() or []
check("the dashboard body parses (with the SLO widgets)", dashboard_widgets() is not None)


def widget(title):
    return next((w for w in widgets if title in str(w.get("properties", {}).get("title", ""))), None)


SLO_WIDGETS = {
    "Deadline SLO attainment": ("1 − error ratio over the dashboard's time range", lambda ratio, t: 1 - ratio),
    "Error budget left (30 days)": ("1 − error ratio / (1 − SloTarget) over 30 days", lambda ratio, t: 1 - ratio / (1 - t)),
}
for title, (claim, want) in SLO_WIDGETS.items():
    w = widget(title)
    props = (w or {}).get("properties", {})
    queries, shown, refs = widget_queries(w or {})
    ok, why = (computes(queries, shown[0], want, SLO_SAMPLES_RAW) if len(shown) == 1 else (False, f"shown {shown}"))
    check(f"the dashboard shows {title}: {claim}", w is not None and props.get("view") == "singleValue" and ok, why)
attain = (widget("Deadline SLO attainment") or {}).get("properties", {})
check("the attainment covers the dashboard's whole time range (setPeriodToTimeRange)", attain.get("setPeriodToTimeRange") is True)
budget = (widget("Error budget left (30 days)") or {}).get("properties", {})
check("the error budget is over 30 days whatever the dashboard's range (start -P30D, period 2592000)",
      budget.get("start") == "-P30D" and budget.get("period") == 2592000
      and all(q[3] == 2592000 for q in widget_queries(widget("Error budget left (30 days)") or {})[0].values() if q[0] == "metric"),
      json.dumps({k: budget.get(k) for k in ["start", "period"]}))
burn_w = widget("Deadline SLO burn rate")
queries, shown, _ = widget_queries(burn_w or {})
by_window = {}
for e in shown:
    periods = {queries[x][3] for x in leaves(queries, e)}
    if len(periods) == 1:
        by_window[periods.pop()] = e
for window in sorted({w for _, ws in BURN_ALARMS.values() for w in ws}):
    e = by_window.get(window)
    ok, why = computes(queries, e, BURN) if e else (False, "no expression reads this window alone")
    check(f"the dashboard's burn rate shows the {window} s window (the alarms' formula, on that window's counts)", ok, why)
marks = {float(a.get("value", -1)) for a in (burn_w or {}).get("properties", {}).get("annotations", {}).get("horizontal", [])}
check("the burn-rate widget marks both thresholds (14.4 fast, 6 slow)", {t for t, _ in BURN_ALARMS.values()} <= marks, str(sorted(marks)))
dash_slo = []
for w in widgets:
    for n, ns, d, st in widget_queries(w)[2]:
        if str(n).startswith("Slo") or any(str(w.get("properties", {}).get("title", "")).startswith(t) for t in SLO_WIDGETS):
            wrong = slo_metric_wrong(n, ns, d, "${Namespace}") or ("" if st == "Sum" else f"{n}: {st}")
            if wrong:
                dash_slo.append(f"{w['properties'].get('title')}: {wrong}")
check("every Slo* metric on the dashboard is one metrics.rs emits, in the stack's namespace, with its emitters' Function, summed",
      not dash_slo, "; ".join(dash_slo))

# --- 14. Who breaches: the Contributor Insights rule, and its widget ----------------------------
rules = of_type("AWS::CloudWatch::InsightRule")
rule = rules.get("SloBreachesByTenantRule", {}).get("Properties", {})
RULE_NAME = {"Fn::Sub": "${AWS::StackName}-slo-breaches-by-tenant"}
check("an enabled Contributor Insights rule named ${AWS::StackName}-slo-breaches-by-tenant",
      rule.get("RuleState") == "ENABLED" and rule.get("RuleName") == RULE_NAME, json.dumps({k: rule.get(k) for k in ["RuleName", "RuleState"]}))
body_sub = rule.get("RuleBody", {}).get("Fn::Sub") if isinstance(rule.get("RuleBody"), dict) else None
try:
    body = json.loads(re.sub(r"\$\{(\w+)\}", r"\1", body_sub)) if isinstance(body_sub, str) else {}
except ValueError:
    body = {}
check("its body is JSON built with !Sub (the log groups' names resolve)", bool(body), str(body_sub))
contribution = body.get("Contribution", {})
check(f"its key is the SLO documents' tenant property ($.{tenant_prop}, metrics.rs TENANT_PROPERTY)",
      bool(tenant_prop) and contribution.get("Keys") == [f"$.{tenant_prop}"], json.dumps(contribution.get("Keys")))
check(f"it sums $.{BREACHED} (metrics.rs SLO_BREACHED) over the documents that carry a breach",
      contribution.get("ValueOf") == f"$.{BREACHED}" and body.get("AggregateOn") == "Sum"
      and contribution.get("Filters") == [{"Match": f"$.{BREACHED}", "GreaterThan": 0}],
      json.dumps({"ValueOf": contribution.get("ValueOf"), "Filters": contribution.get("Filters"), "AggregateOn": body.get("AggregateOn")}))
check("it is a CloudWatchLogRule v1 on JSON logs",
      body.get("Schema") == {"Name": "CloudWatchLogRule", "Version": 1} and body.get("LogFormat") == "JSON", json.dumps(body.get("Schema")))
emitter_groups = sorted(ref_name(by_binary.get(b, (None, {}))[1].get("Properties", {}).get("LoggingConfig", {}).get("LogGroup")) or f"<{b}>"
                        for b in ["sender", "scheduler"])
check("it reads the sender's and the scheduler's log groups (both emit SloBreached), nothing else",
      sorted(body.get("LogGroupNames", [])) == emitter_groups, f"{body.get('LogGroupNames')} vs {emitter_groups}")
top = widget("Worst tenants")
insight = (top or {}).get("properties", {}).get("insightRule", {})
rule_var = re.fullmatch(r"\$\{(\w+)\}", str(insight.get("ruleName", "")))
check("the dashboard shows the rule's top 10 tenants by breaches (insightRule widget, ordered by Sum)",
      insight.get("maxContributorCount") == 10 and insight.get("orderBy") == "Sum"
      and rule_var is not None and dash_vars.get(rule_var.group(1)) == RULE_NAME,
      json.dumps(insight))

# --- 15. SLO_TARGET and SLO_WITHIN_SECS: the parameters, where they go ---------------------------
slo_target = parameters.get("SloTarget", {})
check("SloTarget is a String parameter defaulting to 0.99", slo_target.get("Type") == "String" and str(slo_target.get("Default")) == "0.99",
      json.dumps(slo_target.get("Default")))
check_pattern(
    "SloTarget",
    "admits a fraction strictly between 0 and 1 with at most 4 decimals (1 - SloTarget is the error budget)",
    ["0.9", "0.99", "0.999", "0.9995", "0.95", "0.5", "0.0001"],
    ["1", "1.0", "0", "0.0", "0.00", "0.000", "0.0000", "99", "0.99x", ".99", "0.99999", "", " 0.99", "-0.99", "0,99", "1e-2"],
)
within = parameters.get("SloWithinSecs", {})
check("SloWithinSecs is a Number parameter defaulting to 300", within.get("Type") == "Number" and str(within.get("Default")) == "300",
      json.dumps(within.get("Default")))
# Both bounded by what the code's one SLO parser accepts (crates/core/src/slo.rs SloPolicy::parse:
# the target `*v > LO && *v < HI`, the window `(LO..=HI).contains(v)`).
slo_src = rust("crates/core/src/slo.rs")
t_bounds = re.search(r"\*v > ([\d.]+) && \*v < ([\d.]+)", slo_src)
w_bounds = re.search(r"\(([\d_]+)\.\.=([\d_]+)\)\.contains\(v\)", slo_src)
check("the SLO parser's bounds are read from crates/core/src/slo.rs (SloPolicy::parse)", t_bounds and w_bounds)
if w_bounds:
    lo, hi = number(w_bounds.group(1)), number(w_bounds.group(2))
    check("SloWithinSecs's bounds are the code's (SLO_WITHIN_SECS)",
          float(within.get("MinValue", -1)) == lo and float(within.get("MaxValue", -1)) == hi,
          f"template [{within.get('MinValue')}, {within.get('MaxValue')}], code [{lo:g}, {hi:g}]")
if t_bounds and slo_target.get("AllowedPattern"):
    # Every value the pattern admits, among all decimals of up to 5 places from 0 to 1 and the
    # strings around them, is one the code accepts: the pattern is the code's range or inside it.
    lo, hi = float(t_bounds.group(1)), float(t_bounds.group(2))
    rx = re.compile(slo_target["AllowedPattern"])
    candidates = ["0", "1", "1.0", "1.00", "0.", ".5", "-0.5"] + [f"{i}.{n:0{k}d}" for i in (0, 1) for k in range(1, 6) for n in range(10 ** k)]
    refused_by_code = [c for c in candidates if rx.fullmatch(c) and not lo < float(c) < hi]
    check("SloTarget's pattern admits only targets the code accepts (SLO_TARGET)", not refused_by_code, ", ".join(refused_by_code[:5]))
# The sender judges a record failing on its last receive as breached (SQS moves it to the DLQ
# next): its MAX_RECEIVE_COUNT must be the lanes' maxReceiveCount, or those letters go unjudged
# (a larger value) or are judged while SQS still redelivers them (a smaller one).
_sender = by_binary.get("sender")
if _sender:
    _env = resolve(_sender[1].get("Properties", {}).get("Environment", {}).get("Variables", {}), SCENARIOS[0])
    _lanes = {q: str(res[q]["Properties"]["RedrivePolicy"]["maxReceiveCount"]) for q in ("SendQueue", "UrgentQueue")}
    check("the sender's MAX_RECEIVE_COUNT is both lanes' maxReceiveCount",
          all(str(_env.get("MAX_RECEIVE_COUNT")) == v for v in _lanes.values()),
          f"MAX_RECEIVE_COUNT={_env.get('MAX_RECEIVE_COUNT')!r}, lanes {_lanes}")

SLO_ENV = {"SLO_TARGET": {"Ref": "SloTarget"}, "SLO_WITHIN_SECS": {"Ref": "SloWithinSecs"}}
for binary, (name, f) in sorted((b, v) for b, v in by_binary.items() if b):
    envs = [resolve(f.get("Properties", {}).get("Environment", {}).get("Variables", {}), ps) for ps in SCENARIOS]
    if binary == "sender":
        wrong = sorted({f"{k}={json.dumps(env.get(k))}" for env in envs for k, v in SLO_ENV.items() if env.get(k) != v})
        check(f"{binary}: SLO_TARGET and SLO_WITHIN_SECS come from SloTarget and SloWithinSecs, in every scenario", not wrong, ", ".join(wrong))
    else:
        # Only the sender's config reads them (crates/sender/src/config.rs); a variable a
        # function ignores would read as a setting that does something.
        given = sorted({k for env in envs for k in SLO_ENV if k in env})
        check(f"{binary}: is not given the SLO variables (only the sender judges the SLO)", not given, ", ".join(given))

# --- 16. The renewals table's day index (DAY_INDEX, by_day_channel): as crates/aws/src/renewals.rs queries it -----------
renewals_src = rust("crates/aws/src/renewals.rs")
day_name = (re.findall(r'pub const DAY_INDEX: &str = "([^"]+)"', renewals_src) or [None])[0]
proj = re.search(r"pub const DAY_PROJECTION: \[&str; (\d+)\] = \[([^\]]*)\];", renewals_src)
day_projection = re.findall(r'"([^"]+)"', proj.group(2)) if proj else []
check("DAY_INDEX and DAY_PROJECTION are read from crates/aws/src/renewals.rs",
      bool(day_name) and proj is not None and len(day_projection) == int(proj.group(1)) > 0,
      f"{day_name}, {day_projection}")
renewals_props = tables.get("RenewalsTable", {}).get("Properties", {})
by_day = [g for g in renewals_props.get("GlobalSecondaryIndexes", []) if g.get("IndexName") == day_name]
# The upgrade from the old `by_day` (no `channel`): kept beside the new index only with
# KeepOldDayIndex=true, so an upgrading stack adds one index in one deploy and removes the
# other in the next (CloudFormation refuses two index changes in one update); nothing reads it.
raw_renewals = template["Resources"].get("RenewalsTable", {}).get("Properties", {})
def index_names(keep):
    resolved = resolve(raw_renewals, scenario(KeepOldDayIndex=keep))
    return [g.get("IndexName") for g in resolved.get("GlobalSecondaryIndexes", [])]
check("KeepOldDayIndex: false has the new day index and not by_day; true has both (one index added, then one removed)",
      "by_day" not in index_names("false") and day_name in index_names("false")
      and {"by_day", day_name} <= set(index_names("true"))
      and len(index_names("true")) == len(index_names("false")) + 1,
      f"false {index_names('false')}, true {index_names('true')}")
old_reads = sorted(str(p.relative_to(ROOT)) for f in ["crates", "tools", "tests"] for p in pathlib.Path(ROOT, f).rglob("*.rs")
                   if re.search(r'"by_day"', p.read_text(errors="replace")))
check("no code queries the old by_day index", not old_reads, ", ".join(old_reads))
check(f"RenewalsTable has the index {day_name!r} (DAY_INDEX)", bool(day_name) and len(by_day) == 1, str(day_name))
day_keys = [(k.get("AttributeName"), k.get("KeyType")) for k in (by_day[0].get("KeySchema", []) if by_day else [])]
# Each key attribute must be named in a string literal of renewals.rs (the item it writes, the
# key condition it queries with).
named = [a for a in ["day_shard", "deliver_after_ms"] if not re.search(r'"[^"\n]*\b' + a + r'\b[^"\n]*"', renewals_src)]
check("its keys are day_shard (HASH) and deliver_after_ms (RANGE), as renewals.rs names them",
      day_keys == [("day_shard", "HASH"), ("deliver_after_ms", "RANGE")] and not named, f"{day_keys}, not in renewals.rs: {named}")
day_proj_t = by_day[0].get("Projection", {}) if by_day else {}
non_key = day_proj_t.get("NonKeyAttributes", [])
check("it projects exactly DAY_PROJECTION (INCLUDE: what reconcile, forecast and status read, nothing more)",
      day_proj_t.get("ProjectionType") == "INCLUDE" and sorted(non_key) == sorted(day_projection) and len(set(non_key)) == len(non_key) and day_projection,
      f"template {non_key}, code {day_projection}")
rtypes = {a.get("AttributeName"): a.get("AttributeType") for a in renewals_props.get("AttributeDefinitions", [])}
check("day_shard is a string and deliver_after_ms a number", rtypes.get("day_shard") == "S" and rtypes.get("deliver_after_ms") == "N", str(rtypes))
queriers = sorted(
    f"{name}: {json.dumps(r)}" for name, f in functions.items() for st in statements(f) for r in as_list(st.get("Resource", []))
    if "RenewalsTable" in json.dumps(r) and (f"/index/{day_name}" in json.dumps(r) or "/index/*" in json.dumps(r))
)
check(f"no function may query {day_name!r} (operators only: the CLI)", not queriers, "; ".join(queriers))

# ============================================================================================
# Safe to redeploy: the sender's own role, ledger reads by key prefix, the provider token's KMS
# key, every name an operator needs as an output, the stack policy, samconfig.
# ============================================================================================

# --- 17. Execution roles: written out, every grant scoped -------------------------------------
# SAM attaches AWSLambdaSQSQueueExecutionRole (sqs:ReceiveMessage/DeleteMessage on "*") to the
# role it generates for a function with an SQS event: such a function must name its own role.
# The role's statements are what statements(f) reads for it, so every check above applies.
roles = of_type("AWS::IAM::Role")
sqs_fns = sorted(n for n, f in functions.items()
                 if any(e.get("Type") == "SQS" for e in f.get("Properties", {}).get("Events", {}).values()))
no_role = [n for n in sqs_fns if role_of(functions[n])[0] is None]
check("every function with an SQS event has its own AWS::IAM::Role (no SAM role with AWSLambdaSQSQueueExecutionRole)",
      sqs_fns and not no_role, ", ".join(no_role) or "no SQS function")
# And every other function too: SAM's generated role carries AWSLambdaBasicExecutionRole (logs on
# every log group of the account, "*") and takes the stack's PermissionsBoundary only if each
# function repeats it. A function without a Role of this template fails here.
no_own = sorted(n for n in functions if role_of(functions[n])[0] is None)
check("every function runs on an AWS::IAM::Role of this template (no SAM-generated role)", not no_own, ", ".join(no_own))
with_policies = sorted(n for n, f in functions.items() if "Policies" in f.get("Properties", {}))
check("no function has SAM Policies (its grants are its role's statements)", not with_policies, ", ".join(with_policies))
both = sorted(n for n, f in functions.items() if "Role" in f.get("Properties", {}) and "Policies" in f.get("Properties", {}))
check("no function has both Role and Policies (SAM takes one; the role's statements are the function's)", not both, ", ".join(both))
unknown = sorted(n for n, f in functions.items() if "Role" in f.get("Properties", {}) and role_of(f)[0] is None)
check("every function's Role is a role of this template (its statements are checked)", not unknown, ", ".join(unknown))
LAMBDA_TRUST = [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]
DEPLOY_ROLE = "DeployRole"
for rname, r in sorted(roles.items()):
    p = r.get("Properties", {})
    if rname == DEPLOY_ROLE:
        continue  # CodeDeploy's, checked with the gradual deploys below
    users = sorted(n for n, f in functions.items() if role_of(f)[0] == rname)
    check(f"{rname}: the role of exactly one function ({', '.join(users) or 'none'})", len(users) == 1)
    check(f"{rname}: only Lambda may assume it", p.get("AssumeRolePolicyDocument", {}).get("Statement") == LAMBDA_TRUST,
          json.dumps(p.get("AssumeRolePolicyDocument")))
    check(f"{rname}: no managed policy, no other policy resource (every grant is an inline statement checked here)",
          not p.get("ManagedPolicyArns") and not any(
              ref_name(x) == rname for o in res.values() if o.get("Type") in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
              for x in as_list(o.get("Properties", {}).get("Roles", []))),
          json.dumps(p.get("ManagedPolicyArns")))
# PermissionsBoundaryArn: the platform team's boundary on every role the stack creates, and no
# boundary when it is empty (the condition, not an empty string IAM would refuse).
BOUNDARY = {"Fn::If": ["HasPermissionsBoundary", {"Ref": "PermissionsBoundaryArn"}, {"Ref": "AWS::NoValue"}]}
check("PermissionsBoundaryArn is optional (default empty) and HasPermissionsBoundary tests it",
      parameters.get("PermissionsBoundaryArn", {}).get("Default") == ""
      and conditions.get("HasPermissionsBoundary") == {"Fn::Not": [{"Fn::Equals": [{"Ref": "PermissionsBoundaryArn"}, ""]}]},
      json.dumps(conditions.get("HasPermissionsBoundary")))
check_pattern("SesTemplatePrefix", "admits a template-name prefix ending in - (at most 40), no wildcard or empty",
              ["punctual-", "staging-punctual-", "a-", "Prod_1-", "x" * 39 + "-"],
              ["", "punctual", "*-", "punctual-*", "a b-", "x" * 40 + "-", "../-"])
check("SesTemplatePrefix defaults to punctual- (the name a stack from before it uses)",
      parameters.get("SesTemplatePrefix", {}).get("Default") == "punctual-")
check_pattern("PermissionsBoundaryArn", "admits empty or an IAM managed policy ARN, nothing else",
              ["", "arn:aws:iam::123456789012:policy/platform/boundary", "arn:aws-us-gov:iam::123456789012:policy/b"],
              ["*", "boundary", "arn:aws:iam::123456789012:role/x", "arn:aws:iam::aws:policy/AdministratorAccess",
               "arn:aws:iam::123456789012:policy/"])
unbounded = sorted(n for n, r in of_type("AWS::IAM::Role").items() if r.get("Properties", {}).get("PermissionsBoundary") != BOUNDARY)
check("every AWS::IAM::Role takes PermissionsBoundaryArn (!If HasPermissionsBoundary)", not unbounded, ", ".join(unbounded))
bounded_fns = sorted(n for n, f in functions.items() if "PermissionsBoundary" in f.get("Properties", {}))
check("no function sets a SAM PermissionsBoundary (it binds only SAM's generated role; the roles carry it)",
      not bounded_fns and "PermissionsBoundary" not in template.get("Globals", {}).get("Function", {}), ", ".join(bounded_fns))
# Gradual deploys (docs/deployment.md#gradual-deploys): the three functions their queues or the
# rule invoke run behind an alias `live` that CodeDeploy shifts (DeploymentType), held back by a
# guard alarm on the function's own invocation errors; nothing invokes $LATEST (a mapping to the
# bare function would send it every new binary at once). The redrive is invoked by an operator,
# synchronously, one run at a time: there is no traffic to shift, and it keeps no alias.
GRADUAL = {"SenderFunction": "SenderDeployGuardAlarm", "SchedulerFunction": "SchedulerDeployGuardAlarm",
           "IngestFunction": "IngestDeployGuardAlarm"}
# And each function's deadline: the alarm that sees its work late (a version that runs without
# failing and does nothing: the sender's released work waiting, the scheduler's due renewals
# unreleased, the ingest's commands waiting). Named by !Ref: none of them names a function.
DEADLINE_GUARD = {"SenderFunction": "ReleasedWorkWaitingSignalAlarm", "SchedulerFunction": "OldestDueUndeliveredSignalAlarm",
                  "IngestFunction": "CommandsOldestMessageAgeAlarm"}
for fname, guard in GRADUAL.items():
    fp = functions.get(fname, {}).get("Properties", {})
    dp = fp.get("DeploymentPreference", {})
    check(f"{fname}: AutoPublishAlias live (a version for any changed property), DeploymentPreference Enabled GradualDeploys, Type DeploymentType, Role DeployRole, Alarms [{guard}, {DEADLINE_GUARD[fname]}]",
          fp.get("AutoPublishAlias") == "live" and fp.get("AutoPublishAliasAllProperties") is True
          and fp.get("AutoPublishCodeSha256") == {"Ref": "ConfigDigest"}
          and ref_name(dp.get("Type")) == "DeploymentType"
          and dp.get("Role") == {"Fn::GetAtt": [DEPLOY_ROLE, "Arn"]}
          and dp.get("Alarms") == [alarms.get(guard, {}).get("Properties", {}).get("AlarmName"), {"Ref": DEADLINE_GUARD[fname]}]
          and DEADLINE_GUARD[fname] in alarms and fname not in json.dumps(alarms[DEADLINE_GUARD[fname]])
          and re.fullmatch(r"\$\{AWS::StackName\}-[a-z]+-deploy-guard", str(dp.get("Alarms", [{}])[0].get("Fn::Sub", "")))
          and dp.get("Enabled") == {"Ref": "GradualDeploys"} and "Hooks" not in dp,
          json.dumps({"AutoPublishAlias": fp.get("AutoPublishAlias"), "DeploymentPreference": dp}))
    gp = alarms.get(guard, {}).get("Properties", {})
    check(f"{guard}: the function's own AWS/Lambda Errors, >= 1 in one minute, missing = fine, nobody notified",
          gp.get("Namespace") == "AWS/Lambda" and gp.get("MetricName") == "Errors"
          and gp.get("Dimensions") == [{"Name": "FunctionName", "Value": {"Ref": fname}}]
          and gp.get("Statistic") == "Sum" and gp.get("Period") == 60 and gp.get("EvaluationPeriods") == 1
          and gp.get("Threshold") == 1 and gp.get("ComparisonOperator") == "GreaterThanOrEqualToThreshold"
          and gp.get("TreatMissingData") == "notBreaching" and alarm_class(gp) == "dashboard",
          json.dumps(gp))
others = sorted(n for n, f in functions.items() if n not in GRADUAL
                and ({"AutoPublishAlias", "DeploymentPreference"} & set(f.get("Properties", {}))))
check("only the sender, scheduler and ingest deploy gradually (the redrive keeps no alias)", not others and "RedriveFunction" in functions,
      ", ".join(others))
check("DeploymentType defaults to a gradual shift and admits CodeDeploy's Lambda configurations only",
      parameters.get("DeploymentType", {}).get("Default", "").startswith(("Linear", "Canary"))
      and set(parameters.get("DeploymentType", {}).get("AllowedValues", [])) <= {
          f"{k}{x}" for k, xs in {"Linear10PercentEvery": ["1Minute", "2Minutes", "3Minutes", "10Minutes"],
                                  "Canary10Percent": ["5Minutes", "10Minutes", "15Minutes", "30Minutes"]}.items() for x in xs} | {"AllAtOnce"},
      json.dumps(parameters.get("DeploymentType")))
# SAM hashes a function's properties with their parameter !Refs unresolved, so a parameter-only
# deploy publishes no version and `live` keeps the old settings (found by make e2e's step i: the
# sms channel turned off, the sender's live version unchanged). ConfigDigest, passed by every
# deploy path, is the version's identity instead (tools/config_digest.py).
makefile_text = (ROOT / "Makefile").read_text()
e2e_text = (ROOT / "tools" / "e2e.py").read_text()
check("ConfigDigest: optional hex, passed by make deploy (with the built bootstraps) and by make e2e",
      parameters.get("ConfigDigest", {}).get("Default") == ""
      and parameters.get("ConfigDigest", {}).get("AllowedPattern") == "^[0-9a-f]{0,64}$"
      and "ConfigDigest=$$digest" in makefile_text and "--code $(BUILT_BOOTSTRAPS)" in makefile_text
      and 'params["ConfigDigest"] = self.digest(' in e2e_text,
      json.dumps(parameters.get("ConfigDigest")))
check("GradualDeploys is true or false, default true (SAM resolves Enabled from a parameter, never a condition)",
      parameters.get("GradualDeploys", {}).get("Default") == "true"
      and parameters.get("GradualDeploys", {}).get("AllowedValues") == ["true", "false"],
      json.dumps(parameters.get("GradualDeploys")))
to_bare = sorted(n for n, m in mappings.items() if alias_target(m) not in GRADUAL)
check("every event source mapping invokes a gradual function's alias live (!Sub \"${Function}:live\", DependsOn its alias), never $LATEST",
      mappings and not to_bare, ", ".join(to_bare))
deploy_p = roles.get(DEPLOY_ROLE, {}).get("Properties", {})
check("DeployRole: only CodeDeploy may assume it, no managed policy",
      deploy_p.get("AssumeRolePolicyDocument", {}).get("Statement")
      == [{"Effect": "Allow", "Principal": {"Service": "codedeploy.amazonaws.com"}, "Action": "sts:AssumeRole"}]
      and not deploy_p.get("ManagedPolicyArns"), json.dumps(deploy_p.get("AssumeRolePolicyDocument")))
deploy_sts = [st for pol in deploy_p.get("Policies", []) for st in pol.get("PolicyDocument", {}).get("Statement", [])]
want_aliases = [x for f in sorted(GRADUAL) for x in ({"Fn::Sub": f"${{{f}.Arn}}"}, {"Fn::Sub": f"${{{f}.Arn}}:live"})]
bad_deploy = []
for st in deploy_sts:
    acts = set(as_list(st.get("Action", [])))
    if st.get("Effect") != "Allow":
        bad_deploy.append(f"not Allow: {json.dumps(st)}")
    elif acts <= {"lambda:GetAlias", "lambda:UpdateAlias", "lambda:GetProvisionedConcurrencyConfig"}:
        got = sorted(as_list(st.get("Resource", [])), key=json.dumps)
        if got != sorted(want_aliases, key=json.dumps):
            bad_deploy.append(f"lambda actions on {json.dumps(got)} (want the three functions and their live aliases)")
    elif acts == {"cloudwatch:DescribeAlarms"}:
        pass  # read-only, and DescribeAlarms takes no resource-level permission
    else:
        bad_deploy.append(f"{sorted(acts)} (only the aliases' Get/Update and DescribeAlarms)")
check("DeployRole: moves only the three live aliases and reads alarm states, nothing else",
      deploy_sts and not bad_deploy, "; ".join(bad_deploy) or "no statements")
glob_tracing = template.get("Globals", {}).get("Function", {}).get("Tracing")
for name, f in sorted(functions.items()):
    rname, role = role_of(f)
    if role is None:
        continue
    sts = statements(f)
    # Lambda writes the function's logs with the role: to the LoggingConfig group only.
    group = ref_name(f.get("Properties", {}).get("LoggingConfig", {}).get("LogGroup"))
    logs = [(a, json.dumps(r, sort_keys=True)) for st in sts for a in as_list(st.get("Action", [])) if str(a).startswith("logs:")
            for r in as_list(st.get("Resource", []))]
    want = {(a, json.dumps({"Fn::GetAtt": [group, "Arn"]}, sort_keys=True)) for a in ["logs:CreateLogStream", "logs:PutLogEvents"]}
    check(f"{name} ({rname}): logs:CreateLogStream and logs:PutLogEvents on its own log group ({group}), no other logs grant",
          set(logs) == want, json.dumps(sorted(logs)))
    tracing = f.get("Properties", {}).get("Tracing", glob_tracing)
    xray = {a for st in sts if as_list(st.get("Resource", [])) == ["*"] for a in as_list(st.get("Action", []))
            if str(a).startswith("xray:")}
    check(f"{name} ({rname}): Tracing {tracing}: X-Ray's two writes on * (and no other X-Ray action)",
          xray == (XRAY_WRITES if tracing == "Active" else set()), str(sorted(xray)))

# What IAM cannot scope is the only thing any function may have on "*"; an SQS or DynamoDB
# action never is (every queue and table of the account).
UNSCOPABLE = XRAY_WRITES | {"ses:GetAccount"}


def unscoped(r):
    """Whether a Resource is "*" or an ARN naming every queue or table (…:sqs:…:*, …:table/*)."""
    text = r.get("Fn::Sub") if isinstance(r, dict) and isinstance(r.get("Fn::Sub"), str) else r
    return text == "*" or (isinstance(text, str) and re.search(r":(sqs|dynamodb):[^:]*:[^:]*:(\*|table/\*)$", text) is not None)


data_on_star, other_on_star = [], []
for name, f in sorted(functions.items()):
    for st in statements(f):
        if st.get("Effect") != "Allow" or not any(unscoped(r) for r in as_list(st.get("Resource", []))):
            continue
        acts = as_list(st.get("Action", []))
        data_on_star += [f"{name}: {a}" for a in acts if str(a).startswith(("sqs:", "dynamodb:"))]
        other_on_star += [f"{name}: {a}" for a in acts if a not in UNSCOPABLE]
check("no statement of any function grants an sqs: or dynamodb: action on * (or on every queue or table)",
      not data_on_star, ", ".join(sorted(set(data_on_star))))
check(f"nothing on * but what IAM cannot scope ({', '.join(sorted(UNSCOPABLE))})", not other_on_star, ", ".join(sorted(set(other_on_star))))

# --- 18. The provider token's customer-managed KMS key -----------------------------------------
kms_param = parameters.get("ProviderTokenKmsKeyArn", {})
check("ProviderTokenKmsKeyArn is optional (default empty)", "ProviderTokenKmsKeyArn" in parameters and kms_param.get("Default") == "",
      json.dumps(kms_param.get("Default")))
check_pattern(
    "ProviderTokenKmsKeyArn",
    "accepts only a KMS key ARN or empty (not an alias, a bare key id or a wildcard)",
    ["", "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
     "arn:aws-us-gov:kms:us-gov-west-1:123456789012:key/mrk-1234abcd12ab34cd56ef1234567890ab"],
    ["1234abcd-12ab-34cd-56ef-1234567890ab", "arn:aws:kms:eu-west-1:123456789012:alias/provider",
     "arn:aws:kms:eu-west-1:123456789012:key/*", "arn:aws:kms:*:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
     "alias/aws/secretsmanager", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:prod/provider-token-AbC123"],
)
VIA_SECRETS_MANAGER = {"StringEquals": {"kms:ViaService": {"Fn::Sub": "secretsmanager.${AWS::Region}.amazonaws.com"}}}
kms_wrong = set()
for ps in SCENARIOS:
    kind, key, sms_key = ps.get("ProviderKind"), ps.get("ProviderTokenKmsKeyArn", ""), ps.get("SmsProviderTokenKmsKeyArn", "")
    sms = cond_value(conditions["HasSms"], ps)
    tag = f"kind={kind} key={key or '-'} sms={'yes' if sms else 'no'} sms_key={sms_key or '-'}"
    for name, f in sorted(functions.items()):
        kms = [st for st in statements(f, ps) if any(str(a).startswith("kms:") for a in as_list(st.get("Action", [])))]
        sender_fn = name == "SenderFunction"
        want = sorted((["ProviderTokenKmsKeyArn"] if sender_fn and kind == "http" and key else []) \
            + (["SmsProviderTokenKmsKeyArn"] if sender_fn and sms and sms_key else []))
        got = sorted(ref_name(r) for st in kms for r in as_list(st.get("Resource")))
        if got != want:
            kms_wrong.add(f"{tag}: {name} has KMS grants on {got}, want {want}")
        for st in kms:
            if as_list(st.get("Action")) != ["kms:Decrypt"] or len(as_list(st.get("Resource"))) != 1 or st.get("Condition") != VIA_SECRETS_MANAGER:
                kms_wrong.add(f"{tag}: {name}: {json.dumps(st)}")
check("sender: kms:Decrypt on ProviderTokenKmsKeyArn only when it is given (ProviderKind http), on SmsProviderTokenKmsKeyArn "
      "only with the sms channel, each only via Secrets Manager in this region (kms:ViaService); no other KMS grant anywhere",
      not kms_wrong, "; ".join(sorted(kms_wrong)))

# --- 19. Ledger reads by key prefix (dynamodb:LeadingKeys on GetItem) --------------------------
# The ledger table holds the idempotency ledger, the shared limiter's schedule, the pause switch
# and the operators' audit records. Each function may GetItem exactly the keys its composition
# root's adapters read: the adapters over the ledger table are read from crates/<fn>/src/app.rs,
# and the key each adapter reads from its source (the key builder or constant its GetItem call
# uses). A conditional write's refused item is read back by its own key (dynamodb.rs
# refused_item): a key the function writes, which is one of these.
control_src = rust("crates/aws/src/control.rs")


pause_pk = (re.findall(r'const PAUSE_PK: &str = "([^"]+)";', control_src) or [None])[0]
# adapter: (its source, the key pattern it reads, the key argument of its GetItem calls)
LEDGER_READS = {
    "DynamoLedger": ("crates/aws/src/ledger.rs", key_builder(rust("crates/aws/src/ledger.rs"), "key"), "&key(id)"),
    "DynamoSlotStore": ("crates/aws/src/limiter.rs", key_builder(rust("crates/aws/src/limiter.rs"), "pk"), "&Self::pk(key)"),
    "DynamoControl": ("crates/aws/src/control.rs", pause_pk, "&self.pk"),
}
for adapter, (rel, pattern, arg) in sorted(LEDGER_READS.items()):
    src = rust(rel)
    # Every GetItem of the adapter's file (dynamodb.rs get(client, table, KEY)) reads through
    # that key; control.rs's audit() also reads redrive:{id}, for the tests and operators: no
    # function calls it (checked below). Direct .get_item() calls would escape this: none.
    calls = re.findall(r"\bget\(&self\.client, &self\.table, (.+?)\)\.await", src)
    others = [c for c in calls if c != arg and not (adapter == "DynamoControl" and c == '&format!("redrive:{id}")')]
    check(f"{adapter} reads the ledger with GetItem under {pattern} only ({rel})",
          pattern and arg in calls and not others and ".get_item()" not in src,
          f"pattern {pattern}, reads {calls}")
audit_callers = [b for b in ["sender", "scheduler", "redrive"]
                 if any(".audit(" in (ROOT / "crates" / b / "src" / f).read_text() for f in ["app.rs", "handler.rs", "main.rs"]
                        if (ROOT / "crates" / b / "src" / f).exists())]
check("no function reads a redrive audit record (DynamoControl::audit is for tests and operators)", not audit_callers, ", ".join(audit_callers))
for binary, (name, f) in sorted((b, v) for b, v in by_binary.items() if b):
    app = rust(f"crates/{binary}/src/app.rs")
    adapters = sorted(set(re.findall(r"(Dynamo\w+)::new\(\s*\w+(?:\.clone\(\))?,\s*&config\.ledger_table\s*\)", app)))
    unknown_adapters = [a for a in adapters if a not in LEDGER_READS]
    want = {LEDGER_READS[a][1] for a in adapters if a in LEDGER_READS}
    # A declared channel's own switch, control:pause#{channel} (control.rs pause_key).
    if re.search(r"DynamoControl::for_channel\(\s*\w+(?:\.clone\(\))?,\s*&config\.ledger_table", app):
        want.add(f"{pause_pk}#*")
    gets = [st for st in statements(f) if st.get("Effect") == "Allow" and "dynamodb:GetItem" in as_list(st.get("Action", []))
            and "LedgerTable" in [ref_name(r) for r in as_list(st.get("Resource", []))]]
    wrong = []
    for st in gets:
        keys = st.get("Condition", {}).get("ForAllValues:StringLike", {}).get("dynamodb:LeadingKeys")
        if set(as_list(st.get("Action", []))) != {"dynamodb:GetItem"}:
            wrong.append(f"GetItem shares its statement with {sorted(set(as_list(st['Action'])) - {'dynamodb:GetItem'})}")
        if keys is None or set(as_list(keys)) != want or len(st.get("Condition", {})) != 1:
            wrong.append(f"condition {json.dumps(st.get('Condition'))}")
    check(f"{binary}: GetItem on the ledger only under the keys its adapters read ({', '.join(sorted(want)) or 'none'}; "
          f"{', '.join(adapters) or 'no adapter'} in crates/{binary}/src/app.rs)",
          # The ingest touches no ledger: no adapter over it, and no grant on it.
          (not adapters and not gets and binary == "ingest")
          or (adapters and not unknown_adapters and bool(gets) == bool(want) and not wrong),
          "; ".join(wrong + [f"unknown adapter {a}" for a in unknown_adapters] + ([] if gets or not want else ["no GetItem statement"])))

# --- 20. Outputs: every name an operator needs --------------------------------------------------
# Generated names (functions, log groups, alarms) and the mappings' UUIDs are found nowhere else
# without the console. SAM names an SQS event's mapping <function logical id><event logical id>,
# and its Ref is the mapping's UUID (what update-event-source-mapping --uuid takes).
def outputs_of(logical_id):
    """(output name, output) pairs whose Value is exactly !Ref logical_id."""
    return [(n, o) for n, o in outputs.items() if o.get("Value") == {"Ref": logical_id}]


missing_out, wrong_cond = [], []
for name, r in sorted({**everything, **functions, **log_groups}.items()):
    outs = outputs_of(name)
    if not outs:
        missing_out.append(name)
    wrong_cond += [f"{o}: Condition {x.get('Condition')} for {name} ({r.get('Condition')})" for o, x in outs if x.get("Condition") != r.get("Condition")]
check("an output gives every alarm's and composite alarm's name, every function's and every log group's",
      not missing_out, ", ".join(missing_out))
check("each of those outputs has its resource's Condition (none where the resource has none)", not wrong_cond, "; ".join(wrong_cond))
mapping_outputs = {}
for fname, f in sorted(functions.items()):
    for ev, e in sorted(f.get("Properties", {}).get("Events", {}).items()):
        if e.get("Type") == "SQS":
            outs = outputs_of(f"{fname}{ev}")
            mapping_outputs[f"{fname}{ev}"] = [o for o, _ in outs]
# A mapping of its own (a channel's queue's, AWS::Lambda::EventSourceMapping) too.
for mname in sorted(mappings):
    mapping_outputs[mname] = [o for o, _ in outputs_of(mname)]
no_mapping_out = sorted(m for m, outs in mapping_outputs.items() if not outs)
check("an output gives each SQS event source mapping's UUID (!Ref <function><event>, SAM's name for it)",
      mapping_outputs and not no_mapping_out, ", ".join(no_mapping_out))
# The runbook's stalled-lane section shows the command that takes that UUID, by the output's name.
lane_section = re.search(r"^### lane-stalled\n(.*?)(?=^#{1,3} )", runbook_text, re.S | re.M)
lane_text = lane_section.group(1) if lane_section else ""
unnamed = sorted(o for outs in mapping_outputs.values() for o in outs if o not in lane_text)
check("docs/operations.md#lane-stalled shows update-event-source-mapping with each mapping output's name",
      lane_section and "update-event-source-mapping" in lane_text and not unnamed, ", ".join(unnamed) or "no section")

# Every queue a mapping drains has a page for "messages visible and none received" (its
# mapping disabled, deleted or refused): nothing else sees it, since the sender never gets
# those messages and the scheduler counts them as backlog.
drained = set(LANES) | {ref_name(m.get("Properties", {}).get("EventSourceArn")) for m in mappings.values()}
stall_pages = set()
for name, a in alarms.items():
    p = a["Properties"]
    exprs = [m.get("Expression", "") for m in p.get("Metrics", [])]
    watched = {ref_name(d.get("Value")) for m in p.get("Metrics", []) if "MetricStat" in m
               for d in m["MetricStat"]["Metric"].get("Dimensions", []) if d.get("Name") == "QueueName"}
    names = {m["MetricStat"]["Metric"]["MetricName"] for m in p.get("Metrics", []) if "MetricStat" in m}
    if alarm_class(p) == "page" and {"ApproximateNumberOfMessagesVisible", "NumberOfMessagesReceived"} <= names \
            and any("received" in e for e in exprs) and len(watched) == 1:
        stall_pages |= watched
unpaged = sorted(drained - stall_pages)
check("every queue an event source mapping drains has a paging stall alarm (visible and none received)", not unpaged, ", ".join(unpaged))

# --- 21. The stack policy: no update replaces or removes a table or a queue ---------------------
# infra/stack-policy.json, set by `make deploy` after `sam deploy` (tools/stack_policy.py). A
# stack policy denies every update it does not allow, so it allows Update:* on everything and
# denies exactly Update:Replace and Update:Delete on exactly the template's tables and queues,
# by logical id: a data resource added to the template without it, or a stale name, fails here.
policy_path = ROOT / "infra" / "stack-policy.json"
try:
    stack_policy = json.loads(policy_path.read_text())
except (OSError, ValueError) as e:
    stack_policy = {}
    check("infra/stack-policy.json is JSON", False, str(e))
sp_statements = stack_policy.get("Statement", []) if isinstance(stack_policy, dict) else []
allow_all = [s for s in sp_statements if s.get("Effect") == "Allow" and s.get("Principal") == "*"
             and as_list(s.get("Action")) == ["Update:*"] and as_list(s.get("Resource")) == ["*"] and set(s) <= {"Effect", "Principal", "Action", "Resource"}]
check("the stack policy allows Update:* on * (a stack policy refuses every update it does not allow)", len(allow_all) == 1,
      json.dumps(sp_statements))
denies = [s for s in sp_statements if s.get("Effect") == "Deny"]
denied = {}
odd_deny = []
for s in denies:
    if s.get("Principal") != "*" or not set(s) <= {"Effect", "Principal", "Action", "Resource"}:
        odd_deny.append(json.dumps(s))  # NotResource, NotAction, Condition: not this policy's shape
    for r in as_list(s.get("Resource", [])):
        denied.setdefault(str(r), set()).update(as_list(s.get("Action", [])))
data_ids = sorted(set(tables) | set(queues))
want_denied = {f"LogicalResourceId/{n}": {"Update:Replace", "Update:Delete"} for n in data_ids}
check(f"the stack policy refuses exactly Update:Replace and Update:Delete on exactly the tables and queues ({', '.join(data_ids)})",
      denied == want_denied and not odd_deny and len(sp_statements) == len(allow_all) + len(denies),
      f"denied {json.dumps({k: sorted(v) for k, v in sorted(denied.items())})}; {'; '.join(odd_deny)}")
makefile = (ROOT / "Makefile").read_text() if (ROOT / "Makefile").exists() else ""
deploy_recipe = re.search(r"^deploy:.*\n((?:\t.*\n|[ \t]+.*\n)*)", makefile, re.M)
recipe = deploy_recipe.group(1) if deploy_recipe else ""
sam_at, policy_at = recipe.find("$(SAM) deploy"), recipe.find("tools/stack_policy.py")
check("make deploy sets infra/stack-policy.json after sam deploy (tools/stack_policy.py)",
      0 <= sam_at < policy_at and "infra/stack-policy.json" in recipe[policy_at:], recipe[-300:])

# --- 22. infra/samconfig.toml: what `sam build` and `sam deploy` are told ----------------------
samconfig_path = ROOT / "infra" / "samconfig.toml"
try:
    samconfig = tomllib.loads(samconfig_path.read_text())
except (OSError, ValueError) as e:
    samconfig = {}
    check("infra/samconfig.toml is TOML", False, str(e))
deploy_params = samconfig.get("default", {}).get("deploy", {}).get("parameters", {})
build_params = samconfig.get("default", {}).get("build", {}).get("parameters", {})
size = pathlib.Path(path).stat().st_size
# CreateStack/UpdateStack take at most 51,200 bytes inline (TemplateBody); above that the
# template must go by TemplateURL from S3, which sam deploy does only with a bucket.
check(f"sam deploy uploads the template to S3 (resolve_s3 or s3_bucket): it is {size:,} bytes, over the 51,200-byte TemplateBody limit",
      size <= 51200 or deploy_params.get("resolve_s3") is True or bool(deploy_params.get("s3_bucket")),
      json.dumps({k: deploy_params.get(k) for k in ["resolve_s3", "s3_bucket"]}))
# Cost allocation: the stack's tags reach every taggable resource (found by review: no resource
# carried one), and they are what sam deploy is told.
tag_text = deploy_params.get("tags", "")
check("sam deploy tags the stack (Application, punctual:stack) for cost allocation",
      isinstance(tag_text, str) and 'Application="punctual"' in tag_text and "punctual:stack=" in tag_text, str(tag_text))
# The build cache hashes CodeUri (the repository root, target/ included): it never hits.
check("sam build is not told cached = true (it hashes target/ under CodeUri and never hits)",
      build_params.get("cached") is not True, json.dumps(build_params))

# --- 23. The producers' side: commands in, outcome events out (docs/integration.md) -----------
# The commands queue as the lanes are checked: its visibility against its function's timeout,
# encrypted at rest, drained by one mapping with partial batch failures; its DLQ keeps a
# backstop letter as long as the queue would have (SQS keeps a moved message's first enqueue
# time, and 14 days is SQS's most, so the lanes' strict "longer" cannot hold here).
ingest_name, ingest_f = by_binary.get("ingest", (None, {}))
ingest_p = ingest_f.get("Properties", {})
cq = queues.get("CommandsQueue", {}).get("Properties", {})
cdlq = queues.get("CommandsDeadLetterQueue", {}).get("Properties", {})
check("CommandsQueue visibility >= 6 x ingest timeout",
      int(cq.get("VisibilityTimeout", 30)) >= 6 * int(ingest_p.get("Timeout", 3)),
      f"{cq.get('VisibilityTimeout')} vs 6 x {ingest_p.get('Timeout', 3)}")
for qn, qp in [("CommandsQueue", cq), ("CommandsDeadLetterQueue", cdlq)]:
    check(f"{qn} is encrypted at rest", qp.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in qp)
check("CommandsDeadLetterQueue keeps a letter at least as long as CommandsQueue",
      int(cdlq.get("MessageRetentionPeriod", 345600)) >= int(cq.get("MessageRetentionPeriod", 345600)),
      f"{cdlq.get('MessageRetentionPeriod')} vs {cq.get('MessageRetentionPeriod')}")
# One mapping (a SAM SQS event of the ingest, or an AWS::Lambda::EventSourceMapping) drains it.
cmd_maps = [dict(m.get("Properties", {}), FunctionName={"Ref": f"{alias_target(m)}.Alias"}) for m in mappings.values()
            if ref_name(m.get("Properties", {}).get("EventSourceArn")) == "CommandsQueue"]
cmd_maps = cmd_maps + [
    dict(e.get("Properties", {}), FunctionName={"Ref": f"{ingest_name}.Alias"})
    for e in ingest_p.get("Events", {}).values()
    if e.get("Type") == "SQS" and ref_name(e.get("Properties", {}).get("Queue")) == "CommandsQueue"]
cm = resolve(cmd_maps[0], DEFAULTS) if len(cmd_maps) == 1 else {}
cm_mc = cm.get("ScalingConfig", {}).get("MaximumConcurrency")
check("CommandsQueue is drained by one mapping to the ingest's alias (partial failures, batch <= 10, MaximumConcurrency in 2..1000 if set)",
      len(cmd_maps) == 1 and ingest_name is not None and ref_name(cm.get("FunctionName")) == f"{ingest_name}.Alias"
      and "ReportBatchItemFailures" in cm.get("FunctionResponseTypes", [])
      and 1 <= int(default(cm.get("BatchSize", 10)) or 0) <= 10
      and (cm_mc is None or 2 <= int(default(cm_mc) or 0) <= 1000),
      json.dumps(cmd_maps))
check("no other function polls or is given the commands queues",
      not [f"{n}: {a}" for n, f in functions.items() if n != ingest_name for st in statements(f)
           for a in as_list(st.get("Action", []))
           if any(ref_name(r) in ("CommandsQueue", "CommandsDeadLetterQueue") for r in as_list(st.get("Resource", [])))])

# The rule: the producer's bus, its source, the contract's detail-type (crates/core/src/command.rs
# DETAIL_TYPE), one target, the commands queue.
detail_type = (re.findall(r'pub const DETAIL_TYPE: &str = "([^"]+)"', rust("crates/core/src/command.rs")) or [None])[0]
rules = of_type("AWS::Events::Rule")
rule_p = rules.get("ProducerCommandsRule", {}).get("Properties", {})
pattern = rule_p.get("EventPattern", {})
targets = rule_p.get("Targets", [])
check(f"ProducerCommandsRule: on ProducerEventBusName, source [ProducerSource], detail-type [{detail_type}] (command.rs DETAIL_TYPE), enabled",
      bool(detail_type) and ref_name(rule_p.get("EventBusName")) == "ProducerEventBusName"
      and [ref_name(s) for s in as_list(pattern.get("source", []))] == ["ProducerSource"]
      and pattern.get("detail-type") == [detail_type] and set(pattern) == {"source", "detail-type"}
      and rule_p.get("State", "ENABLED") == "ENABLED", json.dumps(rule_p))
check("ProducerCommandsRule's one target is the commands queue (the whole event as the body: no InputTransformer)",
      len(targets) == 1 and ref_name(targets[0].get("Arn")) == "CommandsQueue"
      and not {"Input", "InputPath", "InputTransformer"} & set(targets[0]), json.dumps(targets))
# The queue policy: EventBridge may send, only for that rule; nothing else is granted.
qpols = [q.get("Properties", {}) for q in of_type("AWS::SQS::QueuePolicy").values()
         if [ref_name(x) for x in as_list(q.get("Properties", {}).get("Queues", []))] == ["CommandsQueue"]]
qsts = qpols[0].get("PolicyDocument", {}).get("Statement", []) if len(qpols) == 1 else []
check("CommandsQueuePolicy: events.amazonaws.com may sqs:SendMessage to the commands queue only when aws:SourceArn is ProducerCommandsRule, nothing else",
      len(qsts) == 1 and qsts[0].get("Effect") == "Allow"
      and qsts[0].get("Principal") == {"Service": "events.amazonaws.com"}
      and as_list(qsts[0].get("Action")) == ["sqs:SendMessage"]
      and [ref_name(r) for r in as_list(qsts[0].get("Resource"))] == ["CommandsQueue"]
      and ref_name(qsts[0].get("Condition", {}).get("ArnEquals", {}).get("aws:SourceArn")) == "ProducerCommandsRule",
      json.dumps(qsts))
# What a producer is given: sends to the commands queue, puts on its bus; nothing else.
PRODUCER_BUS = "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/${ProducerEventBusName}"
OUTCOME_BUS = "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/${OutcomeEventBusName}"
pp = of_type("AWS::IAM::ManagedPolicy").get("ProducerPolicy", {}).get("Properties", {})
pp_grants = sorted((tuple(sorted(as_list(st.get("Action")))),
                    tuple(ref_name(r) or (r.get("Fn::Sub") if isinstance(r, dict) else r) for r in as_list(st.get("Resource"))))
                   for st in pp.get("PolicyDocument", {}).get("Statement", []) if st.get("Effect") == "Allow")
check("ProducerPolicy: sqs:SendMessage on the commands queue and events:PutEvents on the producer bus, nothing else",
      pp_grants == sorted([(("sqs:SendMessage",), ("CommandsQueue",)), (("events:PutEvents",), (PRODUCER_BUS,))]), str(pp_grants))
check("an output gives the ProducerPolicy's ARN, and the commands queue's and its DLQ's URLs",
      {"ProducerPolicy", "CommandsQueue", "CommandsDeadLetterQueue"} <= {ref_name(o.get("Value")) for o in outputs.values()})

# The outbox: the index the scheduler sweeps (crates/aws/src/ledger.rs OUTBOX_INDEX), its keys
# and projection as the code writes and reads them; the scheduler's sweep and publish grants,
# on that index and on the bus OUTCOME_BUS_NAME names; no other function publishes.
outbox_name = (re.findall(r'pub const OUTBOX_INDEX: &str = "([^"]+)"', ledger_src) or [None])[0]
obx = [g for g in ledger_props.get("GlobalSecondaryIndexes", []) if g.get("IndexName") == outbox_name]
okeys = [(k.get("AttributeName"), k.get("KeyType")) for k in (obx[0].get("KeySchema", []) if obx else [])]
check(f"LedgerTable has the sparse index {outbox_name!r} the scheduler sweeps (ledger.rs OUTBOX_INDEX)", bool(outbox_name) and len(obx) == 1)
check("its keys are outbox_shard (HASH, S) and outbox_at_ms (RANGE, N), as the code writes them",
      okeys == [("outbox_shard", "HASH"), ("outbox_at_ms", "RANGE")] and types.get("outbox_shard") == "S"
      and types.get("outbox_at_ms") == "N" and "outbox_shard = :outbox_shard, outbox_at_ms = :now" in ledger_src, str(okeys))
check("it projects the events (INCLUDE [outbox]): the sweep reads them from the index",
      bool(obx) and obx[0].get("Projection") == {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["outbox"]}
      and 'item.get("outbox")' in ledger_src)
sched_f = by_binary.get("scheduler", (None, {}))[1]
sched_env = sched_f.get("Properties", {}).get("Environment", {}).get("Variables", {})
check("scheduler: OUTCOME_BUS_NAME is OutcomeEventBusName", ref_name(sched_env.get("OUTCOME_BUS_NAME")) == "OutcomeEventBusName",
      json.dumps(sched_env.get("OUTCOME_BUS_NAME")))
sub_of = lambda r: r.get("Fn::Sub") if isinstance(r, dict) else r
publishes = {b: [sub_of(r) for st in statements(f) if st.get("Effect") == "Allow" and "events:PutEvents" in as_list(st.get("Action", []))
                 for r in as_list(st.get("Resource", []))] for b, (_, f) in by_binary.items() if b}
check("scheduler: events:PutEvents on the outcome bus (OutcomeEventBusName) only", publishes.get("scheduler") == [OUTCOME_BUS], str(publishes.get("scheduler")))
check("no other function may put events", not [b for b, rs in publishes.items() if rs and b != "scheduler"], json.dumps(publishes))
sweeps = [sub_of(r) for st in statements(sched_f) if "dynamodb:Query" in as_list(st.get("Action", []))
          for r in as_list(st.get("Resource", [])) if "LedgerTable" in json.dumps(r)]
check(f"scheduler: dynamodb:Query on the ledger's {outbox_name!r} index only (no table-wide Query)",
      sweeps == [f"${{LedgerTable.Arn}}/index/{outbox_name}"], str(sweeps))

failed = [c for c in checks if not c[1]]
for name, ok, detail in checks:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'  (' + detail + ')' if detail and not ok else ''}")
print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
