"""Sets infra/stack-policy.json as the deployed stack's policy (`make deploy` runs it after
`sam deploy`; `make stack-policy` runs it alone).

The policy refuses `Update:Replace` and `Update:Delete` on the tables and queues: a template
change that would replace one (a new key schema, a renamed queue) or drop it from the stack
fails the update, and CloudFormation rolls it back, instead of leaving the data behind in a
retained resource the stack no longer uses while a new, empty one takes its place. Every other
update stays allowed (a stack policy denies everything it does not allow). `sam deploy` has no
option for a stack policy, hence this step.

The stack and region are the ones `sam deploy --guided` saved in infra/samconfig.toml
(`[default.deploy.parameters]`, then `[default.global.parameters]`): `stack_name`, `region`,
`profile`; without a saved region, boto3's own chain (AWS_REGION, the profile's). Runs with the
SAM CLI's venv (.venv), whose boto3 the SAM CLI brings. Exits 1 if the stack does not exist or
the policy read back is not the file's.

Nothing here is exercised against AWS by the tests; tools/check_template.py checks the policy's
content against the template (it names exactly the tables and queues, by logical id).
"""
import argparse
import json
import sys
import tomllib

import boto3
import botocore.exceptions


def saved(config_path: str, env: str) -> dict:
    """The saved deploy parameters, the global ones under them."""
    try:
        with open(config_path, "rb") as f:
            config = tomllib.load(f)
    except FileNotFoundError:
        return {}
    section = config.get(env, {})
    return {**section.get("global", {}).get("parameters", {}), **section.get("deploy", {}).get("parameters", {})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="infra/samconfig.toml")
    ap.add_argument("--config-env", default="default")
    ap.add_argument("--policy", default="infra/stack-policy.json")
    ap.add_argument("--stack-name", help="instead of the saved stack_name")
    ap.add_argument("--region", help="instead of the saved region")
    args = ap.parse_args()

    params = saved(args.config, args.config_env)
    stack = args.stack_name or params.get("stack_name")
    if not stack:
        print(f"stack-policy: no stack_name in {args.config} (run `make deploy` once) and no --stack-name", file=sys.stderr)
        return 1
    with open(args.policy) as f:
        policy = json.load(f)
    session = boto3.Session(profile_name=params.get("profile"), region_name=args.region or params.get("region"))
    cfn = session.client("cloudformation")
    try:
        cfn.set_stack_policy(StackName=stack, StackPolicyBody=json.dumps(policy))
        body = cfn.get_stack_policy(StackName=stack).get("StackPolicyBody")
    except botocore.exceptions.ClientError as e:
        print(f"stack-policy: {stack} ({session.region_name}): {e.response['Error'].get('Message', e)}", file=sys.stderr)
        return 1
    if not body or json.loads(body) != policy:
        print(f"stack-policy: {stack} ({session.region_name}) reads back another policy: {body}", file=sys.stderr)
        return 1
    denied = sorted({r.split("/", 1)[-1] for s in policy["Statement"] if s.get("Effect") == "Deny"
                     for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])})
    print(f"==> stack policy on {stack} ({session.region_name}): Update:Replace and Update:Delete refused on {', '.join(denied)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
