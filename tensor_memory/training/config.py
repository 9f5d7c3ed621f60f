"""A training run's settings: :class:`TrainConfig`, TOML run configs (``configs/``) and ``--set`` overrides."""

from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path
from typing import Any

from .. import limits as L
from ..accelerator.precision import PRECISIONS
from ..backbone import BackboneConfig
from ..config import ConfigBase, require_float, require_int
from ..storage.checkpoint import MAX_CONFIG_BYTES
from ..storage.user_files import read_user_file
from ..tasks import Task, make_task


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
    # coordinates (scaffold.py): all of them at step 0, none from this step on; 0 = off
    stream_segments: int = 1  # language models: segments of task.params.seq_len tokens a training sample feeds in
    # order, each backbone carrying its state from one to the next with the gradient cut between them (truncated
    # backpropagation through time, as Transformer-XL trains); 1 = every sample from an empty state
    precision: str = "fp32"  # "bf16" or "fp16": mixed precision (accelerator/precision.py); fp16 needs CUDA
    coord_lr_scale: float = 1.0  # the memories' coordinate heads learn at lr times this;
    # 1 = one learning rate for every parameter
    sigma_anneal_steps: int = 0  # steps over which every write spreads at least σ₀(σ₁/σ₀)^(t/T) (anneal.py); 0 = off
    sigma_anneal_from: float = 1.0  # σ₀, normalised units (1 = half the grid); σ₁ is each layer's sigma_init
    sigma_pull: float = 0.0  # weight of the penalty (log σ − log sigma_init)² on every write (penalties.py); 0 = off
    occupancy_weight: float = 0.0  # weight of the penalty on writes that do not cover the grid (penalties.py); 0 = off
    recall_weight: float = 0.0  # weight of the self-supervised address loss: each chunk's write found again where it
    # was written, recall_lag chunks later (penalties.py); 0 = off
    recall_lag: int = 8
    reach_weight: float = 0.0  # weight of the pull of each read onto the nearest earlier write (penalties.py); 0 = off
    horizon_steps: int = 0  # steps over which training samples grow from horizon_from to the task's own length
    # (curriculum.py: Task.horizon, e.g. map building's observations); 0 = off
    horizon_from: int = 1  # the horizon at step 0

    def __post_init__(self) -> None:
        owner = "TrainConfig"
        for name, minimum, maximum in (
            ("steps", 1, L.MAX_STEPS),
            ("batch_size", 1, L.MAX_BATCH),
            ("warmup_steps", 0, L.MAX_STEPS),
            ("eval_every", 1, L.MAX_STEPS),
            ("eval_batches", 1, L.MAX_STEPS),
            ("log_every", 1, L.MAX_STEPS),
            ("seed", 0, L.MAX_SEED),
            ("address_scaffold_steps", 0, L.MAX_STEPS),
            ("stream_segments", 1, L.MAX_SEQUENCE),
            ("sigma_anneal_steps", 0, L.MAX_STEPS),
            ("recall_lag", 1, L.MAX_STEPS),
            ("horizon_steps", 0, L.MAX_STEPS),
            ("horizon_from", 1, L.MAX_TASK_ITEMS),
        ):
            require_int(owner, name, getattr(self, name), minimum, maximum)
        require_float(owner, "lr", self.lr, 0.0, low_open=True)
        require_float(owner, "weight_decay", self.weight_decay, 0.0)
        require_float(owner, "min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        require_float(owner, "grad_clip", self.grad_clip, 0.0, low_open=True)
        require_float(owner, "coord_lr_scale", self.coord_lr_scale, 0.0, low_open=True)
        require_float(owner, "sigma_anneal_from", self.sigma_anneal_from, 0.0, low_open=True)
        require_float(owner, "sigma_pull", self.sigma_pull, 0.0)
        require_float(owner, "occupancy_weight", self.occupancy_weight, 0.0)
        require_float(owner, "recall_weight", self.recall_weight, 0.0)
        require_float(owner, "reach_weight", self.reach_weight, 0.0)
        if self.precision not in PRECISIONS:
            raise ValueError(f"{owner}.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if not isinstance(self.frozen, list) or not all(isinstance(n, str) and n for n in self.frozen):
            raise ValueError(f"{owner}.frozen must be a list of parameter-name parts, got {self.frozen!r}")
        if self.address_scaffold_steps and self.address_scaffold_steps >= self.steps:
            raise ValueError(
                f"{owner}.address_scaffold_steps={self.address_scaffold_steps} must be below steps="
                f"{self.steps}: a model has to train on its own addressing once the scaffold is gone; "
                f"lower it, raise the steps, or set it to 0"
            )


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
        data = tomllib.loads(read_user_file(path, MAX_CONFIG_BYTES, "a run config (a TOML file)").decode("utf-8"))
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply to be a run config; pass configs/TASK.toml") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: cannot read the config ({error})") from None
    unknown = sorted(set(data) - {"task", "model", "backbone", "training"})
    if unknown:
        raise ValueError(f"{path}: unknown section(s) {unknown}; expected task, model, backbone, training")
    own = _table(data, "backbone", path).get(backbone, {})
    if not isinstance(own, dict):
        raise ValueError(f"{path}: backbone.{backbone} must be a table of settings, got {own!r}")
    own = dict(own)
    own_training = _table(own, "training", path, f"backbone.{backbone}.")
    own.pop("training", None)
    model = {**_table(data, "model", path), **own, "kind": backbone}
    task = _table(data, "task", path)
    return {
        "task": {"name": task.get("name"), "params": dict(_table(task, "params", path, "task."))},
        "model": model,
        "training": {**_table(data, "training", path), **own_training},
    }


def _table(data: dict[str, Any], key: str, path: Path, prefix: str = "") -> dict[str, Any]:
    """``data[key]`` when it is a TOML table (``{}`` when absent); a ValueError naming ``prefix + key`` otherwise."""
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ValueError(
            f"{path}: {prefix}{key} must be a table ([{prefix}{key}] with name = value lines), got {value!r}"
        )
    return value


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
        if any(ord(character) < 32 for character in item):  # TOML would read a second line as another setting
            raise ValueError(f"--set {item!r}: holds a line break or another control character; give one value")
        if key in ("task.name", "model.kind"):
            flag = "--task" if key == "task.name" else "--backbone"
            raise ValueError(f"--set {key}: {flag} chooses it (and the config sections that go with it); use {flag}")
        node, default = config, defaults
        for part in path[:-1]:
            node = node.setdefault(part, {})
            default = default.get(part, {}) if isinstance(default, dict) else {}
        known = default.get(path[-1]) if isinstance(default, dict) else None
        current = known if known is not None else node.get(path[-1])  # the field's type, not a config file's value
        node[path[-1]] = _parse_value(text, current, key)
    return config


def resolve(config: dict[str, Any]) -> tuple[Task, BackboneConfig, TrainConfig]:
    """Validated (task, backbone config, training config); fills the memory's chunk size from the task."""
    task = make_task(config["task"]["name"], config["task"].get("params"))
    model = dict(config["model"])
    if model.get("kind") == "tensor":
        memory = dict(model.get("memory") or {})
        memory.setdefault("token_dim", model.get("dim", 64))
        memory.setdefault("chunk_size", task.chunk_size)
        model["memory"] = memory
    backbone = BackboneConfig.from_dict(model)
    cfg = TrainConfig.from_dict(config.get("training", {}))
    if cfg.stream_segments > 1 and not (hasattr(task, "stream") and backbone.causal):
        raise ValueError(
            f"training.stream_segments={cfg.stream_segments}: streamed training feeds a text in order "
            f"to a causal model, so it applies to language_modelling only; set it to 1"
        )
    chunks = 0  # memory chunks a sample writes; partial_chunk "pad" writes the last, short one too
    if backbone.memory is not None:
        rounding = math.ceil if backbone.memory.public_code.partial_chunk == "pad" else math.floor
        chunks = rounding(task.tokens / backbone.memory.chunk_size)
    if cfg.recall_weight and cfg.address_scaffold_steps:
        raise ValueError(
            "training.recall_weight with training.address_scaffold_steps: the recall loss reads where "
            "the model's own head put each write, but while the scaffold lasts the writes go where it "
            "blends them; use one or the other"
        )
    if cfg.recall_weight and cfg.recall_lag >= chunks:
        raise ValueError(
            f"training.recall_lag={cfg.recall_lag}: a sample of {task.name} has {chunks} memory chunks, "
            f"so no write has a state that many chunks on to be found in and the recall loss would do "
            f"nothing; set recall_lag below {chunks}" + ("" if chunks else " (or use a tensor backbone)")
        )
    return task, backbone, cfg


def stream_window_task(task: Task, cfg: TrainConfig) -> Task:
    """The task whose samples are ``cfg.stream_segments`` segments of ``task``'s length end to end (the task itself
    when samples are not streamed)."""
    if cfg.stream_segments == 1:
        return task
    return make_task(task.name, {**task.config.to_dict(), "seq_len": cfg.stream_segments * task.tokens})


class TrainingWarning(UserWarning):
    """A training setting that is valid but cannot train well (:func:`config_warnings`)."""


def config_warnings(cfg: TrainConfig) -> list[str]:
    """Settings that are valid but cannot train well, each in one line that says what to change."""
    warnings = []
    if cfg.warmup_steps >= cfg.steps:
        warnings.append(
            f"training.warmup_steps={cfg.warmup_steps} is not below training.steps={cfg.steps}: the "
            f"learning rate never reaches training.lr and the run ends still warming up; lower "
            f"warmup_steps (a tenth of the steps is usual) or raise steps"
        )
    return warnings


__all__ = ["TrainConfig", "TrainingWarning", "load_run_config", "apply_overrides", "resolve", "config_warnings"]
