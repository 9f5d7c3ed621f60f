"""Every wrong argument of attach_memory, detach_memory, streaming and from_public_code (and of the imported
interface's call) is refused in one line naming the argument and what to pass; and the public code's float16 and
bfloat16 weights import and reproduce the float32 interface to their precision."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_attach_hf import build, memory
from test_public_code import D_MODEL, GRID, literal_public, public_state
from torch import nn

from tensor_memory import MemoryConfig, TensorMemory, attach_memory, detach_memory, memory_layers, streaming
from tensor_memory.backbone import Backbone, BackboneConfig
from tensor_memory.memory.public_code import public_grid_cache


def gpt2() -> nn.Module:
    return build("gpt2")


def encoder() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


def tensor_backbone() -> nn.Module:
    torch.manual_seed(0)
    return Backbone(BackboneConfig(kind="tensor", dim=32, layers=2, heads=4, memory=memory(0.0), memory_layers=[0]))


def attach(model, layers, config=None):
    return lambda: attach_memory(model(), config or memory(gate=0.0), layers=layers)


SD = public_state(3)
NO_GRID = {key: value for key, value in SD.items() if key != "grid_cache"}


def imported(**kwargs):
    return lambda: TensorMemory.from_public_code(kwargs.pop("sd", SD), **kwargs)


def called(*args):
    return lambda: TensorMemory.from_public_code(SD)(*args)


X = torch.randn(2, 7, D_MODEL, generator=torch.Generator().manual_seed(1))
STATE = TensorMemory.from_public_code(SD).init_state(2)

CASES = {
    # attach_memory: the model, the config
    "model a string": (lambda: attach_memory("gpt2", memory(0.0)), "attach_memory: model must be a torch.nn.Module"),
    "config a dict": (attach(gpt2, [0], {"token_dim": 32}), "config must be a MemoryConfig (MemoryConfig(token_dim="),
    "config too narrow": (attach(gpt2, [0], MemoryConfig(token_dim=16)), "token_dim=16 does not match"),
    "config's output a message": (
        attach(gpt2, [0], MemoryConfig(token_dim=32, public_code={"output": "message"})),
        "public_code={'output': 'residual'}",
    ),
    # layers: its type and form
    "layers a path string": (attach(gpt2, "transformer.h.0"), "pass layers=['transformer.h.0']"),
    "layers an int": (attach(gpt2, 1), "layers=1 must be a list: pass layers=[1]"),
    "layers a float": (attach(gpt2, 1.5), "layers must be None (every block), a list of block indices"),
    "layers empty": (attach(gpt2, []), "layers=[] picks no layer"),
    "layers mixed": (attach(gpt2, [0, "transformer.h.1"]), "all block indices (ints) or all module paths"),
    "layers a bool": (attach(gpt2, [True]), "all block indices (ints) or all module paths"),
    "layers a float index": (attach(gpt2, [0.0]), "all block indices (ints) or all module paths"),
    "layers twice": (attach(gpt2, [1, 1]), "layers names 1 twice"),
    "layers a path twice": (attach(gpt2, ["transformer.h.0"] * 2), "layers names 'transformer.h.0' twice"),
    "index too large": (
        attach(gpt2, [3]),
        "names block 3, but the model has 3 blocks it knows: pass indices in [0, 2]",
    ),
    "index negative": (attach(gpt2, [-1]), "names block -1"),
    "no known blocks": (
        lambda: attach_memory(nn.Sequential(nn.Linear(32, 32)), memory(0.0), layers=[0]),
        "no layers it knows",
    ),
    # layers: the paths
    "path not there": (attach(gpt2, ["transformer.h.7"]), "no module 'transformer.h.7'; name one of"),
    "path the model": (attach(gpt2, [""]), "layers=[''] names the model itself"),
    "path a ModuleList": (attach(gpt2, ["transformer.h"]), "e.g. layers=['transformer.h.0']"),
    "path a ModuleDict": (
        lambda: attach_memory(nn.ModuleDict({"d": nn.ModuleDict({"a": nn.Linear(32, 32)})}), memory(0.0), ["d"]),
        "'d' is a ModuleDict (its layers are called, never it): name one of its layers, e.g. layers=['d.a']",
    ),
    "path too wide a Linear": (attach(gpt2, ["transformer.h.0.mlp.c_proj", "lm_head"]), "width 61"),
    "path inside an encoder layer": (
        attach(encoder, ["layers.0.linear2"]),
        "lies inside 'layers.0', a TransformerEncoderLayer, where a memory would be skipped",
    ),
    "path inside attention": (attach(encoder, ["layers.1.self_attn.out_proj"]), "name it whole, layers=['layers.1']"),
    "path inside a Block": (attach(tensor_backbone, ["blocks.1.mlp"]), "a Block, where a memory"),
    "path inside a memory": (attach(tensor_backbone, ["blocks.0.memory.summary"]), "lies inside 'blocks.0'"),
    "path to a built-in memory's block": (attach(tensor_backbone, ["blocks.0"]), "already has a memory layer"),
    "path to an attached layer": (
        lambda: attach_memory(attach_memory(gpt2(), memory(0.0), [0]), memory(0.0), ["transformer.h.0"]),
        "already has a memory layer",
    ),
    "path to an attached memory's inside": (
        lambda: attach_memory(attach_memory(gpt2(), memory(0.0), [0]), memory(0.0), ["transformer.h.0.memory.summary"]),
        "part of the memory layer 'transformer.h.0.memory'",
    ),
    # detach_memory and streaming
    "detach a string": (lambda: detach_memory("gpt2"), "detach_memory: model must be a torch.nn.Module (the model"),
    "streaming None": (lambda: streaming(None).__enter__(), "streaming: model must be a torch.nn.Module"),
    "streaming without a memory": (lambda: streaming(gpt2()).__enter__(), "no TensorMemory layer in this model"),
    # from_public_code
    "state dict a list": (imported(sd=list(SD.items())), "expects a state dict (a mapping of names to tensors)"),
    "state dict of arrays": (
        imported(sd={key: value.numpy() for key, value in SD.items()}),
        "must be a floating-point torch tensor (the interface's state_dict()), got ndarray",
    ),
    "state dict of ints": (imported(sd={**SD, "out_proj.bias": torch.zeros(D_MODEL, dtype=torch.long)}), "torch.int64"),
    "prefix None": (imported(prefix=None), "from_public_code.prefix must be a string"),
    "sigma_scale zero": (imported(sigma_scale=0), "from_public_code.sigma_scale must be a finite number in (0.0"),
    "chunk_size disagrees": (imported(chunk_size=4), "pass chunk_size=3 or leave it out"),
    "grid an int": (imported(grid=4), "from_public_code.grid must be three integers (D, H, W)"),
    "grid of two": (imported(sd=NO_GRID, grid=(4, 5)), "got (4, 5)"),
    "grid of floats": (imported(sd=NO_GRID, grid=(4.0, 5, 6)), "each >= 2"),
    "grid disagrees": (imported(grid=(4, 5, 5)), "pass grid=(4, 5, 6) or leave it out"),
    "grid unknown": (imported(sd=NO_GRID), "pass grid=(D, H, W), the interface's memory_shape"),
    "grid_cache of one cell": (imported(sd={**SD, "grid_cache": torch.zeros(1, 3, 1, 5, 6)}), "at least 2 cells"),
    "grid_cache halved": (imported(sd={**SD, "grid_cache": SD["grid_cache"] / 2}), "cell coordinates"),
    # the imported interface's call
    "x of another dtype": (called(X.double()), "x must be a torch.float32 tensor (B, N, d) like the weights"),
    "x a list": (called(X.tolist()), "got list; pass a tensor"),
    "x of another width": (called(X[..., :5]), "got (2, 7, 5)"),
    "prev_state a triple": (called(X, (*STATE, STATE[0])), "prev_state must be None or the pair (h, c)"),
    "prev_state one tensor": (called(X, STATE[0]), "prev_state must be None or the pair (h, c)"),
    "prev_state a MemoryState": (called(X, TensorMemory.from_public_code(SD).memory.init_state(2)), "MemoryState"),
    "prev_state float64": (called(X, tuple(v.double() for v in STATE)), "of torch.float32 tensors"),
    "prev_state another batch": (called(X[:1], STATE), "MemoryState h and c must be (1, 3, 4, 5, 6)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_wrong_argument_is_refused_in_one_line_naming_it(case):
    call, words = CASES[case]
    with pytest.raises(ValueError) as refused:
        call()
    message = str(refused.value)
    assert words in message, message
    assert len(message.splitlines()) == 1, message


def test_numpy_and_tensor_integers_index_blocks_as_ints_do():
    picked = [
        list(memory_layers(attach_memory(gpt2(), memory(0.0), layers=layers)))
        for layers in ([0, 2], [np.int64(0), np.int64(2)], torch.tensor([2, 0]), (i for i in (2, 0)))
    ]
    assert all(names == ["transformer.h.0.memory", "transformer.h.2.memory"] for names in picked)


# -- the public code's float16 and bfloat16 weights ------------------------------------------------


@pytest.mark.parametrize("dtype, tolerance", [(torch.float16, 3e-3), (torch.bfloat16, 3e-2)])
def test_half_precision_public_weights_import_and_reproduce_the_interface(dtype, tolerance):
    """Saved from a half-precision interface (model.half() rounds grid_cache too), the weights import as that
    dtype and give the float32 interface's out, h and c to the dtype's precision; a wrong grid is still refused."""
    sd32 = public_state(3, seed=2)
    half = {key: value.to(dtype) for key, value in sd32.items()}
    assert not torch.equal(half["grid_cache"].double(), public_grid_cache(GRID, torch.float64))  # really rounded
    m = TensorMemory.from_public_code(half)
    assert all(p.dtype == dtype for p in m.parameters())
    x = torch.randn(2, 10, D_MODEL, generator=torch.Generator().manual_seed(4))
    h0, c0 = (0.5 * torch.randn(2, 3, *GRID, generator=torch.Generator().manual_seed(s)) for s in (5, 6))
    out, (h, c) = m(x.to(dtype), (h0.to(dtype), c0.to(dtype)))
    # The reference: the public interface in float32 with the rounded weights (what the half interface holds).
    out_ref, (h_ref, c_ref), _ = literal_public({k: v.float() for k, v in half.items()}, x, h0, c0, 3)
    for got, want in ((out, out_ref), (h, h_ref), (c, c_ref)):
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), want, atol=tolerance, rtol=tolerance)
    # … and the float32 import of the unrounded weights, to the rounding of the weights as well.
    torch.testing.assert_close(
        out.float(), TensorMemory.from_public_code(sd32)(x, (h0, c0))[0], atol=2 * tolerance, rtol=0
    )
    ulp = torch.finfo(dtype).eps
    for wrong in (half["grid_cache"] * (1 - 4 * ulp), half["grid_cache"].flip(2), half["grid_cache"] + 2 * ulp):
        with pytest.raises(ValueError, match="does not hold the public code's cell coordinates"):
            TensorMemory.from_public_code({**half, "grid_cache": wrong.to(dtype)})
