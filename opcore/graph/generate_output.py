"""What ``LanguageModel.generate(..., return_dict_in_generate=True)`` returns: transformers' output
records' fields, without transformers (a loaded plan generates without it).

>>> out = GenerateOutput(sequences=[[1, 2, 3]])
>>> out.sequences == out["sequences"], list(out.keys())
(True, ['sequences'])
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["GenerateOutput"]


@dataclass(frozen=True, slots=True)
class GenerateOutput:
    """transformers' ``GenerateDecoderOnlyOutput`` (greedy search, sampling) and
    ``GenerateBeamDecoderOnlyOutput`` (beam search), as far as opcore makes them:

    * ``sequences`` (rows, prompt + new): what ``generate`` returns without the record;
    * ``scores``: with ``output_scores``, one (rows, vocab) tensor a step, the processed scores each
      token was chosen from (with beams: each beam row's processed log-probabilities);
    * ``logits``: with ``output_logits``, one (rows, vocab) tensor a step, the model's logits;
    * ``sequences_scores`` (rows,): beam search with ``output_scores``, each returned sequence's score
      (its log-probabilities summed, over new tokens ** length_penalty);
    * ``beam_indices`` (rows, new tokens): beam search, the beam row each token came from (-1 past the
      sequence's end), for transformers' ``compute_transition_scores``.

    Fields that were not asked for are None; as transformers' records, ``out["scores"]``, ``keys()``
    and ``to_tuple()`` see only those that were. Attentions, hidden states and the cache are not
    offered (``generate`` refuses ``output_attentions`` / ``output_hidden_states``).
    """

    sequences: Any
    scores: tuple[Any, ...] | None = None
    logits: tuple[Any, ...] | None = None
    sequences_scores: Any = None
    beam_indices: Any = None

    def keys(self) -> Iterator[str]:
        return (field.name for field in fields(self) if getattr(self, field.name) is not None)

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.keys())

    def __getitem__(self, key: str | int) -> Any:
        if isinstance(key, str):
            if key not in set(self.keys()):
                raise KeyError(key)
            return getattr(self, key)
        return self.to_tuple()[key]
