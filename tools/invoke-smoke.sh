#!/usr/bin/env bash
# `make invoke-smoke`: a smoke test of the real function binaries under the Lambda runtime and Invoke
# APIs (`cargo lambda watch`), on the emulator through `punctual local up`:
# 1. the sender binary invoked with a malformed-message event: answer and DLQ checked;
# 2. the redrive binary reached the way operators reach a deployed stack, `punctual redrive
#    --function NAME` (lambda:Invoke): a refused request (exit 2, the function's problems) and a
#    bounded move (3 letters, max 2: exit 0, 2 moved, 1 left in the DLQ).
# Everything is torn down.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
export PUNCTUAL_STATE_DIR="$here/target/invoke-smoke"
rm -rf "$PUNCTUAL_STATE_DIR"
cd "$here"
# shellcheck source=tools/lib.sh
. tools/lib.sh
cargo build --locked -q -p punctual -p punctual-sender -p punctual-redrive
./target/debug/punctual local up --json >/dev/null
trap './target/debug/punctual local down >/dev/null 2>&1 || true' EXIT
answer=$(tools/invoke.sh sender events/sender/malformed-body.json | tail -1)
dlq=$(./target/debug/punctual local drain --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["dead_lettered"].get("malformed", 0))')
passed=0; failed=0
if [[ "$answer" == '{"batchItemFailures":[]}' && "$dlq" == 1 ]]; then
  echo "invoke-smoke: sender binary answered $answer and quarantined the malformed message"
  passed=$((passed + 1))
else
  echo "invoke-smoke: unexpected: answer=$answer, malformed in DLQ=$dlq (see target/invoke-sender.log)" >&2
  failed=$((failed + 1))
fi

# The redrive function through lambda:Invoke. Three redrivable letters join the malformed one.
state="$PUNCTUAL_STATE_DIR/state.json"
for n in 0 1 2; do
  body=$(./target/debug/punctual local demo-message "$n")
  py - "$state" "$body" <<'PY'
import json, sys, boto3
s = json.load(open(sys.argv[1]))
sqs = boto3.client("sqs", endpoint_url=s["endpoint"], region_name="us-east-1",
                   aws_access_key_id="testing", aws_secret_access_key="testing")
sqs.send_message(QueueUrl=s["dlq_url"], MessageBody=sys.argv[2],
                 MessageAttributes={"reason": {"DataType": "String", "StringValue": "attempt_limit"}})
PY
done
dlq_depth() {
  py - "$state" <<'PY'
import json, sys, boto3
s = json.load(open(sys.argv[1]))
sqs = boto3.client("sqs", endpoint_url=s["endpoint"], region_name="us-east-1",
                   aws_access_key_id="testing", aws_secret_access_key="testing")
a = sqs.get_queue_attributes(QueueUrl=s["dlq_url"], AttributeNames=["ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
print(int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"]))
PY
}
before=$(dlq_depth)
# The redrive binary under a Lambda runtime + Invoke API emulator (tools/lambda_emulator.py:
# each invocation gets a deadline 60 s out, as the template's function timeout would allow),
# with the local pipeline's environment; the CLI reaches it through lambda:Invoke.
lport=$(free_port)
(
  local_env "$state"
  exec "$here/.venv/bin/python" tools/lambda_emulator.py --binary ./target/debug/redrive --function punctual-redrive --port "$lport" \
    --timeout-s 60 --log target/invoke-redrive.log --report target/invoke-redrive.json
) &
emu=$!
trap 'kill $emu 2>/dev/null || true; ./target/debug/punctual local down >/dev/null 2>&1 || true' EXIT
wait_port "$lport"
invoke() {
  AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1 \
    AWS_ENDPOINT_URL_LAMBDA="http://127.0.0.1:$lport" ./target/debug/punctual redrive --function punctual-redrive "$@"
}
set +e
invoke --reason " " --owner smoke --max-messages 2 --max-per-second 5 --json >target/invoke-refused.json
refused_exit=$?
invoke --reason "invoke smoke" --owner smoke --max-messages 2 --max-per-second 5 --failure-reason attempt_limit \
  --json >target/invoke-moved.json
moved_exit=$?
set -e
kill $emu; wait $emu 2>/dev/null || true
after=$(dlq_depth)
check=$(py - <<'PY'
import json
r = json.load(open("target/invoke-refused.json")); m = json.load(open("target/invoke-moved.json"))
ok_r = r.get("status") == "refused" and any("reason" in p for p in r.get("problems", []))
ok_m = m.get("status") == "done" and m["summary"]["moved"] == 2 and not m["summary"]["dry_run"]
print(f"{ok_r} {ok_m} refused={r.get('problems')} moved={m.get('summary', {}).get('moved')}")
PY
)
if [[ "$refused_exit" == 2 && "$moved_exit" == 0 && "$check" == "True True"* && "$before" == 4 && "$after" == 2 ]]; then
  echo "invoke-smoke: redrive binary via lambda:Invoke refused a bad request and moved 2 of 3 letters (DLQ $before -> $after)"
  passed=$((passed + 1))
else
  echo "invoke-smoke: redrive via lambda:Invoke unexpected: exits $refused_exit/$moved_exit, $check, DLQ $before -> $after (see target/invoke-redrive.log)" >&2
  failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[[ "$failed" == 0 ]]
