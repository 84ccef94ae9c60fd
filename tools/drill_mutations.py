#!/usr/bin/env python3
"""The drill's mutation proof: delete each page-class alarm of a template in turn (a scratch
copy) and run `punctual-sim drill` on it. Prints, per deleted alarm, the incidents that are then
not paged in time, and which alarm pages them instead. An alarm whose deletion leaves every
incident in time is redundant for the catalogue (another alarm pages as fast).

    tools/drill_mutations.py [TEMPLATE] [--sim target/release/punctual-sim] [--json]
"""

import json
import pathlib
import re
import subprocess
import sys
import tempfile


def resources(text):
    """{logical id: (first line, end line)} of the Resources section (2-space keys)."""
    lines = text.splitlines()
    out, start, in_resources = {}, None, False
    for i, line in enumerate(lines):
        if re.match(r"^\S", line):
            if start is not None:
                out[start[0]] = (start[1], i)
                start = None
            in_resources = line.startswith("Resources:")
            continue
        m = re.match(r"^  (\w+):\s*$", line)
        if in_resources and m:
            if start is not None:
                out[start[0]] = (start[1], i)
            start = (m.group(1), i)
    if start is not None:
        out[start[0]] = (start[1], len(lines))
    return out


def page_alarms(text):
    """Alarms whose AlarmActions name AlarmTopicArn."""
    lines = text.splitlines()
    found = []
    for name, (a, b) in resources(text).items():
        block = "\n".join(lines[a:b])
        if re.search(r"Type: AWS::CloudWatch::(Composite)?Alarm", block) and re.search(
            r"AlarmActions: \[!Ref AlarmTopicArn\]", block
        ):
            found.append(name)
    return found


def without(text, name):
    """The template without `name`, and without the lines of a composite's rule that name it one
    part a line (CausePagingAlarm's)."""
    lines = text.splitlines()
    a, b = resources(text)[name]
    kept = [l for l in lines[:a] + lines[b:]
            if not (l.lstrip().startswith("- !") and f'"${{{name}}}")' in l)]
    return "\n".join(kept) + "\n"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    sim = "target/release/punctual-sim"
    if "--sim" in sys.argv:
        sim = sys.argv[sys.argv.index("--sim") + 1]
        args = [a for a in args if a != sim]
    template = pathlib.Path(args[0] if args else "infra/template.yaml")
    text = template.read_text()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in page_alarms(text):
            path = pathlib.Path(tmp) / f"without-{name}.yaml"
            path.write_text(without(text, name))
            run = subprocess.run([sim, "drill", "--template", str(path), "--mornings", "0", "--json"],
                                 capture_output=True, text=True)
            if run.returncode == 2:
                results.append({"deleted": name, "error": run.stderr.strip().splitlines()[-1]})
            else:
                report = json.loads(run.stdout)
                failed = [{"incident": i["name"], "now_paged_by": i["paged_by"],
                           "after_seconds": i["page_after_seconds"], "why": i["why"]}
                          for i in report["incidents"] if not i["ok"]]
                results.append({"deleted": name, "silent_or_late": failed})
            print(f"{name}: " + (results[-1].get("error") or ", ".join(
                f"{f['incident']} ({f['why']})" for f in results[-1]["silent_or_late"]) or "every incident still in time"),
                file=sys.stderr, flush=True)
    if "--json" in sys.argv:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
