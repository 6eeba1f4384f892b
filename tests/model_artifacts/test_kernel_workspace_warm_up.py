"""DeepSpeed's fused kernels size their workspace from the first forward pass's batch (deepspeedai/DeepSpeed#3402):
with kernel injection the handler's first forward is a warm-up over option.max_batch_size rows, the largest batch a
worker ever runs."""

from __future__ import annotations

import dataclasses

import lmi_loading
import pytest


def _record_generate(model, calls):
    original = model.generate

    def recorded(*args, **kwargs):
        calls.append(tuple(kwargs["input_ids"].shape))
        return original(*args, **kwargs)

    model.generate = recorded


@pytest.mark.parametrize(("kernel_injection", "expected"), [(True, [(3, 2)]), (False, [])])
def test_with_kernel_injection_the_first_forward_is_the_largest_batch(
    kernel_injection, expected, handler_module, tiny_model_dir, monkeypatch
):
    calls: list[tuple[int, ...]] = []
    real_load_model = lmi_loading.load_model

    def load_model(weights_dir, config, **kwargs):
        model, tokenizer, plan = real_load_model(weights_dir, config, **kwargs)
        _record_generate(model, calls)
        return model, tokenizer, dataclasses.replace(plan, kernel_injection=kernel_injection)

    monkeypatch.setattr(lmi_loading, "load_model", load_model)
    service = handler_module.TextGenerationService()
    service.initialize({"weights_dir": str(tiny_model_dir("gptj")), "dtype": "fp32", "max_batch_size": "3"})

    assert calls == expected
    # The worker then serves as usual.
    service.generator.generate([service.generator.prepare(_request(service, "a cat"))])
    assert calls[-1][0] == 1


def _request(service, prompt):
    from lmi_requests import parse_request

    return parse_request(b'{"inputs": "%s", "parameters": {"max_new_tokens": 2}}' % prompt.encode(), service.limits)
