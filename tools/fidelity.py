#!/usr/bin/env python3
"""The simulator against the real pipeline, on the same workload.

Runs `punctual run` (the real functions through the real SDK against the emulators, requests
counted below the SDK) and `punctual-sim simulate --workload run` (the same population, the same
flags), then compares per message: DynamoDB reads and writes, SQS requests, limiter writes per
call, 429s, and utilisation (deliveries per second at the quota). Tolerance: 10 %.

A difference outside the tolerance is either a defect (of the model or of the product: fix the
wrong one) or a difference this file names in KNOWN with its reason and a bound; the check
exits 1 on a difference KNOWN does not name or that leaves its bound, and says so when a KNOWN one was within the
tolerance this time. `--strict` fails on every difference.

With `--redrive N`, N reminders are dead letters before the run (`punctual run --redrive`) and
the redrive moves them back while the fresh ones run; the per-message figures then count every
message (fresh and redriven, the redrive's own requests included), and the redrive is compared
on its own too: letters moved back, and its DLQ requests and ledger reads per letter moved.
`--suite` runs the workloads `make fidelity` checks, one after the other: SUITE below.

    tools/fidelity.py [--bin-dir target/debug] [--reminders 3000] [--tight-share 0.1] [--quota 100]
                      [--redrive N] [--suite] [--json FILE] [--strict]
"""
import argparse
import json
import os
import subprocess
import sys

TOLERANCE = 0.10

# Differences measured and explained, not (yet) removed: why, and the bound the difference
# must stay within (a named difference outside its bound fails like an unnamed one).
# docs/measurements.md#the-simulator-against-the-real-pipeline has the runs.
def ratio_within(lo, hi):
    return (lambda s, r, n: s > 0 and lo <= r / s <= hi), f"real/sim in [{lo}, {hi}]"


KNOWN = {
    "dynamodb_reads": ("the simulator charges one renewal read per reminder; the real sender "
                       "also reads the limiter's schedule item (GetItem limiter, 0.1-0.2 per "
                       "reminder) and the pause switch (GetItem control: one read per instance per "
                       "PAUSE_CHECK, more per reminder on short runs), which the simulator's "
                       "senders do not model", *ratio_within(0.9, 2.0)),
    "limiter_writes_per_call": ("the real senders' limiter books against wall-clock emulator "
                                "latency, so racers collide and re-book more often than in "
                                "virtual time (1.25x in release, 1.8-2.5x in debug)",
                                *ratio_within(0.9, 3.0)),
    "utilisation": ("the emulators and the binary share two cores here: the real run is "
                    "CPU-bound (dynalite's one thread), the simulator is not; debug runs of one "
                    "build range 0.44-0.84", *ratio_within(0.35, 1.1)),
    "provider_429": ("the simulator's limiter never overshoots in virtual time; the real one "
                     "books slots that leave late under CPU contention",
                     lambda s, r, n: r <= s + 0.03 * n, "at most 3 % of the reminders more"),
    "sqs": ("the harness's stand-in for the event source mapping long-polls 1 s per poller (AWS's "
            "polls up to 20 s), and the simulator's five idle pollers per lane (what a mapping "
            "with a MaximumConcurrency keeps) poll empty lanes through its minute-by-minute "
            "release: at 500 reminders sim 0.80 (1.41 when every worker's empty poll counted), "
            "real 0.56; at 3,000 sim 0.30 (0.40), real 0.34-0.49", *ratio_within(0.25, 2.0)),
}


# With `--redrive`: the redrive's copies join the send queue behind the fresh backlog. moto hands
# out the oldest message first (as SQS's best-effort order mostly does); the simulator's queue
# hands out a random message of the least busy tenant's. So in the simulator the canary's ten
# copies settle within seconds of each other and the redrive's watch finds most copies settled,
# while in the real run every copy waits out the fresh backlog. Both differences below are that
# order, measured in release on 2026-12-03 (docs/measurements.md#the-simulator-against-the-real-pipeline).
KNOWN_REDRIVE = {
    "redrive_dynamodb_reads": ("the redrive re-reads the record of every letter it moved and is not "
                               "settled yet at each check (every 20 moves); the real copies wait out "
                               "the ~30 s fresh backlog (moto: oldest first), the simulator's settle "
                               "sooner (random order): 8.87 and 9.77 reads per letter moved against 3.06",
                               *ratio_within(0.9, 4.0)),
    "utilisation": ("the drain is the redrive's length (500 letters at 10/s, 50 s, above the 35 s "
                    "floor) plus its canary wait: the simulator's canary copies, picked at random "
                    "among 3,000, settle after ~26 s, the real ones (oldest first) after ~8 s: sim "
                    "0.457, real 0.605 and 0.588", *ratio_within(0.9, 1.5)),
}

# `make fidelity`: 3,000 reminders (10 % tight), 10,000, and 3,000 while 500 letters are redriven.
SUITE = [
    {"reminders": 3000, "redrive": 0},
    {"reminders": 10000, "redrive": 0},
    {"reminders": 3000, "redrive": 500},
]


def close(a, b):
    if a == b:
        return True
    scale = max(abs(a), abs(b))
    return scale > 0 and abs(a - b) / scale <= TOLERANCE


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin-dir", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "debug"))
    p.add_argument("--reminders", type=int, default=3000)
    p.add_argument("--tight-share", type=float, default=0.1)
    p.add_argument("--quota", type=float, default=100.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--redrive", type=int, default=0, help="dead letters before the run, redriven during it")
    p.add_argument("--suite", action="store_true", help="run every workload of SUITE (make fidelity)")
    p.add_argument("--json", help="write the comparison here")
    p.add_argument("--strict", action="store_true")
    a = p.parse_args()
    workloads = SUITE if a.suite else [{"reminders": a.reminders, "redrive": a.redrive}]
    results, worst = [], 0
    for w in workloads:
        if len(workloads) > 1:
            print(f"\n== {w['reminders']} reminders" + (f", {w['redrive']} letters redriven" if w["redrive"] else ""),
                  file=sys.stderr)
        code, out = check(a, w["reminders"], w["redrive"])
        worst = max(worst, code)
        if out is not None:
            results.append(out)
    if a.json and results:
        with open(a.json, "w") as f:
            json.dump(results[0] if not a.suite else {"workloads": results}, f, indent=2)
    return worst


def check(a, reminders, redrive):
    """One workload through both; (exit code, the comparison)."""
    flags = ["--reminders", str(reminders), "--tight-share", str(a.tight_share),
             "--quota", str(a.quota), "--seed", str(a.seed)]
    if redrive:
        flags += ["--redrive", str(redrive)]
    print(f"fidelity: punctual run {' '.join(flags)} (real pipeline, emulators on loopback)", file=sys.stderr)
    run = subprocess.run([f"{a.bin_dir}/punctual", "run", *flags], stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stdout)
        print(f"fidelity: punctual run exited {run.returncode}", file=sys.stderr)
        return 2, None
    with open("target/run/report.json") as f:
        real = json.load(f)
    print("fidelity: punctual-sim simulate --workload run (same flags)", file=sys.stderr)
    sim = json.loads(subprocess.run([f"{a.bin_dir}/punctual-sim", "simulate", "--workload", "run", *flags, "--json"],
                                    stdout=subprocess.PIPE, text=True, check=True).stdout)
    rows = []
    for key in ["dynamodb_reads", "dynamodb_writes", "sqs", "limiter_writes_per_call"]:
        rows.append((key, sim["requests_per_message"][key], real["requests_per_message"][key]))
    rows.append(("provider_429", sim["provider_429"], real["provider_429"]))
    rows.append(("utilisation", round(sim["utilisation"], 3), round(real["utilisation"], 3)))
    if redrive:
        rows.append(("redriven", sim.get("redriven", 0), real.get("redriven", 0)))
        s_rd = sim.get("redrive_requests_per_message") or {}
        r_rd = real.get("redrive_requests_per_message") or {}
        rows.append(("redrive_sqs", s_rd.get("sqs", 0), r_rd.get("sqs", 0)))
        rows.append(("redrive_dynamodb_reads", s_rd.get("dynamodb_reads", 0), r_rd.get("dynamodb_reads", 0)))
    unexplained, gone, out = [], [], []
    n = reminders + redrive
    known_here = {**KNOWN, **KNOWN_REDRIVE} if redrive else KNOWN
    print(f"{'per message':<26} {'simulator':>10} {'real':>10} {'real/sim':>9}  within 10 %")
    for key, s, r in rows:
        ok = close(s, r)
        ratio = f"{r / s:.2f}" if s else "-"
        known = known_here.get(key)
        bounded = known is not None and known[1](s, r, n)
        note = "yes" if ok else (f"no, known ({known[2]}: {'ok' if bounded else 'OUTSIDE'})" if known else "NO")
        print(f"{key:<26} {s:>10} {r:>10} {ratio:>9}  {note}")
        if not ok and not bounded:
            unexplained.append(key)
        if ok and known:
            gone.append(key)
        out.append({"key": key, "simulator": s, "real": r, "within": ok,
                    "known": known[0] if known else None, "bound": known[2] if known else None,
                    "within_bound": bounded})
    for key, s, r in rows:
        if not close(s, r) and key in known_here:
            print(f"  {key}: {known_here[key][0]}")
    print(f"real requests by operation (sender side): {json.dumps(real['requests'])}")
    if redrive:
        print(f"real requests by operation (redrive): {json.dumps(real.get('redrive_requests', {}))}")
    result = {"flags": flags, "rows": out, "real_requests": real["requests"]}
    if a.strict and any(not r["within"] for r in out):
        print("fidelity: differences outside 10 % (--strict)", file=sys.stderr)
        return 1, result
    if unexplained:
        print(f"fidelity: differences unexplained or outside their bound: {', '.join(unexplained)} (fix the "
              "model or the product, or name the difference in tools/fidelity.py's KNOWN with its reason "
              "and bound)", file=sys.stderr)
        return 1, result
    if gone:
        # A notice, not a failure: utilisation and 429s move with the machine's load.
        print(f"fidelity: within 10 % in this run: {', '.join(gone)} (if it stays so, drop it from KNOWN)",
              file=sys.stderr)
    print("fidelity: every difference is within 10 % or named with its reason", file=sys.stderr)
    return 0, result


if __name__ == "__main__":
    sys.exit(main())
