#!/usr/bin/env python3
"""tools/config_digest.py must give a different ConfigDigest for every change a published
version is made of (a parameter, a default, the template, a binary) and the same for the same
deploy, or `live` misses a change (docs/deployment.md#gradual-deploys). Run by `make
lint-template`; exit 1 naming the case that failed."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from config_digest import digest, main, parse_overrides  # noqa: E402

TEMPLATE = (Path(__file__).resolve().parent.parent / "infra" / "template.yaml").read_text()
failed = []


def case(name, ok):
    print(("ok   " if ok else "FAIL ") + name)
    if not ok:
        failed.append(name)


base = digest(TEMPLATE, {"ProviderRatePerSecond": "100"}, [b"sender"])
case("the same deploy, the same digest", base == digest(TEMPLATE, {"ProviderRatePerSecond": "100"}, [b"sender"]))
case("a parameter passed at its default is the same deploy", base == digest(TEMPLATE, {}, [b"sender"]))
case("a changed parameter is a new digest", base != digest(TEMPLATE, {"ProviderRatePerSecond": "50"}, [b"sender"]))
case("the sms channel off is a new digest",
     digest(TEMPLATE, {"SmsProviderUrl": "https://sms.example/v1"}, [b"s"]) != digest(TEMPLATE, {"SmsProviderUrl": ""}, [b"s"]))
case("a new binary is a new digest", base != digest(TEMPLATE, {"ProviderRatePerSecond": "100"}, [b"sender2"]))
case("a changed default of a parameter a function reads is a new digest",
     base != digest(TEMPLATE.replace("    Default: 100\n", "    Default: 90\n", 1), {}, [b"sender"]))
case("a changed literal of a function (the sender's Timeout) is a new digest",
     base != digest(TEMPLATE.replace("      Timeout: 60\n", "      Timeout: 61\n", 1), {}, [b"sender"]))
case("a parameter no function of the three reads is the same digest (AlarmTopicArn)",
     base == digest(TEMPLATE, {"ProviderRatePerSecond": "100", "AlarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:x"}, [b"sender"]))
case("CodeDeploy's settings and the mappings' are the same digest (DeploymentType, SenderMaximumConcurrency)",
     base == digest(TEMPLATE, {"DeploymentType": "AllAtOnce", "SenderMaximumConcurrency": "50", "GradualDeploys": "false"}, [b"sender"]))
case("a comment is the same digest", base == digest(TEMPLATE + "\n# a comment\n", {}, [b"sender"]))
case("the binaries' order is the same digest",
     digest(TEMPLATE, {}, [b"a", b"b"]) == digest(TEMPLATE, {}, [b"b", b"a"]))
case("ConfigDigest itself is not an input", base == digest(TEMPLATE, {"ConfigDigest": "ab"}, [b"sender"]))
try:
    digest(TEMPLATE, {"ProviderRatePerSecnd": "5"})
    case("a misspelt parameter is refused", False)
except KeyError as e:
    case("a misspelt parameter is refused, by name", "ProviderRatePerSecnd" in str(e))
case("overrides parse as sam deploy takes them", parse_overrides('A="x y" B=z') == {"A": "x y", "B": "z"})
case("a code file that cannot be read exits 2", main(["config_digest.py", "infra/template.yaml", "", "--code", "/nonexistent"]) == 2)
sys.exit(1 if failed else 0)
