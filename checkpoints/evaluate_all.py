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

from tensor_memory import load_checkpoint
from tensor_memory.evaluation import evaluate_checkpoint, sweep_points

ROOT = Path(__file__).resolve().parents[1]
SEEDS = (1, 2, 3)
BATCHES, BATCH_SIZE = 8, 64
# Folder suffixes, in table order: the three backbones, and the tensor backbone retrained with the
# local update (MemoryConfig.write_mode = "local"; its config's kind is still "tensor").
BACKBONES = ("tensor", "tensor_local_update", "base", "local")


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
    points = [ckpt.config["task"]["params"]] + [p for p in sweep_points(ckpt.task)
                                                if p != ckpt.config["task"]["params"]]
    results = []
    for params in points:
        per_seed = {}
        for seed in SEEDS:
            result = evaluate_checkpoint(ckpt, seed, BATCHES, BATCH_SIZE, task_params=params)
            per_seed[str(seed)] = result["metrics"]
        mean, std = summarise(per_seed)
        results.append({"params": params, "per_seed": per_seed, "mean": mean, "std": std})
    metrics = {"task": ckpt.task.name, "backbone": ckpt.config["model"]["kind"], "eval_seeds": list(SEEDS),
               "batches": BATCHES, "batch_size": BATCH_SIZE,
               "reproduce": f"tensor-memory eval --checkpoint checkpoints/{directory.name} --seed SEED "
                            f"--batches {BATCHES} --batch-size {BATCH_SIZE} --json",
               "trained": results[0], "sweep": results[1:]}
    (directory / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"{directory.name}: accuracy {results[0]['mean']['accuracy']:.4f}", flush=True)
    return metrics


def fmt(mean: dict, std: dict, key: str) -> str:
    if key not in mean:
        return "n/a"
    return f"{mean[key]:.3f} ± {std[key]:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="re-evaluate only these checkpoint folders; the others keep their metrics.json")
    args = parser.parse_args()
    all_metrics = {}
    for d in sorted((ROOT / "checkpoints").iterdir()):
        if (d / "config.json").exists():
            redo = args.only is None or d.name in args.only or not (d / "metrics.json").exists()
            all_metrics[d.name] = evaluate_dir(d) if redo else json.loads((d / "metrics.json").read_text())
    training = json.loads((ROOT / "checkpoints" / "training.json").read_text())
    write_checkpoints_readme(all_metrics, training)
    write_results_tables(all_metrics)


def write_checkpoints_readme(all_metrics: dict, training: dict) -> None:
    lines = ["# Shipped checkpoints", "",
             "Each folder holds `model.safetensors`, `config.json` (model, task and training settings, with the",
             "state sizes under `state_budget`), `train_log.jsonl` and `metrics.json` (evaluation on seeds "
             f"{', '.join(map(str, SEEDS))},", f"{BATCHES} batches of {BATCH_SIZE}, at every sweep point).", "",
             "Trained on the CPU of the development machine (2 cores) by `checkpoints/train_all.py`, which runs",
             "every (task, backbone) pair for the same steps at each learning rate of the same grid "
             f"({', '.join(str(lr) for lr in training['grid']['learning_rates'])}) and ships the run with the",
             "best validation accuracy (validation batches are disjoint from the evaluation seeds); for a memory",
             "model, the best of the runs whose addressing report (16 samples of seed 0) is healthy on every",
             "memory layer, when one is.",
             f"Two runs at a time, {training['grid']['threads_per_job']} torch thread each. Then",
             "`checkpoints/evaluate_all.py` wrote the metrics, this file and `docs/results.md`.", "",
             *training.get("notes", []), "",
             "| checkpoint | steps | command (run from the repository root) | wall time | validation accuracy | "
             "addressing per memory layer | shipped |",
             "|---|---:|---|---:|---:|---|:---:|"]
    for run in sorted(training["runs"], key=lambda r: (r["task"], BACKBONES.index(r["backbone"]), r["steps"] or 0, r["lr"])):
        outcome = f"failed: {run['error'][0]}" if "error" in run else f"{run['validation']['accuracy']:.4f}"
        lines.append(f"| {run['task']}-{run['backbone']} | {run['steps'] or '—'} | `{run['command']}` | "
                     f"{run['wall_seconds'] / 60:.1f} min | {outcome} | {_verdicts(run)} | "
                     f"{'yes' if run.get('shipped') else ''} |")
    total = sum(r["wall_seconds"] for r in training["runs"]) / 60
    lines += ["", f"Sum of the runs' wall times: {total:.0f} min (two ran at a time). The shipped copy drops the "
              "run's resume file; retraining with a command above writes to `runs/`.", "",
              "Reproduce a reported figure: `tensor-memory eval --checkpoint checkpoints/NAME --seed 1 --json` "
              "prints the `trained` metrics of seed 1 in that folder's `metrics.json`."]
    (ROOT / "checkpoints" / "README.md").write_text("\n".join(lines) + "\n")


def _verdicts(run: dict) -> str:
    """"healthy, healthy" for a run's memory layers in order; "—" without memory or without a record."""
    return ", ".join(run.get("addressing_verdicts", {}).values()) or "—"


def write_results_tables(all_metrics: dict) -> None:
    """The generated part of docs/results.md, between the markers; the prose around it is kept."""
    path = ROOT / "docs" / "results.md"
    begin, end = "<!-- tables: generated by checkpoints/evaluate_all.py -->", "<!-- end of generated tables -->"
    blocks = [begin, ""]
    for task in ("coordinate_binding", "occlusion", "map_building", "no_harm"):
        runs = {b: all_metrics[f"{task}-{b}"] for b in BACKBONES if f"{task}-{b}" in all_metrics}
        if "tensor" not in runs:
            continue
        columns = list(runs)  # the local-update column only where that model was trained
        ref = runs["tensor"]
        keys = [k for k in ("accuracy", "occluded_accuracy", "visible_accuracy", "oracle_accuracy", "gate_drift")
                if k in ref["trained"]["mean"]]
        field = _sweep_field(ref)
        blocks += [f"### {task}", "", f"Mean ± standard deviation over evaluation seeds {', '.join(map(str, SEEDS))}.",
                   "", "| setting | metric | " + " | ".join(c.replace("_", " ") for c in columns) + " |",
                   "|---|---|" + "---:|" * len(columns)]
        for i, point in enumerate([ref["trained"]] + ref["sweep"]):
            label = ", ".join(f"{k}={point['params'][k]}" for k in field) + (" (trained)" if i == 0 else "")
            for key in keys:
                cells = []
                for b in columns:
                    entry = ([runs[b]["trained"]] + runs[b]["sweep"])[i]
                    cells.append(fmt(entry["mean"], entry["std"], key))
                blocks.append(f"| {label} | {key} | " + " | ".join(cells) + " |")
        blocks.append("")
    blocks.append(end)
    text = path.read_text() if path.exists() else f"# Results\n\n{begin}\n{end}\n"
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    path.write_text(head + "\n".join(blocks) + tail)


def _sweep_field(metrics: dict) -> list[str]:
    """The parameters that vary across the sweep (what a table row is labelled with)."""
    points = [metrics["trained"]["params"]] + [s["params"] for s in metrics["sweep"]]
    return [k for k in points[0] if len({json.dumps(p.get(k)) for p in points}) > 1] or list(points[0])[:1]


if __name__ == "__main__":
    main()
