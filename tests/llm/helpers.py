"""Shared fixtures of the LLM tests: instance and data paths, and the benchmark scripts they test."""

import importlib.util
import os
import sys
from types import ModuleType

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MUX = os.path.join(ROOT, "instances", "muxserve")
SMALL = os.path.join(MUX, "small-4llm-4gpu.json")
ABLATION = os.path.join(MUX, "adbs-ablation.json")
TABLES = os.path.join(ROOT, "placement_opt", "data", "muxserve")


def load_benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as a module (registered in ``sys.modules``: its
    dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
