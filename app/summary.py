"""The summary turn: a conversation sealed into one ``compaction`` item.

Every way to compact runs it on an ``inference`` worker: ``POST /v1/responses/compact``
(:mod:`app.compaction`), a response whose input ends with ``compaction_trigger``
(:func:`app.run.compact_conversation`), and a response whose context crossed its
``context_management`` threshold (:func:`app.run.compact_context`). The model reads the
conversation as on any turn, then a request to summarise it; the summary is sealed
(:mod:`app.sealing`) so that only the fleet reads it back, for the tenant that compacted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from app.config import Settings
from app.errors import ModelBehaviorError
from app.protocol.items import item_id, since_compaction
from app.protocol.response import ResponseObject, Usage
from app.providers.chunks import Chunk, TextDelta, UsageReport
from app.providers.json_protocol import model_protocol, render_transcript
from app.providers.translate import ModelProvider, ModelRequest
from app.sealing import CompactedState, fleet_sealer, open_items
from app.store import ResponseStore
from app.telemetry import metrics
from app.tools.kinds import ToolKinds

DEFAULT_INSTRUCTIONS = (
    "You compact conversations. Summarise the conversation so far so that it can be continued "
    "from the summary alone: keep the user's goals, decisions, facts, names and numbers, tool "
    "results that matter, and open tasks. Write only the summary."
)
SUMMARY_REQUEST = "Summarise the conversation so far for its continuation."


class SummaryDeps(Protocol):
    """What a summary turn uses of a worker's collaborators (:class:`app.run.RunDeps`)."""

    @property
    def store(self) -> ResponseStore: ...

    @property
    def provider(self) -> ModelProvider: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def kinds(self) -> ToolKinds: ...


def compaction_item(
    deps: SummaryDeps,
    new_id: str,
    *,
    model: str,
    instructions: str | None,
    items: Sequence[dict[str, Any]],
    owner: str,
) -> tuple[dict[str, Any], Usage]:
    """One summary turn over ``items``: the ``compaction`` item sealing it, and the turn's usage.

    The model reads the items as on any turn: every kind's calls as calls and results, or as
    plain messages for a model on the JSON tool protocol (its server takes no tool messages);
    an earlier compaction's summary stands for what came before it.
    ``new_id``: the item's id; ``owner``: the tenant that may send the item back.

    Raises:
        ModelBehaviorError: the model wrote no summary.
        UpstreamError: the model server failed.
    """
    sealer = fleet_sealer(deps.store, deps.settings)
    viewed = deps.kinds.presenters.model_view(open_items(sealer, since_compaction(items)))
    if model_protocol(deps.settings, model) == "json":
        viewed = render_transcript(viewed)
    request = ModelRequest(
        model=model,
        instructions=instructions or DEFAULT_INSTRUCTIONS,
        items=[*viewed, {"type": "message", "role": "user", "content": SUMMARY_REQUEST}],
    )
    timer = metrics.ModelCallTimer(model, tenant=owner)
    summary, usage = _summarise(deps.provider.stream(request), timer)
    if not summary.strip():
        raise ModelBehaviorError("The model wrote an empty summary.")
    state = CompactedState(summary=summary, model=model, created_at=int(time.time()), owner=owner)
    item = {"id": new_id, "type": "compaction", "encrypted_content": sealer.seal(state)}
    return item, usage


def compaction_turn(
    deps: SummaryDeps,
    response: ResponseObject,
    items: Sequence[dict[str, Any]],
    *,
    turn: int,
    owner: str,
) -> tuple[dict[str, Any], Usage]:
    """A summary turn of a response: the ``compaction`` output item it adds at ``turn``.

    The response's input ends with ``compaction_trigger`` (the item is its one output), or its
    context crossed its ``context_management`` threshold (the model's turn follows the item).
    ``items``: the conversation so far (the chain's history, the input, the output). The
    summary follows the compaction instructions, not the response's (an agent's own).
    ``owner``: the response's tenant.
    """
    index = len(response.output)
    return compaction_item(
        deps,
        item_id("cmp", response.id, turn, index),  # a turn run again names it as the first did
        model=response.model,
        instructions=None,
        items=items,
        owner=owner,
    )


def _summarise(chunks: Iterator[Chunk], timer: metrics.ModelCallTimer) -> tuple[str, Usage]:
    """The summary the model streams, and its usage; ``timer`` times the call and counts it."""
    text: list[str] = []
    usage, timed = Usage(), False
    try:
        for chunk in chunks:
            if not timed:
                timer.first_chunk()
                timed = True
            if isinstance(chunk, TextDelta):
                text.append(chunk.text)
            elif isinstance(chunk, UsageReport):
                usage = chunk.usage
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # stops the model server's generation when we stop early
    timer.done(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
    return "".join(text), usage
