#!/usr/bin/env python3
"""The `ConfigDigest` a deploy passes to infra/template.yaml: a SHA-256 of what the sender's,
scheduler's and ingest's published versions are made of: their resources in the template
(with Globals), the effective value of every parameter those resources read (directly, in a
`${…}` of a Sub, or through a condition), and their built binaries.

Why (docs/deployment.md#gradual-deploys): the three run behind an alias `live` on a published
version, and SAM publishes a new version only when its hash of the function's properties
changes. It hashes them with their `!Ref`s to parameters unresolved, so a deploy that changes
only a parameter (ProviderRatePerSecond, or SmsProviderUrl turning the sms channel off) would
update `$LATEST`, which nothing invokes, and leave `live` on the old settings. The functions'
`AutoPublishCodeSha256: !Ref ConfigDigest` makes this digest the version's identity. SAM then
uses it *instead of* its own hash (measured: the version's logical id is the digest's first
characters), so it covers the code and the resources too, or a new binary with the same
parameters would publish nothing. It covers nothing else: a change to an alarm, the dashboard,
a comment, the redrive, or a parameter no function of the three reads publishes no version and
starts no gradual shift.

An "effective value" is the deploy's override, else the template's default: pass every
parameter the stack was deployed with (`make deploy` passes the answers saved in
infra/samconfig.toml). On an update CloudFormation keeps a parameter that is not given at its
previous value, not its default; a digest of a partial set is of values not deployed.

`make deploy` and `make e2e` pass it; a deploy by hand must too (or pass it empty: SAM's own
hash then, which misses parameter-only changes).

Usage: tools/config_digest.py TEMPLATE ['K=V K2="v 2" …'] [--code FILE …]   (the overrides as
one string, as `sam deploy --parameter-overrides` takes them, ConfigDigest itself ignored; the
three built bootstraps, in any order). Prints the hex digest. Exit 2 on an override naming no
parameter of the template (CloudFormation refuses those too), or a code file that cannot be
read.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sys
from pathlib import Path

import yaml

# The functions behind an alias (infra/template.yaml's DeploymentPreference; check_template.py
# GRADUAL). The redrive keeps no alias: its code and settings are not in the digest.
GRADUAL = ("SenderFunction", "SchedulerFunction", "IngestFunction")
IGNORED = {"ConfigDigest"}
# Properties of the function resource that are not its version's: CodeDeploy's settings, the
# event sources (mappings and the rule are resources of their own, updated at once), and the
# function-level reserved concurrency. A change to them publishes nothing and shifts nothing.
NOT_THE_VERSION = {"DeploymentPreference", "Events", "ReservedConcurrentExecutions"}


class CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short-form tags, into their JSON form."""


def _cfn_tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "Condition":
        return {"Condition": value}
    if suffix == "GetAtt" and isinstance(value, str):
        return {"Fn::GetAtt": value.split(".", 1)}
    return {f"Fn::{suffix}": value}


CfnLoader.add_multi_constructor("!", _cfn_tag)


def _names(node, out: set[str]) -> set[str]:
    """Every Ref target, Sub variable and condition name in `node`."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "Ref" and isinstance(v, str):
                out.add(v)
            elif k == "Condition" and isinstance(v, str):
                out.add(v)
            elif k == "Fn::If" and isinstance(v, list) and v and isinstance(v[0], str):
                out.add(v[0])
            elif k == "Fn::Sub":
                text = v[0] if isinstance(v, list) and v else v
                if isinstance(text, str):
                    out.update(n.split(".")[0] for n in re.findall(r"\$\{([^}!]+)\}", text))
            _names(v, out)
    elif isinstance(node, list):
        for v in node:
            _names(v, out)
    return out


def inputs(template_text: str, overrides: dict[str, str]) -> dict:
    """What the three versions are made of, bar the code."""
    t = yaml.load(template_text, Loader=CfnLoader) or {}
    params = t.get("Parameters", {}) or {}
    unknown = sorted(set(overrides) - set(params) - IGNORED)
    if unknown:
        raise KeyError(f"not parameters of the template: {', '.join(unknown)}")
    resources = {}
    for n in GRADUAL:
        r = dict(t.get("Resources", {}).get(n) or {})
        r["Properties"] = {k: v for k, v in (r.get("Properties") or {}).items() if k not in NOT_THE_VERSION}
        resources[n] = r
    globals_ = (t.get("Globals", {}) or {}).get("Function", {})
    conditions = t.get("Conditions", {}) or {}
    seen, todo = set(), _names([resources, globals_], set())
    while todo:  # conditions name parameters and other conditions
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in conditions:
            todo |= _names(conditions[n], set())
    used = sorted(n for n in seen if n in params and n not in IGNORED)
    values = {n: str(overrides.get(n, (params[n] or {}).get("Default", ""))) for n in used}
    return {"resources": resources, "globals": globals_,
            "conditions": {n: conditions[n] for n in sorted(seen) if n in conditions}, "parameters": values}


def digest(template_text: str, overrides: dict[str, str], code: list[bytes] = ()) -> str:
    h = hashlib.sha256(json.dumps(inputs(template_text, overrides), sort_keys=True, default=str).encode())
    for d in sorted(hashlib.sha256(blob).hexdigest() for blob in code):
        h.update(d.encode())
    return h.hexdigest()


def parse_overrides(text: str) -> dict[str, str]:
    pairs = [w.split("=", 1) for w in shlex.split(text)]
    bad = [w[0] for w in pairs if len(w) != 2]
    if bad:
        raise ValueError(f"not K=V: {', '.join(bad)}")
    return dict(pairs)


def main(argv: list[str]) -> int:
    args, code_files = argv[1:], []
    if "--code" in args:
        i = args.index("--code")
        args, code_files = args[:i], args[i + 1:]
    if len(args) not in (1, 2):
        print("usage: tools/config_digest.py TEMPLATE ['K=V …'] [--code FILE …]", file=sys.stderr)
        return 2
    try:
        overrides = parse_overrides(args[1]) if len(args) == 2 else {}
        code = [Path(f).read_bytes() for f in code_files]
        print(digest(Path(args[0]).read_text(), overrides, code))
    except (KeyError, ValueError) as e:
        print(f"config_digest: {e.args[0]}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"config_digest: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
