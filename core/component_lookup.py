"""Naming an adapter in a request, for the platform's clients (the CLI's `llmp invoke --component`, scripts).

A request names an adapter by its adapter component, InvokeEndpoint's InferenceComponentName
(<project>-<stage>-<adapter>). SageMaker answers a name that is no component of the endpoint with a ValidationError
(HTTP 400) that does not list the endpoint's components, so the client does: on that error it lists the endpoint's
inference components (ListInferenceComponents, DescribeInferenceComponent: an adapter's specification names its base)
and, when the name is not among them, raises UnknownComponent naming the adapters and base models there are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EndpointComponents:
    """An endpoint's inference components: base models, and adapters with the base each runs over."""

    bases: tuple[str, ...]
    adapters: dict[str, str]  # adapter component -> its base component

    def __contains__(self, name: str) -> bool:
        return name in self.bases or name in self.adapters


class UnknownComponent(Exception):
    """A 4xx for people: the request named no adapter or model of the endpoint; says which there are."""

    status = 400

    def __init__(self, endpoint: str, requested: str, known: EndpointComponents) -> None:
        adapters = ", ".join(f"{a} (over {b})" for a, b in sorted(known.adapters.items())) or "none"
        bases = ", ".join(sorted(known.bases)) or "none"
        super().__init__(
            f"endpoint {endpoint} has no adapter or model {requested!r} (HTTP {self.status}); its adapters: "
            f"{adapters}; its base models: {bases}. Name one of them as the inference component"
        )
        self.endpoint, self.requested, self.known = endpoint, requested, known


def endpoint_components(sagemaker: Any, endpoint_name: str) -> EndpointComponents:
    """Every inference component of the endpoint, told apart by whether its specification names a base."""
    bases, adapters = [], {}
    for page in sagemaker.get_paginator("list_inference_components").paginate(EndpointNameEquals=endpoint_name):
        for summary in page["InferenceComponents"]:
            name = summary["InferenceComponentName"]
            spec = sagemaker.describe_inference_component(InferenceComponentName=name).get("Specification", {})
            if spec.get("BaseInferenceComponentName"):
                adapters[name] = spec["BaseInferenceComponentName"]
            else:
                bases.append(name)
    return EndpointComponents(tuple(bases), adapters)


def unknown_component(error: Exception, sagemaker: Any, endpoint_name: str, component: str) -> UnknownComponent | None:
    """For a client that caught `error` from InvokeEndpoint(WithResponseStream) with InferenceComponentName
    `component`: an UnknownComponent when SageMaker refused the request and the endpoint has no such component;
    None when the error is something else (re-raise it)."""
    response = getattr(error, "response", None) or {}
    if response.get("Error", {}).get("Code") != "ValidationError":
        return None
    known = endpoint_components(sagemaker, endpoint_name)
    return None if component in known else UnknownComponent(endpoint_name, component, known)


def invoke(runtime: Any, sagemaker: Any, *, endpoint_name: str, component: str, body: bytes, **options: Any) -> Any:
    """InvokeEndpoint on one component (an adapter or a base model); UnknownComponent when the endpoint has none
    of that name."""
    try:
        return runtime.invoke_endpoint(
            EndpointName=endpoint_name, InferenceComponentName=component, Body=body, **options
        )
    except Exception as error:
        unknown = unknown_component(error, sagemaker, endpoint_name, component)
        if unknown is None:
            raise
        raise unknown from error
