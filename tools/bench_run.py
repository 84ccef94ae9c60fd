#!/usr/bin/env python3
"""`make bench-run`: the real pipeline at its quota, recorded so a later change can be compared.

Runs the release `punctual run` (its own moto and dynalite on loopback, the provider double) on
the two workloads whose targets docs/measurements.md#release-3000-and-10000-one-session-2026-12-03 states:
3,000 reminders without tight work and with 10 % tight. Each run's utilisation, 429s, limiter
writes per call, requests per message and the emulators' CPU share go to target/bench-run.json
with the commit and the date. The figures are then set beside the previous recording
(target/bench-run.json of the last run, else tools/bench-run-baseline.json, the one committed)
with their ratios, and a move past 10 % in the wrong direction is named. Machines are noisy:
this reports, it does not fail a build (the figures are measurements, not assertions).
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys

# figure -> (where in the report, which direction is better)
FIGURES = {
    "utilisation": (("utilisation",), "higher"),
    "provider_429": (("provider_429",), "lower"),
    "provider_lowest_tokens": (("provider_lowest_tokens",), "higher"),
    "limiter_writes_per_call": (("limiter_writes_per_call",), "lower"),
    "limiter_bookings_per_call": ((), "lower"),
    "limiter_other_writes_per_call": ((), "lower"),
    "dynamodb_reads": (("requests_per_message", "dynamodb_reads"), "lower"),
    "dynamodb_writes": (("requests_per_message", "dynamodb_writes"), "lower"),
    "sqs": (("requests_per_message", "sqs"), "lower"),
    "request_usd_per_million": (("requests_per_message", "request_usd_per_million"), "lower"),
    "emulator_share": (("cpu", "emulator_share"), "lower"),
    "cores_busy": (("cpu", "cores_busy"), "lower"),
    "late": (("late",), "lower"),
}

# How far a figure may move the wrong way before it is named (default 10 %). The bucket's
# lowest level swings 4.97-8.03 tokens between runs of one build (docs/measurements.md, "a 429
# with the limiter in place"): it is named when it halves, the way 100 ms slots moved it.
TOLERANCE = {"provider_lowest_tokens": 0.5}

WORKLOADS = {
    "no_tight": ["--tight-share", "0"],
    "tight_10pct": ["--tight-share", "0.1"],
}


def dig(report, path):
    for key in path:
        if not isinstance(report, dict):
            return None
        report = report.get(key)
    return report


def run_one(binary, reminders, extra):
    cmd = [binary, "run", "--reminders", str(reminders), "--json", *extra]
    env = {k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}
    print("bench-run: " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, env=env, timeout=900)
    except subprocess.TimeoutExpired:
        print("bench-run: punctual run did not finish in 900 s; nothing recorded for it", file=sys.stderr)
        return {"exit_code": None}
    try:
        report = json.loads(out.stdout)
    except json.JSONDecodeError:
        print(f"bench-run: punctual run exited {out.returncode} without a report", file=sys.stderr)
        return {"exit_code": out.returncode}
    if out.returncode != 0:
        # `run` exits non-zero when a reminder is unaccounted for: the figures still say what
        # happened, and the exit code is recorded beside them.
        print(f"bench-run: punctual run exited {out.returncode}; its figures are recorded", file=sys.stderr)
    figures = {name: dig(report, path) for name, (path, _) in FIGURES.items() if path}
    # What the limiter's writes were: bookings (ideally 1 per block of 10 calls) and writes that
    # booked nothing (refused at the horizon or under the near mark, raced, cuts, pauses).
    lim = report.get("limiter") or {}
    granted = lim.get("granted") or 0
    for key in ("bookings", "other_writes"):
        figures[f"limiter_{key}_per_call"] = round(lim.get(key, 0) / granted, 4) if granted else None
    # How late the calls went after their slots (<10, <25, <50, 50+ ms) and the latest: with
    # the double's lowest bucket level, how close the run came to a 429.
    figures["limiter_late_ms"] = lim.get("late_ms")
    figures["limiter_late_max_ms"] = lim.get("late_max_ms")
    figures["limiter_stranded"] = lim.get("stranded")
    figures["delivered"] = report.get("delivered")
    figures["exit_code"] = out.returncode
    figures["cpu_seconds"] = dig(report, ("cpu", "seconds"))
    figures["engines"] = "dynalite (DynamoDB) + moto (SQS)" if dig(report, ("cpu", "seconds", "dynalite")) is not None else "moto"
    return figures


def compare(now, before, label):
    lines = [f"bench-run: against {label}"]
    worse = []
    for workload, figures in now["workloads"].items():
        old = before.get("workloads", {}).get(workload, {})
        lines.append(f"  {workload}")
        for name, (_, better) in FIGURES.items():
            a, b = old.get(name), figures.get(name)
            if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
                lines.append(f"    {name:<26} {a!s:>10} -> {b!s:>10}")
                continue
            ratio = (b / a) if a else (1.0 if b == a else float("inf"))
            tolerance = TOLERANCE.get(name, 0.1)
            moved_badly = (better == "higher" and b < a * (1 - tolerance)) or (
                better == "lower" and b > a * (1 + tolerance) and b - a > 1e-9
            )
            if moved_badly:
                worse.append(f"{workload}.{name}")
            mark = "  WORSE" if moved_badly else ""
            lines.append(f"    {name:<26} {a:>10.3f} -> {b:>10.3f}  x{ratio:.2f}{mark}")
    lines.append(f"  moved past its tolerance (10 % unless TOLERANCE says) the wrong way: {', '.join(worse) if worse else 'nothing'}")
    return "\n".join(lines), worse


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "punctual"))
    p.add_argument("--reminders", type=int, default=3000)
    p.add_argument("--out", default="target/bench-run.json")
    p.add_argument("--baseline", default="tools/bench-run-baseline.json")
    p.add_argument("--runs", type=int, default=1, help="runs per workload; the median utilisation's run is kept")
    a = p.parse_args()

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip()
    now = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit + ("+dirty" if dirty else ""),
        "reminders": a.reminders,
        "cores": os.cpu_count(),
        "workloads": {},
    }
    for workload, extra in WORKLOADS.items():
        runs = [run_one(a.binary, a.reminders, extra) for _ in range(max(1, a.runs))]
        runs.sort(key=lambda f: f.get("utilisation") or 0.0)
        kept = runs[len(runs) // 2]
        kept["runs_utilisation"] = [f.get("utilisation") for f in runs]
        # A 429 is a rare event (one run in several): every run's count and lowest bucket level
        # are kept, not only the median run's.
        kept["runs_provider_429"] = [f.get("provider_429") for f in runs]
        kept["runs_provider_lowest_tokens"] = [f.get("provider_lowest_tokens") for f in runs]
        now["workloads"][workload] = kept

    previous, label = None, None
    if os.path.exists(a.out):
        with open(a.out) as f:
            previous, label = json.load(f), f"the previous recording ({a.out})"
        if previous.get("reminders") != a.reminders:
            print(f"bench-run: the previous recording ran {previous.get('reminders')} reminders, this one {a.reminders}: "
                  "compared anyway, read the ratios with that in mind", file=sys.stderr)
        shutil.copy(a.out, os.path.splitext(a.out)[0] + ".previous.json")
    elif os.path.exists(a.baseline):
        with open(a.baseline) as f:
            previous, label = json.load(f), f"the committed baseline ({a.baseline})"
    if previous is not None and label.startswith("the committed") and previous.get("reminders") != a.reminders:
        print(f"bench-run: the baseline ran {previous.get('reminders')} reminders, this one {a.reminders}", file=sys.stderr)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(now, f, indent=2, sort_keys=True)
        f.write("\n")
    print(json.dumps(now, indent=2, sort_keys=True))
    if previous is not None:
        text, _ = compare(now, previous, f"{label}: {previous.get('commit')} of {previous.get('date')}")
        print(text, file=sys.stderr)
    print(f"bench-run: written {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
