"""moto server for punctual's tests and `punctual run`, with two fixes to moto 5.2.5's SQS and
two to its server's per-request cost (3. below).

1. Sends in constant time.

moto computes a queue's whole attribute dict, ApproximateNumberOfMessages* included (each a
pass over every message), whenever any code reads one attribute; SendMessage reads
ContentBasedDeduplication three times per message. A send therefore costs time proportional to
the queue's depth: measured here, a SendMessageBatch of ten took 18 ms on an empty queue and
1,067 ms with 2,500 delayed messages in it (50 ms per message against SQS's constant cost), so
the emulator, not punctual, bounded every run that fills a lane. The fix: `Queue.attributes`
becomes a read-only mapping that computes an attribute when it is read. It holds the same keys
and the same values as moto's dict (its own code builds each value, the same way); nothing in
moto mutates the dict it gets.

2. No message lost to a concurrent delete, and receives and deletes that do not walk the queue. `Queue.delete_message` rebuilds the message list and
then assigns it, without the lock `add_message` appends under: a message sent between the rebuild
and the assignment is dropped after SendMessage answered success. One release `punctual run` of
10,000 lost 180 reminders this way (released, accepted by SendMessageBatch, on no queue); a
forced interleaving in tools/moto/test_punctual_moto.py loses the message on moto's own code. The
fix holds the queue's lock over the delete, as sends do. moto's delete and receive also walk
every message in the queue per receipt handle and per receive; at 10,000 reminders that made moto
76 % of a core and bounded the run (docs/measurements.md). Both now stop where their answer is
found (`_delete_message`, `VisibleMessages` say how), with the same answers.

3. The server's cost per request: its routing lists moto's package and tries every service's URL
patterns under one lock on every request, and every request writes an access-log line; routing is
kept per host and the log line dropped (`_route_once`, `_quiet_requests`).

Everything else is moto, unchanged: `punctual-moto` takes moto_server's arguments.
"""

from __future__ import annotations

import json
import string
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import moto.sqs.models as sqs_models
from moto.core.utils import camelcase_to_underscores

# The version the fix was written and measured against: another moto may have fixed this or
# changed the attribute code, so refuse to patch anything else (tools/requirements.txt pins it).
MOTO_VERSION = "5.2.5"


class LazyQueueAttributes(Mapping):
    """moto's `Queue.attributes`, computed key by key on read."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        keys = list(queue.BASE_ATTRIBUTES)
        if queue.fifo_queue:
            keys += queue.FIFO_ATTRIBUTES
        if queue.kms_master_key_id:
            keys += queue.KMS_ATTRIBUTES
        if queue.policy:
            keys.append("Policy")
        if queue.redrive_policy:
            keys.append("RedrivePolicy")
        self._keys = keys

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys:
            raise KeyError(key)
        q = self._queue
        if key == "Policy":
            value = q.policy
        elif key == "RedrivePolicy":
            value = json.dumps(q.redrive_policy)
        else:
            value = getattr(q, camelcase_to_underscores(key))
        return str(value).lower() if isinstance(value, bool) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def patch() -> None:
    import moto

    if moto.__version__ != MOTO_VERSION:
        raise SystemExit(
            f"punctual-moto patches moto {MOTO_VERSION}'s SQS attributes; this is moto {moto.__version__}: "
            "check the fix still applies (tools/moto/punctual_moto/__init__.py) before moving the pin"
        )
    sqs_models.Queue.attributes = property(LazyQueueAttributes)  # type: ignore[assignment]
    sqs_models.Queue.delete_message = _delete_message  # type: ignore[method-assign]
    sqs_models.Message.mark_received = _mark_received  # type: ignore[method-assign]
    sqs_models.unix_time = _unix_time  # type: ignore[assignment]
    sqs_models.generate_receipt_handle = _generate_receipt_handle  # type: ignore[assignment]
    sqs_models.SQSBackend.is_message_valid_based_on_retention_period = _retained  # type: ignore[method-assign]
    sqs_models.unix_time_millis = _unix_time_millis  # type: ignore[assignment]
    sqs_models.Queue.messages = property(VisibleMessages)  # type: ignore[assignment]
    sqs_models.SQSBackend.change_message_visibility = _change_message_visibility  # type: ignore[method-assign]
    _route_once()
    _quiet_requests()
    _keep_alive()


def _delete_message(self: Any, receipt_handle: str) -> None:
    """moto's `Queue.delete_message`, under the queue's lock and in time proportional to the
    message's position rather than the queue's depth.

    moto's own walks the whole list twice per handle (a DeleteMessageBatch of ten on a queue of
    5,000: 100,000 receipt-handle lists built) and replaces the list outside the lock. Here: the
    lock `add_message` appends under (a Condition over an RLock), the message found by its handle
    (`_BY_HANDLE`), and an in-place `list.remove` (a memmove: 0.08 ms on a queue of 200,000,
    where a copy-on-write removal, a copy and two slices, took 8 ms a message and made a
    200,000-command drain quadratic). Readers that walk `_messages` without the lock see the list
    shift under them: a receive may pass over one visible message (it stays, for the next
    receive), and ChangeMessageVisibility, which must find its message, walks under the same lock
    (`_change_message_visibility`). receive's move of a message to the dead-letter queue takes it
    off this queue, after which its handles are this queue's no longer. Same answers as moto's:
    an already-deleted handle is accepted, an unknown one is ReceiptHandleIsInvalid."""
    with self._messages_lock:
        if receipt_handle in self.deleted_messages:
            return
        message = _BY_HANDLE.get(receipt_handle)
        if message is not None:
            try:
                self._messages.remove(message)  # by identity (Message has no __eq__), at C speed
            except ValueError:
                message = None  # not on this queue (another queue's handle, or moved to its DLQ)
        if message is None:
            raise sqs_models.ReceiptHandleIsInvalid()
        self.pending_messages.discard(message)
        handles = message.all_receipt_handles
        self.deleted_messages.update(handles)
        for handle in handles:
            _BY_HANDLE.pop(handle, None)


# Every receipt handle moto has given out, to its message: a handle names one message, so a
# delete finds its message without walking the queue. Weak: a message no queue holds any longer
# (purged, its queue deleted) leaves the index with it.
_BY_HANDLE: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()
_moto_mark_received = sqs_models.Message.mark_received


def _mark_received(self: Any, visibility_timeout: int | None = None) -> None:
    """moto's `Message.mark_received` (a new receipt handle, the old ones kept), the new handle
    indexed to its message."""
    _moto_mark_received(self, visibility_timeout)
    _BY_HANDLE[self.receipt_handle] = self


_moto_unix_time = sqs_models.unix_time


def _unix_time(dt: Any = None) -> float:
    """moto's `unix_time` for SQS: now is `time.time()` (the same epoch and microseconds), where
    moto builds two datetimes and subtracts them, on every `Message.visible` and `delayed` of
    every message a receive passes (14 % of moto's time holding the GIL in the ingest's drain)."""
    return time.time() if dt is None else _moto_unix_time(dt)


def _unix_time_millis(dt: Any = None) -> float:
    return _unix_time(dt) * 1000.0


def _generate_receipt_handle() -> str:
    """moto's receipt handle (185 lowercase letters from moto's seeded random), drawn in one
    `choices` call instead of 185 `choice` calls (11 % of moto's time in the ingest's drain)."""
    from moto.moto_api._internal import mock_random

    return "".join(mock_random.choices(string.ascii_lowercase, k=185))


def _retained(self: Any, queue_name: str, message: Any) -> bool:
    """moto's retention check on every message a receive returns, reading the queue's one
    attribute instead of asking `get_queue_attributes` for it."""
    retention = self.get_queue(queue_name).message_retention_period
    return int(retention) + message.sent_timestamp / 1000 > _unix_time()


_moto_change_message_visibility = sqs_models.SQSBackend.change_message_visibility


def _change_message_visibility(self: Any, queue_name: str, receipt_handle: str, visibility_timeout: int) -> None:
    """moto's ChangeMessageVisibility, walking the queue under its lock, so that a delete's
    in-place removal cannot shift the list under the walk and hide the message it looks for."""
    queue = self.get_queue(queue_name)
    with queue._messages_lock:
        _moto_change_message_visibility(self, queue_name, receipt_handle, visibility_timeout)


class VisibleMessages:
    """moto's `Queue.messages` (visible, not delayed), walked lazily.

    moto builds the whole list on every ReceiveMessage, a pass over every message in the queue, to
    take the first ten: a lane holding 5,000 ready reminders cost a 5,000-message walk per receive.
    Iterating yields the same messages in the same order and stops where the reader stops;
    `len()` and truth (ApproximateNumberOfMessages, the long poll's wait) count as moto does."""

    def __init__(self, queue: Any) -> None:
        self._messages = queue._messages

    def __iter__(self) -> Iterator[Any]:
        return (m for m in self._messages if m.visible and not m.delayed)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        return any(True for _ in self)


def _route_once() -> None:
    """The server's per-request routing, answered once per host.

    moto's `DomainDispatcherApplication.get_backend_for_host` lists moto's package directory
    (an `os.listdir` and an `isdir` per service, about 200) and then tries every service's URL
    patterns, on every request, under one lock all request threads share: sampled during a
    20,000-message drain, 15 % of moto's time was spent waiting at that lock. The answer depends
    on the host string alone (the package and the patterns do not change while the server runs),
    so it is kept per host, and a host moto does not know is asked again (it may print a hint)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    route = DomainDispatcherApplication.get_backend_for_host
    known: dict[str | None, Any] = {}

    def get_backend_for_host(self: Any, host: str | None) -> Any:
        if host in known:
            return known[host]
        backend = route(self, host)
        if backend:
            known[host] = backend
        return backend

    DomainDispatcherApplication.get_backend_for_host = get_backend_for_host  # type: ignore[method-assign]


def _quiet_requests() -> None:
    """No access-log line per request (werkzeug writes one to stderr under a lock: 9 % of moto's
    time in the same drain). PUNCTUAL_MOTO_LOG_REQUESTS=1 keeps them, for debugging."""
    import logging
    import os

    if os.environ.get("PUNCTUAL_MOTO_LOG_REQUESTS") != "1":
        logging.getLogger("werkzeug").setLevel(logging.WARNING)


def _keep_alive() -> None:
    """HTTP/1.1 keep-alive, which werkzeug 3's server turns off: it answers every request with
    `Connection: close`, because after a request whose body the application did not read whole,
    http.server would take the rest for the next request line (and after each answer it reads and
    drops whatever arrives on the socket for 10 ms, which would swallow the next request). Every
    SDK call therefore paid a new TCP connection, a new server thread, and a client-side
    TIME-WAIT (2,516 of them after a few seconds of the ingest's drain).

    Here a request that says how long its body is (`Content-Length`, no `Transfer-Encoding`, no
    `Expect: 100-continue`, HTTP/1.1 without `Connection: close`) has its body read whole before
    the application runs, and the application and werkzeug's drain read that copy: the socket is
    then exactly at the next request, and the answer goes without `Connection: close`. Any other
    request is served as werkzeug serves it, and closes."""
    import io
    import socket

    from moto.moto_server.werkzeug_app import MotoRequestHandler

    run_wsgi = MotoRequestHandler.run_wsgi
    send_header = MotoRequestHandler.send_header

    def send_header_kept(self: Any, keyword: str, value: str) -> None:
        if keyword.lower() == "connection" and getattr(self, "_punctual_keep_alive", False):
            return  # http.server would also mark the connection to close
        send_header(self, keyword, value)

    def run_wsgi_kept(self: Any) -> None:
        headers = self.headers
        length = headers.get("Content-Length", "")
        keep = (
            self.request_version == "HTTP/1.1"
            and not self.close_connection
            and length.isdigit()
            and "Transfer-Encoding" not in headers
            and "Expect" not in headers
        )
        if not keep:
            self._punctual_keep_alive = False
            run_wsgi(self)
            return
        body = self.rfile.read(int(length))
        if len(body) < int(length):
            # The client stopped sending: answer what came (the application sees a short body,
            # as it would have), then close.
            self.close_connection = True
        self._punctual_keep_alive = not self.close_connection
        socket_file = self.rfile
        self.rfile = io.BytesIO(body)
        try:
            run_wsgi(self)
        finally:
            self.rfile = socket_file

    setup = MotoRequestHandler.setup

    def setup_nodelay(self: Any) -> None:
        # An answer is written as its header block and then its body: on a kept connection,
        # Nagle's algorithm holds the body until the client acknowledges the headers, which a
        # client delays by 40 ms (measured: 44 ms a request kept, 3 ms closed). Servers that keep
        # connections set TCP_NODELAY.
        setup(self)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    MotoRequestHandler.setup = setup_nodelay  # type: ignore[method-assign]
    MotoRequestHandler.send_header = send_header_kept  # type: ignore[method-assign]
    MotoRequestHandler.run_wsgi = run_wsgi_kept  # type: ignore[method-assign]


def main() -> None:
    patch()
    from moto.server import main as moto_main

    moto_main()
