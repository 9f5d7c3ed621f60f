"""Training: one run = a task, a backbone and a schedule, written to a checkpoint directory.

Everything a step sees is a function of (seed, step): the batch for step s is
``task.draw("train", batch_size, seed, s)`` (the synthetic tasks generate it from
``derive_seed("train", seed, s)``), so a run resumed from its last checkpoint continues exactly as
if it had never stopped, and data-parallel ranks split the very same global batch.

Run it as ``tensor-memory train`` or, on several processes, ``torchrun --nproc_per_node N -m
tensor_memory_cli train …`` (PyTorch DDP: gloo on CPU, nccl on GPU).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from ..accelerator import autocast, check_device_memory, check_precision, grad_scaler, rank_device
from ..backbone import check_budget, state_budget
from ..backbone.budget import task_bytes
from ..memory import Recording, memory_layers, record
from ..memory.measures import layer_measures
from ..storage.checkpoint import SCHEMA_VERSION, save_checkpoint
from ..storage.files import atomic_write_text, remove_stale_temp_files
from ..tasks import Batch, Task, TaskModel
from .anneal import sigma_annealing
from .config import TrainConfig, TrainingWarning, config_warnings, resolve, stream_window_task
from .curriculum import HorizonCurriculum
from .distributed import Distributed, init_distributed
from .evaluation import evaluate
from .log import LOG_FILE, append_entry, read_training_log, tensorboard_writer
from .optimisation import freeze, learning_rate, make_optimizer, set_learning_rate
from .penalties import addressing_penalties
from .resume import load_resume, save_resume
from .run_folder import check_free, check_out, hold_run_folder
from .run_log import HEADER_FILE, RECORDS_FILE, RunLog, summaries
from .scaffold import address_scaffold, check_scaffold, scaffold_weight

RESUME_FILE = "resume.safetensors"  # weights + optimizer state + step, one atomic file
ADDRESSING_SAMPLES = 16  # validation samples whose recording gives the addressing measures logged at each evaluation


def addressing_during_training(model: TaskModel, task: Task, seed: int) -> dict[str, dict[str, float | None]]:
    """Each memory layer's addressing measures (``memory/measures.py``) on a few validation samples.

    Logged at every evaluation, so a collapse shows when it happens: {layer path: {measure: value}}.
    Empty for a model without memory layers.
    """
    return summaries(_addressing_recording(model, task, seed), model, layer_measures)


def _addressing_recording(model: TaskModel, task: Task, seed: int) -> Recording | None:
    """The recording of every memory layer on the ``ADDRESSING_SAMPLES`` validation samples; None without one."""
    if not memory_layers(model):
        return None
    batch = task.draw("val-addressing", ADDRESSING_SAMPLES, seed, 0)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), record(model) as recording:
            model(batch.inputs)
    finally:
        model.train(was_training)
    return recording


def loss_on(model: torch.nn.Module, task: Task, batch: Batch, state: Any = None) -> tuple[torch.Tensor, Any]:
    """(the task's loss over the scored positions, the model's state after the batch): cross-entropy, or a values
    task's own (a squared error); ``state``: where a streamed sample's previous segment left the model."""
    outputs, state = model(batch.inputs, state)
    return task.loss(outputs, batch), state


def training_loss(
    model: torch.nn.Module, task: Task, batch: Batch, step: int, cfg: TrainConfig, state: Any = None
) -> tuple[torch.Tensor, Any]:
    """``loss_on`` at training step ``step``, with the address scaffold's places blended in and the writes' σ floor
    (``anneal.py``) while each lasts, plus the addressing penalties (``penalties.py``, which see the model's own
    values, before the scaffold and the floor)."""
    weight = scaffold_weight(step, cfg.address_scaffold_steps)
    places = task.true_places(batch.inputs) if weight else None
    with (
        addressing_penalties(model, cfg) as penalty,
        address_scaffold(model, places, weight),
        sigma_annealing(model, step, cfg.sigma_anneal_steps, cfg.sigma_anneal_from),
    ):
        loss, state = loss_on(model, task, batch, state)
    extra = penalty()
    return (loss if extra is None else loss + extra), state


# ---------------------------------------------------------------------------------------
# The run's folder
# ---------------------------------------------------------------------------------------


def _trim_log(path: Path, step: int) -> None:
    """Keep the log entries of steps a resumed run will not redo."""
    if path.exists():
        kept = [entry for entry in read_training_log(path, allow_cut_last_line=True) if entry["step"] <= step]
        atomic_write_text(path, "".join(json.dumps(entry) + "\n" for entry in kept))


# ---------------------------------------------------------------------------------------
# The loop
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    """What one training run works with, set up once by :func:`train`."""

    task: Task
    cfg: TrainConfig
    saved_config: dict[str, Any]  # what config.json records (cfg is its training section, validated)
    model: TaskModel
    optimizer: torch.optim.AdamW
    ranks: Distributed  # this process among the data-parallel ranks
    out: Path
    samples: Task  # what training draws from: the task, or windows of stream_segments segments of it
    curriculum: HorizonCurriculum  # which length of samples each step draws (samples itself unless horizon_steps)
    device: torch.device = torch.device("cpu")  # where this rank computes
    scaler: torch.amp.GradScaler | None = None  # fp16's loss scaling

    @property
    def log_path(self) -> Path:
        return self.out / LOG_FILE

    @property
    def resume_path(self) -> Path:
        return self.out / RESUME_FILE


def train(
    config: dict[str, Any],
    out: Path,
    resume: bool = False,
    progress: bool = True,
    overwrite: bool = False,
    device: str | torch.device | None = "auto",
) -> dict[str, Any]:
    """Train one run into ``out``; returns the final evaluation metrics.

    ``config``: {task: {name, params}, model: BackboneConfig fields, training: TrainConfig
    fields}. With ``resume``, continue from ``out/resume.safetensors`` if present. An ``out`` holding
    an earlier run is refused unless ``resume`` or ``overwrite`` (which replaces that run) is given.
    ``device``: auto, cpu, cuda or cuda:N (under torchrun each rank takes cuda:LOCAL_RANK); ``training.precision``
    says in what number format (``accelerator/``).
    """
    run = _set_up(config, Path(out), resume, overwrite, device)
    # One writer per folder: the main process holds it from before the first write to the last (run_folder.py).
    with hold_run_folder(run.out) if run.ranks.main else contextlib.nullcontext():
        for warning in config_warnings(run.cfg) if run.ranks.main else []:  # the run goes ahead: say what is amiss
            warnings.warn(warning, TrainingWarning, stacklevel=2)
        start = _restore(run, resume)
        if run.ranks.main:
            _prepare_out(run, start)
        writer = tensorboard_writer(run.out) if run.ranks.main else None
        _loop(run, start, writer, progress)
        metrics = _finish(run, writer) if run.ranks.main else {}
    if run.ranks.size > 1:
        dist.barrier()
        dist.destroy_process_group()
    return metrics


def _set_up(config: dict[str, Any], out: Path, resume: bool, overwrite: bool, device_spec) -> Run:
    """Validate everything and build the model and optimizer, before anything is written."""
    task, backbone, cfg = resolve(config)
    samples = stream_window_task(task, cfg)  # a streamed sample's carried state grows with all of it: counted whole
    curriculum = HorizonCurriculum(samples, cfg)  # refuses a horizon the task does not have, before anything is written
    check_budget(backbone, samples.tokens, cfg.batch_size, training=True, where="the training config", task=samples)
    device = rank_device(device_spec)
    check_precision(cfg.precision, device)
    full_config = {
        "schema_version": SCHEMA_VERSION,
        "task": {"name": task.name, "params": task.config.to_dict()},
        "model": backbone.to_dict(),
        "training": cfg.to_dict(),
        "state_budget": state_budget(backbone),
    }
    ranks = init_distributed(device)
    if cfg.batch_size % ranks.size:
        raise ValueError(f"TrainConfig.batch_size={cfg.batch_size} must divide evenly over {ranks.size} processes")
    per_rank = task_bytes(backbone, samples.tokens, cfg.batch_size // ranks.size, True, samples)
    check_device_memory(per_rank, device, "the training config")
    if ranks.main:
        check_free(out)  # a run still writing there: say so, not that the folder "holds a run"
    check_out(out, resume, overwrite)  # before any work: nothing of an earlier run is lost by accident
    for data, purpose in ((samples, "train"), (task, "val")):  # a data file refused now, before anything is written:
        data.draw(purpose, 1, cfg.seed, 0)  # not a half-made run, nor an --overwrite that replaced a good one
    torch.manual_seed(cfg.seed)  # the same initial weights on every rank
    model = TaskModel(task, backbone).to(device)
    freeze(model, cfg.frozen)
    check_scaffold(model, task, cfg.address_scaffold_steps)
    return Run(
        task,
        cfg,
        full_config,
        model,
        make_optimizer(model, cfg),
        ranks,
        out,
        samples,
        curriculum,
        device,
        grad_scaler(cfg.precision, device),
    )


def _restore(run: Run, resume: bool) -> int:
    """The steps already done: those of the resume file when resuming one, else 0."""
    if resume and run.resume_path.exists():
        start = load_resume(run.resume_path, run.model, run.optimizer, run.saved_config, run.scaler)
        run.task.restore(run.out)  # the files the run began with (a tokenizer), not ones rebuilt now
        if run.samples is not run.task:  # the streamed windows read the text through the same tokenizer
            run.samples.restore(run.out)
        return start
    if resume and (run.out / "model.safetensors").exists():
        raise ValueError(f"{run.out}: nothing to resume, training already finished; use another --out to retrain")
    return 0


def _prepare_out(run: Run, start: int) -> None:
    """The run's folder as the run starts: its config and task files written, its log trimmed or begun."""
    run.out.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(run.out)  # what a save killed mid-write left behind
    if not start:  # a fresh run (or --overwrite): no resume file of an earlier one may stay
        run.resume_path.unlink(missing_ok=True)
    atomic_write_text(run.out / "config.json", json.dumps(run.saved_config, indent=2) + "\n")
    for name, text in run.task.files_to_save().items():  # a tokenizer: the run's data depend on it
        atomic_write_text(run.out / name, text)
    if start:
        _trim_log(run.log_path, start)
        _trim_log(run.out / RECORDS_FILE, start)
    else:
        run.log_path.unlink(missing_ok=True)
        (run.out / RECORDS_FILE).unlink(missing_ok=True)
        (run.out / HEADER_FILE).unlink(missing_ok=True)
    if memory_layers(run.model) and not (start and (run.out / HEADER_FILE).exists()):
        RunLog(run.out).start(
            run.model,
            every=run.cfg.eval_every,
            snapshot_every=None,
            writer="tensor-memory train",
            probe=f"{ADDRESSING_SAMPLES} validation samples",
        )


def _loop(run: Run, start: int, writer, progress: bool) -> None:
    """Training steps ``start`` … ``steps − 1``: log every ``log_every``, validate and save every ``eval_every``."""
    cfg, ranks = run.cfg, run.ranks
    on_gpu = [run.device.index] if run.device.type == "cuda" else None  # DDP's one device per rank
    wrapped = run.model if ranks.size == 1 else torch.nn.parallel.DistributedDataParallel(run.model, device_ids=on_gpu)
    bar = tqdm(
        range(start, cfg.steps),
        initial=start,
        total=cfg.steps,
        disable=not (progress and ranks.main),
        desc=f"{run.task.name}-{run.model.backbone.config.kind}",
        unit="step",
        dynamic_ncols=True,
    )
    last_time, tokens = time.perf_counter(), 0
    for step in bar:
        loss, grad_norm, batch_tokens = _step(run, wrapped, step)
        tokens += batch_tokens
        done = step + 1
        if ranks.main and (done % cfg.log_every == 0 or done == cfg.steps):
            now = time.perf_counter()
            entry = {
                "step": done,
                "loss": round(loss.item(), 6),
                "lr": run.optimizer.param_groups[0]["lr"],
                "grad_norm": round(float(grad_norm), 4),
                "tokens_per_s": round(tokens / (now - last_time), 1),
            }
            last_time, tokens = now, 0
            bar.set_postfix(loss=f"{entry['loss']:.4f}", tok_s=f"{entry['tokens_per_s']:.0f}")
            append_entry(run.log_path, writer, entry)
        if done % cfg.eval_every == 0 or done == cfg.steps:
            if ranks.main:
                _validate(run, writer, done)
            if ranks.size > 1:
                dist.barrier()


def _step(run: Run, wrapped: torch.nn.Module, step: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One optimisation step on this rank's share of the step's batch: (loss, gradient norm, tokens of all ranks).

    Loss and norm come back as tensors, read in full only on the steps that log them; every step does check that the
    loss is finite (:func:`_backward`), which waits for the device once a step.
    """
    cfg, ranks = run.cfg, run.ranks
    run.model.train()
    set_learning_rate(run.optimizer, step, cfg)
    shard = cfg.batch_size // ranks.size
    samples = run.curriculum.task_at(step)  # the task, or a shorter one while a curriculum over horizon lasts
    batch = samples.draw("train", cfg.batch_size, cfg.seed, step).rows(ranks.rank * shard, (ranks.rank + 1) * shard)
    batch = batch.to(run.device)
    run.optimizer.zero_grad(set_to_none=True)
    loss = _backward(run, wrapped, batch, step)
    if run.scaler is not None:  # fp16: the gradients come back scaled; clip them at their true size
        run.scaler.unscale_(run.optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
    if run.scaler is None:
        run.optimizer.step()
    else:  # skips a step whose gradients overflowed float16, and adapts the scale
        run.scaler.step(run.optimizer)
        run.scaler.update()
    return loss, grad_norm, batch.mask.numel() * ranks.size


def _backward(run: Run, wrapped: torch.nn.Module, batch: Batch, step: int) -> torch.Tensor:
    """Back-propagate the batch's loss (its mean over the segments of a streamed sample, the state carried from one
    to the next and its gradient cut there); returns the loss, detached."""
    segments, length = run.cfg.stream_segments, run.task.tokens
    task = run.curriculum.task_at(step) if segments == 1 else run.task  # the length of this step's samples
    total, state = torch.zeros((), device=run.device), None
    for k in range(segments):
        last = k == segments - 1  # data-parallel ranks average gradients once, after the last segment
        with contextlib.nullcontext() if last or run.ranks.size == 1 else wrapped.no_sync():
            piece = batch if segments == 1 else batch.columns(k * length, (k + 1) * length)
            with autocast(run.cfg.precision, run.device):  # the backward runs outside, in the forward's types
                loss, state = training_loss(wrapped, task, piece, step, run.cfg, state)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss became {loss.item()} at step {step}; lower training.lr and retrain")
            scaled = loss / segments
            (scaled if run.scaler is None else run.scaler.scale(scaled)).backward()
        total = total + loss.detach() / segments
        state = state.detach() if state is not None and not last else None
    return total


def _validate(run: Run, writer, done: int) -> None:
    """Validation metrics and addressing into the log, and the resume file, after ``done`` steps."""
    cfg = run.cfg
    metrics = evaluate(
        run.model,
        run.task,
        seed=cfg.seed,
        batches=cfg.eval_batches,
        batch_size=cfg.batch_size,
        purpose="val",
        precision=cfg.precision,
    )
    recording = _addressing_recording(run.model, run.task, cfg.seed)
    addressing = summaries(recording, run.model, layer_measures)
    append_entry(
        run.log_path,
        writer,
        {
            "step": done,
            **{f"val_{k}": v for k, v in metrics.items()},
            **({"addressing": addressing} if addressing else {}),
        },
    )
    if recording is not None:  # the same recording, summed up for the run log that can be followed
        RunLog(run.out).append(done, summaries(recording, run.model), metrics=metrics)
    save_resume(run.resume_path, run.model, run.optimizer, done, run.saved_config, run.scaler)


def _finish(run: Run, writer) -> dict[str, Any]:
    """Save the checkpoint, evaluate it and drop the resume file: the checkpoint is the result."""
    cfg = run.cfg
    save_checkpoint(run.out, run.model, run.saved_config, task=run.task)
    metrics = evaluate(
        run.model,
        run.task,
        seed=cfg.seed,
        batches=cfg.eval_batches,
        batch_size=cfg.batch_size,
        purpose="val",
        precision=cfg.precision,
    )
    run.resume_path.unlink(missing_ok=True)
    if writer is not None:
        writer.close()
    return metrics


__all__ = [
    "train",
    "loss_on",
    "training_loss",
    "learning_rate",
    "set_learning_rate",
    "freeze",
    "make_optimizer",
    "addressing_during_training",
    "check_out",
    "init_distributed",
    "Distributed",
    "RESUME_FILE",
    "ADDRESSING_SAMPLES",
]
