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
    """A list that calls `hook` each time an iteration over it ends (walked to the end or left)."""

    def __init__(self, items, hook):
        super().__init__(items)
        self._hook = hook

    def __iter__(self):
        i = 0
        try:
            while i < len(self):
                yield self[i]
                i += 1
        finally:
            self._hook()


def sends_during_delete_stay_on_the_queue() -> bool:
    """Every pass the delete makes over the queue ends with a send from another thread, which is
    given 0.3 s to finish. moto's delete makes two passes; the send after the second is lost.
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
    """A receipt-handle list whose membership test first runs `move` (once): the point where a
    receive on another thread moves a message to the dead-letter queue, in place, unlocked."""

    def __init__(self, items, move):
        super().__init__(items)
        self._move = move

    def __contains__(self, x):
        move, self._move = self._move, None
        if move is not None:
            move()
        return list.__contains__(self, x)


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
    backend.delete_message(queue.name, handles["m2"])
    left = sorted(m.body for m in queue._messages)
    print(f"after a DLQ move during the delete of m2: {left} (m0 moved; m0 back is a duplicate, not a loss)")
    return "m1" in left and "m3" in left and "m2" not in left


def main() -> int:
    if "--unpatched" not in sys.argv:
        import punctual_moto

        punctual_moto.patch()
    ok = True
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
        print("ok: sends during a delete stay on the queue; deletes and receives answer as moto's")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
