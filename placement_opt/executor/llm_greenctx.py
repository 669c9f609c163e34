"""Disjoint SM partitions for colocated LLMs: CUDA green contexts made through the driver API.

``torch.cuda.green_contexts.GreenContext.create(num_sms=n)`` splits the *whole* device's SMs
for every context it makes, so two contexts of 32 SMs are the same 32 SMs (the split is
deterministic; the first H100 run measured two such half-GPU contexts at 1.93x one alone):
colocated LLMs would then share a few SMs and leave the rest idle. MuxServe gives each LLM its
own share of the GPU, so this module splits the device's SM resource *in sequence* (each split
takes its group from what the previous ones left) with ``cuDevSmResourceSplitByCount``, makes
one green context per group and one stream per context (``cuGreenCtxStreamCreate``), wrapped
for torch as ``torch.cuda.ExternalStream``.

The driver refuses to split a split's output again (the remainder included) with
``CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION`` (CUresult 915; the driver API documents "the
output results cannot be split again without first creating a descriptor and a green context
with that descriptor"): so after each split the remainder becomes a green context of its own
and the next split takes that context's SM resource (``cuGreenCtxGetDevResource``). Groups on
compute capability 9.x+ are multiples of 8 SMs (at least 8); the driver rounds up, the counts
asked here are rounded down first so the shares fit side by side.

The driver structures are handled as opaque, generously sized byte buffers (only one group
per split, so no array stride is needed); the SM count of each group is read back from its
``CUdevSmResource`` (offset 96 of ``CUdevResource`` since CUDA 12.4) and reported. Any failure
raises :class:`GreenContextError`; the engine then falls back (torch's green contexts, then
plain streams) and says so.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

RESOURCE_BYTES = 1024  # more than sizeof(CUdevResource) in every CUDA 12.4+ / 13 header
SM_COUNT_OFFSET = 96  # CUdevResource: type (4 bytes), 92 bytes of padding, then the union (sm.smCount first)
CU_DEV_RESOURCE_TYPE_SM = 1
CU_GREEN_CTX_DEFAULT_STREAM = 1
CU_STREAM_NON_BLOCKING = 1


class GreenContextError(RuntimeError):
    """The driver could not make the partitions (too old, unsupported, or too many SMs asked)."""


@dataclass
class Partition:
    """One green context's streams (prefill, decode) and its real SM count."""

    streams: Tuple[Any, Any]
    sm_count: int
    handle: int  # the CUgreenCtx, kept so the context lives as long as its streams
    remainder_handle: int = 0  # the context of the SMs left after this split (the next split's input)


def sm_granularity(capability: Tuple[int, int]) -> int:
    """SMs a green-context group is a multiple of: 8 from compute capability 9.0, 2 before."""
    return 8 if capability[0] >= 9 else 2


def sm_counts(shares: Sequence[float], total_sms: int, capability: Tuple[int, int]) -> List[int]:
    """SMs asked for each share: the share of ``total_sms`` rounded *down* to the granularity
    (so shares summing to at most 1 fit side by side), at least one granule."""
    g = sm_granularity(capability)
    return [min(total_sms, max(g, g * math.floor(s * total_sms / g + 1e-9))) for s in shares]


def _driver() -> Any:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise GreenContextError(f"no CUDA driver library: {e}") from None
    for name in ("cuDeviceGet", "cuDeviceGetDevResource", "cuDevSmResourceSplitByCount", "cuDevResourceGenerateDesc",
                 "cuGreenCtxCreate", "cuGreenCtxStreamCreate", "cuGreenCtxGetDevResource"):
        if not hasattr(lib, name):
            raise GreenContextError(f"the CUDA driver lacks {name} (green contexts need CUDA 12.4+)")
    return lib


def _check(result: int, call: str) -> None:
    if result != 0:
        raise GreenContextError(f"{call} failed with CUresult {result}")


def _green_context(lib: Any, resource: Any, device: Any) -> Any:
    """A green context (CUgreenCtx as c_void_p) holding the SMs of ``resource``."""
    desc = ctypes.c_void_p()
    _check(lib.cuDevResourceGenerateDesc(ctypes.byref(desc), resource, ctypes.c_uint(1)), "cuDevResourceGenerateDesc")
    ctx = ctypes.c_void_p()
    _check(lib.cuGreenCtxCreate(ctypes.byref(ctx), desc, device, ctypes.c_uint(CU_GREEN_CTX_DEFAULT_STREAM)),
           "cuGreenCtxCreate")
    return ctx


def _sm_count(resource: Any, fallback: int) -> int:
    real = int.from_bytes(resource.raw[SM_COUNT_OFFSET:SM_COUNT_OFFSET + 4], "little")
    return real if 0 < real <= 4096 else fallback


def disjoint_partitions(device_index: int, counts: Sequence[int], torch: Any, lib: Any = None) -> List[Partition]:
    """One green context per entry of ``counts`` (SMs), on disjoint SMs of ``device_index``,
    each with a prefill and a decode stream (``lib``: the driver library, loaded when None).
    Raises GreenContextError."""
    lib = lib if lib is not None else _driver()
    device = ctypes.c_int()
    _check(lib.cuDeviceGet(ctypes.byref(device), ctypes.c_int(device_index)), "cuDeviceGet")
    left = ctypes.create_string_buffer(RESOURCE_BYTES)
    _check(lib.cuDeviceGetDevResource(device, left, ctypes.c_int(CU_DEV_RESOURCE_TYPE_SM)), "cuDeviceGetDevResource")
    out: List[Partition] = []
    for i, n in enumerate(counts):
        group = ctypes.create_string_buffer(RESOURCE_BYTES)
        rest = ctypes.create_string_buffer(RESOURCE_BYTES)
        n_groups = ctypes.c_uint(1)
        _check(lib.cuDevSmResourceSplitByCount(group, ctypes.byref(n_groups), left, rest, ctypes.c_uint(0),
                                               ctypes.c_uint(n)),
               f"cuDevSmResourceSplitByCount({n} SMs of {_sm_count(left, 0)} left)")
        if n_groups.value != 1:
            raise GreenContextError(f"not enough SMs left for a group of {n}")
        ctx = _green_context(lib, group, device)
        streams = []
        for _ in range(2):
            handle = ctypes.c_void_p()
            _check(lib.cuGreenCtxStreamCreate(ctypes.byref(handle), ctx, ctypes.c_uint(CU_STREAM_NON_BLOCKING),
                                              ctypes.c_int(0)), "cuGreenCtxStreamCreate")
            streams.append(torch.cuda.ExternalStream(handle.value, device=torch.device("cuda", device_index)))
        out.append(Partition(streams=(streams[0], streams[1]), sm_count=_sm_count(group, n),
                             handle=int(ctx.value or 0)))
        if i + 1 < len(counts):  # a remainder cannot be split again: make it a context, split that context's SMs
            rest_ctx = _green_context(lib, rest, device)
            out[-1].remainder_handle = int(rest_ctx.value or 0)
            _check(lib.cuGreenCtxGetDevResource(rest_ctx, left, ctypes.c_int(CU_DEV_RESOURCE_TYPE_SM)),
                   "cuGreenCtxGetDevResource")
    return out


@dataclass
class SMPlan:
    """How a GPU's SMs were divided: per LLM its (prefill, decode) streams and SM count."""

    streams: List[Tuple[Any, Any]]
    sm_counts: List[int]
    mechanism: str  # green-contexts, green-contexts-overlapping or streams
    fallback: str = ""  # why a less exact mechanism runs
    keep: Tuple[Any, ...] = ()  # objects that must live as long as the streams


def partition_sms(device: Any, shares: Sequence[float], torch: Any, green: bool = True) -> SMPlan:
    """Streams for LLMs of ``shares`` on ``device``: disjoint green contexts for the shares
    below 1; else torch's green contexts (which may overlap); else plain streams. An LLM with
    every SM gets plain streams."""
    props = torch.cuda.get_device_properties(device)
    total = props.multi_processor_count
    counts = sm_counts(shares, total, (props.major, props.minor))
    partial = [i for i, s in enumerate(shares) if s < 1.0]

    def plain() -> Tuple[Any, Any]:
        return torch.cuda.Stream(device), torch.cuda.Stream(device)

    if not green or not partial:
        return SMPlan([plain() for _ in shares], [total] * len(shares), "streams")
    try:
        parts = disjoint_partitions(device.index or 0, [counts[i] for i in partial], torch)
        streams, real = [plain() for _ in shares], [total] * len(shares)
        for i, p in zip(partial, parts):
            streams[i], real[i] = p.streams, p.sm_count
        return SMPlan(streams, real, "green-contexts", keep=tuple(parts))
    except GreenContextError as e:
        reason = f"disjoint green contexts: {e}"
    try:
        from torch.cuda.green_contexts import GreenContext

        streams, ctxs = [plain() for _ in shares], []
        for i in partial:
            ctx = GreenContext.create(num_sms=counts[i], device_id=device.index or 0)
            ctxs.append(ctx)
            streams[i] = (ctx.Stream(), ctx.Stream())
        real = [counts[i] if i in partial else total for i in range(len(shares))]
        return SMPlan(streams, real, "green-contexts-overlapping", reason, tuple(ctxs))
    except Exception as e:  # noqa: BLE001 - any failure of the beta API: plain streams, and say why
        reason += f"; torch green contexts: {type(e).__name__}: {e}"
    return SMPlan([plain() for _ in shares], [total] * len(shares), "streams", reason)
