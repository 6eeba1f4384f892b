"""The stand-in for SMP v1's tensor-parallel GPT-J: the module `smp.DistributedModel` puts in place of a Hugging Face
`GPTJForCausalLM`, and the state-dict translation functions of `smdistributed.modelparallel.torch.nn.huggingface.gptj`.

Modelled on SMP's own code (SMP 1.12.1 as published in tkazusa/smdistributed_modelparallel@b5e06a8):
- `torch/nn/predefined_hooks.py`: SMP compares `transformers.__version__` with `_SUPPORTED_HF_VERSIONS` when it is
  imported; with any other version it logs a warning and registers no Hugging Face module, so nothing is replaced.
- `torch/model.py` `_replace_tp_counterparts` / `torch/tp_registry.py` `distribute`: a GPTJForCausalLM created inside
  `smp.model_creation(tensor_parallelism=True)` is replaced, as a whole, by a NEW `DistributedTransformerLMHead` built
  from the model's __init__ arguments; its weights are freshly initialized (copying the original ones is the internal
  `_match_weights` debug option), so weights loaded by `from_pretrained` are lost; the parameter count must not change.
- `torch/nn/huggingface/gptj.py`: the init hook (refuses activations other than gelu_new/relu and n_embd not divisible
  by n_head), the forward hook (refuses past_key_values, inputs_embeds, head_mask, use_cache, output_attentions,
  output_hidden_states and return_dict=False; returns CausalLMOutputWithPast(loss, logits)) and both translations.

The module keeps SMP's parameter names for GPT-J with optimize="speed" (a subset of DistributedTransformerLMHead's):
    word_embedding.weight                                   <- transformer.wte.weight
    transformer.seq_layers.<i>.pre_layernorm.{weight,bias}  <- transformer.h.<i>.ln_1
    transformer.seq_layers.<i>.attention.{query,key,value,dense}.weight <- attn.{q_proj,k_proj,v_proj,out_proj}
    transformer.seq_layers.<i>.output.{dense1,dense2}.{weight,bias}     <- mlp.{fc_in,fc_out}
    layernorm.{weight,bias}                                 <- transformer.ln_f
    lm_head.{weight,bias}                                   <- lm_head
Its arithmetic is the Hugging Face GPT-J's (run with these parameters), on one process: no slicing, no fused kernels.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# smdistributed/modelparallel/torch/nn/predefined_hooks.py (SMP 1.12.1)
SUPPORTED_HF_VERSIONS = ["4.17.0", "4.20.1", "4.21.0"]

_HF_TO_SMP_LAYER = {
    "ln_1": "pre_layernorm",
    "attn.q_proj": "attention.query",
    "attn.k_proj": "attention.key",
    "attn.v_proj": "attention.value",
    "attn.out_proj": "attention.dense",
    "mlp.fc_in": "output.dense1",
    "mlp.fc_out": "output.dense2",
}
_SMP_TO_HF_LAYER = {smp: hf for hf, smp in _HF_TO_SMP_LAYER.items()}
_TOP = {"transformer.wte": "word_embedding", "transformer.ln_f": "layernorm", "lm_head": "lm_head"}
_TOP_BACK = {smp: hf for hf, smp in _TOP.items()}

max_seq_len_gptj: int | None = None  # set by the init hook, as SMP's module global is


class HFGPTJConfigError(Exception):
    """smdistributed.modelparallel.torch.exceptions.HFGPTJConfigError"""


def translate_hf_state_dict_to_smdistributed_gptj(state_dict: dict[str, Any]) -> dict[str, Any]:
    """HF names to SMP's; the causal-mask buffers and anything unrecognized are dropped (as SMP does)."""
    translated = {}
    for name, value in state_dict.items():
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        prefix, _, kind = name.rpartition(".")
        parts = prefix.split(".")
        if parts[:2] == ["transformer", "h"] and ".".join(parts[3:]) in _HF_TO_SMP_LAYER:
            translated[f"transformer.seq_layers.{parts[2]}.{_HF_TO_SMP_LAYER['.'.join(parts[3:])]}.{kind}"] = value
        elif prefix in _TOP:
            translated[f"{_TOP[prefix]}.{kind}"] = value
    return translated


def translate_state_dict_to_hf_gptj(state_dict: dict[str, Any], max_seq_len: int | None = None) -> dict[str, Any]:
    """SMP names to HF's, plus, per layer, the constant causal-mask buffers older GPT-J code registers
    (`attn.bias`: a uint8 lower-triangular max_seq_len^2 mask, `attn.masked_bias`: -1e9), as SMP adds them."""
    if max_seq_len is None:
        max_seq_len = max_seq_len_gptj
    translated = {}
    for name, value in state_dict.items():
        prefix, _, kind = name.rpartition(".")
        parts = prefix.split(".")
        if parts[:2] == ["transformer", "seq_layers"] and ".".join(parts[3:]) in _SMP_TO_HF_LAYER:
            layer = parts[2]
            if parts[3:] == ["attention", "query"] and kind == "weight":
                mask = torch.tril(torch.ones((max_seq_len, max_seq_len), dtype=torch.uint8))
                translated[f"transformer.h.{layer}.attn.bias"] = mask.view(1, 1, max_seq_len, max_seq_len)
                translated[f"transformer.h.{layer}.attn.masked_bias"] = torch.tensor(-1e9)
            translated[f"transformer.h.{layer}.{_SMP_TO_HF_LAYER['.'.join(parts[3:])]}.{kind}"] = value
        elif prefix in _TOP_BACK:
            translated[f"{_TOP_BACK[prefix]}.{kind}"] = value
        else:
            raise HFGPTJConfigError(f"Unknown token {parts[0]}.")
    return translated


def hf_name_map(hf_names: list[str]) -> dict[str, str]:
    """HF parameter name -> SMP parameter name, through the translation itself."""
    return {name: next(iter(translate_hf_state_dict_to_smdistributed_gptj({name: None}))) for name in hf_names}


class DistributedAttentionLayer(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(hidden, hidden, bias=False) for _ in range(3))
        self.dense = nn.Linear(hidden, hidden, bias=False)


class DistributedTransformerOutputLayer(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.dense1 = nn.Linear(hidden, intermediate)
        self.dense2 = nn.Linear(intermediate, hidden)


class DistributedTransformerLayer(nn.Module):
    def __init__(self, hidden: int, intermediate: int, eps: float) -> None:
        super().__init__()
        self.pre_layernorm = nn.LayerNorm(hidden, eps=eps)  # GPT-J: single_pre_layernorm, parallel attention
        self.attention = DistributedAttentionLayer(hidden)
        self.output = DistributedTransformerOutputLayer(hidden, intermediate)


class DistributedTransformer(nn.Module):
    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.seq_layers = nn.Sequential(*layers)


class DistributedTransformerLMHead(nn.Module):
    """SMP's replacement for GPTJForCausalLM. `hf_model` lends its (parameter-free) arithmetic, not its weights."""

    def __init__(self, hf_model: nn.Module) -> None:
        global max_seq_len_gptj
        config = hf_model.config
        if config.n_embd % config.n_head:
            raise HFGPTJConfigError(
                f"Embedding size ({config.n_embd}) must be divisible by the number of attention heads"
            )
        if config.activation_function not in ("gelu_new", "relu"):
            raise HFGPTJConfigError("Only 'gelu_new' and 'relu' activations are supported.")
        max_seq_len_gptj = config.n_positions
        super().__init__()
        hidden, eps = config.n_embd, config.layer_norm_epsilon
        intermediate = config.n_inner if config.n_inner is not None else 4 * hidden
        self.word_embedding = nn.Embedding(config.vocab_size, hidden)
        self.transformer = DistributedTransformer(
            [DistributedTransformerLayer(hidden, intermediate, eps) for _ in range(config.n_layer)]
        )
        self.layernorm = nn.LayerNorm(hidden, eps=eps)
        self.lm_head = nn.Linear(hidden, config.vocab_size)
        # use_normal_initialization with the config's initializer_range: fresh weights, not the HF model's.
        for name, parameter in self.named_parameters():
            with torch.no_grad():
                if name.endswith("bias"):
                    parameter.zero_()
                elif "layernorm" in name:
                    parameter.fill_(1.0)
                else:
                    parameter.normal_(0.0, config.initializer_range)
        object.__setattr__(self, "_template", hf_model)  # not a submodule: its parameters are not this module's
        self._names = hf_name_map([name for name, _ in hf_model.named_parameters()])

    def train(self, mode: bool = True) -> DistributedTransformerLMHead:
        self._template.train(mode)  # dropout follows the distributed module's mode
        return super().train(mode)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **unsupported: Any,
    ) -> Any:
        from transformers.modeling_outputs import CausalLMOutputWithPast

        refused = ("past_key_values", "inputs_embeds", "head_mask", "use_cache", "output_attentions")
        if any(unsupported.get(name) for name in (*refused, "output_hidden_states")):
            raise HFGPTJConfigError(
                "past_key_values, inputs_embeds, head_mask, use_cache, output_attentions, and output_hidden_states "
                "arguments of HuggingFace GPTJForCausalLM forward method are not supported."
            )
        if return_dict is not None and not return_dict:
            raise HFGPTJConfigError("Setting False for the return_dict argument ... is not supported.")
        parameters = dict(self.named_parameters())
        output = _functional_call(
            self._template,
            {hf: parameters[smp] for hf, smp in self._names.items()},
            kwargs={"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels},
        )
        return CausalLMOutputWithPast(loss=output.loss, logits=output.logits)


def _functional_call(module: nn.Module, parameters: dict[str, torch.Tensor], kwargs: dict[str, Any]) -> Any:
    """`module` run with `parameters` in place of its own. torch.func arrived in 2.0; torch 1.13 (the SMP v1
    image) has the same call as torch.nn.utils.stateless.functional_call."""
    func = getattr(torch, "func", None)
    if func is not None:
        return func.functional_call(module, parameters, args=(), kwargs=kwargs)
    from torch.nn.utils import stateless

    return stateless.functional_call(module, parameters, args=(), kwargs=kwargs)


def distributable(module: nn.Module) -> bool:
    """Whether SMP registers this module's class for replacement (the exact class, as SMP does, not subclasses).
    Compared by name: modules are also created while transformers imports modeling_gptj."""
    cls = type(module)
    return cls.__name__ == "GPTJForCausalLM" and cls.__module__ == "transformers.models.gptj.modeling_gptj"
