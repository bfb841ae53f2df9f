"""Anthropic's Message Batches: ``POST /v1/messages/batches`` with every request's
``{"custom_id", "params"}``, polled at ``/v1/messages/batches/{id}``, results read from its
``results_url``.

Shapes as in the official SDK (anthropic-sdk-python ``types/messages/message_batch.py``,
``message_batch_request_counts.py``, ``message_batch_individual_response.py`` and the
``message_batch_*_result.py`` types): ``processing_status`` is in_progress, canceling or
ended; a result line is ``{"custom_id", "result": {"type": "succeeded", "message": {...}}}``,
``{"type": "errored", "error": {"type": "error", "error": {"type", "message"}}}``,
``{"type": "canceled"}`` or ``{"type": "expired"}``. The key and anthropic-version headers
are the synchronous call's; ``results_url`` is followed only on the endpoint's own origin.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from wildtrace.core.jsonsafe import decode_json
from wildtrace.providers.base import error_status
from wildtrace.providers.batch import BatchAPI, BatchError, Item, Line, Piece, Status, int_counts, segment

#: The Message Batches limits: 100,000 requests or 256 MB per batch.
MAX_ITEMS, MAX_BYTES = 100_000, 256 * 1000 * 1000


class AnthropicBatch(BatchAPI):
    """Message Batches under the endpoint's base URL (the one ``/v1/messages`` hangs from)."""

    provider = "anthropic"
    max_items, max_bytes = MAX_ITEMS, MAX_BYTES

    @property
    def _root(self) -> str:
        return f"{self.control.base_url}/v1/messages/batches"

    async def create(self, items: list[Item]) -> tuple[str, str | None]:
        """One POST whose ``params`` are each item's exact bytes (up to 256 MB, spooled by the control)."""
        spooled = f"anthropic-{items[0].custom_id[:16]}-{len(items)}.json"
        batch = await self.control.post(self._root, spooled, body(items))
        batch_id = batch.get("id") if isinstance(batch, dict) else None
        if not isinstance(batch_id, str) or not batch_id:
            raise BatchError(f"the message batch was created without an id: {str(batch)[:300]}")
        return batch_id, None

    async def status(self, batch_id: str) -> Status:
        """processing_status, request_counts, results_url."""
        batch = await self.control.json("GET", f"{self._root}/{segment(batch_id)}")
        if not isinstance(batch, dict):
            raise BatchError(f"message batch {batch_id}: not a batch object: {str(batch)[:300]}")
        state = str(batch.get("processing_status") or "unknown")
        refs = {"results_url": batch["results_url"]} if isinstance(batch.get("results_url"), str) else {}
        return Status(state, state == "ended", int_counts(batch.get("request_counts")), refs)

    async def results(self, batch_id: str, status: Status, wanted: set[str], max_line: int) -> AsyncIterator[Line]:
        """The results file's lines (the key is sent only to the endpoint's own origin)."""
        url = status.refs.get("results_url") or f"{self._root}/{segment(batch_id)}/results"
        if not self.control.same_origin(url):
            raise BatchError(f"message batch {batch_id}: results_url is not on {self.control.base_url}; "
                             "the key is not sent elsewhere")
        total = (max_line + 1) * (len(wanted) + 16)
        async for raw in self.control.lines(url, max_line, total):
            line = _line(raw, wanted)
            if line is not None:
                yield line


def body(items: list[Item]) -> list[Piece]:
    """``{"requests": [{"custom_id", "params"}, …]}`` with each item's exact bytes as its params."""
    pieces: list[Piece] = [b'{"requests":[']
    for i, item in enumerate(items):
        pieces += [(b"," if i else b"") + json.dumps({"custom_id": item.custom_id}).encode()[:-1] + b',"params":',
                   item, b"}"]
    return [*pieces, b"]}"]


def _line(raw: bytes | None, wanted: set[str]) -> Line | None:
    if raw is None:
        return None
    value, _ = decode_json(raw)
    if not isinstance(value, dict) or value.get("custom_id") not in wanted or not isinstance(value.get("result"), dict):
        return None
    custom_id, result = value["custom_id"], value["result"]
    kind = result.get("type")
    if kind == "succeeded":
        return Line(custom_id, 200, result.get("message"))
    if kind == "errored":
        error: Any = result.get("error")
        inner = error.get("error") if isinstance(error, dict) and isinstance(error.get("error"), dict) else error
        message = inner.get("message") if isinstance(inner, dict) else None
        return Line(custom_id, error_status(inner), error, error=str(message or inner)[:2000])
    if kind in ("canceled", "expired"):
        return Line(custom_id, None, result, unfinished=True, error=f"the batch item was {kind}")
    return None
