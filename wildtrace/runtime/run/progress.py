"""The run's progress: a tqdm bar on a terminal, elsewhere a log line every few seconds."""

from __future__ import annotations

import logging
import sys
import time

from wildtrace.runtime.spend.cap import Ledger
from wildtrace.runtime.net.endpoint import Endpoint
from wildtrace.runtime.run.pipeline import Counters

log = logging.getLogger("wildtrace")


class _Progress:
    """A tqdm bar on a terminal; elsewhere a log line every ``every_s`` seconds (and at the end)."""

    def __init__(self, total: int, enabled: bool, every_s: float, endpoints: dict[str, Endpoint],
                 ledger: Ledger | None = None) -> None:
        self.total, self.every_s, self.endpoints = total, every_s, endpoints
        self.ledger = ledger or Ledger()
        self.started = time.monotonic()
        self.last = self.started
        self.bar = None
        self.lines = enabled and not sys.stderr.isatty()
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc="tasks", unit="task", file=sys.stderr)

    def __call__(self, c: Counters, task_done: bool) -> None:
        if self.bar is not None:
            if task_done:
                self.bar.update(1)
            if c.batches:  # batch mode: each batch's state and counts while the bar waits
                self.bar.set_description_str("tasks · " + "; ".join(c.batches.values()), refresh=False)
            spend = self.ledger.progress()
            self.bar.set_postfix({**c.as_postfix(), **({"usd": spend.removeprefix("spent ")} if spend else {})},
                                 refresh=False)
        elif self.lines and time.monotonic() - self.last >= self.every_s:
            self.line(c)

    def line(self, c: Counters) -> None:
        """One progress line: counts, rate, failures, each endpoint's concurrency bound."""
        self.last = time.monotonic()
        elapsed = max(self.last - self.started, 1e-9)
        limits = " ".join(f"{label}={e.limit.limit}" for label, e in self.endpoints.items())
        log.info("progress: %d/%d tasks (%.2f/s) · ok %d · failed %d · ooc %d · judged %d · unavailable %d · "
                 "retries %d · limits %s%s", c.tasks_done, self.total, c.tasks_done / elapsed, c.answered, c.failed,
                 c.out_of_context, c.judged, c.judge_unavailable, c.retries, limits,
                 (f" · {spend}" if (spend := self.ledger.progress()) else "")
                 + "".join(f" · batch {line}" for line in c.batches.values()))

    def close(self, c: Counters) -> None:
        """End the bar, or write the last line."""
        if self.bar is not None:
            self.bar.close()
        elif self.lines:
            self.line(c)
