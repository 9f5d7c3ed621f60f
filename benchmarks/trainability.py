"""What a configuration learns in a fixed budget: the bisection behind docs/trainability.md.

Trains one task model from ``configs/<task>.toml`` (plus ``--set`` overrides, as
``tensor-memory train`` takes them, and named ``--variant`` changes that no config expresses),
with the project's own optimiser, schedule and loss, and prints at every evaluation the accuracy
on a fixed set of probe samples (never a training batch) and each memory layer's addressing
measures (tensor_memory.memory.measures). Each row of docs/trainability.md is one such run per seed:

    .venv/bin/python benchmarks/trainability.py --task occlusion --seed 0 --steps 1000 \\
        --set model.positions=sinusoidal --record runs/trainability.jsonl --row "sinusoidal positions"
    .venv/bin/python benchmarks/trainability.py --table runs/trainability.jsonl

Run two at a time with OMP_NUM_THREADS=1 each (see DEVELOPERS.md): a step costs about 0.4 s then.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.measures.world import place_fit  # noqa: E402
from tensor_memory.memory import (  # noqa: E402
    TensorMemory,
    memory_layers,
    record,  # noqa: E402
)
from tensor_memory.memory.measures import layer_measures  # noqa: E402
from tensor_memory.tasks import TaskModel  # noqa: E402
from tensor_memory.tasks.base import derive_seed  # noqa: E402
from tensor_memory.training import apply_overrides, load_run_config, resolve  # noqa: E402
from tensor_memory.training.curriculum import HorizonCurriculum  # noqa: E402
from tensor_memory.training.evaluation import evaluate  # noqa: E402
from tensor_memory.training.loop import freeze, make_optimizer, set_learning_rate, training_loss  # noqa: E402
from tensor_memory.training.scaffold import address_scaffold  # noqa: E402

PROBE_SEED, PROBE_BATCHES, PROBE_BATCH_SIZE = 0, 4, 64  # 256 fixed samples, stream "probe"


# Differences between the project and the plain prototype (../shared/trainability/) that no config
# setting expresses. Each takes the freshly built model and returns it changed.


def embeddings_at_unit_scale(model: TaskModel, _task) -> TaskModel:
    """The encoders' embeddings at PyTorch's default init, N(0, 1): the project before the fix."""
    for module in model.encoder.modules():
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=1.0)
    return model


def embeddings_at_linear_scale(model: TaskModel, _task) -> TaskModel:
    """The encoders' embeddings at std 0.3, about the scale of the features their Linear maps give."""
    for module in model.encoder.modules():
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.3)
    return model


def map_places_dominant(model: TaskModel, _task) -> TaskModel:
    """Map building: the row and column tables at N(0, 1), the flag table and the values' Linear at 1/20 of
    their init, so a token's place dominates its features at the start for reads and writes alike."""
    encoder = model.encoder
    nn.init.normal_(encoder.row.weight, std=1.0)
    nn.init.normal_(encoder.col.weight, std=1.0)
    encoder.flag.weight.mul_(0.05)
    encoder.values.weight.mul_(0.05)
    encoder.values.bias.mul_(0.05)
    return model


def wide_coordinates(model: TaskModel, _task) -> TaskModel:
    """Every memory's coordinate head at three times its init, so that addresses span the grid from the start."""
    for memory in memory_layers(model).values():
        memory.coord_head.weight.mul_(3.0)
    return model


class SmoothPlaces(nn.Module):
    """Map building's row and column as one Linear of (row, col) scaled to [-1, 1], in place of two tables."""

    def __init__(self, encoder: nn.Module, map_size: int, dim: int) -> None:
        super().__init__()
        self.inner, self.scale = encoder, 2.0 / max(map_size - 1, 1)
        self.place = nn.Linear(2, dim)

    def forward(self, values, row, col, is_query):
        e = self.inner
        cells = torch.stack([row, col], dim=-1).float() * self.scale - 1.0  # (B, N, 2)
        return e.values(values) + self.place(cells) + e.flag(is_query)


def smooth_places_dominant(model: TaskModel, task) -> TaskModel:
    """smooth_map_places, with the values' Linear and the flag table at 1/20 of their init."""
    model = smooth_map_places(model, task)
    inner = model.encoder.inner
    inner.flag.weight.mul_(0.05)
    inner.values.weight.mul_(0.05)
    inner.values.bias.mul_(0.05)
    return model


def smooth_map_places(model: TaskModel, task) -> TaskModel:
    """Map building: nearby cells get nearby features (a Linear of the position), as binding's keys do."""
    model.encoder = SmoothPlaces(model.encoder, task.config.map_size, model.backbone.config.dim)
    return model


HOLD_STEPS = 500  # how long hold_residuals_before_memory keeps those residuals at zero


def hold_residuals_before_memory(model: TaskModel, _task) -> TaskModel:
    """The residual branches the first memory layer reads through (every earlier block's attention and MLP,
    and its own block's attention) start at zero and stay there for HOLD_STEPS training steps, so the memory
    first learns on the raw embeddings; then they train as usual."""
    first = next(i for i, block in enumerate(model.backbone.blocks) if isinstance(block.memory, TensorMemory))
    outputs = [block.attn.out for block in model.backbone.blocks[: first + 1]]
    outputs += [block.mlp.down for block in model.backbone.blocks[:first]]
    steps = [0]

    def count(module, _inputs):
        if module.training:
            steps[0] += 1

    model.register_forward_pre_hook(count)
    for linear in outputs:
        for parameter in linear.parameters():
            parameter.zero_()
            parameter.register_hook(lambda grad: grad * 0 if steps[0] <= HOLD_STEPS else grad)
    return model


class GivenAddresses(nn.Module):
    """The model with every read and write of its memory layers at the task's true places
    (``Task.true_places``: map building's queried cell and observed patch, binding's key), in training and
    in every probe; the learned coordinate head runs and gets no gradient."""

    def __init__(self, model: TaskModel, task) -> None:
        super().__init__()
        self.model, self.task = model, task

    def forward(self, inputs, state=None):
        with address_scaffold(self.model, self.task.true_places(inputs), 1.0):
            return self.model(inputs, state)


def oracle_addresses(model: TaskModel, task) -> TaskModel:
    """The addressing given (the address scaffold at weight 1 throughout, probes included)."""
    return GivenAddresses(model, task)


class FrameEmbedding(nn.Module):
    """The task encoder plus a learned embedding of each token's frame (std 0.02), as the prototype has."""

    def __init__(self, encoder: nn.Module, frames: int, tokens_per_frame: int, dim: int) -> None:
        super().__init__()
        self.inner, self.tokens_per_frame = encoder, tokens_per_frame
        self.frame = nn.Parameter(torch.randn(frames, dim) * 0.02)

    def forward(self, **inputs):
        x = self.inner(**inputs)  # (B, N, dim)
        return x + self.frame.repeat_interleave(self.tokens_per_frame, dim=0)[: x.shape[1]]


def frame_embedding(model: TaskModel, task) -> TaskModel:
    cfg = task.config
    model.encoder = FrameEmbedding(model.encoder, cfg.frames, cfg.tokens_per_frame, model.backbone.config.dim)
    return model


def no_final_norm(model: TaskModel, _task) -> TaskModel:
    """No LayerNorm between the last block and the head (the prototype has none)."""
    model.backbone.norm = nn.Identity()
    return model


def attention_init_as_mha(model: TaskModel, _task) -> TaskModel:
    """Attention projections initialised as nn.MultiheadAttention does: Xavier-uniform, zero biases."""
    for name, module in model.backbone.named_modules():
        if name.endswith(".attn"):
            for proj in (module.query, module.key, module.value):
                nn.init.xavier_uniform_(proj.weight)
                if proj.bias is not None:
                    nn.init.zeros_(proj.bias)
            nn.init.zeros_(module.out.bias)
    return model


def input_dependent_sigma(model: TaskModel, _task) -> TaskModel:
    """σ's weights at Linear's default init (σ depends on the summary from step 0), as the prototype's
    0.5·softplus(·) + 10⁻³ starts (about 0.35); run with model.memory.sigma_min=0.001."""
    for memory in memory_layers(model).values():
        memory.spread.reset_parameters()
        with torch.no_grad():
            memory.spread.weight.mul_(0.5)
            memory.spread.bias.fill_(math.log(math.expm1(0.35 - memory.config.sigma_min)))
    return model


VARIANTS = {
    f.__name__: f
    for f in (
        embeddings_at_unit_scale,
        embeddings_at_linear_scale,
        smooth_map_places,
        smooth_places_dominant,
        wide_coordinates,
        oracle_addresses,
        hold_residuals_before_memory,
        map_places_dominant,
        frame_embedding,
        no_final_norm,
        attention_init_as_mha,
        input_dependent_sigma,
    )
}
OPTIMISERS = ("project", "prototype")  # prototype: AdamW with weight decay on every parameter


def probe(model: TaskModel, task) -> dict:
    metrics = evaluate(
        model,
        task,
        seed=PROBE_SEED,
        batches=PROBE_BATCHES,
        batch_size=PROBE_BATCH_SIZE,
        purpose="probe",
        progress=False,
    )
    out = {k: v for k, v in metrics.items() if v is not None and (k.endswith("accuracy") or k == "gate_drift")}
    if memory_layers(model):
        batch = task.sample(PROBE_BATCH_SIZE, derive_seed("probe", PROBE_SEED, 0))
        model.eval()
        with torch.no_grad(), record(model, gates=False) as rec:
            model(batch.inputs)
        model.train()
        grids = {name: memory.config.grid for name, memory in memory_layers(model).items()}
        out["addressing"] = {
            name: {k: round(v, 3) for k, v in layer_measures(r, grids[name]).items() if v is not None}
            for name, r in rec.layers.items()
        }
        places, where = task.true_places(batch.inputs), None  # None for a task without places
        if places is None and "positions" in batch.meta:  # a moving object (y, x) per frame: do writes follow it?
            places, where = batch.meta["positions"].float(), ~batch.meta["occluded"]  # on the frames it is seen
        if places is not None:
            for name, r in rec.layers.items():
                K = r.mu_write.shape[1]
                seen = None if where is None else where[:, :K].numpy()
                fit = place_fit(r.mu_write.numpy(), places[:, :K].numpy(), seen)
                out["addressing"][name]["place_r2"] = round(fit, 3)
    return out


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    config = load_run_config(ROOT / "configs" / f"{args.task}.toml", args.backbone)
    config = apply_overrides(config, [f"training.steps={args.steps}", f"training.seed={args.seed}", *args.set])
    task, backbone, cfg = resolve(config)
    torch.manual_seed(cfg.seed)
    model = TaskModel(task, backbone)
    with torch.no_grad():
        for name in args.variant:
            model = VARIANTS[name](model, task)
    freeze(model, cfg.frozen)  # training.frozen, as tensor-memory train applies it
    if args.optimiser == "prototype":
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    else:
        optimizer = make_optimizer(model, cfg)
    history, start = [], time.perf_counter()
    curriculum = HorizonCurriculum(task, cfg)  # training.horizon_steps: shorter samples first, as tensor-memory train
    for step in range(cfg.steps):
        set_learning_rate(optimizer, step, cfg)
        samples = curriculum.task_at(step)
        batch = samples.sample(cfg.batch_size, derive_seed("train", cfg.seed, step))
        loss, _ = training_loss(model, samples, batch, step, cfg)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        done = step + 1
        if done % args.eval_every == 0 or done == cfg.steps:
            entry = {
                "step": done,
                "loss": round(loss.item(), 4),
                **probe(model, task),
                "seconds": round(time.perf_counter() - start),
            }
            history.append(entry)
            print(json.dumps(entry), flush=True)
    command = " ".join(
        [
            "benchmarks/trainability.py",
            "--task",
            args.task,
            "--backbone",
            args.backbone,
            "--steps",
            str(args.steps),
            "--seed",
            str(args.seed),
        ]
        + [f"--set {s}" for s in args.set]
        + [f"--variant {v}" for v in args.variant]
        + ([f"--optimiser {args.optimiser}"] if args.optimiser != "project" else [])
    )
    return {
        "row": args.row,
        "task": args.task,
        "backbone": args.backbone,
        "seed": args.seed,
        "steps": args.steps,
        "set": args.set,
        "variant": args.variant,
        "optimiser": args.optimiser,
        "command": command,
        "history": history,
    }


def _addressing_cell(results: list[dict]) -> str:
    """The last probe's addressing, worst memory layer, mean over seeds: write spread and median σ (voxels), share at a
    face, and where the task has places the R² of the writes against them (best layer; "—" in runs before it)."""
    last = [r["history"][-1].get("addressing") for r in results]
    if not all(last):
        return "—"
    spread = sum(min(m["write_spread_voxels"] for m in a.values()) for a in last) / len(last)
    sigma = sum(max(m["sigma_voxels"] for m in a.values()) for a in last) / len(last)
    face = sum(max(m["boundary_fraction"] for m in a.values()) for a in last) / len(last)
    fits = [max(m["place_r2"] for m in a.values()) for a in last if all("place_r2" in m for m in a.values())]
    place = f" / R² {sum(fits) / len(fits):.2f}" if fits and len(fits) == len(last) else ""
    return f"{spread:.1f} / {sigma:.1f} / {face:.0%}{place}"


def table(path: Path) -> str:
    """One line per row label: the key accuracy at each evaluated step (hidden frames for occlusion and moving digits),
    mean over seeds (each seed's value in brackets), and the addressing at the last step."""
    rows: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            result = json.loads(line)
            rows.setdefault(result["row"], []).append(result)
    steps = [e["step"] for e in next(iter(rows.values()))[0]["history"]]
    out = [
        "| row | seeds | " + " | ".join(f"step {s}" for s in steps) + " | spread / σ / at a face / place R² |",
        "|---|---|" + "---:|" * len(steps) + "---|",
    ]
    for label, results in rows.items():
        metric = "occluded_accuracy" if results[0]["task"] in ("occlusion", "moving_digits") else "accuracy"  # hidden
        cells = []
        at_step = [{e["step"]: e for e in r["history"]} for r in results]  # runs may evaluate at other steps
        for step in steps:
            values = [h[step][metric] for h in at_step if step in h]
            cells.append(
                f"{sum(values) / len(values):.3f} ({', '.join(f'{v:.2f}' for v in values)})" if values else "—"
            )
        seeds = ", ".join(str(r["seed"]) for r in sorted(results, key=lambda r: r["seed"]))
        out.append(f"| {label} | {seeds} | " + " | ".join(cells) + f" | {_addressing_cell(results)} |")
    return "\n".join(out)


def commands(path: Path) -> str:
    """Each row's command (seed 0's; the other seeds differ only in --seed)."""
    seen: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            result = json.loads(line)
            seen.setdefault(result["row"], result["command"])
    return "\n".join(f"- {row}: `.venv/bin/python {command}`" for row, command in seen.items())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--task", default="occlusion", help="a task with a config in configs/ (default occlusion)")
    parser.add_argument("--backbone", default="tensor", help="backbone kind (default tensor)")
    parser.add_argument("--steps", type=int, default=1000, help="training steps (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="initialisation and data seed (default 0)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override a config value, as tensor-memory train --set does (repeatable)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        choices=sorted(VARIANTS),
        help="a change no config expresses (repeatable): "
        + "; ".join(f"{name}: {f.__doc__.splitlines()[0]}" for name, f in VARIANTS.items() if f.__doc__),
    )
    parser.add_argument(
        "--optimiser",
        default="project",
        choices=OPTIMISERS,
        help="project: AdamW, weight decay on matrices only; prototype: on every parameter",
    )
    parser.add_argument("--eval-every", type=int, default=250, help="steps between probes (default 250)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--row", default="", help="the row label stored with the result")
    parser.add_argument("--record", help="append the result as one JSON line to this file")
    parser.add_argument("--table", metavar="FILE", help="print the Markdown table of a record file and exit")
    args = parser.parse_args()
    if args.table:
        print(table(Path(args.table)) + "\n\n" + commands(Path(args.table)))
        return
    result = run(args)
    if args.record:
        with open(args.record, "a") as handle:
            handle.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
