"""Any decoder model type of the installed transformers as a protocol v2 subject.

`attnspec verify hf:llama` (or `hf:llama@eager`, `hf:gpt_neox@sdpa`; in Python
`attnspec.subjects.hf.subject("llama", backend="sdpa")`, which is what the `hf:` TARGET loads)
builds, for each drawn spec, a one-layer model of that type from a small config
(`AutoModel.from_config`, so the model's own weight initialisation), and runs its first
attention layer *through the model's own forward*: the model builds the causal or sliding mask,
the position ids, the rotary or ALiBi tensors and the cache as it does for generate(). Two hooks
on the attention module hand it the input x unnormalised (the layer norm before it is bypassed)
and take its output, so the subject is the attention alone, while everything around it is the
model's. The hooks of protocol v2 are the model's own inputs: decode with its DynamicCache,
padded with its 2-D attention mask and position ids counted over real tokens, decode_padded with
both, shifted with position ids from the offset.

What each model type can express (kv heads, head_dim, windows, RoPE and its scaling, soft caps,
scales, q/k norms, sinks, biases, ALiBi) and how its fused projections are laid out is in
`_hf_families.py`; a model type it does not list, or a spec the type cannot express, is refused
with the field and the reason. Supported transformers: `TRANSFORMERS` (checked at load).
"""

from __future__ import annotations

import inspect
import math
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..reference.spec import AttentionSpec
from ._float32_buffers import Float32Buffers

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "TRANSFORMERS", "backends_of", "model_types",
           "runnable_backends", "subject"]

TRANSFORMERS = ("5.0", "6.0")
"""The transformers versions the adapter supports: at least the first, below the second."""

BACKENDS = ("eager", "sdpa", "flex_attention")
"""The attn_implementation values the adapter verifies (`@BACKEND` in the TARGET)."""

DEFAULT_BACKEND = "sdpa"
"""transformers' own default where the model supports it (else eager): what from_pretrained()
gives a user on CPU."""


class AdapterError(ValueError):
    """A model type, backend or transformers version the adapter cannot verify, and why."""


def _check_transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise AdapterError("attnspec.subjects.hf needs transformers: pip install "
                           f"'attnspec[hf]' (transformers >= {TRANSFORMERS[0]}, < "
                           f"{TRANSFORMERS[1]}).") from None
    version = transformers.__version__
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    low = tuple(int(p) for p in TRANSFORMERS[0].split("."))
    high = tuple(int(p) for p in TRANSFORMERS[1].split("."))
    if not low <= parts < high:
        raise AdapterError(f"attnspec.subjects.hf supports transformers >= {TRANSFORMERS[0]}, "
                           f"< {TRANSFORMERS[1]}; this environment has {version}, whose "
                           "modeling code the adapter's layouts and config mappings were not "
                           "checked against. Install a supported version, or wrap the layer "
                           "yourself (docs: protocol v2).")
    return transformers


def model_types() -> tuple[str, ...]:
    """The model types the adapter can build, in the order the conformance matrix lists them."""
    from ._hf_families import FAMILIES

    return tuple(FAMILIES)


class _Captured(Exception):
    """Raised by the output hook once the first attention layer has run: the rest of the
    model's forward (MLP, later layers) is not the subject, so it is not run."""


def _signature_names(fn: Callable[..., Any]) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return frozenset()


class HFModelAttention(Float32Buffers):
    """A one-layer transformers model whose first attention layer is the subject (its rotary
    frequencies stay float32 through .to(dtype), as from_pretrained(dtype=) leaves them)."""

    def __init__(self, family: Any, spec: AttentionSpec, backend: str) -> None:
        super().__init__()
        from transformers import AutoConfig, AutoModel

        self.family, self.spec, self.backend = family, spec, backend
        kwargs = family.config(spec)
        try:
            config = AutoConfig.for_model(family.model_type, **kwargs)
        except Exception as error:
            raise AdapterError(f"hf:{family.model_type}: building its config from {spec} "
                               f"failed ({type(error).__name__}: {error}); the adapter's "
                               "mapping of this spec is wrong or the config is stricter than "
                               "it knows.") from None
        for name, value in family.after(spec).items():
            setattr(config, name, value)
        self.config = config
        self.model = AutoModel.from_config(config, attn_implementation=backend)
        self.model.eval()
        self.attn = family.locate(self.model)
        self._accepts = _signature_names(self.model.forward)

    def _run(self, x: Tensor, positions: Tensor | None = None,
             attention_mask: Tensor | None = None, cache: Any = None) -> Tensor:
        captured: list[Tensor] = []
        residual = self.family.residual

        def take_input(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                       ) -> tuple[tuple[Any, ...], dict[str, Any]]:
            # the layer norm before attention is not the subject: the attention gets x itself,
            # contiguous as the norm's output always is
            given = x.contiguous()
            if args:
                args = (given, *args[1:])
            else:
                kwargs["hidden_states"] = given
            if residual is not None:  # BLOOM's attention adds its residual: none here
                if residual in kwargs:
                    kwargs[residual] = torch.zeros_like(x)
                elif len(args) > 1:
                    args = (args[0], torch.zeros_like(x), *args[2:])
            return args, kwargs

        def take_output(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
                        out: Any) -> None:
            captured.append(out[0] if isinstance(out, tuple) else out)
            raise _Captured

        call: dict[str, Any] = {"inputs_embeds": x, "use_cache": cache is not None}
        if cache is not None:  # transformers 5.x is renaming past_key_values to cache
            call["cache" if "cache" in self._accepts else "past_key_values"] = cache
        if positions is not None and "position_ids" in self._accepts:
            call["position_ids"] = positions
        if attention_mask is not None:
            call["attention_mask"] = attention_mask
        handles = [self.attn.register_forward_pre_hook(take_input, with_kwargs=True),
                   self.attn.register_forward_hook(take_output, with_kwargs=True)]
        try:
            self.model(**call)
        except _Captured:
            pass
        finally:
            for handle in handles:
                handle.remove()
        if not captured:
            raise RuntimeError(f"hf:{self.family.model_type}: the model's forward returned "
                               "without running its first attention layer, so there is no "
                               "output to judge.")
        return captured[0]

    def forward(self, x: Tensor) -> Tensor:
        return self._run(x, torch.arange(x.size(1), device=x.device)[None])

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.config)

    def decode(self, x: Tensor, cache: Any, offset: int) -> tuple[Tensor, Any]:
        """Tokens at offset.. against the model's DynamicCache, as generate() runs it."""
        cache = self.new_cache() if cache is None else cache
        positions = torch.arange(offset, offset + x.size(1), device=x.device)[None]
        mask = torch.ones(x.size(0), offset + x.size(1), dtype=torch.long, device=x.device)
        return self._run(x, positions, mask, cache), cache

    def decode_padded(self, x: Tensor, key_mask: Tensor, cache: Any, offset: int,
                      ) -> tuple[Tensor, Any]:
        """A left-padded batch decoded as generate() does: the 2-D attention mask of every
        token so far, and position ids counting each row's real tokens."""
        cache = self.new_cache() if cache is None else cache
        attention_mask = key_mask.to(torch.long)
        positions = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        return self._run(x, positions[:, offset:offset + x.size(1)], attention_mask,
                         cache), cache

    def shifted(self, x: Tensor, offset: int) -> Tensor:
        """x at positions offset.. with no cache (a continued sequence, earlier tokens out of
        sight)."""
        positions = torch.arange(offset, offset + x.size(1), device=x.device)[None]
        return self._run(x, positions)

    def padded(self, x: Tensor, key_mask: Tensor) -> Tensor:
        """A padded batch as generate() prepares it: the 2-D attention mask, and position ids
        counting real tokens (padding gets 1, as transformers does)."""
        attention_mask = key_mask.to(torch.long)
        positions = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        return self._run(x, positions, attention_mask)


def _module(module: nn.Module) -> HFModelAttention:
    if not isinstance(module, HFModelAttention):
        raise TypeError(f"attnspec.subjects.hf: expected the module its build returned, got "
                        f"{type(module).__name__}.")
    return module


def _effective_norm_weight(norm: nn.Module, width: int, eps: float) -> Tensor:
    """The factor an RMS norm multiplies x̂ by (w, or Gemma's 1 + w), read by running the
    norm on ones: ones / sqrt(1 + eps) * w_eff. Differentiable in the norm's weight."""
    weight = next(norm.parameters())
    ones = torch.ones(width, dtype=weight.dtype, device=weight.device)
    result: Tensor = norm(ones) * math.sqrt(1.0 + eps)
    return result


def export(module: nn.Module) -> Mapping[str, Tensor]:
    """The layer's weights in the protocol's names, unfused from its layout."""
    m = _module(module)
    spec = m.spec
    out = dict(m.family.export(m.attn, spec))
    C, H, G, D = spec.n_embd, spec.n_head, spec.G, spec.D
    widths = {"q_bias": H * D, "k_bias": G * D, "v_bias": G * D, "o_bias": C}
    if spec.bias:  # a projection without a bias in a biased spec: a bias of zero (Qwen2's o)
        for name, width in widths.items():
            if out.get(name) is None:
                out[name] = out["q_weight"].new_zeros(width)
    else:
        present = [name for name in widths if out.get(name) is not None]
        if present:
            raise AdapterError(f"hf:{m.family.model_type}: the spec has bias=False, but the "
                               f"layer has {', '.join(present)}: the config mapping is wrong.")
        out = {k: v for k, v in out.items() if k not in widths}
    norm = spec.qk_norm
    if norm is not None:
        q_norm, k_norm = m.family.norms(m.attn)
        if norm.kind == "layer":
            out |= {"q_norm_weight": q_norm.weight, "k_norm_weight": k_norm.weight,
                    "q_norm_bias": q_norm.bias, "k_norm_bias": k_norm.bias}
        else:
            q_width, k_width = (D, D) if norm.per_head else (H * D, G * D)
            out |= {"q_norm_weight": _effective_norm_weight(q_norm, q_width, norm.eps),
                    "k_norm_weight": _effective_norm_weight(k_norm, k_width, norm.eps)}
    if spec.sinks:
        out["sinks"] = m.attn.sinks
    return out


def subject(model_type: str, backend: str | None = None) -> types.SimpleNamespace:
    """The protocol v2 subject for `model_type` on `backend` (None: DEFAULT_BACKEND)."""
    _check_transformers()
    from ._hf_families import FAMILIES

    if backend is None:  # as transformers does: sdpa where the model supports it, else eager
        backend = DEFAULT_BACKEND if model_type in FAMILIES and DEFAULT_BACKEND in backends_of(
            model_type) else "eager"
    if backend not in BACKENDS:
        raise AdapterError(f"hf:{model_type}@{backend}: unknown backend {backend!r}; the "
                           f"adapter verifies {', '.join(BACKENDS)} (transformers' "
                           "attn_implementation).")
    family = FAMILIES.get(model_type)
    if family is None:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        known = model_type in CONFIG_MAPPING_NAMES
        why = (family_refusal(model_type) if known else
               "transformers has no such model type (see transformers' CONFIG_MAPPING_NAMES)")
        raise AdapterError(f"hf:{model_type}: cannot be verified: {why}. Model types the "
                           f"adapter builds: {', '.join(FAMILIES)}.")
    supported = backends_of(model_type)
    if backend == "flex_attention" and not torch.cuda.is_available():
        raise AdapterError(f"hf:{model_type}@flex_attention: FlexAttention has no backward on "
                           f"the CPU (torch {torch.__version__} raises NotImplementedError), "
                           "and the gradient properties need one: verify this backend on a "
                           "machine with CUDA; here eager and sdpa run.")
    if backend not in supported:
        raise AdapterError(f"hf:{model_type}@{backend}: transformers does not run this model "
                           f"type on {backend} (its model class's _supports_"
                           f"{'sdpa' if backend == 'sdpa' else 'flex_attn'} is False); its "
                           f"backends: {', '.join(supported)}.")
    masked_rows, padding_values = family.declarations(backend)

    def build(spec: AttentionSpec) -> nn.Module:
        return HFModelAttention(family, spec, backend)

    def supports(spec: AttentionSpec) -> bool:
        return bool(family.supports(spec))

    def decode(module: nn.Module, x: Tensor, cache: object, offset: int,
               ) -> tuple[Tensor, object]:
        return _module(module).decode(x, cache, offset)

    def decode_padded(module: nn.Module, x: Tensor, key_mask: Tensor, cache: object,
                      offset: int) -> tuple[Tensor, object]:
        return _module(module).decode_padded(x, key_mask, cache, offset)

    def shifted(module: nn.Module, x: Tensor, offset: int) -> Tensor:
        return _module(module).shifted(x, offset)

    def padded(module: nn.Module, x: Tensor, key_mask: Tensor) -> Tensor:
        return _module(module).padded(x, key_mask)

    namespace = types.SimpleNamespace(
        __name__=f"hf:{model_type}@{backend}", __doc__=family.doc, PROTOCOL="2.1",
        DTYPES=family.dtypes, VARIANTS=dict(family.variants), MASKED_ROWS=masked_rows,
        PADDING_VALUES=padding_values, build=build, supports=supports, export_weights=export,
        model_type=model_type, backend=backend)
    hooks = {"decode": decode, "decode_padded": decode_padded, "shifted": shifted,
             "padded": padded}
    for name in family.hooks:
        setattr(namespace, name, hooks[name])
    return namespace


def backends_of(model_type: str) -> tuple[str, ...]:
    """The backends transformers' model class for `model_type` says it supports."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(model_type)
    if name is None or not hasattr(transformers, name):
        raise AdapterError(f"hf:{model_type}: transformers {transformers.__version__} has no "
                           f"base model class for this model type (MODEL_MAPPING_NAMES "
                           f"gives {name!r}), so the adapter cannot build it.")
    cls = getattr(transformers, name)
    flags = {"eager": True, "sdpa": getattr(cls, "_supports_sdpa", False),
             "flex_attention": getattr(cls, "_supports_flex_attn", False)}
    return tuple(b for b in BACKENDS if flags[b])


def runnable_backends(model_type: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """The backends `model_type` runs on here, and why each other one does not."""
    supported = backends_of(model_type)
    left_out = {b: "transformers' model class does not support it" for b in BACKENDS
                if b not in supported}
    if "flex_attention" in supported and not torch.cuda.is_available():
        left_out["flex_attention"] = "FlexAttention has no backward on the CPU"
    return tuple(b for b in supported if b not in left_out), left_out


def family_refusal(model_type: str) -> str:
    from ._hf_families import REFUSED

    return REFUSED.get(model_type, "the adapter has no mapping of its config and weights to "
                       "an attention spec yet (not a decoder it has been taught, or an "
                       "attention the spec cannot express)")


def from_target(rest: str) -> types.SimpleNamespace:
    """`MODEL_TYPE[@BACKEND]`, the part of an `hf:` TARGET after the colon."""
    model_type, at, backend = (part.strip() for part in rest.partition("@"))
    # An "@" with nothing after it is a typo, not a request for the default backend.
    if not model_type or (at and not backend):
        from ._hf_families import FAMILIES

        missing = "model type" if not model_type else "backend"
        raise AdapterError(f"hf:{rest}: the {missing} is empty; write hf:MODEL_TYPE or "
                           f"hf:MODEL_TYPE@BACKEND, with BACKEND one of {', '.join(BACKENDS)} "
                           f"and MODEL_TYPE one of {', '.join(FAMILIES)}.")
    return subject(model_type, backend or None)


def __getattr__(name: str) -> Any:
    """`attnspec.subjects.hf:llama` as a TARGET is `hf:llama`."""
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        return from_target(name)
    except AdapterError as error:
        raise AttributeError(str(error)) from None
