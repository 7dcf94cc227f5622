"""Assisted generation: drafts from a smaller language model, verified in one step of the larger.

transformers' ``generate(..., assistant_model=...)`` (its ``AssistedCandidateGenerator`` and
``_assisted_decoding``, batch 1, one vocabulary): the assistant, itself captured with ``capture_lm``,
continues the row on a session of its own, up to ``num_assistant_tokens`` (20) tokens chosen by the
same processors and sampling as the call's, stopping after a token whose probability under its
processed scores is below ``assistant_confidence_threshold`` (0.4) or after an eos; the larger
model's verify step (``capture_lm(..., draft_tokens=)``) scores the drafts in one call, as for
prompt lookup (opcore.graph.prompt_lookup, which runs the loop). Greedy keeps the drafts while they
are the larger model's argmax (its tokens are greedy search's); sampling keeps each draft with
probability min(1, p / q) (p the larger model's processed distribution there, q the assistant's),
and draws the token after the last one kept from max(0, p - q) renormalized, or from p where all
were kept: speculative sampling, as transformers' ``_speculative_sampling``, whose tokens follow the
larger model's own distribution. The assistant's cache keeps the tokens both agree on and is
cropped back after each verify call.

Not transformers' here: its confidence threshold adapts during a call (from the acceptance history,
where scikit-learn is installed); this one is fixed. Assistants with another tokenizer (its
"universal" assisted generation) are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opcore.graph.sampling import Choice, one_thread

__all__ = ["Assistant", "ModelDrafts", "speculative"]

# transformers' GenerationConfig defaults: num_assistant_tokens, assistant_confidence_threshold
NUM_TOKENS = 20
CONFIDENCE = 0.4
# the assistant takes up to this many tokens it has not seen by decode steps, more by its prompt's
# step (a dynamic-length plan whose call costs several decode steps on a small model)
FEW = 4


@dataclass(frozen=True, slots=True)
class Assistant:
    """Assisted generation's settings: the assistant (a ``LanguageModel``), its most drafts per verify
    call, and the probability below which it stops drafting (None: it drafts ``num_tokens``)."""

    model: Any
    num_tokens: int = NUM_TOKENS
    confidence: float | None = CONFIDENCE


class ModelDrafts:
    """The drafts of one generate call: the assistant's session (one of its pool, given back by
    ``close``), continued with the row's tokens it has not seen before each draft."""

    def __init__(self, assistant: Assistant, choice: Choice, lead: Any, eos: tuple[int, ...], mask: Any = None) -> None:
        self.assistant, self.choice, self.eos = assistant, choice, eos
        self.lead = lead[:1] if lead is not None else None
        self.prompt_mask = mask[:1] if mask is not None else None  # the prompt's left padding, if any
        self.chat = assistant.model._take(None)
        self.chat.reset()

    def propose(self, history: Any, most: int, produced: int) -> tuple[list[int], Any]:
        """Up to ``most`` tokens continuing ``history``'s first row, and the assistant's processed
        scores for each (drafts, vocab); ([], None) where its cache has no room for the row."""
        import torch

        lm, chat = self.assistant.model, self.chat
        row = history[:1]
        tail = row[:, chat.length :]
        # the tail and every draft but the last are written into the assistant's cache
        most = min(most, self.assistant.num_tokens, lm.max_length - chat.length - tail.shape[1] + 1)
        if most < 1 or tail.shape[1] == 0:
            return [], None
        if chat.length and tail.shape[1] <= FEW:  # a token or a few since the last drafts: decode steps
            for at in range(tail.shape[1]):
                logits = chat.step(tail[:, at : at + 1].expand(lm.batch_size, 1))
        else:  # the prompt: the prompt's step (its padding stays padding)
            given = torch.ones_like(tail)
            if chat.length == 0 and self.prompt_mask is not None:
                given[:, : self.prompt_mask.shape[1]] = self.prompt_mask
            logits = chat.prefill(tail.expand(lm.batch_size, -1), given.expand(lm.batch_size, -1))
        drafts: list[int] = []
        scores: list[Any] = []
        seen = row
        for i in range(most):
            with one_thread(logits):
                processed = self.choice.scores(logits[:1], seen, produced + i, self.lead)
                token = int(self.choice.pick(processed)[0])
            drafts.append(token)
            scores.append(processed[0])
            confidence = self.assistant.confidence
            if token in self.eos or i + 1 == most:
                break
            if confidence is not None and float(torch.softmax(processed[0].float(), -1)[token]) < confidence:
                break
            step = torch.tensor([[token]], dtype=torch.long, device=row.device)
            seen = torch.cat([seen, step], 1)
            logits = chat.step(step.expand(lm.batch_size, 1).to(chat.mask.device))
        return drafts, torch.stack(scores)

    def settle(self, agreed: int) -> None:
        """The row's first ``agreed`` tokens are the larger model's: what the assistant's cache holds
        after them (rejected drafts) is dropped."""
        if self.chat.length > agreed:
            self.chat.crop(agreed)

    def close(self) -> None:
        self.assistant.model._give_back(self.chat, spare=True)


def speculative(p_scores: Any, q_scores: Any, draft: list[int], choice: Choice) -> list[int]:
    """The tokens one verify call makes under speculative sampling: ``p_scores`` the larger model's
    processed scores at each position (drafts + 1, vocab), ``q_scores`` the assistant's for each
    draft (drafts, vocab); the drafts kept, then one token drawn (transformers' ``_speculative_sampling``,
    its draws from ``choice``'s generator)."""
    import torch

    count = len(draft)
    p = torch.softmax(p_scores.float(), -1)
    q = torch.softmax(q_scores.float(), -1)
    tokens = torch.tensor(draft, dtype=torch.long, device=p.device)
    at = torch.arange(count, device=p.device)
    ratio = p[at, tokens] / q[at, tokens]
    drawn = torch.rand(count, generator=choice.generator, device=p.device)
    kept = int(((~(drawn <= ratio)).cumsum(0) < 1).sum())
    target = p[kept]
    if kept < count:
        residual = (p[kept] - q[kept]).clamp(min=0)
        total = float(residual.sum())
        if total > 0:  # 0 only where p and q agree to rounding there: the draft was kept with ratio >= 1
            target = residual / total
    token = int(torch.multinomial(target, 1, generator=choice.generator))
    return [*draft[:kept], token]
