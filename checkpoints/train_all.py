"""Train every shipped checkpoint: each task with tensor, base and local on the same budget.

Every (task, backbone) pair runs the same steps from its task's config at each learning rate of
the same grid; the run with the best *validation* accuracy (batches disjoint from the reported
evaluation seeds) is copied to ``checkpoints/<task>-<backbone>/`` — for a memory model, the best of
the runs whose addressing report is healthy on every memory layer (16 samples of seed 0, never an
evaluation seed), when there is one. Then each tensor model is
retrained with the local update (``MemoryConfig.write.mode = "local"``) at the learning rate it won,
into ``checkpoints/<task>-tensor_local_update/``. The commands, wall times and the whole grid go to
``checkpoints/training.json``, from which ``checkpoints/README.md`` is written.

    .venv/bin/python checkpoints/train_all.py                 # everything (hours on 2 cores: see checkpoints/README.md)
    .venv/bin/python checkpoints/train_all.py --tasks no_harm --jobs 1 --variants   # no local-update retrain
    .venv/bin/python checkpoints/train_all.py --reuse         # runs that already finished in runs/grid are kept
    .venv/bin/python checkpoints/train_all.py --tasks map_building --backbones tensor base --lrs 2e-3 --variants \
        --no-ship --runs runs/timing                          # train and time rows without shipping them
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from analysis import addressing_report  # noqa: E402
from analysis.traces.capture import capture_many  # noqa: E402
from tensor_memory import load_checkpoint, memory_layers  # noqa: E402
from tensor_memory.storage.checkpoint import store_half_precision  # noqa: E402
from tensor_memory.tasks import TASKS as TASK_CLASSES  # noqa: E402
from tensor_memory.training import load_run_config  # noqa: E402

TASKS = (
    "no_harm",
    "coordinate_binding",
    "occlusion",
    "map_building",
    "language_modelling",
    "masked_patches",
    "moving_digits",
)
BACKBONES = ("tensor", "base", "local")  # the default set; --backbones also takes the other kinds below
OTHER_BACKBONES = ("xl", "linear", "registers")
LEARNING_RATES = ("1e-3", "2e-3")
SHIPPED_FILES = ("model.safetensors", "config.json", "train_log.jsonl")
OPTIONAL_FILES = ("tokenizer.json",)  # shipped when the run wrote it (language models)
HALF_PRECISION = ("language_modelling",)  # shipped with float16 weights: 4.7 MB instead of 9.5
RUN_RECORD = "run.json"  # a finished run's record, beside its weights
ADDRESSING_SAMPLES = 16  # samples of seed 0 behind each run's addressing verdicts


# Trained after the grid, at the learning rate the tensor run won: (backbone kind, extra --set overrides).
VARIANTS = {
    "tensor_local_update": ("tensor", ["model.memory.write.mode=local"]),
    "tensor_shared_state": ("tensor", ["model.share_state=true"]),  # the public code's leak, shown
    "tensor_windowed": ("tensor", []),
}  # with the `local` baseline's attention window: see variant()


def variant(task: str, backbone: str) -> tuple[str, list[str]]:
    """(backbone kind, --set overrides) of a grid entry: a kind as it is, or a variant of the tensor backbone.

    ``tensor_windowed`` is the memory on the attention of the task's ``local`` baseline (its window, from
    configs/<task>.toml): where the tensor run has full attention (masked patches), this says whether the
    memory adds to local attention as well as to full attention.
    """
    kind, extra = VARIANTS.get(backbone, (backbone, []))
    if backbone == "tensor_windowed":
        window = load_run_config(ROOT / "configs" / f"{task}.toml", "local")["model"]["window"]
        extra = [*extra, f"model.window={window}"]
    return kind, extra


def command(task: str, backbone: str, lr: str, out: Path) -> list[str]:
    kind, extra = variant(task, backbone)
    sets = [item for value in extra for item in ("--set", value)]
    return [
        "tensor-memory",
        "train",
        "--task",
        task,
        "--backbone",
        kind,
        *sets,
        "--set",
        f"training.lr={lr}",
        "--out",
        str(out.relative_to(ROOT)),
        "--overwrite",
        "--no-progress",
    ]  # a grid re-run replaces its run


def run(task: str, backbone: str, lr: str, runs: Path, threads: int, reuse: bool = False) -> dict:
    out = runs / f"{task}-{backbone}-lr{lr}"
    return execute(task, backbone, lr, lambda: command(task, backbone, lr, out), out, threads, reuse)


def execute(
    task: str,
    backbone: str,
    lr: str,
    make_command: Callable[[], list[str]],
    out: Path,
    threads: int,
    reuse: bool = False,
) -> dict:
    """Run ``make_command()`` (a ``tensor-memory train`` into ``out``) and return its record: wall time, validation
    metrics, addressing verdicts; ``backbone`` names the run in the record (a kind, a variant, an ablation)."""
    if reuse and (out / RUN_RECORD).exists():  # written last, so the run finished
        print(f"{task}-{backbone} lr {lr}: reused, finished earlier in {out}", flush=True)
        return json.loads((out / RUN_RECORD).read_text())
    cmd = make_command()
    headline = TASK_CLASSES[task].headline  # accuracy, or masked_patches' PSNR
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tensor_memory_cli", *cmd[1:]], cwd=ROOT, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    if done.returncode:  # e.g. diverged at this learning rate: recorded, never shipped
        print(f"{task}-{backbone} lr {lr}: failed after {wall / 60:.1f} min", flush=True)
        return {
            "task": task,
            "backbone": backbone,
            "lr": float(lr),
            "steps": None,
            "command": " ".join(cmd),
            "wall_seconds": round(wall, 1),
            "error": done.stderr.strip().splitlines()[-1:] or ["(no message)"],
            "validation": {headline: -1.0},
            "run_dir": str(out.relative_to(ROOT)),
        }
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    val = [entry for entry in log if f"val_{headline}" in entry][-1]
    print(
        f"{task}-{backbone} lr {lr}: {wall / 60:.1f} min, validation {headline} {val[f'val_{headline}']:.4f}",
        flush=True,
    )
    steps = json.loads((out / "config.json").read_text())["training"]["steps"]
    result = {
        "task": task,
        "backbone": backbone,
        "lr": float(lr),
        "steps": steps,
        "command": " ".join(cmd),
        "wall_seconds": round(wall, 1),
        "validation": {k[4:]: v for k, v in val.items() if k.startswith("val_")},
        "run_dir": str(out.relative_to(ROOT)),
    }
    result["addressing_verdicts"] = addressing_verdicts(out)
    (out / RUN_RECORD).write_text(json.dumps(result, indent=2) + "\n")
    return result


def addressing_verdicts(run_dir: Path) -> dict[str, str]:
    """The addressing report's verdict for each memory layer of a finished run ({} without memory)."""
    ckpt = load_checkpoint(run_dir)
    if not memory_layers(ckpt.model):
        return {}
    traces = capture_many(ckpt, seed=0, indices=range(ADDRESSING_SAMPLES), progress=False)
    return {name: addressing_report(traces, name)["verdict"] for name in traces[0].layer_names}


def best(grid: list[dict]) -> dict:
    """Healthy addressing first (a memory that learned where to write), then validation perplexity for a
    language model (lower is better), the task's headline metric for the rest (accuracy; masked_patches' PSNR)."""

    def healthy(r: dict) -> bool:
        return all(v == "healthy" for v in r.get("addressing_verdicts", {}).values())

    def score(r: dict) -> float:
        val = r["validation"]
        return -val["perplexity"] if "perplexity" in val else val[TASK_CLASSES[r["task"]].headline]

    return max(grid, key=lambda r: ("error" not in r and healthy(r), score(r)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--backbones", nargs="+", default=list(BACKBONES), choices=BACKBONES + OTHER_BACKBONES)
    parser.add_argument(
        "--lrs",
        nargs="+",
        default=list(LEARNING_RATES),
        help=f"the learning-rate grid (default {' '.join(LEARNING_RATES)})",
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    parser.add_argument("--runs", default="runs/grid", help="where the grid's runs go (default runs/grid)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep the runs that already finished under --runs instead of training them again",
    )
    parser.add_argument(
        "--variants",
        nargs="*",
        default=list(VARIANTS),
        choices=list(VARIANTS),
        help="tensor variants retrained at the tensor run's learning rate (default: all; --variants alone: none)",
    )
    parser.add_argument(
        "--no-ship",
        action="store_true",
        help="only train and time the runs (each run's record in its folder under --runs); copy "
        "nothing to checkpoints/ and leave checkpoints/training.json as it is",
    )
    args = parser.parse_args()
    runs = ROOT / args.runs
    jobs = [(t, b, lr) for t in args.tasks for b in args.backbones for lr in args.lrs]
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run, *job, runs, args.threads, args.reuse) for job in jobs]
        if "tensor" in args.backbones:  # each variant at the rate its tensor run won, once those runs are done
            tensor_runs = [f.result() for f, job in zip(futures, jobs, strict=True) if job[1] == "tensor"]
            won = {t: best([r for r in tensor_runs if r["task"] == t])["lr"] for t in args.tasks}
            futures += [
                pool.submit(run, t, v, f"{won[t]:g}", runs, args.threads, args.reuse)
                for t in args.tasks
                for v in args.variants
            ]
        results = [f.result() for f in futures]
    if args.no_ship:
        for r in results:
            print(
                f"{r['task']}-{r['backbone']} lr {r['lr']:g}: {r['wall_seconds'] / 60:.1f} min "
                f"({r['run_dir']}/{RUN_RECORD})"
            )
        return
    record_path = ROOT / "checkpoints" / "training.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {"runs": []}
    redone = {(r["task"], r["backbone"]) for r in results}
    keep = [r for r in record["runs"] if (r["task"], r["backbone"]) not in redone]
    record["runs"] = keep + results
    for task, backbone in sorted(redone):
        grid = [r for r in results if (r["task"], r["backbone"]) == (task, backbone)]
        chosen = best(grid)
        if "error" in chosen:
            raise RuntimeError(f"every {task}-{backbone} run failed: {chosen['error']}")
        for r in grid:
            r["shipped"] = r is chosen
        target = ROOT / "checkpoints" / f"{task}-{backbone}"
        target.mkdir(parents=True, exist_ok=True)
        for name in SHIPPED_FILES + tuple(n for n in OPTIONAL_FILES if (ROOT / chosen["run_dir"] / n).exists()):
            shutil.copy2(ROOT / chosen["run_dir"] / name, target / name)
        if task in HALF_PRECISION:
            store_half_precision(target)
    grids = record.get("grid", {}).get("learning_rates_by_task", {})
    grids.update({task: [float(lr) for lr in args.lrs] for task in args.tasks})
    record["grid"] = {
        "learning_rates": [float(lr) for lr in LEARNING_RATES],
        "learning_rates_by_task": grids,
        "jobs": args.jobs,
        "variants": args.variants,
        "threads_per_job": args.threads,
        "total_wall_minutes_last_call": round((time.perf_counter() - started) / 60, 1),
    }
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"done in {(time.perf_counter() - started) / 60:.1f} min; record in {record_path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
