"""The app's checkpoint upload, driven by Streamlit's AppTest: good uploads shown, bad ones refused with a reason."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import time
import zipfile
from pathlib import Path

import pytest
from app_helpers import CHECKPOINTS, counter, ok, shown, start, upload, zipped

from app.upload import MAX_UPLOAD_BYTES, UPLOAD_ROOT, UploadError, unpack_checkpoint
from tensor_memory import load_checkpoint
from tensor_memory.backbone import BackboneConfig
from tensor_memory.storage.checkpoint import save_checkpoint
from tensor_memory.tasks import TaskModel, make_task


def test_good_upload_is_validated_and_shown():
    at = start()
    at = upload(at, "map_building-tensor.zip", zipped(CHECKPOINTS / "map_building-tensor", "map_building-tensor/"))
    label = at.selectbox(key="checkpoint_choice").value
    assert label.startswith("map_building-tensor (upload")
    assert any("task map_building" in shown(s.value) for s in at.success)
    assert at.session_state["context"].task == "map_building"
    ok(at.switch_page("views/occlusion.py").run())
    assert any("need an occlusion or moving_digits checkpoint" in i.value for i in at.info)
    ok(at.selectbox(key="checkpoint_choice").set_value("occlusion-tensor").run())
    assert at.session_state["context"].task == "occlusion" and not at.error


def bad_uploads(tmp: Path) -> dict[str, tuple[bytes, str]]:
    """name → (file, words the error must contain)."""
    good = CHECKPOINTS / "no_harm-tensor"
    pickled = tmp / "pickled"
    shutil.copytree(good, pickled)
    (pickled / "model.safetensors").write_bytes(b"\x80\x04\x95" + b"\x00" * 64)
    truncated = tmp / "truncated"
    shutil.copytree(good, truncated)
    (truncated / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes()[:1000])
    other_task = tmp / "other_task"
    shutil.copytree(good, other_task)
    config = json.loads((good / "config.json").read_text())
    config["task"]["name"] = "video_classification"
    (other_task / "config.json").write_text(json.dumps(config))
    hostile = tmp / "hostile"
    shutil.copytree(good, hostile)
    config = json.loads((good / "config.json").read_text())
    config["model"]["layers"] = 1_000_000
    (hostile / "config.json").write_text(json.dumps(config))
    server_path = tmp / "server_path"  # a CUB checkpoint whose task would read /etc on the server
    shutil.copytree(CHECKPOINTS / "masked_patches-tensor", server_path)
    config = json.loads((server_path / "config.json").read_text())
    config["task"]["params"].update(source="cub", path="/etc")
    (server_path / "config.json").write_text(json.dumps(config))
    slip = io.BytesIO()
    with zipfile.ZipFile(slip, "w") as archive:
        archive.writestr("../config.json", "{}")
    return {
        "not-a-zip.zip": (b"this is not a zip file", "not a zip"),
        "empty.zip": (zipped(tmp / "nothing"), "no config.json"),
        "pickled.zip": (zipped(pickled), "pickle"),
        "truncated.zip": (zipped(truncated), "truncated"),
        "other-task.zip": (zipped(other_task), "unknown task"),
        "slip.zip": (slip.getvalue(), "unsafe path"),
        "hostile.zip": (zipped(hostile), "BackboneConfig.layers must be at most 64"),
        "server-path.zip": (
            zipped(server_path),
            "reads data from a folder on this server (task.params.path), and uploads may not name server paths",
        ),
        "minilm.zip": (
            zipped(CHECKPOINTS / "minilm-tensor"),
            "it is a memory on a pretrained MiniLM; uploads take task checkpoints",
        ),
    }


def test_bad_uploads_say_what_is_wrong_and_keep_the_checkpoint(tmp_path):
    (tmp_path / "nothing").mkdir()
    at = start()
    for name, (data, words) in bad_uploads(tmp_path).items():
        at = upload(at, name, data)
        errors = [shown(e.value) for e in at.error]
        assert any(name in e and words in e for e in errors), (name, errors)
        # a refused upload's folder is deleted at once (each is unpacked under its digest)
        assert not (UPLOAD_ROOT / hashlib.sha256(data).hexdigest()[:24]).exists(), name
        assert at.selectbox(key="checkpoint_choice").value == "occlusion-tensor"
        assert counter(at).startswith("Chunk")  # still usable
        at.file_uploader(key="checkpoint_upload").clear()
        ok(at.run())
    assert not any(e for e in at.error)


def test_upload_limits_and_zip_bombs(tmp_path):
    with pytest.raises(UploadError, match="upload limit"):
        unpack_checkpoint(b"0" * (MAX_UPLOAD_BYTES + 1), tmp_path)
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("config.json", "{}")
        with archive.open("model.safetensors", "w", force_zip64=True) as member:  # 700 MB of zeros, ~0.7 MB zipped
            for _ in range(700):
                member.write(bytes(1 << 20))
    with pytest.raises(UploadError, match="unpacks to"):
        unpack_checkpoint(bomb.getvalue(), tmp_path)
    link = io.BytesIO()
    with zipfile.ZipFile(link, "w") as archive:
        entry = zipfile.ZipInfo("config.json")
        entry.external_attr = 0o120777 << 16  # a symbolic link
        archive.writestr(entry, "/etc/passwd")
    with pytest.raises(UploadError, match="link"):
        unpack_checkpoint(link.getvalue(), tmp_path)
    folder = unpack_checkpoint(zipped(CHECKPOINTS / "no_harm-tensor", "deep/"), tmp_path)
    assert load_checkpoint(folder).task.name == "no_harm"
    assert (
        unpack_checkpoint(zipped(CHECKPOINTS / "no_harm-tensor", "deep/"), tmp_path) == folder
    )  # same file, same folder


def entry(name: str, **fields) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def encrypted_flag(raw: bytes) -> bytes:
    """The archive with the 'encrypted' bit set in every local and central header (what a password zip has)."""
    data = bytearray(raw)
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = 0
        while (start := data.find(signature, start)) >= 0:
            data[start + offset] |= 0x1
            start += 4
    return bytes(data)


def test_encrypted_entries_other_compressions_and_deep_nesting_are_refused(tmp_path):
    good = (CHECKPOINTS / "no_harm-tensor" / "config.json").read_text()
    cases = {
        "encrypted": ([entry("config.json")], "is encrypted"),
        "bzip2": ([entry("config.json", compress_type=zipfile.ZIP_BZIP2)], "compression method 12"),
        "lzma": ([entry("config.json", compress_type=zipfile.ZIP_LZMA)], "compression method 14"),
        "nested": ([entry("a/b/config.json")], "2 folders down"),
    }
    for name, (entries, words) in cases.items():
        data = io.BytesIO()
        with zipfile.ZipFile(data, "w") as archive:
            for info in entries:
                archive.writestr(info, good)
        raw = data.getvalue()
        if name == "encrypted":  # zipfile writes no encrypted entries: set bit 0 of the flags by hand
            raw = encrypted_flag(raw)
        with pytest.raises(UploadError, match=words):
            unpack_checkpoint(raw, tmp_path)
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".")]  # nothing unpacked


def test_the_upload_folder_is_capped_in_total_size(tmp_path, monkeypatch):
    from app import upload as up

    folders = []
    for seed in range(4):  # four different uploads of about 1 MB each
        source = tmp_path / f"src{seed}"
        shutil.copytree(CHECKPOINTS / "no_harm-tensor", source)
        (source / "notes.txt").write_text(str(seed))
        monkeypatch.setattr(up, "MAX_ROOT_BYTES", int(2.5 * up._size(source)))  # room for two and a half
        folders.append(unpack_checkpoint(zipped(source), tmp_path / "root"))
        time.sleep(0.01)  # distinct modification times
    left = sorted(p for p in (tmp_path / "root").iterdir() if not p.name.startswith("."))
    assert left == sorted(folders[-2:])  # the oldest went first, the newest stays


def test_a_sample_shorter_than_one_chunk_says_so_and_a_longer_one_works(tmp_path):
    config = json.loads((CHECKPOINTS / "no_harm-tensor" / "config.json").read_text())
    config["model"]["memory"]["chunk_size"] = 64  # longer than the task's 32 tokens
    model = TaskModel(
        make_task(config["task"]["name"], config["task"]["params"]), BackboneConfig.from_dict(config["model"])
    )
    save_checkpoint(tmp_path / "long-chunks", model, config)
    at = upload(start(**{"keep.diagnose.samples": 8}), "long-chunks.zip", zipped(tmp_path / "long-chunks"))
    assert any("fewer than one memory chunk" in e.value for e in at.error)
    for page in ("views/occlusion.py", "views/teach.py", "views/export.py", "views/diagnose.py", "views/explore.py"):
        ok(at.switch_page(page).run())
        assert any("fewer than one memory chunk" in e.value for e in at.error), page
    ok(at.slider(key="no_harm.length").set_value(128).run())
    assert not at.error and counter(at) == "Chunk 1 / 1"
