"""A LocalStack Lambda runtime executor that runs a function's `bootstrap` as a host process.

LocalStack's own executor starts each execution environment as a Docker container running AWS's
runtime interface emulator. Where there is no Docker engine, this executor stands in: for each
execution environment LocalStack asks for, it

- serves the Lambda Runtime API itself, on its own 127.0.0.1 port (a thread per connection):
  `GET  /2018-06-01/runtime/invocation/next` (long poll; the event with
  `Lambda-Runtime-Aws-Request-Id`, `Lambda-Runtime-Deadline-Ms` = now + the function's Timeout,
  `Lambda-Runtime-Invoked-Function-Arn`, `Lambda-Runtime-Trace-Id`),
  `POST …/invocation/{id}/response`, `POST …/invocation/{id}/error` and
  `POST /2018-06-01/runtime/init/error`;
- starts `<unzipped code>/bootstrap` with the environment LocalStack computed for the function
  (its Environment.Variables, the role's credentials, `AWS_ENDPOINT_URL` pointing back at
  LocalStack, `AWS_LAMBDA_FUNCTION_*`, …) plus `AWS_LAMBDA_RUNTIME_API` and
  `LAMBDA_TASK_ROOT` = the code directory, its working directory;
- reports the environment ready at the runtime's first `GET …/next` (an init error, or the
  process exiting first, fails the start with what it said);
- enforces the function's Timeout: an invocation not answered by its deadline is reported
  `Sandbox.Timedout` ("Task timed out after N seconds") and the process is killed; a process
  that exits mid-invocation is reported `Runtime.ExitError`. Either way the next invocation
  starts a fresh process (a new init), as Lambda does;
- hands each invocation's stdout/stderr lines (with START/END/REPORT lines) to LocalStack,
  which writes them to CloudWatch Logs;
- on shutdown (LocalStack's keep-alive expiry, a code or configuration update, LocalStack
  stopping) sends the process SIGTERM, then SIGKILL after 2 s.

Selected with `LAMBDA_RUNTIME_EXECUTOR=host` (entry point `host` in the plux group
`localstack.lambda.runtime_executor`, tools/localstack/pyproject.toml). If
`PUNCTUAL_LAMBDA_LOG_DIR` is set, each environment's output is also appended to
`<dir>/<function>-<environment id>.log`, and every invocation to `<dir>/invocations.jsonl`
(one JSON object a line: function, environment, request id, what invoked it — the SQS
`eventSourceARN`s of its records or the EventBridge `source`/`detail-type` — error or not,
duration, and its output lines): evidence for tools/e2e.py of who invoked what, which
CloudWatch Logs alone cannot tell. Nothing of this reaches the function.

What it does not do:
- **no isolation**: the binary runs as LocalStack's user, on the host's filesystem, network and
  process table (it inherits LocalStack's process group, so whoever stops LocalStack by its
  group stops the functions too). No memory limit (MemorySize is only reported), no
  /tmp of its own, no read-only /var/task, no freeze between invocations;
- **host binaries only**: only `provided.*` runtimes (a `bootstrap` executable; no managed
  language runtimes, no container images, no layers), and only for the host's machine
  architecture: the function's `Architectures` must match the bootstrap's ELF machine and the
  host's (x86_64 here; an arm64 function is refused at preparation with a clear error);
- no Extensions API, no Telemetry/Logs API, no X-Ray daemon, no SnapStart, no response
  streaming; the START/END/REPORT lines carry no billed duration or max memory.
"""

import json
import logging
import os
import platform
import queue
import select
import signal
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from localstack.services.lambda_.invocation.executor_endpoint import StatusErrorException
from localstack.services.lambda_.invocation.lambda_models import FunctionVersion, InvocationResult
from localstack.services.lambda_.invocation.plugins import RuntimeExecutorPlugin
from localstack.services.lambda_.invocation.runtime_executor import (
    LambdaRuntimeException,
    RuntimeExecutor,
)

LOG = logging.getLogger(__name__)
_JOURNAL_LOCK = threading.Lock()

API = "/2018-06-01/runtime"
# ELF e_machine → Lambda architecture.
ELF_MACHINES = {62: "x86_64", 183: "arm64"}
HOST_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
STOP_GRACE_S = 2.0


class HostRuntimeExecutorPlugin(RuntimeExecutorPlugin):
    name = "host"

    def load(self, *args, **kwargs):
        return HostRuntimeExecutor


def _elf_arch(path: Path) -> str | None:
    head = path.read_bytes()[:20] if path.exists() else b""
    if head[:4] != b"\x7fELF":
        return None
    return ELF_MACHINES.get(int.from_bytes(head[18:20], "little"), f"e_machine {int.from_bytes(head[18:20], 'little')}")


class _Pending:
    """One invocation handed to the runtime: its answer arrives on another thread."""

    def __init__(self, request_id: str, body: bytes, headers: dict[str, str]):
        self.request_id = request_id
        self.body = body
        self.headers = headers
        self.answer: tuple[bool, bytes] | None = None  # (is_error, body)


class HostRuntimeExecutor(RuntimeExecutor):
    def __init__(self, id: str, function_version: FunctionVersion) -> None:
        super().__init__(id=id, function_version=function_version)
        self._cond = threading.Condition()
        self._work: queue.Queue[_Pending | None] = queue.Queue()
        self._pending: dict[str, _Pending] = {}
        self._server: ThreadingHTTPServer | None = None
        self._proc: subprocess.Popen | None = None
        self._ready = False  # the current process asked for its first invocation
        self._init_error: bytes | None = None
        self._stopping = False
        self._generation = 0  # one per process started: polls of a killed process hand nothing out
        self._env: dict[str, str] = {}
        self._logs: list[str] = []  # everything, for get_logs()
        self._current: list[str] = []  # since the last invocation was handed back
        self._log_file = None
        self._last_output = 0.0

    # -- the Runtime API ----------------------------------------------------------------------
    def _serve(self) -> None:
        executor = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, status: int, body: bytes = b"", headers: dict | None = None):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().strip().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_GET(self):
                if self.path.rstrip("/") != f"{API}/invocation/next":
                    return self.reply(404, b'{"errorMessage":"not found"}')
                with executor._cond:
                    executor._ready = True
                    executor._cond.notify_all()
                    generation = executor._generation
                while True:
                    try:
                        pending = executor._work.get(timeout=0.5)
                    except queue.Empty:
                        if executor._stopping:
                            return self.reply(500, b'{"errorMessage":"shutting down"}')
                        continue
                    if pending is None:  # shutdown
                        return self.reply(500, b'{"errorMessage":"shutting down"}')
                    if generation != executor._generation:
                        # A poll of a process that was killed since: the event is the new one's.
                        executor._work.put(pending)
                        return None
                    return self.reply(200, pending.body, pending.headers)

            def do_POST(self):
                data = self.body()
                parts = self.path.split("?")[0].strip("/").split("/")
                # 2018-06-01 / runtime / invocation / {id} / response|error
                if parts[:3] == ["2018-06-01", "runtime", "invocation"] and len(parts) == 5 and parts[4] in ("response", "error"):
                    with executor._cond:
                        pending = executor._pending.get(parts[3])
                        if pending is None or pending.answer is not None:
                            return self.reply(400, b'{"errorType":"InvalidRequestID","errorMessage":"unknown or answered request id"}')
                        pending.answer = (parts[4] == "error", data)
                        executor._cond.notify_all()
                    return self.reply(202, b'{"status":"OK"}')
                if parts[:4] == ["2018-06-01", "runtime", "init", "error"]:
                    with executor._cond:
                        executor._init_error = data or b'{"errorType":"Runtime.InitError"}'
                        executor._cond.notify_all()
                    return self.reply(202, b'{"status":"OK"}')
                return self.reply(404, b'{"errorMessage":"not found"}')

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name=f"lambda-host-api-{self.id}", daemon=True).start()

    # -- the process ---------------------------------------------------------------------------
    def _code_dir(self) -> Path:
        return Path(self.function_version.config.code.get_unzipped_code_location())

    def _log(self, line: str) -> None:
        with self._cond:
            self._logs.append(line)
            self._current.append(line)
            if self._log_file:
                self._log_file.write(line + "\n")
                self._log_file.flush()

    def _pump(self, proc: subprocess.Popen) -> None:
        for raw in iter(proc.stdout.readline, b""):
            self._last_output = time.monotonic()
            self._log(raw.decode("utf-8", "replace").rstrip("\n"))
        with self._cond:
            self._cond.notify_all()

    def _spawn(self) -> None:
        """Starts bootstrap and waits for its first GET …/next (ready), an init error, its exit,
        or stop(). Raises StatusErrorException when it did not become ready."""
        with self._cond:
            self._ready = False
            self._init_error = None
            self._generation += 1
        self._drop_queued()
        code = self._code_dir()
        self._proc = subprocess.Popen(
            [str(code / "bootstrap")],
            cwd=str(code),
            env=self._env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        threading.Thread(target=self._pump, args=(self._proc,), name=f"lambda-host-out-{self.id}", daemon=True).start()
        with self._cond:
            while not (self._ready or self._init_error or self._stopping or self._proc.poll() is not None):
                self._cond.wait(0.2)
            if self._ready:
                return
            if self._init_error:
                payload = self._init_error
            elif self._stopping:
                payload = b'{"errorType":"Runtime.Stopped","errorMessage":"environment stopped during init"}'
            else:
                payload = json.dumps(
                    {"errorType": "Runtime.ExitError", "errorMessage": f"Runtime exited with error: exit status {self._proc.returncode}"}
                ).encode()
        self._kill()
        raise StatusErrorException("Environment startup failed", payload=payload)

    def _drop_queued(self) -> None:
        """Forgets events no process took (one of an invocation that timed out before its
        runtime asked): a new process must never run an invocation already reported failed."""
        try:
            while True:
                self._work.get_nowait()
        except queue.Empty:
            pass

    def _kill(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    # -- RuntimeExecutor ------------------------------------------------------------------------
    def start(self, env_vars: dict[str, str]) -> None:
        code = self._code_dir()
        self._serve()
        env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "LANG": "C.UTF-8"}
        env.update({k: str(v) for k, v in env_vars.items() if v is not None})
        env.update({
            "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{self._server.server_address[1]}",
            "LAMBDA_TASK_ROOT": str(code),
        })
        self._env = env
        log_dir = os.environ.get("PUNCTUAL_LAMBDA_LOG_DIR")
        if log_dir:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            self._log_file = open(Path(log_dir) / f"{self.function_version.id.function_name}-{self.id}.log", "a")
            self._log_file.write(f"=== environment {self.id} starting {code}/bootstrap\n")
        self._spawn()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._work.put(None)
        self._kill()
        if self._server:
            self._server.shutdown()
            self._server.server_close()
        with self._cond:
            log_file, self._log_file = self._log_file, None
        if log_file:
            log_file.write(f"=== environment {self.id} stopped\n")
            log_file.close()

    def get_address(self) -> str:
        return "127.0.0.1"

    def get_endpoint_from_executor(self) -> str:
        # LocalStack listens on loopback (GATEWAY_LISTEN=127.0.0.1:PORT): the functions reach it
        # there, as AWS_ENDPOINT_URL=http://127.0.0.1:PORT.
        return "127.0.0.1"

    def get_runtime_endpoint(self) -> str:
        from localstack import config

        return f"http://127.0.0.1:{config.GATEWAY_LISTEN[0].port}/_localstack_lambda/{self.id}"

    def invoke(self, payload: dict[str, str]) -> InvocationResult:
        request_id = payload.get("invoke-id") or str(uuid.uuid4())
        timeout_s = float(self.function_version.config.timeout or 3)
        if self._proc is None or self._proc.poll() is not None:
            # The previous process timed out or crashed: a new init, as Lambda does.
            try:
                self._spawn()
            except StatusErrorException as e:
                return InvocationResult(request_id, e.payload, is_error=True, logs=self._take_logs())
        started = time.monotonic()
        deadline = time.time() + timeout_s
        pending = _Pending(
            request_id,
            (payload.get("payload") or "").encode(),
            {
                "Content-Type": "application/json",
                "Lambda-Runtime-Aws-Request-Id": request_id,
                "Lambda-Runtime-Deadline-Ms": str(int(deadline * 1000)),
                "Lambda-Runtime-Invoked-Function-Arn": payload.get("invoked-function-arn") or self.function_version.qualified_arn,
                "Lambda-Runtime-Trace-Id": payload.get("trace-id") or "",
            },
        )
        self._log(f"START RequestId: {request_id} Version: {self.function_version.id.qualifier}")
        with self._cond:
            self._pending[request_id] = pending
        self._work.put(pending)
        with self._cond:
            while pending.answer is None and not self._stopping and self._proc.poll() is None and time.time() < deadline:
                self._cond.wait(min(0.2, max(0.0, deadline - time.time())))
            answer = pending.answer
            self._pending.pop(request_id, None)
        if answer is None:
            self._drop_queued()
        if answer is not None:
            is_error, body = answer
        elif self._proc.poll() is not None:
            is_error, body = True, json.dumps({
                "errorType": "Runtime.ExitError",
                "errorMessage": f"RequestId: {request_id} Error: Runtime exited with error: exit status {self._proc.returncode}",
            }).encode()
        elif self._stopping:
            is_error, body = True, b'{"errorType":"Runtime.Stopped","errorMessage":"environment stopped during the invocation"}'
        else:
            self._log(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {request_id} Task timed out after {timeout_s:.2f} seconds")
            self._kill()
            is_error, body = True, json.dumps({
                "errorType": "Sandbox.Timedout",
                "errorMessage": f"RequestId: {request_id} Error: Task timed out after {timeout_s:.2f} seconds",
            }).encode()
        took_ms = (time.monotonic() - started) * 1000
        self._drain_output()
        self._log(f"END RequestId: {request_id}")
        self._log(f"REPORT RequestId: {request_id}\tDuration: {took_ms:.2f} ms")
        logs = self._take_logs()
        self._journal(request_id, payload.get("payload") or "", is_error, took_ms, logs)
        return InvocationResult(request_id, body, is_error=is_error, logs=logs)

    def _journal(self, request_id: str, event: str, is_error: bool, took_ms: float, logs: str) -> None:
        log_dir = os.environ.get("PUNCTUAL_LAMBDA_LOG_DIR")
        if not log_dir:
            return
        try:
            parsed = json.loads(event) if event else {}
        except ValueError:
            parsed = {}
        parsed = parsed if isinstance(parsed, dict) else {}
        records = parsed.get("Records") if isinstance(parsed.get("Records"), list) else []
        entry = {
            "function": self.function_version.id.function_name,
            "environment": self.id,
            "request_id": request_id,
            "at": time.time(),
            "event_sources": sorted({r.get("eventSourceARN") for r in records if isinstance(r, dict) and r.get("eventSourceARN")}),
            "records": len(records),
            "source": parsed.get("source"),
            "detail_type": parsed.get("detail-type"),
            "is_error": is_error,
            "duration_ms": round(took_ms, 2),
            "logs": logs.splitlines(),
        }
        with _JOURNAL_LOCK, open(Path(log_dir) / "invocations.jsonl", "a") as f:
            f.write(json.dumps(entry) + "\n")

    def _drain_output(self, limit_s: float = 0.5) -> None:
        """What the runtime printed before it answered is in the pipe, not yet necessarily
        read: wait (bounded) until the pipe is empty and the reader has been idle 10 ms, so
        an invocation's lines are its own and not the next one's."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return
        end = time.monotonic() + limit_s
        time.sleep(0.01)  # a line read but not yet logged is invisible to select()
        while time.monotonic() < end:
            try:
                pending, _, _ = select.select([proc.stdout], [], [], 0)
            except (OSError, ValueError):
                return
            if not pending and time.monotonic() - self._last_output > 0.01:
                return
            time.sleep(0.002)

    def _take_logs(self) -> str:
        with self._cond:
            lines, self._current = self._current, []
        return "\n".join(lines) + ("\n" if lines else "")

    def get_logs(self) -> str:
        with self._cond:
            return "\n".join(self._logs)

    @classmethod
    def prepare_version(cls, function_version: FunctionVersion) -> None:
        cfg = function_version.config
        runtime = str(cfg.runtime or "")
        if not runtime.startswith("provided"):
            raise LambdaRuntimeException(
                f"the host executor runs only provided.* runtimes (a bootstrap binary), not {runtime or 'container images'}"
            )
        if cfg.layers:
            raise LambdaRuntimeException("the host executor does not support layers")
        cfg.code.prepare_for_execution()
        bootstrap = Path(cfg.code.get_unzipped_code_location()) / "bootstrap"
        if not bootstrap.is_file():
            raise LambdaRuntimeException(f"no bootstrap at the root of the code package of {function_version.qualified_arn}")
        wanted = (cfg.architectures or ["x86_64"])[0]
        built = _elf_arch(bootstrap)
        if wanted != HOST_ARCH or (built is not None and built != HOST_ARCH):
            raise LambdaRuntimeException(
                f"the host executor runs host binaries only: this host is {HOST_ARCH}, the function is "
                f"{wanted}, its bootstrap is {built or 'not ELF'}"
            )
        os.chmod(bootstrap, 0o755)

    @classmethod
    def cleanup_version(cls, function_version: FunctionVersion) -> None:
        pass

    @classmethod
    def validate_environment(cls) -> bool:
        return True
