#!/usr/bin/env python3
"""Deploys infra/template.yaml into the emulator at AWS_ENDPOINT_URL, the way CloudFormation
would on AWS, and prints what the stack created as JSON (for tests/tests/deployed.rs).

1. Translate the SAM template offline with the pinned aws-sam-translator (a stub managed-policy
   loader: nothing is looked up on AWS). Function code points at a stub zip in an emulator S3
   bucket; moto stores functions but never runs them (no Docker).
2. Create the stack with CloudFormation on the emulator and wait for CREATE_COMPLETE.
3. Print, per function, its name and environment, and the physical names of the queues and
   tables. Queue URLs in moto's outputs carry the AWS host, so queues are reported by name.

moto's CloudFormation skips alarms and TTL; tools/check_template.py covers those.
"""

import io
import json
import os
import sys
import time
import zipfile

import boto3
from cfnlint.decode import decode
from samtranslator.translator.transform import transform

ENDPOINT = os.environ.get("AWS_ENDPOINT_URL")
if not ENDPOINT or not ENDPOINT.startswith(("http://127.0.0.1", "http://localhost")):
    sys.exit("deploy_to_emulator: AWS_ENDPOINT_URL must point at a local emulator")
REGION = os.environ.setdefault("AWS_DEFAULT_REGION", os.environ.get("AWS_REGION", "us-east-1"))
STACK = os.environ.get("PUNCTUAL_STACK", f"punctual-{int(time.time() * 1000)}")
BUCKET = f"{STACK}-artifacts"


class StubPolicies:
    """Managed policy names → ARNs without calling IAM (translation stays offline)."""

    def load(self):
        return {}


def client(name):
    return boto3.client(name, endpoint_url=ENDPOINT, region_name=REGION)


def main(path):
    template, errors = decode(path)
    if errors:
        sys.exit(f"deploy_to_emulator: cannot read {path}: {errors}")
    for res in template["Resources"].values():
        if res["Type"] == "AWS::Serverless::Function":
            res["Properties"]["CodeUri"] = f"s3://{BUCKET}/stub.zip"
            res.pop("Metadata", None)
    params = {
        "ProviderUrl": "http://127.0.0.1:9/v1/messages",
        "ProviderTokenSecretArn": f"arn:aws:secretsmanager:{REGION}:123456789012:secret:{STACK}-token-AbC123",  # the full ARN the template demands (6-character suffix)
        "AlarmTopicArn": f"arn:aws:sns:{REGION}:123456789012:{STACK}-alarms",
    }
    translated = transform(template, params, StubPolicies())

    s3 = client("s3")
    s3.create_bucket(Bucket=BUCKET)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("bootstrap", "#!/bin/sh\necho stub\n")
    s3.put_object(Bucket=BUCKET, Key="stub.zip", Body=buf.getvalue())

    cfn = client("cloudformation")
    cfn.create_stack(
        StackName=STACK,
        TemplateBody=json.dumps(translated),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    deadline = time.time() + 120
    while True:
        status = cfn.describe_stacks(StackName=STACK)["Stacks"][0]["StackStatus"]
        if status == "CREATE_COMPLETE":
            break
        if status.endswith("FAILED") or "ROLLBACK" in status or time.time() > deadline:
            events = cfn.describe_stack_events(StackName=STACK)["StackEvents"][:10]
            sys.exit(f"deploy_to_emulator: stack {status}: {json.dumps(events, default=str)[:2000]}")
        time.sleep(0.5)

    resources = cfn.list_stack_resources(StackName=STACK)["StackResourceSummaries"]
    physical = {r["LogicalResourceId"]: r.get("PhysicalResourceId", "") for r in resources}
    lam = client("lambda")
    functions = {}
    for logical in ("SenderFunction", "SchedulerFunction", "RedriveFunction"):
        cfg = lam.get_function_configuration(FunctionName=physical[logical])
        functions[logical] = {
            "name": cfg["FunctionName"],
            "timeout": cfg.get("Timeout"),
            "environment": cfg.get("Environment", {}).get("Variables", {}),
        }
    mappings = lam.list_event_source_mappings(FunctionName=physical["SenderFunction"])["EventSourceMappings"]
    queue_name = lambda url: url.rstrip("/").rsplit("/", 1)[-1]
    queue_name_of_arn = lambda arn: arn.rsplit(":", 1)[-1]
    out = {
        "stack": STACK,
        "send_queue": queue_name(physical["SendQueue"]),
        "urgent_queue": queue_name(physical["UrgentQueue"]),
        "dlq": queue_name(physical["DeadLetterQueue"]),
        "ledger_table": physical["LedgerTable"],
        "renewals_table": physical["RenewalsTable"],
        "functions": functions,
        "sender_event_source_mappings": len(mappings),
        # Which queue each mapping polls (by name) and its MaximumConcurrency.
        "sender_mappings": sorted(
            [queue_name_of_arn(m.get("EventSourceArn", "")), (m.get("ScalingConfig") or {}).get("MaximumConcurrency")]
            for m in mappings
        ),
        "resource_types": sorted({r["ResourceType"] for r in resources}),
    }
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "infra/template.yaml")
