"""Disjoint SM partitions for colocated LLMs: CUDA green contexts made through the driver API.

``torch.cuda.green_contexts.GreenContext.create(num_sms=n)`` splits the *whole* device's SMs
for every context it makes, so two contexts of 32 SMs are the same 32 SMs (the split is
deterministic; the first H100 run measured two such half-GPU contexts at 1.93x one alone):
colocated LLMs would then share a few SMs and leave the rest idle. MuxServe gives each LLM its
own share of the GPU, so this module makes the groups itself with the driver API.

**One split of the whole device.** ``cuDevSmResourceSplitByCount`` cuts the device's SM resource
into equal groups (``result``) that the driver promises to be "a disjoint set of symmetrical
partitions", and a ``remainder`` without those performance guarantees. The groups are of the
coarsest size that divides every LLM's SM count (a multiple of the architecture's co-scheduled
alignment, 8 SMs from compute capability 9.0); each LLM gets as many groups as its count needs,
dealt round the LLMs one at a time, and its green context is made from those groups together
(``cuDevResourceGenerateDesc`` takes several outputs of one split). Equal shares therefore get one
group each. When no size gives enough groups, the next finer size is tried. (On an H200 only
equal shares, one group each, have run so far; several groups per context are the driver's
documented API, tested here on a fake driver.)

**Sequential splits, the fallback.** Only when no single split has enough groups does each LLM's
group come from what the previous splits left (the driver refuses to split a split's output again
with ``CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION``, CUresult 915, so the remainder first becomes a
green context whose SM resource the next split takes, ``cuGreenCtxGetDevResource``). This was the
only way up to engine generation v3s, and its groups are not equally fast: on an H200, the fifth of
five 24-SM groups ran a decode step alone 14-20% slower than the first four
(``docs/fidelity-llm.md``); the groups of one split measured within 0.6%.

One stream pair per context (``cuGreenCtxStreamCreate``), wrapped for torch as
``torch.cuda.ExternalStream``. The driver structures are opaque byte buffers; arrays of
``CUdevResource`` are strided by its size (:data:`RESOURCE_STRIDE`); the SM count of each context is
read back from the driver (for a context of several groups: all of them) and reported, with the
layout that made the groups. Any failure raises
:class:`GreenContextError`; the engine then falls back (torch's green contexts, then plain
streams) and says so.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from placement_opt.costs.sm_partition import share_sms, sm_granularity

RESOURCE_BYTES = 1024  # more than sizeof(CUdevResource) in every CUDA 12.4+ / 13 header
RESOURCE_STRIDE = 144  # sizeof(CUdevResource) (RESOURCE_ABI_VERSION 1, CUDA 12.4-13.x): an array's stride
SM_COUNT_OFFSET = 96  # CUdevResource: type (4 bytes), 92 bytes of padding, then the union (sm.smCount first)
ALIGNMENT_OFFSET = 104  # sm.smCoscheduledAlignment (after smCount and minSmPartitionSize; 0 in older drivers)
CU_DEV_RESOURCE_TYPE_SM = 1
CU_GREEN_CTX_DEFAULT_STREAM = 1
CU_STREAM_NON_BLOCKING = 1
ONE_SPLIT, SEQUENTIAL = "one-split", "sequential-splits"  # how the groups were made (Partition.layout)


class GreenContextError(RuntimeError):
    """The driver could not make the partitions (too old, unsupported, or too many SMs asked)."""


@dataclass
class Partition:
    """One green context's streams (prefill, decode), its real SM count and how it was made."""

    streams: Tuple[Any, Any]
    sm_count: int
    handle: int  # the CUgreenCtx, kept so the context lives as long as its streams
    remainder_handle: int = 0  # sequential splits: the context of the SMs left (the next split's input)
    layout: str = ""  # ONE_SPLIT (with group_sms) or SEQUENTIAL
    group_sms: int = 0  # ONE_SPLIT: the SMs of each group of the split


def sm_counts(shares: Sequence[float], total_sms: int, capability: Tuple[int, int]) -> List[int]:
    """SMs asked for each share (:func:`~placement_opt.costs.sm_partition.share_sms`: rounded
    down to the architecture's granule, the rule the cost tables interpolate by)."""
    g = sm_granularity(capability)
    return [share_sms(s, total_sms, g) for s in shares]


def group_sizes(counts: Sequence[int], alignment: int) -> List[int]:
    """Sizes of one split's groups that serve every count, coarsest first: the multiples of
    ``alignment`` that divide every count (none when a count is not a multiple of it)."""
    common = 0
    for c in counts:
        common = math.gcd(common, c)
    return [d for d in range(common, 0, -alignment) if common % d == 0] if common % alignment == 0 else []


def deal(needs: Sequence[int]) -> List[List[int]]:
    """Group indices per LLM when LLM ``i`` needs ``needs[i]`` groups of one split: dealt one at a
    time round the LLMs still short, so each LLM's groups spread over the split's order."""
    picks: List[List[int]] = [[] for _ in needs]
    k = 0
    while any(len(p) < n for p, n in zip(picks, needs)):
        for p, n in zip(picks, needs):
            if len(p) < n:
                p.append(k)
                k += 1
    return picks


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


def _u32(raw: bytes, offset: int) -> int:
    return int.from_bytes(raw[offset:offset + 4], "little")


def _descriptor(lib: Any, resources: Any, n: int = 1) -> Any:
    """A resource descriptor (c_void_p) of the ``n`` resources of the array ``resources``
    (several only when they are outputs of one split)."""
    desc = ctypes.c_void_p()
    _check(lib.cuDevResourceGenerateDesc(ctypes.byref(desc), resources, ctypes.c_uint(n)), "cuDevResourceGenerateDesc")
    return desc


def _context(lib: Any, desc: Any, device: Any) -> Any:
    """A green context (CUgreenCtx as c_void_p) on the resources of the descriptor ``desc``."""
    ctx = ctypes.c_void_p()
    _check(lib.cuGreenCtxCreate(ctypes.byref(ctx), desc, device, ctypes.c_uint(CU_GREEN_CTX_DEFAULT_STREAM)),
           "cuGreenCtxCreate")
    return ctx


def _green_context(lib: Any, resource: Any, device: Any) -> Any:
    """A green context holding the SMs of the one resource ``resource``."""
    return _context(lib, _descriptor(lib, resource), device)


def _streams(lib: Any, ctx: Any, torch: Any, device_index: int) -> Tuple[Any, Any]:
    """A prefill and a decode stream on the green context ``ctx``."""
    streams = []
    for _ in range(2):
        handle = ctypes.c_void_p()
        _check(lib.cuGreenCtxStreamCreate(ctypes.byref(handle), ctx, ctypes.c_uint(CU_STREAM_NON_BLOCKING),
                                          ctypes.c_int(0)), "cuGreenCtxStreamCreate")
        streams.append(torch.cuda.ExternalStream(handle.value, device=torch.device("cuda", device_index)))
    return streams[0], streams[1]


def _sm_count(resource: Any, fallback: int) -> int:
    real = _u32(resource.raw, SM_COUNT_OFFSET)
    return real if 0 < real <= 4096 else fallback


def _context_sms(lib: Any, ctx: Any, asked: int) -> int:
    """The SMs the green context ``ctx`` holds, as the driver reads them back (``asked`` when it
    gives no count): for a context of several groups, the check that it took them all."""
    resource = ctypes.create_string_buffer(RESOURCE_BYTES)
    _check(lib.cuGreenCtxGetDevResource(ctx, resource, ctypes.c_int(CU_DEV_RESOURCE_TYPE_SM)), "cuGreenCtxGetDevResource")
    return _sm_count(resource, asked)


def _split(lib: Any, whole: Any, size: int, n: int) -> Optional[List[bytes]]:
    """The ``n`` groups (CUdevResource bytes) of one split of ``whole`` into groups of ``size``
    SMs, or None when the driver makes fewer, or groups of another size (it rounds a size up to
    its granularity), or refuses the size."""
    n_ref = ctypes.c_uint(n)
    groups = ctypes.create_string_buffer(RESOURCE_STRIDE * n + RESOURCE_BYTES)
    if lib.cuDevSmResourceSplitByCount(groups, ctypes.byref(n_ref), whole, None, ctypes.c_uint(0),
                                       ctypes.c_uint(size)) != 0 or n_ref.value < n:
        return None
    out = [groups.raw[j * RESOURCE_STRIDE:(j + 1) * RESOURCE_STRIDE] for j in range(n)]
    return out if all(_u32(g, SM_COUNT_OFFSET) == size for g in out) else None


def _groups_descriptor(lib: Any, groups: List[bytes]) -> Tuple[Any, Any]:
    """The descriptor of ``groups`` (outputs of one split) together, and the resource array it was
    made from (kept by the caller until its context exists: the driver API does not say that the
    descriptor copies it)."""
    array = ctypes.create_string_buffer(b"".join(groups) + bytes(RESOURCE_BYTES))
    return _descriptor(lib, array, len(groups)), array


def _sequential_splits(lib: Any, device: Any, whole: Any, device_index: int, counts: Sequence[int],
                       torch: Any) -> List[Partition]:
    """Partitions each split from what the previous splits left (see the module's docstring)."""
    left = whole
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
        out.append(Partition(streams=_streams(lib, ctx, torch, device_index), sm_count=_sm_count(group, n),
                             handle=int(ctx.value or 0), layout=SEQUENTIAL))
        if i + 1 < len(counts):  # a remainder cannot be split again: make it a context, split that context's SMs
            rest_ctx = _green_context(lib, rest, device)
            out[-1].remainder_handle = int(rest_ctx.value or 0)
            left = ctypes.create_string_buffer(RESOURCE_BYTES)
            _check(lib.cuGreenCtxGetDevResource(rest_ctx, left, ctypes.c_int(CU_DEV_RESOURCE_TYPE_SM)),
                   "cuGreenCtxGetDevResource")
    return out


def disjoint_partitions(device_index: int, counts: Sequence[int], torch: Any, lib: Any = None) -> List[Partition]:
    """One green context per entry of ``counts`` (SMs), on disjoint SMs of ``device_index``,
    each with a prefill and a decode stream (``lib``: the driver library, loaded when None):
    from one split of the whole device when one serves every count, else (also when the driver
    refuses a context of several groups) from sequential splits. Raises GreenContextError."""
    lib = lib if lib is not None else _driver()
    device = ctypes.c_int()
    _check(lib.cuDeviceGet(ctypes.byref(device), ctypes.c_int(device_index)), "cuDeviceGet")
    whole = ctypes.create_string_buffer(RESOURCE_BYTES)
    _check(lib.cuDeviceGetDevResource(device, whole, ctypes.c_int(CU_DEV_RESOURCE_TYPE_SM)), "cuDeviceGetDevResource")
    alignment = _u32(whole.raw, ALIGNMENT_OFFSET) or 2  # 0: a driver older than the field (_split checks sizes)
    for size in group_sizes(counts, alignment):
        needs = [c // size for c in counts]
        groups = _split(lib, whole, size, sum(needs))
        if groups is None:
            continue
        try:  # every descriptor first: a driver that refuses several groups in one leaves nothing to undo
            descs = [_groups_descriptor(lib, [groups[j] for j in picks]) for picks in deal(needs)]
        except GreenContextError:
            break
        out = []
        for (desc, _array), n in zip(descs, needs):
            ctx = _context(lib, desc, device)
            out.append(Partition(streams=_streams(lib, ctx, torch, device_index),
                                 sm_count=_context_sms(lib, ctx, size * n), handle=int(ctx.value or 0),
                                 layout=ONE_SPLIT, group_sms=size))
        return out
    return _sequential_splits(lib, device, whole, device_index, counts, torch)


@dataclass
class SMPlan:
    """How a GPU's SMs were divided: per LLM its (prefill, decode) streams and SM count."""

    streams: List[Tuple[Any, Any]]
    sm_counts: List[int]
    mechanism: str  # green-contexts, green-contexts-overlapping or streams
    fallback: str = ""  # why a less exact mechanism runs
    keep: Tuple[Any, ...] = ()  # objects that must live as long as the streams
    layout: str = ""  # green-contexts: how the groups were made, e.g. "one-split of 24-SM groups"


def layout_of(parts: Sequence[Partition]) -> str:
    """The layout of disjoint partitions in words: "one-split of N-SM groups" or "sequential-splits"."""
    if any(p.layout == SEQUENTIAL for p in parts):
        return SEQUENTIAL
    return f"{ONE_SPLIT} of {parts[0].group_sms}-SM groups" if parts else ""


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
        return SMPlan(streams, real, "green-contexts", keep=tuple(parts), layout=layout_of(parts))
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
