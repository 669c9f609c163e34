"""Figures: a placement's device map, a simulation's per-model attainment and latencies (LLM:
throughput, TTFT/TPOT, KV and SM utilisation over time), and a sweep's attainment curves.

matplotlib is optional (the ``plots`` extra); :func:`require_matplotlib` turns its absence
into an input error, so the command says so in one line and exits 2. Figures render
headless (the Agg backend) and are written atomically as PNG.
"""

from __future__ import annotations

import io
from typing import Any, Optional, Sequence

import numpy as np

from placement_opt.errors import InputError
from placement_opt.feasibility import stage_bytes
from placement_opt.instance import Instance
from placement_opt.io import atomic_write_bytes
from placement_opt.placement import Group, Placement
from placement_opt.simulate import run_groups, run_windows

GB = 1e9
#: per-model bars beyond this many models are too thin to read: the worst ones are shown
MAX_MODEL_BARS = 40


def require_matplotlib(option: str = "--plot") -> Any:
    """``matplotlib.pyplot`` on the headless Agg backend, or an input error naming ``option``."""
    try:
        import matplotlib
    except ImportError:
        raise InputError("matplotlib is not installed (pip install 'placeopt[plots]')", option) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig: Any, path: str) -> None:
    """Write ``fig`` to ``path`` as PNG, atomically, and release it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    require_matplotlib().close(fig)
    try:
        atomic_write_bytes(path, buf.getvalue())
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror}", "--plot", path) from None


# -- placements ------------------------------------------------------------------------------

def save_placement_figure(path: str, placement: Placement, instance: Optional[Instance] = None) -> None:
    """The device map of ``placement`` (its first window's groups, for a time-varying one):
    groups over the GPUs with their stages, layer ranges and models; below, weight memory per
    GPU by model (needs ``instance``) or, for LLM meshes, each model's SM share and the KV pool."""
    plt = require_matplotlib()
    groups = placement.all_group_sets[0]
    llm = any(g.sm_share is not None for g in groups)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8.0, 0.35 * _n_devices(groups) + 3), 7.5),
                                      gridspec_kw={"height_ratios": [1.2, 1]})
    _draw_device_map(top, groups)
    if llm:
        _draw_sm_shares(bottom, groups, placement.metrics.get("groups"))
    elif instance is not None:
        _draw_memory(bottom, groups, instance)
    else:
        _draw_models_per_group(bottom, groups)
    title = placement.provenance.get("instance") or "placement"
    solver = placement.provenance.get("solver")
    fig.suptitle(f"{title}" + (f" ({solver})" if solver else "")
                 + (f", window 1 of {len(placement.windows)}" if placement.windows else ""))
    fig.tight_layout()
    save_figure(fig, path)


def _n_devices(groups: Sequence[Group]) -> int:
    return max((max(g.devices) for g in groups if g.devices), default=0) + 1


def _stage_devices(group: Group) -> list[tuple[int, ...]]:
    """The devices of each pipeline stage (stage-major, as the simulator reads a group)."""
    return [group.devices[s * group.tp:(s + 1) * group.tp] for s in range(group.pp)]


def _draw_device_map(ax: Any, groups: Sequence[Group]) -> None:
    """One row per group: a box per stage over its GPUs, labelled with the stage's layers;
    the group's config and models on its right."""
    colors = _palette(len(groups))
    for i, g in enumerate(groups):
        for s, devs in enumerate(_stage_devices(g)):
            for d in devs:
                ax.add_patch(_rect((d, i - 0.4), 0.95, 0.8, colors[i], alpha=0.35 + 0.5 * (s % 2)))
            label = f"s{s}" if g.stage_layers is None else f"L{g.stage_layers[s][0]}-{g.stage_layers[s][1]}"
            ax.text(min(devs) + 0.05, i, label, va="center", fontsize=7)
        models = ", ".join(g.models) if len(g.models) <= 4 else f"{', '.join(g.models[:3])}, ... ({len(g.models)})"
        ax.text(max(g.devices) + 1.1, i, f"pp{g.pp} tp{g.tp}: {models or '-'}", va="center", fontsize=7)
    n = _n_devices(groups)
    ax.set_xlim(-0.2, n + max(6, n * 0.6))
    ax.set_ylim(len(groups) - 0.5, -0.5)
    ax.set_yticks(range(len(groups)))
    ax.set_yticklabels([f"group {i}" for i in range(len(groups))], fontsize=7)
    ax.set_xlabel("GPU")
    ax.set_title("device map (shade alternates by pipeline stage)", fontsize=9)


def _draw_memory(ax: Any, groups: Sequence[Group], instance: Instance) -> None:
    """Weight bytes per GPU, stacked by model, against the usable memory."""
    n = instance.cluster.n_gpus
    names = instance.model_names
    per_model = np.zeros((len(names), n))
    for g in groups:
        for name in g.models:
            one = stage_bytes(instance, Group(devices=g.devices, pp=g.pp, tp=g.tp, models=(name,)))
            for s, devs in enumerate(_stage_devices(g)):
                per_model[names.index(name), list(devs)] += one[s]
    bottom = np.zeros(n)
    colors = _palette(len(names))
    for m in np.flatnonzero(per_model.sum(axis=1)):
        ax.bar(range(n), per_model[m] / GB, bottom=bottom / GB, color=colors[m], width=0.9,
               label=names[m] if len(names) <= 12 else None)
        bottom += per_model[m]
    ax.axhline(instance.cluster.gpu.usable_memory_bytes / GB, color="k", ls="--", lw=1, label="usable memory")
    ax.set_xlabel("GPU")
    ax.set_ylabel("weights (GB)")
    ax.set_title("memory use per GPU, by model", fontsize=9)
    ax.legend(fontsize=6, ncol=4)


def _draw_sm_shares(ax: Any, groups: Sequence[Group], group_metrics: Optional[list]) -> None:
    """Each mesh's SM shares stacked by model, its KV pool (from the placement's metrics) above."""
    for i, g in enumerate(groups):
        shares = g.sm_share or tuple(1.0 / max(len(g.models), 1) for _ in g.models)
        base = 0.0
        for name, share in zip(g.models, shares):
            ax.bar(i, share, bottom=base, color=_palette(len(g.models) or 1)[g.models.index(name)], width=0.8,
                   edgecolor="white")
            ax.text(i, base + share / 2, name, ha="center", va="center", fontsize=6)
            base += share
        if group_metrics and i < len(group_metrics):
            ax.text(i, 1.02, f"KV {group_metrics[i].get('kv_pool_gb', 0):.0f} GB", ha="center", fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"mesh {i}\n({g.n_gpus} GPU)" for i, g in enumerate(groups)], fontsize=7)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("SM share")
    ax.set_title("SM shares per mesh (KV pool above)", fontsize=9)


def _draw_models_per_group(ax: Any, groups: Sequence[Group]) -> None:
    ax.bar(range(len(groups)), [len(g.models) for g in groups], color=_palette(len(groups)))
    ax.set_xlabel("group")
    ax.set_ylabel("models")
    ax.set_title("models per group (give --instance for memory per GPU)", fontsize=9)


# -- simulations -----------------------------------------------------------------------------

def save_simulation_figure(path: str, instance: Instance, placement: Placement, metrics: dict,
                           seed: Optional[int] = None) -> None:
    """Per-model SLO attainment and the latency CDF (DNN), or per-model attainment and
    throughput, TTFT/TPOT percentiles and KV/SM utilisation over time (LLM)."""
    plt = require_matplotlib()
    if instance.is_llm:
        fig, axes = plt.subplots(2, 2, figsize=(12, 8))
        _draw_attainment(axes[0][0], metrics)
        _draw_llm_throughput(axes[0][1], metrics)
        _draw_llm_token_times(axes[1][0], metrics)
        _draw_utilisation(axes[1][1], metrics, instance.workload.duration_s + instance.llm_settings.drain_s)
    else:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        _draw_attainment(axes[0], metrics)
        _draw_latency_cdf(axes[1], instance, placement, seed)
    fig.suptitle(f"{instance.name}: SLO attainment {metrics['slo_attainment']:.4f}")
    fig.tight_layout()
    save_figure(fig, path)


def _draw_attainment(ax: Any, metrics: dict) -> None:
    """Per-model SLO attainment, worst first (at most :data:`MAX_MODEL_BARS`)."""
    per = sorted(metrics.get("per_model", {}).items(), key=lambda kv: kv[1]["slo_attainment"])
    shown = per[:MAX_MODEL_BARS]
    ax.bar(range(len(shown)), [100 * v["slo_attainment"] for _, v in shown], color="tab:blue")
    ax.set_xticks(range(len(shown)))
    ax.set_xticklabels([k for k, _ in shown], rotation=90, fontsize=6)
    ax.axhline(100 * metrics["slo_attainment"], color="k", ls="--", lw=1, label="overall")
    ax.set_ylabel("SLO attainment (%)")
    worst = f", worst {len(shown)} of {len(per)}" if len(per) > len(shown) else ""
    ax.set_title(f"per-model attainment{worst}", fontsize=9)
    ax.legend(fontsize=7)


def request_latencies(instance: Instance, placement: Placement, seed: Optional[int] = None) -> np.ndarray:
    """Latency of every accepted request of a DNN placement, as the simulator scores it."""
    requests = instance.requests() if seed is None else instance.requests(None, seed)
    if placement.windows:
        finish, _ = run_windows(instance, placement, requests)
    else:
        finish = run_groups(instance, placement.groups, requests).finish
    ok = finish >= 0
    return np.asarray(finish[ok] - requests.arrival[ok])


def _draw_latency_cdf(ax: Any, instance: Instance, placement: Placement, seed: Optional[int]) -> None:
    lat = np.sort(request_latencies(instance, placement, seed))
    if lat.size:
        ax.plot(lat, np.arange(1, lat.size + 1) / lat.size, color="tab:blue")
    ax.set_xlabel("latency of accepted requests (s)")
    ax.set_ylabel("fraction of accepted requests")
    ax.set_title("latency CDF", fontsize=9)
    ax.grid(alpha=0.3)


def _draw_llm_throughput(ax: Any, metrics: dict) -> None:
    per = metrics.get("per_model", {})
    names = list(per)
    x = np.arange(len(names))
    ax.bar(x - 0.2, [per[n].get("rate_rps") or 0.0 for n in names], width=0.4, label="arrival rate")
    ax.bar(x + 0.2, [per[n].get("throughput_rps") or 0.0 for n in names], width=0.4, label="throughput")
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=90, fontsize=6)
    ax.set_ylabel("requests/s")
    ax.set_title(f"throughput per LLM (total {metrics.get('throughput_rps', 0):.2f} req/s)", fontsize=9)
    ax.legend(fontsize=7)


def _draw_llm_token_times(ax: Any, metrics: dict) -> None:
    """TTFT and TPOT at the mean and the 50th, 90th and 99th percentiles."""
    stats = ("mean", "p50", "p90", "p99")
    x = np.arange(len(stats))
    for offset, kind in ((-0.2, "ttft"), (0.2, "tpot")):
        values = [metrics.get(f"{kind}_{s}_s") or 0.0 for s in stats]
        ax.bar(x + offset, [1000 * v for v in values], width=0.4, label=kind.upper())
    ax.set_xticks(x)
    ax.set_xticklabels(stats)
    ax.set_yscale("log")
    ax.set_ylabel("ms")
    ax.set_title("time to first token, time per output token", fontsize=9)
    ax.legend(fontsize=7)


def _draw_utilisation(ax: Any, metrics: dict, span: float) -> None:
    """Each mesh's KV pool and SM utilisation over the simulator's horizon ``span`` (its bins
    split the workload's duration plus the drain time)."""
    groups = metrics.get("groups", [])
    for i, g in enumerate(groups):
        for key, style in (("kv_utilisation_series", "-"), ("sm_utilisation_series", ":")):
            series = g.get(key, [])
            if series:
                t = (np.arange(len(series)) + 0.5) * span / len(series)
                ax.plot(t, series, style, color=_palette(len(groups))[i],
                        label=f"mesh {i} {'KV' if key.startswith('kv') else 'SM'}")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("utilisation")
    ax.set_ylim(0, 1.05)
    ax.set_title("KV pool (solid) and SM (dotted) utilisation", fontsize=9)
    ax.legend(fontsize=6, ncol=2)


# -- sweeps ----------------------------------------------------------------------------------

def save_sweep_figure(path: str, panels: Sequence[tuple[str, Sequence[dict]]], solvers: Sequence[str],
                      title: str = "") -> None:
    """One panel per (setting, rows): each solver's held-out attainment (solid) and training
    attainment (dashed) against the setting. Rows are sweep CSV rows (strings)."""
    plt = require_matplotlib()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    colors = _palette(len(solvers))
    for ax, (axis, rows) in zip(axes[0], panels):
        for k, solver in enumerate(solvers):
            mine = sorted(((float(r[axis]), r) for r in rows if r["solver"] == solver), key=lambda xr: xr[0])
            xs = [x for x, _ in mine]
            if any(r["heldout_attainment"] for _, r in mine):
                ax.plot(xs, [100 * float(r["heldout_attainment"]) for _, r in mine], "-o", color=colors[k],
                        ms=4, label=f"{solver} (held-out)")
            ax.plot(xs, [100 * float(r["train_attainment"]) for _, r in mine], "--", color=colors[k], alpha=0.6,
                    label=f"{solver} (training)")
        ax.set_xlabel(axis.replace("_", " "))
        ax.set_ylabel("SLO attainment (%)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)


def _palette(n: int) -> list:
    plt = require_matplotlib()
    cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
    return [cmap(i % cmap.N) for i in range(max(n, 1))]


def _rect(xy: tuple[float, float], w: float, h: float, color: Any, alpha: float) -> Any:
    from matplotlib.patches import Rectangle
    return Rectangle(xy, w, h, facecolor=color, edgecolor="k", lw=0.5, alpha=alpha)
