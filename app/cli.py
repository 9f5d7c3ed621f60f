"""``tensor-memory app``: start the Tensor Memory Explorer in the browser (``python -m app``: ``streamlit run
app/main.py`` with its opening page prepared while the server starts)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tensor_memory.accelerator import add_device_argument
from tensor_memory.shipped import checkpoint_folder

ROOT = Path(__file__).resolve().parents[1]  # the folder holding the packages: the clone, or where they are installed
CHECKPOINT_ENV = "TENSOR_MEMORY_CHECKPOINT"  # the checkpoint folder the app opens on
TRACE_ENV = "TENSOR_MEMORY_TRACE"  # the trace (file or store folder) the app opens on, instead
RUN_ENV = "TENSOR_MEMORY_RUN"  # the training run folder the app follows (its Run page)
DATA_ROOT_ENV = "TENSOR_MEMORY_DATA_ROOT"  # the one folder whose data uploaded checkpoints may read
DEVICE_ENV = "TENSOR_MEMORY_DEVICE"  # where the app runs the models it opens (auto, cpu, cuda, cuda:N)
LOCAL_HOST = "127.0.0.1"  # where the app listens unless told otherwise (.streamlit/config.toml says so too)

DESCRIPTION = (
    "Start the Tensor Memory Explorer, a Streamlit app: load a trained checkpoint, step through a sample chunk by "
    "chunk and watch the memory in 3D, see the occlusion belief and interventions, diagnose addressing, walk "
    "through the mechanism, export traces, figures and reports. It opens on the shipped occlusion-tensor unless "
    "--checkpoint names another folder (or shipped checkpoint), or on a trace with --trace (any model's, written "
    "by analysis.trace_model or `tensor-memory trace`: a .safetensors file, or a trace store folder read a page at "
    "a time); --run follows "
    "a training run folder while it grows (written by analysis.monitor or `tensor-memory train`). Stop it with "
    "Ctrl-C. It listens on this machine only unless --host says otherwise, and shows errors in one line (with "
    "--debug, their tracebacks too)."
)


def _port(text: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1 to 65535, got {port}")
    return port


def _app(args: argparse.Namespace) -> int:
    from tensor_memory.accelerator import resolve_device

    env = dict(os.environ)
    env[DEVICE_ENV] = str(resolve_device(args.device))  # refused here, in one line, before a server starts
    if args.checkpoint:
        from tensor_memory.pretrained.checkpoint import check_minilm_checkpoint, is_pretrained_memory
        from tensor_memory.storage.checkpoint import load_checkpoint

        folder = args.checkpoint.resolve()
        # refuse a bad folder here, with its one-line reason, before starting a server
        check_minilm_checkpoint(folder) if is_pretrained_memory(folder) else load_checkpoint(folder)
        env[CHECKPOINT_ENV] = str(folder)
    if args.trace:
        from analysis.traces.trace import load_trace

        path = Path(args.trace).expanduser().resolve()
        load_trace(path)  # likewise: a file or store that is not a valid trace is refused here (a store's volumes
        # are not read: they are checked as the pages read them)
        env[TRACE_ENV] = str(path)
    if args.run:
        from analysis.traces.run_log import follow_run

        folder = Path(args.run).expanduser().resolve()
        follow_run(folder)  # likewise: a folder that holds no run (or a broken one) is refused here
        env[RUN_ENV] = str(folder)
    if args.data_root:
        root = Path(args.data_root).expanduser().resolve()
        if not root.is_dir():
            raise ValueError(
                f"--data-root {args.data_root}: is not a folder; name the folder that holds the data "
                f"uploaded checkpoints may read"
            )
        env[DATA_ROOT_ENV] = str(root)
    details = "full" if getattr(args, "debug", False) else "none"  # tracebacks in the browser only for developers
    command = [
        sys.executable,
        "-m",
        "app",
        "--server.port",
        str(args.port),  # app/__main__.py: streamlit run, prepared
        "--server.address",
        args.host,
        "--client.showErrorDetails",
        details,
    ]
    return serve(command, env)


def serve(command: list[str], env: dict[str, str]) -> int:
    """Run the server until it stops and return its exit status (128 + N for signal N, as a shell reports it).

    A SIGTERM to this command (``kill``, a service manager) stops the server too: otherwise the server outlives it
    and keeps the port, on every address in class mode. Ctrl-C reaches both already (one process group)."""
    # From the packages' folder: `-m app` runs this app, never a folder named app where the command was typed (the
    # server applies the shipped .streamlit/config.toml itself: app/server_options.py).
    server = subprocess.Popen(command, cwd=ROOT, env=env)
    previous = signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    try:
        status = server.wait()
    except KeyboardInterrupt:
        server.wait()  # it got the same Ctrl-C: let it finish closing
        status = -signal.SIGINT
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 128 - status if status < 0 else status


def add_app_parser(subparsers: Any) -> None:
    """Register ``app`` on ``subparsers`` (from ``parser.add_subparsers()``)."""
    app = subparsers.add_parser(
        "app", help="start the Tensor Memory Explorer (Streamlit) in the browser", description=DESCRIPTION
    )
    app.add_argument(
        "--checkpoint",
        metavar="DIR",
        type=checkpoint_folder,
        help="checkpoint folder to open on, or a shipped checkpoint's name (default: occlusion-tensor)",
    )
    app.add_argument(
        "--trace",
        metavar="PATH",
        help="trace to open on: a .safetensors file OR a trace store folder (e.g. x.trace.zarr, read a page at a "
        "time), of any model, from analysis.trace_model or `tensor-memory trace`",
    )
    app.add_argument(
        "--run",
        metavar="DIR",
        help="training run folder to follow on the Run page while it grows (written by analysis.monitor or "
        "`tensor-memory train`)",
    )
    app.add_argument("--port", type=_port, default=8501, help="port to serve on (default 8501)")
    app.add_argument(
        "--host",
        default=LOCAL_HOST,
        metavar="ADDRESS",
        help=f"address to listen on (default {LOCAL_HOST}: this machine only); 0.0.0.0 serves every "
        f"network this machine is on, and then anyone who can reach the port can upload checkpoints "
        f"and run them on this machine",
    )
    app.add_argument(
        "--data-root",
        metavar="DIR",
        help="the one folder whose data (a corpus, pictures, videos) uploaded checkpoints may read; by "
        "default an upload whose task reads a folder of this machine is refused",
    )
    add_device_argument(app)
    app.set_defaults(func=_app)


__all__ = ["add_app_parser", "CHECKPOINT_ENV", "TRACE_ENV", "RUN_ENV", "DATA_ROOT_ENV", "DEVICE_ENV", "LOCAL_HOST"]
