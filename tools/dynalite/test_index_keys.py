#!/usr/bin/env python3
"""Does a query of a secondary index return every item that has its key? It must.

dynalite 4.0.0 keys an item's index entry by the index key and 24 bits of a hash of the item's
table key, so two items with the same index key whose table keys share those 24 bits share one
entry: the index returns only the one written last (tools/dynalite/patch-index-keys.js says
how punctual found it: a renewal never released in a 10,000-renewal run). The test starts the
dynalite `make tools` installed (tools/dynalite/serve.js), finds two renewal keys whose 24 bits
agree, writes both with the same due index key and queries the index: both must come back.

Run: .venv/bin/python tools/dynalite/test_index_keys.py [NODE_MODULES]  (exit 1 = an item is
missing from the index). `make lint-template` runs it against .tools/dynalite; point it at an
unpatched copy of dynalite's node_modules to see it fail.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import boto3

ROOT = Path(__file__).resolve().parents[2]


def colliding_keys() -> tuple[str, str]:
    """Two renewal keys whose dynalite hash prefix (6 hex digits of MD5("Outliers" + key)) agrees."""
    seen: dict[str, str] = {}
    i = 0
    while True:
        key = f"renewal:tenant-0:run-{i:06}"
        prefix = hashlib.md5(b"Outliers" + key.encode()).hexdigest()[:6]
        if prefix in seen:
            return seen[prefix], key
        seen[prefix] = key
        i += 1


def main() -> int:
    modules = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / ".tools" / "dynalite" / "node_modules")
    env = dict(os.environ, DYNALITE_MODULES=modules)
    server = subprocess.Popen(
        ["node", str(ROOT / "tools" / "dynalite" / "serve.js"), "0"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        line = server.stdout.readline().split()
        if len(line) != 2 or line[0] != "listening":
            print(f"test_index_keys: dynalite did not start ({line})", file=sys.stderr)
            return 1
        db = boto3.client(
            "dynamodb",
            endpoint_url=f"http://127.0.0.1:{line[1]}",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        db.create_table(
            TableName="renewals",
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "due_shard", "AttributeType": "S"},
                {"AttributeName": "due_at", "AttributeType": "N"},
            ],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "by_due",
                    "KeySchema": [
                        {"AttributeName": "due_shard", "KeyType": "HASH"},
                        {"AttributeName": "due_at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        def query(**page):
            return db.query(
                TableName="renewals",
                IndexName="by_due",
                KeyConditionExpression="due_shard = :s",
                ExpressionAttributeValues={":s": {"S": "2026-12-04#7"}},
                **page,
            )

        a, b = colliding_keys()
        for key in (a, b):
            db.put_item(
                TableName="renewals",
                Item={"pk": {"S": key}, "due_shard": {"S": "2026-12-04#7"}, "due_at": {"N": "1796356560000"}},
            )
        got = query()["Items"]
        keys = sorted(i["pk"]["S"] for i in got)
        if keys != sorted([a, b]):
            print(f"test_index_keys: the index returned {keys}, not both of {a} and {b} (same index key, same "
                  "24-bit hash prefix): dynalite lost an index entry", file=sys.stderr)
            return 1
        # A page at a time (Limit 1, then from LastEvaluatedKey): each once.
        paged, start = [], None
        for _ in range(4):
            kwargs = {"ExclusiveStartKey": start} if start else {}
            page = query(Limit=1, **kwargs)
            paged += [i["pk"]["S"] for i in page["Items"]]
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        if sorted(paged) != sorted([a, b]):
            print(f"test_index_keys: paging the index returned {paged}", file=sys.stderr)
            return 1
        # Deleting one leaves the other in the index.
        db.delete_item(TableName="renewals", Key={"pk": {"S": a}})
        left = query()["Items"]
        if [i["pk"]["S"] for i in left] != [b]:
            print(f"test_index_keys: after deleting {a} the index holds {left}", file=sys.stderr)
            return 1
        print(f"ok: both items with one index key came back ({a}, {b}), a page at a time too, and the other "
              "stayed after a delete")
        return 0
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
