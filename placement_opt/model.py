"""Models to place: a name, a family, and an architecture and/or a measured profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from placement_opt.validation import check_keys, get_int, get_number, get_str
from placement_opt.errors import InputError

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4, "int8": 1}
FAMILIES = ("dnn", "llm")


@dataclass(frozen=True)
class Architecture:
    """Shape of a transformer (BERT/GPT/LLaMA style, optionally mixture-of-experts).

    ``ffn_ratio`` is the MLP's inner size over ``hidden``; ``moe_experts`` > 0 turns the
    MLP of every ``moe_every``-th layer into that many experts with top-``moe_top_k`` routing.
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

    def param_count(self) -> int:
        """Parameters: embeddings + per-layer attention/MLP (experts counted fully)."""
        h, f = self.hidden, self.ffn_hidden
        kvh = self.kv_heads or self.heads
        attn = h * h * 2 + 2 * h * (h // self.heads) * kvh + 4 * h
        mlp = 2 * h * f + f + h
        total = 0
        for layer in range(self.layers):
            experts = self.moe_experts if self.moe_experts and layer % self.moe_every == self.moe_every - 1 else 1
            total += attn + experts * mlp + (h * self.moe_experts if experts > 1 else 0) + 4 * h
        return total + self.vocab * h + self.seq_len * h

    def weight_bytes(self) -> int:
        return self.param_count() * self.dtype_bytes

    def kv_bytes_per_token(self) -> int:
        """K and V for every layer: 2 x layers x kv width x dtype bytes."""
        kvh = self.kv_heads or self.heads
        return 2 * self.layers * (self.hidden // self.heads) * kvh * self.dtype_bytes

    @classmethod
    def from_dict(cls, d: dict, field: str) -> "Architecture":
        check_keys(d, field, ["layers", "hidden", "heads"],
                   ["seq_len", "vocab", "ffn_ratio", "moe_experts", "moe_top_k", "moe_every", "dtype", "kv_heads"])
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
            )
        except InputError as e:
            if e.field.startswith("architecture"):
                raise InputError(e.reason, field + e.field[len("architecture"):])
            raise

    def to_dict(self) -> dict:
        d = {
            "layers": self.layers, "hidden": self.hidden, "heads": self.heads, "seq_len": self.seq_len,
            "vocab": self.vocab, "ffn_ratio": self.ffn_ratio, "moe_experts": self.moe_experts,
            "moe_top_k": self.moe_top_k, "moe_every": self.moe_every, "dtype": self.dtype,
        }
        if self.kv_heads is not None:
            d["kv_heads"] = self.kv_heads
        return d


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
