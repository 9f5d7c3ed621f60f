"""The device check: what this project's models cost on a GPU, measured side by side in one run, as a Markdown table.

1. The memory layer's forward+backward against the literal reference (``memory/reference.py``) and against
   ``torch.compile`` of that reference (the route the paper's public code takes), at three sizes, after checking
   that the layer and the reference agree (to 1e-5 of the values' scale, TF32 off for the check).
2. A training step (loss, backward, AdamW) of ``tensor`` against ``base`` at the shipped language config
   (``configs/language_modelling.toml``), in fp32 and in bf16 mixed precision.
3. The scan under bf16 autocast against fp32 at the language-model size: time and the change of the output.
4. A streamed run of 10⁶ tokens through the shipped language model (state carried, segments of 512): tokens per
   second and the peak memory after the first segment and at the end (flat: the state does not grow).
5. The same metrics on the GPU as on the CPU: the shipped occlusion checkpoint evaluated on both.

Sized to finish within 8 minutes on one GPU. ``--device cpu --quick`` runs every part at toy sizes in well under
a minute (what the test suite does, so the script is known to run before a GPU is lent).

    python benchmarks/gpu.py --out gpu.md                 # on a machine with CUDA
    python benchmarks/gpu.py --device cpu --quick         # the same script at toy sizes
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import ROOT, machine, median_ms, table

from tensor_memory import MemoryConfig, TensorMemory, load_checkpoint
from tensor_memory.accelerator import autocast, resolve_device
from tensor_memory.memory.reference import ReferenceMemory
from tensor_memory.tasks import TaskModel
from tensor_memory.training import evaluate, load_run_config, resolve
from tensor_memory.training.loop import make_optimizer, training_loss

# (B, N, d, C, grid, chunk): the toy size of DESIGN.md §9, the 8³ diagnostic size, the language-model size
SIZES = {"toy 6³": (32, 24, 64, 16, 6, 1), "8³": (8, 64, 64, 16, 8, 4), "16³ LM": (2, 512, 256, 32, 16, 16)}
QUICK_SIZES = {"toy 4³": (2, 6, 16, 4, 4, 1), "tiny 5³": (2, 8, 16, 4, 5, 2)}
LANGUAGE = ROOT / "configs" / "language_modelling.toml"
LM_CHECKPOINT = ROOT / "checkpoints" / "language_modelling-tensor"
OCCLUSION = ROOT / "checkpoints" / "occlusion-tensor"


def timed(run: Callable[[], object], device: torch.device, repeats: int, warmup: int = 2) -> list[float]:
    """Seconds per call, the device synchronised around each so the time is the work's, not its launch."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        run()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - start)
    return times


def forward(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layer``'s output from an empty memory: the reference (or its compiled form) takes h, c; the layer a state."""
    if isinstance(layer, TensorMemory):
        return layer(x)[0]
    B, C, grid = x.shape[0], layer.config.channels, layer.config.grid
    zeros = x.new_zeros(B, C, *grid)
    return layer(x, zeros, zeros)[0]


def fwd_bwd(layer: torch.nn.Module, x: torch.Tensor, precision: str = "fp32") -> Callable[[], None]:
    """One forward+backward of ``layer`` on ``x`` (a fresh input gradient each time, as training has)."""

    def run() -> None:
        layer.zero_grad(set_to_none=True)
        with autocast(precision, x.device):
            y = forward(layer, x)
        y.float().square().mean().backward()

    return run


def make_layer(size: tuple, device: torch.device) -> tuple[TensorMemory, torch.Tensor]:
    B, N, d, C, n, chunk = size
    torch.manual_seed(0)
    layer = TensorMemory(MemoryConfig(token_dim=d, channels=C, grid=(n,) * 3, chunk_size=chunk))
    with torch.no_grad():  # away from the identity initialisation, so every weight matters
        layer.depthwise.add_(0.2 * torch.randn_like(layer.depthwise))
        layer.spread.weight.normal_(0, 0.1)
    return layer.to(device), torch.randn(B, N, d, device=device)


def check_agreement(layer: TensorMemory, reference: ReferenceMemory, x: torch.Tensor) -> float:
    """The largest difference of output and input gradient between the layer and the reference, relative to the
    values' scale (at least 1); refuses to time two implementations that disagree beyond 1e-5."""
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        results = []
        for module in (layer, reference):
            xi = x.clone().requires_grad_()
            y = forward(module, xi)
            y.square().mean().backward()
            results.append((y.detach(), xi.grad))
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    worst = max(float((a - b).abs().max()) / max(1.0, float(a.abs().max())) for a, b in zip(*results, strict=True))
    if worst > 1e-5:
        raise SystemExit(f"the layer and the reference differ by {worst:.1e} of their scale: not timing them")
    return worst


def layer_rows(device: torch.device, sizes: dict, repeats: int, compile_reference: bool) -> list[list]:
    rows = []
    for name, size in sizes.items():
        layer, x = make_layer(size, device)
        reference = ReferenceMemory(layer).to(device)
        worst = check_agreement(layer, reference, x)
        runs = {"layer": fwd_bwd(layer, x), "reference": fwd_bwd(reference, x)}
        compile_s = None
        if compile_reference:
            start = time.perf_counter()
            compiled = torch.compile(reference)
            fwd_bwd(compiled, x)()  # the first call compiles
            compile_s = time.perf_counter() - start
            runs["compiled reference"] = fwd_bwd(compiled, x)
        ms = {k: median_ms(timed(run, device, repeats)) for k, run in runs.items()}
        compiled_ms = ms.get("compiled reference")
        rows.append(
            [
                name,
                f"{worst:.0e}",
                ms["layer"],
                ms["reference"],
                "—" if compiled_ms is None else f"{compiled_ms:.1f} (compiled in {compile_s:.0f} s)",
                f"{ms['reference'] / ms['layer']:.2f}x",
                "—" if compiled_ms is None else f"{compiled_ms / ms['layer']:.2f}x",
            ]
        )
    return rows


def language_step(kind: str, device: torch.device, precision: str, quick: bool) -> Callable[[], None]:
    overrides = {"batch_size": 2} if quick else {}
    config = load_run_config(LANGUAGE, kind)
    config["training"].update(overrides)
    task, backbone, cfg = resolve(config)
    torch.manual_seed(0)
    model = TaskModel(task, backbone).to(device)
    optimizer = make_optimizer(model, cfg)
    batch = task.draw("train", cfg.batch_size, 0, 0).to(device)

    def run() -> None:
        with autocast(precision, device):
            loss, _ = training_loss(model, task, batch, 10_000, cfg)  # past any scaffold
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return run


def language_rows(device: torch.device, repeats: int, quick: bool) -> list[list]:
    rows = []
    for precision in ("fp32", "bf16"):
        ms = {
            kind: median_ms(timed(language_step(kind, device, precision, quick), device, repeats))
            for kind in ("base", "tensor")
        }
        rows.append([precision, ms["base"], ms["tensor"], f"{ms['tensor'] / ms['base']:.2f}x"])
    return rows


def bf16_rows(device: torch.device, size: tuple, repeats: int) -> list[list]:
    layer, x = make_layer(size, device)
    with torch.no_grad():
        exact = layer(x)[0]
        with autocast("bf16", device):
            low = layer(x)[0].float()
    change = float((low - exact).abs().max() / exact.abs().max())
    ms = {p: median_ms(timed(fwd_bwd(layer, x, p), device, repeats)) for p in ("fp32", "bf16")}
    return [["×".join(map(str, size)), ms["fp32"], ms["bf16"], f"{ms['fp32'] / ms['bf16']:.2f}x", f"{change:.1e}"]]


def stream_rows(device: torch.device, tokens: int, segment: int = 512, rows_at_once: int = 8) -> list[list]:
    """The shipped language model fed ``tokens`` random token ids, ``rows_at_once`` rows in segments, state kept."""
    ckpt = load_checkpoint(LM_CHECKPOINT, device=device)
    model, vocabulary = ckpt.model, ckpt.task.num_classes
    per_row = tokens // rows_at_once // segment * segment
    ids = torch.randint(vocabulary, (rows_at_once, per_row), generator=torch.Generator().manual_seed(0))
    peaks, state = [], None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    with torch.no_grad():
        for at in range(0, per_row, segment):
            _, state = model({"tokens": ids[:, at : at + segment]}, state)
            if at == 0 or at + segment >= per_row:
                peaks.append(torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else float("nan"))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    done = per_row * rows_at_once
    return [
        [
            f"{done:,}",
            f"{rows_at_once} × {per_row:,}",
            f"{seconds:.1f}",
            f"{done / seconds:,.0f}",
            f"{peaks[0]:.0f}",
            f"{peaks[-1]:.0f}",
        ]
    ]


def parity_rows(device: torch.device, quick: bool) -> list[list]:
    batches, size = (1, 4) if quick else (4, 64)
    results = {}
    for where in ("cpu", device):
        ckpt = load_checkpoint(OCCLUSION, device=where)
        results[str(where)] = evaluate(ckpt.model, ckpt.task, seed=1, batches=batches, batch_size=size, progress=False)
    cpu, here = results["cpu"], results[str(device)]
    return [[metric, f"{cpu[metric]:.4f}", f"{here[metric]:.4f}"] for metric in ("accuracy", "occluded_accuracy")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="where to measure (default cuda; auto, cpu, cuda:N)")
    p.add_argument("--quick", action="store_true", help="toy sizes, 10⁴ streamed tokens, no compile: checks it runs")
    p.add_argument("--repeats", type=int, default=None, help="timed runs of each (default 10; 1 with --quick)")
    p.add_argument("--tokens", type=int, default=None, help="streamed tokens (default 1,000,000; 10,240 --quick)")
    p.add_argument("--no-compile", action="store_true", help="leave out torch.compile of the reference")
    p.add_argument("--out", metavar="FILE.md", help="also write the tables to this Markdown file")
    args = p.parse_args()
    device = resolve_device(args.device)
    repeats = args.repeats or (1 if args.quick else 10)
    tokens = args.tokens or (10_240 if args.quick else 1_000_000)
    sizes = QUICK_SIZES if args.quick else SIZES
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    sections = [f"Measured on {where} ({device}); {machine(torch.get_num_threads())}"]
    parts = [
        (
            "Memory layer forward+backward (ms, median)",
            [
                "size",
                "agreement",
                "layer",
                "reference",
                "torch.compile(reference)",
                "reference / layer",
                "compiled / layer",
            ],
            lambda: layer_rows(device, sizes, repeats, not (args.quick or args.no_compile)),
        ),
        (
            "Training step at the shipped language config (ms, median)",
            ["precision", "base", "tensor", "tensor / base"],
            lambda: language_rows(device, repeats, args.quick),
        ),
        (
            "The layer under bf16 autocast (ms, median)",
            ["B×N×d×C×grid×chunk", "fp32", "bf16", "speed-up", "max |Δ output| / max |output|"],
            lambda: bf16_rows(device, list(sizes.values())[-1], repeats),
        ),
        (
            "Streamed through the shipped language model",
            ["tokens", "rows × tokens", "seconds", "tokens/s", "peak MiB after one segment", "peak MiB at the end"],
            lambda: stream_rows(device, tokens),
        ),
        (
            "The occlusion checkpoint evaluated on both",
            ["metric", "cpu", str(device)],
            lambda: parity_rows(device, args.quick),
        ),
    ]
    for title, headers, rows in parts:
        start = time.perf_counter()
        text = f"### {title}\n\n{table(headers, rows())}\n\n({time.perf_counter() - start:.0f} s)"
        print(text, flush=True)
        sections.append(text)
    if args.out:
        Path(args.out).write_text("\n\n".join(sections) + "\n")


if __name__ == "__main__":
    main()
