"""The causality audit, and the shared-state variant it exists to catch."""

from __future__ import annotations

import pytest
import torch

from analysis import causality_audit
from analysis.measures.causality import audit_checkpoint, default_positions
from tensor_memory import Backbone, BackboneConfig, load_checkpoint
from tensor_memory.backbone import KINDS

MEMORY = {"token_dim": 16, "channels": 4, "grid": [3, 3, 3], "chunk_size": 4}


def backbone(kind="tensor", **extra):
    torch.manual_seed(0)
    return Backbone(
        BackboneConfig(
            kind=kind,
            dim=16,
            layers=3,
            heads=2,
            memory=MEMORY if kind == "tensor" else None,
            window=8 if kind == "local" else None,
            xl_segment=4,
            slot_chunk=4,
            **extra,
        )
    )


def x(n=24):
    return torch.randn(2, n, 16, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kind", KINDS)
def test_every_causal_backbone_passes_exactly(kind):
    result = causality_audit(backbone(kind), x())
    assert result["verdict"] == "causal" and result["max_change"] == 0.0
    heat = torch.tensor(result["heatmap"]["change"])
    for row, p in zip(heat, result["heatmap"]["perturbed"], strict=True):
        assert (row[:p] == 0).all() and row[p] > 0  # nothing before p moves; p itself does


def test_shared_state_leaks_and_is_caught():
    model = backbone(share_state=True)
    result = causality_audit(model, x())
    assert result["verdict"] == "leaks" and result["max_change"] > 1e-4
    leak_from = result["outputs"]["output"]["leak_from"]
    assert leak_from is not None and leak_from < 20  # a later layer reads writes of later chunks
    assert causality_audit(backbone(), x())["verdict"] == "causal"  # the same model without sharing


def test_shared_state_with_one_memory_layer_is_the_plain_model():
    same = [backbone(share_state=s, memory_layers=[1]).eval() for s in (False, True)]
    inputs = x()
    assert torch.equal(same[0](inputs)[0], same[1](inputs)[0])


def test_share_state_is_refused_where_it_means_nothing():
    for kwargs in ({"kind": "base"}, {"kind": "tensor", "causal": False}):
        with pytest.raises(ValueError, match="share_state only applies"):
            BackboneConfig(dim=16, heads=2, share_state=True, **kwargs)


def test_a_hand_made_leak_is_found_where_it_starts():
    def reverse_cumsum(v):  # output t sums inputs t…N−1: every position sees the future
        return v.flip(1).cumsum(1).flip(1)

    result = causality_audit(reverse_cumsum, x())
    assert result["verdict"] == "leaks" and result["outputs"]["output"]["leak_from"] == 0

    def leaks_late(v):  # only position 10 sees position 20
        out = v.clone()
        out[:, 10] += 1e-3 * v[:, 20]
        return out

    late = causality_audit(leaks_late, x(), positions=range(23))
    assert late["outputs"]["output"]["leak_from"] == 10 and late["verdict"] == "leaks"
    assert causality_audit(lambda v: v.cumsum(1), x())["verdict"] == "causal"


def test_audit_refuses_bad_input():
    with pytest.raises(ValueError, match=r"\(B, N, d\)"):
        causality_audit(lambda v: v, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="NaN"):
        causality_audit(lambda v: v, torch.full((1, 4, 2), float("nan")))
    with pytest.raises(ValueError, match="expected"):
        causality_audit(lambda v: v[:, :2], x())
    with pytest.raises(ValueError, match="positions must lie"):
        causality_audit(lambda v: v, x(), positions=[23])
    assert default_positions(1) == [] and default_positions(5) == [0, 1, 2, 3]


def test_audit_of_a_shipped_checkpoint_names_every_layer():
    result = audit_checkpoint(load_checkpoint("checkpoints/no_harm-tensor"))
    assert result["verdict"] == "causal"
    assert set(result["outputs"]) == {"layer 0", "layer 1", "logits"}
