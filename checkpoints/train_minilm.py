"""Train a Tensor Memory on frozen all-MiniLM-L6-v2 for the recall task, and the same head without it.

Both runs start from the same head initialisation and see the same batches; only the memory (and
the head) train — MiniLM stays frozen. The memory run ships as ``checkpoints/minilm-tensor/``:
``model.safetensors`` holds the memories and the head only, ``config.json`` names the base model
(package, version, sha256 of its weights) instead of copying it. Validation on test documents
logs the accuracy on asked pieces and each memory's σ(γ), so the gate's opening shows.

    OMP_NUM_THREADS=1 .venv/bin/python checkpoints/train_minilm.py --memory --out runs/minilm/memory &
    OMP_NUM_THREADS=1 .venv/bin/python checkpoints/train_minilm.py --out runs/minilm/frozen
    mkdir -p checkpoints/minilm-tensor
    cp runs/minilm/memory/{config.json,model.safetensors,train_log.jsonl} checkpoints/minilm-tensor/
    .venv/bin/python checkpoints/train_minilm.py --evaluate --out checkpoints/minilm-tensor --compare runs/minilm/frozen
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tensor_memory.pretrained.checkpoint import load_minilm_checkpoint, save_minilm  # noqa: E402
from tensor_memory.pretrained.recall import RecallConfig, RecallModel, evaluate_recall, recall_batch, sample_rows  # noqa: E402

EVAL_DOCS = 128  # test documents behind every validation figure
FINAL_DOCS = 512  # behind the shipped figures
CHECK_DOCS = 64  # a figure the tests recompute


def final_metrics(model: RecallModel, config: RecallConfig) -> dict:
    return {
        **evaluate_recall(model, config, docs=FINAL_DOCS),
        "first_64_documents": evaluate_recall(model, config, docs=CHECK_DOCS),
        "gate_scale": [float(torch.sigmoid(m.gate)) for m in model.memories],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memory", action="store_true", help="attach the memory (else: the frozen model + head)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16, help="documents per step")
    parser.add_argument("--lr", type=float, default=3e-3, help="memories and head")
    parser.add_argument("--gate-lr", type=float, default=3e-2, help="the memories' gate γ (starts closed at −8)")
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="DIR",
        help="with --evaluate: a frozen run (no --memory) whose metrics.json figures go beside the memory's",
    )
    parser.add_argument(
        "--evaluate",
        action="store_true",
        help="evaluate the checkpoint in --out again (as loaded from disk) and rewrite its metrics.json",
    )
    args = parser.parse_args()
    if args.evaluate:  # shipped as float16, and evaluated as shipped
        model, config_json, before = load_minilm_checkpoint(args.out)
        wall = (before or {}).get("wall_seconds")  # the training run's, kept
        save_minilm(args.out, model, config_json["training"], half=True)
        model, config_json, _ = load_minilm_checkpoint(args.out)
        metrics = {**final_metrics(model, model.config), "wall_seconds": wall}
        if args.compare:
            _, frozen_config, frozen = load_minilm_checkpoint(args.compare)
            if frozen_config["memory"] or frozen is None:
                raise SystemExit(f"--compare {args.compare}: not a finished frozen run (trained without --memory)")
            metrics["frozen"] = {**frozen, "from": str(args.compare), "command": frozen_config["training"]["command"]}
        save_minilm(args.out, model, config_json["training"], metrics, half=True)
        print(json.dumps(metrics))
        return
    config = RecallConfig()
    torch.manual_seed(0)
    model = RecallModel(config, memory=args.memory)
    gates = [m.gate for m in model.memories]
    rest = [p for p in model.parameters() if p.requires_grad and all(p is not g for g in gates)]
    optimizer = torch.optim.AdamW(
        [{"params": rest, "lr": args.lr}, {"params": gates, "lr": args.gate_lr, "weight_decay": 0.0}]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    log_path = args.out / "train_log.jsonl"
    log = log_path.open("w")
    started = time.perf_counter()
    for step in tqdm(range(args.steps), desc="minilm-" + ("tensor" if args.memory else "frozen")):
        data = recall_batch(config, "train", sample_rows("train", config, args.batch, step))
        loss = torch.nn.functional.cross_entropy(*model(data["ids"], data["targets"]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        done = step + 1
        entry = {
            "step": done,
            "loss": round(loss.item(), 5),
            "gate_scale": [round(float(torch.sigmoid(g)), 6) for g in gates],
        }
        if done % args.eval_every == 0 or done == args.steps:
            entry.update({f"val_{k}": v for k, v in evaluate_recall(model, config, docs=EVAL_DOCS).items()})
        log.write(json.dumps(entry) + "\n")
        log.flush()
    wall = time.perf_counter() - started
    metrics = {**final_metrics(model, config), "wall_seconds": round(wall, 1)}
    save_minilm(
        args.out,
        model,
        {
            "steps": args.steps,
            "batch": args.batch,
            "lr": args.lr,
            "gate_lr": args.gate_lr,
            "command": " ".join(sys.argv),
        },
        metrics,
    )
    print(json.dumps(metrics))


if __name__ == "__main__":
    main()
