"""Evaluate every shipped checkpoint on fresh seeds and write the results.

For each ``checkpoints/<task>-<backbone>/`` this evaluates every point of the task's sweep on
evaluation seeds 1, 2 and 3 (never used in training or model selection), writes
``metrics.json`` beside the weights, then writes ``checkpoints/README.md`` (commands, wall
times, the learning-rate grid) and the tables of ``docs/results.md``.

    .venv/bin/python checkpoints/evaluate_all.py

Each number in metrics.json is reproduced by one command, e.g.
``tensor-memory eval --checkpoint checkpoints/occlusion-tensor --seed 1 --json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from analysis.measures.causality import audit_checkpoint
from analysis.measures.interventions import intervention_hooks
from tensor_memory import hooks, load_checkpoint, memory_layers
from tensor_memory.backbone import BackboneConfig, state_budget
from tensor_memory.pretrained.checkpoint import is_pretrained_memory
from tensor_memory.tasks import TASKS
from tensor_memory.training.evaluation import evaluate, evaluate_checkpoint, sweep_points, task_with

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (1, 2, 3)
BATCHES, BATCH_SIZE = 8, 64
# Folder suffixes, in table order: the backbones, the tensor backbone with the local baseline's attention
# window (masked patches), and the tensor backbone retrained with the local update
# (MemoryConfig.write.mode = "local"); the variants' config kind is still "tensor".
BACKBONES = (
    "tensor",
    "tensor_windowed",
    "tensor_local_update",
    "base",
    "local",
    "registers",
    "xl",
    "linear",
    "tensor_shared_state",
)
# Language models are scored on their whole test split, walked once in order: no seed changes it.
LM_SEEDS, LM_BATCHES = (1,), 1000
# WikiText-2 test perplexities the paper reports (word level; a different corpus from ours).
PAPER_PERPLEXITY = {"base": 130.30, "tensor": 100.07}
# Tasks whose memory models are also scored with their read switched off: what the memory is worth.
READ_OFF_TASKS = ("language_modelling", "moving_digits", "masked_patches")


def summarise(per_seed: dict[str, dict]) -> tuple[dict, dict]:
    names = [k for k, v in next(iter(per_seed.values())).items() if isinstance(v, (int, float))]
    mean, std = {}, {}
    for name in names:
        values = [m[name] for m in per_seed.values() if isinstance(m.get(name), (int, float))]
        if values:
            mean[name] = statistics.fmean(values)
            std[name] = statistics.stdev(values) if len(values) > 1 else 0.0
    return mean, std


def evaluate_dir(directory: Path) -> dict:
    ckpt = load_checkpoint(directory)
    points = [ckpt.config["task"]["params"]] + [
        p for p in sweep_points(ckpt.task) if p != ckpt.config["task"]["params"]
    ]
    language = ckpt.task.name == "language_modelling"
    seeds, batches = (LM_SEEDS, LM_BATCHES) if language else (SEEDS, BATCHES)
    results = []
    for params in points:
        per_seed = {}
        for seed in seeds:
            result = evaluate_checkpoint(ckpt, seed, batches, BATCH_SIZE, task_params=params)
            per_seed[str(seed)] = result["metrics"]
        mean, std = summarise(per_seed)
        results.append({"params": params, "per_seed": per_seed, "mean": mean, "std": std})
    metrics = {
        "task": ckpt.task.name,
        "backbone": ckpt.config["model"]["kind"],
        "eval_seeds": list(seeds),
        "batches": batches,
        "batch_size": BATCH_SIZE,
        "reproduce": f"tensor-memory eval --checkpoint checkpoints/{directory.name} --seed SEED "
        f"--batches {batches} --batch-size {BATCH_SIZE} --json",
        "trained": results[0],
        "sweep": results[1:],
    }
    if ckpt.task.name in READ_OFF_TASKS and memory_layers(ckpt.model):
        metrics["read_off"] = read_off(ckpt, seeds[0], batches, params=points[0])
    if language:  # every language model is audited: a leak would make its perplexity meaningless
        audit = audit_checkpoint(ckpt)
        metrics["audit"] = {
            "verdict": audit["verdict"],
            "max_change": audit["max_change"],
            "reproduce": f"tensor-memory audit --checkpoint checkpoints/{directory.name}",
        }
    (directory / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    headline = ckpt.task.headline
    print(f"{directory.name}: {headline} {results[0]['mean'][headline]:.4f}", flush=True)
    return metrics


def read_off(ckpt, seed: int, batches: int, params: dict) -> dict:
    """The metrics with every memory layer's read gate σ(γ) held at 0 (hooks): what the memory's read is worth."""
    with hooks(ckpt.model, intervention_hooks("gate_off", list(memory_layers(ckpt.model)))):
        return evaluate(ckpt.model, task_with(ckpt, params), seed=seed, batches=batches, batch_size=BATCH_SIZE)


def fixed_state(backbone) -> str:
    """Numbers a backbone carries per sequence while streaming, as a table cell."""
    budget = state_budget(backbone)["total_state_numbers"]
    if budget is None and backbone.kind == "linear":  # running sums S (dk × dk) and z (dk) per head and layer
        dk = backbone.dim // backbone.heads
        budget = backbone.layers * backbone.heads * (dk * dk + dk)
    elif budget is None and backbone.kind == "xl":  # layer inputs of fewer than two segments
        budget = backbone.layers * (2 * backbone.xl_segment - 1) * backbone.dim
    return "grows with the text" if budget is None else f"{budget:,}"


def fmt(mean: dict, std: dict, key: str) -> str:
    if key not in mean:
        return "n/a"
    return f"{mean[key]:.3f} ± {std[key]:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="re-evaluate only these checkpoint folders; the others keep their metrics.json",
    )
    args = parser.parse_args()
    all_metrics = {}
    for d in sorted((ROOT / "checkpoints").iterdir()):
        if (d / "config.json").exists() and not is_pretrained_memory(d):  # minilm-tensor: train_minilm.py evaluates it
            redo = args.only is None or d.name in args.only or not (d / "metrics.json").exists()
            all_metrics[d.name] = evaluate_dir(d) if redo else json.loads((d / "metrics.json").read_text())
    training = json.loads((ROOT / "checkpoints" / "training.json").read_text())
    write_checkpoints_readme(all_metrics, training)
    write_results_tables(all_metrics)


def write_checkpoints_readme(all_metrics: dict, training: dict) -> None:
    lines = [
        "# Shipped checkpoints",
        "",
        "Each folder holds `model.safetensors`, `config.json` (model, task and training settings, with the",
        "state sizes under `state_budget`), `train_log.jsonl` and `metrics.json` (evaluation on seeds "
        f"{', '.join(map(str, SEEDS))},",
        f"{BATCHES} batches of {BATCH_SIZE}, at every sweep point).",
        "",
        "Trained on the CPU of the development machine (2 cores) by `checkpoints/train_all.py`, which runs",
        "every (task, backbone) pair for the same steps at each learning rate of the same grid "
        f"({', '.join(str(lr) for lr in training['grid']['learning_rates'])}) and ships the run with the",
        "best validation accuracy (validation batches are disjoint from the evaluation seeds); for a memory",
        "model, the best of the runs whose addressing report (16 samples of seed 0) is healthy on every",
        "memory layer, when one is.",
        f"Two runs at a time, {training['grid']['threads_per_job']} torch thread each. Then",
        "`checkpoints/evaluate_all.py` wrote the metrics, this file and `docs/results.md`.",
        "",
        *training.get("notes", []),
        "",
        "| checkpoint | steps | command (run from the repository root) | wall time | validation accuracy "
        "(masked_patches: PSNR, dB) | "
        "addressing per memory layer | shipped |",
        "|---|---:|---|---:|---:|---|:---:|",
    ]
    for run in sorted(
        training["runs"], key=lambda r: (r["task"], BACKBONES.index(r["backbone"]), r["steps"] or 0, r["lr"])
    ):
        headline = TASKS[run["task"]].headline
        outcome = f"failed: {run['error'][0]}" if "error" in run else f"{run['validation'][headline]:.4f}"
        if "perplexity" in run.get("validation", {}):
            outcome += f" (perplexity {run['validation']['perplexity']:.1f})"
        lines.append(
            f"| {run['task']}-{run['backbone']} | {run['steps'] or '—'} | `{run['command']}` | "
            f"{run['wall_seconds'] / 60:.1f} min | {outcome} | {_verdicts(run)} | "
            f"{'yes' if run.get('shipped') else ''} |"
        )
    minilm = ROOT / "checkpoints" / "minilm-tensor" / "metrics.json"
    if minilm.exists():
        m = json.loads(minilm.read_text())
        lines += [
            "",
            "`minilm-tensor` (a memory on frozen all-MiniLM-L6-v2, not a task model) was trained and evaluated by "
            "`checkpoints/train_minilm.py` (its docstring has the commands): recall accuracy on 512 test documents "
            f"{m['accuracy']:.4f} with the memory against {m['frozen']['accuracy']:.4f} for the frozen model with "
            f"the same head, cross-entropy {m['cross_entropy']:.3f} against {m['frozen']['cross_entropy']:.3f}; "
            f"{m['wall_seconds'] / 60:.1f} min.",
        ]
    total = sum(r["wall_seconds"] for r in training["runs"]) / 60
    lines += [
        "",
        f"Sum of the runs' wall times: {total:.0f} min (two ran at a time). The shipped copy drops the "
        "run's resume file; retraining with a command above writes to `runs/`.",
        "",
        "Reproduce a reported figure: `tensor-memory eval --checkpoint checkpoints/NAME --seed 1 --json` "
        "prints the `trained` metrics of seed 1 in that folder's `metrics.json`.",
    ]
    lines += long_range_lines()
    (ROOT / "checkpoints" / "README.md").write_text("\n".join(lines) + "\n")


def long_range_lines() -> list[str]:
    """The README's section on ``checkpoints/long_range/``, from the record its own script keeps (none without it)."""
    path = ROOT / "checkpoints" / "long_range" / "long_range.json"
    if not path.exists():
        return []
    record = json.loads(path.read_text())
    lines = [
        "",
        "## Long range (`checkpoints/long_range/`)",
        "",
        "Trained, measured and shipped by `checkpoints/train_long_range.py` (configs in `configs/long_range/`);",
        "`long_range.json` holds each run's command, wall time, accuracy by distance on seeds "
        f"{', '.join(map(str, record['evaluation']['seeds']))} (the language models: the test split streamed) "
        'and the addressing verdicts; docs/results.md ("Long range") has the tables. '
        "`tensor-memory eval --checkpoint checkpoints/long_range/NAME --distance --seed 1` reproduces a row.",
        "",
        "| run | shipped | steps | wall (min) | addressing |",
        "|---|---|---|---|---|",
    ]
    for name, run in record["runs"].items():
        wall = (run.get("wall") or {}).get("wall_seconds")
        shipped = "yes" if run["checkpoint"].startswith("checkpoints/") else "no"
        lines.append(
            f"| {name} | {shipped} | {run['steps']:,} | {'—' if wall is None else f'{wall / 60:.1f}'} | "
            f"{_verdicts(run)} |"
        )
    return lines


def _verdicts(run: dict) -> str:
    """ "healthy, healthy" for a run's memory layers in order; "—" without memory or without a record."""
    return ", ".join(run.get("addressing_verdicts", {}).values()) or "—"


TABLE_METRICS = (
    "accuracy",
    "occluded_accuracy",
    "visible_accuracy",
    "occluded_position_accuracy",
    "occluded_identity_accuracy",
    "oracle_accuracy",
    "psnr",
    "ssim",
    "psnr_mean_fill",
    "ssim_mean_fill",
    "gate_drift",
)  # the rows of a task's table, where its metrics have them


def write_results_tables(all_metrics: dict) -> None:
    """The generated part of docs/results.md, between the markers; the prose around it is kept."""
    path = ROOT / "docs" / "results.md"
    begin, end = "<!-- tables: generated by checkpoints/evaluate_all.py -->", "<!-- end of generated tables -->"
    blocks = [begin, ""]
    for task in ("coordinate_binding", "occlusion", "map_building", "no_harm", "moving_digits", "masked_patches"):
        runs = {b: all_metrics[f"{task}-{b}"] for b in BACKBONES if f"{task}-{b}" in all_metrics}
        if "tensor" not in runs:
            continue
        columns = list(runs)  # the local-update column only where that model was trained
        ref = runs["tensor"]
        keys = [k for k in TABLE_METRICS if k in ref["trained"]["mean"]]
        field = _sweep_field(ref)
        blocks += [
            f"### {task}",
            "",
            f"Mean ± standard deviation over evaluation seeds {', '.join(map(str, SEEDS))}.",
            "",
            "| setting | metric | " + " | ".join(c.replace("_", " ") for c in columns) + " |",
            "|---|---|" + "---:|" * len(columns),
        ]
        for i, point in enumerate([ref["trained"]] + ref["sweep"]):
            label = ", ".join(f"{k}={point['params'][k]}" for k in field) + (" (trained)" if i == 0 else "")
            for key in keys:
                cells = []
                for b in columns:
                    entry = ([runs[b]["trained"]] + runs[b]["sweep"])[i]
                    cells.append(fmt(entry["mean"], entry["std"], key))
                if any(cell != "n/a" for cell in cells):  # nothing occluded at L = 0: no row of n/a
                    blocks.append(f"| {label} | {key} | " + " | ".join(cells) + " |")
        if "read_off" in ref:
            off = ref["read_off"]
            shown = ", ".join(f"{k} {off[k]:.3f}" for k in keys if isinstance(off.get(k), float) and k != "gate_drift")
            blocks += [
                "",
                f"`tensor` with every memory read switched off (σ(γ) held at 0 through the hook points; "
                f"trained setting, seed {SEEDS[0]}): {shown}.",
            ]
        blocks.append("")
    blocks += language_table(all_metrics)
    blocks.append(end)
    text = path.read_text() if path.exists() else f"# Results\n\n{begin}\n{end}\n"
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    path.write_text(head + "\n".join(blocks) + tail)


def language_table(all_metrics: dict) -> list[str]:
    """Test perplexity of every language model beside the paper's WikiText-2 figures, with its audit."""
    runs = {b: all_metrics[f"language_modelling-{b}"] for b in BACKBONES if f"language_modelling-{b}" in all_metrics}
    if not runs:
        return []
    lines = [
        "### language_modelling",
        "",
        "Test split of the shipped corpus (the prose of the Python documentation, 4,096-type BPE), walked once: "
        "every test token scored once, in windows of 128 tokens that each start from an empty state. The "
        "paper's column is WikiText-2, word level: a different corpus and tokenization, so only the ordering "
        "compares.",
        "",
        "The memory's read switched off (every σ(γ) held at 0 through its hook point) shows what the "
        "read itself is worth.",
        "",
        "| backbone | test perplexity | memory read off | next-token accuracy | state carried (numbers per "
        "sequence) | causality audit | paper, WikiText-2 |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for backbone, metrics in runs.items():
        mean = metrics["trained"]["mean"]
        config = json.loads((ROOT / "checkpoints" / f"language_modelling-{backbone}" / "config.json").read_text())
        state = fixed_state(BackboneConfig.from_dict(config["model"]))  # the config says it; no weights needed
        off = metrics.get("read_off", {}).get("perplexity")
        audit = metrics.get("audit", {})
        verdict = f"{audit.get('verdict', '—')}" + (
            f" ({audit['max_change']:.2g})" if audit.get("verdict") == "leaks" else ""
        )
        paper = PAPER_PERPLEXITY.get(backbone)
        lines.append(
            f"| {backbone.replace('_', ' ')} | {mean['perplexity']:.2f} | {f'{off:.2f}' if off else '—'} | "
            f"{mean['accuracy']:.3f} | {state} | "
            f"{verdict} | {paper if paper else '—'} |"
        )
    return lines + [""]


def _sweep_field(metrics: dict) -> list[str]:
    """The parameters that vary across the sweep (what a table row is labelled with)."""
    points = [metrics["trained"]["params"]] + [s["params"] for s in metrics["sweep"]]
    return [k for k in points[0] if len({json.dumps(p.get(k)) for p in points}) > 1] or list(points[0])[:1]


if __name__ == "__main__":
    main()
