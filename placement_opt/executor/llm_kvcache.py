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

import math
from typing import Dict, List, Sequence

import numpy as np
import torch

from placement_opt.model import Architecture


def units_per_block(arch: Architecture, tp: int) -> int:
    """Units of one KV block of ``arch`` on one of ``tp`` GPUs (K and V of every layer and local KV head)."""
    return 2 * arch.layers * (arch.kv_heads or arch.heads) // tp


def page_units(archs: Sequence[Architecture], tp: int) -> int:
    """Units per page: the gcd of the mesh's LLMs' block unit counts."""
    return math.gcd(*[units_per_block(a, tp) for a in archs])


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
    """One LLM's blocks on one GPU: per request, the pages of each of its blocks."""

    def __init__(self, pool: KVPool, arch: Architecture, tp: int):
        self.pool = pool
        self.kv_heads = (arch.kv_heads or arch.heads) // tp
        self.layers = arch.layers
        self.pages_per_block = units_per_block(arch, tp) // pool.page
        self.blocks: Dict[int, List[List[int]]] = {}
        # unit j of a block (j = (layer x 2 + K|V) x kv_heads + head) lies in its page j // P at j % P
        P = pool.page
        j = torch.arange(units_per_block(arch, tp), device=pool.data.device).reshape(self.layers, 2, self.kv_heads)
        self.slot, self.offset = j // P, j % P  # [layers, 2, kv_heads]

    def ensure(self, r: int, n_blocks: int) -> None:
        """Request ``r`` holds at least ``n_blocks`` blocks."""
        have = self.blocks.setdefault(r, [])
        while len(have) < n_blocks:
            have.append(self.pool.take(self.pages_per_block))

    def release(self, r: int) -> None:
        """Free every block of request ``r`` (finished or preempted)."""
        for pages in self.blocks.pop(r, []):
            self.pool.give(pages)

    def page_table(self, requests: Sequence[int], n_blocks: int) -> np.ndarray:
        """Pages of the first ``n_blocks`` blocks of each request, [len(requests), n_blocks,
        pages per block] (0, the scratch page, past a request's blocks)."""
        out = np.zeros((len(requests), n_blocks, self.pages_per_block), dtype=np.int64)
        for i, r in enumerate(requests):
            bl = self.blocks.get(r, [])[:n_blocks]
            if bl:
                out[i, :len(bl)] = bl
        return out

    def units(self, pages: torch.Tensor, layer: int, kv: int) -> torch.Tensor:
        """Unit ids of ``layer``'s K (0) or V (1) heads in the blocks ``pages`` [..., pages per
        block] -> [..., kv_heads]."""
        slot, off = self.slot[layer, kv], self.offset[layer, kv]
        return pages[..., slot] * self.pool.page + off


class PrefillWrite:
    """Where a prefill job's tokens go: every valid position of every prompt."""

    def __init__(self, cache: LLMCache, requests: Sequence[int], lengths: Sequence[int]):
        device = cache.pool.data.device
        block = cache.pool.block
        rows, offs = [], []
        for r, n in zip(requests, lengths):
            pages = cache.page_table([r], (n + block - 1) // block)[0]  # [blocks, ppb]
            pos = np.arange(n)
            rows.append(pages[pos // block])
            offs.append(pos % block)
        self.cache = cache
        self.pages = torch.as_tensor(np.concatenate(rows), device=device)  # [tokens, ppb]
        self.offs = torch.as_tensor(np.concatenate(offs), device=device)  # [tokens]

    def write_prefill(self, layer: int, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor) -> None:
        """Scatter the valid tokens' K and V ([b, L, kv_heads, hd]) into their blocks."""
        data, offs = self.cache.pool.data, self.offs.unsqueeze(1)
        data[self.cache.units(self.pages, layer, 0), offs] = k[valid]
        data[self.cache.units(self.pages, layer, 1), offs] = v[valid]


class DecodeInputs:
    """The static inputs of a decode step of up to ``batch`` requests reading up to
    ``n_blocks`` blocks each (CUDA graphs replay on them): tokens, positions, page tables,
    the new token's pages and offsets, and the attention mask. Rows past the batch point at
    the scratch page."""

    def __init__(self, cache: LLMCache, batch: int, n_blocks: int):
        device = cache.pool.data.device
        self.cache, self.batch, self.n_blocks = cache, batch, n_blocks
        ppb, block = cache.pages_per_block, cache.pool.block
        self.tokens = torch.zeros(batch, dtype=torch.long, device=device)
        self.pos = torch.zeros(batch, dtype=torch.long, device=device)
        self.pages = torch.zeros((batch, n_blocks, ppb), dtype=torch.long, device=device)
        self.new_pages = torch.zeros((batch, ppb), dtype=torch.long, device=device)
        self.new_offs = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.mask = torch.ones((batch, 1, 1, n_blocks * block), dtype=torch.bool, device=device)
        self._span = np.arange(n_blocks * block)

    def fill(self, requests: Sequence[int], tokens: Sequence[int], positions: Sequence[int]) -> None:
        """Load one step: request ``requests[i]`` feeds ``tokens[i]`` at ``positions[i]``."""
        n, block = len(requests), self.cache.pool.block
        table = np.zeros((self.batch, self.n_blocks, self.cache.pages_per_block), dtype=np.int64)
        table[:n] = self.cache.page_table(requests, self.n_blocks)
        pos = np.zeros(self.batch, dtype=np.int64)
        pos[:n] = positions
        tok = np.zeros(self.batch, dtype=np.int64)
        tok[:n] = tokens
        rows = np.arange(self.batch)
        new_pages = table[rows, pos // block]
        new_pages[n:] = 0
        self.tokens.copy_(torch.from_numpy(tok))
        self.pos.copy_(torch.from_numpy(pos))
        self.pages.copy_(torch.from_numpy(table))
        self.new_pages.copy_(torch.from_numpy(new_pages))
        self.new_offs.copy_(torch.from_numpy((pos % block)[:, None]))
        self.mask.copy_(torch.from_numpy(self._span[None, :] <= pos[:, None])[:, None, None, :])

    def write_token(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the new token's K and V ([B, kv_heads, hd]) at its position."""
        data = self.cache.pool.data
        data[self.cache.units(self.new_pages, layer, 0), self.new_offs] = k
        data[self.cache.units(self.new_pages, layer, 1), self.new_offs] = v

    def gather(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every request's K and V of ``layer`` as [B, kv_heads, n_blocks x block, hd]."""
        data = self.cache.pool.data
        B, M = self.batch, self.n_blocks

        def one(kv: int) -> torch.Tensor:
            # index [B, kvh, M] (the small index is transposed, not the gathered values), so the
            # gather's result [B, kvh, M, block, hd] is already the layout SDPA reads: one copy
            x = data[self.cache.units(self.pages, layer, kv).transpose(1, 2).contiguous()]
            return x.view(B, self.cache.kv_heads, M * self.cache.pool.block, -1)

        return one(0), one(1)
