# Shell helpers shared by tools/invoke-smoke.sh and tools/cold-start.sh (sourced, not run).
# Needs $here (the repository root) set by the caller.

py() { "$here/.venv/bin/python" "$@"; }

# A free loopback port.
free_port() { py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Waits (up to ~10 s) until something listens on 127.0.0.1:$1.
wait_port() {
  for _ in $(seq 1 100); do
    py -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Exports the environment a function binary gets against the local pipeline whose state file
# is $1: dummy credentials, the emulator's endpoints, the queues and tables, the double.
local_env() {
  local state=$1
  get() { py -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]) or '')" "$state" "$1"; }
  export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
  export AWS_ENDPOINT_URL="$(get endpoint)" SEND_QUEUE_URL="$(get send_queue_url)" DLQ_URL="$(get dlq_url)"
  export URGENT_QUEUE_URL="$(get urgent_queue_url)" LEDGER_TABLE="$(get ledger_table)" RENEWALS_TABLE="$(get renewals_table)"
  export PROVIDER_URL="$(get provider_url)" PROVIDER_TOKEN="$(get provider_token)"
  local ddb; ddb="$(get dynamodb_endpoint)"
  if [[ -n "$ddb" ]]; then export AWS_ENDPOINT_URL_DYNAMODB="$ddb"; fi
}
