"""The memory budget's estimate against what a training run really peaks at, as the vocabulary grows.

For each vocabulary size, writes a WikiText-shaped corpus of that many word types, runs ``tensor-memory train`` on it
in a fresh process (the shipped language config, its batch and sequence, a few steps) and reads the process's peak
resident memory; beside it, what ``backbone.budget.estimated_parts`` said for the same run and the peak of the
same run at the smallest vocabulary (what Python, torch and the data hold whatever the vocabulary). The budget
refuses a run before allocation when its estimate is over ``limits.MEMORY_BUDGET_BYTES``; this shows whether the
estimate is on the safe side.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, machine, table

PEAK = """
import resource, sys
from tensor_memory_cli import main
code = main(sys.argv[1:])
print("PEAK_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
sys.exit(code)
"""


def write_corpus(folder: Path, types: int) -> None:
    """wiki.{train,valid,test}.tokens whose vocabulary has ``types`` types: ``types - 2`` words, <eos> and <unk>, each
    word at least twice in train."""
    folder.mkdir(parents=True, exist_ok=True)
    words = [f"w{k}" for k in range(types - 2)]
    order = words + words[::-1]
    lines = [" ".join(order[i : i + 16]) for i in range(0, len(order), 16)]
    (folder / "wiki.train.tokens").write_text("\n".join(lines) + "\n")
    for split in ("valid", "test"):
        (folder / f"wiki.{split}.tokens").write_text("\n".join(lines[:400]) + "\n")


def estimate(run: Path) -> dict[str, int]:
    """What the budget estimated for the training run that wrote ``run`` (its own settings, read back)."""
    from tensor_memory.backbone.budget import estimated_parts
    from tensor_memory.storage.checkpoint import load_checkpoint

    ckpt = load_checkpoint(run)
    return estimated_parts(
        ckpt.model.backbone.config,
        ckpt.task.tokens,
        ckpt.config["training"]["batch_size"],
        True,
        ckpt.task.output_width,
        ckpt.task.input_vocabulary,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--vocab",
        type=int,
        nargs="+",
        default=[2_000, 50_000, 100_000, 200_000],
        help="vocabulary sizes to run (default 2000 50000 100000 200000; the first is the baseline)",
    )
    p.add_argument("--steps", type=int, default=2, help="training steps a run (default 2)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        baseline = None
        for types in args.vocab:
            folder = Path(scratch) / f"wiki{types}"
            write_corpus(folder, types)
            overrides = [
                "task.params.corpus=wikitext",
                f"task.params.path={folder}",
                f"task.params.vocab_size={types}",
                "training.eval_batches=1",
                f"training.eval_every={args.steps}",
                "training.warmup_steps=0",
            ]
            command = [
                sys.executable,
                "-c",
                PEAK,
                "train",
                "--task",
                "language_modelling",
                "--backbone",
                "tensor",
                "--steps",
                str(args.steps),
                "--out",
                str(Path(scratch) / f"run{types}"),
                "--no-progress",
            ]
            for setting in overrides:
                command += ["--set", setting]
            env = {"OMP_NUM_THREADS": str(args.threads), "PATH": "/usr/bin:/bin"}
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
            peak_lines = [line for line in done.stdout.splitlines() if line.startswith("PEAK_KB")]
            if done.returncode != 0 or not peak_lines:
                print(f"{types:,} types: the run failed ({done.returncode}): {(done.stdout + done.stderr)[-400:]}")
                rows.append([f"{types:,}", "failed", "", "", "", ""])
                continue
            peak = int(peak_lines[-1].split()[1]) * 1024
            baseline = peak if baseline is None else baseline
            parts = estimate(Path(scratch) / f"run{types}")
            total = sum(parts.values())
            rows.append(
                [
                    f"{types:,}",
                    f"{total / 2**30:.2f}",
                    f"{parts['logits'] / 2**30:.2f}",
                    f"{peak / 2**30:.2f}",
                    f"{(peak - baseline) / 2**30:.2f}",
                    f"{total / max(peak - baseline, 1):.2f}" if peak > baseline else "",
                ]
            )
            print(json.dumps({"types": types, "estimate": total, "peak": peak}), flush=True)
    print(
        f"\n{machine(args.threads)}; language_modelling, tensor backbone, the shipped config's batch and sequence, "
        f"{args.steps} steps; peak = the process's maximum resident set\n"
    )
    print(
        table(
            [
                "word types",
                "estimate (GiB)",
                "of it logits",
                "peak (GiB)",
                "peak above the smallest",
                "estimate / growth",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
