#!/usr/bin/env python3
"""The `ConfigDigest` a deploy passes to infra/template.yaml: a SHA-256 of everything a
published version is made of: the template's text, every parameter's effective value (the
template's default, overridden by the deploy's `K=V`) and the built packages' bytes.

Why (docs/deployment.md#gradual-deploys): the sender, scheduler and ingest run behind an alias
`live` on a published version, and SAM publishes a new version only when the hash of the
function's properties changes. It hashes them with their `!Ref`s to parameters unresolved, so a
deploy that changes only a parameter (ProviderRatePerSecond, or SmsProviderUrl turning the sms
channel off) would update `$LATEST`, which nothing invokes, and leave `live` on the old
settings. The functions' `AutoPublishCodeSha256: !Ref ConfigDigest` makes this digest the
version's identity. SAM then uses it *instead of* its own hash (measured: the version's logical
id is the digest's first characters), so the digest must cover the code and the template too,
or a new binary with the same parameters would publish nothing. `make deploy` and `make e2e`
pass it; a deploy by hand must too (or pass none: SAM's own hash then, which misses
parameter-only changes).

Usage: tools/config_digest.py TEMPLATE ['K=V K2="v 2" …'] [--code FILE …]   (the overrides as
one string, as `sam deploy --parameter-overrides` takes them, ConfigDigest itself ignored; the
built packages or bootstraps). Prints the hex digest. Exit 2 on an override naming no parameter
of the template, or a code file that cannot be read.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from pathlib import Path

import yaml


class _Loader(yaml.SafeLoader):
    """YAML with CloudFormation's short-form tags (their values are irrelevant here)."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)

IGNORED = {"ConfigDigest"}


def effective(template_text: str, overrides: dict[str, str]) -> dict[str, str]:
    """Every parameter's value as CloudFormation will see it: the override, else the default."""
    params = (yaml.load(template_text, Loader=_Loader) or {}).get("Parameters", {}) or {}
    unknown = sorted(set(overrides) - set(params) - IGNORED)
    if unknown:
        raise KeyError(f"not parameters of the template: {', '.join(unknown)}")
    out = {}
    for name, spec in params.items():
        if name in IGNORED:
            continue
        value = overrides.get(name, (spec or {}).get("Default"))
        out[name] = "" if value is None else str(value)
    return out


def digest(template_text: str, overrides: dict[str, str], code: list[bytes] = ()) -> str:
    h = hashlib.sha256()
    h.update(hashlib.sha256(template_text.encode()).digest())
    h.update(json.dumps(effective(template_text, overrides), sort_keys=True).encode())
    for blob in code:
        h.update(hashlib.sha256(blob).digest())
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
