"""Train, measure and ship the long-range models: tasks whose needed input lies past what an
equal-state attention window reaches.

Each run is ``tensor-memory train --config configs/long_range/TASK.toml`` with one backbone, one learning rate
(the config's), one thread, two runs at a time. A finished run is measured by accuracy against distance on the
evaluation seeds (``tensor-memory eval --distance --seed S``: 8 batches of 64 for each of seeds 1, 2, 3, with the
memory's reads off beside it) — a language model by its test split streamed (``tensor-memory eval --stream``:
carried, reset every segment, carried with the reads off) — and the record goes to
``checkpoints/long_range/long_range.json``. ``--ship`` first copies the runs into
``checkpoints/long_range/TASK-BACKBONE/`` (a language model as float16, as the shipped ones) and measures the
copies, so the record is that of the shipped weights.

    .venv/bin/python checkpoints/train_long_range.py                       # train what is missing, measure, record
    .venv/bin/python checkpoints/train_long_range.py --runs occlusion-tensor --jobs 1
    .venv/bin/python checkpoints/train_long_range.py --measure-only --ship  # record and ship finished runs
    .venv/bin/python checkpoints/train_long_range.py --tables               # the record as docs/results.md shows it
    .venv/bin/python checkpoints/train_long_range.py --figures              # docs/img/long_range_TASK.png
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from train_all import addressing_verdicts  # noqa: E402  (this folder: the addressing report of every memory layer)

from tensor_memory import load_checkpoint  # noqa: E402
from tensor_memory.backbone import BackboneConfig, state_budget  # noqa: E402
from tensor_memory.storage.checkpoint import store_half_precision  # noqa: E402
from tensor_memory.training.distance import distance_evaluation  # noqa: E402
from tensor_memory.training.evaluation import evaluate_checkpoint  # noqa: E402
from tensor_memory.training.streamed import stream_evaluation  # noqa: E402

TASKS = ("occlusion", "map_building", "coordinate_binding")
BACKBONES = ("tensor", "local", "xl", "base")
STREAMED = tuple(f"language_modelling-{kind}" for kind in ("tensor", "local", "xl", "linear", "base"))  # streamed
RUNS = tuple(f"{task}-{backbone}" for task in TASKS for backbone in BACKBONES) + STREAMED
SEEDS = (1, 2, 3)
BATCHES, BATCH_SIZE = 8, 64
RUN_ROOT = ROOT / "runs" / "long"
SHIPPED = ROOT / "checkpoints" / "long_range"
SHIPPED_FILES = ("model.safetensors", "config.json", "train_log.jsonl")
OPTIONAL_FILES = ("tokenizer.json",)  # a language model's
WALL_FILE = "wall_seconds.json"  # written beside a run this script trained
# The long settings the shipped short-trained checkpoints are evaluated on (shapes unchanged: map_building keeps its
# 8 × 8 map, so its cells are seen again more often than on the trained-long 16 × 16 one).
STRETCH = {
    "occlusion": {"frames": 24, "occlusion_length": 16},
    "map_building": {"observations": 128},
    "coordinate_binding": {"distractors": 60},
}
CHECK = {"seed": 1, "batches": 2, "batch_size": 32, "rows": 2, "tokens": 4096}  # what the tests recompute, quickly


def train(name: str, threads: int) -> None:
    """Train run ``name`` (TASK-BACKBONE) into runs/long/NAME unless it finished there before."""
    task, backbone = name.rsplit("-", 1)
    out = RUN_ROOT / name
    if (out / "model.safetensors").exists():
        print(f"{name}: finished earlier in {out.relative_to(ROOT)}", flush=True)
        return
    command = [
        sys.executable,
        "-m",
        "tensor_memory_cli",
        "train",
        "--task",
        task,
        "--backbone",
        backbone,
        "--config",
        f"configs/long_range/{task}.toml",
        "--out",
        str(out.relative_to(ROOT)),
        "--no-progress",
    ]
    command += ["--resume"] if (out / "config.json").exists() else []  # a killed run continues where it stopped
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    wall = round(time.perf_counter() - start, 1)
    (out / WALL_FILE).write_text(json.dumps({"wall_seconds": wall, "threads": threads}) + "\n")
    print(f"{name}: {wall / 60:.1f} min", flush=True)


def measure(name: str, folder: Path) -> dict:
    """The run's validation at its last step, and the checkpoint in ``folder`` (the run or its shipped copy)
    measured: its metrics and accuracy by distance on the evaluation seeds, or a language model streamed."""
    ckpt = load_checkpoint(folder)
    log = [json.loads(line) for line in (RUN_ROOT / name / "train_log.jsonl").read_text().splitlines()]
    validation = [entry for entry in log if any(key.startswith("val_") for key in entry)][-1]
    wall_file = RUN_ROOT / name / WALL_FILE
    task, backbone = name.rsplit("-", 1)
    record = {
        "run": name,
        "checkpoint": str(folder.relative_to(ROOT)),
        "command": f"tensor-memory train --task {task} --backbone {backbone} --config "
        f"configs/long_range/{task}.toml --out runs/long/{name}",
        "steps": ckpt.config["training"]["steps"],
        "wall": json.loads(wall_file.read_text()) if wall_file.exists() else None,
        "state_budget": ckpt.config["state_budget"],
        "state_numbers": state_numbers(ckpt.config["model"]),
        "validation": {k[4:]: v for k, v in validation.items() if k.startswith("val_")},
        "addressing_verdicts": addressing_verdicts(folder),
    }
    if name in STREAMED:
        record["stream"] = stream_evaluation(ckpt, progress=False)
        record["check"] = stream_evaluation(ckpt, rows=CHECK["rows"], tokens=CHECK["tokens"], progress=False)
        return record
    record["check"] = distance_evaluation(ckpt, CHECK["seed"], CHECK["batches"], CHECK["batch_size"], progress=False)
    record["per_seed"] = {
        str(seed): {
            "metrics": evaluate_checkpoint(ckpt, seed, BATCHES, BATCH_SIZE, progress=False)["metrics"],
            "distance": distance_evaluation(ckpt, seed, BATCHES, BATCH_SIZE, progress=False),
        }
        for seed in SEEDS
    }
    return record


def state_numbers(model: dict) -> int | None:
    """Numbers a sequence's state holds: the memory's volumes and the window's keys and values, or XL's cached
    segment (its keys and values in every layer); None for full attention, whose cache grows."""
    if model["kind"] == "xl":
        return 2 * model["dim"] * model["xl_segment"] * model["layers"]
    if model["kind"] == "base":
        return None
    return state_budget(BackboneConfig.from_dict(model))["total_state_numbers"]


def ship(name: str) -> Path:
    """Copy run ``name`` into checkpoints/long_range/NAME (a language model's weights as float16)."""
    target = SHIPPED / name
    target.mkdir(parents=True, exist_ok=True)
    for file in SHIPPED_FILES + tuple(f for f in OPTIONAL_FILES if (RUN_ROOT / name / f).exists()):
        shutil.copy2(RUN_ROOT / name / file, target / file)
    if name in STREAMED:
        store_half_precision(target)
    print(f"{name}: shipped to {target.relative_to(ROOT)}", flush=True)
    return target


def pooled(runs: list[dict]) -> list[dict]:
    """The distance rows of a run's evaluation seeds pooled: per row, the accuracies weighted by what was scored."""
    rows = []
    for parts in zip(*(run["distance"]["rows"] for run in runs), strict=True):
        scored = sum(part["scored"] for part in parts)
        row = {"from": parts[0]["from"], "to": parts[0]["to"], "scored": scored}
        for key in ("accuracy", "reads_off"):
            if key in parts[0]:
                row[key] = sum(part[key] * part["scored"] for part in parts) / scored
        rows.append(row)
    return rows


def distance_table(task: str, runs: dict[str, dict], title: str) -> list[str]:
    """Markdown lines: ``runs`` (a backbone → its record) by distance, seeds pooled, the reads-off columns last."""
    pooled_rows = {kind: pooled(list(run["per_seed"].values())) for kind, run in runs.items()}
    unit = next(iter(runs.values()))["per_seed"]["1"]["distance"]["unit"]
    columns = [(kind, "accuracy") for kind in runs] + [
        (kind, "reads_off") for kind in runs if "reads_off" in pooled_rows[kind][0]
    ]
    out = [
        f"**{task}** — {title}: accuracy by distance ({unit} since the answer was shown), seeds "
        f"{', '.join(map(str, SEEDS))} pooled",
        "",
        "| distance | scored | "
        + " | ".join(k if what == "accuracy" else f"{k}, reads off" for k, what in columns)
        + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for i, row in enumerate(next(iter(pooled_rows.values()))):
        span = str(row["from"]) if row["from"] == row["to"] else f"{row['from']}–{row['to']}"
        cells = [f"{100 * pooled_rows[k][i][what]:.1f}" for k, what in columns]
        out.append(f"| {span} | {row['scored']:,} | " + " | ".join(cells) + " |")
    return out + [""]


def carried(run: dict) -> list[float | None]:
    """[accuracy, accuracy with the reads off (None without memory)] over the answers at distance ≥ 1, pooled."""
    away = [row for row in pooled(list(run["per_seed"].values())) if row["from"] >= 1]  # what had to be carried
    return [
        sum(row[key] * row["scored"] for row in away) / sum(row["scored"] for row in away) if key in away[0] else None
        for key in ("accuracy", "reads_off")
    ]


def percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def tables(record: dict) -> str:
    """Markdown: per task, each trained backbone's accuracy by distance on the evaluation seeds pooled (the memory's
    with its reads off beside it) and what each run cost; then the shipped short-trained models stretched."""
    out = []
    for task in TASKS:
        runs = {kind: record["runs"][f"{task}-{kind}"] for kind in BACKBONES if f"{task}-{kind}" in record["runs"]}
        if not runs:
            continue
        out += distance_table(task, runs, "trained long")
        metrics = [
            m for m in next(iter(runs.values()))["per_seed"]["1"]["metrics"] if m not in ("chance", "gate_drift")
        ]
        out += [
            "| backbone | steps | wall (min, 1 thread) | state (numbers) | "
            + " | ".join(metrics)
            + " | at distance ≥ 1 | the same, reads off |",
            "|---|---|---|---|" + "---|" * (len(metrics) + 2),
        ]
        for kind, run in runs.items():
            seeds = list(run["per_seed"].values())
            wall = (run.get("wall") or {}).get("wall_seconds")
            state = run["state_numbers"]
            means = [sum(s["metrics"][m] for s in seeds) / len(seeds) for m in metrics]
            out.append(
                f"| {kind} | {run['steps']:,} | {'—' if wall is None else f'{wall / 60:.1f}'} | "
                f"{'grows' if state is None else f'{state:,}'} | "
                + " | ".join(percent(v) for v in means + carried(run))
                + " |"
            )
        out.append("")
    for task, runs in record.get("stretched", {}).items():
        params = ", ".join(f"{k}={v}" for k, v in STRETCH[task].items())
        out += distance_table(task, runs, f"the shipped checkpoints/{task}-* (trained short) with {params}")
        out += ["| backbone | at distance ≥ 1 | the same, reads off |", "|---|---|---|"]
        out += [f"| {kind} | " + " | ".join(percent(v) for v in carried(run)) + " |" for kind, run in runs.items()]
        out.append("")
    return "\n".join(out)


def stretched() -> dict[str, dict]:
    """The shipped short-trained checkpoints (checkpoints/TASK-BACKBONE) evaluated by distance on the long tasks'
    settings they never trained on (:data:`STRETCH`): {task: {backbone: {"per_seed": {seed: {"distance"}}}}}."""
    out: dict[str, dict] = {}
    for task, params in STRETCH.items():
        for kind in ("tensor", "local", "base"):
            ckpt = load_checkpoint(ROOT / "checkpoints" / f"{task}-{kind}")
            out.setdefault(task, {})[kind] = {
                "params": params,
                "per_seed": {
                    str(seed): {
                        "distance": distance_evaluation(
                            ckpt, seed, BATCHES, BATCH_SIZE, progress=False, task_params=params
                        )
                    }
                    for seed in SEEDS
                },
            }
        print(f"{task}: the shipped checkpoints stretched", flush=True)
    return out


REACH = {"occlusion": 2 * 77 / 16, "map_building": 2 * 19, "coordinate_binding": 2 * 30}  # local's, in the unit


def figures(record: dict) -> dict[str, bytes]:
    """``{task: PNG}``: each task's accuracy by distance, every backbone and the memory with its reads off."""
    from analysis.figures.distance import distance_figure
    from analysis.figures.export import figure_pngs

    drawn = {}
    sets = {
        task: (
            {kind: record["runs"][f"{task}-{kind}"] for kind in BACKBONES if f"{task}-{kind}" in record["runs"]},
            "trained long, at equal state",
        )
        for task in TASKS
    }
    for task, runs in record.get("stretched", {}).items():
        params = ", ".join(f"{k}={v}" for k, v in STRETCH[task].items())
        sets[f"{task}_shipped"] = (runs, f"the shipped checkpoints with {params}")
    for name, (runs, what) in sets.items():
        if not runs:
            continue
        curves = {kind: pooled(list(run["per_seed"].values())) for kind, run in runs.items()}
        if "tensor" in curves and "reads_off" in curves["tensor"][0]:
            curves["tensor, reads off"] = [{**row, "accuracy": row["reads_off"]} for row in curves["tensor"]]
        unit = next(iter(runs.values()))["per_seed"]["1"]["distance"]["unit"]
        task = name.removesuffix("_shipped")
        drawn[name] = distance_figure(curves, unit, f"{task}: accuracy by distance, {what}", REACH[task])
    return figure_pngs(drawn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS), help="TASK-BACKBONE runs (default all)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads a run (default 1)")
    parser.add_argument("--measure-only", action="store_true", help="train nothing; measure the finished runs")
    parser.add_argument("--ship", action="store_true", help="copy the measured runs into checkpoints/long_range/")
    parser.add_argument(
        "--stretched",
        action="store_true",
        help="also evaluate the shipped short-trained checkpoints on the long settings",
    )
    parser.add_argument("--tables", action="store_true", help="print the record's tables (markdown) and stop")
    parser.add_argument("--figures", action="store_true", help="write the record's curves to docs/img and stop")
    args = parser.parse_args()
    if args.tables or args.figures:
        record = json.loads((SHIPPED / "long_range.json").read_text())
        if args.tables:
            print(tables(record))
        for task, png in (figures(record) if args.figures else {}).items():
            (ROOT / "docs" / "img" / f"long_range_{task}.png").write_bytes(png)
        return
    if not args.measure_only:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda name: train(name, args.threads), args.runs))
    finished = [name for name in args.runs if (RUN_ROOT / name / "model.safetensors").exists()]
    record_path = SHIPPED / "long_range.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {"runs": {}}
    for name in finished:
        folder = ship(name) if args.ship else RUN_ROOT / name
        record["runs"][name] = measure(name, folder)
        print(f"{name}: measured", flush=True)
    if args.stretched:
        record["stretched"] = stretched()
    record["evaluation"] = {"seeds": list(SEEDS), "batches": BATCHES, "batch_size": BATCH_SIZE, "check": CHECK}
    SHIPPED.mkdir(parents=True, exist_ok=True)
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"record in {record_path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
