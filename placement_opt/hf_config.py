"""HuggingFace ``config.json`` files as placeopt architectures, read as plain JSON.

A model's ``config.json`` on the HuggingFace hub names its family (``model_type``) and its
shape in that family's own words (``hidden_size`` or ``n_embd``, ``intermediate_size`` or
``ffn_dim``, ...). :func:`architecture_fields` maps the shape of the families below onto the
fields of :class:`placement_opt.model.Architecture` (returned as a plain dict, so that this
module needs nothing from ``model`` and ``model`` can convert an instance's ``hf_config``):

* ``llama``, ``mistral``, ``qwen2``: decoders with rotary positions, grouped-query attention
  (``num_key_value_heads``), a gated (SwiGLU) MLP and, unless ``tie_word_embeddings``, an LM
  head of their own;
* ``mixtral``: the same with a mixture-of-experts MLP in every layer (``num_local_experts``
  experts, top-``num_experts_per_tok`` routing);
* ``bert``, ``gpt2``, ``opt``: learned position tables, a two-matrix MLP and an LM head tied
  to the token embedding.

No transformers dependency: the keys are read as the published files spell them. A config
of another family, or one that lacks a field its family needs, is an :class:`InputError`
naming the file, the missing fields and why.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from placement_opt.errors import InputError
from placement_opt.io import read_json

#: torch dtype names of ``torch_dtype`` (``dtype`` in newer files) -> placeopt dtypes
TORCH_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float": "fp32",
                "int8": "int8"}


def read_hf_config(path: str) -> Dict[str, Any]:
    """The parsed ``config.json`` at ``path`` (an object, or an error naming the file)."""
    config = read_json(path)
    if not isinstance(config, dict):
        raise InputError(f"expected a JSON object, got {type(config).__name__}", "", path)
    return config


def load_hf_architecture(path: str) -> Dict[str, Any]:
    """The architecture fields of the HuggingFace config file at ``path``."""
    return architecture_fields(read_hf_config(path), path)


def architecture_fields(config: Dict[str, Any], source: str) -> Dict[str, Any]:
    """Architecture fields (``layers``, ``hidden``, ``heads``, ...) of a parsed HuggingFace
    config; ``source`` names it in errors."""
    model_type = config.get("model_type")
    converter = _CONVERTERS.get(model_type) if isinstance(model_type, str) else None
    if converter is None:
        known = ", ".join(sorted(_CONVERTERS))
        what = "no model_type" if model_type is None else f"unknown model_type {model_type!r}"
        raise InputError(f"{what}: cannot convert it (supported: {known})", "model_type", source)
    fields = converter(_Reader(config, str(model_type), source))
    fields["dtype"] = _dtype(config, source)
    return fields


class _Reader:
    """Reads a config's fields, collecting every missing one so that one error names them all."""

    def __init__(self, config: Dict[str, Any], model_type: str, source: str):
        self.config, self.model_type, self.source = config, model_type, source
        self.missing: list[str] = []

    def integer(self, *keys: str, default: Optional[int] = None) -> int:
        """The first of ``keys`` present (a positive integer), else ``default``, else missing."""
        for key in keys:
            value = self.config.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise InputError(f"expected a positive integer, got {value!r}", key, self.source)
                return value
        if default is None:
            self.missing.append(keys[0])
            return 1
        return default

    def flag(self, key: str, default: bool) -> bool:
        """A boolean field, ``default`` when absent or null."""
        value = self.config.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(f"expected true or false, got {value!r}", key, self.source)
        return value

    def done(self) -> None:
        """Raise one error naming every missing field."""
        if self.missing:
            fields, them = ("fields", "them") if len(self.missing) > 1 else ("field", "it")
            raise InputError(f"missing {fields} {', '.join(self.missing)}: a {self.model_type!r} config "
                             f"needs {them} to give the model's shape", "", self.source)


def _decoder(r: _Reader, moe: bool = False) -> Dict[str, Any]:
    """LLaMA-style decoders (llama, mistral, qwen2; mixtral with ``moe``)."""
    hidden = r.integer("hidden_size")
    heads = r.integer("num_attention_heads")
    fields: Dict[str, Any] = {
        "layers": r.integer("num_hidden_layers"), "hidden": hidden, "heads": heads,
        "kv_heads": r.integer("num_key_value_heads", default=heads), "vocab": r.integer("vocab_size"),
        "seq_len": r.integer("max_position_embeddings"), "gated_mlp": True,
        "tied_embeddings": r.flag("tie_word_embeddings", False), "learned_positions": False}
    ffn = r.integer("intermediate_size")
    if moe:
        fields.update(moe_experts=r.integer("num_local_experts"), moe_top_k=r.integer("num_experts_per_tok"),
                      moe_every=1)
    r.done()
    _check_head_dim(r, hidden, heads)
    fields["ffn_ratio"] = _ffn_ratio(ffn, hidden)
    return fields


def _bert(r: _Reader) -> Dict[str, Any]:
    """BERT encoders (the MLM head, when present, is tied to the token embedding)."""
    return _learned_positions_model(
        r, layers=r.integer("num_hidden_layers"), hidden=r.integer("hidden_size"),
        heads=r.integer("num_attention_heads"), ffn=r.integer("intermediate_size"), vocab=r.integer("vocab_size"),
        positions=r.integer("max_position_embeddings"))


def _gpt2(r: _Reader) -> Dict[str, Any]:
    """GPT-2, in its own key names (``n_embd``, ``n_layer``, ...); ``n_inner`` null means 4 x hidden."""
    hidden = r.integer("n_embd")
    return _learned_positions_model(
        r, layers=r.integer("n_layer"), hidden=hidden, heads=r.integer("n_head"),
        ffn=r.integer("n_inner", default=4 * hidden), vocab=r.integer("vocab_size"),
        positions=r.integer("n_positions", "n_ctx"))


def _opt(r: _Reader) -> Dict[str, Any]:
    """OPT decoders; the small ones' embedding projection (``word_embed_proj_dim``) is refused."""
    hidden = r.integer("hidden_size")
    projection = r.integer("word_embed_proj_dim", default=hidden)
    if projection != hidden:
        raise InputError(f"word_embed_proj_dim {projection} differs from hidden_size {hidden}: the embedding "
                         "projections it implies are not in placeopt's architecture", "word_embed_proj_dim", r.source)
    return _learned_positions_model(
        r, layers=r.integer("num_hidden_layers"), hidden=hidden, heads=r.integer("num_attention_heads"),
        ffn=r.integer("ffn_dim"), vocab=r.integer("vocab_size"), positions=r.integer("max_position_embeddings"),
        tied=r.flag("tie_word_embeddings", True))


def _learned_positions_model(r: _Reader, layers: int, hidden: int, heads: int, ffn: int, vocab: int,
                             positions: int, tied: bool = True) -> Dict[str, Any]:
    """BERT/GPT-style models: learned positions, a two-matrix MLP, multi-head attention."""
    r.done()
    _check_head_dim(r, hidden, heads)
    return {"layers": layers, "hidden": hidden, "heads": heads, "vocab": vocab, "seq_len": positions,
            "ffn_ratio": _ffn_ratio(ffn, hidden), "tied_embeddings": tied}


def _check_head_dim(r: _Reader, hidden: int, heads: int) -> None:
    """placeopt's heads are ``hidden / heads`` wide; a config that says otherwise is refused."""
    if hidden % heads:
        raise InputError(f"hidden size {hidden} is not divisible by {heads} attention heads", "", r.source)
    head_dim = r.config.get("head_dim")
    if head_dim is not None and head_dim != hidden // heads:
        raise InputError(f"head_dim {head_dim} differs from hidden size / heads = {hidden // heads}, which "
                         "placeopt's architecture assumes", "head_dim", r.source)


def _ffn_ratio(ffn: int, hidden: int) -> float:
    """``ffn / hidden``, the ratio placeopt stores (``round(hidden x ratio)`` gives ``ffn`` back
    exactly: the quotient's relative error is far below ``0.5 / ffn``)."""
    return ffn / hidden


def _dtype(config: Dict[str, Any], source: str) -> str:
    """The checkpoint's dtype (``torch_dtype``, or ``dtype`` in newer files); fp16 when absent."""
    key = "torch_dtype" if "torch_dtype" in config else "dtype"
    value = config.get(key)
    if value is None:
        return "fp16"
    name = value.removeprefix("torch.") if isinstance(value, str) else None
    if name is None or name not in TORCH_DTYPES:
        raise InputError(f"unsupported dtype {value!r} (supported: {', '.join(TORCH_DTYPES)})", key, source)
    return TORCH_DTYPES[name]


_CONVERTERS: Dict[str, Callable[[_Reader], Dict[str, Any]]] = {
    "llama": _decoder,
    "mistral": _decoder,
    "qwen2": _decoder,
    "mixtral": lambda r: _decoder(r, moe=True),
    "bert": _bert,
    "gpt2": _gpt2,
    "opt": _opt,
}
