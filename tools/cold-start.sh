#!/usr/bin/env bash
# Cold start of each Lambda package from `make build`, measured on this machine: every
# `target/lambda/<fn>/bootstrap` is started under the Lambda runtime API emulator
# (tools/lambda_emulator.py) with its real environment against the local pipeline (`punctual
# local up` on the emulator), invoked once with a representative event, and stopped. Reports,
# per function: init (exec → first GET …/invocation/next: the runtime's own start, tracing,
# configuration, SDK clients, the warm-up calls), the first invocation's duration (its first
# SDK calls: TLS, credentials, DNS all included), and the binary's size.
#
#   make cold-start            (needs `make build` first; writes target/cold-start.json)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# shellcheck source=tools/lib.sh
. tools/lib.sh
export PUNCTUAL_STATE_DIR="$here/target/cold-start"
rm -rf "$PUNCTUAL_STATE_DIR"
for fn in sender scheduler redrive; do
  [[ -x "target/lambda/$fn/bootstrap" ]] || { echo "cold-start: no target/lambda/$fn/bootstrap: run make build" >&2; exit 1; }
done
cargo build --locked -q -p punctual
./target/debug/punctual local up --json >/dev/null
trap './target/debug/punctual local down >/dev/null 2>&1 || true' EXIT
state="$PUNCTUAL_STATE_DIR/state.json"
local_env "$state"
body=$(./target/debug/punctual local demo-message 0)
events=$(mktemp -d); trap './target/debug/punctual local down >/dev/null 2>&1 || true; rm -rf "$events"' EXIT
py - "$body" "$events" <<'PY'
import json, sys
body, out = sys.argv[1], sys.argv[2]
rec = {"messageId": "cold-1", "receiptHandle": "h", "body": body, "attributes": {"ApproximateReceiveCount": "1",
       "SentTimestamp": "0", "SenderId": "x", "ApproximateFirstReceiveTimestamp": "0"},
       "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
       "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:send", "awsRegion": "us-east-1"}
json.dump({"Records": [rec]}, open(f"{out}/sender.json", "w"))
json.dump(json.load(open("events/scheduler/tick.json")) if __import__("os").path.exists("events/scheduler/tick.json")
          else {"version": "0", "id": "cold", "detail-type": "Scheduled Event", "source": "aws.events",
                "account": "000000000000", "time": "2026-12-01T09:00:00Z", "region": "us-east-1",
                "resources": [], "detail": {}}, open(f"{out}/scheduler.json", "w"))
json.dump({"reason": "cold start", "owner": "ops", "max_messages": 1, "max_per_second": 1, "dry_run": True},
          open(f"{out}/redrive.json", "w"))
PY
results=()
for fn in sender scheduler redrive; do
  port=$(free_port)
  "$here/.venv/bin/python" tools/lambda_emulator.py --binary "target/lambda/$fn/bootstrap" --function "$fn" --port "$port" \
    --log "target/cold-start-$fn.log" --report "target/cold-start-$fn.json" &
  emu=$!
  trap "kill $emu 2>/dev/null || true; ./target/debug/punctual local down >/dev/null 2>&1 || true; rm -rf \"$events\"" EXIT
  wait_port "$port"
  py - "$port" "$fn" "$events/$fn.json" <<'PY'
import sys, urllib.request
port, fn, event = sys.argv[1:4]
req = urllib.request.Request(f"http://127.0.0.1:{port}/2015-03-31/functions/{fn}/invocations",
                             data=open(event, "rb").read(), method="POST")
with urllib.request.urlopen(req, timeout=70) as r:
    err = r.headers.get("X-Amz-Function-Error")
    body = r.read().decode()
    print(f"{fn}: {'ERROR ' if err else ''}{body[:200]}", file=sys.stderr)
PY
  kill "$emu"; wait "$emu" 2>/dev/null || true
done
py - <<'PY'
import json, os
rows = []
for fn in ["sender", "scheduler", "redrive"]:
    r = json.load(open(f"target/cold-start-{fn}.json"))
    size = os.path.getsize(f"target/lambda/{fn}/bootstrap") / 1e6
    first = r["invocations"][0]["duration_ms"] if r["invocations"] else None
    rows.append({"function": fn, "init_ms": r["init_ms"], "first_invocation_ms": first,
                 "first_ok": bool(r["invocations"] and r["invocations"][0]["ok"]), "binary_mb": round(size, 1)})
json.dump(rows, open("target/cold-start.json", "w"), indent=2)
print(f"{'function':<10} {'init':>9} {'first invocation':>17} {'binary':>8}")
for x in rows:
    print(f"{x['function']:<10} {x['init_ms']:>7} ms {x['first_invocation_ms']:>14} ms {x['binary_mb']:>6} MB"
          + ("" if x["first_ok"] else "  (function error)"))
PY
