"""The real-data loaders on small data sets generated in their standard layouts: UCF-101 and CUB-200-2011.

Nothing here needs the real data sets. The UCF-101 fixture writes tiny .avi videos with PyAV (and the
same clips as PNG frame folders) whose frames say which frame they are (the top half's grey level,
10 + 12·t) and which class they belong to (the bottom half's colour), so every check below can read
the frame indices and the label back from the pixels. The CUB fixture writes JPEGs whose pixels say
which image they are (green), which column (red) and which row (blue).
"""

from __future__ import annotations

import hashlib
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tensor_memory.backbone import BackboneConfig
from tensor_memory.storage.files import FileFormatError
from tensor_memory.tasks import Batch, TaskModel, make_task
from tensor_memory.tasks.data import images as I
from tensor_memory.tasks.data import video as V
from tensor_memory.training.evaluation import evaluate

# ---------------------------------------------------------------------------------------
# UCF-101 fixture
# ---------------------------------------------------------------------------------------

UCF_CLASSES = ("Basketball", "ApplyEyeMakeup", "CleanAndJerk")  # classInd's order, not the alphabet's
HEIGHT, WIDTH = 32, 48  # written frames; centre-cropped to 32×32 at columns 8..39 (edges on mpeg4's 8×8 blocks)
MARGIN = (WIDTH - HEIGHT) // 2
TRAIN_GROUPS = (8, 9, 10, 11, 12)
TEST_GROUPS = (1, 2)
SIZE, PATCH = 16, 8  # the task's frames and patches in these tests
CODE_STEP = 12


def code(t: int) -> int:
    """The grey level of frame t's top half."""
    return 10 + CODE_STEP * t


def ucf_frame(t: int, label: int, group: int) -> np.ndarray:
    """Frame t of a clip of class ``label`` in group ``group``: top half grey code(t); bottom half the class
    colour, 220 in channel ``label`` and 20 + 8·group in the other two; white bars left and right of the
    centred square."""
    frame = np.full((HEIGHT, WIDTH, 3), 20 + 8 * group, dtype=np.uint8)
    frame[: HEIGHT // 2] = code(t)
    frame[HEIGHT // 2 :, :, label] = 220
    frame[:, :MARGIN] = frame[:, WIDTH - MARGIN :] = 255  # white bars outside the centred square: cropped away
    return frame


def clip_length(label: int, group: int, clip: int) -> int:
    return 12 + (3 * label + group + 2 * clip) % 9  # 12..20 frames


def write_avi(path: Path, frames: list[np.ndarray]) -> None:
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=25)  # what UCF-101's xvid videos are
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.bit_rate = 2_000_000
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def write_frames(folder: Path, frames: list[np.ndarray], padded: bool = True) -> None:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for t, frame in enumerate(frames, 1):
        name = f"frame_{t:05d}.png" if padded else f"img{t}.png"  # unpadded: img10 must follow img9
        Image.fromarray(frame).save(folder / name)


def entry(label: int, group: int, clip: int) -> str:
    name = UCF_CLASSES[label]
    return f"{name}/v_{name}_g{group:02d}_c{clip:02d}.avi"


# Which clips exist: every class in every group with clip c01; class 0 has a second clip in groups 8 and 11.
TRAIN_CLIPS = [(label, g, 1) for g in TRAIN_GROUPS for label in range(3)] + [(0, 8, 2), (0, 11, 2)]
TEST_CLIPS = [(label, g, 1) for g in TEST_GROUPS for label in range(3)]


def write_lists(folder: Path, with_labels: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    crlf = "\r\n"  # as the official files are written
    (folder / "classInd.txt").write_text(crlf.join(f"{i + 1} {n}" for i, n in enumerate(UCF_CLASSES)) + crlf)
    train = [entry(*c) + (f" {c[0] + 1}" if with_labels else "") for c in TRAIN_CLIPS]
    (folder / "trainlist01.txt").write_text(crlf.join(train) + crlf)
    (folder / "testlist01.txt").write_text(crlf.join(entry(*c) for c in TEST_CLIPS) + crlf)


@pytest.fixture(scope="module")
def ucf(tmp_path_factory) -> dict[str, Path]:
    """{avi: the UCF-101 folder of .avi videos, with its lists in ../ucfTrainTestlist;
    frames: the same clips as PNG frame folders (<Class>/<stem>/, and <stem>/ for the test clips of group 2),
    lists: that lists folder}."""
    base = tmp_path_factory.mktemp("ucf")
    avi_root, frame_root = base / "UCF-101", base / "frames"
    for label, group, clip in TRAIN_CLIPS + TEST_CLIPS:
        frames = [ucf_frame(t, label, group) for t in range(clip_length(label, group, clip))]
        name = entry(label, group, clip)
        write_avi(avi_root / name, frames)
        stem = Path(name).stem
        if group == 2:  # the flat layout, frame names unpadded
            write_frames(frame_root / stem, frames, padded=False)
        else:
            write_frames(frame_root / UCF_CLASSES[label] / stem, frames)
    write_lists(base / "ucfTrainTestlist")
    return {"avi": avi_root, "frames": frame_root, "lists": base / "ucfTrainTestlist"}


def ucf_task(path: Path, **params):
    return make_task(
        "action_recognition",
        {"path": str(path), "classes": 3, "frames": 4, "stride": 3, "size": SIZE, "patch": PATCH, **params},
    )


def read_codes(frames: torch.Tensor) -> torch.Tensor:
    """The frame numbers t (B, T) a batch's frames (B, T, S, S, C) show, read from their top rows."""
    grey = frames[:, :, :4].mean(dim=(2, 3, 4)) * 255  # (B, T): the top half's level, away from the edge
    return ((grey - 10) / CODE_STEP).round().long()


def read_labels(frames: torch.Tensor) -> torch.Tensor:
    """The class (B,) of each clip, from the colour of its bottom rows."""
    bottom = frames[:, :, -4:].mean(dim=(1, 2, 3))  # (B, C)
    return bottom.argmax(-1)


def read_groups(frames: torch.Tensor) -> torch.Tensor:
    """The group gXX (B,) of each clip, from the level of its bottom rows' other two channels."""
    bottom = frames[:, :, -4:].mean(dim=(1, 2, 3)) * 255  # (B, C)
    others = (bottom.sum(-1) - bottom.max(-1).values) / 2
    return ((others - 20) / 8).round().long()


def patches_by_loop(frames: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, T, S, S, C) → (B, T·n², patch²·C) one patch at a time: frame by frame, patch rows top to bottom,
    patches left to right, each patch's pixels row-major with their channels last."""
    B, T, S, _, C = frames.shape
    n = S // patch
    out = []
    for t in range(T):
        for r in range(n):
            for c in range(n):
                out.append(frames[:, t, r * patch : (r + 1) * patch, c * patch : (c + 1) * patch, :].reshape(B, -1))
    return torch.stack(out, dim=1)


def test_frame_patches_are_in_raster_order_with_channels_last():
    from tensor_memory.tasks.patches import clip_patches as frame_patches

    frames = torch.rand(2, 3, 12, 12, 3)
    assert torch.equal(frame_patches(frames, 4), patches_by_loop(frames, 4))
    grey = torch.rand(2, 3, 12, 12, 1)  # grey frames: occlusion's to_patches of the same frames
    from tensor_memory.tasks.occlusion import to_patches

    assert torch.equal(frame_patches(grey, 4), to_patches(grey[..., 0], 4))


# ---------------------------------------------------------------------------------------
# UCF-101: splits and labels
# ---------------------------------------------------------------------------------------


def test_ucf_splits_hold_out_whole_groups_of_the_trainlist_and_test_is_the_testlist(ucf):
    task = ucf_task(ucf["avi"])
    splits = task.splits
    assert splits.classes == UCF_CLASSES and splits.lists == ucf["avi"].parent / "ucfTrainTestlist"
    assert splits.valid_groups == (8, 9, 10)
    trainlist = [entry(*c) for c in TRAIN_CLIPS]
    assert [c.entry for c in task.clips("valid")] == [
        e for e, c in zip(trainlist, TRAIN_CLIPS, strict=True) if c[1] <= 10
    ]
    assert [c.entry for c in task.clips("train")] == [
        e for e, c in zip(trainlist, TRAIN_CLIPS, strict=True) if c[1] > 10
    ]
    assert [c.entry for c in task.clips("test")] == [entry(*c) for c in TEST_CLIPS]  # the testlist, in order
    assert {c.group for c in task.clips("valid")} == {8, 9, 10} and {c.group for c in task.clips("train")} == {11, 12}
    held = {c.entry for c in task.clips("valid")}
    assert held <= set(trainlist) and not held & {c.entry for c in task.clips("test")}
    for split, listed in (("train", TRAIN_CLIPS), ("valid", TRAIN_CLIPS), ("test", TEST_CLIPS)):
        labels = {entry(*c): c[0] for c in listed}
        for clip in task.clips(split):
            assert clip.label == labels[clip.entry]
            assert clip.source == ucf["avi"] / clip.entry and clip.source.is_file()


def test_ucf_lists_are_found_beside_or_inside_the_folder_or_named(ucf, tmp_path):
    root = tmp_path / "UCF-101"
    shutil.copytree(ucf["avi"], root)
    write_lists(root / "ucfTrainTestlist", with_labels=False)  # path/ucfTrainTestlist comes first
    assert ucf_task(root).splits.lists == root / "ucfTrainTestlist"
    (root / "ucfTrainTestlist").rename(tmp_path / "elsewhere")
    with pytest.raises(FileFormatError, match="found no folder holding classInd.txt.*ucfTrainTestlist"):
        _ = ucf_task(root).splits
    task = ucf_task(root, lists=str(tmp_path / "elsewhere"))
    assert [c.entry for c in task.clips("test")] == [entry(*c) for c in TEST_CLIPS]
    with pytest.raises(FileFormatError, match="trainlist02.txt: no such file"):
        _ = ucf_task(root, lists=str(tmp_path / "elsewhere"), fold=2).splits


# ---------------------------------------------------------------------------------------
# UCF-101: frames
# ---------------------------------------------------------------------------------------


def test_ucf_decoded_frames_match_what_was_written(ucf):
    clip = ucf_task(ucf["avi"]).clips("test")[4]  # class 1, group 2
    frames = V.read_video(clip.source, SIZE, 3)
    assert frames.dtype == np.uint8 and frames.shape == (clip_length(1, 2, 1), SIZE, SIZE, 3)
    for t, frame in enumerate(frames.astype(int)):
        assert np.abs(frame[:5] - code(t)).max() <= 6  # the top half: grey code(t), within mpeg4's loss
        assert np.abs(frame[-5:] - [36, 220, 36]).max() <= 6  # the bottom half: class 1's colour, group 2
    grey = V.read_video(clip.source, SIZE, 1)
    assert grey.shape == (len(frames), SIZE, SIZE, 1)
    codes = np.array([code(t) for t in range(len(frames))])[:, None, None, None]  # (F, 1, 1, 1)
    assert np.abs(grey[:, :5].astype(int) - codes).max() <= 6


def test_ucf_training_clips_take_strided_frames_from_a_seeded_start(ucf):
    task = ucf_task(ucf["avi"], frames=4, stride=3)
    batch = task.draw("train", 8, seed=5, index=0)
    T, P = 4, (SIZE // PATCH) ** 2
    assert batch.inputs["pixels"].shape == (8, T * P, PATCH * PATCH * 3)
    assert batch.meta["frames"].shape == (8, T, SIZE, SIZE, 3)
    assert torch.equal(batch.inputs["patch_index"], torch.arange(P).repeat(T).expand(8, T * P))
    clips = task.clips("train")
    for b in range(8):
        clip = clips[int(batch.meta["video_index"][b])]
        length = clip_length(clip.label, clip.group, int(clip.entry[-6:-4]))
        index = batch.meta["frame_index"][b]
        assert torch.equal(index - index[0], torch.arange(T) * 3)  # stride 3
        assert 0 <= int(index[0]) <= length - 10  # a start that keeps the clip inside the video
        assert int(batch.meta["label"][b]) == clip.label == int(batch.targets[b, -1])
    assert torch.equal(read_codes(batch.meta["frames"]), batch.meta["frame_index"])  # those frames, read back
    assert torch.equal(read_labels(batch.meta["frames"]), batch.meta["label"])
    groups = read_groups(batch.meta["frames"])
    assert set(groups.tolist()) <= {11, 12}  # training never shows a validation or test group
    assert groups.tolist() == [clips[i].group for i in batch.meta["video_index"]]
    # The target sits on the last token of the last frame only.
    assert batch.mask.sum() == 8 and batch.mask[:, -1].all()
    assert torch.equal(batch.inputs["pixels"], patches_by_loop(batch.meta["frames"], PATCH))
    # Seeded: the same batch again, a different one for another index, seed or purpose.
    again = task.draw("train", 8, seed=5, index=0)
    assert torch.equal(again.inputs["pixels"], batch.inputs["pixels"])
    assert not torch.equal(task.draw("train", 8, seed=5, index=1).meta["frame_index"], batch.meta["frame_index"])
    valid = task.draw("val", 8, seed=5, index=0)
    assert set(valid.meta["video_index"].tolist()) <= set(range(len(task.clips("valid"))))
    assert set(read_groups(valid.meta["frames"]).tolist()) <= {8, 9, 10}
    assert torch.equal(
        read_labels(valid.meta["frames"]),
        torch.tensor([task.clips("valid")[i].label for i in valid.meta["video_index"]]),
    )


def test_ucf_short_videos_repeat_their_last_frame(ucf):
    task = ucf_task(ucf["avi"], frames=6, stride=5)  # 26 frames wanted, the videos have 12..20
    batch = task.draw("train", 6, seed=1, index=0)
    clips = task.clips("train")
    for b in range(6):
        clip = clips[int(batch.meta["video_index"][b])]
        last = len(V.read_video(clip.source, SIZE, 3)) - 1
        assert batch.meta["frame_index"][b].tolist() == [min(5 * i, last) for i in range(6)]
    assert torch.equal(read_codes(batch.meta["frames"]), batch.meta["frame_index"])
    assert V.strided_indices(3, 4, 2, 0).tolist() == [0, 2, 2, 2] and V.start_room(20, 4, 3) == 10


def test_ucf_evaluation_walks_every_test_video_once_with_evenly_spread_frames(ucf, monkeypatch):
    task = ucf_task(ucf["avi"], frames=5)
    assert task.split_batches("eval", 4) == 2 and task.split_batches("train", 4) is None
    tests = task.clips("test")
    first = task.draw("eval", 4, seed=0, index=1)
    assert first.meta["video_index"].tolist() == [4, 5]  # the last, short batch
    for b, row in enumerate((4, 5)):
        length = clip_length(*TEST_CLIPS[row])
        want = [math.floor(i * (length - 1) / 4) for i in range(5)]  # first to last frame, evenly
        assert first.meta["frame_index"][b].tolist() == want
        assert want[0] == 0 and want[-1] == length - 1
    assert torch.equal(read_codes(first.meta["frames"]), first.meta["frame_index"])
    assert read_groups(first.meta["frames"]).tolist() == [2, 2] and read_labels(first.meta["frames"]).tolist() == [1, 2]
    other_seed = task.draw("eval", 4, seed=99, index=1)
    assert torch.equal(other_seed.inputs["pixels"], first.inputs["pixels"])  # evaluation ignores the seed
    with pytest.raises(ValueError, match="past the end of the test split"):
        task.draw("eval", 4, seed=0, index=2)

    seen = []
    draw = task.draw

    def recording(purpose, batch_size, seed, index):
        batch = draw(purpose, batch_size, seed, index)
        seen.extend(batch.meta["video_index"].tolist())
        return batch

    monkeypatch.setattr(task, "draw", recording)
    torch.manual_seed(0)
    model = TaskModel(task, BackboneConfig(kind="base", dim=16, heads=2, layers=1))
    metrics = evaluate(model, task, seed=3, batches=100, batch_size=4, progress=False)
    assert seen == list(range(len(tests)))  # every test video, once, in list order
    assert set(metrics) >= {"accuracy", "top5_accuracy", "chance"} and metrics["top5_accuracy"] == 1.0  # 3 classes
    # Traces show random test clips.
    trace = draw("trace", 4, seed=0, index=0)
    assert set(trace.meta["video_index"].tolist()) <= set(range(len(tests)))
    assert torch.equal(
        read_labels(trace.meta["frames"]), torch.tensor([tests[i].label for i in trace.meta["video_index"]])
    )
    assert set(read_groups(trace.meta["frames"]).tolist()) <= {1, 2}


def test_ucf_frame_folders_give_the_same_clips_as_the_videos(ucf):
    from_avi, from_frames = ucf_task(ucf["avi"], frames=5), ucf_task(ucf["frames"], lists=str(ucf["lists"]), frames=5)
    assert [c.entry for c in from_frames.clips("test")] == [c.entry for c in from_avi.clips("test")]
    sources = [c.source for c in from_frames.clips("test")]
    assert all(s.is_dir() for s in sources)
    assert sources[0] == ucf["frames"] / "Basketball" / "v_Basketball_g01_c01"  # <Class>/<stem>/
    assert sources[3] == ucf["frames"] / "v_Basketball_g02_c01"  # <stem>/
    a, b = from_avi.draw("eval", 6, 0, 0), from_frames.draw("eval", 6, 0, 0)
    assert a.inputs["pixels"].shape == b.inputs["pixels"].shape
    assert torch.equal(a.meta["frame_index"], b.meta["frame_index"]) and torch.equal(a.targets, b.targets)
    difference = (a.meta["frames"] - b.meta["frames"]).abs()
    assert difference.mean() < 3 / 255  # mpeg4's loss only: small everywhere,
    away = torch.cat([difference[:, :, :5], difference[:, :, -5:]], dim=2)  # and tiny away from the colour edge
    assert away.max() < 8 / 255
    assert torch.equal(read_codes(b.meta["frames"]), b.meta["frame_index"])  # img10.png follows img9.png
    lossless = V.read_video(sources[3], SIZE, 3)
    assert lossless.shape == (clip_length(*TEST_CLIPS[3]), SIZE, SIZE, 3)
    assert (lossless[:, :5] == np.array([code(t) for t in range(len(lossless))])[:, None, None, None]).all()


# ---------------------------------------------------------------------------------------
# UCF-101: metrics
# ---------------------------------------------------------------------------------------


def test_ucf_top1_and_top5_against_an_independent_count(tmp_path):
    task = make_task("action_recognition", {"path": str(tmp_path), "classes": 9, "frames": 2, "size": 8, "patch": 4})
    B, N = 40, task.tokens
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(B, N, 9, generator=g)
    label = torch.randint(9, (B,), generator=g)
    targets = torch.zeros(B, N, dtype=torch.long)
    targets[:, -1] = label
    mask = torch.zeros(B, N, dtype=torch.bool)
    mask[:, -1] = True
    batch = Batch({}, targets, mask, {})
    last = logits[:, -1].numpy()
    rank = [(last[b] > last[b, label[b]]).sum() for b in range(B)]  # how many classes score above the truth
    counts = task.counts(logits, batch)
    assert counts["accuracy"] == (float(sum(r == 0 for r in rank)), float(B))
    assert counts["top5_accuracy"] == (float(sum(r < 5 for r in rank)), float(B))
    assert 0 < counts["accuracy"][0] < counts["top5_accuracy"][0] < B
    # Only the last token counts: making every other position right changes nothing.
    logits[:, :-1] = F.one_hot(targets[:, :-1], 9).float() * 100
    assert task.counts(logits, batch) == counts
    # The truth ranked second: wrong at top-1, right at top-5; ranked sixth: wrong at both.
    second = torch.zeros(B, N, 9)
    second[torch.arange(B), -1, label] = 2.0
    second[torch.arange(B), -1, (label + 1) % 9] = 3.0
    assert task.counts(second, batch) == {"accuracy": (0.0, float(B)), "top5_accuracy": (float(B), float(B))}
    sixth = torch.zeros(B, N, 9)
    for k in range(1, 6):
        sixth[torch.arange(B), -1, (label + k) % 9] = 1.0 + k
    assert task.counts(sixth, batch) == {"accuracy": (0.0, float(B)), "top5_accuracy": (0.0, float(B))}


# ---------------------------------------------------------------------------------------
# UCF-101: training and checkpoints
# ---------------------------------------------------------------------------------------


def tiny_run(task: dict, kind: str) -> dict:
    model = {"kind": kind, "dim": 16, "layers": 1, "heads": 2}
    if kind == "tensor":
        model["memory"] = {"channels": 2, "grid": [2, 2, 2]}
    return {
        "task": task,
        "model": model,
        "training": {
            "steps": 3,
            "batch_size": 4,
            "lr": 3e-3,
            "warmup_steps": 1,
            "eval_every": 3,
            "eval_batches": 1,
            "log_every": 1,
        },
    }


@pytest.mark.parametrize("kind", ["tensor", "base"])
def test_ucf_trains_and_its_checkpoint_reloads(ucf, tmp_path, kind):
    from tensor_memory import load_checkpoint
    from tensor_memory.training import train

    params = {"path": str(ucf["avi"]), "classes": 3, "frames": 3, "stride": 2, "size": SIZE, "patch": PATCH}
    metrics = train(tiny_run({"name": "action_recognition", "params": params}, kind), tmp_path, progress=False)
    assert {"accuracy", "top5_accuracy"} <= set(metrics)
    ckpt = load_checkpoint(tmp_path)
    config = ckpt.task.config.to_dict()
    assert ckpt.task.name == "action_recognition" and all(config[k] == v for k, v in params.items())
    assert ckpt.config["model"]["kind"] == kind and ckpt.model.encoder.pixels.in_features == PATCH * PATCH * 3
    result = evaluate(ckpt.model, ckpt.task, batches=10, batch_size=4, progress=False)
    assert 0.0 <= result["accuracy"] <= 1.0


# ---------------------------------------------------------------------------------------
# UCF-101: refusals
# ---------------------------------------------------------------------------------------


@pytest.fixture
def ucf_copy(ucf, tmp_path) -> Path:
    """A writable copy of the .avi data set (its lists in <copy>/ucfTrainTestlist)."""
    root = tmp_path / "UCF-101"
    shutil.copytree(ucf["avi"], root)
    shutil.copytree(ucf["lists"], root / "ucfTrainTestlist")
    return root


def edit_list(root: Path, name: str, change) -> Path:
    path = root / "ucfTrainTestlist" / name
    path.write_bytes(change(path.read_bytes().decode()).encode())  # keeping the CRLF line ends
    return path


def test_ucf_refuses_a_missing_video_naming_the_entry_and_layouts(ucf_copy):
    (ucf_copy / entry(2, 1, 1)).unlink()
    with pytest.raises(FileFormatError) as error:
        _ = ucf_task(ucf_copy).splits
    message = str(error.value)
    assert f"list entry '{entry(2, 1, 1)}'" in message
    assert str(ucf_copy / "CleanAndJerk" / "v_CleanAndJerk_g01_c01") in message  # the frame folders looked for
    assert str(ucf_copy / "v_CleanAndJerk_g01_c01") in message


def test_ucf_refuses_a_corrupt_or_empty_video_naming_the_file(ucf_copy):
    task = ucf_task(ucf_copy)
    clip = task.clips("test")[0]
    clip.source.write_bytes(b"RIFF\x00\x00\x00\x00AVI garbage " * 40)
    with pytest.raises(FileFormatError, match=f"{re.escape(str(clip.source))}: not a readable video"):
        task.draw("eval", 2, 0, 0)
    other = task.clips("test")[1]
    other.source.write_bytes(b"")
    with pytest.raises(FileFormatError, match=str(other.source)):
        V.read_video(other.source, SIZE, 3)
    empty = ucf_copy / "v_Empty_g01_c01"
    empty.mkdir()
    with pytest.raises(FileFormatError, match=f"{re.escape(str(empty))}: a frame folder with no frames"):
        V.read_video(empty, SIZE, 3)
    (empty / "frame_1.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(FileFormatError, match="frame_1.png: not a readable image"):
        V.read_video(empty, SIZE, 3)


def test_ucf_refuses_entries_outside_the_folder(ucf_copy, tmp_path):
    write_avi(tmp_path / "secret" / "v_X_g01_c01.avi", [ucf_frame(0, 0, 1)] * 3)
    path = edit_list(ucf_copy, "testlist01.txt", lambda text: text + "../secret/v_X_g01_c01.avi\r\n")
    problem = "line 7: entry '../secret/v_X_g01_c01.avi' points outside"
    with pytest.raises(FileFormatError, match=f"{re.escape(str(path))}, {problem}"):
        _ = ucf_task(ucf_copy).splits


@pytest.mark.parametrize(
    "name, change, problem",
    [
        (
            "trainlist01.txt",
            lambda t: t.replace(" 2\r\n", " 2 extra\r\n", 1),
            r"line 2: expected '<ClassName>/<video>.avi",
        ),
        ("trainlist01.txt", lambda t: t.replace(" 2\r\n", " 3\r\n", 1), "line 2: label 3 disagrees with classInd.txt"),
        ("trainlist01.txt", lambda t: t + "Unknown/v_Unknown_g08_c01.avi\r\n", "class folder 'Unknown' is not in"),
        ("testlist01.txt", lambda t: t + "ApplyEyeMakeup/v_ApplyEyeMakeup.avi\r\n", "lacks the _gXX_cYY"),
        ("testlist01.txt", lambda t: t + t.splitlines()[0] + "\r\n", "line 7: entry .* is listed twice"),
        (
            "classInd.txt",
            lambda t: t.replace("2 ApplyEyeMakeup", "two ApplyEyeMakeup"),
            "line 2: expected '<class id> <ClassName>'",
        ),
    ],
)
def test_ucf_refuses_malformed_list_lines_naming_file_and_line(ucf_copy, name, change, problem):
    path = edit_list(ucf_copy, name, change)
    pattern = f"{re.escape(str(path))}, {problem}" if problem.startswith("line") else problem
    with pytest.raises(FileFormatError, match=pattern) as error:
        _ = ucf_task(ucf_copy).splits
    assert str(path) in str(error.value)


def test_ucf_refuses_a_classes_count_that_is_not_classInds(ucf):
    task = make_task("action_recognition", {"path": str(ucf["avi"])})  # the default, 101
    with pytest.raises(
        FileFormatError,
        match=r"classInd.txt: lists 3 classes but the task's classes is 101; "
        r"set task.params.classes=3",
    ):
        task.draw("train", 2, 0, 0)


@pytest.mark.parametrize(
    "params, problem",
    [
        ({}, "ActionRecognitionConfig.path is required"),
        ({"path": 3}, "ActionRecognitionConfig.path must be a folder path"),
        ({"fold": 4}, "ActionRecognitionConfig.fold must be 1, 2 or 3"),
        ({"fold": 1.0}, "ActionRecognitionConfig.fold must be 1, 2 or 3"),
        ({"classes": 1}, "ActionRecognitionConfig.classes must be an integer >= 2"),
        ({"classes": 5000}, "ActionRecognitionConfig.classes must be at most 4,096"),
        ({"frames": 0}, "ActionRecognitionConfig.frames must be"),
        ({"stride": 0}, "ActionRecognitionConfig.stride must be"),
        ({"size": 30}, "ActionRecognitionConfig.patch must divide"),
        ({"channels": 2}, "ActionRecognitionConfig.channels must be 1"),
        ({"frames": 4096, "patch": 1}, "ActionRecognitionConfig: frames × \\(size / patch\\)²"),
    ],
)
def test_ucf_config_refuses_bad_fields_by_name(params, problem):
    given = {"path": "/data/UCF-101", **params} if params else {}
    with pytest.raises(ValueError, match=problem):
        make_task("action_recognition", given)


def test_ucf_cache_is_capped_and_decoding_stops_at_the_frame_cap(ucf):
    clip = ucf_task(ucf["avi"]).clips("train")[0]
    assert len(V.read_avi(clip.source, SIZE, 3, max_frames=5)) == 5
    assert len(V.read_frame_folder(ucf["frames"] / clip.entry[:-4], SIZE, 3, max_frames=4)) == 4
    cache = V.FrameCache(max_bytes=2 * 20 * SIZE * SIZE * 3)  # room for two videos of 20 frames
    sources = [c.source for c in ucf_task(ucf["avi"]).clips("train")[:4]]
    for source in sources:
        V.read_video(source, SIZE, 3, cache=cache)
    assert cache.bytes <= cache.max_bytes and 1 <= len(cache) <= 2
    kept = V.read_video(sources[-1], SIZE, 3, cache=cache)
    assert not kept.flags.writeable  # shared, so read-only


# ---------------------------------------------------------------------------------------
# CUB-200-2011
# ---------------------------------------------------------------------------------------

CUB_CLASSES = ("001.Black_footed_Albatross", "002.Laysan_Albatross", "003.Sooty_Albatross")
CUB_H, CUB_W = 16, 24  # short side 16 = the crop size below: the loader keeps the pixels as they are


def cub_image(image_id: int) -> np.ndarray:
    """Image ``image_id`` (1-based): red = 10·column, green = 10·id + 20, blue = 10·row."""
    y, x = np.mgrid[:CUB_H, :CUB_W]
    return np.stack([10 * x, np.full_like(x, 10 * image_id + 20), 10 * y], axis=-1).astype(np.uint8)


def cub_relative(image_id: int) -> str:
    name = CUB_CLASSES[(image_id - 1) % 3]
    return f"{name}/{name.split('.')[1]}_{image_id:04d}_{796010 + image_id}.jpg"


def cub_is_test(image_id: int) -> bool:
    return image_id % 3 == 0


def cub_held(relative: str) -> bool:
    return int(hashlib.sha256(relative.encode()).hexdigest(), 16) % I.CUB_VALID_EVERY == 0


@pytest.fixture(scope="module")
def cub(tmp_path_factory) -> Path:
    from PIL import Image

    folder = tmp_path_factory.mktemp("cub") / "CUB_200_2011"
    ids = range(1, 22)
    for i in ids:
        path = folder / "images" / cub_relative(i)
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(cub_image(i)).save(path, quality=95, subsampling=0)
    (folder / "images.txt").write_text("".join(f"{i} {cub_relative(i)}\n" for i in ids))
    (folder / "train_test_split.txt").write_text("".join(f"{i} {0 if cub_is_test(i) else 1}\n" for i in ids))
    held = [i for i in ids if not cub_is_test(i) and cub_held(cub_relative(i))]
    assert held == [8, 11, 20], held  # the fixture must give every split something
    return folder


def cub_copy(cub: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "CUB_200_2011"
    shutil.copytree(cub, folder)
    return folder


def test_cub_splits_are_the_official_test_and_a_held_out_part_of_train(cub):
    splits = I.cub_split_paths(cub)
    root = (cub / "images").resolve()
    by_id = {i: root / cub_relative(i) for i in range(1, 22)}
    official_train = [by_id[i] for i in by_id if not cub_is_test(i)]
    assert splits["test"] == [by_id[i] for i in by_id if cub_is_test(i)]  # exactly, in id order
    assert splits["valid"] == [p for i, p in by_id.items() if not cub_is_test(i) and cub_held(cub_relative(i))]
    assert sorted(splits["train"] + splits["valid"]) == sorted(official_train)
    assert not set(splits["train"]) & set(splits["valid"]) and splits["valid"]
    assert not set(splits["valid"]) & set(splits["test"])


def test_cub_crops_come_from_the_right_images(cub):
    task = make_task("masked_patches", {"source": "cub", "path": str(cub), "image_size": 16, "patch": 4, "channels": 3})
    splits = I.cub_split_paths(cub)
    ids = {p.name: int(p.name.split("_")[-2]) for split in splits.values() for p in split}
    for purpose, split in (("train", "train"), ("val", "valid"), ("eval", "test")):
        batch = task.draw(purpose, 6, seed=1, index=0)
        assert batch.meta["image"].shape == (6, 16, 16, 3)
        for b in range(6):
            source, index, top, left = batch.meta["origin"][b].tolist()
            assert source == 2 and top == 0 and 0 <= left <= CUB_W - 16
            image_id = ids[splits[split][index].name]
            want = cub_image(image_id)[top : top + 16, left : left + 16] / 255.0
            got = batch.meta["image"][b].numpy()
            assert np.abs(got - want).max() < 8 / 255, (purpose, b)  # JPEG's loss only
            assert abs(got[..., 1].mean() - (10 * image_id + 20) / 255) < 2 / 255  # that image, not a neighbour


def test_cub_masked_patches_trains_a_few_steps(cub, tmp_path):
    from tensor_memory import load_checkpoint
    from tensor_memory.training import train

    params = {"source": "cub", "path": str(cub), "image_size": 16, "patch": 8, "channels": 3}
    metrics = train(tiny_run({"name": "masked_patches", "params": params}, "base"), tmp_path, progress=False)
    assert metrics["psnr"] is not None and math.isfinite(metrics["psnr"])
    assert load_checkpoint(tmp_path).task.config.path == str(cub)


def test_cub_refuses_a_malformed_line(cub, tmp_path):
    folder = cub_copy(cub, tmp_path)
    path = folder / "images.txt"
    path.write_text(path.read_text() + "22\n")
    with pytest.raises(FileFormatError, match=f"{re.escape(str(path))}, line 22: expected '<image id> <value>'"):
        I.cub_split_paths(folder)
    split = folder / "train_test_split.txt"
    path.write_text(path.read_text().removesuffix("22\n"))
    split.write_text("".join(f"{i} {2 if i == 4 else int(not cub_is_test(i))}\n" for i in range(1, 22)))
    with pytest.raises(FileFormatError, match=f"{re.escape(str(split))}: image id\\(s\\) \\[4\\] are neither"):
        I.cub_split_paths(folder)
    split.write_text(split.read_text().replace("4 2\n", "4 1\n") + "4 0\n")  # image 4 in train and test
    with pytest.raises(FileFormatError, match=f"{re.escape(str(split))}, line 22: image id 4 appears twice"):
        I.cub_split_paths(folder)


def test_cub_refuses_a_path_outside_images(cub, tmp_path):
    folder = cub_copy(cub, tmp_path)
    path = folder / "images.txt"
    path.write_text(path.read_text().replace(cub_relative(5), "../../secret.jpg"))
    with pytest.raises(FileFormatError, match=f"{re.escape(str(path))}: image 5 points outside images/"):
        I.cub_split_paths(folder)


def test_cub_refuses_missing_and_corrupt_images_naming_the_file(cub, tmp_path):
    folder = cub_copy(cub, tmp_path)
    test = I.cub_split_paths(folder)["test"]
    test[0].unlink()
    test[1].write_bytes(b"\xff\xd8\xff\xe0 not a jpeg" * 10)
    test[2].write_bytes(test[3].read_bytes()[:200])  # truncated
    pool = I.cub_pool(str(folder), "test", 3, 16)
    with pytest.raises(FileFormatError, match=f"{re.escape(str(test[0]))}: listed in images.txt but missing"):
        pool.fetch(0)
    for index in (1, 2):
        with pytest.raises(FileFormatError, match=f"{re.escape(str(test[index]))}: not a readable image"):
            pool.fetch(index)
    assert pool.fetch(3).shape == (16, 24, 3)  # the intact ones still load
