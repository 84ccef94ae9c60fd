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

2. No message lost to a concurrent delete. `Queue.delete_message` rebuilds the message list and
then assigns it, without the lock `add_message` appends under: a message sent between the rebuild
and the assignment is dropped after SendMessage answered success. One release `punctual run` of
10,000 lost 180 reminders this way (released, accepted by SendMessageBatch, on no queue); a
forced interleaving in tools/moto/test_punctual_moto.py loses the message on moto's own code. The
fix holds the queue's lock over the delete, as sends do.

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
    sqs_models.Queue.delete_message = _locked(sqs_models.Queue.delete_message)  # type: ignore[method-assign]


def _locked(delete: Any) -> Any:
    """`delete` under the queue's message lock (a Condition over an RLock, as `add_message` takes)."""

    def delete_message(self: Any, receipt_handle: str) -> None:
        with self._messages_lock:
            delete(self, receipt_handle)

    return delete_message


def main() -> None:
    patch()
    from moto.server import main as moto_main

    moto_main()
