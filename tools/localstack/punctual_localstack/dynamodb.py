"""A LocalStack DynamoDB provider backed by moto's DynamoDB, for machines without Java.

LocalStack's own DynamoDB provider runs DynamoDB Local, which it downloads (a JDK and the jar)
on first use: offline, or on a workplace that may not use DynamoDB Local's licence, it cannot
start. This provider answers every DynamoDB operation from the moto backend LocalStack already
ships (moto-ext), through LocalStack's own `MotoFallbackDispatcher`, so the gateway, request
parsing, accounts, regions and CloudFormation's `AWS::DynamoDB::Table` resource provider are
LocalStack's; only the engine underneath is moto's.

Selected with `PROVIDER_OVERRIDE_DYNAMODB=moto` (entry point `dynamodb:moto` in the plux group
`localstack.aws.provider`, tools/localstack/pyproject.toml).

What it does:
- tables, GSIs, conditional Put/Update/Delete with `ReturnValuesOnConditionCheckFailure`,
  Query/Scan with paging, batches, transactions, TTL settings — as far as moto implements them;
- **one request at a time**: every operation runs under one lock. moto's DynamoDB is not
  isolation-safe under concurrent requests (measured: 16 threads of read-then-conditional-
  increment lost acknowledged writes), and the functions' ledger claims and the shared limiter
  are conditional writes raced by concurrent sender instances. Serialising makes each request
  atomic, as DynamoDB's are per item, at the price of throughput (a few hundred requests a
  second), plenty for an end-to-end check.

What it does not do:
- no DynamoDB Streams (the `dynamodbstreams` API is not backed by it), no TTL deletion of
  expired items, no PITR restores, no capacity or throttling behaviour, no persistence
  (state lives in memory for the life of the LocalStack process);
- it is moto's reading of DynamoDB's semantics, not AWS's engine: validation messages and
  edge cases of expressions can differ.
"""

import threading

from localstack.aws.api.dynamodb import DynamodbApi
from localstack.services.plugins import Service, ServiceLifecycleHook, aws_provider


class MotoDynamoDBProvider(DynamodbApi, ServiceLifecycleHook):
    """Implements nothing itself: every operation raises NotImplementedError in the generated
    API class, so LocalStack's fallback dispatcher hands it to moto."""


def _serialised_moto_dispatcher(provider):
    from localstack.services.moto import MotoFallbackDispatcher

    table = MotoFallbackDispatcher(provider)
    lock = threading.Lock()

    def serialised(handler):
        def call(context, request):
            with lock:
                return handler(context, request)

        return call

    return {operation: serialised(handler) for operation, handler in table.items()}


@aws_provider(api="dynamodb", name="moto")
def dynamodb_moto():
    return Service.for_provider(MotoDynamoDBProvider(), dispatch_table_factory=_serialised_moto_dispatcher)
