"""A stack update can move an alias, as on AWS. LocalStack 2026.3.0's `AWS::Lambda::Alias`
resource provider has no `update` (NotImplementedError), and its engine marks `FunctionName`
(create-only) changed whenever the function it names is modified, even though its name is not:
so every deploy that publishes a version plans the alias `live` as a *replacement*, a create of
the same name (which fails, "Alias already exists") and then a delete of the old one. The stack
still reports UPDATE_COMPLETE, with the alias on its old version or deleted in the rollback
(measured with a two-parameter template). AWS updates an alias in place (`UpdateAlias`;
`FunctionVersion`, `Description`, `RoutingConfig` need no replacement).

The template's gradual deploys (docs/deployment.md#gradual-deploys) publish a version on every
deploy and move `live` to it; `make e2e` step i updates the stack and needs the alias to follow.
So, installed at LocalStack's start (a `localstack.hooks.on_infra_start` hook, entry point
`punctual_alias_update` in tools/localstack/pyproject.toml), before any stack exists:

- `create` of an alias whose name exists on the function moves it (`UpdateAlias` with the
  desired version, description and routing) instead of failing, and remembers its ARN;
- the `delete` that follows such a "replacement" (the same alias ARN) is skipped, once: on AWS
  there was nothing to delete;
- `update` (if the engine ever calls it) is `UpdateAlias`.

Anything else is the provider's own. Provisioned concurrency is not handled on the moved path
(the template sets none).
"""

from __future__ import annotations

import threading

import localstack.services.cloudformation.provider_utils as util
from localstack.runtime import hooks
from localstack.services.cloudformation.resource_provider import OperationStatus, ProgressEvent

_MOVED: set[str] = set()
_LOCK = threading.Lock()
_FIELDS = ["FunctionName", "FunctionVersion", "Name", "Description", "RoutingConfig"]


def _move(lambda_, model) -> str:
    params = util.select_attributes(model, _FIELDS)
    params.setdefault("RoutingConfig", {})  # a weight no longer in the template is removed, as on AWS
    return lambda_.update_alias(**params)["AliasArn"]


def _patch(provider_cls) -> None:
    create, delete = provider_cls.create, provider_cls.delete

    def create_or_move(self, request):
        model = request.desired_state
        lambda_ = request.aws_client_factory.lambda_
        if not request.custom_context.get("repeated_invocation"):
            try:
                lambda_.get_alias(FunctionName=model["FunctionName"], Name=model["Name"])
            except lambda_.exceptions.ResourceNotFoundException:
                return create(self, request)
            model["Id"] = _move(lambda_, model)
            with _LOCK:
                _MOVED.add(model["Id"])
            return ProgressEvent(status=OperationStatus.SUCCESS, resource_model=model)
        return create(self, request)

    def delete_unless_moved(self, request):
        arn = (request.desired_state or {}).get("Id") or (request.previous_state or {}).get("Id")
        with _LOCK:
            if arn in _MOVED:
                _MOVED.discard(arn)
                return ProgressEvent(status=OperationStatus.SUCCESS, resource_model=request.previous_state)
        return delete(self, request)

    def update(self, request):
        model = request.desired_state
        model["Id"] = _move(request.aws_client_factory.lambda_, model)
        return ProgressEvent(status=OperationStatus.SUCCESS, resource_model=model)

    provider_cls.create, provider_cls.delete, provider_cls.update = create_or_move, delete_unless_moved, update


@hooks.on_infra_start()
def install_alias_update() -> None:
    from localstack.services.lambda_.resource_providers.lambda_alias import LambdaAliasProvider

    _patch(LambdaAliasProvider)
