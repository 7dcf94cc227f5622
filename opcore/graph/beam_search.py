"""Beam search over a session's cache, with transformers' semantics and arithmetic.

transformers' ``generate(num_beams=k)`` keeps ``k`` running sequences per prompt row. Each step it
adds the processed log-probabilities of every beam's next token to the beam's score, keeps the best
``max(2, 1 + eos ids) * k`` continuations (or draws them, with ``do_sample``), moves those that hit
a stopping criterion (an eos, the last new token, ``max_time``) to the finished hypotheses (their
score divided by ``new tokens ** length_penalty``), continues the best ``k`` others, and reorders the
cache so that each row holds its beam's past. It stops when no running beam can beat the finished
ones (``early_stopping``: False, its heuristic; True, as soon as ``k`` have finished; "never", the
canonical test) or nothing can continue. The best ``num_return_sequences`` finished sequences are
returned, cut to the longest of them and filled after an eos with the pad id (transformers' fill:
the pad id, or the first eos id where the pad id is 0 or unset, or -1 without an eos).

This is transformers' ``_beam_search`` (5.x) step for step, so that its tokens are those of
``model.generate`` given the same logits; the cache reorder writes the session's buffers in place
(the rows whose beam moved, over the slots written so far), never reallocating them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opcore.errors import ArgumentError
from opcore.graph.sampling import one_thread, stopped

__all__ = ["Beams", "beam_search"]

_GENERATE = "LanguageModel.generate"
_LOST = -1.0e9  # transformers' score of a continuation that may not be taken


@dataclass(frozen=True, slots=True)
class Beams:
    """Beam search's settings: ``num_beams`` beams per prompt row, finished scores divided by
    ``new tokens ** length_penalty``, ``early_stopping`` True / False / "never" (transformers'),
    ``num_return_sequences`` of them returned per row (<= num_beams)."""

    num_beams: int
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1

    def __post_init__(self) -> None:
        beams = self.num_beams
        if not isinstance(beams, int) or isinstance(beams, bool) or beams < 1:
            raise ArgumentError(op=_GENERATE, arg="num_beams", expected="an int >= 1", found=repr(beams))
        penalty = self.length_penalty
        if not isinstance(penalty, (int, float)) or isinstance(penalty, bool):
            raise ArgumentError(op=_GENERATE, arg="length_penalty", expected="a float", found=repr(penalty))
        if self.early_stopping not in (True, False, "never"):
            raise ArgumentError(
                op=_GENERATE,
                arg="early_stopping",
                expected='True, False or "never" (transformers\' values)',
                found=repr(self.early_stopping),
            )
        if self.early_stopping != "never":  # 1 and 0 as the bools they equal (the search asks `is True`)
            object.__setattr__(self, "early_stopping", bool(self.early_stopping))
        wanted = self.num_return_sequences
        if not isinstance(wanted, int) or isinstance(wanted, bool) or not 1 <= wanted <= beams:
            raise ArgumentError(
                op=_GENERATE,
                arg="num_return_sequences",
                expected=f"an int from 1 to num_beams ({beams}): beam search returns its best beams",
                found=repr(wanted),
                fix=f"pass num_beams={wanted} or more" if isinstance(wanted, int) and wanted > beams else None,
            )


def beam_search(
    session: Any,
    ids: Any,
    mask: Any,
    rows: int,
    max_new_tokens: int,
    choice: Any,
    eos: Sequence[int],
    pad: int | None,
    beams: Beams,
    padding: Any = None,
    max_time: float | None = None,
    record: list[tuple[Any, Any]] | None = None,
    stopping: Sequence[Any] = (),
) -> tuple[Any, Any, Any]:
    """The best ``beams.num_return_sequences`` sequences of each prompt (prompt and new tokens),
    (prompts x returned, length), their scores (prompts x returned,: summed log-probabilities over
    new tokens ** length_penalty) and beam indices (prompts x returned, new tokens: the flat beam
    row each token came from, -1 past the sequence's end), as transformers' output gives them.

    ``ids`` / ``mask`` (captured batch, prompt): the prompts, each row repeated num_beams times in a
    row over the first ``rows`` (the rest copies, their tokens dropped); ``session``: started again
    here; ``choice``: the processors (opcore.graph.sampling); ``pad``: the call's or config's pad id
    (None: unset); ``padding`` (rows,): each row's left padding, for the repetition penalty;
    ``record``: where each step's (processed log-probabilities, logits) of the beams' rows are
    appended (None: not kept); ``stopping``: the caller's stopping criteria, asked of every
    continuation (its tokens so far), as transformers asks them."""
    import torch

    started = time.monotonic()  # transformers' MaxTimeCriteria counts from before the prompt
    k = beams.num_beams
    batch, prompt = rows // k, ids.shape[1]
    device = ids.device
    max_length = prompt + max_new_tokens
    eos_ids = torch.tensor(list(eos), dtype=torch.long, device=device) if eos else None
    # transformers' `pad_token_id or eos_token_id[0] if eos_token_id is not None else -1`
    fill = (pad or int(eos[0])) if eos else -1
    keep = max(2, 1 + len(eos)) * k
    top_k_mask = torch.cat([torch.ones(k, dtype=torch.bool), torch.zeros(keep - k, dtype=torch.bool)]).to(device)

    running_sequences = torch.full((batch, k, max_length), fill, dtype=torch.long, device=device)
    running_sequences[:, :, :prompt] = ids[:rows].reshape(batch, k, prompt)
    sequences = running_sequences.clone()
    running_scores = torch.zeros((batch, k), dtype=torch.float, device=device)
    running_scores[:, 1:] = _LOST  # the first beam alone at the start: k copies of one prompt
    scores = torch.full((batch, k), _LOST, dtype=torch.float, device=device)
    finished = torch.zeros((batch, k), dtype=torch.bool, device=device)
    improvable = torch.ones((batch, 1), dtype=torch.bool, device=device)
    running_indices = torch.full((batch, k, max_new_tokens), -1, dtype=torch.int32, device=device)
    indices = running_indices.clone()
    offset = torch.arange(batch, device=device).view(-1, 1) * k

    session.reset()
    logits = session.prefill(ids, mask)
    length = prompt
    for step in range(max_new_tokens):
        if step:
            tokens = running_sequences[:, :, length - 1].reshape(rows)
            if rows < ids.shape[0]:
                tokens = torch.cat([tokens, tokens[:1].expand(ids.shape[0] - rows)])
            logits = session.step(tokens[:, None])
        with one_thread(logits):
            history = running_sequences[:, :, :length].reshape(rows, length)
            log_probs = torch.nn.functional.log_softmax(logits[:rows].float(), dim=-1)
            log_probs = choice.scores(log_probs, history if choice.reads_tokens else None, step, padding)
            if record is not None:
                record.append((log_probs.clone(), logits[:rows].float().clone()))
            vocab = log_probs.shape[-1]
            log_probs = (log_probs.view(batch, k, vocab) + running_scores[:, :, None]).reshape(batch, k * vocab)
            if choice.do_sample:
                probs = torch.nn.functional.softmax(log_probs, dim=-1)
                top = torch.multinomial(probs, num_samples=keep, generator=choice.generator)
                top_log_probs = torch.gather(log_probs, 1, top)
            else:
                top_log_probs, top = torch.topk(log_probs, k=keep)
            beam = top // vocab
            top_indices = _gather(running_indices, beam)
            top_sequences = _gather(running_sequences, beam)
            top_sequences[:, :, length] = top % vocab
            top_indices[:, :, length - prompt] = (beam + offset).to(top_indices.dtype)

            # which continuations end here: an eos, the last new token, or max_time spent
            done = torch.full((batch, keep), length + 1 >= max_length, dtype=torch.bool, device=device)
            if eos_ids is not None:
                done |= torch.isin(top_sequences[:, :, length], eos_ids)
            if max_time is not None and time.monotonic() - started > max_time:
                done[:] = True
            if stopping:
                candidates = top_sequences[:, :, : length + 1].reshape(batch * keep, length + 1)
                done |= stopped(stopping, candidates, record).view(batch, keep)

            # the best k that go on
            going = top_log_probs + done.to(torch.float32) * _LOST
            chosen = torch.topk(going, k=k)[1]
            running_sequences = _gather(top_sequences, chosen)
            running_scores = _gather(going, chosen)
            running_indices = _gather(top_indices, chosen)

            # the best k finished so far, with those that end here
            ended = done & top_k_mask[None, :]
            penalized = top_log_probs / ((length + 1 - prompt) ** beams.length_penalty)
            full = torch.all(finished, dim=-1, keepdim=True) & (beams.early_stopping is True)
            penalized += full.to(torch.float32) * _LOST
            penalized += (~improvable).to(torch.float32) * _LOST
            penalized += (~ended) * _LOST
            best = torch.topk(torch.cat((scores, penalized), dim=1), k=k)[1]
            sequences = _gather(torch.cat((sequences, top_sequences), dim=1), best)
            scores = _gather(torch.cat((scores, penalized), dim=1), best)
            indices = _gather(torch.cat((indices, top_indices), dim=1), best)
            finished = _gather(torch.cat((finished, ended), dim=1), best)

            moved = running_indices[..., length - prompt].reshape(rows).to(torch.long)
            length += 1
            improvable = _improvable(improvable, running_scores, scores, finished, length, max_length, prompt, beams)
            going_on = (
                bool(improvable.any())
                and not (bool(finished.all()) and beams.early_stopping is True)
                and not bool(done.all())
            )
        if not going_on:
            break
        _reorder(session, moved, session.length)

    wanted = beams.num_return_sequences
    sequences = sequences[:, :wanted].reshape(batch * wanted, max_length)
    indices = indices[:, :wanted].reshape(batch * wanted, max_new_tokens)
    made = int((indices + 1).bool().sum(dim=1).max()) if max_new_tokens else 0
    return sequences[:, : prompt + made], scores[:, :wanted].reshape(batch * wanted), indices[:, :made]


def _gather(tensor: Any, beams: Any) -> Any:
    """transformers' ``_gather_beams``: ``tensor`` (batch, beams, ...) at ``beams`` (batch, n)."""
    import torch

    while beams.dim() < tensor.dim():
        beams = beams.unsqueeze(-1)
    return torch.take_along_dim(tensor, beams, dim=1)


def _improvable(
    improvable: Any,
    running_scores: Any,
    scores: Any,
    finished: Any,
    length: int,
    max_length: int,
    prompt: int,
    beams: Beams,
) -> Any:
    """transformers' ``_check_early_stop_heuristic``: whether a running beam may still beat the worst
    finished one of its row."""
    import torch

    if beams.early_stopping == "never" and beams.length_penalty > 0.0:
        best_length = max_length - prompt
    else:
        best_length = length - prompt
    best_running = running_scores[:, :1] / (best_length**beams.length_penalty)
    worst_finished = torch.where(finished, torch.min(scores, dim=1, keepdim=True)[0], -1.0e9)
    return improvable & torch.any(best_running > worst_finished, dim=-1, keepdim=True)


def _reorder(session: Any, moved: Any, written: int) -> None:
    """Each of the first ``len(moved)`` rows of the session's cache, mask and positions takes row
    ``moved[i]``'s (its beam's past), in place: only the rows that change, and of a cache buffer
    written by slot only the ``written`` slots so far (the rest are masked)."""
    import torch

    rows = torch.arange(moved.shape[0], device=moved.device)
    changed = moved != rows
    if not bool(changed.any()):
        return
    to, source = rows[changed], moved[changed]
    for buffer, slot_dim in zip(session.state, session.lm.slot_dims, strict=True):
        view = buffer.narrow(slot_dim, 0, written) if slot_dim is not None else buffer
        view.index_copy_(0, to, view.index_select(0, source))
    for tensor in (session.mask, session.positions):
        tensor.index_copy_(0, to, tensor.index_select(0, source))
