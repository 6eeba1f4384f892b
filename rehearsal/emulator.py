"""moto's server, with the fixes a multi-stack CDK app needs to deploy through CloudFormation change sets.

    .venv/bin/python -m rehearsal.emulator --port 5000     # binds 127.0.0.1 only; `server.py` starts it

moto 5.2.5 emulates CloudFormation's CreateStack well, but `cdk deploy` uses change sets, and there moto falls
short in ways that stop our stacks before anything can be checked. Each fix below corrects moto to what
CloudFormation does; nothing in the stacks or the templates is changed. `FIXES` describes them for the report.
The fixes reach into moto's internals, so they are tied to the pinned moto version (checked in `apply`), and
tests/rehearsal/test_emulator.py shows each one is still needed.
"""

from __future__ import annotations

import argparse
import copy
import json
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MOTO_VERSION = "5.2.5"

FIXES = {
    "kms-key-from-template": (
        "AWS::KMS::Key: moto hands CloudFormation's Tags ({Key, Value}) to its KMS tagger, which expects "
        "{TagKey, TagValue}, so a tagged key fails its whole stack (KeyError 'TagKey'); and it stores KeyPolicy as "
        "an object, so DescribeKey answers HTTP 500. Fixed: tags translated, the policy kept as JSON text."
    ),
    "change-set-outputs": (
        "Change sets: a stack created or updated by ExecuteChangeSet gets no outputs and registers no exports "
        "(moto builds them only in CreateStack/UpdateStack), so every cross-stack reference fails. Fixed: after a "
        "change set runs, its stack's outputs are rebuilt from the new template and its exports replace the old."
    ),
    "imports-in-change-sets": (
        "Imports: a stack created by CreateChangeSet resolves Fn::ImportValue against an empty table ('No export "
        "named ... found'). Fixed: every stack resolves imports against the region's exports."
    ),
    "state-machine-names": (
        "AWS::StepFunctions::StateMachine without a StateMachineName: moto names it <stack>-<logical id>-<suffix>, "
        "which Step Functions then refuses above 80 characters (the Provider framework's waiter state machine of "
        "llm-platform-staging-serving is 86). CloudFormation keeps a name it generates within the service's limit. "
        "Fixed: the stack and logical id part is cut to fit 80, as moto already does for target groups."
    ),
    "failed-change-sets": (
        "ExecuteChangeSet: when a resource fails to create, moto answers the API call itself with that service's "
        "error (Step Functions' JSON, where CloudFormation speaks XML: the CLI reports only 'XML parse error', "
        "botocore a ResponseParserError), and the stack stays half-made. Fixed: the stack ends ROLLBACK_COMPLETE "
        "(UPDATE_ROLLBACK_COMPLETE) with a *_FAILED event naming the error, as CloudFormation reports it."
    ),
    "null-through-split-and-select": (
        "Custom resources return no data here (their Lambdas never run), so an attribute read from one is null; "
        "moto's Fn::Split of a null fails the whole stack (AttributeError: 'NoneType' object has no attribute "
        "'split'), where its Fn::Join writes 'None' and goes on. Fixed: Fn::Split and Fn::Select of a null give a "
        "null, so the stack deploys and the value shows up among the values only a handler produces."
    ),
    "endpoint-instance-types": (
        "CreateEndpointConfig (and AWS::SageMaker::EndpointConfig): moto accepts only its own list of 66 instance "
        "types for a production variant, older than SageMaker's: no ml.g5, g6, g6e, p4d or p5, so a stage served on "
        "one cannot deploy. SageMaker's API accepts every value of ProductionVariantInstanceType in its service model. "
        "Fixed: exactly that enum, read from the pinned botocore's service model; a type outside it is still refused, "
        "with moto's error. (moto creates no inference components or scalable targets, so nothing else on the serving "
        "path checks an instance type.)"
    ),
    "secrets-from-templates": (
        "AWS::SecretsManager::Secret: moto's CloudFormation has no such type and skips it, so its Ref is null and a "
        "policy that names the secret (the staging role may read the Hugging Face token) fails its whole stack "
        "(MalformedPolicyDocument: 'Policy statement must contain resources'). Fixed: the secret is created through "
        "moto's Secrets Manager (Name, Description, KmsKeyId, Tags; empty when the template gives no SecretString), "
        "Ref is its ARN as in CloudFormation, and it is deleted with its stack unless retained."
    ),
    "variants-without-a-model": (
        "CreateEndpointConfig: an endpoint that hosts inference components has production variants without a "
        "ModelName (SageMaker's ProductionVariant has it optional; the models come with the components). moto reads "
        "ModelName of every variant, so such a config fails its stack (KeyError 'ModelName'). Fixed: a variant "
        "without one is not looked up; one that names a model must still name an existing one."
    ),
    "keys-deleted-with-their-stack": (
        "AWS::KMS::Key without DeletionPolicy Retain: when its stack is deleted, moto removes the key at once (it is "
        "gone from DescribeKey), where CloudFormation schedules its deletion: the key stays, PendingDeletion, for the "
        "template's PendingWindowInDays (30 when unset). Fixed: the key is scheduled for deletion with that window."
    ),
}
STATE_MACHINE_NAME_LIMIT = 80  # Step Functions' CreateStateMachine: name, 1-80 characters
KEY_PENDING_WINDOW_DAYS = 30  # AWS::KMS::Key PendingWindowInDays when the template sets none


def endpoint_instance_types() -> tuple[str, ...]:
    """Every instance type SageMaker's API takes for an endpoint's production variant: the enum
    ProductionVariantInstanceType of the pinned botocore's service model (sagemaker 2017-07-24)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return tuple(model.shape_for("ProductionVariantInstanceType").enum)


def apply() -> Callable[[], None]:
    """Patch moto in this process; returns a function that undoes every patch."""
    import moto

    if moto.__version__ != MOTO_VERSION:
        raise RuntimeError(
            f"rehearsal/emulator.py patches moto {MOTO_VERSION} internals, but moto {moto.__version__} is installed: "
            "run tests/rehearsal/test_emulator.py, drop the fixes moto no longer needs, adapt the rest, then update "
            "MOTO_VERSION and the pin in requirements/dev.in"
        )
    originals = _patched_attributes()

    def undo() -> None:
        for owner, name, original in originals:
            setattr(owner, name, original)

    try:
        for fix in _FIXED_BY.values():
            fix()
    except BaseException:  # all or nothing: a fix that fails leaves moto as it was
        undo()
        raise
    return undo


def _patched_attributes() -> list[tuple[Any, str, Any]]:
    """Every attribute of moto's that a fix replaces, with its value now: what `undo` puts back."""
    from moto.cloudformation import models as cloudformation
    from moto.cloudformation import parsing
    from moto.kms.models import Key
    from moto.sagemaker import models as sagemaker

    return [
        (Key, "create_from_cloudformation_json", Key.__dict__["create_from_cloudformation_json"]),
        (cloudformation.ChangeSet, "apply", cloudformation.ChangeSet.apply),
        (cloudformation.Stack, "_create_resource_map", cloudformation.Stack._create_resource_map),
        (parsing, "generate_resource_name", parsing.generate_resource_name),
        (parsing, "clean_json", parsing.clean_json),
        (
            cloudformation.CloudFormationBackend,
            "execute_change_set",
            cloudformation.CloudFormationBackend.execute_change_set,
        ),
        (sagemaker.FakeEndpointConfig, "validate_instance_type", sagemaker.FakeEndpointConfig.validate_instance_type),
        (Key, "delete", Key.delete),
        (parsing, "resource_class_from_type", parsing.resource_class_from_type),
        (
            sagemaker.SageMakerModelBackend,
            "validate_production_variants",
            sagemaker.SageMakerModelBackend.validate_production_variants,
        ),
    ]


def _fix_kms_key_from_template() -> None:
    from moto.kms.models import Key

    create_key = Key.create_from_cloudformation_json.__func__

    def key_from_template(cls, resource_name: str, cloudformation_json: dict[str, Any], *args: Any, **kwargs: Any):
        fixed = copy.deepcopy(cloudformation_json)
        properties = fixed.setdefault("Properties", {})
        if isinstance(properties.get("KeyPolicy"), dict):
            properties["KeyPolicy"] = json.dumps(properties["KeyPolicy"])
        properties["Tags"] = [{"TagKey": t["Key"], "TagValue": t["Value"]} for t in properties.get("Tags", [])]
        key = create_key(cls, resource_name, fixed, *args, **kwargs)
        key.pending_window_in_days = int(properties.get("PendingWindowInDays", KEY_PENDING_WINDOW_DAYS))
        return key

    Key.create_from_cloudformation_json = classmethod(key_from_template)


def _fix_change_set_outputs() -> None:
    from moto.cloudformation import models as cloudformation

    apply_change_set = cloudformation.ChangeSet.apply

    def apply_with_outputs(change_set: Any) -> None:
        apply_change_set(change_set)
        stack = change_set.stack
        backend = cloudformation.cloudformation_backends[stack.account_id][stack.region_name]
        for name in [n for n, e in backend.exports.items() if e.exporting_stack_id == stack.stack_id]:
            del backend.exports[name]
        stack.template = change_set.template
        stack._parse_template()
        stack.output_map = stack._create_output_map()
        backend._validate_export_uniqueness(stack)
        for export in stack.exports:
            backend.exports[export.name] = export

    cloudformation.ChangeSet.apply = apply_with_outputs


def _fix_imports_in_change_sets() -> None:
    from moto.cloudformation import models as cloudformation

    create_resource_map = cloudformation.Stack._create_resource_map

    def resource_map_seeing_exports(stack: Any) -> Any:
        # The region's live export table, not a copy: stacks deployed later see exports added since.
        stack.cross_stack_resources = cloudformation.cloudformation_backends[stack.account_id][
            stack.region_name
        ].exports
        return create_resource_map(stack)

    cloudformation.Stack._create_resource_map = resource_map_seeing_exports


def _fix_state_machine_names() -> None:
    from moto.cloudformation import parsing

    generate_resource_name = parsing.generate_resource_name

    def resource_name_within_limits(resource_type: str, stack_name: str, logical_id: str) -> str:
        name = generate_resource_name(resource_type, stack_name, logical_id)
        if resource_type != "AWS::StepFunctions::StateMachine" or len(name) <= STATE_MACHINE_NAME_LIMIT:
            return name
        prefix, suffix = name.rsplit("-", 1)
        return f"{prefix[: STATE_MACHINE_NAME_LIMIT - len(suffix) - 1].rstrip('-')}-{suffix}"

    parsing.generate_resource_name = resource_name_within_limits


def _fix_failed_change_sets() -> None:
    from moto.cloudformation import models as cloudformation

    execute_change_set = cloudformation.CloudFormationBackend.execute_change_set

    def execute_change_set_or_roll_back(backend: Any, change_set_name: str, stack_name: str | None = None) -> None:
        try:
            execute_change_set(backend, change_set_name, stack_name)
        except Exception as error:  # a resource failed: the stack fails, the API call does not
            # As moto's execute_change_set finds it: by ARN, else the last one of that name (every stack's is
            # cdk-deploy-change-set, and the one just created is the last).
            named = [c for c in backend.change_sets.values() if c.change_set_name == change_set_name]
            change_set = backend.change_sets.get(change_set_name) or (named[-1] if named else None)
            if change_set is None:
                raise
            traceback.print_exc()  # into the server's log, which the rehearsal keeps when a check failed
            stack = backend.stacks[change_set.stack_id]
            operation = change_set.change_set_type  # CREATE or UPDATE
            message = getattr(error, "message", None) or str(error)
            stack._add_stack_event(f"{operation}_FAILED", resource_status_reason=f"{type(error).__name__}: {message}")
            stack.status = "ROLLBACK_COMPLETE" if operation == "CREATE" else "UPDATE_ROLLBACK_COMPLETE"
            stack._add_stack_event(stack.status)
            change_set.execution_status = "EXECUTE_FAILED"

    cloudformation.CloudFormationBackend.execute_change_set = execute_change_set_or_roll_back


def _fix_null_through_split_and_select() -> None:
    from moto.cloudformation import parsing

    clean_json = parsing.clean_json

    def clean_json_passing_null(resource_json: Any, resources_map: Any) -> Any:
        # moto's clean_json calls itself through the module's name, so nested functions come back here.
        if isinstance(resource_json, dict):
            for function in ("Fn::Split", "Fn::Select"):
                arguments = resource_json.get(function)
                two = isinstance(arguments, list) and len(arguments) == 2 and arguments[1] is not None
                if two and clean_json_passing_null(arguments[1], resources_map) is None:
                    return None
        return clean_json(resource_json, resources_map)

    parsing.clean_json = clean_json_passing_null


def _fix_endpoint_instance_types() -> None:
    from moto.sagemaker import models as sagemaker

    endpoint_types = endpoint_instance_types()

    def validate_instance_type_as_sagemaker(_config: Any, instance_type: str) -> None:
        if instance_type not in endpoint_types:
            raise sagemaker.ValidationError(
                message=f"Value '{instance_type}' at 'instanceType' failed to satisfy constraint: Member must "
                f"satisfy enum value set: {list(endpoint_types)}"
            )

    sagemaker.FakeEndpointConfig.validate_instance_type = validate_instance_type_as_sagemaker


def _fix_secrets_from_templates() -> None:
    from moto.cloudformation import parsing

    resource_class_from_type = parsing.resource_class_from_type

    def resource_class_with_secrets(resource_type: str) -> Any:
        return (
            SecretFromTemplate if resource_type == SecretFromTemplate.TYPE else resource_class_from_type(resource_type)
        )

    parsing.resource_class_from_type = resource_class_with_secrets


def _fix_variants_without_a_model() -> None:
    from moto.sagemaker import models as sagemaker

    validate_production_variants = sagemaker.SageMakerModelBackend.validate_production_variants

    def validate_variants_naming_a_model(backend: Any, production_variants: list[dict[str, Any]]) -> None:
        validate_production_variants(backend, [v for v in production_variants if "ModelName" in v])

    sagemaker.SageMakerModelBackend.validate_production_variants = validate_variants_naming_a_model


def _fix_keys_deleted_with_their_stack() -> None:
    from moto.kms.models import Key, kms_backends

    def schedule_key_deletion(key: Any, account_id: str, region_name: str) -> None:
        # Called only by a stack's deletion (moto's CloudFormation); the window was kept when the stack created it.
        window = getattr(key, "pending_window_in_days", KEY_PENDING_WINDOW_DAYS)
        kms_backends[account_id][region_name].schedule_key_deletion(key.id, window)

    Key.delete = schedule_key_deletion


# Each fix of FIXES, by its name there.
_FIXED_BY: dict[str, Callable[[], None]] = {
    "kms-key-from-template": _fix_kms_key_from_template,
    "change-set-outputs": _fix_change_set_outputs,
    "imports-in-change-sets": _fix_imports_in_change_sets,
    "state-machine-names": _fix_state_machine_names,
    "failed-change-sets": _fix_failed_change_sets,
    "null-through-split-and-select": _fix_null_through_split_and_select,
    "endpoint-instance-types": _fix_endpoint_instance_types,
    "secrets-from-templates": _fix_secrets_from_templates,
    "variants-without-a-model": _fix_variants_without_a_model,
    "keys-deleted-with-their-stack": _fix_keys_deleted_with_their_stack,
}


class SecretFromTemplate:
    """AWS::SecretsManager::Secret for moto's CloudFormation (fix secrets-from-templates), through its Secrets Manager.
    Not a CloudFormationModel subclass: that would register it in moto for good, the fix undone or not."""

    TYPE = "AWS::SecretsManager::Secret"

    def __init__(self, arn: str, account_id: str, region_name: str) -> None:
        self.arn, self.account_id, self.region_name = arn, account_id, region_name

    @property
    def physical_resource_id(self) -> str:
        return self.arn  # Ref of a secret: its ARN

    @classmethod
    def has_cfn_attr(cls, attribute: str) -> bool:
        return attribute == "Id"

    def get_cfn_attribute(self, attribute: str) -> str:
        return self.arn

    def is_created(self) -> bool:
        return True

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: dict[str, Any], account_id: str, region_name: str, **_: Any
    ) -> SecretFromTemplate:
        from moto.secretsmanager.models import secretsmanager_backends

        properties = cloudformation_json.get("Properties", {})
        created = secretsmanager_backends[account_id][region_name].create_secret(
            name=properties.get("Name", resource_name),
            secret_string=properties.get("SecretString"),
            secret_binary=None,
            description=properties.get("Description"),
            tags=properties.get("Tags"),
            kms_key_id=properties.get("KmsKeyId"),
            client_request_token=None,
            replica_regions=[],
            force_overwrite=False,
        )
        return cls(json.loads(created)["ARN"], account_id, region_name)

    def delete(self, account_id: str, region_name: str) -> None:
        from moto.secretsmanager.models import secretsmanager_backends

        secretsmanager_backends[account_id][region_name].delete_secret(
            self.arn, recovery_window_in_days=None, force_delete_without_recovery=False
        )


@contextmanager
def patched() -> Iterator[None]:
    """moto with the fixes, for the duration of a `with` block (tests use moto in-process)."""
    undo = apply()
    try:
        yield
    finally:
        undo()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="moto's server on 127.0.0.1, with the rehearsal's fixes")
    parser.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1")
    args = parser.parse_args(argv)
    apply()
    from moto.server import main as moto_server

    moto_server(["--host", "127.0.0.1", "--port", str(args.port)])


if __name__ == "__main__":
    main()
