"""Models to place: a name, a family, and an architecture and/or a measured profile."""

from __future__ import annotations

import os
from dataclasses import dataclass, field as dataclass_field
from typing import Any, Optional

from placement_opt.validation import check_keys, get_int, get_number, get_str
from placement_opt.errors import InputError
from placement_opt.hf_config import load_hf_architecture

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "int8": 1}
FAMILIES = ("dnn", "llm")


@dataclass(frozen=True)
class Architecture:
    """Shape of a transformer (BERT/GPT/LLaMA style, optionally mixture-of-experts).

    ``ffn_ratio`` is the MLP's inner size over ``hidden``; ``moe_experts`` > 0 turns the
    MLP of every ``moe_every``-th layer into that many experts with top-``moe_top_k`` routing.
    The defaults describe a BERT/GPT model; LLaMA-style models set ``gated_mlp`` (a gate
    matrix beside the MLP's up matrix, as SwiGLU has), ``tied_embeddings=False`` (an LM head
    of its own) and ``learned_positions=False`` (rotary positions: no ``seq_len x hidden``
    table). ``name`` and ``source`` only document the shape (which model, where from).
    """

    layers: int
    hidden: int
    heads: int
    seq_len: int = 2048
    vocab: int = 51200
    ffn_ratio: float = 4.0
    moe_experts: int = 0
    moe_top_k: int = 2
    moe_every: int = 2
    dtype: str = "fp16"
    kv_heads: Optional[int] = None  # grouped-query attention; None means kv_heads == heads
    gated_mlp: bool = False
    tied_embeddings: bool = True
    learned_positions: bool = True
    name: Optional[str] = dataclass_field(default=None, compare=False)
    source: Optional[str] = dataclass_field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise InputError(f"hidden {self.hidden} is not divisible by heads {self.heads}", "architecture.heads")
        if self.dtype not in DTYPE_BYTES:
            raise InputError(f"unknown dtype {self.dtype!r}", "architecture.dtype")

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def ffn_hidden(self) -> int:
        return int(round(self.hidden * self.ffn_ratio))

    @property
    def mlp_up_width(self) -> int:
        """Outputs of the MLP's (or an expert's) up projection: ``ffn_hidden``, twice that with
        a gate (the gate and up matrices side by side)."""
        return (2 if self.gated_mlp else 1) * self.ffn_hidden

    def param_count(self) -> int:
        """Parameters: embeddings (+ an untied LM head) + per-layer attention/MLP (experts counted
        fully). Biases (one per output of every matrix) and norms are counted as in BERT/GPT
        even where a model has fewer (LLaMA has no biases): under 0.1% of the weights."""
        h, f, up = self.hidden, self.ffn_hidden, self.mlp_up_width
        kvh = self.kv_heads or self.heads
        attn = h * h * 2 + 2 * h * (h // self.heads) * kvh + 4 * h
        mlp = h * up + up + f * h + h
        total = 0
        for layer in range(self.layers):
            experts = self.moe_experts if self.moe_experts and layer % self.moe_every == self.moe_every - 1 else 1
            total += attn + experts * mlp + (h * self.moe_experts if experts > 1 else 0) + 4 * h
        vocab_rows = self.vocab * (1 if self.tied_embeddings else 2)  # token table, and the LM head if untied
        return total + (vocab_rows + (self.seq_len if self.learned_positions else 0)) * h

    def weight_bytes(self) -> int:
        return self.param_count() * self.dtype_bytes

    def kv_bytes_per_token(self) -> int:
        """K and V for every layer: 2 x layers x kv width x dtype bytes."""
        kvh = self.kv_heads or self.heads
        return 2 * self.layers * (self.hidden // self.heads) * kvh * self.dtype_bytes

    @classmethod
    def from_dict(cls, d: Any, field: str, base_dir: str = ".") -> "Architecture":
        """The architecture of JSON object ``d``: its shape fields, or ``{"hf_config": path}``
        (a HuggingFace ``config.json``, relative to ``base_dir``) with any fields overriding
        the converted ones."""
        if isinstance(d, dict) and "hf_config" in d:
            d = _from_hf_config(d, field, base_dir)
        check_keys(d, field, ["layers", "hidden", "heads"], OPTIONAL_KEYS)
        dtype = get_str(d, "dtype", field, "fp16", choices=DTYPE_BYTES)
        try:
            return cls(
                layers=get_int(d, "layers", field, minimum=1, maximum=10000),
                hidden=get_int(d, "hidden", field, minimum=1),
                heads=get_int(d, "heads", field, minimum=1),
                seq_len=get_int(d, "seq_len", field, 2048, minimum=1),
                vocab=get_int(d, "vocab", field, 51200, minimum=1),
                ffn_ratio=get_number(d, "ffn_ratio", field, 4.0, exclusive_minimum=0),
                moe_experts=get_int(d, "moe_experts", field, 0, minimum=0),
                moe_top_k=get_int(d, "moe_top_k", field, 2, minimum=1),
                moe_every=get_int(d, "moe_every", field, 2, minimum=1),
                dtype=dtype,
                kv_heads=get_int(d, "kv_heads", field, minimum=1) if "kv_heads" in d else None,
                gated_mlp=_get_bool(d, "gated_mlp", field, False),
                tied_embeddings=_get_bool(d, "tied_embeddings", field, True),
                learned_positions=_get_bool(d, "learned_positions", field, True),
                name=get_str(d, "name", field) if "name" in d else None,
                source=get_str(d, "source", field) if "source" in d else None,
            )
        except InputError as e:
            if e.field.startswith("architecture"):
                raise InputError(e.reason, field + e.field[len("architecture"):])
            raise

    def to_dict(self) -> dict:
        d: dict = {"name": self.name} if self.name is not None else {}
        d.update({
            "layers": self.layers, "hidden": self.hidden, "heads": self.heads, "seq_len": self.seq_len,
            "vocab": self.vocab, "ffn_ratio": self.ffn_ratio, "moe_experts": self.moe_experts,
            "moe_top_k": self.moe_top_k, "moe_every": self.moe_every, "dtype": self.dtype,
        })
        if self.kv_heads is not None:
            d["kv_heads"] = self.kv_heads
        for key, default in (("gated_mlp", False), ("tied_embeddings", True), ("learned_positions", True)):
            if getattr(self, key) != default:
                d[key] = getattr(self, key)
        if self.source is not None:
            d["source"] = self.source
        return d


#: the optional fields of an architecture object (``layers``, ``hidden``, ``heads`` are required)
OPTIONAL_KEYS = ("seq_len", "vocab", "ffn_ratio", "moe_experts", "moe_top_k", "moe_every", "dtype", "kv_heads",
                 "gated_mlp", "tied_embeddings", "learned_positions", "name", "source")


def _get_bool(d: dict, key: str, field: str, default: bool) -> bool:
    """A JSON boolean (``1`` or ``"true"`` are refused, as integers refuse ``2.0``)."""
    value = d.get(key, default)
    if not isinstance(value, bool):
        raise InputError(f"expected true or false, got {type(value).__name__}", f"{field}.{key}" if field else key)
    return value


def _from_hf_config(d: dict, field: str, base_dir: str) -> dict:
    """The fields of ``{"hf_config": path, ...}``: the HuggingFace config converted, then the
    object's other fields over them. A bad config is reported at ``field.hf_config``."""
    check_keys(d, field, ["hf_config"], ("layers", "hidden", "heads") + OPTIONAL_KEYS)
    where = f"{field}.hf_config" if field else "hf_config"
    path = get_str(d, "hf_config", field)
    full = path if os.path.isabs(path) else os.path.join(base_dir, path)
    try:
        converted = load_hf_architecture(full)
    except InputError as e:  # names the config file; reported at the referencing field
        raise InputError(e.one_line(), where) from None
    overrides = {key: value for key, value in d.items() if key != "hf_config"}
    return {**converted, "source": f"HuggingFace config {path}", **overrides}


@dataclass(frozen=True)
class ModelSpec:
    """A model instance to be served. ``profile`` names an entry of the instance's profiles."""

    name: str
    family: str = "dnn"
    architecture: Optional[Architecture] = None
    profile: Optional[str] = None
    cost_table: Optional[str] = None  # LLMs: a measured prefill/decode cost table
    weights: Optional[str] = None  # executor: a safetensors file with real weights

    def __post_init__(self) -> None:
        if self.architecture is None and self.profile is None:
            raise InputError("a model needs an architecture or a profile", "models")
        if self.family not in FAMILIES:
            raise InputError(f"unknown family {self.family!r}", "models.family")
