#!/usr/bin/env python3
"""Can tools/fidelity.py pass when the model and the pipeline disagree? It must not.

Fake `punctual` and `punctual-sim` binaries report fixed figures; fidelity.py runs against them
in a scratch directory. Run: .venv/bin/python tools/test_fidelity.py (make lint-template runs it) (exit 1 = a case
failed)."""
import json, os, subprocess, sys, tempfile, textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
FIDELITY = os.path.join(HERE, "fidelity.py")

def report(reads, writes, sqs, limiter, p429, util, redriven=None, redrive_sqs=0.0, redrive_reads=0.0):
    r = {"requests_per_message": {"dynamodb_reads": reads, "dynamodb_writes": writes, "sqs": sqs,
                                  "limiter_writes_per_call": limiter},
         "provider_429": p429, "utilisation": util, "requests": {}}
    if redriven is not None:
        r["redriven"] = redriven
        r["redrive_requests_per_message"] = {"dynamodb_reads": redrive_reads, "dynamodb_writes": 0.0,
                                             "sqs": redrive_sqs, "limiter_writes_per_call": 0.0}
    return r

def fidelity_exit(sim, real, extra=()):
    with tempfile.TemporaryDirectory() as d:
        bins = os.path.join(d, "bin"); os.makedirs(bins)
        with open(os.path.join(bins, "punctual"), "w") as f:
            f.write(textwrap.dedent(f"""\
                #!/bin/sh
                mkdir -p target/run
                cat > target/run/report.json <<'J'
                {json.dumps(real)}
                J
                """))
        with open(os.path.join(bins, "punctual-sim"), "w") as f:
            f.write(f"#!/bin/sh\ncat <<'J'\n{json.dumps(sim)}\nJ\n")
        for b in ("punctual", "punctual-sim"):
            os.chmod(os.path.join(bins, b), 0o755)
        r = subprocess.run([sys.executable, FIDELITY, "--bin-dir", bins, "--reminders", "500", *extra], cwd=d,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return r.returncode, r.stdout + r.stderr

SIM = report(1.0, 5.0, 0.5, 1.0, 0, 0.9)
CASES = [
    # (name, real report, fidelity must fail?)
    ("agrees", report(1.0, 5.0, 0.5, 1.0, 0, 0.9), False),
    ("known differences inside their bounds", report(1.5, 5.2, 0.45, 2.0, 5, 0.5), False),
    ("writes 2x (sanity: the one unlisted key)", report(1.0, 10.0, 0.5, 1.0, 0, 0.9), True),
    ("reads 20x: the pause switch read per record, and worse", report(20.0, 5.0, 0.5, 1.0, 0, 0.9), True),
    ("SQS 10x, limiter 10x, 429s 400, utilisation 0.05", report(1.0, 5.0, 5.0, 10.0, 400, 0.05), True),
]

# `--redrive N`: the redrive compared too (letters moved back, its requests per letter moved).
SIM_REDRIVE = report(1.0, 5.0, 0.5, 1.0, 0, 0.9, 50, 0.4, 1.2)
REDRIVE = ["--redrive", "50"]
CASES += [
    ("redrive: agrees", report(1.0, 5.0, 0.5, 1.0, 0, 0.9, 50, 0.41, 1.25), False, SIM_REDRIVE, REDRIVE),
    ("redrive: half the letters not moved back", report(1.0, 5.0, 0.5, 1.0, 0, 0.9, 25, 0.4, 1.2), True,
     SIM_REDRIVE, REDRIVE),
    ("redrive: the real redrive's DLQ requests 3x", report(1.0, 5.0, 0.5, 1.0, 0, 0.9, 50, 1.2, 1.2), True,
     SIM_REDRIVE, REDRIVE),
    ("redrive: no redrive figures in the real report", report(1.0, 5.0, 0.5, 1.0, 0, 0.9), True,
     SIM_REDRIVE, REDRIVE),
    # `--suite` (make fidelity): every workload checked, the worst exit returned.
    ("suite: three workloads agree", report(1.0, 5.0, 0.5, 1.0, 0, 0.9, 50, 0.4, 1.2), False, SIM_REDRIVE,
     ["--suite"]),
    ("suite: one figure off fails the suite", report(1.0, 10.0, 0.5, 1.0, 0, 0.9, 50, 0.4, 1.2), True,
     SIM_REDRIVE, ["--suite"]),
]

failed = 0
for case in CASES:
    name, real, must_fail = case[:3]
    sim, extra = (case[3], case[4]) if len(case) > 3 else (SIM, ())
    code, out = fidelity_exit(sim, real, extra)
    ok = code in (0, 1) and (code == 1) == must_fail
    print(f"{'ok  ' if ok else 'FAIL'} {name}: fidelity exited {code}, expected {'non-zero' if must_fail else 0}")
    if not ok:
        failed += 1
        print(textwrap.indent(out, "     | "))
sys.exit(1 if failed else 0)
