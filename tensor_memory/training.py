"""Training: one run = a task, a backbone and a schedule, written to a checkpoint directory.

Everything a step sees is a function of (seed, step): the batch for step s is
``task.draw("train", batch_size, seed, s)`` (the synthetic tasks generate it from ``derive_seed("train", seed, s)``), so a run resumed from its last checkpoint continues exactly
as if it had never stopped, and data-parallel ranks split the very same global batch.

Run it as ``tensor-memory train`` or, on several processes, ``torchrun --nproc_per_node N -m
tensor_memory_cli train …`` (PyTorch DDP: gloo on CPU, nccl on GPU).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import tomllib
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist
from tqdm import tqdm

from .addressing import layer_measures
from .backbone import BackboneConfig
from .checkpoint import MAX_CONFIG_BYTES, SCHEMA_VERSION, save_checkpoint
from .files import RUN_FILES, atomic_write_text, remove_stale_temp_files
from .resume import load_resume, save_resume
from .training_log import LOG_FILE, read_training_log
from . import limits as L
from .config import ConfigBase, require_float, require_int
from .evaluation import evaluate
from .memory import TensorMemory
from .model import TaskModel
from .recording import record
from .scaffold import address_scaffold, check_scaffold, scaffold_weight
from .tasks import Batch, make_task

RESUME_FILE = "resume.safetensors"  # weights + optimizer state + step, one atomic file
ADDRESSING_SAMPLES = 16  # validation samples whose recording gives the addressing measures logged at each evaluation


@dataclasses.dataclass
class TrainConfig(ConfigBase):
    steps: int = 2000
    batch_size: int = 32  # global batch: split across data-parallel ranks
    lr: float = 1e-3  # peak learning rate, reached after warm-up
    weight_decay: float = 0.01  # AdamW, on matrices only (not norms, biases, gates)
    warmup_steps: int = 100  # linear warm-up from 0
    min_lr_ratio: float = 0.1  # cosine decay ends at lr · min_lr_ratio
    grad_clip: float = 1.0  # max global gradient norm
    eval_every: int = 250  # steps between evaluations (and checkpoints)
    eval_batches: int = 4
    log_every: int = 10
    seed: int = 0  # model initialisation and the training data stream
    frozen: list[str] = dataclasses.field(default_factory=list)  # parameters kept at their initial values:
    # every parameter whose name contains one of these strings, e.g. ["coord_head"] to train a memory
    # with its addressing held where coord_init put it
    address_scaffold_steps: int = 0  # steps over which the task's true places are withdrawn from the memory's
    # coordinates (tensor_memory/scaffold.py): all of them at step 0, none from this step on; 0 = off

    def __post_init__(self) -> None:
        owner = "TrainConfig"
        for name, minimum, maximum in (("steps", 1, L.MAX_STEPS), ("batch_size", 1, L.MAX_BATCH),
                                       ("warmup_steps", 0, L.MAX_STEPS), ("eval_every", 1, L.MAX_STEPS),
                                       ("eval_batches", 1, L.MAX_STEPS), ("log_every", 1, L.MAX_STEPS),
                                       ("seed", 0, None), ("address_scaffold_steps", 0, L.MAX_STEPS)):
            require_int(owner, name, getattr(self, name), minimum, maximum)
        require_float(owner, "lr", self.lr, 0.0, low_open=True)
        require_float(owner, "weight_decay", self.weight_decay, 0.0)
        require_float(owner, "min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        require_float(owner, "grad_clip", self.grad_clip, 0.0, low_open=True)
        if not isinstance(self.frozen, list) or not all(isinstance(n, str) and n for n in self.frozen):
            raise ValueError(f"{owner}.frozen must be a list of parameter-name parts, got {self.frozen!r}")
        if self.address_scaffold_steps and self.address_scaffold_steps >= self.steps:
            raise ValueError(f"{owner}.address_scaffold_steps={self.address_scaffold_steps} must be below steps="
                             f"{self.steps}: a model has to train on its own addressing once the scaffold is gone; "
                             f"lower it, raise the steps, or set it to 0")


# ---------------------------------------------------------------------------------------
# Run configuration: TOML files in configs/ plus type-checked overrides
# ---------------------------------------------------------------------------------------

def load_run_config(path: Path, backbone: str) -> dict[str, Any]:
    """A config dict {task, model, training} from a TOML file, for one backbone kind.

    The file holds ``[task]`` (name and ``[task.params]``), ``[model]`` settings shared by
    every backbone, ``[backbone.<kind>]`` settings for one kind (merged over ``[model]``),
    and ``[training]``, which ``[backbone.<kind>.training]`` extends for that kind alone.
    """
    try:
        size = Path(path).stat().st_size
        if size > MAX_CONFIG_BYTES or not Path(path).is_file():
            raise ValueError(f"{path}: not a run config (a TOML file of a few kilobytes); pass configs/TASK.toml")
        data = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: cannot read the config ({error})") from None
    unknown = sorted(set(data) - {"task", "model", "backbone", "training"})
    if unknown:
        raise ValueError(f"{path}: unknown section(s) {unknown}; expected task, model, backbone, training")
    own = dict(data.get("backbone", {}).get(backbone, {}))
    own_training = own.pop("training", {})
    model = {**data.get("model", {}), **own, "kind": backbone}
    task = data.get("task", {})
    return {"task": {"name": task.get("name"), "params": dict(task.get("params", {}))},
            "model": model, "training": {**data.get("training", {}), **own_training}}


def _parse_value(text: str, current: Any, key: str) -> Any:
    """``text`` in TOML syntax (a bare word is a string), checked against the type of ``current``."""
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    if current is None:  # no default to compare with: the config's own validation decides
        return value
    if isinstance(current, bool) or isinstance(value, bool):
        ok = isinstance(current, bool) and isinstance(value, bool)
    elif isinstance(current, float):
        ok = isinstance(value, (int, float))
        value = float(value) if ok else value
    else:
        ok = isinstance(value, type(current))
    if not ok:
        raise ValueError(f"--set {key}={text}: expected a {type(current).__name__}, got {type(value).__name__}")
    return value


def apply_overrides(config: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.field=value`` (nested with dots: ``model.memory.channels=8``), type-checked
    against the field's current or default value."""
    defaults = {"training": TrainConfig().to_dict(), "model": BackboneConfig(kind="base").to_dict()}
    for item in overrides:
        key, sep, text = item.partition("=")
        path = key.split(".")
        if not sep or len(path) < 2 or path[0] not in ("task", "model", "training"):
            raise ValueError(f"--set {item!r}: expected section.field=value with section task, model or training")
        node, default = config, defaults
        for part in path[:-1]:
            node = node.setdefault(part, {})
            default = default.get(part, {}) if isinstance(default, dict) else {}
        current = node.get(path[-1], default.get(path[-1]) if isinstance(default, dict) else None)
        node[path[-1]] = _parse_value(text, current, key)
    return config


def resolve(config: dict[str, Any]) -> tuple[Any, BackboneConfig, TrainConfig]:
    """Validated (task, backbone config, training config); fills the memory's chunk size from the task."""
    task = make_task(config["task"]["name"], config["task"].get("params"))
    model = dict(config["model"])
    if model.get("kind") == "tensor":
        memory = dict(model.get("memory") or {})
        memory.setdefault("token_dim", model.get("dim", 64))
        memory.setdefault("chunk_size", task.chunk_size)
        model["memory"] = memory
    backbone = BackboneConfig.from_dict(model)
    return task, backbone, TrainConfig.from_dict(config.get("training", {}))


def state_budget(backbone: BackboneConfig) -> dict[str, Optional[int]]:
    """Numbers held per sequence by the fixed-size state: memory volumes, and a windowed KV cache."""
    memory = backbone.memory.state_numel * len(backbone.memory_layers or range(backbone.layers)) \
        if backbone.kind == "tensor" else None
    kv = 2 * backbone.dim * (backbone.window - 1) * backbone.layers if backbone.window else None
    total = None if backbone.window is None else (memory or 0) + kv  # None: a KV cache that grows
    return {"memory_state_numbers": memory, "kv_cache_numbers": kv, "total_state_numbers": total}


# ---------------------------------------------------------------------------------------
# Optimisation
# ---------------------------------------------------------------------------------------

def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``lr``, then cosine decay to ``lr · min_lr_ratio`` at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def freeze(model: torch.nn.Module, patterns: list[str]) -> None:
    """Stop training every parameter whose name contains one of ``patterns``; each must match one."""
    for pattern in patterns:
        matched = [p for name, p in model.named_parameters() if pattern in name]
        if not matched:
            raise ValueError(f"training.frozen: no parameter name contains {pattern!r}")
        for parameter in matched:
            parameter.requires_grad_(False)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    trained = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trained if p.dim() >= 2]
    rest = [p for p in trained if p.dim() < 2]  # norms, biases, the memory gate γ
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr)


def addressing_during_training(model: TaskModel, task, seed: int) -> dict[str, dict[str, Optional[float]]]:
    """Each memory layer's addressing measures (tensor_memory.addressing) on a few validation samples.

    Logged at every evaluation, so a collapse shows when it happens: {layer path: {measure: value}}.
    Empty for a model without memory layers.
    """
    grids = {name: m.config.grid for name, m in model.named_modules() if isinstance(m, TensorMemory)}
    if not grids:
        return {}
    batch = task.draw("val-addressing", ADDRESSING_SAMPLES, seed, 0)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), record(model) as recording:
            model(batch.inputs)
    finally:
        model.train(was_training)
    return {name: layer_measures(layer, grids[name]) for name, layer in recording.layers.items()}


def loss_on(model: torch.nn.Module, task, batch: Batch) -> torch.Tensor:
    """The task's loss over the scored positions: cross-entropy, or a values task's own (a squared error)."""
    outputs, _ = model(batch.inputs)
    return task.loss(outputs, batch)


def training_loss(model: torch.nn.Module, task, batch: Batch, step: int, cfg: TrainConfig) -> torch.Tensor:
    """``loss_on`` at training step ``step``, with the address scaffold's places blended in while it lasts."""
    weight = scaffold_weight(step, cfg.address_scaffold_steps)
    places = task.true_places(batch.inputs) if weight else None
    with address_scaffold(model, places, weight):
        return loss_on(model, task, batch)


# ---------------------------------------------------------------------------------------
# Data parallelism
# ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class Distributed:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed() -> Distributed:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1); otherwise a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Distributed()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return Distributed(dist.get_rank(), dist.get_world_size())


# ---------------------------------------------------------------------------------------
# Resuming (the file itself: resume.py)
# ---------------------------------------------------------------------------------------

def _trim_log(path: Path, step: int) -> None:
    """Keep the log entries of steps a resumed run will not redo."""
    if path.exists():
        kept = [entry for entry in read_training_log(path, allow_cut_last_line=True) if entry["step"] <= step]
        atomic_write_text(path, "".join(json.dumps(entry) + "\n" for entry in kept))


# ---------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------

def check_out(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse an ``out`` that holds an earlier run unless told to resume it or to replace it."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file, not a folder; choose a folder for the run")
    found = [name for name in RUN_FILES if (out / name).exists()]
    if found and not (resume or overwrite):
        raise ValueError(f"--out {out}: already holds a run ({', '.join(found)}); continue it with --resume, "
                         f"replace it with --overwrite, or choose another --out")
    if not out.exists():
        parent = next((p for p in out.parents if p.exists()), Path("."))
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise ValueError(f"--out {out}: cannot create the folder there ({parent} is not a writable folder)")
    elif not os.access(out, os.W_OK):
        raise ValueError(f"--out {out}: the folder is not writable")


def train(config: dict[str, Any], out: Path, resume: bool = False, progress: bool = True,
          overwrite: bool = False) -> dict[str, Any]:
    """Train one run into ``out``; returns the final evaluation metrics.

    ``config``: {task: {name, params}, model: BackboneConfig fields, training: TrainConfig
    fields}. With ``resume``, continue from ``out/resume.safetensors`` if present. An ``out`` holding
    an earlier run is refused unless ``resume`` or ``overwrite`` (which replaces that run) is given.
    """
    task, backbone, cfg = resolve(config)
    L.check_budget(backbone, task.tokens, cfg.batch_size, training=True, where="the training config")
    full_config = {"schema_version": SCHEMA_VERSION,
                   "task": {"name": task.name, "params": task.config.to_dict()},
                   "model": backbone.to_dict(), "training": cfg.to_dict(), "state_budget": state_budget(backbone)}
    world = init_distributed()
    if cfg.batch_size % world.world:
        raise ValueError(f"TrainConfig.batch_size={cfg.batch_size} must divide evenly over {world.world} processes")
    out = Path(out)
    check_out(out, resume, overwrite)  # before any work: nothing of an earlier run is lost by accident
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    model = TaskModel(task, backbone)
    freeze(model, cfg.frozen)
    check_scaffold(model, task, cfg.address_scaffold_steps)
    optimizer = make_optimizer(model, cfg)
    start = 0
    resume_path, log_path = out / RESUME_FILE, out / LOG_FILE
    if resume and resume_path.exists():
        start = load_resume(resume_path, model, optimizer, full_config)
        task.restore(out)  # the files the run began with (a tokenizer), not ones rebuilt now
    elif resume and (out / "model.safetensors").exists():
        raise ValueError(f"{out}: nothing to resume, training already finished; use another --out to retrain")
    if world.main:
        out.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(out)  # what a save killed mid-write left behind
        if not start:  # a fresh run (or --overwrite): no resume file of an earlier one may stay
            (out / RESUME_FILE).unlink(missing_ok=True)
        atomic_write_text(out / "config.json", json.dumps(full_config, indent=2) + "\n")
        for name, text in task.files_to_save().items():  # a tokenizer: the run's data depend on it
            atomic_write_text(out / name, text)
        if start:
            _trim_log(log_path, start)
        elif log_path.exists():
            log_path.unlink()
    wrapped = model if world.world == 1 else torch.nn.parallel.DistributedDataParallel(model)
    writer = _tensorboard(out) if world.main else None
    shard = cfg.batch_size // world.world
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, disable=not (progress and world.main),
               desc=f"{task.name}-{backbone.kind}", unit="step", dynamic_ncols=True)
    last_time, tokens = time.perf_counter(), 0
    for step in bar:
        model.train()
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, cfg)
        batch = task.draw("train", cfg.batch_size, cfg.seed, step)
        batch = batch.rows(world.rank * shard, (world.rank + 1) * shard)
        loss = training_loss(wrapped, task, batch, step, cfg)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss became {loss.item()} at step {step}; lower training.lr and retrain")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        tokens += batch.mask.numel() * world.world
        done = step + 1
        if world.main and (done % cfg.log_every == 0 or done == cfg.steps):
            now = time.perf_counter()
            entry = {"step": done, "loss": round(loss.item(), 6), "lr": optimizer.param_groups[0]["lr"],
                     "grad_norm": round(float(grad_norm), 4), "tokens_per_s": round(tokens / (now - last_time), 1)}
            last_time, tokens = now, 0
            bar.set_postfix(loss=f"{entry['loss']:.4f}", tok_s=f"{entry['tokens_per_s']:.0f}")
            _log(log_path, writer, entry)
        if done % cfg.eval_every == 0 or done == cfg.steps:
            if world.main:
                metrics = evaluate(model, task, seed=cfg.seed, batches=cfg.eval_batches, batch_size=cfg.batch_size,
                                   purpose="val")
                addressing = addressing_during_training(model, task, cfg.seed)
                _log(log_path, writer, {"step": done, **{f"val_{k}": v for k, v in metrics.items()},
                                        **({"addressing": addressing} if addressing else {})})
                save_resume(resume_path, model, optimizer, done, full_config)
            if world.world > 1:
                dist.barrier()
    metrics = {}
    if world.main:
        save_checkpoint(out, model, full_config, task=task)
        metrics = evaluate(model, task, seed=cfg.seed, batches=cfg.eval_batches, batch_size=cfg.batch_size,
                           purpose="val")
        resume_path.unlink(missing_ok=True)  # finished: the checkpoint is the result
        if writer is not None:
            writer.close()
    if world.world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return metrics


def _log(path: Path, writer, entry: dict[str, Any]) -> None:
    with path.open("a") as log:
        log.write(json.dumps(entry) + "\n")
    if writer is not None:
        for key, value in _scalars(entry):
            writer.add_scalar(key, value, entry["step"])


def _scalars(entry: dict[str, Any], prefix: str = ""):
    """(name, number) of every numeric value in a log entry but the step; nested names joined with '/'."""
    for key, value in entry.items():
        if isinstance(value, dict):
            yield from _scalars(value, f"{prefix}{key}/")
        elif key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
            yield f"{prefix}{key}", value


def _tensorboard(out: Path):
    """A TensorBoard event writer in ``out/tensorboard`` when tensorboard is installed, else None."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(out / "tensorboard"))
