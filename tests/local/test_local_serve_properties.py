"""How local.serve reads serving.properties and builds the properties DJL would hand the handler."""

from __future__ import annotations

import pytest

from local.serve import _parse_args, handler_properties, read_properties_file, resolve_properties


def test_properties_file_lines_comments_and_separators(tmp_path):
    path = tmp_path / "serving.properties"
    path.write_text(
        "# a comment\n! another\n\nengine=DeepSpeed\noption.entryPoint = model.py\noption.dtype: bf16\n"
        "option.stop=a=b\n"
    )
    assert read_properties_file(path) == {
        "engine": "DeepSpeed",
        "option.entryPoint": "model.py",
        "option.dtype": "bf16",
        "option.stop": "a=b",
    }
    path.write_text("engine\n")
    with pytest.raises(ValueError, match=r"serving.properties:1: 'engine' is not a property; expected key=value"):
        read_properties_file(path)


def test_environment_then_file_then_explicit_overrides(tmp_path):
    (tmp_path / "serving.properties").write_text("option.dtype=fp16\noption.max_new_tokens=128\n")
    environ = {"OPTION_DTYPE": "bf16", "OPTION_MAX_BATCH_SIZE": "2", "UNRELATED": "x"}
    properties = resolve_properties(tmp_path, {"option.max_new_tokens": "64"}, environ)
    assert properties == {"option.dtype": "fp16", "option.max_batch_size": "2", "option.max_new_tokens": "64"}


def test_handler_sees_options_without_prefix_and_djls_own_keys(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSOR_PARALLEL_DEGREE", raising=False)
    properties = {"engine": "DeepSpeed", "option.dtype": "fp16", "option.tensor_parallel_degree": "2"}
    assert handler_properties(properties, tmp_path, cuda_devices=0) == {
        "dtype": "fp16",
        "tensor_parallel_degree": 2,
        "model_dir": str(tmp_path),
        "device_id": "-1",
    }
    assert "tensor_parallel_degree" not in handler_properties({}, tmp_path, cuda_devices=0)


def test_tensor_parallel_max_and_the_environment_fallback(tmp_path, monkeypatch):
    assert (
        handler_properties({"option.tensor_parallel_degree": "max"}, tmp_path, cuda_devices=8)["tensor_parallel_degree"]
        == 8
    )
    monkeypatch.setenv("TENSOR_PARALLEL_DEGREE", "4")
    assert handler_properties({}, tmp_path, cuda_devices=4)["tensor_parallel_degree"] == 4
    with pytest.raises(
        ValueError, match=r"option\.tensor_parallel_degree='all' is not valid; expected an integer or max"
    ):
        handler_properties({"option.tensor_parallel_degree": "all"}, tmp_path, cuda_devices=4)


def test_cli_overrides_must_be_key_value(capsys):
    assert _parse_args(["-p", "option.dtype=fp32", "--port", "0"]).property == ["option.dtype=fp32"]
    with pytest.raises(SystemExit):
        _parse_args(["--property", "option.dtype"])
    assert "is not KEY=VALUE" in capsys.readouterr().err
