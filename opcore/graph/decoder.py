"""What ``capture_lm`` exports: a decoder with its KV cache as buffers written in place.

The protocol a model follows to be captured by ``opcore.graph.capture_lm``::

    forward(input_ids, position_ids, cache_position, attention_mask) -> logits

* ``input_ids``: int64 (batch, seq) — the tokens of this step (a prompt, or one token);
* ``position_ids``: int64 (batch, seq) — each token's position in its own row (left padding
  makes them differ between rows);
* ``cache_position``: int64 (seq,) — the cache slots this step writes (the same for every row);
* ``attention_mask``: int64 (batch, max_length) — 1 where a cache slot holds a token of the row,
  0 for padding (slots after the step are masked by causality);
* ``logits``: (batch, seq, vocab), or (batch, 1, vocab): the last position's (what generation reads).

The cache is the module's buffers, allocated once for (batch, max_length), which ``forward``
updates in place (``buffer.index_copy_(dim, cache_position, new)``): torch.export lists them as
mutated buffers, and the plan takes them as its state (opcore.graph.state). A plain module that
follows this protocol (and has ``max_length`` and ``batch_size`` attributes) is captured as is;
a transformers ``*ForCausalLM`` is wrapped in ``CachedDecoder``, a static cache of transformers'
own layers whose update writes at ``cache_position``.

>>> wrapped = CachedDecoder(model, batch_size=1, max_length=256)     # doctest: +SKIP
>>> logits = wrapped(ids, positions, cache_position, mask)           # doctest: +SKIP
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, cast

import torch

from opcore.errors import ArgumentError
from opcore.graph.dynamic_rope import traceable_dynamic_rope
from opcore.graph.static_cache_fixes import static_cache_attention

__all__ = ["CachedDecoder", "is_transformers_lm", "protocol_sizes"]

_CAPTURE_LM = "opcore.graph.capture_lm"


def is_transformers_lm(model: Any) -> bool:
    """Whether ``model`` is a transformers model with a language-modelling head (generate-able)."""
    config = getattr(model, "config", None)
    return config is not None and hasattr(model, "generation_config") and hasattr(config, "get_text_config")


def protocol_sizes(model: Any) -> tuple[int, int]:
    """(batch_size, max_length) of a plain module following the protocol; an ArgumentError naming
    what is missing otherwise."""
    batch, length = getattr(model, "batch_size", None), getattr(model, "max_length", None)
    if not isinstance(batch, int) or not isinstance(length, int):
        raise ArgumentError(
            op=_CAPTURE_LM,
            arg="model",
            expected="a transformers *ForCausalLM, or a module following opcore.graph.decoder's protocol "
            "(forward(input_ids, position_ids, cache_position, attention_mask) -> logits, with int "
            "attributes batch_size and max_length and its cache as buffers)",
            found=f"{type(model).__name__} (batch_size={batch!r}, max_length={length!r})",
            fix="pass a transformers causal LM, or give the module batch_size and max_length (docs/generate.md)",
        )
    return batch, length


def _cache_layer_class() -> Any:
    """A transformers StaticLayer whose update writes at the cache positions of the step (given by the
    wrapper before each forward), not at a counter it keeps: nothing but the cache is mutated."""
    from transformers.cache_utils import StaticLayer

    class PositionedLayer(StaticLayer):  # type: ignore[misc]
        at: Any = None

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            keys, values = cast(Any, self.keys), cast(Any, self.values)  # allocated by early_initialization
            keys.index_copy_(2, self.at, key_states)
            values.index_copy_(2, self.at, value_states)
            return keys, values

    return PositionedLayer


def _indexed_layer_classes() -> tuple[type, type] | None:
    """transformers' StaticIndexedLayer (keys and values, and the keys of a DeepSeek Sparse Attention
    indexer: DeepSeek-V3.2, GLM-MoE-DSA), and one whose keys, values and indexer keys are all written
    at the cache positions of the step; None where this transformers has no such layer."""
    from transformers import cache_utils

    static = getattr(cache_utils, "StaticIndexedLayer", None)
    if not isinstance(static, type):
        return None

    class PositionedIndexedLayer(_cache_layer_class(), static):  # type: ignore[misc,valid-type]
        def update_indexer(self, indexer_key_states: Any) -> Any:
            keys = cast(Any, self.indexer_keys)  # allocated by lazy_initialization_indexer
            keys.index_copy_(1, self.at, indexer_key_states)
            return keys

    return static, PositionedIndexedLayer


def _cache_shapes(model: Any, config: Any, layers: int) -> list[tuple[int, int, int]]:
    """(kv heads, key dim, value dim) per cache layer, as the model's own attention writes them: read
    off the cache of a one-token forward (Falcon's multi-query attention keeps 1 head whatever its
    config's ``num_kv_heads`` says; DeepSeek's multi-head latent attention caches a latent and a
    rotary key of different widths); the config's rule (``_head_shapes``) where that cache has no
    layers of this count."""
    try:
        with torch.no_grad():
            ids = torch.zeros((1, 1), dtype=torch.long, device=next(model.parameters()).device)
            cache = model(input_ids=ids, use_cache=True).past_key_values
        # a layer storing nothing (keys None) takes the config's shape, which nothing allocates
        shapes = [
            None if layer.keys is None else (tuple(layer.keys.shape), tuple(layer.values.shape))
            for layer in cache.layers
        ]
    except Exception:  # an older cache API, or a model that needs more than ids: the config's rule
        shapes = []
    try:
        heads, head_dim = _head_shapes(config)
    except (AttributeError, TypeError, ZeroDivisionError) as error:  # no attention heads (RWKV's state)
        raise _not_attention(model, f"its config has no attention heads to cache ({error})") from error
    heads = heads if isinstance(heads, list) else [heads] * layers
    head_dim = head_dim if isinstance(head_dim, list) else [head_dim] * layers
    ruled = [(int(h), int(d), int(d)) for h, d in zip(heads, head_dim, strict=True)]
    read = [s for s in shapes if s is not None]
    if len(shapes) != layers or any(len(k) != 4 or len(v) != 4 or k[1] != v[1] for k, v in read):
        return ruled
    return [ruled[i] if s is None else (int(s[0][1]), int(s[0][3]), int(s[1][3])) for i, s in enumerate(shapes)]


def _windows(layers: Sequence[Any], max_length: int) -> dict[int, int]:
    """Cache layer -> its window, for transformers' sliding-window (and chunked) static layers whose
    window is shorter than ``max_length``."""
    from transformers.cache_utils import StaticSlidingWindowLayer

    return {
        i: int(layer.max_cache_len)
        for i, layer in enumerate(layers)
        if isinstance(layer, StaticSlidingWindowLayer) and layer.max_cache_len < max_length
    }


def _mask_recorder(module: Any, seen: dict[int, list[Any]]) -> Any:
    """A forward pre-hook keeping the attention mask ``module`` is called with, under its layer; None
    for a module whose forward takes no ``attention_mask``."""
    try:
        signature = inspect.signature(module.forward)
    except (TypeError, ValueError):
        return None
    if "attention_mask" not in signature.parameters:
        return None

    def record(_: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            mask = signature.bind_partial(*args, **kwargs).arguments.get("attention_mask")
        except TypeError:
            return
        seen.setdefault(module.layer_idx, []).append(mask)

    return record


def _sees_slot_0(mask: Any, implementation: Any) -> bool:
    """Whether the last query's mask lets it see slot 0: a bool mask True there, an additive one 0
    there; no mask under SDPA or eager attention sees every key (flash and flex attention may take the
    window otherwise: not judged)."""
    if mask is None:
        return implementation in ("sdpa", "eager")
    if not isinstance(mask, torch.Tensor) or mask.dim() < 2:
        return False
    first = mask[..., -1, 0]
    return bool(first.all()) if first.dtype == torch.bool else bool((first == 0).all())


def _dummy_layer_classes() -> list[type]:
    """transformers' cache layer that stores nothing, where this version has one."""
    from transformers import cache_utils

    found = getattr(cache_utils, "DummyLayer", None)
    return [found] if isinstance(found, type) else []


def _recurrent_layer_classes() -> list[type]:
    """transformers' cache layers holding a recurrent or convolution state (linear attention, alone or
    beside attention: Qwen3-Next, Inkling, Zaya), where this version has them."""
    from transformers import cache_utils

    found = getattr(cache_utils, "LinearAttentionCacheLayerMixin", None)
    return [found] if isinstance(found, type) else []


def _head_shapes(config: Any) -> tuple[Any, Any]:
    """(kv heads, head dim) of the text config: transformers' get_head_shapes (per layer where the
    layers differ), or one shape for every layer where transformers has none (5.17 has not)."""
    try:
        from transformers.configuration_utils import get_head_shapes
    except ImportError:
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return heads, head_dim
    return get_head_shapes(config)


def _not_attention(model: Any, why: str) -> ArgumentError:
    return ArgumentError(
        op=_CAPTURE_LM,
        arg="model",
        expected="a decoder whose every layer caches attention keys and values (transformers' StaticCache)",
        found=f"{type(model).__name__}: {why}",
        fix="recurrent and hybrid models (Mamba, Jamba, RecurrentGemma, linear attention) and caches that "
        "transformers keeps no static form of (DeepSeek-V4's compressed attention) are not supported by "
        "capture_lm; opcore.graph.capture(model, (ids,)) runs their forward without a cache",
    )


def position_table(model: Any, config: Any) -> tuple[str, int] | None:
    """(name, positions it covers) of the model's table of learned (or precomputed sinusoidal)
    positions, where it has one: an ``nn.Embedding`` other than the token embeddings whose rows, less
    its offset (OPT, BART, BioGPT and TrOCR keep 2 rows ahead), are the config's
    ``max_position_embeddings`` (GPT-2's ``n_positions``, Whisper's decoder's ``max_target_positions``).
    None for rotary, ALiBi and positions computed on demand (XGLM), which extend to any length, as in
    transformers."""
    names = ("max_position_embeddings", "n_positions", "max_target_positions")
    limits = {v for v in (getattr(config, n, None) for n in names) if isinstance(v, int) and not isinstance(v, bool)}
    tokens = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding) and module is not tokens:
            offset = getattr(module, "offset", 0)
            covered = module.num_embeddings - (offset if isinstance(offset, int) else 0)
            if covered in limits and covered >= 1:
                return name, covered
    return None


def _check_positions(model: Any, config: Any, max_length: int) -> None:
    """A cache longer than the positions a table holds would read rows past its end: transformers'
    generate raises IndexError there, and a graph runtime's gather gives zeros without a word."""
    table = position_table(model, config)
    if table is not None and max_length > table[1]:
        name, covered = table
        raise ArgumentError(
            op=_CAPTURE_LM,
            arg="max_length",
            expected=f"at most {covered}: {type(model).__name__}'s learned positions ({name}) cover {covered} tokens",
            found=str(max_length),
            fix=f"capture_lm(..., max_length={covered}); a longer context needs a model whose positions extend "
            "(rotary, ALiBi)",
        )


class CachedDecoder(torch.nn.Module):
    """A transformers causal LM with a static KV cache of ``batch_size`` x ``max_length`` as buffers,
    called by the protocol above."""

    def __init__(self, model: Any, batch_size: int, max_length: int) -> None:
        super().__init__()
        from transformers import StaticCache
        from transformers.cache_utils import CacheLayerMixin

        self.model = model
        self.batch_size, self.max_length = batch_size, max_length
        self.keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        # the positions whose logits a step returns (transformers' logits_to_keep): the last one for the
        # prompt and the decode step; 0, every position, for the verify step of drafted tokens
        # (opcore.graph.prompt_lookup)
        self.keep = 1
        # transformers' generate passes position_ids (each row's own count, left padding skipped) only
        # to a forward that names them; one that does not (Whisper's decoder) counts positions from the
        # cache's length, padding included: the cache slots, which is what it is given here
        self.counts_rows = "position_ids" in inspect.signature(model.forward).parameters
        config = model.config.get_text_config()
        _check_positions(model, config, max_length)
        layer = _cache_layer_class()
        try:
            self.cache = StaticCache(max_cache_len=max_length, config=config)
        except KeyError as error:  # a layer type transformers keeps no static cache of
            kinds = sorted({str(kind) for kind in getattr(config, "layer_types", None) or ()})
            said = f"layer types {', '.join(kinds)}: " if kinds else ""
            raise _not_attention(model, f"{said}transformers' StaticCache has no layer for {error}") from error
        except (AttributeError, ValueError, TypeError) as error:  # no attention heads to cache
            raise _not_attention(model, f"{type(error).__name__}: {error}") from error
        # a recurrent layer's state (Mamba, linear attention: Jamba, RecurrentGemma) is not keys and values:
        # transformers' own test for an attention layer is CacheLayerMixin
        # a layer that stores nothing (transformers' DummyLayer: Gemma 3n's layers reading keys and
        # values an earlier layer computed in the same step) stays as it is: no state to hold
        stateless = tuple(_dummy_layer_classes())
        # a layer with a recurrent or convolution state beside its keys and values is a hybrid's too
        states = tuple(_recurrent_layer_classes())
        recurrent = sorted(
            {
                type(c).__name__
                for c in self.cache.layers
                if not isinstance(c, (CacheLayerMixin, *stateless)) or isinstance(c, states)
            }
        )
        if recurrent:
            raise _not_attention(model, f"its cache has {', '.join(recurrent)} layers")
        # sliding-window layers keep a rolling window whose update has control flow export cannot
        # take; a full-length layer with the model's own sliding mask computes the same attention
        # (checked below: a model may window in its dynamic cache alone); a sparse attention's
        # indexer keys (DeepSeek-V3.2) are a third buffer, written as the others
        windows = _windows(self.cache.layers, max_length)
        static_indexed, indexed = _indexed_layer_classes() or (type(None), None)
        self.layers: list[Any] = [
            c if isinstance(c, stateless)
            else indexed(max_length) if indexed is not None and isinstance(c, static_indexed)
            else layer(max_length)
            for c in self.cache.layers
        ]  # fmt: skip
        self.cache.layers = self.layers
        self.stored = [i for i, c in enumerate(self.layers) if not isinstance(c, stateless)]
        device = torch.device(next(model.parameters()).device)
        shapes = _cache_shapes(model, config, len(self.layers))
        for i in self.stored:
            heads, key_dim, value_dim = shapes[i]
            # as StaticCache.early_initialization, with the keys' and values' widths each their own
            empty = {"dtype": model.dtype, "device": device}
            self.layers[i].lazy_initialization(
                torch.zeros((batch_size, heads, 0, key_dim), **empty),
                torch.zeros((batch_size, heads, 0, value_dim), **empty),
            )
            self.register_buffer(f"key_cache_{i}", self.layers[i].keys, persistent=False)
            self.register_buffer(f"value_cache_{i}", self.layers[i].values, persistent=False)
            if indexed is not None and isinstance(self.layers[i], indexed):
                width = getattr(config, "index_head_dim", None)
                if not isinstance(width, int):
                    raise _not_attention(model, "its sparse attention's indexer has no index_head_dim in its config")
                self.layers[i].lazy_initialization_indexer(torch.zeros((batch_size, 0, width), **empty))
                self.register_buffer(f"indexer_cache_{i}", self.layers[i].indexer_keys, persistent=False)
        if windows:
            self._check_windows(windows)

    def _check_windows(self, windows: dict[int, int]) -> None:
        """Refuse a model whose window the mask does not keep: the attention mask of one token at the
        last slot, read where each windowed layer's attention receives it, must hide slot 0 (farther
        back than its window). Moshi keeps its window in transformers' dynamic cache alone (its mask is
        causal over every key): over a full-length cache its tokens would part from ``model.generate``
        without a word. One token through the model; the cache zeroed after."""
        seen: dict[int, list[Any]] = {}
        handles = [
            module.register_forward_pre_hook(record, with_kwargs=True)
            for module in self.model.modules()
            if module.__dict__.get("layer_idx") in windows and (record := _mask_recorder(module, seen)) is not None
        ]
        last = self.max_length - 1
        rows = self.batch_size
        device = torch.device(next(self.model.parameters()).device)
        try:
            with torch.no_grad():
                self(
                    torch.zeros((rows, 1), dtype=torch.long, device=device),
                    torch.full((rows, 1), last, dtype=torch.long, device=device),
                    torch.tensor([last], device=device),
                    torch.ones((rows, self.max_length), dtype=torch.long, device=device),
                )
        finally:
            for handle in handles:
                handle.remove()
            for buffer in self.buffers(recurse=False):
                buffer.zero_()
        implementation = getattr(self.model.config, "_attn_implementation", None)
        # every module of the layer that takes a mask sees it (a decoder layer may pass another on)
        unwindowed = sorted(i for i, masks in seen.items() if all(_sees_slot_0(m, implementation) for m in masks))
        if unwindowed:
            window = windows[unwindowed[0]]
            raise ArgumentError(
                op=_CAPTURE_LM,
                arg="max_length",
                expected=f"at most {window}: {type(self.model).__name__}'s sliding window of {window} tokens "
                f"(layer {unwindowed[0]}) is kept by transformers' dynamic cache alone, its attention mask "
                "reaching every earlier key",
                found=str(self.max_length),
                fix=f"capture_lm(..., max_length={window}), where every key is within the window as in model.generate",
            )

    def forward(self, input_ids: Any, position_ids: Any, cache_position: Any, attention_mask: Any) -> Any:
        for i in self.stored:
            cached = self.layers[i]
            # read through the module every call: non-strict torch.export swaps the module's buffers
            # for traced ones, and a layer holding the tensor itself would write an untracked copy
            cached.keys, cached.values = getattr(self, f"key_cache_{i}"), getattr(self, f"value_cache_{i}")
            if hasattr(self, f"indexer_cache_{i}"):
                cached.indexer_keys = getattr(self, f"indexer_cache_{i}")
            cached.at = cache_position
            # where the step's queries start: transformers' masks read it as the cache's length
            cached.cumulative_length = cache_position[0]
        # the last position's logits only (transformers' generate asks the same): a prompt's other
        # positions would cost the lm_head's GEMM for nothing
        keep = {"logits_to_keep": self.keep} if self.keeps_logits else {}
        if not self.counts_rows:
            position_ids = cache_position[None].expand(input_ids.shape[0], -1)
        with (
            static_cache_attention(self.model, cache_position),  # attention that assumed a growing cache
            traceable_dynamic_rope(self.model),  # eager too: the model's own would keep what it grew to
        ):
            out = self.model(
                input_ids=input_ids,
                position_ids=position_ids,
                cache_position=cache_position,
                attention_mask=attention_mask,
                past_key_values=self.cache,
                use_cache=True,
                **keep,
            )
        return out.logits if hasattr(out, "logits") else out[0]
