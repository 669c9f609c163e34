"""Eq. 3 estimator vs mesh simulator, per LLM, on the measured fidelity instances.

For every placement of ``instances/fidelity-llm`` whose instance has a calibrated twin under
``measured/`` (the 1-GPU set and ``tp2/``), prints each LLM's simulated throughput and the
estimator's (``placement_estimates``) with the estimator blind to the decode models
``llm.decode_kv_gbps``, ``llm.own_prefill_decode_share``, ``llm.decode_full_stretch``,
``llm.decode_full_request_s`` and ``llm.decode_attention_sms`` (set to 0 for the estimate only: what the estimator computed before
it had them) and with them. The simulator always runs with the instance's settings.
``--own-share F`` sets ``own_prefill_decode_share`` on the instances first (the measured
instances carry the calibrated value of ``benchmarks/fidelity/llm/calibration.json``, 0.25: the
option tries another). ``--blind F1,F2`` names the ``llm`` fields set to 0 for the "before"
estimate instead (e.g. ``prefill_eager_hold_s,prefill_host_tp_s``: the estimator before it had
the eager thread hold and the TP prefill collect). ``--calibration FILE`` sets the instances'
``llm`` fields to those of a fidelity calibration file first (e.g.
``benchmarks/fidelity/llm/calibration-v3f.json``, whose prefill stretch beside others the
estimator follows in mean-value form: ``--blind prefill_beside_gbps,prefill_beside_requests``).

Run: ``python benchmarks/estimator_vs_sim.py [--own-share 0.25] [--rate-scale 3] [--blind F1,F2]
[--calibration FILE]``. Last line:
``mean_abs_err_before=<x> mean_abs_err_after=<y> pairs=<n>`` (relative per-LLM errors of
the estimate against the simulation, over the LLMs with a non-zero simulated throughput). At the instances' rates
most estimates are capped at the rate (Eq. 3's ``min(..., rate)``) and the decode models
move few of them; ``--rate-scale 3`` saturates the LLMs so that the estimates are capacities.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
from dataclasses import replace
from typing import Dict, List, Tuple

from placement_opt.instance import Instance, instance_from_dict
from placement_opt.placement import load_placement
from placement_opt.settings import LLMConfig
from placement_opt.simulate.llm import simulate_llm
from placement_opt.solvers.llm_estimator import placement_estimates

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "instances", "fidelity-llm")
SETS = (("", ROOT), ("tp2", os.path.join(ROOT, "tp2")))
DECODE_MODELS = ("decode_kv_gbps", "own_prefill_decode_share", "decode_full_stretch", "decode_full_request_s",
                 "decode_attention_sms")


def _with(instance: Instance, **fields: float) -> Instance:
    """``instance`` with the given ``llm`` settings replaced."""
    return replace(instance, llm=replace(instance.llm_settings, **fields))


def calibrated(instance: Instance, path: str) -> Instance:
    """``instance`` with the ``llm`` fields of the calibration file ``path`` (its fit record left
    out), read and checked as an instance's ``llm`` section is (``LLMConfig.from_dict``)."""
    with open(path) as f:
        cal = {k: v for k, v in json.load(f).items() if k != "fit"}
    return replace(instance, llm=LLMConfig.from_dict({**instance.llm_settings.to_dict(), **cal}, path))


def load_scaled(path: str, rate_scale: float) -> Instance:
    """The instance at ``path`` with every Poisson rate of its workload x ``rate_scale`` (its
    requests re-drawn at those rates)."""
    with open(path) as f:
        data = json.load(f)
    for spec in data["workload"].get("per_model", {}).values():
        if "rate" in spec:
            spec["rate"] *= rate_scale
    return instance_from_dict(data, base_dir=os.path.dirname(path), path=path)


def cases() -> List[Tuple[str, str, str]]:
    """(label, measured instance path, placement path) of every placement with a measured instance."""
    out = []
    for label, folder in SETS:
        for placement in sorted(glob.glob(os.path.join(folder, "*.placement.json"))):
            base = os.path.basename(placement).rsplit("-", 1)[0]
            measured = os.path.join(folder, "measured", base + ".json")
            if os.path.exists(measured):
                name = os.path.basename(placement).replace(".placement.json", "")
                out.append((f"{label}/{name}" if label else name, measured, placement))
    return out


def compare(instance: Instance, placement_path: str,
            blind_fields: Tuple[str, ...] = DECODE_MODELS) -> Dict[str, Tuple[float, float, float]]:
    """Per LLM: (simulated, estimate blind to ``blind_fields`` (0), estimate with them)."""
    placement = load_placement(placement_path)
    sim = simulate_llm(instance, placement)["per_model"]
    blind = placement_estimates(_with(instance, **{f: 0.0 for f in blind_fields}), placement)
    seen = placement_estimates(instance, placement)
    return {m: (sim[m]["throughput_rps"], blind[m], seen[m]) for m in seen}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--own-share", type=float, default=None,
                    help="set llm.own_prefill_decode_share on the instances first (default: as they are)")
    ap.add_argument("--rate-scale", type=float, default=1.0,
                    help="multiply every workload rate (requests re-drawn): > 1 saturates the LLMs, so the "
                         "estimates are capacities rather than the rates they cap at")
    ap.add_argument("--blind", default=",".join(DECODE_MODELS),
                    help="comma-separated llm fields set to 0 for the 'before' estimate "
                         "(default: the two decode models)")
    ap.add_argument("--calibration", default=None,
                    help="a fidelity calibration file whose llm fields the instances take first")
    args = ap.parse_args()
    before: List[float] = []
    after: List[float] = []
    print(f"{'placement':<24} {'llm':<10} {'sim':>8} {'est before':>11} {'err':>7} {'est after':>10} {'err':>7}")
    blind_fields = tuple(f for f in args.blind.split(",") if f)
    for label, inst_path, placement_path in cases():
        instance = load_scaled(inst_path, args.rate_scale)
        if args.calibration:
            instance = calibrated(instance, args.calibration)
        if args.own_share is not None:
            instance = _with(instance, own_prefill_decode_share=args.own_share)
        for m, (sim, blind, seen) in compare(instance, placement_path, blind_fields).items():
            if sim <= 0:
                continue
            e0, e1 = blind / sim - 1, seen / sim - 1
            before.append(abs(e0))
            after.append(abs(e1))
            print(f"{label:<24} {m:<10} {sim:8.3f} {blind:11.3f} {e0:+7.1%} {seen:10.3f} {e1:+7.1%}")
    n = len(before)
    if n == 0:
        raise SystemExit("estimator_vs_sim: no LLM with a non-zero simulated throughput to compare")
    print(f"mean_abs_err_before={sum(before) / n:.4f} mean_abs_err_after={sum(after) / n:.4f} pairs={n}")


if __name__ == "__main__":
    main()
