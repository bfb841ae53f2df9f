"""OpenAI's Batch API: a JSONL file uploaded to /files (purpose ``batch``), a batch on
/v1/chat/completions, polled, its output and error files downloaded.

Shapes as in the official SDK (openai-python ``types/batch.py``, ``batch_request_counts.py``,
``file_create_params.py``) and the Batch guide: each input line is
``{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body": {...}}``; each
output or error line ``{"id", "custom_id", "response": {"status_code", "request_id", "body"},
"error": {"code", "message"} | null}``. Requests a batch never ran (it expired or was
cancelled) come back in the error file with code ``batch_expired`` / ``batch_cancelled``,
or not at all: either way they are unfinished and sent again.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from wildtrace.core.jsonsafe import decode_json
from wildtrace.providers.batch import BatchAPI, BatchError, Control, Item, Line, Piece, Status, int_counts, segment

#: Statuses after which the batch changes no more (types/batch.py's ``status`` literal).
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
#: Error codes of items the batch never ran.
UNFINISHED_CODES = frozenset({"batch_expired", "batch_cancelled"})
#: The synchronous call the items stand for, as the Batch API names it.
ENDPOINT = "/v1/chat/completions"
#: The Batch guide's limits: 50,000 requests and 200 MB per input file.
MAX_ITEMS, MAX_BYTES = 50_000, 200 * 1000 * 1000


class OpenAIBatch(BatchAPI):
    """Files + Batches under the endpoint's base URL (``…/v1``)."""

    provider = "openai"
    max_items, max_bytes = MAX_ITEMS, MAX_BYTES

    def __init__(self, control: Control, endpoint_url: str, max_line: int) -> None:
        super().__init__(control, endpoint_url, max_line)
        if not endpoint_url.endswith("/chat/completions"):
            raise ValueError(f"not a chat completions URL: {endpoint_url}")
        # The batch's ``endpoint`` and each line's ``url`` are the Batch API's own name for the
        # synchronous call (one of its fixed set), whatever path prefix the base URL has.
        self.endpoint = ENDPOINT

    def _prefix(self, custom_id: str) -> bytes:
        head = json.dumps({"custom_id": custom_id, "method": "POST", "url": self.endpoint}, separators=(",", ":"))
        return head[:-1].encode() + b',"body":'

    def item_bytes(self, item: Item) -> int:
        return item.size + len(self._prefix(item.custom_id)) + 2

    def body(self, items: list[Item]) -> list[Piece]:
        """The JSONL input file: one line per item, its body spliced in as its exact bytes."""
        return [piece for item in items for piece in (self._prefix(item.custom_id), item, b"}\n")]

    async def create(self, items: list[Item]) -> tuple[str, str | None]:
        """Upload the JSONL (up to 200 MB, spooled by the control), create the batch."""
        spooled = f"openai-{items[0].custom_id[:16]}-{len(items)}.jsonl"
        uploaded = await self.control.upload(f"{self.control.base_url}/files", spooled, self.body(items),
                                             {"purpose": "batch"})
        file_id = uploaded.get("id") if isinstance(uploaded, dict) else None
        if not isinstance(file_id, str) or not file_id:
            raise BatchError(f"the file upload answered without an id: {str(uploaded)[:300]}")
        batch = await self.control.json("POST", f"{self.control.base_url}/batches",
                                        json={"input_file_id": file_id, "endpoint": self.endpoint,
                                              "completion_window": "24h"})
        batch_id = batch.get("id") if isinstance(batch, dict) else None
        if not isinstance(batch_id, str) or not batch_id:
            raise BatchError(f"the batch was created without an id: {str(batch)[:300]}")
        return batch_id, file_id

    async def status(self, batch_id: str) -> Status:
        """``GET /batches/{id}``: status, request_counts, output/error file ids, errors."""
        batch = await self.control.json("GET", f"{self.control.base_url}/batches/{batch_id}")
        if not isinstance(batch, dict):
            raise BatchError(f"batch {batch_id}: not a batch object: {str(batch)[:300]}")
        state = str(batch.get("status") or "unknown")
        refs = {k: batch[k] for k in ("output_file_id", "error_file_id") if isinstance(batch.get(k), str)}
        problem = None
        errors = batch.get("errors")
        if isinstance(errors, dict) and isinstance(errors.get("data"), list) and errors["data"]:
            first = errors["data"][0]
            problem = (f"{first.get('code')}: {first.get('message')}" if isinstance(first, dict)
                       else str(first))[:2000]
        return Status(state, state in TERMINAL, int_counts(batch.get("request_counts")), refs, problem)

    async def results(self, batch_id: str, status: Status, wanted: set[str], max_line: int) -> AsyncIterator[Line]:
        """The output file's lines, then the error file's."""
        total = (max_line + 1) * (len(wanted) + 16)
        for ref in ("output_file_id", "error_file_id"):
            file_id = status.refs.get(ref)
            if not file_id:
                continue
            url = f"{self.control.base_url}/files/{segment(file_id)}/content"
            async for raw in self.control.lines(url, max_line, total):
                line = _line(raw, wanted)
                if line is not None:
                    yield line


def _line(raw: bytes | None, wanted: set[str]) -> Line | None:
    """One output/error line as a Line, None when it is not one of ours or not readable."""
    if raw is None:
        return None  # over-long: its item stays unresolved and is sent again
    value, _ = decode_json(raw)
    if not isinstance(value, dict) or value.get("custom_id") not in wanted:
        return None
    custom_id = value["custom_id"]
    response, error = value.get("response"), value.get("error")
    if isinstance(error, dict) and error.get("code") in UNFINISHED_CODES:
        return Line(custom_id, None, error, unfinished=True, error=str(error.get("message") or error.get("code")))
    if isinstance(response, dict) and isinstance(response.get("status_code"), int):
        body = response.get("body")
        return Line(custom_id, response["status_code"], body)
    if isinstance(error, dict):  # a request-level failure with no response (validation of the line)
        message = f"{error.get('code')}: {error.get('message')}"
        return Line(custom_id, 400, {"error": error}, error=message)
    return None
