"""A stage's forward pass captured as one CUDA graph, its tensor-parallel all-reduces included.

Run eagerly, a stage is hundreds of kernel launches from Python, and in a tensor-parallel
stage every one of its all-reduces waits for the slower rank: any host-side delay on either
rank (a late launch, a descheduled thread) stalls both GPUs. Replaying a captured graph
launches the whole stage at once, so the GPUs run it back to back and meet at the
all-reduces on the device, as the profile assumes. The profiler times the same graphs
(``placeopt profile --cuda-graphs``), so profiles and serving measure the same thing.

Capture needs fixed shapes: the executor serves one request (batch 1) at a time, so each
stage has one graph per model, replayed on a static input buffer.
"""

from __future__ import annotations

import torch


class GraphedStage:
    """``stage(input)`` captured once; calling it replays the graph and returns the static output.

    ``input`` is the static buffer the graph reads: copy (or receive) a request's activations
    into it before calling. The returned tensor is overwritten by the next call. Every rank of
    a tensor-parallel group must build its graphs in the same order (their collectives pair up
    during the eager warm-up that precedes capture).
    """

    def __init__(self, stage: torch.nn.Module, static_input: torch.Tensor, warmup: int = 2):
        device = static_input.device
        self.input = static_input
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up off the capture stream, as CUDA graphs require
            for _ in range(warmup):
                stage(static_input)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = stage(static_input)
        torch.cuda.synchronize(device)

    def __call__(self) -> torch.Tensor:
        self.graph.replay()
        return self.output
