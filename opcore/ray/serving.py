"""A Ray Serve deployment that generates with a saved language model: prompt ids in, tokens
streamed out, one at a time, as ``lm.stream`` makes them.

>>> from ray import serve
>>> handle = serve.run(generation_app("llama.lm", num_replicas=2,
...                                   ray_actor_options={"num_cpus": 2}))         # doctest: +SKIP
>>> for token in handle.options(stream=True).stream.remote([1, 2, 3], max_new_tokens=8):  # doctest: +SKIP
...     print(token)

Over HTTP (``serve.run(..., route_prefix="/generate")``): POST ``{"input_ids": [1, 2, 3],
"max_new_tokens": 8}``; the response streams one token id per line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opcore.errors import ArgumentError
from opcore.ray.loading import load_on_worker

__all__ = ["GenerationServer", "generation_app"]

# generate's options a request may set (docs/generate.md); the rest (session, streamer, generator) are the server's
REQUEST_OPTIONS = frozenset(
    {
        "max_new_tokens",
        "max_length",
        "min_new_tokens",
        "do_sample",
        "temperature",
        "top_k",
        "top_p",
        "repetition_penalty",
        "eos_token_id",
        "pad_token_id",
        "min_p",
        "typical_p",
        "epsilon_cutoff",
        "eta_cutoff",
        "no_repeat_ngram_size",
        "bad_words_ids",
        "sequence_bias",  # in JSON a list of [token ids, bias] pairs
        "max_time",
        "top_h",
        "exponential_decay_length_penalty",  # in JSON [start_index, decay_factor]
        "num_beams",  # 1 alone: a server streams, beam search's tokens are known at the end
        # prompt lookup decoding, where the language model was captured with draft_tokens
        "prompt_lookup_num_tokens",
        "max_matching_ngram_size",
    }
)


class GenerationServer:
    """One replica: the language model loaded once (threads: its num_cpus), each request on a session no
    other request is running on (requests never see each other's state; a session is reused by later
    requests, not allocated per request).

    plan: the folder's path (on every node) or ``opcore.ray.put_plan(path)``; threads: None, the
    replica's num_cpus; defaults: generate's options for requests that do not set them.
    """

    op = "GenerationServer"

    def __init__(self, plan: Any, *, threads: int | None = None, **defaults: Any) -> None:
        self.lm, self.load = load_on_worker(plan, threads=threads, op=self.op)
        if not hasattr(self.lm, "stream"):
            raise ArgumentError(
                op=self.op,
                arg="plan",
                expected="a language model folder (LanguageModel.save)",
                found=f"a plan ({self.load.path})",
                fix="serve a plan with a deployment that calls opcore.ray.PlanPredictor",
            )
        self.defaults = self._options(defaults)
        configured = self.lm.defaults.num_beams
        if configured not in (None, 1) and "num_beams" not in self.defaults:
            raise ArgumentError(
                op=self.op,
                arg="num_beams",
                expected="a model that streams: one beam",
                found=f"the model's generation_config.num_beams {configured!r}",
                fix="pass num_beams=1 to the server (greedy or sampled tokens, streamed), or run beam search "
                "in batch with opcore.ray.GenerationPredictor",
            )

    def _options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(options) - REQUEST_OPTIONS)
        if unknown:
            raise ArgumentError(
                op=self.op,
                arg=unknown[0],
                expected=f"one of generate's options: {', '.join(sorted(REQUEST_OPTIONS))}",
                found=repr(options[unknown[0]]),
            )
        if options.get("num_beams", 1) != 1:
            raise ArgumentError(
                op=self.op,
                arg="num_beams",
                expected="1: the server streams each token as made, and beam search's are known at the end",
                found=repr(options["num_beams"]),
                fix="run beam search in batch with opcore.ray.GenerationPredictor(..., num_beams=...)",
            )
        return dict(options)

    def stream(self, input_ids: Sequence[int], **options: Any) -> Iterator[int]:
        """The new tokens of the prompt ``input_ids`` (one row), one by one.

        >>> list(server.stream([1, 2, 3], max_new_tokens=4))   # doctest: +SKIP
        [17, 4, 4, 9]
        """
        import torch

        ids = torch.as_tensor([list(input_ids)], dtype=torch.long)
        if ids.shape[1] < 1:
            raise ArgumentError(op=self.op, arg="input_ids", expected="at least one token id", found="none")
        asked = self._options(options)
        chosen = {**self.defaults, **asked}
        if "max_length" in asked and "max_new_tokens" not in asked:
            # the request's length, not the server's default number of new tokens (which would win)
            chosen.pop("max_new_tokens", None)
        with torch.no_grad():
            # no session named: each request runs on a session no other request is running on (its
            # own KV cache while it runs), reused by the next instead of allocated per request
            for tokens in self.lm.stream(ids, **chosen):
                yield int(tokens[0])

    def generate(self, input_ids: Sequence[int], **options: Any) -> list[int]:
        """All the new tokens at once (what ``stream`` yields, as a list)."""
        return list(self.stream(input_ids, **options))

    def info(self) -> dict[str, Any]:
        """The replica's LoadRecord as JSON (actor, load seconds, threads, fingerprint changes)."""
        return self.load.to_json()

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse, StreamingResponse

        try:
            body = await request.json()
            ids = body.pop("input_ids")
            self._options(body)
        except (ValueError, KeyError, ArgumentError) as error:
            return JSONResponse({"error": f"expected JSON {{'input_ids': [...], options}}: {error}"}, status_code=400)
        return StreamingResponse((json.dumps(t) + "\n" for t in self.stream(ids, **body)), media_type="text/plain")


def generation_app(
    plan: Any,
    *,
    num_replicas: int | str = 1,
    ray_actor_options: Mapping[str, Any] | None = None,
    max_ongoing_requests: int = 1,
    name: str = "opcore-generation",
    threads: int | None = None,
    **defaults: Any,
) -> Any:
    """The Serve application of a GenerationServer: ``serve.run(generation_app(...))``.

    num_replicas: replicas (or "auto"); ray_actor_options: each replica's (``{"num_cpus": 4}``: also
    its threads); max_ongoing_requests: requests a replica runs at once (1: a replica's cores serve
    one generation; more replicas serve more); defaults: generate's options.

    >>> app = generation_app("llama.lm", num_replicas=2, ray_actor_options={"num_cpus": 2})  # doctest: +SKIP
    """
    from ray import serve

    deployment = serve.deployment(
        name=name,
        num_replicas=num_replicas,
        ray_actor_options=dict(ray_actor_options or {"num_cpus": 1}),
        max_ongoing_requests=max_ongoing_requests,
    )(GenerationServer)
    return deployment.bind(plan, threads=threads, **defaults)
