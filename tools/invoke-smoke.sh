#!/usr/bin/env bash
# `make test`'s smoke test of a real function binary: `punctual local up` on the emulator,
# the sender binary under `cargo lambda watch` invoked with a malformed-message event, the
# answer checked, the DLQ checked, everything torn down.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
export PUNCTUAL_STATE_DIR="$here/target/invoke-smoke"
rm -rf "$PUNCTUAL_STATE_DIR"
cd "$here"
cargo build --locked -q -p punctual -p punctual-sender
./target/debug/punctual local up --json >/dev/null
trap './target/debug/punctual local down >/dev/null 2>&1 || true' EXIT
answer=$(tools/invoke.sh sender events/sender/malformed-body.json | tail -1)
dlq=$(./target/debug/punctual local drain --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["dead_lettered"].get("malformed", 0))')
if [[ "$answer" == '{"batchItemFailures":[]}' && "$dlq" == 1 ]]; then
  echo "invoke-smoke: sender binary answered $answer and quarantined the malformed message"
  echo "1 passed, 0 failed"
else
  echo "invoke-smoke: unexpected: answer=$answer, malformed in DLQ=$dlq (see target/invoke-sender.log)" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
