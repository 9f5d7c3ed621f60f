"""analysis.monitor from a plain loop and TensorMemoryCallback in a real Hugging Face Trainer: what they record,
that looking leaves the training bit for bit as it was, and the errors that say what to do."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import logging

import analysis
from analysis import load_trace, monitor
from analysis.traces.run_log import follow_run
from tensor_memory import MemoryConfig, TensorMemory, attach_memory, record, streaming
from tensor_memory.training.run_log import HEADER_FILE, layer_summary

logging.set_verbosity_error()
VOCAB, N = 64, 32
LAYER = "transformer.h.1.memory"
ROOT = Path(__file__).resolve().parents[1]


def tiny_gpt2(seed: int = 0) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB))  # dropout 0.1: uses the RNG
    memory = MemoryConfig(token_dim=32, channels=4, grid=(4, 4, 4), chunk_size=4, gate_init=0.0)
    return attach_memory(model, memory, layers=[1])


def tokens(count: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (count, N), generator=torch.Generator().manual_seed(seed))


def train_steps(model: nn.Module, steps: int, mon=None) -> None:
    """A plain loop: shuffled batches (the loader draws from torch's RNG), dropout on, AdamW."""
    loader = torch.utils.data.DataLoader(tokens(32, 1), batch_size=4, shuffle=True)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    batches = iter(loader)
    for step in range(steps):
        ids = next(batches)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        if mon is not None:
            mon.step(step, loss=loss.item())


def test_monitoring_leaves_the_training_bit_for_bit_as_it_was(tmp_path):
    plain = tiny_gpt2()
    torch.manual_seed(5)
    train_steps(plain, 6)
    watched = tiny_gpt2()
    torch.manual_seed(5)
    with monitor(watched, tmp_path / "run", every=1, snapshot_every=2) as mon:
        train_steps(watched, 6, mon)
    before = torch.get_rng_state()
    tiny_gpt2(1).train()(input_ids=tokens(1, 2))  # dropout draws from the RNG: the equality below is not for free
    assert not torch.equal(before, torch.get_rng_state())
    for (name, a), b in zip(plain.state_dict().items(), watched.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert all(module.training for module in watched.modules())  # train mode, as the loop left it
    run = follow_run(tmp_path / "run")
    assert [r["step"] for r in run.records] == list(range(6)) and list(run.records[0]["layers"]) == [LAYER]
    assert run.header["probe"] == "the first batch the model saw" and run.header["snapshot_every"] == 2
    assert sorted(p.name for p in (tmp_path / "run" / "snapshots").iterdir()) == [
        f"step-{s:010d}.trace.safetensors" for s in (0, 2, 4)
    ]
    assert load_trace(run.newest_snapshot()).info["checkpoint_name"] == "GPT2LMHeadModel step 4"


class Noisy(nn.Module):
    """Someone's own model that draws random numbers in eval mode too: only forking the RNG keeps its training."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.head = nn.Embedding(VOCAB, 16), nn.Linear(16, VOCAB)
        self.memory = TensorMemory(MemoryConfig(token_dim=16, channels=2, grid=(3, 3, 3), chunk_size=4))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        h = h + self.memory(h)[0]
        return self.head(h + 0.1 * torch.randn_like(h))


def test_a_model_drawing_random_numbers_in_eval_mode_trains_the_same_monitored(tmp_path):
    def run(model: Noisy, mon=None) -> Noisy:
        data = tokens(8, 7)
        optimiser = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for step in range(5):
            loss = nn.functional.cross_entropy(model(data).flatten(0, 1), data.flatten())
            loss.backward()
            optimiser.step()
            optimiser.zero_grad()
            if mon is not None:
                mon.step(step, loss=loss)
        return model

    plain = run(Noisy())
    watched = Noisy()
    with monitor(watched, tmp_path, every=1, snapshot_every=2) as mon:
        run(watched, mon)
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), watched.parameters(), strict=True))
    assert len(follow_run(tmp_path).records) == 5


def test_the_record_is_the_summary_of_the_probe_in_eval_mode(tmp_path):
    model = tiny_gpt2()
    probe = {"input_ids": tokens(12, 3), "attention_mask": torch.ones(12, N, dtype=torch.long)}
    model.transformer.h[0].eval()  # a module the user keeps in eval mode stays so; the rest stay in train mode
    with monitor(model, tmp_path, every=10, snapshot_every=None, probe=probe) as mon:
        assert mon.step(3) is None and mon.step(10, loss=torch.tensor(2.5)) is not None
    entry = follow_run(tmp_path).records[0]
    assert entry["step"] == 10 and entry["loss"] == 2.5
    assert not model.transformer.h[0].training and model.transformer.h[1].training and model.training
    model.eval()
    with torch.no_grad(), record(model) as rec:
        model(input_ids=probe["input_ids"][:8], attention_mask=probe["attention_mask"][:8])  # the first 8 samples
    assert entry["layers"][LAYER] == layer_summary(rec[LAYER], (4, 4, 4))
    assert not (tmp_path / "snapshots").exists()


def test_a_streaming_models_carried_state_is_left_as_it_was(tmp_path):
    model = tiny_gpt2().eval()
    ids = tokens(2, 4)
    with streaming(model) as stream:
        model(input_ids=ids[:, :16])
        alone = model(input_ids=ids[:, 16:]).logits
    with monitor(model, tmp_path, every=1, snapshot_every=1, probe={"input_ids": tokens(1, 5)}) as mon:
        with streaming(model) as stream:
            model(input_ids=ids[:, :16])
            carried = {name: state.h.clone() for name, state in stream.states.items()}
            mon.step(0)
            assert {name: state.h for name, state in stream.states.items()}.keys() == carried.keys()
            assert all(torch.equal(stream.states[name].h, h) for name, h in carried.items())
            assert torch.equal(model(input_ids=ids[:, 16:]).logits, alone)  # it reads on from the same state


def test_errors_say_what_to_do(tmp_path):
    model = tiny_gpt2()
    with pytest.raises(ValueError, match="no TensorMemory layer to follow; attach one first"):
        monitor(nn.Linear(2, 2), tmp_path / "a")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        monitor(model, tmp_path / "file")
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="every must be a whole number of steps ≥ 1"):
            monitor(model, tmp_path / "a", every=bad)
    with pytest.raises(ValueError, match="snapshot_every must be"):
        monitor(model, tmp_path / "a", snapshot_every=0)
    with pytest.raises(ValueError, match="the probe must be a tensor or a dict"):
        monitor(model, tmp_path / "a", probe=[1, 2])
    mon = monitor(model, tmp_path / "a")
    with pytest.raises(ValueError, match="outside its `with monitor"):
        mon.step(0)
    with mon, pytest.raises(ValueError, match="no probe to measure on .*has not run a forward yet.*pass probe="):
        mon.step(0)
    with pytest.raises(ValueError, match="already holds a run .*overwrite=True"):
        monitor(model, tmp_path / "a")
    with monitor(model, tmp_path / "a", overwrite=True, snapshot_every=None, probe=tokens(1, 0)) as mon:
        assert mon.step(50)["step"] == 50
    with monitor(model, tmp_path / "b", probe=tokens(1, 0)[:, :2]) as mon:  # shorter than one chunk
        with pytest.raises(ValueError, match="cannot snapshot the probe at step 0: .*snapshot_every=None"):
            mon.step(0)


def test_the_callback_follows_a_real_trainer(tmp_path):
    model = tiny_gpt2()
    data = [{"input_ids": ids, "labels": ids} for ids in tokens(48, 6)]
    args = TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        max_steps=24,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        logging_steps=5,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    callback = analysis.TensorMemoryCallback(tmp_path / "run", every=4, snapshot_every=12)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()
    run = follow_run(tmp_path / "run")
    assert run.header["model"] == "GPT2LMHeadModel" and run.header["layers"] == {
        LAYER: {"grid": [4, 4, 4], "channels": 4}
    }
    assert [r["step"] for r in run.records] == [4, 8, 12, 16, 20, 24]
    assert "loss" not in run.records[0] and all(r["loss"] > 0 for r in run.records[1:])  # logged from step 5 on
    assert all(0 < r["layers"][LAYER]["occupancy"] <= 1 for r in run.records)
    trace = load_trace(run.newest_snapshot())
    assert run.newest_snapshot().name == "step-0000000024.trace.safetensors" and list(trace.layers) == [LAYER]
    assert trace.num_chunks == N // 4 and callback.monitor is None
    assert (tmp_path / "run" / HEADER_FILE).exists()


def test_the_readme_monitor_example_runs_after_the_your_own_model_example(tmp_path, monkeypatch):
    section = (ROOT / "README.md").read_text().split("## Your own model", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    first, example = blocks[0], next(block for block in blocks if "monitor(" in block)
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace: dict = {}
    for block in (first, example):
        exec(compile(block, "README.md", "exec"), namespace)
    run = follow_run(tmp_path / "runs" / "mine")
    assert [r["step"] for r in run.records] == [0, 2, 4, 6, 8] and run.records[-1]["loss"] > 0
    assert run.header["snapshot_every"] == 20 and run.newest_snapshot().name == "step-0000000000.trace.safetensors"


def test_analysis_imports_without_transformers_until_the_callback_is_asked_for():
    code = (
        "import sys, analysis; assert 'transformers' not in sys.modules; "
        "analysis.TensorMemoryCallback; assert 'transformers' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
