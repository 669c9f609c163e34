"""Shared fixtures of the LLM tests: instance and data paths."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MUX = os.path.join(ROOT, "instances", "muxserve")
SMALL = os.path.join(MUX, "small-4llm-4gpu.json")
ABLATION = os.path.join(MUX, "adbs-ablation.json")
TABLES = os.path.join(ROOT, "placement_opt", "data", "muxserve")
