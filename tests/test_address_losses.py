"""The self-supervised address losses (tensor_memory/training/penalties.py): the recall loss (each
chunk's write found again where it was written, some chunks on) and the pull of reads onto earlier writes. Each is
off by default, leaves the task's loss bit for bit when off, and is checked against an independent computation."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_remedies import GRID
from test_training import tiny_config

from tensor_memory import record
from tensor_memory.tasks import TaskModel
from tensor_memory.training import TrainConfig, resolve


def test_recall_shortfall_is_the_infonce_of_finding_each_write_again_lag_chunks_later():
    import torch.nn.functional as F

    from tensor_memory.training.penalties import RECALL_TEMPERATURE, recall_shortfall

    torch.manual_seed(0)
    B, K, C, lag = 2, 5, 3, 2
    h = torch.randn(B, K, C, *GRID, dtype=torch.float64)
    mu = torch.rand(B, K, 3, dtype=torch.float64) * 2 - 1
    expected = []
    for b in range(B):  # an independent computation: grid_sample of each state, one chunk at a time

        def read(state: int, chunk: int, b: int = b) -> torch.Tensor:
            return F.grid_sample(h[b, state][None], mu[b, chunk].view(1, 1, 1, 1, 3), align_corners=True).view(C)

        for k in range(K - lag):
            later = read(k + lag, k)
            scores = torch.stack([F.cosine_similarity(later, read(j, j), dim=0) for j in range(K)])
            expected.append(-torch.log_softmax(scores / RECALL_TEMPERATURE, 0)[k])
    torch.testing.assert_close(recall_shortfall(h, mu, lag), torch.stack(expected).mean())
    assert recall_shortfall(h, mu, K) is None  # no chunk has a state K chunks on


def test_recall_rewards_writes_kept_apart_where_they_were_written_over_writes_piled_on_one_place():
    from tensor_memory.training.penalties import recall_shortfall

    torch.manual_seed(0)
    D, H, W = GRID
    K, C = 6, 4
    cells = [(d, y, x) for d in range(D) for y in range(H) for x in range(W)][::7][:K]  # six distinct voxels
    to_unit = lambda i, n: 2 * i / (n - 1) - 1  # noqa: E731
    apart = torch.tensor([[to_unit(x, W), to_unit(y, H), to_unit(d, D)] for d, y, x in cells])[None]  # (1, K, 3)
    contents = torch.randn(K, C)

    def states(places: list) -> torch.Tensor:  # each chunk adds its content at its voxel; nothing fades
        volume, out = torch.zeros(C, D, H, W), []
        for content, (d, y, x) in zip(contents, places, strict=True):
            volume = volume.clone()
            volume[:, d, y, x] += content
            out.append(volume)
        return torch.stack(out)[None]  # (1, K, C, D, H, W)

    kept_apart = recall_shortfall(states(cells), apart, 2)
    piled = recall_shortfall(states([cells[0]] * K), apart[:, :1].expand(1, K, 3), 2)
    assert kept_apart < 0.2 and piled > 1.0  # found again, against about a guess among the K (log 6 = 1.8)


def test_the_recall_loss_adds_its_weight_times_the_shortfall_and_trains_the_addressing():
    from tensor_memory.training.loop import loss_on, training_loss
    from tensor_memory.training.penalties import recall_shortfall

    assert TrainConfig().recall_weight == 0.0  # off by default
    task, backbone, cfg = resolve(tiny_config(recall_weight=0.5, recall_lag=3))
    torch.manual_seed(0)
    model = TaskModel(task, backbone)
    memory = model.backbone.blocks[0].memory
    with torch.no_grad():
        memory.coord_head.weight.normal_(0, 0.5)  # writes of different tokens land apart
    batch = task.draw("train", 4, 0, 0)
    with record(model, gates=False) as rec:
        plain, _ = training_loss(model, task, batch, 0, dataclasses.replace(cfg, recall_weight=0.0))
    assert torch.equal(plain, loss_on(model, task, batch)[0])  # off: the task's loss, bit for bit
    layer_record = next(iter(rec.layers.values()))
    expected = 0.5 * recall_shortfall(layer_record.h, layer_record.mu_write, 3)
    with_recall, _ = training_loss(model, task, batch, 0, cfg)
    torch.testing.assert_close(with_recall - plain, expected, atol=1e-5, rtol=1e-5)
    model.zero_grad()
    (with_recall - plain).backward()  # the recall loss alone
    assert memory.coord_head.weight.grad.abs().sum() > 0 and memory.content.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="recall_lag"):
        resolve(tiny_config(recall_weight=0.5, recall_lag=0))
    with pytest.raises(ValueError, match="recall_lag=8: a sample of no_harm has 8 memory chunks"):
        resolve(tiny_config(recall_weight=0.5, recall_lag=8))  # the term would never be computed
    resolve(tiny_config(recall_lag=8))  # while the loss is off, the lag is not checked against the task
    padded = tiny_config(recall_weight=0.5, recall_lag=2)
    padded["model"]["memory"].update(
        chunk_size=3, public_code={"partial_chunk": "pad"}
    )  # 8 tokens: 3 chunks, the last one short
    resolve(padded)
    padded["model"]["memory"]["public_code"]["partial_chunk"] = "pending"  # 2 chunks written, 2 tokens left pending
    with pytest.raises(ValueError, match="has 2 memory chunks"):
        resolve(padded)
    with pytest.raises(ValueError, match="address_scaffold_steps"):  # it would read where the scaffold did not write
        resolve(tiny_config(recall_weight=0.5, recall_lag=2, address_scaffold_steps=4))


def test_reach_shortfall_is_the_squared_distance_from_each_read_to_the_nearest_earlier_write_and_moves_only_reads():
    from tensor_memory.training.penalties import reach_shortfall

    torch.manual_seed(0)
    mu_read = (torch.rand(2, 5, 3, dtype=torch.float64) * 2 - 1).requires_grad_()  # 5 reads: 4 complete chunks + 1
    mu_write = (torch.rand(2, 4, 3, dtype=torch.float64) * 2 - 1).requires_grad_()
    by_hand = [
        min(((mu_read[b, k] - mu_write[b, j]) ** 2).sum().item() for j in range(k))
        for b in range(2)
        for k in range(1, 5)
    ]  # an independent computation, one read at a time
    found = reach_shortfall(mu_read, mu_write)
    assert found.item() == pytest.approx(sum(by_hand) / len(by_hand), rel=1e-12)
    found.backward()
    assert mu_read.grad[:, 1:].abs().sum() > 0 and mu_read.grad[:, 0].abs().sum() == 0  # read 0 has no earlier write
    assert mu_write.grad is None  # the writes are held: the reads come to them
    many = torch.rand(2, 40, 3, dtype=torch.float64) * 2 - 1  # past the size where torch.cdist turns inexact
    on_writes = torch.cat([many[:, :1], many], dim=1)  # read k at write k−1's place
    assert reach_shortfall(on_writes, many) == 0
    assert reach_shortfall(mu_read[:, :1], mu_write) is None


def test_the_reach_penalty_adds_its_weight_and_trains_only_the_read_side_of_the_addressing():
    from tensor_memory.training.loop import loss_on, training_loss
    from tensor_memory.training.penalties import reach_shortfall

    assert TrainConfig().reach_weight == 0.0  # off by default
    task, backbone, cfg = resolve(tiny_config(reach_weight=2.0))
    torch.manual_seed(0)
    model = TaskModel(task, backbone)
    memory = model.backbone.blocks[0].memory
    with torch.no_grad():
        memory.coord_head.weight.normal_(0, 0.5)
    batch = task.draw("train", 4, 0, 0)
    with record(model, gates=False) as rec:
        plain, _ = training_loss(model, task, batch, 0, dataclasses.replace(cfg, reach_weight=0.0))
    assert torch.equal(plain, loss_on(model, task, batch)[0])  # off: the task's loss, bit for bit
    layer_record = next(iter(rec.layers.values()))
    expected = 2.0 * reach_shortfall(layer_record.mu_read, layer_record.mu_write)
    reached, _ = training_loss(model, task, batch, 0, cfg)
    assert expected > 1e-3
    torch.testing.assert_close(reached - plain, expected, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="reach_weight"):
        resolve(tiny_config(reach_weight=-1.0))
