#!/usr/bin/env python3
"""`make e2e`: infra/template.yaml deployed on LocalStack and exercised end to end, on this
machine, without Docker.

Run by `.venv-localstack/bin/python` (the Makefile's `localstack` target installs LocalStack
2026.3.0, pinned — the community edition's last release; its repository is archived upstream,
so it will not move — and the two plugins in tools/localstack/). One line per step, with the
time since start; exit 0 when every step passed, 1 naming the step that failed (its evidence,
and where the logs are), 130/143 on SIGINT/SIGTERM. Everything this script starts (LocalStack,
the functions' processes, the provider doubles) is stopped by pid on every exit path; the
functions' processes run in LocalStack's process group, which is killed last.

What happens, in order (state and logs under target/e2e/, emptied at each run):

 1. LocalStack starts in host mode on a free 127.0.0.1 port (`python -m localstack.runtime.main`,
    its filesystem, tmp, config and plux cache under target/e2e/), with the host Lambda executor
    (`LAMBDA_RUNTIME_EXECUTOR=host`) and the moto-backed DynamoDB
    (`PROVIDER_OVERRIDE_DYNAMODB=moto`); SQS publishes its depth metrics every 5 s (default 60)
    and the event source mappings back off at most 1 s on an empty queue (default 10; Lambda's
    own pollers long-poll without pause).
 2. Meanwhile the three functions are built as the host's **debug** build
    (`cargo build --locked --workspace --bins --tests`, which yields the `sender`, `scheduler`
    and `redrive` binaries and `punctual`, for the operator commands and the provider double).
    Building the tests with them resolves features as `make test-all` did, so in `make test`
    the binaries are the ones its test run already built (≈ 4 s); built alone, their feature
    set differs and the AWS SDK stack compiles again (measured 126 s in a fresh clone). It is
    the same code as the release packages `make build` makes with cargo-lambda, which take ≈ 4
    minutes cold: too slow for `make test`; `make build` stays the release path. The binaries
    are copied out of the target directory at once (it may be shared with other builds), each
    zipped as `bootstrap` (mode 0755) while LocalStack boots.
 3. Two provider doubles (`punctual provider-double`) start on loopback, each with its own
    bearer token: the stack's provider (the email channel) and the sms channel's. Each token
    goes into a Secrets Manager secret whose full ARN (with Secrets Manager's 6-character
    suffix) is ProviderTokenSecretArn or SmsProviderTokenSecretArn; two SNS topics are
    AlarmTopicArn and TicketTopicArn; ProviderUrl and SmsProviderUrl are the doubles'
    /v1/messages. So the deployed stack is the two-channel one (CHANNELS=email,sms, the sms
    queue and urgent lane and their mappings); the one-provider stack is the same template without SmsProviderUrl
    (tests/tests/integration/template.rs hands each variant's environment to the functions'
    own parsers).
 4. The template is deployed through LocalStack's CloudFormation WITH the SAM transform: each
    function's CodeUri rewritten to its zip in LocalStack S3 and `Metadata.BuildMethod`
    dropped, as `sam package` would, nothing else. At 98 KB it is over CreateStack's
    51,200-byte TemplateBody limit (AWS's too), so it goes by TemplateURL from S3, as `sam
    deploy` does. Checked: CREATE_COMPLETE; the queue, table and function Outputs resolve to
    live resources; the sender has four event source mappings, one per lane, one for the sms
    queue and one for its urgent lane, each with its MaximumConcurrency; every function has
    URGENT_QUEUE_URL = the UrgentQueueUrl output, CHANNELS=email,sms, CHANNEL_SMS_QUEUE_URL and
    CHANNEL_SMS_URGENT_QUEUE_URL = the SmsQueueUrl and SmsUrgentQueueUrl outputs.
 5. The checks, each bounded by a timeout, printed as they pass (c, e and d while the rule's
    first tick is awaited):
    a. four renewals imported with `punctual import` into the stack's renewals table (two
       email, two sms), due at the first minute boundary at least 10 s ahead, are released by a
       real tick of the stack's `rate(1 minute)` EventBridge rule (its first firing comes ≈ 60 s
       after it is created): the scheduler invoked with source `aws.events`, the rows `enqueued`;
    b. the sender is invoked by all four event source mappings: an invocation whose records
       all come from the urgent queue delivers the 5-minute-window email renewal, one from the
       send queue the 2-hour one, one from the sms queue the 2-hour sms renewal, one from the sms
       channel's urgent lane the 5-minute one (the host executor's journal says which queue
       invoked it, the sender's own log line which reminder it delivered), all `delivered` in
       the stack's ledger; the email double accepted its two (and e's), the sms double its two;
    c. a malformed message sent to the send queue reaches the DLQ (reason `malformed`);
    d. an alarm on the DLQ goes to ALARM in LocalStack's CloudWatch (which one: below);
    e. `punctual redrive --function <RedriveFunctionName>` through lambda:Invoke: a request at
       21/s is refused by the function (the cap it computes from the stack's environment is
       20/s: REDRIVE_SHARE 0.2 × ProviderRatePerSecond 100), then `--max-messages 1
       --max-per-second 1` moves one well-formed letter back and the sender delivers it. The
       letter is a real one: the double is scripted to answer 400 once, a reminder's message is
       sent to the send queue, and the sender itself dead-letters it (`classified_permanent`);
       its renewal is imported for tomorrow, so no tick releases it too. The double is then
       reset (it would replay the 400 for that Idempotency-Key: "the provider fixed it");
    f. `punctual status` (DLQ 1 — the malformed letter —, lanes and both sms queues empty, not
       paused) and
       `punctual reconcile --from … --to now` (the four renewals delivered, email 2 and sms 2
       in its per-channel accounts, none unaccounted, exit 0) read the deployed stack, given its Outputs as the variables the operator commands
       read (crates/ops/src/target.rs);
    g. what LocalStack can show of the template's own promises, reported: a second stack whose
       functions' code is missing from S3 (the likeliest failed first deploy) and what it leaves
       behind; the template's Rules (its Parameters, Rules and Conditions around one SNS topic,
       ProviderKind http without ProviderUrl); the ledger's DeletionProtectionEnabled, PITR, TTL
       and SSE as DescribeTable reports them; where the functions' logs went; the scheduler's
       EventInvokeConfig. It fails only if the failed-create probe did not fail.
    h. the producer's whole path (docs/integration.md): a renewal command put as an event on
       the producer bus (source ProducerSource, detail-type punctual.renewal) is routed by the
       stack's rule to the commands queue, applied by the ingest function (its row carries the
       producer version), released by a tick, delivered by the sender, and its `delivered`
       outcome event published by a later tick's sweep of the outbox onto the outcome bus,
       where a capture rule of the test's own delivers it to a queue; a command that is not
       JSON sent straight to the commands queue lands on the commands DLQ with its reason.
    i. two stack updates (docs/deployment.md#turning-the-sms-channel-on-and-off): without
       SmsProviderUrl, UPDATE_COMPLETE, the sms queues and the sender's mappings on them kept,
       the sender's alias live on a new version (ConfigDigest) whose environment declares no
       channels, and a reminder sent to the sms queue delivered through the one provider left
       (the email double); then with SmsProviderUrl again, UPDATE_COMPLETE on the same queues
       and live on a version declaring email and sms. LocalStack's alias provider cannot move an
       alias on its own (tools/localstack/punctual_localstack/alias.py fixes that).

What LocalStack (2026.3.0 community, host mode) cannot do, and what this check does instead:
- Metric-math alarms are never evaluated: its alarm scheduler takes only alarms with a
  top-level MetricName/Statistic/Period (alarm_scheduler._is_alarm_supported), so all 13 of the
  template's `Metrics` alarms, DlqNotEmptyAlarm (visible + not visible) among them, stay
  INSUFFICIENT_DATA. Step d checks that, then creates the simplest DLQ alarm LocalStack does
  evaluate (the DLQ's ApproximateNumberOfMessagesVisible, Maximum, Period 10 s, > 0, actions on
  the ticket topic) and waits for ALARM and for its notification on a queue subscribed to the
  ticket topic. Composite alarms: LocalStack evaluates only OR rules over metric alarms named
  by ARN; the template's are AND rules over alarm names (and metric math): never evaluated.
- Simple alarms are evaluated once at creation (all 16 of the template's go OK), then every
  Period × EvaluationPeriods (60–300 s × 1–5 here): none would change state within the run.
  LocalStack publishes no ApproximateAgeOfOldestMessage (DlqOldestLetterAlarm and the age
  alarms read "no data") and extracts no EMF, so no punctual/<stack> metric exists.
- No resource provider for AWS::CloudWatch::Dashboard or AWS::CloudWatch::InsightRule: both are
  reported created and nothing is created (the DashboardName output is "unknown").
- Rules are not evaluated: a stack violating HttpProviderIsComplete is created (step g).
- A failed create is not rolled back (CREATE_FAILED; non-Retain resources such as IAM roles
  stay too), and such a stack cannot be deleted (DELETE_FAILED): Retain against
  RetainExceptOnCreate cannot be told apart here.
- LocalStack's AWS::DynamoDB::Table provider passes neither DeletionProtectionEnabled nor
  PointInTimeRecoverySpecification to CreateTable (DescribeTable: false, PITR DISABLED); TTL and
  SSE are applied. The engine is moto (serialised): no TTL deletion, no streams.
- IAM is not enforced: the template's least-privilege statements (the sender's LeadingKeys
  conditions, the recipients table readable only by the sender) are not exercised;
  tools/check_template.py checks them statically.
- No isolation or architecture choice: the functions run as host processes (x86_64 host
  binaries, a debug build); MemorySize, ReservedConcurrentExecutions, provisioned pollers,
  Tracing have no effect; EventInvokeConfig is stored, not exercised; LoggingConfig.LogGroup is
  stored but LocalStack writes the functions' logs to /aws/lambda/<function> (step g counts
  the streams), not to the template's log groups.
- EventBridge *Scheduler* schedules never fire here (the template uses a rule, which does).
- No CodeDeploy: the template's gradual deploys (DeploymentPreference,
  docs/deployment.md#gradual-deploys) become an application and three deployment groups that LocalStack skips as an
  unsupported type, and the aliases' UpdatePolicy is ignored, so no traffic shift, guard alarm
  or rollback happens here (step g lists what the stack holds of them). What step 4 checks
  instead: each of the sender, scheduler and ingest has a published version behind its alias
  `live`, every mapping and the scheduler's rule invoke that alias, the redrive has none, and
  the whole run (a–h) goes through the aliases. LocalStack's engine resolves references
  before the SAM transform: `!Ref Function.Alias` and a DeploymentPreference naming its guard
  by `!Ref` (a cycle before the transform) make CreateStack fail or never answer, which is why
  the template names both by string (its comments say so).
"""

import argparse
import datetime as dt
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
import botocore.exceptions
import yaml
from botocore.config import Config

from config_digest import GRADUAL, CfnLoader
from config_digest import digest as config_digest

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "target" / "e2e"
REGION = "us-east-1"
STACK = "punctual-e2e"
TOKEN = "e2e-provider-token"
# The sms channel's own double and secret (SmsProviderUrl, SmsProviderTokenSecretArn).
SMS_TOKEN = "e2e-sms-token"
FUNCTIONS = {"SenderFunction": "sender", "SchedulerFunction": "scheduler", "RedriveFunction": "redrive",
             "IngestFunction": "ingest"}
T0 = time.monotonic()
CURRENT = "setup"  # the step running, named when something unexpected fails


class StepFailed(Exception):
    def __init__(self, step: str, detail: str):
        detail = detail if len(detail) <= 2000 else detail[:2000] + " …"
        super().__init__(f"{step}: {detail}")
        self.step, self.detail = step, detail


def elapsed() -> str:
    return f"{time.monotonic() - T0:6.1f}s"


def say(line: str) -> None:
    try:
        print(f"e2e [{elapsed()}] {line}", flush=True)
    except OSError:
        pass  # stdout gone (a closed pipe): keep going, cleanup must still run


def begin(step: str) -> None:
    global CURRENT
    CURRENT = step


def ok(step: str, detail: str, since: float | None = None) -> None:
    took = f" ({time.monotonic() - since:.1f} s)" if since is not None else ""
    say(f"{step}: ok{took} — {detail}")


def wait_for(step: str, what: str, probe, timeout: float, interval: float = 0.5):
    """Calls probe() until it returns something truthy; StepFailed after `timeout` seconds,
    with the last thing probe() saw (probe may return (False, observed) to report it)."""
    end = time.monotonic() + timeout
    last = None
    while True:
        got = probe()
        if isinstance(got, tuple) and len(got) == 2 and got[0] is False:
            last = got[1]
        elif got:
            return got
        if time.monotonic() > end:
            raise StepFailed(step, f"{what} not seen within {timeout:.0f} s (last seen: {last})")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- processes -------------------------------------------------------------------------------
class Processes:
    """What this run started, stopped by pid (and LocalStack's process group) on every exit."""

    def __init__(self):
        self.started: list[tuple[str, subprocess.Popen, bool]] = []  # (name, proc, own group)
        self.grace: dict[int, float] = {}  # pid → seconds between SIGTERM and SIGKILL

    def start(self, name: str, argv: list[str], log: Path, env: dict, group: bool) -> subprocess.Popen:
        out = open(log, "ab")
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=str(WORK), start_new_session=group)
        out.close()
        self.started.append((name, proc, group))
        self.grace[proc.pid] = 5.0
        return proc

    def stop_all(self) -> None:
        for name, proc, group in reversed(self.started):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                grace = self.grace.get(proc.pid, 5.0)
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    say(f"{name} (pid {proc.pid}) did not stop within {grace:.0f} s of SIGTERM: killed")
                    proc.kill()
                    proc.wait(5)
            if group:
                # LocalStack's group also holds the functions' processes (the host executor
                # starts them without a session of their own); none may outlive it.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.started.clear()


def on_signal(signum, _frame):
    raise SystemExit(128 + signum)


# --- the template ------------------------------------------------------------------------------
# CfnLoader (YAML with CloudFormation's short-form tags) is config_digest's: one reading of the template.


def packaged_template(path: Path, code: dict[str, str], bucket: str) -> str:
    """The template as `sam package` would upload it: each function's CodeUri an S3 URI,
    `Metadata.BuildMethod` dropped. Nothing else changes."""
    template = yaml.load(path.read_text(), Loader=CfnLoader)
    for logical, res in template["Resources"].items():
        if res.get("Type") != "AWS::Serverless::Function":
            continue
        res["Properties"]["CodeUri"] = f"s3://{bucket}/{code[logical]}"
        meta = res.get("Metadata") or {}
        meta.pop("BuildMethod", None)
    return json.dumps(template, default=str)


# --- the run -----------------------------------------------------------------------------------
class Run:
    def __init__(self, args, procs: Processes):
        self.args = args
        self.procs = procs
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LOCALSTACK_"))}
        self.env.update({
            "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true",
        })
        self._clients = {}
        self.bins: dict[str, Path] = {}
        self.outputs: dict[str, str] = {}
        self.physical: dict[str, str] = {}
        self.double_url = ""
        self.double_accepted_before_reset = 0

    def aws(self, name: str):
        if name not in self._clients:
            cfg = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=60)
            self._clients[name] = boto3.client(name, endpoint_url=self.endpoint, region_name=REGION,
                                               aws_access_key_id="test", aws_secret_access_key="test", config=cfg)
        return self._clients[name]

    # -- 1. LocalStack ------------------------------------------------------------------------
    def start_localstack(self):
        for d in ("fs", "tmp", "config", "cache", "lambda"):
            (WORK / "localstack" / d).mkdir(parents=True, exist_ok=True)
        ls = WORK / "localstack"
        env = dict(self.env)
        env.update({
            # Host mode: this machine has /.dockerenv, which would make LocalStack write under
            # /var/lib, /etc and /tmp/localstack; everything stays under target/e2e instead.
            "OVERRIDE_IN_DOCKER": "0",
            "FILESYSTEM_ROOT": str(ls / "fs"), "TMPDIR": str(ls / "tmp"), "CONFIG_DIR": str(ls / "config"),
            "XDG_CACHE_HOME": str(ls / "cache"),
            # The default twisted server ignores the host and binds 0.0.0.0; hypercorn does not.
            "GATEWAY_LISTEN": f"127.0.0.1:{self.port}", "GATEWAY_SERVER": "hypercorn",
            "LOCALSTACK_HOST": f"127.0.0.1:{self.port}",
            # localhost.localstack.cloud does not resolve here: queue URLs by path.
            "SQS_ENDPOINT_STRATEGY": "path",
            "DNS_ADDRESS": "0", "DISABLE_EVENTS": "1", "SKIP_SSL_CERT_DOWNLOAD": "1",
            "LAMBDA_RUNTIME_EXECUTOR": "host", "PROVIDER_OVERRIDE_DYNAMODB": "moto",
            "PUNCTUAL_LAMBDA_LOG_DIR": str(ls / "lambda"),
            # Depth metrics every 5 s (default 60) so the DLQ alarm has data within the run.
            "SQS_CLOUDWATCH_METRICS_REPORT_INTERVAL": "5",
            # Lambda's SQS pollers long-poll without pause; LocalStack's back off up to 10 s
            # when a queue is empty (a delivery could wait that long). 1 s is closer to AWS.
            "LAMBDA_EVENT_SOURCE_MAPPING_MAX_BACKOFF_ON_EMPTY_POLL_SEC": "1",
        })
        self.ls = self.procs.start("localstack", [sys.executable, "-m", "localstack.runtime.main"],
                                   WORK / "localstack.log", env, group=True)
        # Booting, it ignores SIGTERM (measured: still up 20 s later); its state is in memory
        # and thrown away, so a short grace, then SIGKILL. Once ready it stops in 4–6 s.
        self.procs.grace[self.ls.pid] = 2.0
        self.ls_started = time.monotonic()

    def wait_localstack(self):
        def probe():
            if self.ls.poll() is not None:
                raise StepFailed("localstack", f"exited with {self.ls.returncode}; see {WORK / 'localstack.log'}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/_localstack/health", timeout=2) as r:
                    return json.load(r).get("services")
            except (urllib.error.URLError, OSError, ValueError) as e:
                return (False, str(e))
        wait_for("localstack", "health", probe, timeout=90, interval=0.3)
        self.procs.grace[self.ls.pid] = 15.0
        ok("localstack", f"2026.3.0 healthy on {self.endpoint} (pid {self.ls.pid})", self.ls_started)

    # -- 2. build ------------------------------------------------------------------------------
    def build(self):
        started = time.monotonic()
        # With the tests: the features `make test-all` resolved, so nothing is built twice.
        argv = [os.environ.get("CARGO", "cargo"), "build", "--locked", "--workspace", "--bins", "--tests",
                "--message-format=json-render-diagnostics"]
        proc = subprocess.run(argv, cwd=str(ROOT), stdout=subprocess.PIPE, env=self.env, timeout=1200)
        if proc.returncode != 0:
            raise StepFailed("build", f"cargo build exited {proc.returncode}")
        built = {}
        for line in proc.stdout.decode().splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            # The binaries themselves, not the unit-test harnesses built from the same targets.
            if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                    and "bin" in msg["target"].get("kind", []) and not msg.get("profile", {}).get("test")):
                built[msg["target"]["name"]] = msg["executable"]
        # Copied at once: the target directory may be shared with other builds.
        (WORK / "bin").mkdir(exist_ok=True)
        for name in ("sender", "scheduler", "redrive", "ingest", "punctual"):
            if name not in built:
                raise StepFailed("build", f"cargo built no `{name}` binary")
            self.bins[name] = Path(shutil.copy2(built[name], WORK / "bin" / name))
        ok("build", "debug binaries sender, scheduler, redrive, ingest (+ the punctual CLI)", started)

    def package(self):
        """Each binary zipped as `bootstrap` (mode 0755), while LocalStack starts."""
        started = time.monotonic()

        def one(logical: str) -> tuple[str, bytes]:
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
                info = zipfile.ZipInfo("bootstrap")
                info.external_attr = 0o755 << 16  # -rwxr-xr-x: Lambda runs it
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, self.bins[FUNCTIONS[logical]].read_bytes(), compresslevel=1)
            return logical, buf.getvalue()
        with ThreadPoolExecutor(4) as pool:  # zlib releases the GIL
            self.packages = dict(pool.map(one, FUNCTIONS))
        sizes = ", ".join(f"{FUNCTIONS[k]} {len(v) / 1e6:.1f} MB" for k, v in self.packages.items())
        ok("package", f"zips with bootstrap: {sizes}", started)

    # -- 3. parameters -------------------------------------------------------------------------
    def start_double(self):
        """Two doubles: the stack's provider (the email channel) and the sms channel's own,
        each with its own token, so a reminder can only be accepted by its own channel's."""
        self.double_base = self.one_double("provider double", TOKEN, "100", WORK / "provider-double.log")
        self.double_url = f"{self.double_base}/v1/messages"
        self.sms_base = self.one_double("sms double", SMS_TOKEN, "10", WORK / "sms-double.log")
        self.sms_url = f"{self.sms_base}/v1/messages"

    def one_double(self, name: str, token: str, quota: str, log: Path) -> str:
        port = free_port()
        proc = self.procs.start(name, [str(self.bins["punctual"]), "provider-double", "--port", str(port),
                                       "--token", token, "--quota", quota, "--burst", "10"], log, self.env, group=False)
        base = f"http://127.0.0.1:{port}"

        def probe():
            if proc.poll() is not None:
                raise StepFailed("provider double", f"{name} exited with {proc.returncode}")
            try:
                return self.double_stats(base) is not None
            except (urllib.error.URLError, OSError) as e:
                return (False, str(e))
        wait_for("provider double", f"the {name}'s /stats", probe, timeout=20, interval=0.1)
        return base

    def double_stats(self, base: str | None = None) -> dict:
        with urllib.request.urlopen(f"{base or self.double_base}/stats", timeout=5) as r:
            return json.load(r)

    def double_post(self, path: str, body) -> None:
        req = urllib.request.Request(f"{self.double_base}{path}", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=5).read()

    def accepted(self) -> int:
        return self.double_accepted_before_reset + self.double_stats()["accepted"]

    # -- 4. deploy -----------------------------------------------------------------------------
    def deploy(self):
        started = time.monotonic()
        s3, sm, sns = self.aws("s3"), self.aws("secretsmanager"), self.aws("sns")
        bucket = f"{STACK}-artifacts"
        s3.create_bucket(Bucket=bucket)
        keys = {}
        for logical, data in self.packages.items():
            keys[logical] = f"{FUNCTIONS[logical]}-{hashlib.sha256(data).hexdigest()[:16]}.zip"
            s3.put_object(Bucket=bucket, Key=keys[logical], Body=data)
        self.code_keys, self.bucket = keys, bucket
        uploaded = time.monotonic() - started
        secret_arn = sm.create_secret(Name=f"{STACK}/provider-token", SecretString=json.dumps({"token": TOKEN}))["ARN"]
        sms_secret_arn = sm.create_secret(Name=f"{STACK}/sms-token", SecretString=json.dumps({"token": SMS_TOKEN}))["ARN"]
        self.alarm_topic = sns.create_topic(Name=f"{STACK}-page")["TopicArn"]
        self.ticket_topic = sns.create_topic(Name=f"{STACK}-ticket")["TopicArn"]
        self.params = {
            "ProviderUrl": self.double_url,
            "ProviderTokenSecretArn": secret_arn,
            "AlarmTopicArn": self.alarm_topic,
            "TicketTopicArn": self.ticket_topic,
            # The two-channel stack: email through the stack's provider, sms through its own
            # double, secret, queue and mapping (the one-provider stack is this without them).
            "SmsProviderUrl": self.sms_url,
            "SmsProviderTokenSecretArn": sms_secret_arn,
        }
        # As `make deploy` passes it: without it a parameter-only update (step i) would leave the
        # aliases on the old version (tools/config_digest.py).
        self.params["ConfigDigest"] = self.digest(self.params)
        # 98 KB of YAML: over CreateStack's 51,200-byte TemplateBody limit (AWS's and
        # LocalStack's), so it goes through S3 as `sam deploy` does it.
        body = packaged_template(ROOT / "infra" / "template.yaml", keys, bucket)
        s3.put_object(Bucket=bucket, Key="template.json", Body=body.encode())
        self.template_url = f"{self.endpoint}/{bucket}/template.json"
        self.create_stack(STACK, self.params)
        creating = time.monotonic()
        status, reason = self.wait_stack(STACK, timeout=180)
        created = time.monotonic() - creating
        if status != "CREATE_COMPLETE":
            raise StepFailed("deploy", f"stack {status}: {reason}")
        cfn = self.aws("cloudformation")
        stack = cfn.describe_stacks(StackName=STACK)["Stacks"][0]
        self.outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        resources = cfn.list_stack_resources(StackName=STACK)["StackResourceSummaries"]
        self.physical = {r["LogicalResourceId"]: r.get("PhysicalResourceId", "") for r in resources}
        self.alarm_names = {r.get("PhysicalResourceId") for r in resources if r["ResourceType"] == "AWS::CloudWatch::Alarm"}
        ok("deploy", f"{STACK} CREATE_COMPLETE with the SAM transform in {created:.1f} s (packages uploaded "
           f"in {uploaded:.1f} s): {len(resources)} resources, {len(self.outputs)} outputs "
           f"(secret {secret_arn.rsplit(':', 1)[-1]})", started)

    def create_stack(self, name: str, params: dict, template_url: str | None = None):
        self.aws("cloudformation").create_stack(
            StackName=name, TemplateURL=template_url or self.template_url,
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"])

    def wait_stack(self, name: str, timeout: float) -> tuple[str, str]:
        cfn = self.aws("cloudformation")
        end = time.monotonic() + timeout
        while True:
            st = cfn.describe_stacks(StackName=name)["Stacks"][0]
            status = st["StackStatus"]
            if not status.endswith("_IN_PROGRESS"):
                failed = [f"{e['LogicalResourceId']} {e['ResourceStatus']}: {e.get('ResourceStatusReason', '')}"
                          for e in cfn.describe_stack_events(StackName=name)["StackEvents"]
                          if "FAILED" in e["ResourceStatus"]]
                return status, "; ".join(failed[:5]) or st.get("StackStatusReason", "")
            if time.monotonic() > end:
                return status, f"still {status} after {timeout:.0f} s"
            time.sleep(0.5)

    def check_stack(self):
        """What tests/tests/deployed.rs checked on moto's CloudFormation (which never ran the
        code), now on a stack that runs: the Outputs resolve, the sender's four mappings (one
        per lane, the sms queue's and the sms urgent lane's, each with its own
        MaximumConcurrency), every function told where the urgent
        lane is. That each function's configuration parses from the environment the stack
        gives it is shown by their running: a variable they refuse fails their cold start."""
        started = time.monotonic()
        o = self.outputs
        want = ["SendQueueUrl", "UrgentQueueUrl", "DeadLetterQueueUrl", "LedgerTableName", "RenewalsTableName",
                "RecipientsTableName", "RedriveFunctionName", "DashboardName", "MetricsNamespace", "SmsQueueUrl",
                "SmsUrgentQueueUrl"]
        missing = [k for k in want if not o.get(k)]
        if missing:
            raise StepFailed("outputs", f"missing {missing}: {o}")
        sqs, ddb, lam, cw = self.aws("sqs"), self.aws("dynamodb"), self.aws("lambda"), self.aws("cloudwatch")
        self.queue_arn = {}
        for k in ("SendQueueUrl", "UrgentQueueUrl", "DeadLetterQueueUrl", "SmsQueueUrl", "SmsUrgentQueueUrl"):
            self.queue_arn[k] = sqs.get_queue_attributes(QueueUrl=o[k], AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for k in ("LedgerTableName", "RenewalsTableName", "RecipientsTableName"):
            ddb.describe_table(TableName=o[k])
        lam.get_function(FunctionName=o["RedriveFunctionName"])
        # LocalStack community has no resource provider for AWS::CloudWatch::Dashboard (nor
        # AWS::CloudWatch::InsightRule): it reports them created without creating anything, and
        # the Output is a placeholder. Said, not failed: nothing else can be checked of them here.
        try:
            cw.get_dashboard(DashboardName=o["DashboardName"])
            dashboard = f"dashboard {o['DashboardName']} exists"
        except botocore.exceptions.ClientError:
            dashboard = f"DashboardName is {o['DashboardName']!r}: LocalStack created no dashboard (no resource provider)"
        if o["MetricsNamespace"] != f"punctual/{STACK}":
            raise StepFailed("outputs", f"MetricsNamespace is {o['MetricsNamespace']!r}")
        sender = self.physical["SenderFunction"]
        mappings = lam.list_event_source_mappings(FunctionName=sender)["EventSourceMappings"]
        polled = {m["EventSourceArn"]: (m.get("ScalingConfig") or {}).get("MaximumConcurrency") for m in mappings}
        lanes = {self.queue_arn[k] for k in ("SendQueueUrl", "UrgentQueueUrl", "SmsQueueUrl", "SmsUrgentQueueUrl")}
        if set(polled) != lanes or not all(polled.values()):
            raise StepFailed("mappings", f"the sender's mappings poll {polled}, want both lanes and the sms queue and urgent lane {sorted(lanes)} with MaximumConcurrency")
        # Gradual deploys: the sender, scheduler and ingest run behind an alias `live` on a
        # published version, and every mapping and the rule invoke the alias, never $LATEST
        # (CodeDeploy itself is not in LocalStack community: its resources are skipped).
        aliased, versions = {}, {}
        for logical in ("SenderFunction", "SchedulerFunction", "IngestFunction"):
            alias = lam.get_alias(FunctionName=self.physical[logical], Name="live")
            if not alias["FunctionVersion"].isdigit():
                raise StepFailed("aliases", f"{logical}'s alias live points at {alias['FunctionVersion']!r}, not a published version")
            aliased[logical], versions[logical] = alias["AliasArn"], alias["FunctionVersion"]
        ingest_maps = lam.list_event_source_mappings(FunctionName=self.physical["IngestFunction"])["EventSourceMappings"]
        bare = [m["FunctionArn"] for m in mappings + ingest_maps
                if m["FunctionArn"] not in (aliased["SenderFunction"], aliased["IngestFunction"])]
        if bare or not ingest_maps:
            raise StepFailed("aliases", f"mappings that do not invoke an alias live: {bare} (ingest mappings: {len(ingest_maps)})")
        events = self.aws("events")
        tick_rules = events.list_rule_names_by_target(TargetArn=aliased["SchedulerFunction"])["RuleNames"]
        if not tick_rules:
            raise StepFailed("aliases", f"no rule targets the scheduler's alias {aliased['SchedulerFunction']}")
        try:
            lam.get_alias(FunctionName=self.physical["RedriveFunction"], Name="live")
            raise StepFailed("aliases", "the redrive has an alias live (it is invoked by an operator, by name)")
        except botocore.exceptions.ClientError:
            pass
        for logical in FUNCTIONS:
            env = lam.get_function_configuration(FunctionName=self.physical[logical]).get("Environment", {}).get("Variables", {})
            if logical == "IngestFunction":
                # The ingest touches no lane: its table, its DLQ, the recipients and the channels.
                if (env.get("COMMANDS_DLQ_URL") != o["CommandsDeadLetterQueueUrl"] or env.get("CHANNELS") != "email,sms"
                        or env.get("RENEWALS_TABLE") != o["RenewalsTableName"]):
                    raise StepFailed("function config", f"IngestFunction has {env}")
                continue
            if env.get("URGENT_QUEUE_URL") != o["UrgentQueueUrl"]:
                raise StepFailed("function config", f"{logical} has URGENT_QUEUE_URL={env.get('URGENT_QUEUE_URL')!r}")
            if (env.get("CHANNELS") != "email,sms" or env.get("CHANNEL_SMS_QUEUE_URL") != o["SmsQueueUrl"]
                    or env.get("CHANNEL_SMS_URGENT_QUEUE_URL") != o["SmsUrgentQueueUrl"]):
                raise StepFailed("function config", f"{logical} has CHANNELS={env.get('CHANNELS')!r}, "
                                 f"CHANNEL_SMS_QUEUE_URL={env.get('CHANNEL_SMS_QUEUE_URL')!r}, "
                                 f"CHANNEL_SMS_URGENT_QUEUE_URL={env.get('CHANNEL_SMS_URGENT_QUEUE_URL')!r}")
        ok("outputs", f"the queue, table and function outputs resolve ({dashboard}); sender polls both lanes, the sms queue and its "
           f"urgent lane (MaximumConcurrency {sorted(polled.values())}); the sender's, ingest's mappings and the rule {tick_rules} "
           f"invoke the aliases live ({', '.join(f'{k} version {v}' for k, v in versions.items())}); URGENT_QUEUE_URL, CHANNELS=email,sms and the sms queues on "
           "the sender, scheduler and redrive; the ingest's table, commands DLQ and channels", started)

    # -- 5. checks ----------------------------------------------------------------------------
    def ops_env(self) -> dict:
        o = self.outputs
        env = dict(self.env)
        env.update({
            "AWS_ENDPOINT_URL": self.endpoint,
            "SEND_QUEUE_URL": o["SendQueueUrl"], "URGENT_QUEUE_URL": o["UrgentQueueUrl"],
            "DLQ_URL": o["DeadLetterQueueUrl"], "LEDGER_TABLE": o["LedgerTableName"],
            "RENEWALS_TABLE": o["RenewalsTableName"], "RECIPIENTS_TABLE": o["RecipientsTableName"],
            "PROVIDER_URL": self.double_url,
            # The channels, as the functions are given them: what reconcile and status read.
            "CHANNELS": "email,sms", "CHANNEL_SMS_QUEUE_URL": o["SmsQueueUrl"],
            "CHANNEL_SMS_URGENT_QUEUE_URL": o["SmsUrgentQueueUrl"],
            "COMMANDS_QUEUE_URL": o["CommandsQueueUrl"], "COMMANDS_DLQ_URL": o["CommandsDeadLetterQueueUrl"],
            # Never fall back to a `punctual local up` left running in this tree.
            "PUNCTUAL_STATE_DIR": str(WORK / "no-local-state"),
        })
        return env

    def punctual(self, *args, timeout=120) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bins["punctual"]), *args], env=self.ops_env(), cwd=str(WORK),
                              capture_output=True, text=True, timeout=timeout)

    def import_renewals(self):
        started = time.monotonic()
        now = dt.datetime.now(dt.UTC)
        # The first minute boundary at least 10 s ahead (local_send_time is HH:MM): the rule's
        # first tick comes ≈ 60 s after it was created, so the release waits for the tick.
        due = (now + dt.timedelta(seconds=10)).replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        self.due = due
        tomorrow = (now + dt.timedelta(days=1)).date().isoformat()
        rows = [
            # (renewal_id, channel, local date, HH:MM, window minutes)
            ("e2e-normal", "email", due.date().isoformat(), due.strftime("%H:%M"), 120),
            ("e2e-urgent", "email", due.date().isoformat(), due.strftime("%H:%M"), 5),
            # Routed by its channel to the sms queue, and by its 5-minute window to the sms
            # channel's urgent lane, both sent through the sms double.
            ("e2e-sms", "sms", due.date().isoformat(), due.strftime("%H:%M"), 120),
            ("e2e-sms-urgent", "sms", due.date().isoformat(), due.strftime("%H:%M"), 5),
            # Never released by a tick during the run: its message is sent by hand (step e).
            ("e2e-dead", "email", tomorrow, "09:00", 120),
            # Never released by a tick either: step i sends its message to the sms queue by
            # hand after the sms channel is turned off.
            ("e2e-sms-off", "sms", tomorrow, "09:00", 120),
        ]
        path = WORK / "renewals.csv"
        with open(path, "w") as f:
            f.write("tenant_id,renewal_id,recipient_ref,channel,zone,local_due_date,local_send_time,window_minutes\n")
            for rid, channel, date, hhmm, window in rows:
                f.write(f"e2e,{rid},cust-{rid},{channel},UTC,{date},{hhmm},{window}\n")
        r = self.punctual("import", str(path), "--json")
        if r.returncode != 0:
            raise StepFailed("import", f"punctual import exited {r.returncode}: {r.stdout}{r.stderr}")
        ddb = self.aws("dynamodb")
        self.renewal = {}
        for rid, *_ in rows:
            item = ddb.get_item(TableName=self.outputs["RenewalsTableName"], Key={"pk": {"S": f"renewal:e2e:{rid}"}},
                                ConsistentRead=True).get("Item")
            if not item:
                raise StepFailed("import", f"renewal {rid} not in the stack's renewals table")
            self.renewal[rid] = {k: list(v.values())[0] for k, v in item.items()}
        # e2e-dead's message is sent by hand (step e) as if a tick had released it now: its row
        # takes that version (deliver_after 10 s ago, deliver_by in an hour) and the released
        # state in one write, out of the due index, so no tick releases it and the sender's
        # version check (a copy of a version the table no longer holds is never sent) sees the
        # copy as current.
        self.release_by_hand("e2e-dead")
        ok("import", f"6 renewals into {self.outputs['RenewalsTableName']}: e2e-normal (120 min), e2e-urgent "
           f"(5 min), e2e-sms (sms, 120 min) and e2e-sms-urgent (sms, 5 min) due {due:%H:%M:%S}Z; e2e-dead imported for tomorrow, then released by hand (due now); e2e-sms-off for tomorrow (step i)", started)

    def release_by_hand(self, rid: str):
        """The renewal's row as a tick would leave it on releasing it now (deliver_after 10 s ago,
        deliver_by in an hour, `enqueued`, out of the due index), so no tick releases it and the
        sender's version check sees a copy sent by hand (send_reminder_body) as current."""
        now_ms = int(time.time() * 1000)
        after_ms, by_ms = now_ms - 10_000, now_ms + 3_600_000
        self.aws("dynamodb").update_item(
            TableName=self.outputs["RenewalsTableName"], Key={"pk": {"S": f"renewal:e2e:{rid}"}},
            UpdateExpression="SET deliver_after_ms = :a, deliver_by_ms = :b, sched_state = :s REMOVE due_shard, due_after_ms",
            ExpressionAttributeValues={":a": {"N": str(after_ms)}, ":b": {"N": str(by_ms)}, ":s": {"S": "enqueued"}},
        )
        self.renewal[rid].update(deliver_after_ms=str(after_ms), deliver_by_ms=str(by_ms))

    def send_reminder_body(self, rid: str) -> str:
        r = self.renewal[rid]
        at = lambda ms: dt.datetime.fromtimestamp(int(ms) / 1000, dt.UTC)
        iso = lambda t: t.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        after, by = at(r["deliver_after_ms"]), at(r["deliver_by_ms"])
        return json.dumps({
            "v": 1, "reminder_id": r["reminder_id"], "renewal_id": rid, "tenant_id": "e2e",
            "kind": r.get("kind", "renewal_due"),
            "deliver_after": iso(after), "deliver_by": iso(by),
            "attempt": 0, "first_enqueued": iso(after), "correlation_id": "e2e-dead",
        })

    def dlq_letters(self) -> list[dict]:
        """The DLQ's letters, read without taking them (VisibilityTimeout 0)."""
        sqs = self.aws("sqs")
        got = sqs.receive_message(QueueUrl=self.outputs["DeadLetterQueueUrl"], MaxNumberOfMessages=10,
                                  VisibilityTimeout=0, WaitTimeSeconds=0, MessageAttributeNames=["All"])
        return [{"body": m["Body"], **{k: v.get("StringValue") for k, v in m.get("MessageAttributes", {}).items()}}
                for m in got.get("Messages", [])]

    def ledger_state(self, reminder_id: str) -> dict:
        item = self.aws("dynamodb").get_item(TableName=self.outputs["LedgerTableName"],
                                             Key={"pk": {"S": f"reminder:{reminder_id}"}}, ConsistentRead=True).get("Item") or {}
        return {k: list(v.values())[0] for k, v in item.items() if k in ("state", "attempts", "last_reason", "release_id")}

    # -- i. the sms channel turned off and on again ------------------------------------------------
    def digest(self, params: dict) -> str:
        return config_digest((ROOT / "infra" / "template.yaml").read_text(),
                             {k: v for k, v in params.items() if k != "ConfigDigest"},
                             [self.packages[k] for k in GRADUAL])

    def update_stack(self, step: str, params: dict) -> float:
        started = time.monotonic()
        self.aws("cloudformation").update_stack(
            StackName=STACK, TemplateURL=self.template_url,
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"])
        status, reason = self.wait_stack(STACK, timeout=180)
        if status != "UPDATE_COMPLETE":
            raise StepFailed(step, f"stack {status}: {reason}")
        return time.monotonic() - started

    def check_sms_off_and_on(self):
        """docs/deployment.md#turning-the-sms-channel-on-and-off: an update without
        SmsProviderUrl keeps the sms queues and the sender's mappings on them (invoking the
        alias, now on a new version); a reminder already released to the sms queue is drained
        and delivered through the one provider that remains (the email double); an update with
        the channel again completes on the same queues."""
        step = "i. sms off, then on again"
        started = time.monotonic()
        lam, sqs, o = self.aws("lambda"), self.aws("sqs"), self.outputs
        sender = self.physical["SenderFunction"]
        before = lam.get_alias(FunctionName=sender, Name="live")["FunctionVersion"]
        off = dict(self.params, SmsProviderUrl="", SmsProviderTokenSecretArn="")
        off["ConfigDigest"] = self.digest(off)
        took_off = self.update_stack(step, off)
        # What `live` runs (the version the mappings invoke), not $LATEST. By the alias's version:
        # LocalStack answers GetFunctionConfiguration with an alias qualifier "Function not found".
        def live_env():
            version = lam.get_alias(FunctionName=sender, Name="live")["FunctionVersion"]
            return lam.get_function_configuration(FunctionName=sender, Qualifier=version).get("Environment", {}).get("Variables", {})
        env = live_env()
        if "CHANNELS" in env:
            raise StepFailed(step, f"the sender still declares CHANNELS={env['CHANNELS']!r} with the sms channel off")
        after = lam.get_alias(FunctionName=sender, Name="live")["FunctionVersion"]
        arns = {}
        for k in ("SmsQueueUrl", "SmsUrgentQueueUrl"):
            try:
                arns[k] = sqs.get_queue_attributes(QueueUrl=o[k], AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            except botocore.exceptions.ClientError as e:
                raise StepFailed(step, f"{k} is gone with the sms channel off: {e}")
        mapped = {m["EventSourceArn"]: m["FunctionArn"] for m in lam.list_event_source_mappings(FunctionName=sender)["EventSourceMappings"]}
        unpolled = [k for k, a in arns.items() if not mapped.get(a, "").endswith(":live")]
        if unpolled or after == before:
            raise StepFailed(step, f"with sms off: {unpolled} not polled through the alias ({mapped}); live {before} → {after}")
        accepted_before = self.accepted()
        self.release_by_hand("e2e-sms-off")
        sqs.send_message(QueueUrl=o["SmsQueueUrl"], MessageBody=self.send_reminder_body("e2e-sms-off"))
        reminder = self.renewal["e2e-sms-off"]["reminder_id"]

        def delivered():
            st = self.ledger_state(reminder)
            return st if st.get("state") == "delivered" else (False, st)
        wait_for(step, "the sms queue's reminder delivered with the channel off", delivered, timeout=60)
        via_email = self.accepted() - accepted_before
        if via_email != 1:
            raise StepFailed(step, f"the one provider (the email double) accepted {via_email} calls, want 1")
        took_on = self.update_stack(step, self.params)
        env = live_env()
        again = sqs.get_queue_attributes(QueueUrl=o["SmsQueueUrl"], AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        if env.get("CHANNELS") != "email,sms" or again != arns["SmsQueueUrl"]:
            raise StepFailed(step, f"with sms on again: CHANNELS={env.get('CHANNELS')!r}, sms queue {again} (was {arns['SmsQueueUrl']})")
        ok(step, f"off: UPDATE_COMPLETE in {took_off:.1f} s, the sms queues and their mappings kept (live {before} → {after}), "
           f"the sms queue's reminder delivered through the one provider; on again: UPDATE_COMPLETE in {took_on:.1f} s "
           f"on the same queues, CHANNELS=email,sms (live {lam.get_alias(FunctionName=sender, Name='live')['FunctionVersion']})", started)

    # -- h. the producer's whole path ------------------------------------------------------------
    def start_producer(self):
        """A producer's command as an event on its bus (source ProducerSource, detail-type
        punctual.renewal) and a bad one sent straight to the commands queue; a capture rule on
        the outcome bus (source punctual) into a queue of the test's own. Checked at the end
        (check_producer), once two ticks have released, delivered and published it."""
        self.t_producer = time.monotonic()
        sqs, events = self.aws("sqs"), self.aws("events")
        capture = sqs.create_queue(QueueName=f"{STACK}-outcomes-capture")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=capture, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        events.put_rule(Name=f"{STACK}-outcomes-capture", EventBusName="default",
                        EventPattern=json.dumps({"source": ["punctual"], "detail-type": ["punctual.outcome"]}))
        events.put_targets(Rule=f"{STACK}-outcomes-capture", EventBusName="default",
                           Targets=[{"Id": "capture", "Arn": arn}])
        self.capture_url = capture
        # Due five minutes ago (UTC, to the minute), window 60: released by the next tick, and
        # before the window reconcile (step f) counts (it starts a minute before the imported
        # renewals' due time, which step b has just seen delivered).
        at = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        self.producer_renewal = "ren-bus-1"
        command = {
            "v": 1, "version": 1, "tenant_id": "e2e-producer", "renewal_id": self.producer_renewal,
            "recipient_ref": "cust-bus-1", "channel": "email", "zone": "UTC",
            "local_due_date": at.date().isoformat(), "local_send_time": at.strftime("%H:%M"),
            "window_minutes": 60, "data": {"plan": "pro"},
        }
        out = events.put_events(Entries=[{"Source": "com.example.billing", "DetailType": "punctual.renewal",
                                          "Detail": json.dumps(command), "EventBusName": "default"}])
        if out.get("FailedEntryCount"):
            raise StepFailed("h. producer → outcome", f"PutEvents refused the command: {out}")
        sqs.send_message(QueueUrl=self.outputs["CommandsQueueUrl"], MessageBody="renewal please")

    def check_producer(self):
        step = "h. producer → outcome"
        started = self.t_producer
        ddb, sqs = self.aws("dynamodb"), self.aws("sqs")
        key = {"pk": {"S": f"renewal:e2e-producer:{self.producer_renewal}"}}

        def applied():
            item = ddb.get_item(TableName=self.outputs["RenewalsTableName"], Key=key, ConsistentRead=True).get("Item")
            return item or (False, "no row yet")
        row = wait_for(step, "the command's renewal in the renewals table (rule → commands queue → ingest)", applied, timeout=60)
        if row.get("producer_version", {}).get("N") != "1":
            raise StepFailed(step, f"the renewal was written without its producer version: {row}")

        def rejected():
            got = sqs.receive_message(QueueUrl=self.outputs["CommandsDeadLetterQueueUrl"], MessageAttributeNames=["All"],
                                      MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", [])
            return got or (False, "the commands DLQ is empty")
        letters = wait_for(step, "the bad command on the commands DLQ", rejected, timeout=60)
        reason = letters[0].get("MessageAttributes", {}).get("reason", {}).get("StringValue", "")
        if "not JSON" not in reason:
            raise StepFailed(step, f"the bad command's letter does not say what is wrong: {letters[0]}")
        ingest = self.physical["IngestFunction"]
        calls = [j for j in self.journal() if j["function"] == ingest]
        if not calls or any(j["is_error"] for j in calls):
            raise StepFailed(step, f"the ingest's invocations: {calls}")

        def published():
            got = sqs.receive_message(QueueUrl=self.capture_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
            for m in got:
                event = json.loads(m["Body"])
                d = event.get("detail") or {}
                if d.get("renewal_id") == self.producer_renewal and d.get("outcome") == "delivered":
                    return event
            return (False, [json.loads(m["Body"]).get("detail", {}).get("outcome") for m in got])
        # Released by a tick, delivered, published by a later tick's sweep of the outbox.
        event = wait_for(step, f"the delivered outcome event of {self.producer_renewal} on the capture rule's queue",
                         published, timeout=200, interval=1)
        d = event["detail"]
        if not (event.get("source") == "punctual" and event.get("detail-type") == "punctual.outcome"
                and d.get("event_id", "").startswith("evt_") and d.get("tenant_id") == "e2e-producer"):
            raise StepFailed(step, f"the outcome event is not the contract's: {event}")
        ok(step, f"PutEvents → rule → commands queue → ingest ({len(calls)} invocations) → scheduler → sender → "
           f"outcome {d['event_id']} on the bus → capture rule's queue; the bad command on the commands DLQ "
           f"({reason[:50]})", started)

    def journal(self) -> list[dict]:
        path = WORK / "localstack" / "lambda" / "invocations.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def start_messages(self):
        """c's malformed message and e's reminder the double will refuse, both into the send
        queue now: they are handled long before the tick releases anything."""
        self.t_messages = time.monotonic()
        self.double_post("/control/script", [{"status": 400, "body": '{"error":"e2e: refused once"}'}])
        sqs = self.aws("sqs")
        sqs.send_message(QueueUrl=self.outputs["SendQueueUrl"], MessageBody=self.send_reminder_body("e2e-dead"))
        sqs.send_message(QueueUrl=self.outputs["SendQueueUrl"], MessageBody='{"v": 1, "e2e": "not a reminder"}')

    def check_malformed(self):
        def probe():
            letters = self.dlq_letters()
            hit = [m for m in letters if m.get("reason") == "malformed"]
            return hit or (False, letters)
        hit = wait_for("c. malformed → DLQ", "a letter with reason malformed", probe, timeout=60)
        ok("c. malformed → DLQ", f"the sender quarantined it (reason malformed: {hit[0].get('detail', '')[:70]})",
           self.t_messages)

    def check_redrive(self):
        step = "e. redrive via lambda:Invoke"
        reminder = self.renewal["e2e-dead"]["reminder_id"]

        def dead():
            letters = [m for m in self.dlq_letters() if m.get("reminder_id") == reminder]
            return letters or (False, self.ledger_state(reminder))
        letter = wait_for(step, f"{reminder} dead-lettered by the sender after the double's 400", dead, timeout=60)[0]
        if letter.get("reason") != "classified_permanent":
            raise StepFailed(step, f"the letter's reason is {letter.get('reason')!r}, want classified_permanent: {letter}")
        stats = self.double_stats()
        if stats["injected_errors"] != 1:
            raise StepFailed(step, f"the double answered {stats['injected_errors']} scripted errors, want 1: {stats}")
        # "The provider fixed it": the double forgets the 400 it would replay for that key.
        self.double_accepted_before_reset = stats["accepted"]
        self.double_post("/control/reset", {})
        started = time.monotonic()
        # The cap the function computes from the stack's environment (REDRIVE_MAX_PER_SECOND 20,
        # REDRIVE_SHARE 0.2 × ProviderRatePerSecond 100 = 20): 21/s is refused, with its reason.
        r = self.punctual("redrive", "--function", self.outputs["RedriveFunctionName"], "--reason", "e2e: above the cap",
                          "--owner", "e2e", "--max-messages", "1", "--max-per-second", "21", "--json", timeout=180)
        try:
            refused = json.loads(r.stdout)
        except ValueError:
            refused = {}
        problems = refused.get("problems") or []
        if r.returncode != 2 or refused.get("status") != "refused" or not any("max_per_second" in str(p) and "20" in str(p) for p in problems):
            raise StepFailed(step, f"a request above the redrive cap was not refused by the function (exit {r.returncode}): {r.stdout.strip()[:600]} {r.stderr.strip()[:300]}")
        r = self.punctual("redrive", "--function", self.outputs["RedriveFunctionName"], "--reason", "e2e: provider fixed",
                          "--owner", "e2e", "--max-messages", "1", "--max-per-second", "1",
                          "--failure-reason", "classified_permanent", "--json", timeout=180)
        try:
            answer = json.loads(r.stdout)
        except ValueError:
            answer = {}
        summary = answer.get("summary") or {}
        if r.returncode != 0 or answer.get("status") != "done" or summary.get("moved") != 1:
            raise StepFailed(step, f"punctual redrive exited {r.returncode}: {r.stdout.strip()[:600]} {r.stderr.strip()[:600]}")
        invoked = [j for j in self.journal() if j["function"] == self.outputs["RedriveFunctionName"]]
        if not invoked:
            raise StepFailed(step, "the redrive function has no invocation in the executor's journal")

        def delivered():
            s = self.ledger_state(reminder)
            return (s.get("state") == "delivered" and s.get("release_id")) and s or (False, s)
        state = wait_for(step, f"{reminder} delivered after the redrive", delivered, timeout=60)
        ok(step, f"21/s refused ({problems[0]}); moved {summary['moved']} letter ({reminder}) through "
           f"{self.outputs['RedriveFunctionName']}; "
           f"the sender delivered the redriven copy (release {state['release_id']}, {state.get('attempts')} attempts)", started)

    def start_alarm(self):
        """d's stand-in alarm (see the module's docs), created early so it is evaluated while
        the rest runs; a queue subscribed to the ticket topic receives its notification."""
        sqs, sns, cw = self.aws("sqs"), self.aws("sns"), self.aws("cloudwatch")
        self.t_alarm = time.monotonic()
        url = sqs.create_queue(QueueName=f"{STACK}-ticket-inbox")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=self.ticket_topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "false"})
        self.ticket_inbox = url
        dlq_name = self.outputs["DeadLetterQueueUrl"].rstrip("/").rsplit("/", 1)[-1]
        self.standin_alarm = f"{STACK}-e2e-dlq-visible"
        cw.put_metric_alarm(
            AlarmName=self.standin_alarm,
            AlarmDescription="e2e stand-in for DlqNotEmptyAlarm (metric math, which LocalStack does not evaluate)",
            Namespace="AWS/SQS", MetricName="ApproximateNumberOfMessagesVisible",
            Dimensions=[{"Name": "QueueName", "Value": dlq_name}], Statistic="Maximum", Period=10,
            EvaluationPeriods=1, Threshold=0, ComparisonOperator="GreaterThanThreshold",
            TreatMissingData="notBreaching", AlarmActions=[self.ticket_topic], OKActions=[self.ticket_topic])

    def check_alarm(self):
        step = "d. DLQ alarm"
        cw = self.aws("cloudwatch")
        template_alarm = self.physical["DlqNotEmptyAlarm"]
        alarms = {a["AlarmName"]: a for a in cw.describe_alarms()["MetricAlarms"]}
        t = alarms.get(template_alarm)
        if t is None:
            raise StepFailed(step, f"DlqNotEmptyAlarm ({template_alarm}) is not in CloudWatch")
        # LocalStack evaluates only simple alarms (top-level MetricName): say what it did with
        # the template's, then check the stand-in.
        simple = [a for n, a in alarms.items() if n in self.alarm_names and a.get("MetricName")]
        math = [a for n, a in alarms.items() if n in self.alarm_names and a.get("Metrics")]
        evaluated = [a for a in simple if a["StateValue"] != "INSUFFICIENT_DATA"]
        unevaluated_math = [a for a in math if a["StateValue"] == "INSUFFICIENT_DATA"]
        say(f"{step}: DlqNotEmptyAlarm (metric math) is {t['StateValue']} ({t.get('StateReason', '')!r}): "
            f"LocalStack evaluates no metric-math alarm ({len(unevaluated_math)} of the template's {len(math)} never left "
            f"INSUFFICIENT_DATA); it evaluated {len(evaluated)} of its {len(simple)} simple alarms at creation "
            f"({', '.join(sorted({a['StateValue'] for a in evaluated}))})")
        if t["StateValue"] == "ALARM":
            ok(step, "DlqNotEmptyAlarm itself is in ALARM", self.t_alarm)
            return

        def alarm():
            a = cw.describe_alarms(AlarmNames=[self.standin_alarm])["MetricAlarms"][0]
            return (a["StateValue"] == "ALARM" and a) or (False, f"{a['StateValue']}: {a.get('StateReason')}")
        a = wait_for(step, f"{self.standin_alarm} in ALARM", alarm, timeout=90, interval=1)
        sqs = self.aws("sqs")

        def notified():
            got = sqs.receive_message(QueueUrl=self.ticket_inbox, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            for m in got.get("Messages", []):
                msg = json.loads(json.loads(m["Body"]).get("Message", "{}"))
                if msg.get("AlarmName") == self.standin_alarm and msg.get("NewStateValue") == "ALARM":
                    return msg
            return (False, "no ALARM notification on the ticket topic yet")
        wait_for(step, "the ALARM notification on the ticket topic", notified, timeout=30, interval=0.2)
        ok(step, f"stand-in {self.standin_alarm} (DLQ ApproximateNumberOfMessagesVisible, Maximum, 10 s, > 0) went ALARM "
           f"({a.get('StateReason')}) and notified the ticket topic", self.t_alarm)

    def check_tick(self):
        step = "a. rule → scheduler tick"
        ddb = self.aws("dynamodb")

        def released():
            states = {}
            for rid in ("e2e-normal", "e2e-urgent", "e2e-sms", "e2e-sms-urgent"):
                item = ddb.get_item(TableName=self.outputs["RenewalsTableName"], Key={"pk": {"S": f"renewal:e2e:{rid}"}},
                                    ConsistentRead=True)["Item"]
                states[rid] = item.get("sched_state", {}).get("S")
            return all(s == "enqueued" for s in states.values()) and states or (False, states)
        # The rule's first firing comes ≈ 1 minute after it is created, then every minute:
        # two periods and a margin.
        wait_for(step, "the four renewals released (sched_state enqueued)", released,
                 timeout=max(10.0, 150 - (time.monotonic() - self.t_deployed)), interval=1)
        scheduler = self.physical["SchedulerFunction"]

        def journalled():
            # The invocation's journal line is written when it returns, after its marks: the
            # rows can read released a moment before the line exists.
            ticks = [j for j in self.journal() if j["function"] == scheduler]
            by_rule = [j for j in ticks if j.get("source") == "aws.events" and j.get("detail_type") == "Scheduled Event"]
            return (ticks, by_rule) if by_rule else None

        ticks, by_rule = wait_for(step, "the rule's scheduler invocation in the journal", journalled, timeout=15)
        if any(j["is_error"] for j in by_rule):
            raise StepFailed(step, f"a scheduler invocation by the EventBridge rule failed: {ticks}")
        first = by_rule[0]["at"] - self.deployed_at
        ok(step, f"the rule invoked {scheduler} {len(by_rule)}× (first {first:.0f} s after the stack was created); "
           f"it released e2e-normal, e2e-urgent, e2e-sms and e2e-sms-urgent", self.t_deployed)

    def check_lanes(self):
        step = "b. each queue's mapping → sender → its provider"
        want = {"e2e-normal": self.queue_arn["SendQueueUrl"], "e2e-urgent": self.queue_arn["UrgentQueueUrl"],
                "e2e-sms": self.queue_arn["SmsQueueUrl"], "e2e-sms-urgent": self.queue_arn["SmsUrgentQueueUrl"]}
        sender = self.physical["SenderFunction"]

        def delivered():
            found = {}
            for j in self.journal():
                if j["function"] != sender or j["is_error"]:
                    continue
                for rid, arn in want.items():
                    rem = self.renewal[rid]["reminder_id"]
                    if j["event_sources"] == [arn] and any(rem in line and '"delivered"' in line for line in j["logs"]):
                        found[rid] = arn.rsplit(":", 1)[-1]
            states = {rid: self.ledger_state(self.renewal[rid]["reminder_id"]).get("state") for rid in want}
            done = len(found) == len(want) and all(s == "delivered" for s in states.values())
            return done and found or (False, {"invocations": found, "ledger": states})
        found = wait_for(step, "the four renewals delivered, each by its own queue's mapping", delivered, timeout=90, interval=1)
        accepted, sms = self.accepted(), self.double_stats(self.sms_base)["accepted"]
        if (accepted, sms) != (3, 2):
            raise StepFailed(step, f"the provider double accepted {accepted} deliveries and the sms double {sms}, "
                             "want 3 (e2e-dead, e2e-normal, e2e-urgent) and 2 (e2e-sms, e2e-sms-urgent)")
        ok(step, f"e2e-urgent via {found['e2e-urgent']}, e2e-normal via {found['e2e-normal']}, e2e-sms via {found['e2e-sms']}, "
           f"e2e-sms-urgent via {found['e2e-sms-urgent']}; the email double accepted {accepted} (with e2e-dead), the sms double {sms}",
           self.t_deployed)

    def check_ops(self):
        step = "f. status + reconcile"
        started = time.monotonic()
        r = self.punctual("status", "--json")
        (WORK / "status.json").write_text(r.stdout)
        try:
            status = json.loads(r.stdout)
        except ValueError:
            status = None
        if r.returncode != 0 or not isinstance(status, dict):
            raise StepFailed(step, f"punctual status exited {r.returncode}: {r.stdout[:500]} {r.stderr[:500]}")
        lanes = {k: status.get(k) for k in ("send_visible", "send_in_flight", "send_delayed",
                                             "urgent_visible", "urgent_in_flight", "urgent_delayed")}
        # The DLQ holds the malformed letter only (e2e-dead was redriven and delivered).
        # The sms queue and its urgent lane are read too, and empty.
        own = (status.get("channel_queues") or {}).get("sms") or {}
        lanes.update({f"sms_{q}_{k}": own.get(q, {}).get(k) for q in ("queue", "urgent") for k in ("visible", "in_flight", "delayed")})
        if status.get("dlq") != 1 or any(lanes.values()) or None in lanes.values() or status.get("paused"):
            raise StepFailed(step, f"status does not read the stack as it is (DLQ 1, lanes and sms queues empty, not paused): {r.stdout[:800]}")
        frm = (self.due - dt.timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
        r = self.punctual("reconcile", "--from", frm, "--to", "now", "--json")
        (WORK / "reconcile.json").write_text(r.stdout)
        try:
            rec = json.loads(r.stdout)
        except ValueError:
            rec = None
        if r.returncode != 0 or not isinstance(rec, dict):
            raise StepFailed(step, f"punctual reconcile exited {r.returncode}: {r.stdout[:800]} {r.stderr[:500]}")
        per = {c: (a.get("population"), a.get("delivered")) for c, a in (rec.get("channels") or {}).items()}
        if rec.get("population") != 4 or rec.get("delivered") != 4 or rec.get("unaccounted") or per != {"email": (2, 2), "sms": (2, 2)}:
            raise StepFailed(step, f"reconcile does not account for e2e-normal, e2e-urgent (email), e2e-sms and e2e-sms-urgent (sms) as delivered: {r.stdout[:1200]}")
        ok(step, f"status: DLQ {status['dlq']}, lanes and sms queues empty, not paused ({status.get('requests')} requests); "
           f"reconcile {frm} → now: population {rec['population']}, delivered {rec['delivered']} (email {per['email'][1]}, "
           f"sms {per['sms'][1]}), unaccounted 0 (exit 0)", started)

    def start_failed_create(self):
        """g's failed create: the same template, every function's code missing from S3 (a
        wrong bucket or key is the likeliest failed first deploy), as a second stack."""
        self.failed_stack = f"{STACK}-failed"
        keys = {logical: f"missing/{logical}.zip" for logical in FUNCTIONS}
        body = packaged_template(ROOT / "infra" / "template.yaml", keys, self.bucket)
        self.aws("s3").put_object(Bucket=self.bucket, Key="template-failed.json", Body=body.encode())
        self.create_stack(self.failed_stack, self.params, template_url=f"{self.endpoint}/{self.bucket}/template-failed.json")

    def check_template_limits(self):
        """g: what the template relies on, as far as LocalStack can show it. Reported; fails
        only when a probe did not do what it must to mean anything."""
        step = "g. template on LocalStack"
        started = time.monotonic()
        status, reason = self.wait_stack(self.failed_stack, timeout=60)
        if status == "CREATE_COMPLETE" or status.endswith("_IN_PROGRESS"):
            raise StepFailed(step, f"the stack without function code ended {status}: the probe did not fail ({reason})")
        prefix = f"{self.failed_stack}-"
        queues = [u.rsplit("/", 1)[-1] for u in self.aws("sqs").list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])]
        tables = [t for t in self.aws("dynamodb").list_tables()["TableNames"] if t.startswith(prefix)]
        groups = [g["logGroupName"] for g in self.aws("logs").describe_log_groups(logGroupNamePrefix=prefix)["logGroups"]]
        roles = [x["RoleName"] for x in self.aws("iam").list_roles()["Roles"] if x["RoleName"].startswith(prefix)]
        say(f"{step}: a create without function code ended {status}; LocalStack rolled nothing back: left "
            f"{len(queues)} queues {queues}, {len(tables)} tables, {len(groups)} log groups (queues and log groups RetainExceptOnCreate, tables Retain) "
            f"and {len(roles)} IAM roles (not Retain) — so it cannot show Retain vs RetainExceptOnCreate on a failed create")
        # The template's Rules: ProviderKind http without ProviderUrl must be refused before
        # anything is created. Probed with the template's own Parameters, Rules and Conditions
        # around one harmless resource.
        tpl = yaml.load((ROOT / "infra" / "template.yaml").read_text(), Loader=CfnLoader)
        probe = {"AWSTemplateFormatVersion": "2010-09-09", "Parameters": tpl["Parameters"], "Rules": tpl["Rules"],
                 "Conditions": tpl["Conditions"], "Resources": {"Probe": {"Type": "AWS::SNS::Topic"}}}
        params = dict(self.params, ProviderUrl="")
        try:
            self.aws("cloudformation").create_stack(
                StackName=f"{STACK}-rules", TemplateBody=json.dumps(probe, default=str),
                Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()])
            rules = f"NOT evaluated: a stack with ProviderKind http and no ProviderUrl ended {self.wait_stack(f'{STACK}-rules', 60)[0]}"
        except botocore.exceptions.ClientError as e:
            rules = f"evaluated: {e.response['Error'].get('Message')}"
        say(f"{step}: Rules (HttpProviderIsComplete) {rules}")
        ddb, lam, logs = self.aws("dynamodb"), self.aws("lambda"), self.aws("logs")
        ledger = self.outputs["LedgerTableName"]
        table = ddb.describe_table(TableName=ledger)["Table"]
        pitr = ddb.describe_continuous_backups(TableName=ledger)["ContinuousBackupsDescription"]
        ttl = ddb.describe_time_to_live(TableName=ledger)["TimeToLiveDescription"]
        say(f"{step}: LedgerTable DeletionProtectionEnabled={table.get('DeletionProtectionEnabled')} "
            f"PITR={pitr.get('PointInTimeRecoveryDescription', {}).get('PointInTimeRecoveryStatus')} "
            f"(LocalStack's AWS::DynamoDB::Table provider passes neither on), TTL={ttl.get('TimeToLiveStatus')} "
            f"on {ttl.get('AttributeName')}, SSE={table.get('SSEDescription', {}).get('Status')}")
        sender = self.physical["SenderFunction"]
        cfg = lam.get_function_configuration(FunctionName=sender)
        template_group = cfg.get("LoggingConfig", {}).get("LogGroup")
        streams = lambda g: len(logs.describe_log_streams(logGroupName=g).get("logStreams", []))
        try:
            default_streams = streams(f"/aws/lambda/{sender}")
        except botocore.exceptions.ClientError:
            default_streams = 0
        eic = lam.get_function_event_invoke_config(FunctionName=self.physical["SchedulerFunction"], Qualifier="live")
        codedeploy = {r["LogicalResourceId"]: r["ResourceStatus"] for r in
                      self.aws("cloudformation").list_stack_resources(StackName=STACK)["StackResourceSummaries"]
                      if r["ResourceType"].startswith("AWS::CodeDeploy::")}
        say(f"{step}: gradual deploys: the stack lists its CodeDeploy resources as {codedeploy or 'nothing'}, but LocalStack "
            "community has no CodeDeploy (an unsupported type is reported complete, nothing exists behind it) and ignores "
            "the aliases' UpdatePolicy: a shift, its guards and its rollback are not exercised")
        say(f"{step}: sender LoggingConfig.LogGroup={template_group} has {streams(template_group)} log streams, "
            f"/aws/lambda/{sender} has {default_streams} (LocalStack ignores LoggingConfig); scheduler EventInvokeConfig "
            f"stored (MaximumEventAgeInSeconds={eic.get('MaximumEventAgeInSeconds')}, "
            f"MaximumRetryAttempts={eic.get('MaximumRetryAttempts')}), not exercised")
        ok(step, "what LocalStack can and cannot show of the template is reported above", started)

    # -- the run ---------------------------------------------------------------------------------
    def main(self):
        if WORK.exists():
            shutil.rmtree(WORK)
        WORK.mkdir(parents=True)
        say(f"work dir {WORK}; LocalStack log {WORK / 'localstack.log'}; functions' output {WORK / 'localstack' / 'lambda'}")
        begin("localstack")
        self.start_localstack()
        begin("build")
        if not self.args.no_build:
            self.build()
        else:
            (WORK / "bin").mkdir(exist_ok=True)
            for name in ("sender", "scheduler", "redrive", "ingest", "punctual"):
                self.bins[name] = Path(shutil.copy2(ROOT / "target" / "debug" / name, WORK / "bin" / name))
        begin("package")
        self.package()
        begin("localstack")
        self.wait_localstack()
        begin("provider double")
        self.start_double()
        begin("deploy")
        self.deploy()
        self.t_deployed = time.monotonic()
        self.deployed_at = time.time()
        begin("outputs")
        self.check_stack()
        begin("g. template on LocalStack")
        self.start_failed_create()
        begin("import")
        self.import_renewals()
        begin("c. malformed → DLQ")
        self.start_messages()
        begin("d. DLQ alarm")
        self.start_alarm()
        begin("c. malformed → DLQ")
        self.check_malformed()
        begin("e. redrive via lambda:Invoke")
        self.check_redrive()
        begin("d. DLQ alarm")
        self.check_alarm()
        begin("a. rule → scheduler tick")
        self.check_tick()
        begin("b. each queue's mapping → sender → its provider")
        self.check_lanes()
        # After b, whose counts are the imported renewals' alone.
        begin("h. producer → outcome")
        self.start_producer()
        begin("f. status + reconcile")
        self.check_ops()
        begin("g. template on LocalStack")
        self.check_template_limits()
        begin("h. producer → outcome")
        self.check_producer()
        begin("i. sms off, then on again")
        self.check_sms_off_and_on()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-build", action="store_true", help="use target/debug's binaries as they are")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    procs = Processes()
    code = 0
    try:
        Run(args, procs).main()
        say(f"all steps passed in {time.monotonic() - T0:.1f} s")
    except StepFailed as e:
        say(f"FAILED at step {e.step}: {e.detail}")
        say(f"logs: {WORK / 'localstack.log'}, {WORK / 'localstack' / 'lambda'}, {WORK / 'provider-double.log'}")
        code = 1
    except (OSError, ValueError, KeyError, RuntimeError, subprocess.SubprocessError, botocore.exceptions.BotoCoreError,
            botocore.exceptions.ClientError) as e:
        say(f"FAILED at step {CURRENT}: {type(e).__name__}: {str(e)[:2000]}")
        say(f"logs: {WORK / 'localstack.log'}, {WORK / 'localstack' / 'lambda'}, {WORK / 'provider-double.log'}")
        code = 1
    except KeyboardInterrupt:
        say("interrupted (SIGINT): stopping what was started")
        code = 130
    except SystemExit as e:
        say(f"stopped by signal (exit {e.code}): stopping what was started")
        code = e.code if isinstance(e.code, int) else 1
    finally:
        # A second signal during cleanup must not leave LocalStack running.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stopping = time.monotonic()
        procs.stop_all()
        say(f"stopped LocalStack and the provider doubles ({time.monotonic() - stopping:.1f} s)")
    sys.exit(code)


if __name__ == "__main__":
    main()
