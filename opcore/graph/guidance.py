"""Classifier-free guidance for ``LanguageModel.generate`` (``guidance_scale``).

transformers' generate builds ``UnbatchedClassifierFreeGuidanceLogitsProcessor`` for a decoder-only
model where ``guidance_scale`` is set and not 1, first among its processors: the step's scores become
``scale * (log_softmax(scores) - u) + u``, where ``u`` is the log-softmax of the same model's next-token
logits on an unconditional branch: ``negative_prompt_ids`` (with ``negative_prompt_attention_mask``),
or each row's last prompt token where none is given, then each token the rows take. Here that branch
runs on a session of the captured model (its own cache, taken from the model's spare ones for the
call and given back after): its prompt on the first step, one token a step after, the rows' last
tokens as they stand (in beam search, the beams' after their reorder, as transformers feeds them: its
branch's cache follows no beam either).

One difference, on a left-padded negative prompt alone: transformers' processor calls the model
without positions, which then counts the padding (position 0 is the first pad); a session counts each
row's tokens (position 0 is its first token), as a prompt's are counted. Rotary and ALiBi models see
the same relative positions either way; a model with a position table (GPT-2's) does not.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from opcore.errors import ArgumentError

__all__ = ["Guidance", "guidance_scale"]

_GENERATE = "LanguageModel.generate"


def guidance_scale(value: Any, arg: str = "guidance_scale") -> float | None:
    """``value`` as a guidance scale: None where guidance does nothing (None or 1, as transformers
    builds no processor for either), else the float; an ArgumentError for what is not a finite number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ArgumentError(
            op=_GENERATE,
            arg=arg,
            expected="a finite number (1: no guidance; above 1 follows the prompt more, below 1 the negative prompt)",
            found=repr(value)[:80],
        )
    return None if float(value) == 1.0 else float(value)


class Guidance:
    """The unconditional branch of one generate call: ``start`` gives it its session, then each call
    ``(tokens, scores)`` returns the guided scores of the step whose rows hold ``tokens`` so far."""

    def __init__(self, scale: float, ids: Any = None, mask: Any = None) -> None:
        self.scale = scale
        self.ids = ids  # (captured batch, length) or None: each row's last prompt token
        self.mask = mask
        self.session: Any = None
        self.threads = 1
        self.first = True

    def start(self, session: Any) -> None:
        """Begin on ``session`` (emptied here); torch's thread count now is the one its steps run at
        (the token's choice runs on one thread: sampling.one_thread)."""
        import torch

        self.session = session
        session.reset()
        self.threads = torch.get_num_threads()
        self.first = True

    def __call__(self, tokens: Any, scores: Any) -> Any:
        import torch

        rows, vocab = scores.shape
        batch = self.session.lm.batch_size
        last = tokens[:, -1:]
        # a finished row's pad outside the vocabulary is fed as id 0, as the loop feeds it
        last = last.masked_fill((last < 0) | (last >= vocab), 0)
        if rows < batch:  # the captured batch's other rows: copies of the first, as the loop's
            last = torch.cat([last, last[:1].expand(batch - rows, -1)])
        inner = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            if self.first:
                ids = self.ids if self.ids is not None else last
                logits = self.session.prefill(ids, self.mask)
                self.first = False
            else:
                logits = self.session.step(last)
        finally:
            torch.set_num_threads(inner)
        unconditional = torch.nn.functional.log_softmax(logits[:rows].float(), dim=-1)
        conditional = torch.nn.functional.log_softmax(scores, dim=-1)
        return self.scale * (conditional - unconditional) + unconditional
