"""Generating text with a captured decoder: ``LanguageModel``, its sessions and the decode loop.

A ``Session`` holds one conversation's state: the KV cache (allocated once, for the model's batch
size and max length), which cache slots hold tokens of each row, and each row's next position. Its
``prefill`` takes the prompt, its ``decode`` one token per row; both return the logits of the
last position. ``LanguageModel.generate`` runs the loop over a session with transformers' options
(greedy or sampling, eos per row, left padding, streaming), or its beam search
(``opcore.graph.beam_search``).

>>> lm = opcore.graph.capture_lm(model, max_length=128)                 # doctest: +SKIP
>>> lm.generate(ids, max_new_tokens=16)                                 # doctest: +SKIP
>>> chat = lm.session(); logits = chat.prefill(ids); logits = chat.decode(logits.argmax(-1))   # doctest: +SKIP
"""

from __future__ import annotations

import numbers
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from opcore.errors import ArgumentError, ShapeError
from opcore.graph.assisted import CONFIDENCE as ASSISTANT_CONFIDENCE
from opcore.graph.assisted import NUM_TOKENS as NUM_ASSISTANT_TOKENS
from opcore.graph.assisted import Assistant
from opcore.graph.beam_search import Beams, beam_search
from opcore.graph.generate_output import GenerateOutput
from opcore.graph.guidance import Guidance, guidance_scale
from opcore.graph.prompt_lookup import NGRAM_SIZE, Lookup, lookup_steps
from opcore.graph.sampling import REPLACEABLE, Choice, one_thread, stopped
from opcore.graph.split_attention import WINDOW, window_length
from opcore.graph.state import new_state, slot_dims

__all__ = ["GenerationDefaults", "LanguageModel", "Session", "one_thread"]

_GENERATE = "LanguageModel.generate"


@dataclass(frozen=True, slots=True)
class GenerationDefaults:
    """What the model's generation config says, used where ``generate`` is not told otherwise
    (None: not set)."""

    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    # the prompt where generate is given none, as transformers' generate starts from it
    bos_token_id: int | None = None
    top_k: int | None = None
    top_p: float | None = None
    temperature: float | None = None
    # a checkpoint's config may ask for sampling (Qwen2.5-Instruct's: do_sample, temperature 0.7,
    # top_p 0.8, top_k 20, repetition_penalty 1.05), which transformers' generate then does
    do_sample: bool = False
    repetition_penalty: float | None = None
    # transformers' ForcedBOS / ForcedEOS processors: the first token of a one-token prompt, the
    # last of max_new_tokens (BART's, Pegasus' and Marian's configs set forced_eos_token_id)
    forced_bos_token_id: int | None = None
    forced_eos_token_ids: tuple[int, ...] = ()
    # transformers' SuppressTokens / SuppressTokensAtBegin processors (Whisper's configs set both)
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()
    # how long generate goes where the call does not say (Llama 2's and TinyLlama's configs set a
    # max_length of 4096 / 2048: transformers' generate then runs until it or an eos)
    max_new_tokens: int | None = None
    max_length: int | None = None
    # the least generate makes where the call does not say: min_new_tokens, else min_length (prompt
    # counted), as transformers' MinNewTokens / MinLength processors
    min_new_tokens: int | None = None
    min_length: int | None = None
    # transformers' SequenceBias, NoRepeatNGram and NoBadWords processors, its min-p, typical, epsilon
    # and eta warpers (sampling), and its MaxTimeCriteria (seconds)
    sequence_bias: tuple[tuple[tuple[int, ...], float], ...] = ()
    no_repeat_ngram_size: int | None = None
    # transformers' Encoder* processors, which a decoder-only model's generate runs over the prompt: its
    # tokens' scores raised (a "hallucination penalty" > 1), its n-grams not continued
    encoder_repetition_penalty: float | None = None
    encoder_no_repeat_ngram_size: int | None = None
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    min_p: float | None = None
    typical_p: float | None = None
    epsilon_cutoff: float | None = None
    eta_cutoff: float | None = None
    max_time: float | None = None
    # transformers' TopH warper (sampling) and ExponentialDecayLengthPenalty ((start, factor): eos
    # scores raised by factor ** (new tokens - start) past start)
    top_h: float | None = None
    exponential_decay_length_penalty: tuple[int, float] | None = None
    # transformers' LogitNormalization: the processed scores as log-probabilities, last
    renormalize_logits: bool = False
    # transformers' InfNanRemoveLogitsProcessor: NaN scores made 0, infinite ones float32's extremes
    remove_invalid_values: bool = False
    # transformers' classifier-free guidance (opcore.graph.guidance): None where it does nothing (1)
    guidance_scale: float | None = None
    # transformers' watermarking_config (a WatermarkingConfig or SynthIDTextWatermarkingConfig) as JSON,
    # {"class": ..., "options": its to_dict()}: rebuilt with transformers for each call (None: no watermark)
    watermarking: str | None = None
    # transformers' StopStringCriteria: a row ends where its text ends with one (generate needs the tokenizer)
    stop_strings: tuple[str, ...] = ()
    num_return_sequences: int | None = None  # sampled sequences per prompt (transformers' expansion)
    # beam search (opcore.graph.beam_search): beams per prompt, the finished scores' length penalty,
    # and when it stops (transformers' True / False / "never")
    num_beams: int | None = None
    length_penalty: float | None = None
    early_stopping: bool | str | None = None
    # what generate returns: a GenerateOutput (with each step's processed scores, logits) or the tensor
    return_dict_in_generate: bool = False
    output_scores: bool = False
    output_logits: bool = False
    # prompt lookup decoding (opcore.graph.prompt_lookup): the tokens drafted from the row's own
    # n-grams per verify step, and the longest n-gram matched
    prompt_lookup_num_tokens: int | None = None
    max_matching_ngram_size: int | None = None
    # the config's options that change tokens and that opcore's generate does not apply ("num_beams=4")
    not_applied: tuple[str, ...] = ()

    @classmethod
    def of(cls, model: Any) -> GenerationDefaults:
        config = getattr(model, "generation_config", None)
        if config is None:
            return cls()
        eos = getattr(config, "eos_token_id", None)
        return cls(
            eos_token_ids=_ids(eos),
            pad_token_id=getattr(config, "pad_token_id", None),
            bos_token_id=_integer(getattr(config, "bos_token_id", None)),
            top_k=getattr(config, "top_k", None),
            top_p=getattr(config, "top_p", None),
            temperature=getattr(config, "temperature", None),
            do_sample=bool(getattr(config, "do_sample", False)),
            repetition_penalty=getattr(config, "repetition_penalty", None),
            forced_bos_token_id=getattr(config, "forced_bos_token_id", None),
            forced_eos_token_ids=_ids(getattr(config, "forced_eos_token_id", None)),
            suppress_tokens=_ids(getattr(config, "suppress_tokens", None)),
            begin_suppress_tokens=_ids(getattr(config, "begin_suppress_tokens", None)),
            max_new_tokens=_length(getattr(config, "max_new_tokens", None)),
            # 20 is transformers' own default (GenerationConfig() held it before transformers 5), which
            # its generate reads as 20 new tokens, not as a length: not the model's setting
            max_length=_length(getattr(config, "max_length", None), unset=NEW_TOKENS),
            min_new_tokens=_length(getattr(config, "min_new_tokens", None)),
            min_length=_length(getattr(config, "min_length", None)),
            sequence_bias=_biases(getattr(config, "sequence_bias", None) or None, "generation_config.sequence_bias"),
            no_repeat_ngram_size=getattr(config, "no_repeat_ngram_size", None) or None,
            encoder_repetition_penalty=getattr(config, "encoder_repetition_penalty", None),
            encoder_no_repeat_ngram_size=getattr(config, "encoder_no_repeat_ngram_size", None) or None,
            bad_words_ids=_words(getattr(config, "bad_words_ids", None) or None, "generation_config.bad_words_ids"),
            min_p=getattr(config, "min_p", None),
            typical_p=getattr(config, "typical_p", None),
            epsilon_cutoff=getattr(config, "epsilon_cutoff", None),
            eta_cutoff=getattr(config, "eta_cutoff", None),
            max_time=getattr(config, "max_time", None),
            top_h=getattr(config, "top_h", None),
            exponential_decay_length_penalty=_decay(getattr(config, "exponential_decay_length_penalty", None)),
            renormalize_logits=getattr(config, "renormalize_logits", False) is True,
            remove_invalid_values=getattr(config, "remove_invalid_values", False) is True,
            guidance_scale=guidance_scale(getattr(config, "guidance_scale", None), "generation_config.guidance_scale"),
            watermarking=_watermarking(getattr(config, "watermarking_config", None), "generation_config."),
            stop_strings=_strings(getattr(config, "stop_strings", None)),
            num_return_sequences=getattr(config, "num_return_sequences", None),
            num_beams=getattr(config, "num_beams", None),
            length_penalty=getattr(config, "length_penalty", None),
            early_stopping=getattr(config, "early_stopping", None),
            return_dict_in_generate=bool(getattr(config, "return_dict_in_generate", False)),
            output_scores=bool(getattr(config, "output_scores", False)),
            output_logits=bool(getattr(config, "output_logits", False)),
            prompt_lookup_num_tokens=_length(getattr(config, "prompt_lookup_num_tokens", None)),
            max_matching_ngram_size=_length(getattr(config, "max_matching_ngram_size", None)),
            not_applied=tuple(
                f"{name}={value!r}"
                for name, idle in NOT_APPLIED.items()
                if (value := getattr(config, name, None)) is not None and value != idle
            ),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "eos_token_ids": list(self.eos_token_ids),
            "pad_token_id": self.pad_token_id,
            "bos_token_id": self.bos_token_id,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "temperature": self.temperature,
            "do_sample": self.do_sample,
            "repetition_penalty": self.repetition_penalty,
            "forced_bos_token_id": self.forced_bos_token_id,
            "forced_eos_token_ids": list(self.forced_eos_token_ids),
            "suppress_tokens": list(self.suppress_tokens),
            "begin_suppress_tokens": list(self.begin_suppress_tokens),
            "max_new_tokens": self.max_new_tokens,
            "max_length": self.max_length,
            "min_new_tokens": self.min_new_tokens,
            "min_length": self.min_length,
            "sequence_bias": [[list(sequence), bias] for sequence, bias in self.sequence_bias],
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
            "encoder_repetition_penalty": self.encoder_repetition_penalty,
            "encoder_no_repeat_ngram_size": self.encoder_no_repeat_ngram_size,
            "bad_words_ids": [list(words) for words in self.bad_words_ids],
            "min_p": self.min_p,
            "typical_p": self.typical_p,
            "epsilon_cutoff": self.epsilon_cutoff,
            "eta_cutoff": self.eta_cutoff,
            "max_time": self.max_time,
            "top_h": self.top_h,
            "exponential_decay_length_penalty": list(self.exponential_decay_length_penalty or ()) or None,
            "renormalize_logits": self.renormalize_logits,
            "remove_invalid_values": self.remove_invalid_values,
            "guidance_scale": self.guidance_scale,
            "watermarking": self.watermarking,
            "stop_strings": list(self.stop_strings),
            "num_return_sequences": self.num_return_sequences,
            "num_beams": self.num_beams,
            "length_penalty": self.length_penalty,
            "early_stopping": self.early_stopping,
            "return_dict_in_generate": self.return_dict_in_generate,
            "output_scores": self.output_scores,
            "output_logits": self.output_logits,
            "prompt_lookup_num_tokens": self.prompt_lookup_num_tokens,
            "max_matching_ngram_size": self.max_matching_ngram_size,
            "not_applied": list(self.not_applied),
        }

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> GenerationDefaults:
        return cls(
            eos_token_ids=tuple(int(i) for i in record.get("eos_token_ids", ())),
            pad_token_id=record.get("pad_token_id"),
            bos_token_id=record.get("bos_token_id"),
            top_k=record.get("top_k"),
            top_p=record.get("top_p"),
            temperature=record.get("temperature"),
            do_sample=bool(record.get("do_sample", False)),  # plans saved before it was kept: greedy
            repetition_penalty=record.get("repetition_penalty"),
            forced_bos_token_id=record.get("forced_bos_token_id"),
            forced_eos_token_ids=tuple(int(i) for i in record.get("forced_eos_token_ids", ())),
            suppress_tokens=tuple(int(i) for i in record.get("suppress_tokens", ())),
            begin_suppress_tokens=tuple(int(i) for i in record.get("begin_suppress_tokens", ())),
            max_new_tokens=_length(record.get("max_new_tokens")),
            max_length=_length(record.get("max_length")),
            min_new_tokens=_length(record.get("min_new_tokens")),
            min_length=_length(record.get("min_length")),
            # plans saved before these were kept: none set
            sequence_bias=_biases(record.get("sequence_bias") or None, "sequence_bias"),
            no_repeat_ngram_size=record.get("no_repeat_ngram_size"),
            encoder_repetition_penalty=record.get("encoder_repetition_penalty"),
            encoder_no_repeat_ngram_size=record.get("encoder_no_repeat_ngram_size"),
            bad_words_ids=_words(record.get("bad_words_ids") or None, "bad_words_ids"),
            min_p=record.get("min_p"),
            typical_p=record.get("typical_p"),
            epsilon_cutoff=record.get("epsilon_cutoff"),
            eta_cutoff=record.get("eta_cutoff"),
            max_time=record.get("max_time"),
            top_h=record.get("top_h"),
            exponential_decay_length_penalty=_decay(record.get("exponential_decay_length_penalty")),
            renormalize_logits=record.get("renormalize_logits") is True,
            remove_invalid_values=record.get("remove_invalid_values") is True,
            guidance_scale=guidance_scale(record.get("guidance_scale")),
            watermarking=record.get("watermarking"),
            stop_strings=_strings(record.get("stop_strings")),
            num_return_sequences=record.get("num_return_sequences"),
            num_beams=record.get("num_beams"),
            length_penalty=record.get("length_penalty"),
            early_stopping=record.get("early_stopping"),
            return_dict_in_generate=bool(record.get("return_dict_in_generate", False)),
            output_scores=bool(record.get("output_scores", False)),
            output_logits=bool(record.get("output_logits", False)),
            prompt_lookup_num_tokens=_length(record.get("prompt_lookup_num_tokens")),
            max_matching_ngram_size=_length(record.get("max_matching_ngram_size")),
            not_applied=tuple(str(item) for item in record.get("not_applied", ())),
        )


@dataclass(frozen=True, slots=True)
class _Work:
    """One generate (or stream) call, its options resolved and checked: what the loop runs."""

    ids: Any  # (captured batch, prompt), int64 on the model's device
    mask: Any  # (captured batch, prompt) or None
    rows: int  # the caller's rows (the rest copies of the first, their tokens dropped)
    max_new_tokens: int
    choice: Choice
    eos: tuple[int, ...]
    pad: int
    session: Session | None  # the caller's, None: one of the pool
    max_time: float | None
    # where generate returns a GenerateOutput with scores or logits: each step's (processed scores,
    # logits) of the caller's rows, appended by the loop; None: nothing kept
    record: list[tuple[Any, Any]] | None = None
    # the caller's stopping criteria (transformers' stopping_criteria list): (tokens, scores) -> done
    stopping: tuple[Any, ...] = ()
    # where the drafts come from: prompt lookup decoding's n-grams, or an assistant model (None: one
    # token a step)
    lookup: Lookup | Assistant | None = None


@dataclass(frozen=True, slots=True)
class _Outputs:
    """What a generate call returns in its GenerateOutput beside the sequences."""

    scores: bool
    logits: bool


def _output(
    wanted: _Outputs,
    sequences: Any,
    record: list[tuple[Any, Any]] | None,
    sequences_scores: Any = None,
    beam_indices: Any = None,
) -> GenerateOutput:
    steps = record or []
    return GenerateOutput(
        sequences=sequences,
        scores=tuple(scores for scores, _ in steps) if wanted.scores else None,
        logits=tuple(logits for _, logits in steps) if wanted.logits else None,
        sequences_scores=sequences_scores if wanted.scores else None,
        beam_indices=beam_indices,
    )


def _length(value: Any, unset: int | None = None) -> int | None:
    """A generation config's length: a positive int other than ``unset``, else None."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1 or value == unset:
        return None
    return value


_MASK_FIX = "pass the tokenizer's attention_mask (1 for tokens, 0 for padding)"

# generate's new tokens where neither max_new_tokens nor max_length says
NEW_TOKENS = 20
# options of a generation config that change the tokens transformers' generate makes and that
# opcore's does not apply, each with the value that does nothing (a config setting another is said at
# capture: a warning, and explain)
NOT_APPLIED: dict[str, Any] = {
    "penalty_alpha": 0.0,
    "dola_layers": None,
    "constraints": None,
    "force_words_ids": None,
    "token_healing": False,
}
# sampling's top-k where neither the call nor the model's generation config sets one: transformers'
# global default (GenerationConfig._get_default_generation_params); top_k=0 samples from every token
TOP_K = 50


def _prompt(input_ids: Any, inputs: Any, op: str, bos: int | None = None) -> Any:
    """The prompt, given as ``input_ids`` or as transformers' ``inputs``, else one row of the bos token
    ``bos`` (transformers' generate starts there); an ArgumentError for both, or neither without a bos."""
    if input_ids is None and inputs is None and bos is not None:
        import torch

        return torch.tensor([[bos]], dtype=torch.long)
    if (input_ids is None) == (inputs is None):
        both = input_ids is not None
        raise ArgumentError(
            op=op,
            arg="inputs" if both else "input_ids",
            expected="the prompt's token ids (batch, seq) once: input_ids, or inputs as transformers names it"
            + ("" if both else ", or a bos_token_id to start from"),
            found="both" if both else "neither (and no bos_token_id in the call or the generation config)",
            fix="pass one of them: lm.generate(ids, ...), generate(input_ids=ids) or generate(inputs=ids)"
            + ("" if both else "; or generate(bos_token_id=...) to start from that token"),
        )
    return input_ids if input_ids is not None else inputs


@dataclass(frozen=True)
class _Configured:
    """What GenerationDefaults.of reads a generation config from (a model's attribute)."""

    generation_config: Any


def _blank_config(config: Any, op: str) -> Any:
    """A GenerationConfig of ``config``'s class with every option at its default; an ArgumentError
    where ``config`` is no transformers GenerationConfig."""
    refused = ArgumentError(
        op=op,
        arg="generation_config",
        expected="a transformers GenerationConfig",
        found=type(config).__name__,
        fix="pass GenerationConfig(max_new_tokens=..., ...), or its options as keywords",
    )
    if not callable(getattr(config, "to_diff_dict", None)):
        raise refused
    try:
        return type(config)()
    except Exception as error:
        raise refused from error


# options of a generation config that generate takes as keywords beyond its signature's, as
# transformers' generate takes any config option as a keyword: name -> GenerationDefaults' field
CONFIG_KEYWORDS = {
    "min_length": "min_length",
    "bos_token_id": "bos_token_id",
    "forced_bos_token_id": "forced_bos_token_id",
    "forced_eos_token_id": "forced_eos_token_ids",
    "suppress_tokens": "suppress_tokens",
    "begin_suppress_tokens": "begin_suppress_tokens",
}


def _config_keywords(
    defaults: GenerationDefaults, unsupported: Mapping[str, Any], op: str
) -> tuple[GenerationDefaults, dict[str, Any]]:
    """``defaults`` with the call's CONFIG_KEYWORDS in place (each checked: an ArgumentError naming
    it), and the keywords left over."""
    rest = dict(unsupported)
    said: dict[str, Any] = {}
    for name, field_name in CONFIG_KEYWORDS.items():
        if name not in rest:
            continue
        value = rest.pop(name)
        if value is None:
            continue
        single = name in ("min_length", "forced_bos_token_id", "bos_token_id")
        try:
            if single or isinstance(value, numbers.Integral):
                if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                    raise TypeError(name)
                said[field_name] = int(value) if single else (int(value),)
            else:
                ids = tuple(value)
                if any(isinstance(i, bool) or not isinstance(i, numbers.Integral) or i < 0 for i in ids):
                    raise TypeError(name)
                said[field_name] = tuple(int(i) for i in ids)
        except TypeError as error:
            expected = "an int >= 0" if name == "min_length" else "a token id (int)" if single else "token ids (ints)"
            raise ArgumentError(op=op, arg=name, expected=expected, found=repr(value)[:120]) from error
    return (replace(defaults, **said) if said else defaults), rest


# transformers' caches whose tokens are those of its default one (its generate's cache_implementation
# values, ALL_CACHE_IMPLEMENTATIONS and "paged", but "quantized"): taken, as use_cache is, and the
# captured cache runs
SAME_TOKENS_CACHES = (
    "static", "offloaded_static", "sliding_window", "hybrid", "hybrid_chunked", "offloaded_hybrid",
    "offloaded_hybrid_chunked", "dynamic", "offloaded", "paged",
)  # fmt: skip


def _watermarking(value: Any, prefix: str = "") -> str | None:
    """transformers' ``watermarking_config`` (its config object, or a dict of WatermarkingConfig's
    options, as its GenerationConfig takes one) as GenerationDefaults.watermarking's JSON; None for
    None; an ArgumentError for anything else."""
    if value is None:
        return None
    import json

    kinds = ("WatermarkingConfig", "SynthIDTextWatermarkingConfig")
    if isinstance(value, dict):
        kind, options = "WatermarkingConfig", dict(value)
    elif type(value).__name__ in kinds and callable(getattr(value, "to_dict", None)):
        kind, options = type(value).__name__, value.to_dict()
    else:
        raise ArgumentError(
            op=_GENERATE,
            arg=f"{prefix}watermarking_config",
            expected="a transformers WatermarkingConfig or SynthIDTextWatermarkingConfig, or a dict of "
            "WatermarkingConfig's options",
            found=type(value).__name__,
        )
    try:
        return json.dumps({"class": kind, "options": options}, sort_keys=True)
    except (TypeError, ValueError) as error:
        raise ArgumentError(
            op=_GENERATE, arg=f"{prefix}watermarking_config", expected="options of numbers, strings and lists",
            found=repr(options)[:120],
        ) from error  # fmt: skip


# options of transformers' generate that never change a decoder-only model's tokens (how it compiles,
# how long its cache is, chunked prefill, multi-GPU sync, contrastive search's memory mode, an
# encoder-decoder's start token): taken and changing nothing here
NO_EFFECT = (
    "prefill_chunk_size", "disable_compile", "compile_config", "synced_gpus", "max_cache_len", "cache_config",
    "low_memory", "is_assistant", "decoder_start_token_id", "continuous_batching_config",
)  # fmt: skip
# options of a decoding generate does not do, taken at the values that turn them off (transformers'
# GenerationConfig defaults): code that passes them there runs; another value is refused (_refuse)
IDLE_VALUES: dict[str, tuple[Any, ...]] = {
    **{name: (None, idle) for name, idle in NOT_APPLIED.items()},  # a config's options, as keywords
    "num_beam_groups": (None, 1),
    "diversity_penalty": (None, 0.0),
    "use_mtp": (None, False),
    "speculation_type": (None,),
    "custom_generate": (None,),
    "num_assistant_tokens_schedule": (None, "constant"),
    "output_attentions": (None, False),
    "output_hidden_states": (None, False),
}


def _without_idle(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` without those that change nothing: NO_EFFECT's, and IDLE_VALUES' at those values."""
    return {
        name: value
        for name, value in options.items()
        if name not in NO_EFFECT
        and not (name in IDLE_VALUES and any(value is idle or (value == idle and type(value) is not bool)
                                                 for idle in IDLE_VALUES[name]))
    }  # fmt: skip


def _cache_implementation(value: Any, op: str, prefix: str = "") -> None:
    """An ArgumentError for a ``cache_implementation`` whose tokens are not those of the captured
    cache ("quantized": transformers' QuantizedCache rounds the keys and values) or that transformers
    does not know; None and SAME_TOKENS_CACHES change nothing."""
    if value is None or value in SAME_TOKENS_CACHES:
        return
    quantized = value == "quantized"
    raise ArgumentError(
        op=op,
        arg=f"{prefix}cache_implementation",
        expected=f"one of {', '.join(SAME_TOKENS_CACHES)} (taken as use_cache is: the captured cache runs)",
        found=repr(value)[:80],
        fix="use the model's own generate for a quantized key/value cache (its tokens are not the model's)"
        if quantized
        else "leave cache_implementation out: the captured cache runs whatever it says",
    )


def _refuse(unsupported: Mapping[str, Any]) -> None:
    """An ArgumentError for options of transformers' generate that opcore's does not take (contrastive
    search, a GenerationConfig object, attentions...), before any work: a TypeError would not say
    what to do instead. The options it names are generate's own keywords, read from its signature."""
    if not unsupported:
        return
    import inspect

    names = sorted(unsupported)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    options = [
        name
        for name, parameter in inspect.signature(LanguageModel.generate).parameters.items()
        if parameter.kind in kinds and name not in ("self", "input_ids")
    ] + sorted(CONFIG_KEYWORDS)
    raise ArgumentError(
        op=_GENERATE,
        arg=names[0],
        expected=f"generate's options: {', '.join(options)}",
        found=", ".join(f"{name}={unsupported[name]!r}"[:80] for name in names),
        fix=(
            "greedy search, sampling, beam search, prompt lookup and assisted generation are what it does "
            "(contrastive search, DoLa, constrained beam search, attentions and hidden states are not: use "
            "the model's own generate for those); a "
            "GenerationConfig goes as generation_config=, or its options as keywords (do_sample=..., "
            "num_beams=...), and a captured model's generation_config is read already"
        ),
    )


def _new_tokens_to(max_length: Any, prompt: int, said: str | None = None) -> int:
    """The new tokens that make a row of ``prompt`` tokens ``max_length`` long (transformers'
    ``max_length``: prompt and new tokens together, ``max_new_tokens`` taking precedence); ``said``:
    where the length came from, for the error (the call's value where None)."""
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length <= prompt:
        raise ArgumentError(
            op=_GENERATE,
            arg="max_length",
            expected=f"an int above the prompt's {prompt} tokens (max_length counts the prompt, as transformers' does)",
            found=said or repr(max_length),
            fix="pass max_new_tokens=... for the tokens to add, or a max_length above the prompt's length",
        )
    return max_length - prompt


# generate's options read by _processing (each the generation config's where the call leaves it None)
_PROCESSING = (
    "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "no_repeat_ngram_size", "bad_words_ids", "sequence_bias",
    "max_time", "top_h", "exponential_decay_length_penalty", "renormalize_logits", "remove_invalid_values",
    "encoder_repetition_penalty", "encoder_no_repeat_ngram_size",
)  # fmt: skip


def _strings(value: Any, arg: str | None = None) -> tuple[str, ...]:
    """``stop_strings`` (a string or a list of them, transformers' forms) as a tuple; () for None.
    ``arg``: the option's name for an ArgumentError (None: a config's value, dropped where it is not
    one)."""
    if value is None:
        return ()
    strings = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, Sequence) else ()
    if strings and all(isinstance(item, str) and item for item in strings):
        return strings
    if arg is None:
        return ()
    raise ArgumentError(op=_GENERATE, arg=arg, expected="a non-empty string or a list of them", found=repr(value)[:120])


def _decay(value: Any, arg: str | None = None) -> tuple[int, float] | None:
    """``exponential_decay_length_penalty`` (transformers' (start_index, decay_factor)) as a tuple;
    None for None. ``arg``: the option's name for an ArgumentError where it is not one (None: a
    config's value, taken as transformers' would be)."""
    if value is None:
        return None
    pair = tuple(value) if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else ()
    if (
        len(pair) == 2
        and isinstance(pair[0], int)
        and not isinstance(pair[0], bool)
        and pair[0] >= 0
        and isinstance(pair[1], (int, float))
        and not isinstance(pair[1], bool)
        and pair[1] > 0
    ):
        return int(pair[0]), float(pair[1])
    if arg is None:
        return None
    raise ArgumentError(
        op=_GENERATE,
        arg=arg,
        expected="(start_index, decay_factor): an int >= 0 and a number > 0 (transformers' form)",
        found=repr(value)[:120],
    )


def _token_ids(value: Any) -> tuple[int, ...] | None:
    """A non-empty sequence of token ids >= 0 as a tuple; None where it is not one."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        return None
    if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in value):
        return None
    ids = tuple(int(i) for i in value)  # numpy's integers too
    return ids if min(ids) >= 0 else None


def _words(value: Any, arg: str) -> tuple[tuple[int, ...], ...]:
    """``bad_words_ids`` (a list of lists of token ids, transformers' form) as tuples; () for None."""
    if value is None:
        return ()
    words = [_token_ids(item) for item in value] if isinstance(value, Sequence) and value else [None]
    if not all(words):
        raise ArgumentError(
            op=_GENERATE,
            arg=arg,
            expected="a non-empty list of non-empty lists of token ids >= 0 (transformers' bad_words_ids)",
            found=repr(value)[:120],
            fix="tokenizer(words, add_special_tokens=False).input_ids gives the lists",
        )
    return tuple(w for w in words if w is not None)


def _biases(value: Any, arg: str) -> tuple[tuple[tuple[int, ...], float], ...]:
    """``sequence_bias`` (a dict of token-id tuples to floats, or a list of [token ids, float] pairs,
    transformers' two forms) as (tuple, float) pairs; () for None."""
    if value is None:
        return ()
    pairs = list(value.items()) if isinstance(value, Mapping) else value
    found: list[tuple[tuple[int, ...], float]] = []
    if isinstance(pairs, Sequence) and pairs:
        for pair in pairs:
            if not isinstance(pair, Sequence) or len(pair) != 2:
                break
            ids, bias = _token_ids(pair[0]), pair[1]
            if ids is None or not isinstance(bias, (int, float)) or isinstance(bias, bool):
                break
            found.append((ids, float(bias)))
    if not found or len(found) != len(pairs):
        raise ArgumentError(
            op=_GENERATE,
            arg=arg,
            expected="a dict of token-id tuples to floats, or a list of [token ids, float] pairs (transformers' forms)",
            found=repr(value)[:120],
        )
    return tuple(found)


def _stop_strings_criterion(stop_strings: tuple[str, ...], tokenizer: Any, configured: bool) -> Any:
    """transformers' StopStringCriteria over ``tokenizer`` (its token strings decide where a text
    ends with a stop string); an ArgumentError without a tokenizer, as transformers' generate raises."""
    if tokenizer is None:
        said = "the model's generation_config.stop_strings" if configured else "stop_strings"
        raise ArgumentError(
            op=_GENERATE,
            arg="tokenizer",
            expected=f"the model's tokenizer where stop strings are set ({said}: {list(stop_strings)!r})",
            found="None",
            fix="generate(..., tokenizer=tokenizer), as transformers' generate asks",
        )
    from transformers.generation.stopping_criteria import StopStringCriteria

    return StopStringCriteria(tokenizer=tokenizer, stop_strings=list(stop_strings))


def _replacing(
    processors: tuple[Any, ...], built: Mapping[str, bool]
) -> tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]]:
    """The caller's processors split as transformers' merge treats them: (the ones applied after the
    built-in processors, (stage, processor) for each that takes the place of one generate builds
    from an option: the first of the caller's of that exact class, where ``built`` says the option
    is set)."""
    rest: list[Any] = []
    replacing: dict[str, Any] = {}
    for processor in processors:
        stage = REPLACEABLE.get(_transformers_class(processor))
        if stage is not None and built.get(stage, False) and stage not in replacing:
            replacing[stage] = processor
        else:
            rest.append(processor)
    return tuple(rest), tuple(replacing.items())


# transformers' stopping criteria that its generate makes from the options (max_length, max_time,
# stop_strings, eos_token_id): a caller's criterion of one of these exact types takes the place of
# generate's own (_merge_criteria_processor_list: "the custom ... will take precedence")
_STOPS = ("MaxLengthCriteria", "MaxTimeCriteria", "StopStringCriteria", "EosTokenCriteria")


def _own_stops(stopping: Sequence[Any], beams: bool) -> dict[str, Any]:
    """The first of the caller's criteria of each of transformers' own kinds (_STOPS), by kind. In
    beam search a MaxLengthCriteria or EosTokenCriteria stays one more stop: there transformers'
    beams end at the config's eos, and its buffers are as long as max_new_tokens says (a longer
    MaxLengthCriteria raises an IndexError in transformers 5.23)."""
    kept = _STOPS if not beams else ("MaxTimeCriteria", "StopStringCriteria")
    own: dict[str, Any] = {}
    for criterion in stopping:
        if (kind := _transformers_class(criterion)) in kept:
            own.setdefault(kind, criterion)
    return own


def _transformers_class(value: Any) -> str:
    """The name of ``value``'s class where transformers defines it ("" otherwise): its generate merges
    a caller's processor or criterion with its own by exact class, a subclass of the caller's not."""
    kind = type(value)
    return kind.__name__ if kind.__module__.startswith("transformers.") else ""


def _criterion_new_tokens(criterion: Any, prompt: int) -> int:
    """The new tokens a caller's MaxLengthCriteria allows a prompt of ``prompt`` tokens: up to its
    ``max_length``, and one at least (transformers' loop makes a token before it asks the criteria)."""
    length = getattr(criterion, "max_length", None)
    if not isinstance(length, int) or isinstance(length, bool):
        raise ArgumentError(
            op=_GENERATE,
            arg="stopping_criteria",
            expected="a MaxLengthCriteria whose max_length is an int",
            found=repr(length)[:80],
        )
    return max(length - prompt, 1)


def _criterion_ids(criterion: Any) -> tuple[int, ...]:
    """The token ids a caller's EosTokenCriteria ends rows at."""
    ids: Any = getattr(criterion, "eos_token_id", None)
    values = ids.reshape(-1).tolist() if hasattr(ids, "reshape") else ids if isinstance(ids, (list, tuple)) else [ids]
    if not values or not all(isinstance(i, int) and not isinstance(i, bool) for i in values):
        raise ArgumentError(
            op=_GENERATE,
            arg="stopping_criteria",
            expected="an EosTokenCriteria of int token ids",
            found=repr(ids)[:80],
        )
    return tuple(values)


def _callables(value: Any, arg: str) -> tuple[Any, ...]:
    """A list of callables (transformers' LogitsProcessorList / StoppingCriteriaList, or any sequence
    of them) as a tuple; () for None."""
    if value is None:
        return ()
    items = tuple(value) if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else None
    if items is None or not all(callable(item) for item in items):
        raise ArgumentError(
            op=_GENERATE,
            arg=arg,
            expected="a list of callables (tokens, scores) -> "
            + ("scores (transformers' LogitsProcessorList)" if arg == "logits_processor" else "done rows"),
            found=repr(value)[:120],
        )
    return items


def _drafts(verify_plan: Any) -> int:
    """The drafted tokens a verify step takes: its tokens' dynamic length's upper bound, less the last
    token."""
    graph = verify_plan.graph
    length = graph.meta(graph.inputs[0]).shape[1]
    if isinstance(length, int):
        return length - 1
    return int(graph.signature.ranges[str(length)][1]) - 1


def _padding(mask: Any) -> Any:
    """Each row's left-padding slots (before its mask's first 1; 0 for a row of none), as transformers'
    generate gives them to its repetition penalty; None without a mask."""
    if mask is None or mask.dim() != 2:
        return None
    return (mask != 0).int().argmax(dim=1)


def _ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)


def _warn_right_padding(mask: Any, rows: int) -> None:
    """A UserWarning where a row of the caller's ends with padding (its mask's last place 0), as
    transformers' generate warns of right padding: a decoder goes on from the row's last place, so
    its new tokens follow the padding (as there: the tokens equal model.generate's)."""
    if mask is None or mask.dim() != 2 or not mask.shape[1]:
        return
    ending = (mask[:rows, -1] == 0).nonzero().flatten().tolist()
    if ending:
        import warnings

        warnings.warn(
            f"opcore generate: right padding in row(s) {ending[:8]} (the attention mask ends with 0): a "
            "decoder-only model goes on after the padding; tokenize with padding_side='left' "
            "(transformers' generate warns the same)",
            UserWarning,
            stacklevel=4,
        )


def _integer(value: Any) -> int | None:
    """``value`` as an int where it is one (a Python or numpy int, a one-element integer tensor:
    ``operator.index``); None where it is not (a bool, a float, a string)."""
    import operator

    if isinstance(value, bool) or str(getattr(value, "dtype", "")) == "torch.bool":
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _check_generator(generator: Any, device: Any, sampling: bool) -> None:
    """A call's ``generator``: a ``torch.Generator``, on the model's device type where it draws."""
    import torch

    if not isinstance(generator, torch.Generator):
        raise ArgumentError(
            op=_GENERATE,
            arg="generator",
            expected="a torch.Generator (or None: torch's global one)",
            found=type(generator).__name__,
            fix="generator=torch.Generator().manual_seed(0)",
        )
    where = device.type.value
    if sampling and generator.device.type != where:
        raise ArgumentError(
            op=_GENERATE,
            arg="generator",
            expected=f"a generator on {where}, where the model's logits are drawn from",
            found=f"a generator on {generator.device.type}",
            fix=f"generator=torch.Generator(device={where!r}).manual_seed(0)",
        )


def _call_ids(value: Any, arg: str) -> tuple[int, ...]:
    """A call's ``eos_token_id``: an int, or a list (or tensor) of them (empty: none), as transformers
    takes it; an ArgumentError for anything else."""
    single = _integer(value)
    if single is not None:
        return (single,)
    items = value.reshape(-1).tolist() if hasattr(value, "reshape") and hasattr(value, "tolist") else value
    if isinstance(items, Sequence) and not isinstance(items, (str, bytes)):
        ids = [_integer(item) for item in items]
        if all(i is not None for i in ids):
            return tuple(i for i in ids if i is not None)
    raise ArgumentError(op=_GENERATE, arg=arg, expected="a token id (int) or a list of them", found=repr(value)[:120])


class Session:
    """One conversation: its own KV cache and positions. Sessions of one model never see each
    other's state; ``reset()`` starts the conversation again (the cache is reused, not zeroed: what
    a slot held before is masked until written again)."""

    def __init__(self, lm: LanguageModel) -> None:
        import torch

        self.lm = lm
        graph = lm.decode_plan.graph
        device = str(lm.decode_plan.device)
        self.state = new_state(graph, device)
        self.mask = torch.zeros(lm.batch_size, lm.max_length, dtype=torch.long, device=device)
        self.positions = torch.zeros(lm.batch_size, dtype=torch.long, device=device)
        self.length = 0  # cache slots used
        # the slot a decode step writes, one tensor whose value each step sets: its memory stays the
        # same, so a graph runtime's request keeps it as set (no new input bound per token)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)
        # the decode step as a CUDA graph over this session's buffers (on cuda; made on its first step
        # with lm.cuda_graph): None not made yet, False its capture failed (the plan's notes say why)
        self.decode_graph: Any = None

    def reset(self) -> None:
        self.mask.zero_()
        self.positions.zero_()
        self.length = 0

    def prefill(self, input_ids: Any, attention_mask: Any = None) -> Any:
        """Write the prompt (batch, seq) into the cache after what it holds; the logits (batch,
        vocab) of each row's last position. attention_mask (batch, seq): 0 for left padding."""
        import torch

        ids = self.lm._rows(input_ids, "input_ids", "Session.prefill")
        length = ids.shape[1]
        if length == 0:
            raise ShapeError(
                op="Session.prefill",
                arg="input_ids",
                expected="at least one token",
                found="shape " + str(tuple(ids.shape)),
            )
        self.lm._room(self.length, length, 0)
        if attention_mask is None:
            given = torch.ones_like(ids)
        else:
            given = self.lm._mask(attention_mask, ids, "attention_mask", "input_ids", "Session.prefill")
        start = self.length
        slots = torch.arange(start, start + length, device=ids.device)
        self.mask[:, start : start + length] = given
        # each row counts its own tokens: left padding shifts a row's positions, as transformers does
        positions = self.positions[:, None] + given.cumsum(-1) - 1
        positions = positions.masked_fill(given == 0, 1)
        logits = self.lm._step(ids, positions, slots, self.mask, self.state)
        self.positions += given.sum(-1)
        self.length += length
        return logits[:, -1]

    def decode(self, tokens: Any) -> Any:
        """Write one token per row (batch,) into the cache; the logits (batch, vocab)."""
        ids = self.lm._rows(tokens.reshape(-1, 1) if hasattr(tokens, "reshape") else tokens, "tokens", "Session.decode")
        if ids.shape[1] != 1:
            raise ShapeError(
                op="Session.decode", arg="tokens", expected="one token per row", found=str(tuple(ids.shape))
            )
        self.lm._room(self.length, 1, 0)
        return self.step(ids)

    def step(self, ids: Any) -> Any:
        """``decode`` without its checks, for the loop that made ``ids`` (batch, 1) itself: int64
        tokens of the vocabulary, on the model's device, with room left in the cache."""
        at = self.length
        self.mask[:, at] = 1
        replay = self.decode_graph
        if replay is None and self.lm.cuda_graph:
            replay = self.decode_graph = self.lm._decode_graph(self, ids, at)
        if replay and self.lm.cuda_graph:
            logits = replay(ids, at)
        else:
            self.slot.fill_(at)
            logits = self.lm._decode(ids, self.positions[:, None], self.slot, self.mask, self.state, at)
        self.positions += 1
        self.length += 1
        return logits[:, -1]

    def verify(self, ids: Any) -> Any:
        """Write ``ids`` (batch, n), 1 <= n <= lm.draft_tokens + 1, into the cache after what it holds
        in one call of the verify step (``capture_lm(..., draft_tokens=)``); the logits (batch, n, vocab)
        of each position, where a decode step per token gives those of the last. Prompt lookup
        decoding writes the last token and the drafted ones, then ``crop``s the drafts the model did
        not make. One token is the decode step's (its logits (batch, 1, vocab))."""
        import torch

        lm = self.lm
        if lm.verify_plan is None:
            raise ArgumentError(
                op="Session.verify",
                arg="ids",
                expected="a language model captured with a verify step",
                found="draft_tokens=0 at capture",
                fix="capture_lm(..., draft_tokens=10)",
            )
        ids = lm._rows(ids, "ids", "Session.verify")
        count, length = ids.shape[1], lm.draft_tokens + 1
        if not 1 <= count <= length:
            raise ShapeError(
                op="Session.verify",
                arg="ids",
                expected=f"1 to {length} tokens per row (draft_tokens + 1)",
                found=str(tuple(ids.shape)),
            )
        lm._room(self.length, count, 0)
        if count == 1:
            return self.step(ids)[:, None]
        at = self.length
        slots = torch.arange(at, at + count, device=ids.device)
        positions = self.positions[:, None] + torch.arange(count, device=ids.device)
        self.mask[:, at : at + count] = 1
        logits = lm._logits(
            lm.verify_plan,
            [ids, positions, slots, self.mask],
            self.state,
            at + count - 1 if lm._verify_window else None,
        )
        self.positions += count
        self.length += count
        return logits

    def crop(self, length: int) -> None:
        """Keep the first ``length`` slots of the conversation (negative: drop that many from its end),
        as transformers' ``DynamicCache.crop``: what the dropped slots hold is masked until written
        again."""
        if not isinstance(length, int) or isinstance(length, bool):
            raise ArgumentError(op="Session.crop", arg="length", expected="an int", found=repr(length))
        keep = self.length + length if length < 0 else length
        if not 0 <= keep <= self.length:
            raise ArgumentError(
                op="Session.crop",
                arg="length",
                expected=f"0 to {self.length} slots (or -{self.length} to 0 to drop from the end)",
                found=str(length),
            )
        self.positions -= self.mask[:, keep : self.length].sum(-1)
        self.mask[:, keep : self.length] = 0
        self.length = keep


class LanguageModel:
    """A decoder captured for generation (``opcore.graph.capture_lm``): a prefill plan and a decode
    plan sharing the model's weights, and a default session."""

    def __init__(
        self,
        prefill_plan: Any,
        decode_plan: Any,
        *,
        batch_size: int,
        max_length: int,
        defaults: GenerationDefaults | None = None,
        verify_plan: Any = None,
    ) -> None:
        self.prefill_plan = prefill_plan  # None when max_length is 1
        self.decode_plan = decode_plan
        # the verify step of prompt lookup decoding: draft_tokens + 1 tokens, the logits of each (None: none)
        self.verify_plan = verify_plan
        self.draft_tokens = _drafts(verify_plan) if verify_plan is not None else 0
        self.batch_size = batch_size
        self.max_length = max_length
        self.defaults = defaults or GenerationDefaults()
        ids = decode_plan.graph.inputs[0]
        # token ids a step may take: the graph's declared bounds (the embedding's rows)
        self.vocab_size = decode_plan.graph.bounds[ids][1] + 1 if ids in decode_plan.graph.bounds else None
        # each cache buffer's slot dim (None: copied whole), which beam search's reorder narrows to
        self.slot_dims = slot_dims(decode_plan.graph)
        self.capture_seconds = 0.0
        self.load_seconds = 0.0
        self._session: Session | None = None
        # sessions a generate (or stream) is running on now, and those it made while the default one
        # was busy (another thread's generate, a stream not finished): kept for the next such call
        self._sessions_lock = threading.Lock()
        self._running: set[int] = set()
        self._spare: list[Session] = []
        # on cuda, each session's decode step replays as one CUDA graph (opcore.graph.decode_graph);
        # False: every session's steps run node by node from the next step on
        self.cuda_graph = str(decode_plan.device).startswith("cuda")
        # a windowed step (opcore.graph.split_attention: the decode step's, a prompt's, the verify
        # step's) reads the cache's first W slots, W its last slot + 1 rounded up to WINDOW_STEP: the
        # slot numbers it takes, sliced from these (None: no step reads a window)
        self._decode_window = WINDOW in decode_plan.graph.inputs
        self._prefill_window = prefill_plan is not None and WINDOW in prefill_plan.graph.inputs
        self._verify_window = verify_plan is not None and WINDOW in verify_plan.graph.inputs
        self.window_slots = None
        if self._decode_window or self._prefill_window or self._verify_window:
            import torch

            self.window_slots = torch.arange(max_length, device=str(decode_plan.device))

    # --- sessions and steps ------------------------------------------------------------------

    def session(self) -> Session:
        """A new conversation with its own cache.

        >>> a, b = lm.session(), lm.session()            # doctest: +SKIP
        """
        return Session(self)

    @property
    def default_session(self) -> Session:
        if self._session is None:
            self._session = Session(self)
        return self._session

    def prefill(self, input_ids: Any, attention_mask: Any = None) -> Any:
        """The default session's prefill (see Session.prefill)."""
        return self.default_session.prefill(input_ids, attention_mask)

    def decode(self, tokens: Any) -> Any:
        """The default session's decode (see Session.decode)."""
        return self.default_session.decode(tokens)

    def reset(self) -> None:
        """Start the default session again."""
        self.default_session.reset()

    def _rows(self, value: Any, arg: str, op: str = _GENERATE) -> Any:
        """``value`` (ids or a mask) as a (batch, seq) tensor on the model's device, checked: an error
        names ``op``, the call it came through."""
        import torch

        if not isinstance(value, torch.Tensor):
            try:
                value = torch.as_tensor(value)
            except Exception as error:
                what = "a mask of 0 and 1" if arg.endswith("attention_mask") else "a tensor of token ids"
                raise ArgumentError(op=op, arg=arg, expected=what, found=type(value).__name__) from error
        if value.dim() == 1:
            value = value[None]
        # an attention mask may be integers, bool or float (as transformers takes it), of 0 and 1
        mask = arg.endswith("attention_mask")
        flat = value.dtype.is_floating_point or value.dtype == torch.bool
        if value.dim() != 2 or value.dtype.is_complex or (flat and not mask):
            raise ArgumentError(
                op=op,
                arg=arg,
                expected=f"{'a mask of 0 and 1' if mask else 'integer ids'} of shape (batch, seq)",
                found=f"{value.dtype} of shape {tuple(value.shape)}",
                fix=_MASK_FIX if mask else "pass token ids (int64) as a (batch, seq) tensor",
            )
        if value.shape[0] != self.batch_size:
            raise ShapeError(
                op=op,
                arg=arg,
                expected=f"{self.batch_size} row(s), the batch size captured",
                found=f"{value.shape[0]} row(s)",
                fix="pass one mask row per prompt row"
                if mask
                else f"capture_lm(..., batch_size={value.shape[0]}) (generate pads fewer rows itself)",
            )
        if mask and value.dtype.is_floating_point:
            _zeros_and_ones(value, arg, op)  # before the conversion to integers, which would turn 0.5 into 0
        value = value.to(device=str(self.decode_plan.device), dtype=torch.long)
        if not mask and self.vocab_size is not None and value.numel():
            low, high = int(value.min()), int(value.max())
            if low < 0 or high >= self.vocab_size:
                raise ArgumentError(
                    op=op,
                    arg=arg,
                    expected=f"token ids in [0, {self.vocab_size}) (the model's vocabulary)",
                    found=f"id {low if low < 0 else high}",
                    fix="tokenize with the model's own tokenizer; pad with a valid id (pad_token_id) and mask it",
                )
        return value

    def _mask(self, value: Any, ids: Any, arg: str, ids_arg: str, op: str, rows: int | None = None) -> Any:
        """``value`` checked as the attention mask of ``ids`` (``_rows``, then ids' shape and 0 or 1 in
        every place: errors naming ``arg`` and ``ids_arg``, the shapes of the first ``rows`` rows, all
        where None)."""
        mask = self._rows(value, arg, op)
        shown = slice(rows)
        if mask.shape != ids.shape:
            raise ShapeError(
                op=op,
                arg=arg,
                expected=f"the shape of {ids_arg} {tuple(ids[shown].shape)}",
                found=str(tuple(mask[shown].shape)),
            )
        _zeros_and_ones(mask, arg, op)
        return mask

    def _room(self, used: int, prompt: int, new: int) -> None:
        if used + prompt + new > self.max_length:
            raise ShapeError(
                op=_GENERATE,
                arg="max_new_tokens",
                expected=f"prompt + new tokens <= max_length {self.max_length}",
                found=f"{used} in the cache + {prompt} prompt + {new} new = {used + prompt + new}",
                fix=f"capture_lm(..., max_length={used + prompt + new}) or generate fewer tokens",
            )

    def _step(self, ids: Any, positions: Any, slots: Any, mask: Any, state: Sequence[Any]) -> Any:
        if ids.shape[1] == 1:
            return self._decode(ids, positions, slots, mask, state, int(slots[0]))
        window = int(slots[-1]) if self._prefill_window else None
        return self._logits(self.prefill_plan, [ids, positions, slots, mask], state, window)

    def _decode(self, ids: Any, positions: Any, slot: Any, mask: Any, state: Sequence[Any], at: int) -> Any:
        """The decode plan on one token per row, written at cache slot ``slot`` (a 1-element int64
        tensor holding ``at``)."""
        return self._logits(self.decode_plan, [ids, positions, slot, mask], state, at if self._decode_window else None)

    def _logits(self, plan: Any, given: list[Any], state: Sequence[Any], last: int | None) -> Any:
        """``plan``'s logits on the protocol's inputs ``given`` and ``state``; where it reads a window,
        the slots up to ``last`` (the last slot the step writes) rounded up (``window_length``)."""
        import torch

        if last is not None:
            given.append(self.window_slots[: window_length(last, self.max_length)])  # type: ignore[index]
        with torch.no_grad():
            return plan.program.run([*given, *state])[0]

    def _decode_graph(self, session: Session, ids: Any, at: int) -> Any:
        """``session``'s decode step captured as a CUDA graph, or False where its capture failed (the
        decode plan's notes say why, once)."""
        import torch

        from opcore.graph.decode_graph import DecodeGraph, capture_failed

        try:
            with torch.no_grad():
                return DecodeGraph(
                    self.decode_plan.program, ids, session.positions[:, None], at, session.mask, session.state
                )
        except Exception as error:  # replay is an optimisation: the steps still run node by node
            note = capture_failed(error)
            if note not in self.decode_plan.notes:
                self.decode_plan.notes.append(note)
            return False

    # --- generate ------------------------------------------------------------------------------

    def generate(
        self,
        input_ids: Any = None,
        attention_mask: Any = None,
        *,
        inputs: Any = None,
        generation_config: Any = None,
        max_new_tokens: int | None = None,
        min_new_tokens: int | None = None,
        do_sample: bool | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        repetition_penalty: float | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        generator: Any = None,
        streamer: Any = None,
        session: Session | None = None,
        max_length: int | None = None,
        use_cache: bool | None = None,
        min_p: float | None = None,
        typical_p: float | None = None,
        epsilon_cutoff: float | None = None,
        eta_cutoff: float | None = None,
        no_repeat_ngram_size: int | None = None,
        encoder_repetition_penalty: float | None = None,
        encoder_no_repeat_ngram_size: int | None = None,
        bad_words_ids: Sequence[Sequence[int]] | None = None,
        sequence_bias: Any = None,
        max_time: float | None = None,
        top_h: float | None = None,
        exponential_decay_length_penalty: tuple[int, float] | None = None,
        renormalize_logits: bool | None = None,
        remove_invalid_values: bool | None = None,
        guidance_scale: float | None = None,
        negative_prompt_ids: Any = None,
        negative_prompt_attention_mask: Any = None,
        stop_strings: str | Sequence[str] | None = None,
        tokenizer: Any = None,
        num_return_sequences: int | None = None,
        num_beams: int | None = None,
        length_penalty: float | None = None,
        early_stopping: bool | str | None = None,
        return_dict_in_generate: bool | None = None,
        output_scores: bool | None = None,
        output_logits: bool | None = None,
        logits_processor: Sequence[Callable[[Any, Any], Any]] | None = None,
        stopping_criteria: Sequence[Callable[..., Any]] | None = None,
        prefix_allowed_tokens_fn: Callable[[int, Any], Sequence[int]] | None = None,
        prompt_lookup_num_tokens: int | None = None,
        max_matching_ngram_size: int | None = None,
        assistant_model: LanguageModel | None = None,
        num_assistant_tokens: int | None = None,
        assistant_confidence_threshold: float | None = None,
        **unsupported: Any,
    ) -> Any:
        """The prompt followed by up to ``max_new_tokens`` new tokens per row (batch, prompt + new),
        as transformers' ``generate``: rows that reached an eos are filled with ``pad_token_id``,
        and generation stops when every row has. The prompt is ``input_ids``, or ``inputs`` as
        transformers names it. ``generation_config``: a transformers GenerationConfig whose options
        (those it sets away from GenerationConfig()'s defaults) replace the model's generation config's
        for this call, as transformers merges them; keywords win over both (also ``min_length``,
        ``forced_bos_token_id``, ``forced_eos_token_id``, ``suppress_tokens`` and
        ``begin_suppress_tokens``: CONFIG_KEYWORDS, config options taken as keywords as transformers
        takes them). ``max_new_tokens`` None:
        up to ``max_length`` tokens in all (prompt included, as transformers counts it) where that is
        given, else the model's generation config's max_new_tokens or max_length, else 20 (these cut
        to the cache's room).
        ``min_new_tokens``, ``do_sample``, ``temperature``, ``top_k``, ``top_p``,
        ``repetition_penalty``, ``eos_token_id``, ``pad_token_id`` None: what the model's
        ``generation_config`` says, as transformers does (greedy where it says nothing; sampling's
        top_k 50 where it says nothing, transformers' default: ``top_k=0`` for none). ``streamer``:
        a callable receiving each step's tokens (batch,), or a transformers streamer (``put``/``end``).
        ``session``: the conversation to use (None: the default one, started again; where another call
        is running on it, from another thread or a stream not finished, a spare session: calls on
        several threads each run on a cache of their own). ``use_cache`` is
        taken for callers written for transformers and changes nothing: the tokens are those of
        transformers' generate with or without its cache, and the captured cache is what runs.
        ``num_beams`` > 1: beam search (with ``do_sample``, beam sampling), ``length_penalty`` and
        ``early_stopping`` as transformers' (opcore.graph.beam_search); prompt rows x num_beams must
        fit the batch captured, and it takes no streamer. ``return_dict_in_generate``: a
        ``GenerateOutput`` instead of the tensor, with each step's processed scores
        (``output_scores``) and logits (``output_logits``), and beam search's sequence scores and beam
        indices, as transformers' records. ``logits_processor``, ``stopping_criteria``,
        ``prefix_allowed_tokens_fn`` and ``stop_strings`` (with ``tokenizer``): the caller's own, applied
        where transformers' generate applies them (docs/generate.md). ``prompt_lookup_num_tokens``:
        prompt lookup decoding (opcore.graph.prompt_lookup; one prompt row, a model captured with
        ``draft_tokens`` at least that many), drafts of up to that many tokens from the row's own
        n-grams of up to ``max_matching_ngram_size`` (2) tokens, each verified in one step.
        ``assistant_model``: assisted generation (opcore.graph.assisted; a LanguageModel of the same
        vocabulary, one prompt row, this model captured with ``draft_tokens``): the assistant drafts up
        to ``num_assistant_tokens`` (20, cut to ``draft_tokens``) tokens a verify call, stopping after
        one it gives less than ``assistant_confidence_threshold`` (0.4) of its probability; greedy
        search's tokens, speculative sampling's when sampling.

        >>> out = lm.generate(ids, max_new_tokens=32, do_sample=True, top_p=0.9,
        ...                   generator=torch.Generator().manual_seed(0))     # doctest: +SKIP
        """
        import torch

        defaults = self._call_defaults(generation_config, unsupported, _GENERATE)
        input_ids = _prompt(input_ids, inputs, _GENERATE, defaults.bos_token_id)
        beams = self._beams(defaults, num_beams, length_penalty, early_stopping, num_return_sequences)
        if beams is not None and streamer is not None:
            raise ArgumentError(
                op=_GENERATE,
                arg="streamer",
                expected="no streamer with beam search (as transformers': its tokens are known at the end)",
                found=type(streamer).__name__,
                fix="pass num_beams=1 to stream greedy or sampled tokens",
            )
        for name, drafting in (
            ("prompt_lookup_num_tokens", prompt_lookup_num_tokens),
            ("assistant_model", assistant_model),
        ):
            if beams is not None and drafting is not None:
                raise ArgumentError(
                    op=_GENERATE,
                    arg=name,
                    expected="no beam search with drafts (transformers' generate refuses both together)",
                    found=f"num_beams={beams.num_beams}",
                    fix=f"pass num_beams=1, or leave {name} out",
                )
        copies = beams.num_beams if beams is not None else self._copies(defaults, num_return_sequences, do_sample)
        ids, mask, rows = self._pad_rows(input_ids, attention_mask, copies)
        wanted = self._outputs(defaults, return_dict_in_generate, output_scores, output_logits)
        work = self._work(
            defaults, ids, mask, rows, max_new_tokens, min_new_tokens, do_sample, temperature, top_k, top_p,
            repetition_penalty, eos_token_id, pad_token_id, generator, session, max_length,
            dict(min_p=min_p, typical_p=typical_p, epsilon_cutoff=epsilon_cutoff, eta_cutoff=eta_cutoff,
                 no_repeat_ngram_size=no_repeat_ngram_size, bad_words_ids=bad_words_ids,
                 encoder_repetition_penalty=encoder_repetition_penalty,
                 encoder_no_repeat_ngram_size=encoder_no_repeat_ngram_size,
                 sequence_bias=sequence_bias, max_time=max_time, top_h=top_h,
                 exponential_decay_length_penalty=exponential_decay_length_penalty, logits_processor=logits_processor,
                 renormalize_logits=renormalize_logits, remove_invalid_values=remove_invalid_values,
                 guidance_scale=guidance_scale, negative_prompt_ids=negative_prompt_ids,
                 negative_prompt_attention_mask=negative_prompt_attention_mask, copies=copies,
                 stopping_criteria=stopping_criteria, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
                 stop_strings=stop_strings, tokenizer=tokenizer, prompt_lookup_num_tokens=prompt_lookup_num_tokens,
                 max_matching_ngram_size=max_matching_ngram_size, assistant_model=assistant_model,
                 num_assistant_tokens=num_assistant_tokens,
                 assistant_confidence_threshold=assistant_confidence_threshold),
            beams,
        )  # fmt: skip
        if wanted is not None and (wanted.scores or wanted.logits):
            work = replace(work, record=[])
        if beams is not None:
            sequences, sequences_scores, beam_indices = self._beam_search(work, beams)
            if wanted is None:
                return sequences
            return _output(wanted, sequences, work.record, sequences_scores, beam_indices)
        produced: list[Any] = []
        put = _stream_target(streamer, ids[:rows])
        for tokens in self._loop(work):
            produced.append(tokens)
            if put is not None:
                put(tokens)
        if streamer is not None and hasattr(streamer, "end"):
            streamer.end()
        new = torch.stack(produced, 1) if produced else ids[:rows, :0]
        sequences = torch.cat([ids[:rows], new], 1)
        return sequences if wanted is None else _output(wanted, sequences, work.record)

    def stream(
        self,
        input_ids: Any = None,
        attention_mask: Any = None,
        *,
        inputs: Any = None,
        generation_config: Any = None,
        max_new_tokens: int | None = None,
        min_new_tokens: int | None = None,
        do_sample: bool | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        repetition_penalty: float | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        generator: Any = None,
        session: Session | None = None,
        max_length: int | None = None,
        use_cache: bool | None = None,
        min_p: float | None = None,
        typical_p: float | None = None,
        epsilon_cutoff: float | None = None,
        eta_cutoff: float | None = None,
        no_repeat_ngram_size: int | None = None,
        encoder_repetition_penalty: float | None = None,
        encoder_no_repeat_ngram_size: int | None = None,
        bad_words_ids: Sequence[Sequence[int]] | None = None,
        sequence_bias: Any = None,
        max_time: float | None = None,
        top_h: float | None = None,
        exponential_decay_length_penalty: tuple[int, float] | None = None,
        renormalize_logits: bool | None = None,
        remove_invalid_values: bool | None = None,
        guidance_scale: float | None = None,
        negative_prompt_ids: Any = None,
        negative_prompt_attention_mask: Any = None,
        stop_strings: str | Sequence[str] | None = None,
        tokenizer: Any = None,
        num_return_sequences: int | None = None,
        num_beams: int | None = None,
        logits_processor: Sequence[Callable[[Any, Any], Any]] | None = None,
        stopping_criteria: Sequence[Callable[..., Any]] | None = None,
        prefix_allowed_tokens_fn: Callable[[int, Any], Sequence[int]] | None = None,
        prompt_lookup_num_tokens: int | None = None,
        max_matching_ngram_size: int | None = None,
        assistant_model: LanguageModel | None = None,
        num_assistant_tokens: int | None = None,
        assistant_confidence_threshold: float | None = None,
        **unsupported: Any,
    ) -> Iterator[Any]:
        """The new tokens (batch,) step by step, as ``generate`` makes them (its options, but streamer
        and beam search: ``num_beams=1`` streams a model whose generation config asks for beams).

        >>> for tokens in lm.stream(ids, max_new_tokens=8): print(tokens.tolist())   # doctest: +SKIP
        """
        defaults = self._call_defaults(generation_config, unsupported, "LanguageModel.stream")
        input_ids = _prompt(input_ids, inputs, "LanguageModel.stream", defaults.bos_token_id)
        beams = num_beams if num_beams is not None else defaults.num_beams
        if beams is not None and beams != 1:
            said = "" if num_beams is not None else " (the model's generation_config.num_beams)"
            raise ArgumentError(
                op="LanguageModel.stream",
                arg="num_beams",
                expected="1: stream yields each step's tokens, and beam search's are known at the end",
                found=f"{beams!r}{said}",
                fix="call generate(..., num_beams=...) for beam search, or pass num_beams=1 to stream",
            )
        copies = self._copies(defaults, num_return_sequences, do_sample)
        ids, mask, rows = self._pad_rows(input_ids, attention_mask, copies)
        work = self._work(
            defaults, ids, mask, rows, max_new_tokens, min_new_tokens, do_sample, temperature, top_k, top_p,
            repetition_penalty, eos_token_id, pad_token_id, generator, session, max_length,
            dict(min_p=min_p, typical_p=typical_p, epsilon_cutoff=epsilon_cutoff, eta_cutoff=eta_cutoff,
                 no_repeat_ngram_size=no_repeat_ngram_size, bad_words_ids=bad_words_ids,
                 encoder_repetition_penalty=encoder_repetition_penalty,
                 encoder_no_repeat_ngram_size=encoder_no_repeat_ngram_size,
                 sequence_bias=sequence_bias, max_time=max_time, top_h=top_h,
                 exponential_decay_length_penalty=exponential_decay_length_penalty, logits_processor=logits_processor,
                 renormalize_logits=renormalize_logits, remove_invalid_values=remove_invalid_values,
                 guidance_scale=guidance_scale, negative_prompt_ids=negative_prompt_ids,
                 negative_prompt_attention_mask=negative_prompt_attention_mask, copies=copies,
                 stopping_criteria=stopping_criteria, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
                 stop_strings=stop_strings, tokenizer=tokenizer, prompt_lookup_num_tokens=prompt_lookup_num_tokens,
                 max_matching_ngram_size=max_matching_ngram_size, assistant_model=assistant_model,
                 num_assistant_tokens=num_assistant_tokens,
                 assistant_confidence_threshold=assistant_confidence_threshold),
        )  # fmt: skip
        return self._loop(work)

    def _call_defaults(self, generation_config: Any, unsupported: Mapping[str, Any], op: str) -> GenerationDefaults:
        """The defaults of one call: the model's, or with ``generation_config`` (a transformers
        GenerationConfig) each option it sets away from GenerationConfig()'s own default in their
        place, as transformers' generate merges a config passed to it with the model's; then the
        call's CONFIG_KEYWORDS among ``unsupported`` (the keywords generate's signature does not
        name), any other of them an ArgumentError (``_refuse``). Options of the config that opcore
        does not apply (contrastive search, DoLa...) are an ArgumentError, as the same keywords
        are."""
        defaults, rest = _config_keywords(self._configured(generation_config, op), unsupported, op)
        _cache_implementation(rest.pop("cache_implementation", None), op)
        rest = _without_idle(rest)
        if (watermarking := _watermarking(rest.pop("watermarking_config", None))) is not None:
            defaults = replace(defaults, watermarking=watermarking)
        _cache_implementation(getattr(generation_config, "cache_implementation", None), op, "generation_config.")
        _refuse(rest)
        return defaults

    def _configured(self, generation_config: Any, op: str) -> GenerationDefaults:
        """The model's defaults merged with ``generation_config`` (see ``_call_defaults``)."""
        if generation_config is None:
            return self.defaults
        blank = _blank_config(generation_config, op)
        given = GenerationDefaults.of(_Configured(generation_config))
        unset = GenerationDefaults.of(_Configured(blank))
        if given.not_applied != unset.not_applied:
            raise ArgumentError(
                op=op,
                arg="generation_config",
                expected="a GenerationConfig of options generate applies",
                found=f"one that sets {', '.join(sorted(set(given.not_applied) - set(unset.not_applied)))}",
                fix="use the model's own generate for that decoding, or leave those options at their defaults",
            )
        said = {
            name: getattr(given, name)
            for name in (item.name for item in fields(GenerationDefaults))
            if getattr(given, name) != getattr(unset, name)
        }
        return replace(self.defaults, **said)

    def _outputs(
        self, defaults: GenerationDefaults, return_dict_in_generate: Any, output_scores: Any, output_logits: Any
    ) -> _Outputs | None:
        """What generate returns beside the sequences, each the generation config's where the call leaves
        it None (transformers' defaults False); None: the sequences alone."""
        said = {
            "return_dict_in_generate": return_dict_in_generate,
            "output_scores": output_scores,
            "output_logits": output_logits,
        }
        for name, value in said.items():
            if value is None:
                said[name] = getattr(defaults, name)
            elif not isinstance(value, bool):
                raise ArgumentError(op=_GENERATE, arg=name, expected="True, False or None", found=repr(value))
        if not said["return_dict_in_generate"]:
            return None  # as transformers: scores and logits are given only in the record
        return _Outputs(scores=bool(said["output_scores"]), logits=bool(said["output_logits"]))

    def _beams(
        self,
        defaults: GenerationDefaults,
        num_beams: Any,
        length_penalty: Any,
        early_stopping: Any,
        num_return_sequences: Any,
    ) -> Beams | None:
        """Beam search's settings, each the generation config's where the call leaves it None (then
        transformers' defaults); None for one beam."""
        beams = num_beams if num_beams is not None else defaults.num_beams if defaults.num_beams is not None else 1
        if beams == 1 and isinstance(beams, int) and not isinstance(beams, bool):
            return None
        return Beams(
            num_beams=beams,
            length_penalty=length_penalty
            if length_penalty is not None
            else defaults.length_penalty
            if defaults.length_penalty is not None
            else 1.0,
            early_stopping=early_stopping
            if early_stopping is not None
            else defaults.early_stopping
            if defaults.early_stopping is not None
            else False,
            num_return_sequences=num_return_sequences
            if num_return_sequences is not None
            else defaults.num_return_sequences or 1,
        )

    def _copies(self, defaults: GenerationDefaults, num_return_sequences: Any, do_sample: bool | None) -> int:
        """Sequences per prompt: the call's num_return_sequences, else the generation config's, else 1;
        more than one only when sampling (greedy search makes the same sequence again: transformers'
        generate refuses it too)."""
        copies = num_return_sequences if num_return_sequences is not None else defaults.num_return_sequences
        if copies is None:
            return 1
        if not isinstance(copies, int) or isinstance(copies, bool) or copies < 1:
            raise ArgumentError(op=_GENERATE, arg="num_return_sequences", expected="an int >= 1", found=repr(copies))
        sampling = do_sample if do_sample is not None else defaults.do_sample
        if copies > 1 and not sampling:
            raise ArgumentError(
                op=_GENERATE,
                arg="num_return_sequences",
                expected="1 with greedy search (it makes one sequence per prompt)",
                found=str(copies),
                fix="pass do_sample=True to draw that many sequences per prompt",
            )
        return copies

    def _pad_rows(self, input_ids: Any, attention_mask: Any, copies: int = 1) -> tuple[Any, Any, int]:
        """Prompt and mask with as many rows as captured: each row ``copies`` times in a row (transformers'
        num_return_sequences expansion); fewer rows are padded with copies of the first (their tokens
        are dropped); more is a ShapeError."""
        import torch

        ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.as_tensor(input_ids)
        if ids.dim() == 1:
            ids = ids[None]
        mask = attention_mask
        if mask is not None and not isinstance(mask, torch.Tensor):
            mask = torch.as_tensor(mask)
        if mask is not None and mask.dim() == 1:
            mask = mask[None]
        if copies > 1 and ids.dim() == 2:
            ids = ids.repeat_interleave(copies, dim=0)
            if mask is not None and mask.dim() == 2:
                mask = mask.repeat_interleave(copies, dim=0)
        rows = ids.shape[0]
        if ids.dim() == 2 and 0 < rows < self.batch_size:
            extra = self.batch_size - rows
            ids = torch.cat([ids, ids[:1].expand(extra, -1)])
            if mask is not None and mask.dim() == 2:
                mask = torch.cat([mask, mask[:1].expand(extra, -1)])
        return ids, mask, rows

    def _work(
        self,
        defaults: GenerationDefaults,
        ids: Any,
        mask: Any,
        rows: int,
        max_new_tokens: int | None,
        min_new_tokens: int | None,
        do_sample: bool | None,
        temperature: float | None,
        top_k: int | None,
        top_p: float | None,
        repetition_penalty: float | None,
        eos_token_id: Any,
        pad_token_id: int | None,
        generator: Any,
        session: Session | None,
        max_length: int | None = None,
        more: Mapping[str, Any] | None = None,
        beams: Beams | None = None,
    ) -> _Work:
        """The call's options resolved (each the generation config's where the call leaves it None) and
        checked, before any work."""
        if session is not None and (not isinstance(session, Session) or session.lm is not self):
            raise ArgumentError(
                op=_GENERATE,
                arg="session",
                expected="a session of this model (lm.session())",
                found=type(session).__name__ if not isinstance(session, Session) else "a session of another model",
                fix="session = lm.session() of the model you call generate on (or leave session out)",
            )
        ids = self._rows(ids, "input_ids")
        _warn_right_padding(mask, rows)
        extra = more or {}
        processing = self._processing(defaults, extra, do_sample if do_sample is not None else defaults.do_sample)
        prefix = extra.get("prefix_allowed_tokens_fn")
        if prefix is not None and not callable(prefix):
            raise ArgumentError(
                op=_GENERATE,
                arg="prefix_allowed_tokens_fn",
                expected="a callable (batch_id, row tokens) -> allowed token ids",
                found=type(prefix).__name__,
            )
        used = session.length if session is not None else 0
        if beams is not None and used:
            raise ArgumentError(
                op=_GENERATE,
                arg="session",
                expected="a session holding no conversation: beam search starts one (its beams take the rows)",
                found=f"a session holding {used} token(s) per row",
                fix="session.reset() it, pass a new lm.session(), or continue with the returned sequence as the prompt",
            )
        if beams is not None:
            self._beams_fit(beams)
        if max_new_tokens is None:
            if max_length is not None:
                max_new_tokens = _new_tokens_to(max_length, ids.shape[1])
            else:
                max_new_tokens = self._configured_new_tokens(defaults, ids.shape[1], used)
        if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
            raise ArgumentError(op=_GENERATE, arg="max_new_tokens", expected="an int >= 0", found=repr(max_new_tokens))
        # the caller's criteria of the kinds generate makes take their places (transformers' merge)
        stopping = _callables(extra.get("stopping_criteria"), "stopping_criteria")
        own = _own_stops(stopping, beams is not None)
        configured = max_new_tokens  # the forced eos's last token counts from it, as transformers' config
        if "MaxLengthCriteria" in own:
            max_new_tokens = _criterion_new_tokens(own["MaxLengthCriteria"], ids.shape[1])
        self._room(used, ids.shape[1], max_new_tokens)
        # the processors transformers' generate builds for the minimum: MinLength for the config's
        # min_length, and MinNewTokensLength beside it for min_new_tokens (it sets min_length from it)
        minimum: tuple[str, ...] = ("min_length", "min_new_tokens")
        if min_new_tokens is None:
            least = defaults.min_new_tokens
            if least is None and defaults.min_length is not None:
                least, minimum = max(defaults.min_length - ids.shape[1], 0), ("min_length",)
            min_new_tokens = least or 0
        eos = _call_ids(eos_token_id, "eos_token_id") if eos_token_id is not None else defaults.eos_token_ids
        pad = _integer(pad_token_id) if pad_token_id is not None else defaults.pad_token_id
        if pad_token_id is not None and pad is None:
            raise ArgumentError(
                op=_GENERATE, arg="pad_token_id", expected="a token id (int)", found=repr(pad_token_id)[:120]
            )
        if pad is None:
            pad = eos[0] if eos else 0
        if generator is not None:
            sampling = do_sample if do_sample is not None else defaults.do_sample
            _check_generator(generator, self.decode_plan.device, bool(sampling))
        sampled: dict[str, Any] = dict(
            temperature=temperature if temperature is not None else defaults.temperature,
            top_k=top_k if top_k is not None else defaults.top_k if defaults.top_k is not None else TOP_K,
            top_p=top_p if top_p is not None else defaults.top_p,
        )
        if do_sample is None:
            do_sample = defaults.do_sample
        if repetition_penalty is None:
            repetition_penalty = defaults.repetition_penalty
        max_time = processing.pop("max_time")
        bos = defaults.forced_bos_token_id
        guide = self._guidance(defaults, extra, rows, max_new_tokens, beams)
        watermark = self._watermark(defaults.watermarking)
        built = {  # the processors transformers' generate builds from these options, by stage
            "guidance_scale": guide is not None,
            "sequence_bias": bool(processing["sequence_bias"]),
            "repetition_penalty": repetition_penalty is not None and repetition_penalty != 1.0,
            "encoder_repetition_penalty": processing["encoder_repetition_penalty"] is not None,
            "no_repeat_ngram_size": bool(processing["no_repeat_ngram_size"]),
            "encoder_no_repeat_ngram_size": bool(processing["encoder_no_repeat_ngram_size"]),
            "bad_words_ids": bool(processing["bad_words_ids"]),
            **{stage: bool(min_new_tokens and eos) for stage in minimum},
            "prefix_allowed_tokens_fn": prefix is not None,
            "forced_bos_token_id": bos is not None,
            "forced_eos_token_id": bool(defaults.forced_eos_token_ids),
            "remove_invalid_values": processing["remove_invalid_values"],
            "exponential_decay_length_penalty": processing["exponential_decay_length_penalty"] is not None,
            "suppress_tokens": bool(defaults.suppress_tokens),
            "begin_suppress_tokens": bool(defaults.begin_suppress_tokens),
        }
        processors, replacing = _replacing(_callables(extra.get("logits_processor"), "logits_processor"), built)
        choice = Choice(
            do_sample=bool(do_sample), repetition_penalty=repetition_penalty, min_new_tokens=min_new_tokens,
            eos_token_ids=eos, generator=generator, **(sampled if do_sample else {}),
            # as transformers' processors count the row's length: bos where the prompt is one token
            forced_bos_token_id=bos if ids.shape[1] == 1 else None,
            forced_eos_token_ids=defaults.forced_eos_token_ids, last_new_token=configured - 1,
            suppress_tokens=defaults.suppress_tokens, begin_suppress_tokens=defaults.begin_suppress_tokens,
            # transformers' begin index: the first new token, the second where a one-token prompt gets a forced bos
            begin_new_token=1 if ids.shape[1] == 1 and bos is not None else 0,
            # a bad word that is an eos id alone stays possible, as transformers' NoBadWords keeps it
            bad_words_ids=tuple(w for w in processing.pop("bad_words_ids") if not (len(w) == 1 and w[0] in eos)),
            # transformers' warpers keep an eos and one more token per beam (two without an eos)
            keep=(len(eos) + 1 if eos else 2) if beams is not None else 1,
            prefix_allowed_tokens_fn=prefix, num_beams=beams.num_beams if beams is not None else 1,
            processors=processors, replacing=replacing, minimum=minimum,
            # the caller's guidance processor in its place needs no branch of the model's
            guidance=guide if "guidance_scale" not in dict(replacing) else None,
            watermark=watermark,
            # the prompt's rows (each copied as the prompt is), which the Encoder* processors read
            prompt=ids[:rows] if processing["encoder_repetition_penalty"] or processing["encoder_no_repeat_ngram_size"]
            else None,
            **processing,
        )  # fmt: skip
        stop = extra.get("stop_strings")
        stop_strings = _strings(stop, "stop_strings") if stop is not None else defaults.stop_strings
        if stop_strings and "StopStringCriteria" not in own:
            stopping = (_stop_strings_criterion(stop_strings, extra.get("tokenizer"), stop is None), *stopping)
        if "MaxTimeCriteria" in own:  # the caller's, in the list, counts the time instead
            max_time = None
        stop_eos = eos
        if "EosTokenCriteria" in own:  # its ids end the rows (and finished rows take the pad)
            stop_eos = _criterion_ids(own["EosTokenCriteria"])
        # the ones generate's loop does itself: the length (max_new_tokens above), eos (stop_eos)
        taken = [own[kind] for kind in ("MaxLengthCriteria", "EosTokenCriteria") if kind in own]
        stopping = tuple(c for c in stopping if not any(c is t for t in taken))
        lookup: Lookup | Assistant | None
        if extra.get("assistant_model") is not None:
            lookup = self._assistant(extra, rows)
        else:
            lookup = self._lookup(
                defaults, extra.get("prompt_lookup_num_tokens"), extra.get("max_matching_ngram_size"), rows, beams
            )
        if lookup is not None and choice.guidance is not None:
            raise ArgumentError(
                op=_GENERATE,
                arg="guidance_scale",
                expected="no guidance with drafts (its branch takes one token a step)",
                found=f"guidance_scale={guide.scale if guide is not None else None} with "
                + ("assistant_model" if isinstance(lookup, Assistant) else "prompt_lookup_num_tokens"),
                fix="generate without drafts, or leave guidance_scale out (1)",
            )
        return _Work(
            ids, mask, rows, max_new_tokens, choice, stop_eos, pad, session, max_time, stopping=stopping, lookup=lookup
        )

    def _watermark(self, record: str | None) -> Any:
        """The watermark processor transformers' generate builds from a watermarking config
        (``construct_processor(vocab size, device)``, one per call: its state is the call's), or None.
        It is transformers' own class: an ArgumentError where transformers is not installed or the
        options are not valid."""
        if record is None:
            return None
        import json

        said = json.loads(record)
        try:
            from transformers import generation
        except ImportError as error:
            raise ArgumentError(
                op=_GENERATE,
                arg="watermarking_config",
                expected="transformers installed: the watermark is its processor",
                found="no transformers",
                fix="pip install transformers, or generate without watermarking_config",
            ) from error
        if self.vocab_size is None:
            raise ArgumentError(
                op=_GENERATE,
                arg="watermarking_config",
                expected="a model whose token ids have declared bounds (the vocabulary's size)",
                found="no bounds on the plan's ids input",
            )
        try:
            config = getattr(generation, said["class"]).from_dict(said["options"])
            config.validate()
        except (TypeError, ValueError) as error:
            raise ArgumentError(
                op=_GENERATE, arg="watermarking_config", expected="options transformers takes", found=str(error)[:200]
            ) from error
        return config.construct_processor(self.vocab_size, str(self.decode_plan.device))

    def _guidance(
        self, defaults: GenerationDefaults, extra: Mapping[str, Any], rows: int, new: int, beams: Beams | None
    ) -> Guidance | None:
        """Classifier-free guidance's branch (opcore.graph.guidance) where the call or the generation config
        sets a guidance_scale other than 1 (None otherwise: a negative prompt alone does nothing, as in
        transformers); its negative prompt checked before any work: a row per prompt row (each copied
        as the prompt is, for beams or num_return_sequences), room in a cache for it and the new tokens."""
        said = extra.get("guidance_scale")
        scale = guidance_scale(said) if said is not None else defaults.guidance_scale
        if scale is None:
            return None
        negative = extra.get("negative_prompt_ids")
        if negative is None:
            return Guidance(scale)
        copies = beams.num_beams if beams is not None else int(extra.get("copies") or 1)
        ids, mask, given = self._pad_rows(negative, extra.get("negative_prompt_attention_mask"), copies)
        if given != rows:
            raise ShapeError(
                op=_GENERATE,
                arg="negative_prompt_ids",
                expected=f"{rows // copies} row(s), one per prompt row",
                found=f"{given // copies} row(s)",
                fix="pass one negative prompt row per prompt row (repeat it for each)",
            )
        ids = self._rows(ids, "negative_prompt_ids")
        if mask is not None:
            mask = self._mask(mask, ids, "negative_prompt_attention_mask", "negative_prompt_ids", _GENERATE, rows)
        if ids.shape[1] == 0:
            raise ShapeError(
                op=_GENERATE, arg="negative_prompt_ids", expected="at least one token", found=str(tuple(ids.shape))
            )
        if ids.shape[1] + max(new - 1, 0) > self.max_length:  # its branch takes each new token but the last
            raise ShapeError(
                op=_GENERATE,
                arg="negative_prompt_ids",
                expected=f"negative prompt + new tokens - 1 <= max_length {self.max_length} (its branch's cache)",
                found=f"{ids.shape[1]} + {new} - 1",
                fix="a shorter negative prompt, fewer new tokens, or "
                f"capture_lm(..., max_length={ids.shape[1] + new - 1})",
            )
        return Guidance(scale, ids, mask)

    def _assistant(self, extra: Mapping[str, Any], rows: int) -> Assistant:
        """Assisted generation's settings (opcore.graph.assisted), checked: a captured assistant of this
        vocabulary on this device, one prompt row, a verify step, no prompt lookup beside it."""
        assistant = extra["assistant_model"]
        arg = "assistant_model"
        if not isinstance(assistant, LanguageModel):
            raise ArgumentError(
                op=_GENERATE,
                arg=arg,
                expected="a LanguageModel (opcore.graph.capture_lm of the smaller model)",
                found=type(assistant).__name__,
                fix="assistant = opcore.graph.capture_lm(small_model); lm.generate(..., assistant_model=assistant)",
            )
        if extra.get("prompt_lookup_num_tokens") is not None:
            raise ArgumentError(
                op=_GENERATE,
                arg="prompt_lookup_num_tokens",
                expected="drafts from one source (transformers' generate refuses both together)",
                found="both prompt_lookup_num_tokens and assistant_model",
                fix="leave one of them out",
            )
        if assistant.vocab_size != self.vocab_size:
            raise ArgumentError(
                op=_GENERATE,
                arg=arg,
                expected=f"a model of this one's vocabulary ({self.vocab_size} token ids)",
                found=f"{assistant.vocab_size} token ids",
                fix="an assistant of the same tokenizer (assistants of another are not supported)",
            )
        if str(assistant.decode_plan.device) != str(self.decode_plan.device):
            raise ArgumentError(
                op=_GENERATE,
                arg=arg,
                expected=f"an assistant on {self.decode_plan.device}, as this model",
                found=str(assistant.decode_plan.device),
                fix=f"capture the assistant with capture_lm(..., device={str(self.decode_plan.device)!r})",
            )
        count = extra.get("num_assistant_tokens")
        if count is None:
            count = min(NUM_ASSISTANT_TOKENS, self.draft_tokens) or NUM_ASSISTANT_TOKENS
        count = self._drafting("num_assistant_tokens", count, rows, arg)
        threshold = extra.get("assistant_confidence_threshold", None)
        threshold = ASSISTANT_CONFIDENCE if threshold is None else threshold
        if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
            raise ArgumentError(
                op=_GENERATE, arg="assistant_confidence_threshold", expected="a number in [0, 1]", found=repr(threshold)
            )
        return Assistant(assistant, count, float(threshold) or None)

    def _drafting(self, name: str, count: Any, rows: int, source: str | None = None) -> int:
        """``count`` drafts a verify call (the option ``name``), checked: an int >= 1, at most the verify
        step's drafts, one prompt row (``source``: the option that asks for drafts; ``name`` itself
        where None)."""
        source = source or name
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ArgumentError(op=_GENERATE, arg=name, expected="an int >= 1", found=repr(count))
        if not self.draft_tokens:
            raise ArgumentError(
                op=_GENERATE,
                arg=source,
                expected="a language model captured with a verify step for the drafts",
                found=f"{name}={count}, and this one was captured with draft_tokens=0",
                fix=f"opcore.graph.capture_lm(model, ..., draft_tokens={count})",
            )
        if count > self.draft_tokens:
            raise ArgumentError(
                op=_GENERATE,
                arg=name,
                expected=f"at most {self.draft_tokens}, the drafts the verify step was captured for",
                found=str(count),
                fix=f"{name}={self.draft_tokens}, or capture_lm(..., draft_tokens={count})",
            )
        if rows != 1:
            raise ArgumentError(
                op=_GENERATE,
                arg=source,
                expected="one prompt row (and one sequence for it), as transformers' assisted generation",
                found=f"{rows} rows",
                fix=f"generate each prompt on its own, or leave {source} out",
            )
        return count

    def _lookup(
        self, defaults: GenerationDefaults, num_tokens: Any, ngram_size: Any, rows: int, beams: Beams | None
    ) -> Lookup | None:
        """Prompt lookup's settings: the call's ``prompt_lookup_num_tokens`` (checked: one prompt row, a
        verify step of that many drafts at least; generate refuses it with beams), else the generation
        config's where this capture has a verify step (cut to its drafts; one token a step for several
        rows or beams, which it serves as transformers does not); None: one token a step."""
        if num_tokens is None:
            configured = defaults.prompt_lookup_num_tokens
            if configured is None or not self.draft_tokens or rows != 1 or beams is not None:
                return None
            num_tokens = min(configured, self.draft_tokens)
        num_tokens = self._drafting("prompt_lookup_num_tokens", num_tokens, rows)
        if ngram_size is None:
            ngram_size = defaults.max_matching_ngram_size or NGRAM_SIZE
        if not isinstance(ngram_size, int) or isinstance(ngram_size, bool) or ngram_size < 1:
            raise ArgumentError(
                op=_GENERATE, arg="max_matching_ngram_size", expected="an int >= 1", found=repr(ngram_size)
            )
        return Lookup(num_tokens, ngram_size)

    def _processing(self, defaults: GenerationDefaults, more: Mapping[str, Any], do_sample: bool) -> dict[str, Any]:
        """The call's sequence bias, n-gram and bad-word bans, min-p / typical / epsilon / eta warpers
        (sampling only, as transformers applies them) and max_time, each the generation config's where
        the call leaves it None; token ids checked against the vocabulary before any work."""
        taken: dict[str, Any] = {name: more.get(name) for name in _PROCESSING}
        for name in _PROCESSING:
            if taken[name] is None:
                taken[name] = getattr(defaults, name) or None  # (): none configured
        taken["sequence_bias"] = _biases(taken["sequence_bias"], "sequence_bias")
        taken["bad_words_ids"] = _words(taken["bad_words_ids"], "bad_words_ids")
        taken["exponential_decay_length_penalty"] = _decay(
            taken["exponential_decay_length_penalty"], "exponential_decay_length_penalty"
        )
        if not do_sample:
            for name in ("min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h"):
                taken[name] = None
        for name in ("renormalize_logits", "remove_invalid_values"):
            if taken[name] is not None and not isinstance(taken[name], bool):
                raise ArgumentError(op=_GENERATE, arg=name, expected="a bool", found=repr(taken[name]))
            taken[name] = bool(taken[name])
        penalty = taken["encoder_repetition_penalty"]
        if penalty is not None and (
            isinstance(penalty, bool) or not isinstance(penalty, numbers.Real) or not float(penalty) > 0
        ):
            raise ArgumentError(
                op=_GENERATE, arg="encoder_repetition_penalty", expected="a float > 0", found=repr(penalty)
            )
        taken["encoder_repetition_penalty"] = None if penalty is None or penalty == 1.0 else float(penalty)
        size = taken["encoder_no_repeat_ngram_size"]
        if size is not None and (isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0):
            raise ArgumentError(
                op=_GENERATE, arg="encoder_no_repeat_ngram_size", expected="an int >= 0", found=repr(size)
            )
        taken["encoder_no_repeat_ngram_size"] = int(size) if size else None
        max_time = taken["max_time"]
        if max_time is not None and (
            not isinstance(max_time, (int, float)) or isinstance(max_time, bool) or max_time <= 0
        ):
            raise ArgumentError(op=_GENERATE, arg="max_time", expected="seconds > 0", found=repr(max_time))
        if self.vocab_size is not None:
            for name, sequences in (
                ("sequence_bias", [sequence for sequence, _ in taken["sequence_bias"]]),
                ("bad_words_ids", taken["bad_words_ids"]),
            ):
                outside = sorted({i for sequence in sequences for i in sequence if i >= self.vocab_size})
                if outside:
                    raise ArgumentError(
                        op=_GENERATE,
                        arg=name,
                        expected=f"token ids below the vocabulary's {self.vocab_size}",
                        found=", ".join(map(str, outside[:8])),
                    )
        return taken

    def _configured_new_tokens(self, defaults: GenerationDefaults, prompt: int, used: int) -> int:
        """The new tokens where the call gives no length, as transformers' generate: the generation
        config's max_new_tokens, else its max_length (the prompt counted: a prompt not below it is an
        error there and here), else 20; cut to what the cache holds after the prompt (a config speaks
        of the model, not of this capture, and transformers cuts its 20 at the model's positions)."""
        room = max(self.max_length - used - prompt, 0)
        if defaults.max_new_tokens is not None:
            return min(defaults.max_new_tokens, room)
        configured = defaults.max_length
        if configured is None:
            return min(NEW_TOKENS, room)
        said = f"the model's generation_config.max_length {configured}"
        return min(_new_tokens_to(configured, prompt, said), room)

    def _loop(self, work: _Work) -> Iterator[Any]:
        chat = self._take(work.session)
        branch = None
        try:
            branch = self._branch(work.choice)
            if work.lookup is None:
                yield from self._run(chat, work.session is None, work)
            else:
                if work.session is None:
                    chat.reset()
                yield from lookup_steps(
                    chat, work.ids, work.mask, work.rows, work.max_new_tokens, work.choice, work.eos, work.lookup,
                    _padding(work.mask) if work.choice.reads_tokens else None, work.max_time, work.record,
                    work.stopping,
                )  # fmt: skip
        finally:
            self._give_back(chat, spare=work.session is None)
            self._end_branch(branch)

    def _beam_search(self, work: _Work, beams: Beams) -> tuple[Any, Any, Any]:
        """Beam search (opcore.graph.beam_search) on a session of the pool, which holds no conversation
        after (its rows held beams, not a returned sequence)."""
        chat = self._take(work.session)
        branch = None
        try:
            branch = self._branch(work.choice)
            padding = _padding(work.mask) if work.choice.reads_tokens else None
            return beam_search(
                chat, work.ids, work.mask, work.rows, work.max_new_tokens, work.choice, work.eos, work.pad,
                beams, padding[: work.rows] if padding is not None else None, work.max_time, work.record,
                work.stopping,
            )  # fmt: skip
        finally:
            chat.reset()
            self._give_back(chat, spare=work.session is None)
            self._end_branch(branch)

    def _beams_fit(self, beams: Beams) -> None:
        """A ShapeError where a cache buffer's first dim is not the batch (a module of the protocol
        may lay its cache out otherwise): the beams' reorder moves rows of that dim."""
        graph = self.decode_plan.graph
        for name in graph.state:
            shape = graph.meta(name).shape
            if not shape or shape[0] != self.batch_size:
                raise ShapeError(
                    op=_GENERATE,
                    arg="num_beams",
                    expected=f"cache buffers whose first dim is the batch ({self.batch_size}): beam search moves rows",
                    found=f"buffer {name!r} of shape {tuple(shape)}",
                    fix="lay the module's cache out as (batch, ...), or generate with num_beams=1",
                )

    def _take(self, session: Session | None) -> Session:
        """The session a generate runs on: the caller's, where no other generate or stream is running
        on it (else an ArgumentError); without one, the default session where it is free, else a spare
        (made where none is: one more cache), so that generates on several threads never share a cache."""
        with self._sessions_lock:
            if session is not None:
                if id(session) in self._running:
                    raise ArgumentError(
                        op=_GENERATE,
                        arg="session",
                        expected="a session no other generate or stream is running on",
                        found="one a generate or an unfinished stream is running on",
                        fix="finish (or close) that stream first, or give each concurrent call its own "
                        "lm.session(); without session=, each call runs on a free one",
                    )
                chat = session
            elif id(self.default_session) not in self._running:
                chat = self.default_session
            else:
                chat = self._spare.pop() if self._spare else Session(self)
            self._running.add(id(chat))
            return chat

    def _branch(self, choice: Choice) -> Session | None:
        """The session guidance's unconditional branch runs on for one call (None: no guidance): a
        spare one (made where none is), never the default session, which may hold a conversation."""
        if choice.guidance is None:
            return None
        with self._sessions_lock:
            branch = self._spare.pop() if self._spare else Session(self)
            self._running.add(id(branch))
        choice.guidance.start(branch)
        return branch

    def _end_branch(self, branch: Session | None) -> None:
        if branch is not None:
            branch.reset()
            self._give_back(branch, spare=True)

    def _give_back(self, chat: Session, spare: bool) -> None:
        with self._sessions_lock:
            self._running.discard(id(chat))
            if spare and chat is not self._session:
                self._spare.append(chat)

    def _run(self, chat: Session, fresh: bool, work: _Work) -> Iterator[Any]:
        import time

        import torch

        ids, mask, rows, max_new_tokens = work.ids, work.mask, work.rows, work.max_new_tokens
        choice, eos, pad, max_time = work.choice, work.eos, work.pad, work.max_time
        started = time.monotonic()  # transformers' MaxTimeCriteria counts from before the prompt
        if fresh:
            chat.reset()
        if max_new_tokens == 0:
            return
        logits = chat.prefill(ids, mask)
        # every token so far, kept only where a choice reads them (the repetition penalty, n-grams,
        # sequences biased or banned); each row's left padding, which the penalty leaves out
        history = ids if choice.reads_tokens or work.stopping else None
        lead = _padding(mask) if history is not None else None
        unfinished = torch.ones(ids.shape[0], dtype=torch.bool, device=ids.device)
        eos_ids = torch.tensor(eos, dtype=torch.long, device=ids.device) if eos else None
        padding = torch.full((ids.shape[0],), pad, dtype=torch.long, device=ids.device)
        # a finished row is fed its pad while the others go on, as transformers' generate does; a pad
        # outside the vocabulary (-100, a vocabulary's size), which its embedding refuses there and a
        # runtime's gather may read past, is fed as id 0 (the row's output is the pad; what the row
        # computes from then on is never read)
        outside = pad < 0 or (self.vocab_size is not None and pad >= self.vocab_size)
        for step in range(max_new_tokens):
            with one_thread(logits):
                # the caller's rows alone: sampling draws for them as model.generate of those rows does,
                # and the padding rows (copies of the first) take the first row's token
                scores = choice.scores(
                    logits[:rows],
                    history[:rows] if history is not None else None,
                    step,
                    lead[:rows] if lead is not None else None,
                )
                chosen = choice.pick(scores)
                if work.record is not None:  # copies: a plan may hand back the same output buffer each step
                    work.record.append((scores.clone(), logits[:rows].float().clone()))
                if rows < logits.shape[0]:
                    chosen = torch.cat([chosen, chosen[:1].expand(logits.shape[0] - rows)])
                if eos_ids is not None:
                    chosen = torch.where(unfinished, chosen, padding)
                if history is not None:
                    history = torch.cat([history, chosen[:, None]], 1)
            yield chosen[:rows]
            if eos_ids is not None:
                unfinished &= ~torch.isin(chosen, eos_ids)
            if work.stopping and history is not None:
                unfinished[:rows] &= ~stopped(work.stopping, history[:rows], work.record)
            if (eos_ids is not None or work.stopping) and not bool(unfinished[:rows].any()):
                return
            if max_time is not None and time.monotonic() - started > max_time:
                return
            if step + 1 < max_new_tokens:
                logits = chat.step((chosen.masked_fill(chosen == pad, 0) if outside else chosen)[:, None])

    # --- explain, save -------------------------------------------------------------------------

    def explain(self, format: str = "text") -> str:
        """Per phase (prefill, decode): what runs where, and the state each writes.

        >>> print(lm.explain())          # doctest: +SKIP
        """
        from opcore.graph.lm_explain import render

        return render(self, format)

    def save(self, path: Any) -> Any:
        """Write both plans and the generation settings to a folder (``opcore.graph.load`` reads it).

        >>> lm.save("llama.lm"); again = opcore.graph.load("llama.lm")      # doctest: +SKIP
        """
        from opcore.graph.lm_files import save

        return save(self, path)

    def __repr__(self) -> str:
        return f"<opcore.graph.LanguageModel batch_size={self.batch_size} max_length={self.max_length}>"


def _stream_target(streamer: Any, prompt: Any) -> Callable[[Any], Any] | None:
    """What receives each step's tokens: a transformers streamer's ``put`` (given the prompt first,
    as transformers does), or the callable itself."""
    if streamer is None:
        return None
    if hasattr(streamer, "put"):
        streamer.put(prompt.cpu())
        return lambda tokens: streamer.put(tokens.cpu())
    if callable(streamer):
        return streamer  # type: ignore[no-any-return]
    raise ArgumentError(
        op=_GENERATE,
        arg="streamer",
        expected="a callable taking each step's tokens, or an object with put() and end()",
        found=type(streamer).__name__,
    )


def _zeros_and_ones(mask: Any, arg: str, op: str) -> None:
    """An ArgumentError naming ``arg`` where the attention mask holds anything but 0 and 1."""
    if bool(((mask != 0) & (mask != 1)).any()):
        raise ArgumentError(
            op=op,
            arg=arg,
            expected="0 (padding) or 1 (a token) in every place",
            found=f"values {sorted(set(mask.unique().tolist()) - {0, 1})[:4]}",
            fix=_MASK_FIX,
        )
