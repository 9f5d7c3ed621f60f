"""Files a user names are read by one helper (tensor_memory.storage.user_files.open_user_file): only a regular file
under its cap, and nothing can block. Named pipes and devices where a picture, a video or a checkpoint's tokenizer is
expected are refused at once, naming the file; the lists' parsers are linear in their length."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from test_dataset_loaders import cub, cub_copy, ucf  # noqa: F401 (fixtures)

from analysis import load_trace
from analysis.cli import read_inputs
from tensor_memory import load_checkpoint
from tensor_memory.memory.public_code import read_public_code
from tensor_memory.pretrained.checkpoint import check_minilm_checkpoint
from tensor_memory.storage.files import FileFormatError
from tensor_memory.storage.user_files import read_safetensors, read_user_file
from tensor_memory.tasks.data import images as I
from tensor_memory.tasks.data import ucf101 as U
from tensor_memory.tasks.data import video as V

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
DATA = Path(__file__).resolve().parent / "data"


def at_once(call, seconds: float = 10.0):
    """What ``call()`` raised, within ``seconds``; a call still running then is a failure (it would block for good)."""
    outcome = {}

    def run():
        try:
            call()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            outcome["error"] = error

    worker = threading.Thread(target=run, daemon=True)  # a daemon: a blocked read cannot keep pytest from exiting
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"blocked for over {seconds} s"
    return outcome.get("error")


def test_only_a_regular_file_under_its_cap_is_read(tmp_path):
    good = tmp_path / "good.txt"
    good.write_bytes(b"x" * 100)
    assert read_user_file(good, 100, "a list") == b"x" * 100
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    cases = {
        pipe: "is a named pipe, not a list",
        zero: "is a character device, not a list",
        tmp_path: "is a folder, not a list",
        good: "a list is 100 bytes, over the 99 bytes limit",
    }
    for path, problem in cases.items():
        error = at_once(
            lambda path=path: read_user_file(path, 99 if path == good else 1 << 20, "a list", "; pass the list")
        )
        assert isinstance(error, FileFormatError) and str(error).startswith(f"{path}: "), (path, error)
        assert problem in str(error) and str(error).endswith("; pass the list"), str(error)
    with pytest.raises(FileNotFoundError):  # the caller says where it should come from
        read_user_file(tmp_path / "missing", 10, "a list")


def test_a_named_pipe_or_device_where_a_picture_is_expected_is_refused_at_once(cub, tmp_path):  # noqa: F811
    folder = cub_copy(cub, tmp_path)
    test = I.cub_split_paths(folder)["test"]
    test[0].unlink()
    os.mkfifo(test[0])  # (a link to /dev/zero resolves outside images/: refused before any image is read)
    pool = I.cub_pool(str(folder), "test", 3, 16)
    error = at_once(lambda: pool.fetch(0))
    assert isinstance(error, FileFormatError) and re.match(
        f"{re.escape(str(test[0]))}: is a named pipe, not an image", str(error)
    )
    assert pool.fetch(1).shape == (16, 24, 3)  # the others still load


def test_a_named_pipe_where_a_video_is_expected_is_refused_at_once(ucf, tmp_path):  # noqa: F811
    video = tmp_path / "v_Pipe_g01_c01.avi"
    os.mkfifo(video)
    error = at_once(lambda: V.read_video(video, 16, 3, V.FrameCache(1 << 20)))
    assert isinstance(error, FileFormatError) and str(error).startswith(f"{video}: is a named pipe, not a video")
    frames = tmp_path / "frames"
    shutil.copytree(next(p for p in ucf["frames"].rglob("*") if p.is_dir() and any(p.glob("*.png"))), frames)
    count = len(list(frames.glob("*.png")))
    first = sorted(frames.glob("*.png"))[0]
    first.unlink()
    os.mkfifo(first)  # in a frame folder, only regular files are frames: the pipe is passed over, never opened
    read = {}
    assert at_once(lambda: read.update(frames=V.read_video(frames, 16, 3, V.FrameCache(1 << 20)))) is None
    assert len(read["frames"]) == min(count - 1, V.MAX_FRAMES)


@pytest.mark.parametrize("swap", ["pipe", "dev-zero"])
def test_a_checkpoint_whose_tokenizer_is_a_pipe_or_a_device_is_refused_at_once(tmp_path, swap):
    folder = tmp_path / "lm"
    shutil.copytree(CHECKPOINTS / "language_modelling-tensor", folder)
    tokenizer = folder / "tokenizer.json"
    tokenizer.unlink()
    os.mkfifo(tokenizer) if swap == "pipe" else tokenizer.symlink_to("/dev/zero")
    start = time.perf_counter()
    error = at_once(lambda: load_checkpoint(folder))
    assert isinstance(error, ValueError) and str(error).startswith(f"{tokenizer}: is a "), error
    assert time.perf_counter() - start < 10


def test_class_lists_are_read_in_linear_time(tmp_path):
    lines = 200_000
    path = tmp_path / "classInd.txt"
    path.write_text("".join(f"{k} Class{k}\n" for k in range(1, lines + 1)))
    start = time.perf_counter()
    classes = U.read_classes(path)
    assert len(classes) == lines and classes[-1] == f"Class{lines}"
    assert time.perf_counter() - start < 5  # quadratic, it took minutes (40k lines: 16 s)
    path.write_text("1 A\n2 B\n3 A\n")
    with pytest.raises(FileFormatError, match="line 3: class id 3 or name 'A' appears twice"):
        U.read_classes(path)


def test_pictures_no_crop_can_use_are_refused_naming_the_file(cub, tmp_path):  # noqa: F811
    from PIL import Image

    folder = cub_copy(cub, tmp_path)
    test = I.cub_split_paths(folder)["test"]
    Image.new("RGB", (2_000, 10)).save(test[0], format="PNG")  # (2,000,000 × 1 in the audit: the same check)
    Image.new("RGB", (1, 1)).save(test[1], format="PNG")
    pool = I.cub_pool(str(folder), "test", 3, 16)
    with pytest.raises(FileFormatError, match=f"{re.escape(str(test[0]))}: 2000×10 pixels, sides 200 times apart"):
        pool.fetch(0)
    with pytest.raises(FileFormatError, match=f"{re.escape(str(test[1]))}: 1×1 pixels, too small to crop"):
        pool.fetch(1)
    assert pool.fetch(2).shape == (16, 24, 3)


SAFETENSORS_READERS = {  # every reader of a safetensors file a user names, and the file it reads
    "checkpoint": (lambda path: load_checkpoint(path.parent), CHECKPOINTS / "occlusion-tensor", "model.safetensors"),
    "MiniLM checkpoint": (
        lambda path: check_minilm_checkpoint(path.parent),
        CHECKPOINTS / "minilm-tensor",
        "model.safetensors",
    ),
    "trace": (lambda path: load_trace(path), DATA, "occlusion-tensor-seed7-before-hooks.trace.safetensors"),
    "public-code weights": (lambda path: read_public_code(path), None, "interface.safetensors"),
    "import input": (lambda path: read_inputs(str(path), 8), None, "x.safetensors"),
}


@pytest.mark.parametrize("reader", sorted(SAFETENSORS_READERS))
@pytest.mark.parametrize("swap", ["pipe", "dev-zero"])
def test_a_pipe_or_device_where_a_safetensors_file_is_expected_is_refused_at_once(tmp_path, reader, swap):
    read, source, name = SAFETENSORS_READERS[reader]
    folder = tmp_path / "files"
    shutil.copytree(source, folder) if source is not None else folder.mkdir()
    path = folder / name
    path.unlink(missing_ok=True)
    os.mkfifo(path) if swap == "pipe" else path.symlink_to("/dev/zero")
    error = at_once(lambda: read(path))
    kind = "a named pipe" if swap == "pipe" else "a character device"
    assert isinstance(error, ValueError) and str(error).startswith(f"{path}: is {kind}, not "), error


def test_safetensors_read_by_hand_agree_with_the_library_including_misaligned_and_empty_tensors(tmp_path):
    from safetensors.torch import load_file, save_file

    generator = torch.Generator().manual_seed(0)
    tensors = {
        "a": torch.randn(3, 5, generator=generator),
        "b": torch.randn(7, generator=generator).half(),
        "c": torch.arange(6, dtype=torch.int64).view(2, 3),
        "d": torch.zeros(0, 4),
        "e": torch.randn(4, generator=generator).to(torch.bfloat16),
        "f": torch.tensor([True, False]),
    }
    path = tmp_path / "t.safetensors"
    save_file(tensors, path, metadata={"k": "v"})
    stored = read_safetensors(path, 1 << 20)
    assert stored.metadata == {"k": "v"}
    for key, value in load_file(path).items():
        assert stored.tensor(key).dtype == value.dtype and torch.equal(stored.tensor(key), value), key
    # A hand-made file whose float32 tensor starts 1 byte into the data (the library pads; others may not):
    # the same numbers, read from a copy rather than a misaligned view.
    x = torch.randn(4, generator=generator)
    header = {
        "b": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        "x": {"dtype": "F32", "shape": [4], "data_offsets": [1, 17]},
    }
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"\x07" + x.numpy().tobytes())
    stored = read_safetensors(path, 1 << 20)
    assert torch.equal(stored.tensor("x"), x) and stored.tensor("b").tolist() == [7]
    with open(path, "ab") as handle:  # one byte more than the header accounts for
        handle.write(b"\x00")
    with pytest.raises(FileFormatError, match="1 unexpected bytes after the last tensor"):
        read_safetensors(path, 1 << 20)


def test_a_picture_claiming_far_more_pixels_than_its_bytes_hold_is_refused_at_once(tmp_path):
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    path = tmp_path / "crafted.png"  # 7,000 × 7,000 declared, a few bytes of data: it decoded 10 s, then scaled 140 s
    header = struct.pack(">IIBBBBB", 7000, 7000, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )
    start = time.perf_counter()
    with pytest.raises(FileFormatError, match="claims 7000×7000 pixels in .* bytes, more than any photograph"):
        I.read_image(path, 3, 24)
    assert time.perf_counter() - start < 2


def test_a_large_photograph_is_reduced_before_it_is_scaled_and_looks_the_same(tmp_path):
    from PIL import Image

    rows, cols = np.mgrid[0:2400, 0:3200]
    picture = np.stack([rows / 2400, cols / 3200, (rows + cols) / 5600], axis=-1)  # smooth: scaling changes little
    Image.fromarray((picture * 255).astype(np.uint8)).save(tmp_path / "big.png")
    start = time.perf_counter()
    reduced = I.scale_short_side(I.read_image(tmp_path / "big.png", 3, 24), 24)
    assert time.perf_counter() - start < 5
    whole = I.scale_short_side(I.read_image(tmp_path / "big.png", 3), 24)  # the slow way, for the comparison
    assert reduced.shape == whole.shape == (24, 32, 3) and np.abs(reduced - whole).max() < 0.02


@pytest.mark.parametrize("header_bytes", [640, 896, 1152, 1408, 0x10580])
def test_a_safetensors_header_whose_length_starts_like_a_pickle_is_read(tmp_path, header_bytes):
    """Lengths whose first two bytes are a pickle's (0x80, then 2 to 5): a valid file, read; real pickles still not."""
    import pickle

    from safetensors.torch import save_file

    x = torch.arange(6, dtype=torch.float32)
    save_file({"x": x}, tmp_path / "t.safetensors", metadata={"pad": ""})
    pad = header_bytes - struct.unpack("<Q", (tmp_path / "t.safetensors").read_bytes()[:8])[0]
    save_file({"x": x}, tmp_path / "t.safetensors", metadata={"pad": "p" * pad})  # the header grows with the pad
    raw = (tmp_path / "t.safetensors").read_bytes()
    assert struct.unpack("<Q", raw[:8])[0] == header_bytes and raw[0] == 0x80 and 2 <= raw[1] <= 5
    assert torch.equal(read_safetensors(tmp_path / "t.safetensors", 1 << 20).tensor("x"), x)
    for protocol in (2, 3, 4, 5):
        (tmp_path / "p.safetensors").write_bytes(pickle.dumps({"x": list(range(300))}, protocol=protocol))
        with pytest.raises(FileFormatError, match="looks like a pickle"):
            read_safetensors(tmp_path / "p.safetensors", 1 << 20)
    torch.save({"x": x}, tmp_path / "z.safetensors")
    with pytest.raises(FileFormatError, match="looks like a zip archive"):
        read_safetensors(tmp_path / "z.safetensors", 1 << 20)
