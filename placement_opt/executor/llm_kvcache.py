"""The paged KV cache of one mesh: one pool of pages shared by all its LLMs.

Accounting (what may be admitted, quotas, preemption) is the scheduler's, in the
simulator's units (:mod:`.llm_sched`: KiB, blocks of ``kv_block_tokens`` tokens); this
module only stores the K and V of the blocks the scheduler grants, on each GPU.

Layout: a *unit* is ``block`` tokens x ``head_dim`` values of one layer's K or V of one KV
head. One block of LLM ``k`` is ``2 x layers x kv_heads / tp`` units; units come in *pages*
of ``P`` units, ``P`` the greatest common divisor of the blocks' unit counts of the mesh's
LLMs, so every LLM's block is a whole number of pages taken anywhere in the pool (no
fragmentation: any free pages do). The pool is one tensor ``[pages x P, block, head_dim]``;
page 0 is scratch (padding rows of a batch write there and read nothing else).

Size: the simulator's pool rule (``mesh_kv_pool_bytes``: usable memory x GPUs x (1 -
reserve) - weights) at the architecture's dtype, per GPU, capped at what the replayed
requests could ever hold at once (so CPU runs stay small). The simulator charges every
block in whole KiB per token, at least its bytes, so the pool never runs out before the
scheduler's accounting does.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from placement_opt.llm_units import units_per_block
from placement_opt.model import Architecture


class KVPool:
    """One GPU's pool of pages and its free list."""

    def __init__(self, n_pages: int, page: int, block: int, head_dim: int, device: torch.device, dtype: torch.dtype):
        self.page, self.block, self.head_dim = page, block, head_dim
        self.data = torch.zeros(((n_pages + 1) * page, block, head_dim), device=device, dtype=dtype)
        self.free: List[int] = list(range(n_pages, 0, -1))  # page 0 is scratch
        self.n_pages = n_pages

    def take(self, n: int) -> List[int]:
        """``n`` free pages; raises RuntimeError when the pool has fewer (an accounting bug)."""
        if n > len(self.free):
            raise RuntimeError(f"KV pool exhausted: {n} pages asked, {len(self.free)} free of {self.n_pages}")
        taken = self.free[-n:]
        del self.free[-n:]
        return taken

    def give(self, pages: Sequence[int]) -> None:
        self.free.extend(pages)

    @property
    def used_pages(self) -> int:
        return self.n_pages - len(self.free)


class LLMCache:
    """One LLM's blocks on one GPU: per request, the pages of each of its blocks, a row per
    block of one array (grown by doubling), so a decode step's page table takes one slice copy
    per request, whatever the pages per block (an entry-by-entry copy cost the host ~45 ns per
    page entry: 3-4 ms per step of a batch of 32 long requests of an LLM whose blocks are 32
    pages, docs/fidelity-llm.md)."""

    def __init__(self, pool: KVPool, arch: Architecture, tp: int):
        self.pool = pool
        self.kv_heads = (arch.kv_heads or arch.heads) // tp
        self.layers = arch.layers
        self.pages_per_block = units_per_block(arch, tp) // pool.page
        self.blocks: Dict[int, np.ndarray] = {}  # request -> [capacity, pages per block] page ids
        self.held: Dict[int, int] = {}  # request -> blocks held (the first rows of its array)
        # unit j of a block (j = (layer x 2 + K|V) x kv_heads + head) lies in its page j // P at j % P
        P = pool.page
        j = torch.arange(units_per_block(arch, tp), device=pool.data.device).reshape(self.layers, 2, self.kv_heads)
        self.slot, self.offset = j // P, j % P  # [layers, 2, kv_heads]

    def ensure(self, r: int, n_blocks: int) -> None:
        """Request ``r`` holds at least ``n_blocks`` blocks."""
        held = self.held.get(r, 0)
        if held >= n_blocks:
            return
        rows = self.blocks.get(r)
        if rows is None or rows.shape[0] < n_blocks:
            grown = np.zeros((max(n_blocks, 2 * (0 if rows is None else rows.shape[0])), self.pages_per_block),
                             dtype=np.int64)
            if rows is not None:
                grown[:held] = rows[:held]
            self.blocks[r] = rows = grown
        taken = self.pool.take((n_blocks - held) * self.pages_per_block)
        rows[held:n_blocks] = np.asarray(taken, dtype=np.int64).reshape(n_blocks - held, self.pages_per_block)
        self.held[r] = n_blocks

    def release(self, r: int) -> None:
        """Free every block of request ``r`` (finished or preempted)."""
        rows = self.blocks.pop(r, None)
        held = self.held.pop(r, 0)
        if rows is not None:
            self.pool.give(rows[:held].ravel().tolist())

    def page_table(self, requests: Sequence[int], n_blocks: int, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Pages of the first ``n_blocks`` blocks of each request, [len(requests), n_blocks,
        pages per block] (0, the scratch page, past a request's blocks), written into ``out``
        (zeros of that shape) when given."""
        if out is None:
            out = np.zeros((len(requests), n_blocks, self.pages_per_block), dtype=np.int64)
        for i, r in enumerate(requests):
            n = min(self.held.get(r, 0), n_blocks)
            if n:
                out[i, :n] = self.blocks[r][:n]
        return out


def _all_layer_units(cache: LLMCache, pages: torch.Tensor) -> torch.Tensor:
    """Unit ids of every layer's K and V heads in the blocks ``pages`` [..., pages per block]
    -> [layers, 2, ..., kv_heads] (computed once per step, not once per layer)."""
    units = pages[..., cache.slot] * cache.pool.page + cache.offset  # [..., layers, 2, kv_heads]
    lead = pages.dim() - 1
    return units.permute(lead, lead + 1, *range(lead), lead + 2)


class PrefillInputs:
    """The static inputs of a prefill of up to ``batch`` prompts padded to ``length`` tokens
    (a CUDA graph per (batch, length) bucket replays on them): token ids, prompt lengths, and
    for every position of the padded batch the pages of its block and its row in the block;
    padding positions point at the scratch page, so the scatter of K and V is one static
    ``index_put`` of all ``batch x length`` rows (no mask, no host sync).

    :meth:`fill` packs a job's integers into one (pinned, on GPUs) host buffer copied with one
    asynchronous transfer; :meth:`begin` (the first thing a prefill runs, inside its graph)
    derives every layer's unit ids on the device."""

    def __init__(self, cache: LLMCache, batch: int, length: int):
        device = cache.pool.data.device
        self.cache, self.batch, self.length = cache, batch, length
        ppb, n = cache.pages_per_block, batch * length
        sizes = [n, batch, n * ppb, n]
        self._host = torch.zeros(sum(sizes), dtype=torch.long, pin_memory=device.type == "cuda")
        self._dev = torch.zeros(sum(sizes), dtype=torch.long, device=device)
        tok, lengths, rows, offs = self._dev.split(sizes)
        self.tokens, self.lengths = tok.view(batch, length), lengths
        self.rows, self.offs = rows.view(n, ppb), offs.view(n, 1)
        self.units = torch.empty(0)  # set by begin()

    @classmethod
    def of(cls, cache: LLMCache, requests: Sequence[int], lengths: Sequence[int]) -> "PrefillInputs":
        """Exactly sized inputs of one job, filled (token ids left 0: the caller passes its own)."""
        inputs = cls(cache, len(requests), max(lengths))
        inputs.fill(requests, lengths, None)
        return inputs

    def fill(self, requests: Sequence[int], lengths: Sequence[int], tokens: Optional[Sequence[Sequence[int]]]) -> None:
        """Load one job: request ``requests[i]``'s first ``lengths[i]`` tokens are ``tokens[i]``
        (their K and V go to its blocks); padding rows and positions write the scratch page."""
        block, B, L, ppb = self.cache.pool.block, self.batch, self.length, self.cache.pages_per_block
        n = B * L
        host = self._host.numpy()
        host[:] = 0
        ids = host[:n].reshape(B, L)
        host[n:n + B] = 1  # padding rows: one (scratch) token
        rows = host[n + B:n + B + n * ppb].reshape(B, L, ppb)
        offs = host[n + B + n * ppb:].reshape(B, L)
        for i, (r, m) in enumerate(zip(requests, lengths)):
            if tokens is not None:
                ids[i, :m] = tokens[i][:m]
            host[n + i] = m
            pos = np.arange(m)
            rows[i, :m] = self.cache.page_table([r], (m + block - 1) // block)[0][pos // block]
            offs[i, :m] = pos % block
        self._dev.copy_(self._host, non_blocking=True)

    def begin(self) -> None:
        """Unit ids of every layer's K and V of every position (computed once per prefill)."""
        self.units = _all_layer_units(self.cache, self.rows)  # [layers, 2, batch x length, kv_heads]

    def write_prefill(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Scatter K and V ([batch, length, kv_heads, hd]) of every position into its block."""
        self.cache.pool.data[self.units[layer], self.offs] = torch.stack((k.flatten(0, 1), v.flatten(0, 1)))


class DecodeInputs:
    """The static inputs of a decode step of up to ``batch`` requests reading up to
    ``n_blocks`` blocks each (CUDA graphs replay on them): tokens, positions, page tables,
    the new token's pages and offsets. Rows past the batch point at the scratch page.

    :meth:`fill` packs a step's integers into one (pinned, on GPUs) host buffer and copies it
    with one asynchronous transfer into the device buffer the views below share; :meth:`begin`
    (the first thing a decode step runs, inside its graph) derives every layer's unit ids and
    the attention mask from them on the device."""

    def __init__(self, cache: LLMCache, batch: int, n_blocks: int):
        device = cache.pool.data.device
        self.cache, self.batch, self.n_blocks = cache, batch, n_blocks
        ppb = cache.pages_per_block
        sizes = [batch, batch, batch * n_blocks * ppb, batch * ppb, batch]
        self._host = torch.zeros(sum(sizes), dtype=torch.long, pin_memory=device.type == "cuda")
        self._dev = torch.zeros(sum(sizes), dtype=torch.long, device=device)
        tok, pos, pages, new_pages, new_offs = self._dev.split(sizes)
        self.tokens, self.pos = tok, pos
        self.pages = pages.view(batch, n_blocks, ppb)
        self.new_pages = new_pages.view(batch, ppb)
        self.new_offs = new_offs.view(batch, 1)
        self._span = torch.arange(n_blocks * cache.pool.block, device=device)
        self.pool_data = cache.pool.data
        self.read_units = self.write_units = self.mask = self.lengths = torch.empty(0)  # set by begin()

    def fill(self, requests: Sequence[int], tokens: Sequence[int], positions: Sequence[int]) -> None:
        """Load one step: request ``requests[i]`` feeds ``tokens[i]`` at ``positions[i]``."""
        n, block, B = len(requests), self.cache.pool.block, self.batch
        host = self._host.numpy()
        host[:] = 0
        host[:n] = tokens
        host[B:B + n] = positions
        table = host[2 * B:2 * B + self.pages.numel()].reshape(self.pages.shape)
        self.cache.page_table(requests, self.n_blocks, table[:n])
        pos = host[B:2 * B]
        new_pages = host[2 * B + self.pages.numel():2 * B + self.pages.numel() + self.new_pages.numel()]
        new_pages.reshape(self.new_pages.shape)[:n] = table[np.arange(n), pos[:n] // block]
        host[-B:] = pos % block
        self._dev.copy_(self._host, non_blocking=True)

    def begin(self, paged: bool = False) -> None:
        """Per-step device work shared by all layers: unit ids of the blocks read
        ([layers, 2, B, kv_heads, n_blocks]) and of the new token's slot, and the valid
        positions: a mask for the gather path, or each request's length for the paged kernel
        (``paged``)."""
        self.read_units = _all_layer_units(self.cache, self.pages).permute(0, 1, 2, 4, 3).contiguous()
        self.write_units = _all_layer_units(self.cache, self.new_pages).contiguous()  # [layers, 2, B, kv_heads]
        if paged:
            self.lengths = self.pos + 1
        else:
            self.mask = (self._span <= self.pos.unsqueeze(1)).view(self.batch, 1, 1, -1)

    def write_token(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the new token's K and V ([B, kv_heads, hd]) at its position."""
        self.cache.pool.data[self.write_units[layer], self.new_offs] = torch.stack((k, v))

    def gather(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every request's K and V of ``layer`` as [B, kv_heads, n_blocks x block, hd]: one
        gather of both (its index [2, B, kvh, M] already in the layout attention reads)."""
        x = self.cache.pool.data[self.read_units[layer]]  # [2, B, kvh, M, block, hd]
        shape = (self.batch, self.cache.kv_heads, self.n_blocks * self.cache.pool.block, -1)
        return x[0].view(shape), x[1].view(shape)
