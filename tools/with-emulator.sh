#!/usr/bin/env bash
# Runs "$@" with the AWS API emulators the tests need, on loopback, and stops them afterwards
# (also on failure or Ctrl-C).
#
# - AWS_ENDPOINT_URL: if already set (e.g. LocalStack on http://localhost:4566) it is used as
#   is; otherwise moto server from ./.venv starts on a free 127.0.0.1 port.
# - PUNCTUAL_DYNALITE_URL: dynalite (npm, Apache-2.0; `make tools` installs it into
#   .tools/dynalite) starts too, on its own loopback port: the engine whose concurrent
#   conditional writes are isolated (moto's are not), for the suites that race writers.
#   PUNCTUAL_REQUIRE_DYNALITE=1 is exported so those suites fail rather than skip if it cannot
#   be reached.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="${VENV:-$here/.venv}"
dynalite="$here/.tools/dynalite/node_modules/dynalite"
logs="$here/target/emulators"
mkdir -p "$logs"

export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-testing}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-testing}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-$AWS_REGION}"
export AWS_EC2_METADATA_DISABLED=true

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { "$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_http NAME PID URL LOG: until URL answers any HTTP status (up to 30 s).
wait_http() {
  local name=$1 pid=$2 url=$3 log=$4
  for _ in $(seq 1 300); do
    if "$venv/bin/python" - "$url" <<'PY' 2>/dev/null; then return 0; fi
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=1)
except urllib.error.HTTPError:
    pass
PY
    if ! kill -0 "$pid" 2>/dev/null; then echo "with-emulator: $name died; its log:" >&2; cat "$log" >&2; exit 1; fi
    sleep 0.1
  done
  echo "with-emulator: $name did not answer at $url within 30 s; its log:" >&2; cat "$log" >&2; exit 1
}

if [[ -n "${AWS_ENDPOINT_URL:-}" ]]; then
  echo "with-emulator: using AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL (not starting moto)" >&2
else
  port=$(free_port)
  log="$logs/moto-$port.log"
  # punctual-moto is moto_server with SQS sends in constant time (tools/moto says why).
  "$venv/bin/punctual-moto" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
  pids+=($!)
  wait_http "moto server" "$!" "http://127.0.0.1:$port/moto-api/" "$log"
  export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
  echo "with-emulator: moto server on $AWS_ENDPOINT_URL (log: $log)" >&2
fi

if [[ -z "${PUNCTUAL_DYNALITE_URL:-}" ]]; then
  if [[ ! -d "$dynalite" ]] || ! command -v node >/dev/null; then
    echo "with-emulator: dynalite is not installed (run make tools; it needs Node.js and npm)" >&2; exit 1
  fi
  port=$(free_port)
  log="$logs/dynalite-$port.log"
  node "$here/tools/dynalite/serve.js" "$port" >"$log" 2>&1 &
  pids+=($!)
  wait_http "dynalite" "$!" "http://127.0.0.1:$port/" "$log"
  export PUNCTUAL_DYNALITE_URL="http://127.0.0.1:$port"
  export PUNCTUAL_REQUIRE_DYNALITE=1
  echo "with-emulator: dynalite on $PUNCTUAL_DYNALITE_URL (log: $log)" >&2
fi

"$@"
