#!/usr/bin/env bash
# Runs a function's real binary under the Lambda runtime API (`cargo lambda watch`) with the
# environment of the local pipeline (`punctual local up`), invokes it with an event file, prints
# the function's answer and stops the watcher.
#
#   tools/invoke.sh sender events/sender/due.json
#   INVOKE_WITH='AWS_ENDPOINT_URL_LAMBDA=$INVOKE_ENDPOINT punctual redrive --function $INVOKE_FUNCTION …' \
#     tools/invoke.sh redrive -      (any command, against the same Invoke API)
#
# Needs `punctual local up` first (PUNCTUAL_STATE_DIR, default target/local) and the build tools
# (`make build-tools`).
set -euo pipefail
fn=${1:?usage: tools/invoke.sh FUNCTION EVENT_FILE}
event=${2:?usage: tools/invoke.sh FUNCTION EVENT_FILE}
here=$(cd "$(dirname "$0")/.." && pwd)
state="${PUNCTUAL_STATE_DIR:-$here/target/local}/state.json"
[[ -f "$state" ]] || { echo "invoke: no $state; run \`punctual local up\` first" >&2; exit 1; }
[[ -n "${INVOKE_WITH:-}" || -f "$event" ]] || { echo "invoke: no event file $event" >&2; exit 1; }
get() { "$here/.venv/bin/python" -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]) or '')" "$state" "$1"; }

export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-testing}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-testing}"
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_EC2_METADATA_DISABLED=true
export AWS_ENDPOINT_URL="$(get endpoint)"
ddb="$(get dynamodb_endpoint)"; [[ -n "$ddb" ]] && export AWS_ENDPOINT_URL_DYNAMODB="$ddb"
export SEND_QUEUE_URL="$(get send_queue_url)" DLQ_URL="$(get dlq_url)" URGENT_QUEUE_URL="$(get urgent_queue_url)"
export LEDGER_TABLE="$(get ledger_table)" RENEWALS_TABLE="$(get renewals_table)"
export PROVIDER_URL="$(get provider_url)" PROVIDER_TOKEN="$(get provider_token)"

port=$("$here/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log="$here/target/invoke-$fn.log"
mkdir -p "$here/target"
export PATH="$here/.venv/bin:$PATH"
cd "$here"
cargo-lambda lambda watch -A 127.0.0.1 -P "$port" >"$log" 2>&1 &
watch=$!
trap 'kill $watch 2>/dev/null || true; pkill -P $watch 2>/dev/null || true; wait $watch 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  if "$here/.venv/bin/python" -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$port" 2>/dev/null; then break; fi
  sleep 0.2
done
if [[ -n "${INVOKE_WITH:-}" ]]; then
  # Hand the running Invoke API to a command instead (it gets the endpoint and the function).
  INVOKE_ENDPOINT="http://127.0.0.1:$port" INVOKE_FUNCTION="$fn" bash -c "$INVOKE_WITH"
else
  cargo-lambda lambda invoke "$fn" -A 127.0.0.1 -P "$port" --data-file "$event"
fi
