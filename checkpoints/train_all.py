"""Train every shipped checkpoint: each task with tensor, base and local on the same budget.

Every (task, backbone) pair runs the same steps from its task's config at each learning rate of
the same grid; the run with the best *validation* accuracy (batches disjoint from the reported
evaluation seeds) is copied to ``checkpoints/<task>-<backbone>/``. Then each tensor model is
retrained with the local update (``MemoryConfig.write_mode = "local"``) at the learning rate it won,
into ``checkpoints/<task>-tensor_local_update/``. The commands, wall times and the whole grid go to
``checkpoints/training.json``, from which ``checkpoints/README.md`` is written.

    .venv/bin/python checkpoints/train_all.py                 # everything (hours on 2 cores: see checkpoints/README.md)
    .venv/bin/python checkpoints/train_all.py --tasks no_harm --jobs 1 --variants   # no local-update retrain
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
TASKS = ("no_harm", "coordinate_binding", "occlusion", "map_building")
BACKBONES = ("tensor", "base", "local")
LEARNING_RATES = ("1e-3", "2e-3")
SHIPPED_FILES = ("model.safetensors", "config.json", "train_log.jsonl")


# Trained after the grid, at the learning rate the tensor run won: (backbone kind, extra --set overrides).
VARIANTS = {"tensor_local_update": ("tensor", ["model.memory.write_mode=local"])}


def command(task: str, backbone: str, lr: str, out: Path) -> list[str]:
    kind, extra = VARIANTS.get(backbone, (backbone, []))
    sets = [item for value in extra for item in ("--set", value)]
    return ["tensor-memory", "train", "--task", task, "--backbone", kind, *sets, "--set", f"training.lr={lr}",
            "--out", str(out.relative_to(ROOT)), "--no-progress"]


def run(task: str, backbone: str, lr: str, runs: Path, threads: int) -> dict:
    out = runs / f"{task}-{backbone}-lr{lr}"
    cmd = command(task, backbone, lr, out)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tensor_memory", *cmd[1:]], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:  # e.g. diverged at this learning rate: recorded, never shipped
        print(f"{task}-{backbone} lr {lr}: failed after {wall / 60:.1f} min", flush=True)
        return {"task": task, "backbone": backbone, "lr": float(lr), "steps": None, "command": " ".join(cmd),
                "wall_seconds": round(wall, 1), "error": done.stderr.strip().splitlines()[-1:] or ["(no message)"],
                "validation": {"accuracy": -1.0}, "run_dir": str(out.relative_to(ROOT))}
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    val = [entry for entry in log if "val_accuracy" in entry][-1]
    print(f"{task}-{backbone} lr {lr}: {wall / 60:.1f} min, validation accuracy {val['val_accuracy']:.4f}", flush=True)
    steps = json.loads((out / "config.json").read_text())["training"]["steps"]
    return {"task": task, "backbone": backbone, "lr": float(lr), "steps": steps, "command": " ".join(cmd),
            "wall_seconds": round(wall, 1), "validation": {k[4:]: v for k, v in val.items() if k.startswith("val_")},
            "run_dir": str(out.relative_to(ROOT))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--backbones", nargs="+", default=list(BACKBONES), choices=BACKBONES)
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel (default 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    parser.add_argument("--runs", default="runs/grid", help="where the grid's runs go (default runs/grid)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS),
                        help="tensor variants retrained at the tensor run's learning rate (default: all; --variants alone: none)")
    args = parser.parse_args()
    runs = ROOT / args.runs
    jobs = [(t, b, lr) for t in args.tasks for b in args.backbones for lr in LEARNING_RATES]
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda job: run(*job, runs, args.threads), jobs))
        if "tensor" in args.backbones:  # each variant at the rate its tensor run won
            won = {t: max((r for r in results if (r["task"], r["backbone"]) == (t, "tensor")),
                          key=lambda r: r["validation"]["accuracy"])["lr"] for t in args.tasks}
            variant_jobs = [(t, v, f"{won[t]:g}") for t in args.tasks for v in args.variants]
            results += list(pool.map(lambda job: run(*job, runs, args.threads), variant_jobs))
    record_path = ROOT / "checkpoints" / "training.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {"runs": []}
    redone = {(r["task"], r["backbone"]) for r in results}
    keep = [r for r in record["runs"] if (r["task"], r["backbone"]) not in redone]
    record["runs"] = keep + results
    for task, backbone in sorted(redone):
        grid = [r for r in results if (r["task"], r["backbone"]) == (task, backbone)]
        best = max(grid, key=lambda r: r["validation"]["accuracy"])
        if "error" in best:
            raise RuntimeError(f"every {task}-{backbone} run failed: {best['error']}")
        for r in grid:
            r["shipped"] = r is best
        target = ROOT / "checkpoints" / f"{task}-{backbone}"
        target.mkdir(parents=True, exist_ok=True)
        for name in SHIPPED_FILES:
            shutil.copy2(ROOT / best["run_dir"] / name, target / name)
    record["grid"] = {"learning_rates": [float(lr) for lr in LEARNING_RATES], "jobs": args.jobs,
                      "variants": args.variants,
                      "threads_per_job": args.threads,
                      "total_wall_minutes_last_call": round((time.perf_counter() - started) / 60, 1)}
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"done in {(time.perf_counter() - started) / 60:.1f} min; record in {record_path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
