#!/usr/bin/env python3
"""Does a message sent while moto deletes another one stay on the queue? It must.

moto 5.2.5's `Queue.delete_message` rebuilds the queue's message list and then assigns it, without
the lock `add_message` appends under. A message appended after the rebuild's pass and before the
assignment is dropped: SendMessage(Batch) answered success, the message is on no queue. The test
forces that interleaving: each pass the delete makes over the queue ends by letting another thread
send, and waits up to 0.3 s for it. Unpatched moto loses the message sent after its second pass;
punctual-moto (which holds the lock over the delete) makes the sends wait and keeps them. A second
case checks punctual-moto's delete and receive answer as moto's own do.

Run: .venv/bin/python tools/moto/test_punctual_moto.py [--unpatched]  (exit 1 = the message was
lost). `make lint-template` runs it patched; `--unpatched` shows moto's own code failing it.
"""
from __future__ import annotations

import sys
import threading
import time

import moto.sqs.models as sqs_models


class HookedList(list):
    """A list that calls `hook` each time an iteration over it ends (walked to the end or left),
    and before each `remove` (punctual-moto's delete removes in place, without a walk)."""

    def __init__(self, items, hook):
        super().__init__(items)
        self._hook = hook

    def remove(self, x):
        self._hook()
        super().remove(x)

    def __iter__(self):
        i = 0
        try:
            while i < len(self):
                yield self[i]
                i += 1
        finally:
            self._hook()


def sends_during_delete_stay_on_the_queue() -> bool:
    """Every pass the delete makes over the queue, and its removal, ends with a send from
    another thread, which is given 0.3 s to finish. moto's delete makes two passes; the send after the second is lost.
    punctual-moto's copies the list once, under the lock: without the lock, the send after the
    copy would be lost the same way (the assignment is of the copy)."""
    backend = sqs_models.sqs_backends["123456789012"]["us-east-1"]
    queue = backend.create_queue("race-" + str(time.monotonic_ns()))
    for i in range(5):
        backend.send_message(queue.name, f"old-{i}")
    [first] = backend.receive_message(queue.name, 1, 0, 30)

    senders = []

    deleter = threading.current_thread()

    def send_now():
        if threading.current_thread() is not deleter:
            return  # a pass the send itself makes (moto's attribute reads walk the queue)
        body = f"sent-during-delete-{len(senders)}"
        sender = threading.Thread(target=lambda: backend.send_message(queue.name, body))
        senders.append((body, sender))
        sender.start()
        sender.join(timeout=0.3)  # moto's: the send finishes here; punctual-moto's waits for the lock

    queue._messages = HookedList(queue._messages, send_now)
    backend.delete_message(queue.name, first.receipt_handle)
    deleter = None  # passes after the delete send nothing
    for _, sender in senders:
        sender.join(timeout=5)
    bodies = [m.body for m in queue._messages]
    print(f"after the delete: {len(bodies)} messages on the queue: {sorted(bodies)}")
    sent = [body for body, _ in senders]
    return bool(sent) and all(b in bodies for b in sent) and first.body not in bodies


def delete_answers_as_moto_does() -> bool:
    """Receipt handles old and new delete; a deleted one deletes again quietly; an unknown one is
    ReceiptHandleIsInvalid; receive takes visible messages in order and skips delayed ones."""
    backend = sqs_models.sqs_backends["123456789012"]["us-east-1"]
    queue = backend.create_queue("answers-" + str(time.monotonic_ns()))
    backend.send_message(queue.name, "delayed", delay_seconds=60)
    for i in range(3):
        backend.send_message(queue.name, f"m{i}")
    got = backend.receive_message(queue.name, 10, 0, 0)  # visibility 0: visible again at once
    if [m.body for m in got] != ["m0", "m1", "m2"]:
        print(f"receive: {[m.body for m in got]}")
        return False
    old = got[0].receipt_handle
    backend.receive_message(queue.name, 1, 0, 30)  # m0 again, under a new handle
    backend.delete_message(queue.name, old)  # the old handle still names it
    backend.delete_message(queue.name, old)  # and deleting twice is quiet
    try:
        backend.delete_message(queue.name, "no-such-handle")
        print("an unknown receipt handle was accepted")
        return False
    except sqs_models.ReceiptHandleIsInvalid:
        pass
    left = sorted(m.body for m in queue._messages)
    visible = len(queue.messages)
    print(f"after the deletes: {left}, {visible} visible")
    return left == ["delayed", "m1", "m2"] and visible == 2 and bool(queue.messages)


class MovedDuringTheWalk(list):
    """A list whose first membership test or `remove` first runs `move` (once): the point where a
    receive on another thread moves a message to the dead-letter queue, in place, unlocked, while
    a delete walks a message's receipt handles (moto's) or removes it in place (punctual-moto's)."""

    def __init__(self, items, move):
        super().__init__(items)
        self._move = move

    def _moved(self):
        move, self._move = self._move, None
        if move is not None:
            move()

    def __contains__(self, x):
        self._moved()
        return list.__contains__(self, x)

    def remove(self, x):
        self._moved()
        list.remove(self, x)


def a_dead_letter_move_during_a_delete_loses_nothing() -> bool:
    """receive moves a message to the DLQ (`_messages.remove`, in place, without the lock) while a
    delete walks the queue: the delete must remove the message it names and no other. A cut
    made on the live list after the move removed the deleted message's neighbour instead."""
    backend = sqs_models.sqs_backends["123456789012"]["us-east-1"]
    queue = backend.create_queue("dlq-move-" + str(time.monotonic_ns()))
    for i in range(4):
        backend.send_message(queue.name, f"m{i}")
    handles = {m.body: m.receipt_handle for m in backend.receive_message(queue.name, 10, 0, 30)}
    [first, _, target, _] = list(queue._messages)
    target.visible_at = 0
    backend.receive_message(queue.name, 1, 0, 30)  # target again: its first handle is now an old one

    def move_first():
        if first in queue._messages:
            queue._messages.remove(first)

    target._old_receipt_handles = MovedDuringTheWalk(target._old_receipt_handles, move_first)
    queue._messages = MovedDuringTheWalk(queue._messages, move_first)
    backend.delete_message(queue.name, handles["m2"])
    left = sorted(m.body for m in queue._messages)
    print(f"after a DLQ move during the delete of m2: {left} (m0 moved; m0 back is a duplicate, not a loss)")
    return "m1" in left and "m3" in left and "m2" not in left


class ShiftedDuringTheWalk(list):
    """A message list whose walk, on reaching index `at`, first lets `during` run on another thread
    (given 0.3 s): the point where a delete removes an earlier message from the live list."""

    def __init__(self, items, at, during):
        super().__init__(items)
        self._at, self._during = at, during

    def __iter__(self):
        i = 0
        while i < len(self):
            if i == self._at and self._during is not None:
                during, self._during = self._during, None
                self.thread = threading.Thread(target=during)
                self.thread.start()
                self.thread.join(timeout=0.3)
            yield self[i]
            i += 1


def visibility_change_finds_its_message_during_a_delete() -> bool:
    """ChangeMessageVisibility walks the queue for its handle while another consumer deletes an
    earlier message: the delete removes in place, so a walk without the lock steps over the
    message after it and answers ReceiptHandleIsInvalid for a message that is there."""
    backend = sqs_models.sqs_backends["123456789012"]["us-east-1"]
    queue = backend.create_queue("cmv-" + str(time.monotonic_ns()))
    for i in range(4):
        backend.send_message(queue.name, f"m{i}")
    got = {m.body: m.receipt_handle for m in backend.receive_message(queue.name, 10, 0, 30)}
    queue._messages = ShiftedDuringTheWalk(
        queue._messages, 2, lambda: backend.delete_message(queue.name, got["m0"])
    )
    walked = queue._messages
    try:
        backend.change_message_visibility(queue.name, got["m2"], 0)
    except sqs_models.ReceiptHandleIsInvalid:
        print("ChangeMessageVisibility answered ReceiptHandleIsInvalid for m2, which is on the queue")
        return False
    finally:
        walked.thread.join(timeout=5)
    left = sorted(m.body for m in queue._messages)
    print(f"after a delete of m0 during the visibility change of m2: {left}")
    return left == ["m1", "m2", "m3"]


def routing_answers_as_moto_does() -> bool:
    """The per-host routing kept by punctual-moto answers what moto's own does, twice."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    app = DomainDispatcherApplication(create_backend_app)
    hosts = ["sqs.us-east-1.amazonaws.com", "dynamodb.us-east-1.amazonaws.com", "events.eu-west-1.amazonaws.com",
             "monitoring.us-east-1.amazonaws.com", "nothing.example", "moto_api", "sqs", None]
    theirs = [punctual_moto_route(app, h) for h in hosts]
    ours = [app.get_backend_for_host(h) for h in hosts] + [app.get_backend_for_host(h) for h in hosts]
    print(f"routing: {dict(zip(map(str, hosts), theirs))}")
    return ours == theirs + theirs and theirs[0] == "sqs" and theirs[1] == "dynamodb"


punctual_moto_route = None


def a_connection_serves_request_after_request(patched: bool) -> bool:
    """A server on loopback; one TCP connection sends two SQS requests back to back (the second
    before the first is answered, so werkzeug's 10 ms drain after an answer would swallow it),
    then a third: all three are answered on that connection, none with `Connection: close`; a
    request that asks to close is answered and closed."""
    import socket
    import subprocess

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    start = "import punctual_moto as m; m.main()" if patched else "from moto.server import main; main()"
    server = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.argv=['moto','-H','127.0.0.1','-p','{port}']; {start}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)

        def request(target: str, body: str, close: bool = False) -> bytes:
            head = (
                f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-amz-json-1.0\r\n"
                f"X-Amz-Target: AmazonSQS.{target}\r\nContent-Length: {len(body)}\r\n"
                "Authorization: AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/sqs/aws4_request, "
                "SignedHeaders=host, Signature=x\r\n"
            )
            return (head + ("Connection: close\r\n" if close else "") + "\r\n" + body).encode()

        conn = socket.create_connection(("127.0.0.1", port), 5)
        conn.settimeout(5)
        buf = b""

        def answers(n: int) -> list[bytes]:
            nonlocal buf
            out = []
            while len(out) < n:
                head_end = buf.find(b"\r\n\r\n")
                if head_end >= 0:
                    head = buf[:head_end]
                    length = int(next(l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")))
                    if len(buf) >= head_end + 4 + length:
                        out.append(head)
                        buf = buf[head_end + 4 + length :]
                        continue
                try:
                    data = conn.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    break
                buf += data
            return out

        conn.sendall(request("CreateQueue", '{"QueueName":"kept"}') + request("ListQueues", "{}"))
        first = answers(2)
        conn.sendall(request("ListQueues", "{}", close=True))
        last = answers(1)
        closed = conn.recv(1) == b"" if last else False
        conn.close()
        heads = first + last
        print(f"one connection: {len(heads)} of 3 answered; 'Connection: close' on "
              f"{[b'connection: close' in h.lower() for h in heads]}; closed after the last: {closed}")
        return (
            len(heads) == 3
            and all(h.startswith(b"HTTP/1.1 200") for h in heads)
            and not any(b"connection: close" in h.lower() for h in first)
            and b"connection: close" in last[0].lower()
            and closed
        )
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> int:
    global punctual_moto_route
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    punctual_moto_route = DomainDispatcherApplication.get_backend_for_host  # moto's own
    if "--unpatched" not in sys.argv:
        import punctual_moto

        punctual_moto.patch()
    ok = True
    if not a_connection_serves_request_after_request("--unpatched" not in sys.argv):
        print("FAILED: a keep-alive connection did not serve request after request")
        ok = False
    if not routing_answers_as_moto_does():
        print("FAILED: the kept routing answered otherwise than moto's own")
        ok = False
    if not visibility_change_finds_its_message_during_a_delete():
        print("FAILED: a visibility change missed its message while another was deleted")
        ok = False
    if not sends_during_delete_stay_on_the_queue():
        print("FAILED: SendMessage answered success and the message is on no queue")
        ok = False
    if not a_dead_letter_move_during_a_delete_loses_nothing():
        print("FAILED: a delete during a dead-letter move removed a message it did not name")
        ok = False
    if not delete_answers_as_moto_does():
        print("FAILED: delete or receive answered otherwise than moto's own")
        ok = False
    if ok:
        print("ok: sends during a delete stay on the queue; deletes, receives, visibility changes and routing answer as moto's; connections are kept")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
