#!/usr/bin/env python3
"""A Lambda runtime API and Invoke API on loopback, for one function binary.

    tools/lambda_emulator.py --binary target/debug/redrive --function redrive --port 9001 \
        [--timeout-s 60] [--memory-mb 256] [--report target/lambda-redrive.json] [--log FILE]

It starts the binary (a `bootstrap`) with the environment Lambda gives a function
(AWS_LAMBDA_RUNTIME_API, AWS_LAMBDA_FUNCTION_NAME, …) on top of its own, serves

  GET  /2018-06-01/runtime/invocation/next           (the function asks for work)
  POST /2018-06-01/runtime/invocation/{id}/response  (its answer)
  POST /2018-06-01/runtime/invocation/{id}/error     (its error)
  POST /2018-06-01/runtime/init/error                (it failed to start)
  POST /2015-03-31/functions/{name}/invocations      (lambda:Invoke, what the AWS SDK calls)

and, on SIGTERM or SIGINT, stops the binary and writes what it measured to --report:
`init_ms` (exec → the first GET …/next: the cold start's init phase), each invocation's
`duration_ms` (event handed out → answer received), and the function's exit status.
Each invocation's deadline is now + --timeout-s, as Lambda sets Lambda-Runtime-Deadline-Ms.
Only loopback. No dependencies beyond the standard library.
"""

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--binary", required=True)
parser.add_argument("--function", required=True)
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--timeout-s", type=float, default=60.0)
parser.add_argument("--memory-mb", type=int, default=256)
parser.add_argument("--report")
parser.add_argument("--log")
args = parser.parse_args()

work = queue.Queue()  # (request_id, payload bytes)
answers = {}  # request_id -> (ok, body)
answered = threading.Condition()
measured = {"function": args.function, "binary": args.binary, "init_ms": None, "invocations": [], "exit": None}
started = {}  # request_id -> monotonic when handed out
t_exec = None


def read_body(h):
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        out = b""
        while True:
            size = int(h.rfile.readline().strip().split(b";")[0], 16)
            if size == 0:
                h.rfile.readline()
                return out
            out += h.rfile.read(size)
            h.rfile.readline()
    return h.rfile.read(int(h.headers.get("Content-Length") or 0))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, body=b"", headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.rstrip("/") != "/2018-06-01/runtime/invocation/next":
            return self.reply(404, b'{"message":"not found"}')
        if measured["init_ms"] is None:
            measured["init_ms"] = round((time.monotonic() - t_exec) * 1000, 2)
        request_id, payload = work.get()
        started[request_id] = time.monotonic()
        deadline_ms = int((time.time() + args.timeout_s) * 1000)
        self.reply(200, payload, {
            "Content-Type": "application/json",
            "Lambda-Runtime-Aws-Request-Id": request_id,
            "Lambda-Runtime-Deadline-Ms": str(deadline_ms),
            "Lambda-Runtime-Invoked-Function-Arn": f"arn:aws:lambda:us-east-1:000000000000:function:{args.function}",
            "Lambda-Runtime-Trace-Id": f"Root=1-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:24]};Sampled=0",
        })

    def do_POST(self):
        body = read_body(self)
        parts = self.path.strip("/").split("/")
        if parts[:3] == ["2018-06-01", "runtime", "invocation"] and len(parts) == 5 and parts[4] in ("response", "error"):
            request_id, ok = parts[3], parts[4] == "response"
            took = time.monotonic() - started.pop(request_id, time.monotonic())
            measured["invocations"].append({"duration_ms": round(took * 1000, 2), "ok": ok})
            with answered:
                answers[request_id] = (ok, body)
                answered.notify_all()
            return self.reply(202, b"{}")
        if parts[:3] == ["2018-06-01", "runtime", "init"]:
            measured["init_error"] = body.decode("utf-8", "replace")
            return self.reply(202, b"{}")
        if parts[:2] == ["2015-03-31", "functions"] and parts[-1] == "invocations":
            if parts[2] != args.function:
                return self.reply(404, json.dumps({"Type": "User", "message": f"Function not found: {parts[2]}"}).encode(),
                                  {"x-amzn-ErrorType": "ResourceNotFoundException"})
            request_id = str(uuid.uuid4())
            work.put((request_id, body or b"{}"))
            end = time.monotonic() + args.timeout_s + 5
            with answered:
                while request_id not in answers and time.monotonic() < end:
                    answered.wait(max(0.0, end - time.monotonic()))
                got = answers.pop(request_id, None)
            if got is None:
                return self.reply(200, b'{"errorType":"Timeout","errorMessage":"Task timed out"}',
                                  {"X-Amz-Function-Error": "Unhandled", "X-Amz-Executed-Version": "$LATEST"})
            ok, answer = got
            headers = {"Content-Type": "application/json", "X-Amz-Executed-Version": "$LATEST"}
            if not ok:
                headers["X-Amz-Function-Error"] = "Unhandled"
            return self.reply(200, answer, headers)
        return self.reply(404, b'{"message":"not found"}')


server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
env = dict(os.environ)
env.update({
    "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{args.port}",
    "AWS_LAMBDA_FUNCTION_NAME": args.function,
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(args.memory_mb),
    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
    "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{args.function}",
    "AWS_LAMBDA_LOG_STREAM_NAME": "local",
})
log = open(args.log, "ab") if args.log else subprocess.DEVNULL
t_exec = time.monotonic()
child = subprocess.Popen([args.binary], env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
stop = threading.Event()


def finish(*_):
    stop.set()


signal.signal(signal.SIGTERM, finish)
signal.signal(signal.SIGINT, finish)
while not stop.is_set() and child.poll() is None:
    stop.wait(0.2)
if child.poll() is None:
    child.terminate()
    try:
        child.wait(5)
    except subprocess.TimeoutExpired:
        child.kill()
measured["exit"] = child.wait()
server.shutdown()
if args.report:
    with open(args.report, "w") as f:
        json.dump(measured, f, indent=2)
sys.exit(0)
