"""Choosing the next token from a step's logits, with transformers' semantics and order.

transformers' ``generate`` applies, in this order: classifier-free guidance (``guidance_scale``:
opcore.graph.guidance), a sequence bias (``sequence_bias``), the prompt's tokens raised
(``encoder_repetition_penalty``), the repetition penalty (over every token of the row so far, prompt
included, its left padding not), no repeated n-grams (``no_repeat_ngram_size``), nor the prompt's
(``encoder_no_repeat_ngram_size``), bad words (``bad_words_ids``: a sequence bias of -inf,
eos left out), the minimum of new tokens (eos impossible until reached), the caller's
``prefix_allowed_tokens_fn``, the forced first and last tokens of the model's generation config
(``forced_bos_token_id`` where the prompt is one token, ``forced_eos_token_id`` as the last of
``max_new_tokens``), ``remove_invalid_values`` (NaN and infinite scores made finite), the
exponential decay length penalty (eos raised past a length), its suppressed
tokens (always, and ``begin_suppress_tokens`` as the first new token), the caller's
``logits_processor`` list (one of a class these are transformers' own runs at that one's place
instead, as its merge does: ``replacing``), then for sampling the warpers: temperature, top-h,
top-k, top-p, min-p, typical, epsilon and eta cutoffs, a watermark (``watermarking_config``), and
last ``renormalize_logits``'
log-softmax; greedy takes the argmax of the processed scores,
sampling draws from their softmax (``torch.multinomial``, with the caller's ``torch.Generator``).
Each step is transformers' own arithmetic (its LogitsProcessor classes, one token kept at least),
written here so that a loaded plan generates without transformers.

>>> import torch
>>> choose = Choice(do_sample=False)
>>> choose.next(torch.tensor([[0.1, 2.0, 0.3]]), torch.tensor([[0]]), new_tokens=0).tolist()
[1]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opcore.errors import ArgumentError

__all__ = ["REPLACEABLE", "Choice", "one_thread", "stopped"]

_GENERATE = "LanguageModel.generate"


@dataclass(frozen=True, slots=True)
class Choice:
    """How the next token is chosen. temperature / top_k / top_p / repetition_penalty None: not
    applied; eos_token_ids: the ids that end a row (suppressed until ``min_new_tokens``)."""

    do_sample: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    min_new_tokens: int = 0
    eos_token_ids: tuple[int, ...] = ()
    generator: Any = None  # a torch.Generator for sampling (None: torch's global one)
    forced_bos_token_id: int | None = None  # the first new token's, where set
    forced_eos_token_ids: tuple[int, ...] = ()  # the token(s) allowed as the new token last_new_token
    last_new_token: int | None = None
    suppress_tokens: tuple[int, ...] = ()  # never chosen
    begin_suppress_tokens: tuple[int, ...] = ()  # not chosen as the new token begin_new_token
    begin_new_token: int = 0
    # (token sequence, bias): added to the last token's score where the row ends with the others
    sequence_bias: tuple[tuple[tuple[int, ...], float], ...] = ()
    no_repeat_ngram_size: int | None = None  # an n-gram the row holds is not made again
    bad_words_ids: tuple[tuple[int, ...], ...] = ()  # never completed (a single eos id left out)
    min_p: float | None = None  # sampling: tokens below min_p x the likeliest's probability dropped
    typical_p: float | None = None  # sampling: the locally typical tokens of this mass kept (< 1)
    epsilon_cutoff: float | None = None  # sampling: tokens below this probability dropped (0 < e < 1)
    eta_cutoff: float | None = None  # sampling: below min(eta, sqrt(eta) exp(-entropy)) dropped
    # sampling: the likeliest tokens (of the top 100) whose entropy terms sum to top_h x the entropy
    top_h: float | None = None
    # (start, factor): past ``start`` new tokens, each eos score raised by |score| x (factor ** (new
    # tokens - start) - 1) (transformers' ExponentialDecayLengthPenalty; with eos ids only)
    exponential_decay_length_penalty: tuple[int, float] | None = None
    # the tokens each warper keeps at least (transformers' min_tokens_to_keep: 1, and 1 + the eos ids
    # in beam search, so that a beam may go on past an eos)
    keep: int = 1
    # transformers' prefix_allowed_tokens_fn(batch_id, row tokens) -> allowed ids, rows in groups of
    # num_beams (beam search's rows of one prompt share a batch_id)
    prefix_allowed_tokens_fn: Any = None
    num_beams: int = 1
    # the caller's own processors (transformers' logits_processor list): (tokens, scores) -> scores,
    # after the built-in processors and before the warpers, as transformers merges them
    processors: tuple[Any, ...] = ()
    # (stage, processor): a caller's processor of a class transformers' generate builds from an option
    # (REPLACEABLE), run at that built-in's place instead of it, as transformers' merge does
    replacing: tuple[tuple[str, Any], ...] = ()
    # the stages of transformers' processors for the minimum of new tokens: min_length alone where the
    # generation config's min_length sets it, both where min_new_tokens does (transformers then sets
    # min_length from it too); the built-in ban goes only where the caller replaces each
    minimum: tuple[str, ...] = ("min_length", "min_new_tokens")
    # transformers' renormalize_logits (LogitNormalization): the processed scores as log-probabilities,
    # after every processor and warper (the tokens chosen are the same; the scores returned are not)
    renormalize_logits: bool = False
    # transformers' remove_invalid_values (InfNanRemoveLogitsProcessor), after the forced tokens: NaN
    # scores made 0, infinite ones the dtype's largest and smallest
    remove_invalid_values: bool = False
    # transformers' guidance_scale (UnbatchedClassifierFreeGuidanceLogitsProcessor), first: the scores
    # mixed with an unconditional branch's (opcore.graph.guidance.Guidance; None: no guidance)
    guidance: Any = None
    # transformers' watermarking_config: the processor its construct_processor builds (a green list's
    # bias, or SynthID's g-values), after the warpers; None: no watermark
    watermark: Any = None
    # transformers' EncoderRepetitionPenalty and EncoderNoRepeatNGram processors, which a decoder-only
    # model's generate runs over its prompt (``prompt``: (rows, length), left padding included, as
    # there): each prompt token's score raised by the penalty (lowered below 1), each n-gram of the
    # prompt not continued
    encoder_repetition_penalty: float | None = None
    encoder_no_repeat_ngram_size: int | None = None
    prompt: Any = None

    def __post_init__(self) -> None:
        _positive("temperature", self.temperature, strict=True)
        _positive("repetition_penalty", self.repetition_penalty, strict=True)
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 0):
            raise ArgumentError(op=_GENERATE, arg="top_k", expected="an int >= 0", found=repr(self.top_k))
        if self.top_p is not None and not 0.0 < float(self.top_p) <= 1.0:
            raise ArgumentError(op=_GENERATE, arg="top_p", expected="a float in (0, 1]", found=repr(self.top_p))
        if not isinstance(self.min_new_tokens, int) or self.min_new_tokens < 0:
            raise ArgumentError(
                op=_GENERATE, arg="min_new_tokens", expected="an int >= 0", found=repr(self.min_new_tokens)
            )
        _fraction("min_p", self.min_p, low=0.0, high=1.0)
        _fraction("typical_p", self.typical_p, low=0.0, high=1.0, open_low=True)
        _fraction("epsilon_cutoff", self.epsilon_cutoff, low=0.0, high=1.0)
        _fraction("eta_cutoff", self.eta_cutoff, low=0.0, high=1.0)
        _fraction("top_h", self.top_h, low=0.0, high=1.0, open_low=True)
        size = self.no_repeat_ngram_size
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise ArgumentError(op=_GENERATE, arg="no_repeat_ngram_size", expected="an int >= 0", found=repr(size))

    @property
    def reads_tokens(self) -> bool:
        """Whether a choice reads the row's tokens so far (else ``tokens`` may be None)."""
        return (
            (self.repetition_penalty is not None and self.repetition_penalty != 1.0)
            or bool(self.no_repeat_ngram_size)
            or any(len(sequence) > 1 for sequence, _ in self.sequence_bias)
            or any(len(sequence) > 1 for sequence in self.bad_words_ids)
            or self.prefix_allowed_tokens_fn is not None
            or bool(self.processors)
            or bool(self.replacing)
            or self.guidance is not None
            or self.watermark is not None
            or bool(self.encoder_no_repeat_ngram_size)
        )

    def _own(self, stage: str) -> Any:
        """The caller's processor that takes the built-in ``stage``'s place, or None."""
        for name, processor in self.replacing:
            if name == stage:
                return processor
        return None

    def scores(self, logits: Any, tokens: Any, new_tokens: int, padding: Any = None) -> Any:
        """The processed scores (batch, vocab) of float32 ``logits`` for rows whose tokens so far are
        ``tokens`` (batch, length, left padding included; None where no option reads them),
        ``new_tokens`` of them generated; ``padding`` (batch,): each row's left-padding slots, which
        transformers' repetition penalty leaves out (None: none)."""
        import torch

        scores = logits.float()
        own = self._own if self.replacing else _no_processor
        if (custom := own("guidance_scale")) is not None:
            scores = _called(custom, tokens, scores, logits, "replacing guidance_scale")
        elif self.guidance is not None:
            scores = self.guidance(tokens, scores)
        if (custom := own("sequence_bias")) is not None:
            scores = _called(custom, tokens, scores, logits, "replacing sequence_bias")
        elif self.sequence_bias:
            scores = _biased(scores, tokens, self.sequence_bias)
        if (custom := own("encoder_repetition_penalty")) is not None:
            scores = _called(custom, tokens, scores, logits, "replacing encoder_repetition_penalty")
        elif self.encoder_repetition_penalty is not None and self.prompt is not None:
            prompt = _rows_of(self.prompt, scores.shape[0])
            inverse = 1 / self.encoder_repetition_penalty  # transformers' "hallucination penalty"
            got = torch.gather(scores, 1, prompt)
            scores = scores.scatter(1, prompt, torch.where(got < 0, got * inverse, got / inverse))
        if (custom := own("repetition_penalty")) is not None:
            scores = _called(custom, tokens, scores, logits, "replacing repetition_penalty")
        elif self.repetition_penalty is not None and self.repetition_penalty != 1.0 and tokens is not None:
            # each id the row holds (its left padding and an id outside the vocabulary not), penalized
            # once, as transformers' RepetitionPenaltyLogitsProcessor
            vocab = scores.shape[-1]
            ids = torch.where((tokens >= 0) & (tokens < vocab), tokens, vocab)
            if padding is not None:
                slots = torch.arange(tokens.shape[1], device=tokens.device)
                ids = ids.masked_fill(slots[None, :] < padding[:, None], vocab)
            present = torch.zeros((scores.shape[0], vocab + 1), dtype=torch.bool, device=scores.device)
            present = present.scatter(1, ids, True)[:, :vocab]
            penalized = torch.where(scores < 0, scores * self.repetition_penalty, scores / self.repetition_penalty)
            scores = torch.where(present, penalized, scores)
        if (custom := own("no_repeat_ngram_size")) is not None:
            scores = _called(custom, tokens, scores, logits, "replacing no_repeat_ngram_size")
        elif self.no_repeat_ngram_size and tokens is not None:
            scores = _no_repeated_ngrams(scores, tokens, self.no_repeat_ngram_size)
        if (custom := own("encoder_no_repeat_ngram_size")) is not None:
            scores = _called(custom, tokens, scores, logits, "replacing encoder_no_repeat_ngram_size")
        elif self.encoder_no_repeat_ngram_size and self.prompt is not None and tokens is not None:
            scores = _prompt_ngrams_banned(
                scores, tokens, _rows_of(self.prompt, scores.shape[0]), self.encoder_no_repeat_ngram_size
            )
        if (custom := own("bad_words_ids")) is not None:
            scores = _called(custom, tokens, scores, logits, "replacing bad_words_ids")
        elif self.bad_words_ids:
            scores = _biased(scores, tokens, tuple((words, -float("inf")) for words in self.bad_words_ids))
        # an eos id outside the vocabulary (a config's default beside a smaller vocab) can never be
        # produced: nothing to mask or raise, as transformers' MinNewTokensLengthLogitsProcessor does
        eos = [i for i in self.eos_token_ids if 0 <= i < scores.shape[-1]]
        banned = eos if new_tokens < self.min_new_tokens else []
        customs = [(stage, custom) for stage in self.minimum if (custom := own(stage)) is not None]
        if customs and len(customs) == len(self.minimum):  # each processor generate builds for it replaced
            banned = []
        if banned:
            scores = scores.clone()
            scores[:, banned] = -float("inf")
        for stage, custom in customs:
            scores = _called(custom, tokens, scores, logits, f"replacing {stage}")
        if (custom := own("prefix_allowed_tokens_fn")) is not None:
            scores = _called(custom, tokens, scores, logits, "replacing prefix_allowed_tokens_fn")
        elif self.prefix_allowed_tokens_fn is not None:
            scores = _prefix_allowed(scores, tokens, self.prefix_allowed_tokens_fn, self.num_beams)
        for stage, first in (("forced_bos_token_id", True), ("forced_eos_token_id", False)):
            if (custom := own(stage)) is not None:
                scores = _called(custom, tokens, scores, logits, f"replacing {stage}")
                continue
            if first:
                forced = [self.forced_bos_token_id] if self.forced_bos_token_id is not None and new_tokens == 0 else []
            else:
                forced = list(self.forced_eos_token_ids) if new_tokens == self.last_new_token else []
            forced = [i for i in forced if 0 <= i < scores.shape[-1]]
            if forced:  # every other token impossible, the forced ones at 0
                scores = torch.full_like(scores, -float("inf"))
                scores[:, forced] = 0.0
        if (custom := own("remove_invalid_values")) is not None:
            scores = _called(custom, tokens, scores, logits, "replacing remove_invalid_values")
        elif self.remove_invalid_values:
            big = torch.finfo(scores.dtype).max
            scores = torch.nan_to_num(scores, nan=0.0, posinf=big, neginf=-big)
        decay = self.exponential_decay_length_penalty
        if (custom := own("exponential_decay_length_penalty")) is not None:
            scores = _called(custom, tokens, scores, logits, "replacing exponential_decay_length_penalty")
        elif decay is not None and eos and new_tokens > decay[0]:
            at = scores[:, eos]
            raised = (torch.abs(at) * (pow(decay[1], new_tokens - decay[0]) - 1)).masked_fill(~torch.isfinite(at), 0.0)
            penalties = torch.zeros_like(scores)
            penalties[:, eos] = raised
            scores = scores + penalties
        for stage, listed in (
            ("suppress_tokens", self.suppress_tokens),
            ("begin_suppress_tokens", self.begin_suppress_tokens if new_tokens == self.begin_new_token else ()),
        ):
            if (custom := own(stage)) is not None:
                scores = _called(custom, tokens, scores, logits, f"replacing {stage}")
                continue
            suppressed = [i for i in listed if 0 <= i < scores.shape[-1]]
            if suppressed:
                scores = scores.clone() if scores is logits else scores
                scores[:, suppressed] = -float("inf")
        for index, processor in enumerate(self.processors):
            scores = _called(processor, tokens, scores, logits, str(index))
        if self.do_sample:  # the warpers
            if self.temperature is not None and self.temperature != 1.0:
                scores = scores / self.temperature
            if self.top_h is not None:
                scores = _entropy_kept(scores, self.top_h)
            if self.top_k:
                k = min(max(self.top_k, self.keep), scores.shape[-1])
                kth = torch.topk(scores, k)[0][..., -1, None]
                scores = scores.masked_fill(scores < kth, -float("inf"))
            if self.top_p is not None and self.top_p < 1.0:
                ordered, order = torch.sort(scores, descending=False)
                cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
                drop = cumulative <= (1 - self.top_p)
                drop[..., -self.keep :] = False  # keep at least that many tokens
                scores = scores.masked_fill(drop.scatter(1, order, drop), -float("inf"))
            if self.min_p is not None:
                probs = torch.softmax(scores, dim=-1)
                drop = probs < self.min_p * probs.amax(dim=-1, keepdim=True)
                drop.scatter_(-1, torch.topk(probs, min(self.keep, probs.shape[-1]), dim=-1).indices, False)
                scores = scores.masked_fill(drop, -float("inf"))
            if self.typical_p is not None and self.typical_p < 1.0:
                scores = _typical(scores, self.typical_p, self.keep)
            if self.epsilon_cutoff is not None and 0.0 < self.epsilon_cutoff < 1.0:
                scores = _below(scores, self.epsilon_cutoff, self.keep)
            if self.eta_cutoff is not None and 0.0 < self.eta_cutoff < 1.0:
                eta = torch.tensor(self.eta_cutoff, device=scores.device)
                entropy = torch.distributions.Categorical(logits=scores).entropy()
                scores = _below(scores, torch.min(eta, torch.sqrt(eta) * torch.exp(-entropy))[..., None], self.keep)
        if self.watermark is not None:  # after every warper, as transformers builds it
            scores = _called(self.watermark, tokens, scores, logits, "watermarking_config")
        return scores.log_softmax(dim=-1) if self.renormalize_logits else scores

    def next(self, logits: Any, tokens: Any, new_tokens: int, padding: Any = None) -> Any:
        """The next token of each row (batch,)."""
        return self.pick(self.scores(logits, tokens, new_tokens, padding))

    def pick(self, scores: Any) -> Any:
        """The token of each row (batch,) from its processed scores: the argmax, or a draw from their
        softmax when sampling."""
        import torch

        if not self.do_sample:
            # max's indices are argmax's (the first of tied maxima, a NaN as the maximum) at about a
            # third of its time on the CPU: over 151,936 float32 scores, 1 thread, 95 against 227 us
            # a row (AMX Xeon; 331 against 948 for 4 rows), each decode step's
            return scores.max(dim=-1).indices
        probs = torch.softmax(scores, dim=-1)
        return torch.multinomial(probs, num_samples=1, generator=self.generator).squeeze(1)


@contextmanager
def one_thread(logits: Any) -> Iterator[None]:
    """torch's intra-op pool at one thread for the block, where ``logits`` are on the CPU and the pool
    has more: the choice of each token (a copy, a mask, an argmax or a softmax over the vocabulary) is
    microseconds of work, but over ~32k elements torch splits it across its OpenMP workers, which then
    spin for milliseconds (libgomp's GOMP_SPINCOUNT, fixed when torch loads) on the cores the next
    decode step's graph-runtime threads need. Measured on 2 cores, a 0.5B int4 decode step on ONNX
    Runtime at 2 threads: 14.5 ms a token alone, 20.1-20.7 ms with one 151,936-float copy between
    steps on torch's two threads, 14.5-16.2 ms with that copy on one thread."""
    import torch

    threads = torch.get_num_threads()
    if threads == 1 or logits.device.type != "cpu":
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def stopped(criteria: Sequence[Any], tokens: Any, record: Sequence[tuple[Any, Any]] | None) -> Any:
    """The rows (tokens.shape[0],) any of the caller's stopping criteria says are done (a criterion
    may answer one bool for all rows), as transformers' StoppingCriteriaList ORs them. The criteria
    get the scores of the steps so far where generate keeps a record of (scores, logits), else None,
    as transformers gives them its scores only where it keeps them."""
    import torch

    scores = tuple(made for made, _ in record) if record is not None else None
    rows = tokens.shape[0]
    done = torch.zeros(rows, dtype=torch.bool, device=tokens.device)
    for index, criterion in enumerate(criteria):
        answer = criterion(tokens, scores)
        try:
            said = torch.as_tensor(answer, device=tokens.device)
        except (TypeError, ValueError, RuntimeError):
            said = None
        if said is None or said.dtype.is_floating_point or said.is_complex() or said.shape not in ((), (rows,)):
            raise ArgumentError(
                op=_GENERATE,
                arg="stopping_criteria",
                expected=f"criteria answering a bool, or a bool tensor of one per row ({rows},)",
                found=f"criterion {index} ({_name(criterion)}) returned {_described(answer)}",
                fix="return a bool (every row) or a (batch,) bool tensor from __call__(input_ids, scores)",
            )
        done |= said.to(torch.bool)
    return done


# the built-in stages a caller's processor may take the place of, by transformers' class (the
# processors its generate builds before it merges the caller's list; its warpers come after the merge)
REPLACEABLE = {
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": "guidance_scale",
    "SequenceBiasLogitsProcessor": "sequence_bias",
    "EncoderRepetitionPenaltyLogitsProcessor": "encoder_repetition_penalty",
    "EncoderNoRepeatNGramLogitsProcessor": "encoder_no_repeat_ngram_size",
    "RepetitionPenaltyLogitsProcessor": "repetition_penalty",
    "NoRepeatNGramLogitsProcessor": "no_repeat_ngram_size",
    "NoBadWordsLogitsProcessor": "bad_words_ids",
    "MinLengthLogitsProcessor": "min_length",
    "MinNewTokensLengthLogitsProcessor": "min_new_tokens",
    "PrefixConstrainedLogitsProcessor": "prefix_allowed_tokens_fn",
    "ForcedBOSTokenLogitsProcessor": "forced_bos_token_id",
    "ForcedEOSTokenLogitsProcessor": "forced_eos_token_id",
    "InfNanRemoveLogitsProcessor": "remove_invalid_values",
    "ExponentialDecayLengthPenalty": "exponential_decay_length_penalty",
    "SuppressTokensLogitsProcessor": "suppress_tokens",
    "SuppressTokensAtBeginLogitsProcessor": "begin_suppress_tokens",
}


def _rows_of(prompt: Any, rows: int) -> Any:
    """``prompt``'s rows for ``rows`` rows of scores: each repeated in a row where there are more (as
    transformers' Encoder* processors repeat theirs), the first ``rows`` where fewer."""
    if rows > prompt.shape[0]:
        return prompt.repeat_interleave(rows // prompt.shape[0], dim=0)
    return prompt[:rows]


def _prompt_ngrams_banned(scores: Any, tokens: Any, prompt: Any, size: int) -> Any:
    """``scores`` with -inf for each token that would continue, after the row's last ``size`` - 1
    tokens, an n-gram of ``size`` its prompt holds (transformers' EncoderNoRepeatNGramLogitsProcessor;
    nothing where the row is shorter than ``size`` - 1 or the prompt than ``size``)."""
    import torch

    length = tokens.shape[1]
    if length < size - 1 or prompt.shape[1] < size:
        return scores
    vocab = scores.shape[-1]
    grams = prompt.unfold(1, size, 1)  # (rows, windows, size)
    last = tokens[:, length - (size - 1) :]  # (rows, size - 1)
    hit = (grams[:, :, : size - 1] == last[:, None, :]).all(-1)
    banned = torch.where(hit, grams[:, :, -1], vocab)
    mask = torch.zeros((scores.shape[0], vocab + 1), dtype=torch.bool, device=scores.device)
    return scores.masked_fill(mask.scatter(1, banned, True)[:, :vocab], -float("inf"))


def _no_processor(stage: str) -> Any:
    return None


def _called(processor: Any, tokens: Any, scores: Any, logits: Any, which: str) -> Any:
    """The scores a caller's processor returns, checked: (batch, vocab) as it was given."""
    import torch

    given = scores.clone() if scores is logits else scores
    made = processor(tokens, given)
    if not isinstance(made, torch.Tensor) or made.shape != given.shape:
        raise ArgumentError(
            op=_GENERATE,
            arg="logits_processor",
            expected=f"processors returning scores of the shape they were given, {tuple(given.shape)}",
            found=f"processor {which} ({_name(processor)}) returned {_described(made)}",
            fix="return the (batch, vocab) scores tensor from __call__(input_ids, scores)",
        )
    return made


def _name(callable_: Any) -> str:
    return getattr(callable_, "__qualname__", None) or type(callable_).__qualname__


def _described(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"{type(value).__name__} of shape {tuple(shape)} ({getattr(value, 'dtype', '?')})"
    return f"{type(value).__name__} {repr(value)[:40]}"


def _positive(name: str, value: float | None, *, strict: bool) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or (value <= 0 if strict else value < 0):
        raise ArgumentError(op=_GENERATE, arg=name, expected="a number > 0", found=repr(value))


def _fraction(name: str, value: Any, *, low: float, high: float, open_low: bool = False) -> None:
    if value is None:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or not (low < value <= high if open_low else low <= value <= high):
        interval = f"({low:g}, {high:g}]" if open_low else f"[{low:g}, {high:g}]"
        raise ArgumentError(op=_GENERATE, arg=name, expected=f"a float in {interval}", found=repr(value))


def _biased(scores: Any, tokens: Any, biases: tuple[tuple[tuple[int, ...], float], ...]) -> Any:
    """transformers' SequenceBiasLogitsProcessor: each sequence's bias added to its last token's score,
    for one token always, for longer ones in the rows that end with the rest (biases on the same
    token add up)."""
    import torch

    bias = torch.zeros_like(scores)
    for sequence, value in biases:
        *prefix, last = sequence
        if not prefix:
            bias[:, last] += value
            continue
        if tokens is None or len(prefix) > tokens.shape[1]:
            continue
        ending = torch.tensor(prefix, dtype=tokens.dtype, device=tokens.device)
        matching = (tokens[:, -len(prefix) :] == ending).all(dim=-1)
        bias[:, last] += torch.where(matching, value, 0.0).to(bias.dtype)
    return scores + bias


def _prefix_allowed(scores: Any, tokens: Any, allowed: Any, beams: int) -> Any:
    """transformers' PrefixConstrainedLogitsProcessor: each row's scores outside the tokens
    ``allowed(batch_id, row)`` gives are -inf; where every beam of a prompt has only -inf left, the
    allowed tokens at 0 (the constraint holds)."""
    import torch

    mask = torch.full_like(scores, -float("inf"))
    for row in range(tokens.shape[0]):
        ids = allowed(row // beams, tokens[row])
        if len(ids) == 0:
            raise ArgumentError(
                op=_GENERATE,
                arg="prefix_allowed_tokens_fn",
                expected="a non-empty list of allowed token ids for every row",
                found=f"an empty list for batch_id {row // beams} (the constraint cannot be met)",
                fix="return at least one token id (the eos id where the row should end)",
            )
        mask[row, ids] = 0
    constrained = scores + mask
    unsatisfiable = constrained.amax(dim=-1).isneginf().view(-1, beams).all(dim=-1, keepdim=True)
    return torch.where(unsatisfiable.repeat_interleave(beams, dim=0), mask, constrained)


def _no_repeated_ngrams(scores: Any, tokens: Any, size: int) -> Any:
    """transformers' NoRepeatNGramLogitsProcessor: the tokens that would complete an n-gram the row
    (padding included) holds already are impossible."""
    length = tokens.shape[1]
    if length + 1 < size:
        return scores
    scores = scores.clone()
    for row, held in enumerate(tokens.tolist()):
        prefix = tuple(held[length + 1 - size :]) if size > 1 else ()
        banned = {gram[-1] for gram in zip(*(held[i:] for i in range(size))) if gram[:-1] == prefix}
        if banned:
            scores[row, sorted(banned)] = -float("inf")
    return scores


def _below(scores: Any, cut: Any, keep: int = 1) -> Any:
    """transformers' Epsilon / Eta warpers: the tokens whose probability is below ``cut`` (a number,
    or one per row) dropped, the ``keep`` likeliest kept."""
    import torch

    drop = scores.softmax(dim=-1) < cut
    kth = torch.topk(scores, min(keep, scores.shape[-1]))[0][..., -1, None]
    return scores.masked_fill(drop & (scores < kth), -float("inf"))


def _entropy_kept(scores: Any, top_h: float) -> Any:
    """transformers' TopHLogitsWarper: of the 100 likeliest tokens, those (in order) whose entropy terms
    sum to at most top_h x the entropy of that distribution; the likeliest always."""
    import torch

    top, order = torch.topk(scores, min(100, scores.shape[-1]), dim=-1, largest=True, sorted=True)
    distribution = torch.distributions.Categorical(logits=top)
    probs = distribution.probs
    cumulative = torch.cumsum(-probs * torch.log(probs), dim=-1)
    chosen = cumulative <= (distribution.entropy() * top_h).unsqueeze(-1)
    chosen[:, 0] = True
    kept = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, order, chosen)
    processed = scores.clone()
    processed[~kept] = -float("inf")
    return processed


def _typical(scores: Any, mass: float, keep: int = 1) -> Any:
    """transformers' TypicalLogitsWarper: the tokens whose surprise is nearest the entropy, up to
    ``mass`` of probability (``keep`` kept at least)."""
    import torch

    normalized = torch.nn.functional.log_softmax(scores, dim=-1)
    p = torch.exp(normalized)
    entropy = -(normalized * p).nansum(-1, keepdim=True)
    shifted = torch.abs((-normalized) - entropy)
    ordered, order = torch.sort(shifted, descending=False)
    cumulative = scores.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
    last = (cumulative < mass).sum(dim=1).clamp(max=ordered.shape[-1] - 1)
    drop = ordered > ordered.gather(1, last.view(-1, 1))
    drop[..., :keep] = False
    return scores.masked_fill(drop.scatter(1, order, drop), -float("inf"))
