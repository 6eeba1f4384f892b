"""Every AWS call the runner makes itself, in one place, one method per call, so that tests substitute moto (or a
fake for what moto lacks). Deploying, staging, fine-tuning and approving go through the CDK CLI and `llmp`
(integ/commands.py), never through here.

Clients are made the way `llmp` makes them (cli/aws.py: one loader of API models, standard retries), with the
credentials boto3 finds.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from cli.aws import CLIENT_CONFIG, session_for


def _code(error: ClientError) -> str:
    return error.response.get("Error", {}).get("Code", "")


class IntegAws:
    def __init__(self, region: str) -> None:
        self.region = region
        self._session: Any = None
        self._clients: dict[str, Any] = {}

    @property
    def session(self) -> Any:
        if self._session is None:
            self._session = session_for(self.region)
        return self._session

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(service, config=CLIENT_CONFIG)
        return self._clients[service]

    # --- identity and stacks ---------------------------------------------------------------------------------

    def caller_account(self) -> str:
        return self.client("sts").get_caller_identity()["Account"]

    def stack_status(self, name: str) -> str | None:
        """The stack's status, or None when no stack of that name exists (deleted ones are found only by id)."""
        try:
            return self.client("cloudformation").describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
        except ClientError as error:
            if _code(error) == "ValidationError":
                return None
            raise

    def stack_resources(self, name: str) -> list[dict[str, str]]:
        """(type, logical id, physical id) of each resource of the stack; [] when it does not exist."""
        if self.stack_status(name) is None:
            return []
        pages = self.client("cloudformation").get_paginator("list_stack_resources").paginate(StackName=name)
        return [
            {
                "type": r["ResourceType"],
                "logical_id": r["LogicalResourceId"],
                "physical_id": r.get("PhysicalResourceId", ""),
            }
            for page in pages
            for r in page["StackResourceSummaries"]
        ]

    # --- the registry and the pipelines ---------------------------------------------------------------------------

    def newest_package(self, group: str) -> dict[str, Any] | None:
        packages = self.client("sagemaker").list_model_packages(
            ModelPackageGroupName=group, SortBy="CreationTime", SortOrder="Descending", MaxResults=1
        )["ModelPackageSummaryList"]
        return packages[0] if packages else None

    def describe_package(self, arn: str) -> dict[str, Any]:
        return self.client("sagemaker").describe_model_package(ModelPackageName=arn)

    def package_arns(self, group: str) -> list[str]:
        try:
            pages = self.client("sagemaker").get_paginator("list_model_packages").paginate(ModelPackageGroupName=group)
            return [p["ModelPackageArn"] for page in pages for p in page["ModelPackageSummaryList"]]
        except ClientError as error:
            if _code(error) in ("ValidationException", "ResourceNotFound"):
                return []
            raise

    def delete_package(self, arn: str) -> None:
        self.client("sagemaker").delete_model_package(ModelPackageName=arn)

    def running_executions(self, pipeline: str) -> list[str]:
        try:
            pages = self.client("sagemaker").get_paginator("list_pipeline_executions").paginate(PipelineName=pipeline)
            return [
                run["PipelineExecutionArn"]
                for page in pages
                for run in page["PipelineExecutionSummaries"]
                if run.get("PipelineExecutionStatus") in ("Executing", "Stopping")
            ]
        except ClientError as error:
            if _code(error) in ("ValidationException", "ResourceNotFound"):
                return []
            raise

    def stop_execution(self, arn: str) -> None:
        self.client("sagemaker").stop_pipeline_execution(PipelineExecutionArn=arn)

    def read_s3_json(self, uri: str) -> Any:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        return json.loads(self.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())

    # --- the endpoint -------------------------------------------------------------------------------------------

    def endpoint(self, name: str) -> dict[str, Any] | None:
        try:
            return self.client("sagemaker").describe_endpoint(EndpointName=name)
        except ClientError as error:
            if "Could not find" in error.response.get("Error", {}).get("Message", ""):
                return None
            raise

    def set_copy_count(self, component: str, copies: int) -> None:
        self.client("sagemaker").update_inference_component_runtime_config(
            InferenceComponentName=component, DesiredRuntimeConfig={"CopyCount": copies}
        )

    def alarms(self, names: list[str]) -> list[dict[str, Any]]:
        found = []
        for start in range(0, len(names), 100):  # DescribeAlarms takes at most 100 names
            found += self.client("cloudwatch").describe_alarms(AlarmNames=names[start : start + 100])["MetricAlarms"]
        return found

    def scaling_policies(self, names: list[str]) -> list[dict[str, Any]]:
        pages = (
            self.client("application-autoscaling")
            .get_paginator("describe_scaling_policies")
            .paginate(ServiceNamespace="sagemaker", PolicyNames=names)
        )
        return [p for page in pages for p in page["ScalingPolicies"]]

    # --- what may remain after a destroy -----------------------------------------------------------------------

    def bucket_exists(self, name: str) -> bool:
        try:
            self.client("s3").head_bucket(Bucket=name)
            return True
        except ClientError as error:
            if _code(error) in ("404", "NoSuchBucket", "NotFound"):
                return False
            raise

    def key_state(self, key_id: str) -> str | None:
        """Enabled, PendingDeletion, ...; None when the key does not exist."""
        try:
            return self.client("kms").describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"]
        except ClientError as error:
            if _code(error) == "NotFoundException":
                return None
            raise

    def log_group_exists(self, name: str) -> bool:
        groups = self.client("logs").describe_log_groups(logGroupNamePrefix=name)["logGroups"]
        return any(g["logGroupName"] == name for g in groups)
