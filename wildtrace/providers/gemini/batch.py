"""Gemini's batch mode: ``models/{model}:batchGenerateContent`` with inline requests, the
long-running operation polled at ``/v1beta/{batches/…}``.

Shapes as in the Gemini API reference (ai.google.dev/api/batch-mode) and the google-genai
SDK: the batch is ``{"batch": {"display_name", "input_config": {"requests": {"requests":
[{"request": <GenerateContentRequest>, "metadata": {"key": <custom_id>}}]}}}}``; the answer
and each poll are an Operation ``{"name": "batches/…", "metadata": {"state", "batchStats"},
"done", "response": {"inlinedResponses": {"inlinedResponses": [{"response" | "error",
"metadata": {"key"}}]}}}``. States: BATCH_STATE_PENDING, _RUNNING, _SUCCEEDED, _FAILED,
_CANCELLED, _EXPIRED. int64 counts arrive as JSON strings. Inline input is limited to
20 MB per batch, so large stages are split into several batches (file input is not used).
The results are in the finished operation itself: that one answer is bounded by the
items' count × the endpoint's response bound.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from wildtrace.providers.base import error_status
from wildtrace.providers.batch import BatchAPI, BatchError, Control, Item, Line, Piece, Status, segment

TERMINAL = frozenset({"BATCH_STATE_SUCCEEDED", "BATCH_STATE_FAILED", "BATCH_STATE_CANCELLED", "BATCH_STATE_EXPIRED"})
#: Gemini's inline-request limit (20 MB per batch request); no documented request count limit.
MAX_ITEMS, MAX_BYTES = 100_000, 20 * 1000 * 1000
BATCH_ID = "batches/"


def _counts(value: Any) -> dict[str, int]:
    """batchStats with its int64 strings as numbers."""
    if not isinstance(value, dict):
        return {}
    out = {}
    for key, count in value.items():
        if isinstance(count, str) and count.isdigit() and len(count) < 19:
            count = int(count)
        if isinstance(count, int) and not isinstance(count, bool):
            out[str(key)] = count
    return out


class GeminiBatch(BatchAPI):
    """batchGenerateContent under the endpoint's base URL."""

    provider = "gemini"
    max_items, max_bytes = MAX_ITEMS, MAX_BYTES

    def __init__(self, control: Control, endpoint_url: str, max_line: int) -> None:
        super().__init__(control, endpoint_url, max_line)
        if not endpoint_url.endswith(":generateContent"):
            raise ValueError(f"not a generateContent URL: {endpoint_url}")
        self.create_url = endpoint_url[: -len(":generateContent")] + ":batchGenerateContent"
        self.done: dict[str, dict] = {}  # batch id → the finished operation (it holds the results)

    def item_bytes(self, item: Item) -> int:
        return item.size + len(item.custom_id) + 48

    async def create(self, items: list[Item]) -> tuple[str, str | None]:
        """One POST whose inline requests are each item's exact bytes (spooled by the control)."""
        spooled = f"gemini-{items[0].custom_id[:16]}-{len(items)}.json"
        operation = await self.control.post(self.create_url, spooled, body(items))
        name = operation.get("name") if isinstance(operation, dict) else None
        if not isinstance(name, str) or not name.startswith(BATCH_ID):
            raise BatchError(f"the batch was created without a batches/ name: {str(operation)[:300]}")
        return name[len(BATCH_ID):], None

    def _url(self, batch_id: str) -> str:
        root = self.create_url.split("/v1beta/", 1)[0]
        return f"{root}/v1beta/{BATCH_ID}{segment(batch_id)}"

    async def status(self, batch_id: str) -> Status:
        """The operation's metadata.state and batchStats; a finished one is kept for ``results``."""
        limit = (self.max_line + 1) * (MAX_ITEMS + 16)
        operation = await self.control.json("GET", self._url(batch_id), limit=limit)
        if not isinstance(operation, dict):
            raise BatchError(f"batch {batch_id}: not an operation: {str(operation)[:300]}")
        metadata = operation.get("metadata")
        meta = metadata if isinstance(metadata, dict) else {}
        state = str(meta.get("state") or "unknown")
        problem = None
        if isinstance(operation.get("error"), dict):
            problem = str(operation["error"].get("message") or operation["error"])[:2000]
        terminal = state in TERMINAL or operation.get("done") is True
        if terminal:
            self.done[batch_id] = operation
        return Status(state, terminal, _counts(meta.get("batchStats")), {}, problem)

    async def results(self, batch_id: str, status: Status, wanted: set[str], max_line: int) -> AsyncIterator[Line]:
        """The finished operation's inline responses, matched by metadata.key."""
        operation = self.done.pop(batch_id, None) or {}
        for entry in _inlined(operation):
            line = _line(entry, wanted)
            if line is not None:
                yield line


def body(items: list[Item]) -> list[Piece]:
    """The batch with inline requests, each item's exact bytes as its request and its key as metadata."""
    head = {"display_name": f"wildtrace-{items[0].custom_id[:16]}-{len(items)}"}
    pieces: list[Piece] = [b'{"batch":' + json.dumps(head).encode()[:-1] + b',"input_config":{"requests":{"requests":[']
    for i, item in enumerate(items):
        pieces += [(b"," if i else b"") + b'{"request":', item,
                   b',"metadata":' + json.dumps({"key": item.custom_id}).encode() + b"}"]
    return [*pieces, b"]}}}}"]


def _inlined(operation: dict) -> list[Any]:
    for field in ("response", "output"):
        holder = operation.get(field)
        if not isinstance(holder, dict):
            metadata = operation.get("metadata")
            holder = metadata.get(field) if isinstance(metadata, dict) else None
        inline = holder.get("inlinedResponses") if isinstance(holder, dict) else None
        if isinstance(inline, dict):
            inline = inline.get("inlinedResponses")
        if isinstance(inline, list):
            return inline
    return []


def _line(entry: Any, wanted: set[str]) -> Line | None:
    if not isinstance(entry, dict):
        return None
    meta = entry.get("metadata")
    key = meta.get("key") if isinstance(meta, dict) else None
    if key not in wanted:
        return None
    if isinstance(entry.get("response"), dict):
        return Line(key, 200, entry["response"])
    error = entry.get("error")
    if isinstance(error, dict):
        return Line(key, error_status(error), {"error": error}, error=str(error.get("message") or error)[:2000])
    return None
