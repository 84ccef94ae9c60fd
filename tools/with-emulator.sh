#!/usr/bin/env bash
# Runs "$@" with an AWS API emulator on loopback.
#
# If AWS_ENDPOINT_URL is already set (e.g. LocalStack on http://localhost:4566), it is used as
# is. Otherwise moto server from ./.venv is started on a free 127.0.0.1 port, waited for, and
# stopped when the command ends — also on failure or Ctrl-C.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="${VENV:-$here/.venv}"

export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-testing}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-testing}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-$AWS_REGION}"
export AWS_EC2_METADATA_DISABLED=true

if [[ -n "${AWS_ENDPOINT_URL:-}" ]]; then
  echo "with-emulator: using AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL (not starting moto)" >&2
  exec "$@"
fi

port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log="$here/target/moto-$port.log"
mkdir -p "$here/target"
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
moto_pid=$!
cleanup() { kill "$moto_pid" 2>/dev/null || true; wait "$moto_pid" 2>/dev/null || true; }
trap cleanup EXIT INT TERM

for _ in $(seq 1 100); do
  if "$venv/bin/python" - "$port" <<'PY' 2>/dev/null; then break; fi
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/moto-api/", timeout=1)
PY
  if ! kill -0 "$moto_pid" 2>/dev/null; then echo "with-emulator: moto server died; log:" >&2; cat "$log" >&2; exit 1; fi
  sleep 0.1
done
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
echo "with-emulator: moto server on $AWS_ENDPOINT_URL (log: $log)" >&2
"$@"
