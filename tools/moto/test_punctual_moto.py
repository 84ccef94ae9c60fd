#!/usr/bin/env python3
"""Does a message sent while moto deletes another one stay on the queue? It must.

moto 5.2.5's `Queue.delete_message` rebuilds the queue's message list and then assigns it, without
the lock `add_message` appends under. A message appended after the rebuild's pass and before the
assignment is dropped: SendMessage(Batch) answered success, the message is on no queue. The test
forces that interleaving: the rebuild's pass, once it has seen every message, lets another thread
send and waits up to 0.3 s for it. Unpatched moto loses the sent message; punctual-moto (which
holds the lock over the delete) makes the send wait and keeps it.

Run: .venv/bin/python tools/moto/test_punctual_moto.py [--unpatched]  (exit 1 = the message was
lost). `make lint-template` runs it patched; `--unpatched` shows moto's own code failing it.
"""
from __future__ import annotations

import sys
import threading
import time

import moto.sqs.models as sqs_models


class HookedList(list):
    """A list whose iteration runs `hook` once, when an iteration has walked every item."""

    def __init__(self, items, hook):
        super().__init__(items)
        self._hook = hook

    def __iter__(self):
        i = 0
        while i < len(self):
            yield self[i]
            i += 1
        hook, self._hook = self._hook, None
        if hook is not None:
            hook()


def send_during_delete_keeps_the_message() -> bool:
    backend = sqs_models.sqs_backends["123456789012"]["us-east-1"]
    queue = backend.create_queue("race-" + str(time.monotonic_ns()))
    for i in range(5):
        backend.send_message(queue.name, f"old-{i}")
    [first] = backend.receive_message(queue.name, 1, 0, 30)

    sent = threading.Thread(target=lambda: backend.send_message(queue.name, "sent-during-delete"))

    def send_now():
        sent.start()
        sent.join(timeout=0.3)  # unpatched: the send finishes here; patched: it waits for the lock

    queue._messages = HookedList(queue._messages, send_now)
    backend.delete_message(queue.name, first.receipt_handle)
    sent.join(timeout=5)
    bodies = [m.body for m in queue._messages]
    print(f"after the delete: {len(bodies)} messages on the queue: {sorted(bodies)}")
    return "sent-during-delete" in bodies and first.body not in bodies


def main() -> int:
    if "--unpatched" not in sys.argv:
        import punctual_moto

        punctual_moto.patch()
    ok = send_during_delete_keeps_the_message()
    print("ok: the message sent during a delete is on the queue" if ok else
          "FAILED: SendMessage answered success and the message is on no queue")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
