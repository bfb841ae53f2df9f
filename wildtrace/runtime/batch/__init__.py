"""Batch mode: the stage's calls through the providers' batch APIs, at their discount.

One path, two transports. A batch item is the request a synchronous call would send
(the non-streamed body with its prompt-cache hint; its cache key is made from the plain body's
bytes), its custom_id is that cache key, and its result goes through the provider's own parser
(``runtime.net.call.interpret``) into the same outcome cache. So a synchronous rerun of the
same config sends nothing, and a batch run after a synchronous one sends nothing.

- ``ledger``: every batch created is recorded (cache folder and run folder, atomically)
  the moment the provider returns its id, so a run killed while a batch is pending
  resumes by polling that batch;
- ``base``: the ``Control`` each provider's batch format (``providers/<name>/batch.py``, named by
  its class as ``batch_api``) speaks through: the control requests, retried, spooled and bounded;
- ``runner``: rounds of batches for one endpoint: resume, create, poll, collect, re-send
  the transient failures and the unfinished items of an expired or cancelled batch;
- ``spend``: the spend cap: each item's worst case reserved at the batch price before
  its batch is created, what cannot fit recorded ``budget_exhausted`` and never sent;
- ``phase``: what the pipeline calls before its workers start: answers first, then the
  judges, each endpoint in batch only when its config says ``batch: true``.
"""

from wildtrace.runtime.batch.phase import BatchSettings, batch_phase

__all__ = ["BatchSettings", "batch_phase"]
