"""The model zoo: transformers architectures built from configs with random weights (nothing is
downloaded), each with its example inputs and the dims torch.export may keep dynamic.

Every entry builds at two sizes: "test" (the smallest config that still has the architecture's
parts: two layers, a few heads; what tests/test_zoo.py captures) and "bench" (a few MB of weights:
what bench/zoo.py times). Families: decoders (with and without GQA, rotary variants, sliding windows,
parallel attention/MLP, ALiBi), encoders (absolute, relative and disentangled positions, factorised
embeddings), encoder-decoders (T5, BART, the full Whisper), vision (ViT, Swin's windowed attention,
ConvNeXt, ResNet, MobileViT, SegFormer), audio (Wav2Vec2's convolution front end) and a multimodal
CLIP.

>>> [case.name for case in ZOO][:3]
['llama', 'mistral', 'qwen2']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["ZOO", "ZooCase", "by_name"]

VOCAB = 512


@dataclass(frozen=True)
class ZooCase:
    """One architecture: ``build(size)`` the model (eval mode, seed 0), ``inputs(batch, length)`` its
    example (args, kwargs), ``dims`` the dynamic dims per input name ({"input_ids": {0: "batch", 1:
    "seq"}}), ``lengths``: (example length, another length a dynamic plan is called with)."""

    name: str
    family: str  # decoder, encoder, encoder-decoder, vision, audio, multimodal
    what: str  # the variant this entry stands for
    make: Callable[[str], Any]
    inputs: Callable[[int, int], tuple[tuple[Any, ...], dict[str, Any]]]
    dims: dict[str, dict[int, str]] = field(default_factory=dict)
    lengths: tuple[int, int] = (16, 11)

    def build(self, size: str = "test") -> Any:
        torch.manual_seed(0)
        model = self.make(size)
        return model.eval()

    def dynamic_shapes(self, max_length: int = 64) -> dict[str, dict[int, Any]]:
        """torch.export's dynamic_shapes for these inputs (by name): batch 1..16, a sequence 2..max_length,
        audio samples a multiple of 20 (the feature encoder's strides, 5 x 2 x 2) from 400."""
        from torch.export import Dim

        made: dict[str, Any] = {}

        def dim(label: str) -> Any:
            if label not in made:
                if label == "samples":  # the convolution front end takes multiples of its total stride
                    made[label] = 20 * Dim("_samples", min=20, max=20 * max_length)
                else:
                    low, high = (1, 16) if label == "batch" else (2, max_length)
                    made[label] = Dim(label, min=low, max=high)
            return made[label]

        return {name: {axis: dim(label) for axis, label in axes.items()} for name, axes in self.dims.items()}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _ids(batch: int, length: int, seed: int = 0, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, length), generator=_gen(seed))


def _size(size: str, test: Any, bench: Any) -> Any:
    return test if size == "test" else bench


def _decoder_dims() -> dict[str, dict[int, str]]:
    return {"input_ids": {0: "batch", 1: "seq"}}


def _ids_only(batch: int, length: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (_ids(batch, length),), {}


def _text(kind: str, **config: Any) -> Callable[[str], Any]:
    """A text model of transformers' ``kind`` (ForCausalLM, Model, ...) from ``kind``'s config class."""

    def make(size: str) -> Any:
        import transformers

        model_class = getattr(transformers, kind)
        settings = {
            key: (_size(size, *value) if isinstance(value, tuple) and len(value) == 2 else value)
            for key, value in config.items()
        }
        return model_class(model_class.config_class(**settings))

    return make


def _decoder(name: str, kind: str, what: str, **config: Any) -> ZooCase:
    base = {"vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    return ZooCase(name, "decoder", what, _text(kind, **(base | config)), _ids_only, _decoder_dims())


_LLAMA_LIKE = {
    "hidden_size": (64, 256),
    "intermediate_size": (128, 688),
    "num_hidden_layers": (2, 4),
    "num_attention_heads": (4, 8),
    "max_position_embeddings": 256,
}


def _encoder(name: str, kind: str, what: str, **config: Any) -> ZooCase:
    def inputs(batch: int, length: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (_ids(batch, length),), {"attention_mask": torch.ones(batch, length, dtype=torch.long)}

    base = {"vocab_size": VOCAB, "pad_token_id": 0}
    dims = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    return ZooCase(name, "encoder", what, _text(kind, **(base | config)), inputs, dims)


_BERT_LIKE = {
    "hidden_size": (64, 256),
    "intermediate_size": (128, 1024),
    "num_hidden_layers": (2, 4),
    "num_attention_heads": (4, 8),
    "max_position_embeddings": 256,
}


def _seq2seq(name: str, kind: str, what: str, **config: Any) -> ZooCase:
    def inputs(batch: int, length: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (_ids(batch, length),), {"decoder_input_ids": _ids(batch, max(2, length // 2), seed=1)}

    base = {"vocab_size": VOCAB, "pad_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 0, "use_cache": False}
    dims = {"input_ids": {0: "batch", 1: "seq"}, "decoder_input_ids": {0: "batch", 1: "target"}}
    return ZooCase(name, "encoder-decoder", what, _text(kind, **(base | config)), inputs, dims)


def _whisper(size: str) -> Any:
    import transformers

    config = transformers.WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=16,
        d_model=_size(size, 64, 256),
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=_size(size, 128, 1024),
        decoder_ffn_dim=_size(size, 128, 1024),
        max_source_positions=32,
        max_target_positions=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        use_cache=False,
    )
    return transformers.WhisperForConditionalGeneration(config)


def _whisper_inputs(batch: int, length: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    # the encoder takes exactly 2 x max_source_positions frames; the decoder's length varies
    features = torch.randn(batch, 16, 64, generator=_gen(2))
    return (features,), {"decoder_input_ids": _ids(batch, length, seed=1)}


def _vision(name: str, kind: str, what: str, image: int, **config: Any) -> ZooCase:
    def inputs(batch: int, length: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (torch.randn(batch, 3, image, image, generator=_gen(3)),), {}

    return ZooCase(name, "vision", what, _text(kind, **config), inputs, {"pixel_values": {0: "batch"}})


def _wav2vec2(size: str) -> Any:
    import transformers

    config = transformers.Wav2Vec2Config(
        vocab_size=VOCAB,
        hidden_size=_size(size, 64, 256),
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=_size(size, 128, 1024),
        conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        do_stable_layer_norm=True,
        feat_extract_norm="layer",
    )
    return transformers.Wav2Vec2Model(config)


def _wav2vec2_inputs(batch: int, length: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (torch.randn(batch, 20 * (20 + 2 * length), generator=_gen(4)),), {}


def _clip(size: str) -> Any:
    import transformers

    text = {
        "vocab_size": VOCAB,
        "hidden_size": _size(size, 64, 256),
        "intermediate_size": _size(size, 128, 1024),
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
    }
    vision = {
        "hidden_size": _size(size, 64, 256),
        "intermediate_size": _size(size, 128, 1024),
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": 32,
        "patch_size": 8,
    }
    config = transformers.CLIPConfig(text_config=text, vision_config=vision, projection_dim=32)
    return transformers.CLIPModel(config)


def _clip_inputs(batch: int, length: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return (_ids(batch, length),), {"pixel_values": torch.randn(batch, 3, 32, 32, generator=_gen(5))}


ZOO: tuple[ZooCase, ...] = (
    # decoders
    _decoder("llama", "LlamaForCausalLM", "rotary, GQA, SwiGLU, RMSNorm", num_key_value_heads=2, **_LLAMA_LIKE),
    _decoder(
        "mistral",
        "MistralForCausalLM",
        "sliding-window attention, GQA",
        num_key_value_heads=2,
        sliding_window=8,
        **_LLAMA_LIKE,
    ),
    _decoder(
        "qwen2",
        "Qwen2ForCausalLM",
        "q/k/v biases, GQA, tied embeddings",
        num_key_value_heads=2,
        tie_word_embeddings=True,
        **_LLAMA_LIKE,
    ),
    _decoder("phi3", "Phi3ForCausalLM", "fused qkv and gate_up projections", num_key_value_heads=4, **_LLAMA_LIKE),
    _decoder(
        "gemma",
        "GemmaForCausalLM",
        "GeGLU, scaled embeddings, multi-query",
        num_key_value_heads=1,
        head_dim=16,
        **_LLAMA_LIKE,
    ),
    _decoder(
        "gpt2",
        "GPT2LMHeadModel",
        "learned positions, Conv1D projections, no GQA",
        n_embd=(64, 256),
        n_layer=(2, 4),
        n_head=(4, 8),
        n_positions=256,
    ),
    _decoder(
        "opt",
        "OPTForCausalLM",
        "learned positions with an offset, ReLU",
        hidden_size=(64, 256),
        ffn_dim=(128, 1024),
        num_hidden_layers=(2, 4),
        num_attention_heads=(4, 8),
        max_position_embeddings=256,
        word_embed_proj_dim=(64, 256),
    ),
    _decoder(
        "gpt_neox",
        "GPTNeoXForCausalLM",
        "parallel attention/MLP, partial rotary",
        hidden_size=(64, 256),
        intermediate_size=(128, 1024),
        num_hidden_layers=(2, 4),
        num_attention_heads=(4, 8),
        max_position_embeddings=256,
        rotary_pct=0.25,
        use_parallel_residual=True,
    ),
    _decoder(
        "falcon",
        "FalconForCausalLM",
        "parallel attention, multi-query, rotary",
        hidden_size=(64, 256),
        num_hidden_layers=(2, 4),
        num_attention_heads=(4, 8),
        multi_query=True,
        parallel_attn=True,
        new_decoder_architecture=False,
        alibi=False,
    ),
    _decoder(
        "bloom",
        "BloomForCausalLM",
        "ALiBi positions, embedding LayerNorm",
        hidden_size=(64, 256),
        n_layer=(2, 4),
        n_head=(4, 8),
    ),
    # encoders
    _encoder("bert", "BertModel", "absolute positions, token types, GELU", **_BERT_LIKE),
    _encoder("roberta", "RobertaModel", "positions offset by the padding index", **_BERT_LIKE),
    _encoder(
        "distilbert",
        "DistilBertModel",
        "no token types, sinusoidal option off",
        dim=(64, 256),
        hidden_dim=(128, 1024),
        n_layers=2,
        n_heads=4,
        max_position_embeddings=256,
    ),
    _encoder("albert", "AlbertModel", "factorised embeddings, shared layers", embedding_size=32, **_BERT_LIKE),
    _encoder("electra", "ElectraModel", "embedding projection", embedding_size=32, **_BERT_LIKE),
    _encoder(
        "deberta_v2",
        "DebertaV2Model",
        "disentangled relative positions",
        relative_attention=True,
        position_buckets=32,
        max_relative_positions=64,
        pos_att_type=["p2c", "c2p"],
        **_BERT_LIKE,
    ),
    # encoder-decoders
    _seq2seq(
        "t5",
        "T5ForConditionalGeneration",
        "relative position buckets, RMSNorm",
        d_model=(64, 256),
        d_ff=(128, 1024),
        d_kv=16,
        num_layers=2,
        num_heads=4,
    ),
    _seq2seq(
        "bart",
        "BartForConditionalGeneration",
        "learned positions, post-LayerNorm",
        d_model=(64, 256),
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=(128, 1024),
        decoder_ffn_dim=(128, 1024),
        max_position_embeddings=256,
    ),
    ZooCase(
        "whisper",
        "encoder-decoder",
        "the full Whisper forward: convolution front end, encoder, decoder",
        _whisper,
        _whisper_inputs,
        {"input_features": {0: "batch"}, "decoder_input_ids": {0: "batch", 1: "seq"}},
    ),
    # vision
    _vision(
        "vit",
        "ViTModel",
        "patch embedding, class token",
        32,
        hidden_size=(64, 256),
        intermediate_size=(128, 1024),
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
    ),
    _vision(
        "swin",
        "SwinModel",
        "shifted-window attention, patch merging",
        32,
        embed_dim=(16, 48),
        depths=[1, 2],
        num_heads=[2, 4],
        window_size=4,
        image_size=32,
        patch_size=2,
    ),
    _vision(
        "convnext",
        "ConvNextModel",
        "depthwise 7x7 convolutions, LayerNorm",
        32,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        num_stages=2,
    ),
    _vision(
        "resnet",
        "ResNetModel",
        "bottleneck convolutions, batch norm",
        32,
        embedding_size=16,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        layer_type="bottleneck",
    ),
    _vision(
        "mobilevit",
        "MobileViTModel",
        "convolutions and transformer blocks",
        64,
        image_size=64,
        hidden_sizes=[32, 48, 64],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
    ),
    _vision(
        "segformer",
        "SegformerModel",
        "efficient attention with spatial reduction",
        32,
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[4, 2],
        hidden_sizes=[16, 32],
        num_attention_heads=[1, 2],
        decoder_hidden_size=32,
        strides=[4, 2],
        patch_sizes=[7, 3],
        mlp_ratios=[2, 2],
    ),
    # audio and multimodal
    ZooCase(
        "wav2vec2",
        "audio",
        "convolutional feature encoder, positional convolution",
        _wav2vec2,
        _wav2vec2_inputs,
        {"input_values": {0: "batch", 1: "samples"}},
    ),
    ZooCase(
        "clip",
        "multimodal",
        "text and vision towers, contrastive logits",
        _clip,
        _clip_inputs,
        {"input_ids": {0: "batch", 1: "seq"}, "pixel_values": {0: "batch"}},
    ),
)


def by_name(name: str) -> ZooCase:
    for case in ZOO:
        if case.name == name:
            return case
    raise KeyError(f"no zoo model {name!r}: one of {', '.join(c.name for c in ZOO)}")
