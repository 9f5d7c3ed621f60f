"""Attach a Tensor Memory to the layers of an existing Transformer, and take it off again.

``attach_memory(model, config, layers)`` replaces each chosen layer by a wrapper that holds the
layer itself, untouched, and a fresh :class:`TensorMemory`, so ``detach_memory(model)`` puts the
very same objects back and the model computes bit for bit what it computed before. Two places:

- *Between the halves* of this project's :class:`~tensor_memory.backbone.Block` and of
  ``torch.nn.TransformerEncoderLayer`` (any ``norm_first``, any ``batch_first``, with masks): the
  block's attention, then the memory (``x = mem(x)``, LN_m inside), then its MLP.
- *After* any other layer whose forward returns the hidden states (alone or first in a tuple):
  ``h ← h + σ(γ)·mem(LN(h))`` on its output. Hugging Face ``transformers`` decoder and encoder
  layers (GPT-2, BERT, Llama, Mistral, Qwen2, … — every layer class built on its
  ``GradientCheckpointingLayer``, stacked in an ``nn.ModuleList``) are found by themselves; any
  other layer is named by its module path, ``layers=["encoder.2"]``: one layer, not a ModuleList of them, and never
  a part of a layer torch may run fused (``TransformerEncoderLayer``, ``MultiheadAttention``: it would skip the
  memory) or of a :class:`~tensor_memory.backbone.Block` (its state would not carry the memory's): those whole.

Blocks are numbered in ``model.modules()`` order; ``layers`` picks among them by index (None = all)
or names modules by path. Attached with a strongly negative ``gate_init`` (e.g.
``MemoryConfig(gate_init=-9.0)``, σ(γ) ≈ 1e-4), a pretrained model's outputs barely move and
training can open the gate.

Memory state: in a :class:`~tensor_memory.backbone.Backbone` the attached memory's state travels
in the :class:`~tensor_memory.backbone.BackboneState` like a built-in memory layer's, so streaming
still reproduces one pass. Elsewhere each forward call starts the memory from zero, unless the
calls run inside ``with streaming(model):`` (:mod:`tensor_memory.memory.streaming`), which carries
every memory's state from one call to the next. The memory reads and writes every position it is
given (padding masks do not reach it); it is causal, so right padding never affects real tokens.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from ..memory import MemoryConfig, TensorMemory
from .blocks import Block, apply_memory
from .config import LayerState

__all__ = ["attach_memory", "detach_memory", "AttachedBlock", "AttachedEncoderLayer", "AttachedAfter"]

_SAVED_NESTED = "_tensor_memory_saved_use_nested_tensor"  # on an nn.TransformerEncoder while attached


class _Attached(nn.Module):
    """A block with a memory between its halves; ``self.block`` is the original, unchanged block."""

    def __init__(self, block: nn.Module, memory: TensorMemory) -> None:
        super().__init__()
        self.block = block
        self.memory = memory

    def __getattr__(self, name: str):
        # Code that inspects the block (nn.TransformerEncoder reads layers[0].self_attn.batch_first)
        # sees the wrapped block's attributes.
        try:
            return super().__getattr__(name)
        except AttributeError:
            modules = self.__dict__.get("_modules", {})
            if "block" not in modules:
                raise
            return getattr(modules["block"], name)


class AttachedBlock(_Attached):
    """A :class:`Block` with a Tensor Memory after its attention: same call signature as Block."""

    def init_layer_state(self, batch_size: int, device=None, dtype=None) -> LayerState:
        state = self.block.init_layer_state(batch_size, device, dtype)
        return LayerState(state.attn, self.memory.init_state(batch_size, device=device, dtype=dtype))

    def forward(self, x, state: LayerState | None, pos0: int, prefix: int = 0):
        x, cache = self.block.attend(x, None if state is None else state.attn, pos0, prefix)
        # A state made before attaching has no memory entry: the memory starts from zero then.
        x, memory_state = apply_memory(self.memory, x, None if state is None else state.memory, prefix)
        x = self.block.feed_forward(x)
        return x, (None if state is None else LayerState(cache, memory_state))


class AttachedEncoderLayer(_Attached):
    """An ``nn.TransformerEncoderLayer`` with a Tensor Memory after its self-attention.

    Same call signature as the layer. It always runs the layer's documented "slow path"
    (``_sa_block``/``_ff_block`` and the norms, honouring ``norm_first``, ``batch_first`` and
    the masks): the fused eval-mode fast path has no place to insert the memory.
    """

    def forward(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        src_key_padding_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        layer = self.block
        if src.is_nested:
            raise ValueError("attached memory layers take padded tensors, not nested tensors")
        # The same mask canonicalisation as TransformerEncoderLayer.forward.
        src_key_padding_mask = F._canonical_mask(
            mask=src_key_padding_mask,
            mask_name="src_key_padding_mask",
            other_type=F._none_or_dtype(src_mask),
            other_name="src_mask",
            target_type=src.dtype,
        )
        src_mask = F._canonical_mask(
            mask=src_mask,
            mask_name="src_mask",
            other_type=None,
            other_name="",
            target_type=src.dtype,
            check_other=False,
        )
        x = src
        if layer.norm_first:
            x = x + layer._sa_block(layer.norm1(x), src_mask, src_key_padding_mask, is_causal=is_causal)
            x = self._remember(x)
            x = x + layer._ff_block(layer.norm2(x))
        else:
            x = layer.norm1(x + layer._sa_block(x, src_mask, src_key_padding_mask, is_causal=is_causal))
            x = self._remember(x)
            x = layer.norm2(x + layer._ff_block(x))
        return x

    def _remember(self, x: torch.Tensor) -> torch.Tensor:
        """x = mem(x) on (B, N, d), from a zero state; x is (N, B, d) unless batch_first."""
        batch_first = self.block.self_attn.batch_first
        if x.dim() == 2:  # an unbatched sequence (N, d)
            return self.memory(x[None])[0][0]
        y, _ = self.memory(x if batch_first else x.transpose(0, 1))
        return y if batch_first else y.transpose(0, 1)


class AttachedAfter(_Attached):
    """Any layer followed by a Tensor Memory on its output: same call signature and outputs as the layer,
    with the hidden states (the output, or its first element) replaced by ``h + σ(γ)·mem(LN_m(h))``."""

    def forward(self, *args, **kwargs):
        out = self.block(*args, **kwargs)
        hidden = out[0] if isinstance(out, tuple) else out  # (B, N, d)
        if not isinstance(hidden, torch.Tensor):
            raise ValueError(
                f"attach_memory: {type(self.block).__name__} returned {type(hidden).__name__}; "
                f"a memory goes after a layer that returns its hidden states (B, N, d)"
            )
        y, _ = self.memory(hidden)  # fresh, or carried inside `with streaming(model)`
        return (y, *out[1:]) if isinstance(out, tuple) else y


Found = tuple[nn.Module | None, str, nn.Module]  # (parent, attribute name, block); parent None: the model


def _is_hf_layer(parent: nn.Module, child: nn.Module) -> bool:
    """A Hugging Face Transformer layer: one of a ModuleList of layers of one class built on
    ``transformers``' GradientCheckpointingLayer (checked by name: attaching never imports transformers)."""

    def kind(module: nn.Module) -> type:
        return type(module.block if isinstance(module, _Attached) else module)

    if not isinstance(parent, nn.ModuleList) or any(kind(m) is not kind(child) for m in parent):
        return False
    return any(base.__name__ == "GradientCheckpointingLayer" for base in kind(child).__mro__)


def _blocks(model: nn.Module) -> list[Found]:
    """Every block ``attach_memory`` finds by itself, in ``model.modules()`` order.

    Attached wrappers count as the block they wrap (and are not searched inside).
    """
    kinds = (Block, nn.TransformerEncoderLayer, _Attached)
    if isinstance(model, kinds):
        return [(None, "", model)]
    found: list[Found] = []

    def walk(parent: nn.Module) -> None:
        for name, child in parent.named_children():
            if isinstance(child, kinds) or _is_hf_layer(parent, child):
                found.append((parent, name, child))
            else:
                walk(child)

    walk(model)
    return found


# Modules that may use a child's weights without calling it (torch's fused fast paths, MultiheadAttention's
# out_proj), or whose own state would not carry a memory inside them (this project's Block): a memory goes around
# them, never inside.
_WHOLE = (Block, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.MultiheadAttention)


def _named(model: nn.Module, paths: list[str]) -> list[Found]:
    """The modules at ``paths`` (as ``model.named_modules()`` names them), each with its parent."""
    modules = dict(model.named_modules())
    found = []
    for path in paths:
        if not path:
            raise ValueError("attach_memory: layers=[''] names the model itself; name a layer inside it by its path")
        if path not in modules:
            raise ValueError(f"attach_memory: the model has no module {path!r}; name one of model.named_modules()")
        module = modules[path]
        if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
            first = next(iter(module.named_children()), ("0", None))[0]
            raise ValueError(
                f"attach_memory: {path!r} is a {type(module).__name__} (its layers are called, never it): "
                f"name one of its layers, e.g. layers=[{path + '.' + first!r}]"
            )
        parts = path.split(".")
        for end in range(1, len(parts)):
            outer = ".".join(parts[:end])
            if isinstance(modules[outer], TensorMemory):
                raise ValueError(f"attach_memory: {path!r} is part of the memory layer {outer!r}; name another layer")
            if isinstance(modules[outer], _WHOLE):
                raise ValueError(
                    f"attach_memory: {path!r} lies inside {outer!r}, a {type(modules[outer]).__name__}, where a "
                    f"memory would be skipped or not carried: name it whole, layers=[{outer!r}]"
                )
        parent_path, _, name = path.rpartition(".")
        found.append((modules[parent_path], name, module))
    return found


def _listed(layers: object) -> list:
    """``layers`` as a non-empty list of distinct ints or distinct strings, or a ValueError saying what to pass."""
    if isinstance(layers, (str, int)) and not isinstance(layers, bool):
        raise ValueError(
            f"attach_memory: layers={layers!r} must be a list: pass layers=[{layers!r}], or None for every block"
        )
    if not isinstance(layers, Iterable):
        raise ValueError(
            "attach_memory: layers must be None (every block), a list of block indices or a list of module "
            f"paths, got {type(layers).__name__}"
        )
    chosen = list(layers)
    if not chosen:
        raise ValueError("attach_memory: layers=[] picks no layer; pass None for every block, or indices or paths")
    if not all(isinstance(i, str) for i in chosen):
        chosen = [_index(i) for i in chosen]
        if None in chosen:
            raise ValueError(
                f"attach_memory: layers must be all block indices (ints) or all module paths (strings), got {layers!r}"
            )
    twice = sorted({i for i in chosen if chosen.count(i) > 1}, key=str)
    if twice:
        raise ValueError(f"attach_memory: layers names {twice[0]!r} twice; name each layer once")
    return chosen


def _index(value: object) -> int | None:
    """A block index from a Python, NumPy or 0-d tensor integer (not a bool); None for anything else."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _choose(model: nn.Module, layers: None | Iterable[int] | Iterable[str]) -> list[Found]:
    """The blocks ``layers`` picks: indices among the blocks found (None = all) or module paths."""
    chosen = None if layers is None else _listed(layers)
    if chosen and isinstance(chosen[0], str):
        return _named(model, chosen)
    blocks = _blocks(model)
    if not blocks:
        raise ValueError(
            "attach_memory: the model has no layers it knows (tensor_memory Block, "
            "torch.nn.TransformerEncoderLayer, Hugging Face Transformer layers); "
            "name the layers to follow by module path, layers=['encoder.2', …]"
        )
    if chosen is None:
        return blocks
    count = len(blocks)
    wrong = [i for i in chosen if not 0 <= i < count]
    if wrong:
        raise ValueError(
            f"attach_memory: layers names block {wrong[0]}, but the model has {count} blocks it knows: "
            f"pass indices in [0, {count - 1}], None for all, or module paths"
        )
    return [blocks[i] for i in sorted(chosen)]


def _width(parent: nn.Module | None, block: nn.Module) -> int | None:
    """The block's token width, where it can be known before a call (else the memory checks it then): a
    Hugging Face layer's is the width of its first norm (LayerNorm, RMSNorm: every such layer has one), which
    keeps a vision tower's layers apart from a language model's in a model that has both."""
    if isinstance(block, Block):
        return block.attn_norm.normalized_shape[0]
    if isinstance(block, nn.TransformerEncoderLayer):
        return block.self_attn.embed_dim
    if isinstance(block, nn.Linear):
        return block.out_features
    if isinstance(block, nn.Embedding):
        return block.embedding_dim
    if isinstance(block, nn.LayerNorm):
        return block.normalized_shape[-1]
    if parent is not None and _is_hf_layer(parent, block):
        norms = [
            m
            for m in block.modules()
            if type(m).__name__.endswith("Norm") and getattr(m, "weight", None) is not None and m.weight.dim() == 1
        ]
        return int(norms[0].weight.shape[0]) if norms else None
    return None


def _wrapper(block: nn.Module) -> type:
    if isinstance(block, Block):
        return AttachedBlock
    return AttachedEncoderLayer if isinstance(block, nn.TransformerEncoderLayer) else AttachedAfter


def attach_memory(
    model: nn.Module, config: MemoryConfig, layers: None | Iterable[int] | Iterable[str] = None
) -> nn.Module:
    """Insert a fresh :class:`TensorMemory` into (or after) the chosen layers of ``model``.

    ``layers`` indexes the blocks found in ``model.modules()`` order (None = all), or names
    modules by path (any layer that returns its hidden states). Each chosen block gets its own
    memory (its own parameters and state), on the block's device and dtype and in its train/eval
    mode. Returns ``model`` (or the wrapper, when ``model`` is itself a block). Raises ValueError
    when there is no block, when ``config.token_dim`` differs from a block's width, or when a
    chosen block already has a memory.
    """
    _require_module("attach_memory", model)
    if not isinstance(config, MemoryConfig):
        raise ValueError(
            "attach_memory: config must be a MemoryConfig (MemoryConfig(token_dim=<the layers' width>, …)), "
            f"got {type(config).__name__}"
        )
    if config.public_code.output != "residual":
        raise ValueError(
            "attach_memory adds the memory's read to a layer's hidden states: it needs "
            f"MemoryConfig(public_code={{'output': 'residual'}}), got output={config.public_code.output!r}"
        )
    chosen = _choose(model, layers)
    for parent, name, block in chosen:  # check everything before changing anything
        where = f"block {name!r}" if parent is not None else "the model"
        if (
            isinstance(block, _Attached)
            or isinstance(parent, _Attached)
            or (isinstance(block, Block) and block.memory is not None)
        ):
            raise ValueError(f"attach_memory: {where} already has a memory layer")
        width = _width(parent, block)
        if width is not None and width != config.token_dim:
            raise ValueError(
                f"attach_memory: MemoryConfig.token_dim={config.token_dim} does not match {where}'s width {width}"
            )
    for parent, name, block in chosen:
        ref = next(block.parameters(), None)
        memory = TensorMemory(config).train(block.training)
        if ref is not None:
            memory = memory.to(device=ref.device, dtype=ref.dtype)
        wrapper = _wrapper(block)(block, memory)
        if parent is None:
            return wrapper
        setattr(parent, name, wrapper)  # works for ModuleList / Sequential children too
        if isinstance(parent, nn.ModuleList):
            _disable_nested(model, parent)
    return model


def detach_memory(model: nn.Module) -> nn.Module:
    """Remove every attached memory, by index or by path, wherever it sits, putting the original module objects
    back. Returns the model (or the original block, when ``model`` is itself an attached wrapper)."""
    _require_module("detach_memory", model)
    model = _unwrapped(model)
    for module in model.modules():
        if isinstance(module, nn.TransformerEncoder) and hasattr(module, _SAVED_NESTED):
            module.use_nested_tensor = getattr(module, _SAVED_NESTED)
            delattr(module, _SAVED_NESTED)
    return model


def _unwrapped(module: nn.Module) -> nn.Module:
    """``module`` with every attached wrapper in it (and it) replaced by the module it wraps, innermost first."""
    if isinstance(module, _Attached):
        return _unwrapped(module.block)
    for name, child in list(module.named_children()):
        inner = _unwrapped(child)
        if inner is not child:
            setattr(module, name, inner)
    return module


def _require_module(owner: str, model: object) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"{owner}: model must be a torch.nn.Module (the model itself), got {type(model).__name__}")


def _disable_nested(model: nn.Module, layers: nn.ModuleList) -> None:
    """Stop an ``nn.TransformerEncoder`` around ``layers`` from turning padded input into nested tensors.

    In eval mode with a padding mask it would otherwise hand its layers nested tensors,
    which the memory (a chunked recurrence over positions) cannot take. The setting is
    restored by :func:`detach_memory`.
    """
    for module in model.modules():
        if isinstance(module, nn.TransformerEncoder) and module.layers is layers and not hasattr(module, _SAVED_NESTED):
            setattr(module, _SAVED_NESTED, getattr(module, "use_nested_tensor", False))
            module.use_nested_tensor = False
