"""moto server for punctual's tests and `punctual run`, with two fixes to moto 5.2.5's SQS.

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

Everything else is moto, unchanged: `punctual-moto` takes moto_server's arguments.
"""

from __future__ import annotations

import json
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
    sqs_models.Queue.messages = property(VisibleMessages)  # type: ignore[assignment]


def _delete_message(self: Any, receipt_handle: str) -> None:
    """moto's `Queue.delete_message`, under the queue's lock and in time proportional to the
    message's position rather than the queue's depth (and one copy of the list, at C speed).

    moto's own walks the whole list twice per handle (a DeleteMessageBatch of ten on a queue of
    5,000: 100,000 receipt-handle lists built) and replaces the list outside the lock. Here: the
    lock `add_message` appends under (a Condition over an RLock), one walk that stops at the
    message (a receipt handle names one message; received messages sit near the front), and a
    copy-on-write removal, so readers that walk `_messages` without the lock (moto's
    ChangeMessageVisibility, receive) still see a whole list. Same answers as moto's: an
    already-deleted handle is accepted, an unknown one is ReceiptHandleIsInvalid."""
    with self._messages_lock:
        if receipt_handle in self.deleted_messages:
            return
        # A copy to walk and cut: receive's move of a message to the dead-letter queue removes
        # it from the live list in place, without the lock; walking or slicing the live list
        # could then skip the message (a valid handle answered invalid) or cut its neighbour
        # (a message lost). A move between the copy and the assignment is put back, a duplicate
        # like moto's own code makes, never a loss.
        messages = list(self._messages)
        for i, message in enumerate(messages):
            if message.receipt_handle == receipt_handle or receipt_handle in message._old_receipt_handles:
                self._messages = messages[:i] + messages[i + 1 :]
                self.pending_messages.discard(message)
                self.deleted_messages.update(message.all_receipt_handles)
                return
    raise sqs_models.ReceiptHandleIsInvalid()


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


def main() -> None:
    patch()
    from moto.server import main as moto_main

    moto_main()
