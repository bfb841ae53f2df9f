"""Jobs on one key pace together: an endpoint's budget, shared through the cache folder.

Parallel jobs (joblib, submitit, Ray, several machines on a shared filesystem) whose cache
folder is the same share one small state file per endpoint, ``<cache>/pacing/<id>.json``,
``id`` a hash of the endpoint's base URL, route and key variable's *name* (never the key).
It holds:

- every job's sends of the last windows: when (wall time), and what each took from each window;
- the provider's latest figures of each window: what was left, as of which send, and when the
  window is whole again; each window's length, as learned (the longest reset reported);
- a pause no job sends before: the throttle any job met;
- where no header states a budget, what a window holds as the 429s taught it: once a job has
  learned how long a window lasts (the first success after the first throttle), and at each
  throttle after, every job's sends over the window before the refused one, a tenth below; no
  window's time then holds more sends of all jobs, and each send raises it by a fiftieth of
  itself, so a 429 stays rare. A refused send is struck off (the provider did not count it).

The file is made when a job first hears of a budget or meets a throttle; until then nothing is
written (an endpoint that never says either shares nothing, and costs one read a send), and each
job keeps its own sends (the last ``BLIND_KEPT``), written down with its first step on the file:
what the jobs sent before the first 429 is what a window holds. Every send is written down after.

A job sends (``reserve``) only when what a figure says is left, less what every job sent after the
send it answers, covers it; the send is written down in the same step, so two jobs never spend the
same remaining budget. Sends reach the provider in about the order they were written down, not
exactly (two jobs' connections, two processes' schedulers): a figure may count a send made after
its own, or miss one made before it, so the least room the last few figures leave is taken. A
figure past its reset is whole again (and again a window after each reset).

Each step reads the file, changes it and replaces it by rename, holding an ``flock`` on
``<id>.lock``: a job killed at any point leaves the last whole state and its lock released,
and a file that cannot be read is a fresh state. A filesystem that refuses locks shares nothing
(each job paces alone). Wall clocks are compared: machines sharing a folder need clocks in step
(NTP) to well within a window.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

STATE_VERSION = 1
#: The windows a send is counted against (``ratelimit.read_budget``'s names), in the order a send stores them.
WINDOWS = ("tokens", "requests", "input-tokens", "output-tokens")
#: Sends kept at most (a few windows' worth at any real limit) …
SENDS_KEPT = 8192
#: A job's own sends kept while nothing was said (written down when something is).
BLIND_KEPT = 512
#: A window is taken as whole again this share of a window after the reset it reported: a reset is
#: stated to the millisecond (or the second), and a send takes time to arrive.
SETTLE = 1 / 64
#: What a window holds, learned from 429s alone, is set this share below what the jobs sent …
LEARNED_MARGIN = 0.9
#: … and grows by this share of each send …
LEARNED_GROWTH = 0.02
#: … once a throttle has followed the window's learning; before, by this share of itself a send
#: (the search that learned the window may have overshot it).
LEARNED_RAMP = 0.1
#: The latest figures of a window kept (the least room they leave is taken).
FIGURES_KEPT = 8
#: The folder under the cache that holds the state files.
FOLDER = "pacing"


class Reported(Protocol):
    """One window a response reported (``ratelimit.Window``)."""

    @property
    def limit(self) -> float | None: ...

    @property
    def remaining(self) -> float | None: ...

    @property
    def reset_in(self) -> float | None: ...


@dataclass
class Figure:
    """The provider's newest figure of one window."""

    remaining: float  #: what it said was left …
    sent_at: float  #: … counting every send before this one (wall time)
    limit: float | None  #: the window's size, if stated
    reset_at: float | None  #: when the window is whole again (wall time), if stated


@dataclass
class State:
    """What the jobs on one endpoint share (the state file's content)."""

    figures: dict[str, list[Figure]] = field(default_factory=dict)  #: each window's latest, oldest first
    window_s: dict[str, float] = field(default_factory=dict)  #: each window's length, as learned
    paused_until: float = 0.0  #: no job sends before this (wall time)
    sends: list[list[float]] = field(default_factory=list)  #: [wall time, units in each of WINDOWS], oldest first
    held: dict[str, float] = field(default_factory=dict)  #: what a window holds, by unit, learned from 429s …
    held_s: float = 0.0  #: … in a window this long
    ramping: bool = False  #: no throttle since it was learned: it grows by a share of itself


def endpoint_id(base_url: str, route: str, key_env: str | None) -> str:
    """The state file's name for an endpoint: its base URL, route and key variable's name, hashed."""
    material = json.dumps([base_url.rstrip("/"), route, key_env or ""])
    return hashlib.sha256(material.encode()).hexdigest()[:32]


def rolled(figure: Figure, window_s: float | None, now: float) -> Figure:
    """A figure past its reset is whole again, as if the provider had said so at the reset; the
    next reset is a window later. A figure that states no reset is whole a window after it."""
    reset_at = figure.reset_at if figure.reset_at is not None else (
        figure.sent_at + window_s if window_s else None)
    if figure.limit is None or reset_at is None or now < reset_at:
        return figure
    if not window_s:
        return Figure(figure.limit, reset_at, figure.limit, None)
    last = reset_at + math.floor((now - reset_at) / window_s) * window_s
    return Figure(figure.limit, last, figure.limit, last + window_s)


def room(state: State, name: str, now: float) -> tuple[float | None, float | None]:
    """(what is left of window ``name`` for the next send, when it is next whole): the least the
    latest figures leave, less every send after each; None, None if nothing was said of it."""
    column = 1 + WINDOWS.index(name)
    found: tuple[float | None, float | None] = None, None
    for figure in state.figures.get(name, []):
        figure = rolled(figure, state.window_s.get(name), now)
        left = figure.remaining - sum(send[column] for send in state.sends if send[0] > figure.sent_at)
        if found[0] is None or left < found[0]:
            found = left, figure.reset_at
    return found


def reserve(state: State, units: Mapping[str, int], now: float) -> float:
    """Seconds until a send of ``units`` fits every window; 0.0 when it fits now (then it is written down)."""
    if now < state.paused_until:
        return state.paused_until - now
    waits = [0.0]
    for name, figures in state.figures.items():
        need = units.get(name, 0)
        left, whole_at = room(state, name, now)
        if need <= 0 or left is None or need <= left:
            continue
        size = figures[-1].limit
        if size is not None and need > size and left >= size:
            continue  # larger than a whole window: it goes when the window is whole
        window = state.window_s.get(name)
        waits.append(whole_at - now if whole_at is not None else (window or 1.0) / 16)
    waits += [held_wait(state, name, units.get(name, 0), now) for name in state.held]
    wait = max(waits)
    if wait <= 0.0:
        for name in state.held:
            if state.ramping:
                state.held[name] *= 1 + LEARNED_RAMP
            else:
                state.held[name] += LEARNED_GROWTH * units.get(name, 0)
        state.sends.append([now, *(float(units.get(name, 0)) for name in WINDOWS)])
        return 0.0
    return wait


def held_wait(state: State, name: str, need: int, now: float) -> float:
    """Seconds until every job's sends over the last window leave room for ``need`` in what the 429s
    taught a window holds (a send larger than that goes once the window is empty)."""
    column = 1 + WINDOWS.index(name)
    recent = [send for send in state.sends if send[0] > now - state.held_s]
    used = sum(send[column] for send in recent)
    if need <= 0 or used + need <= state.held[name]:
        return 0.0
    for send in recent:  # the oldest leave the window first
        used -= send[column]
        if used + need <= state.held[name] or used <= 0:
            return send[0] + state.held_s - now
    return 0.0


def throttled(state: State, sent_at: float, pause_s: float, window_s: float, now: float) -> None:
    """A new throttle a job met: every job pauses for ``pause_s``; where ``window_s`` (how long a
    window lasts, as 429s taught the job) is known, what a window holds is what every job sent over
    the window before the refused send, a margin below."""
    state.paused_until = max(state.paused_until, now + pause_s)
    if window_s <= 0:
        return
    state.ramping = False
    before = [send for send in state.sends if sent_at - window_s <= send[0] < sent_at]
    for name in ("input-tokens", "output-tokens", "requests"):
        total = sum(send[1 + WINDOWS.index(name)] for send in before)
        if total > 0:
            state.held[name] = LEARNED_MARGIN * total
    state.held_s = window_s if state.held else state.held_s


def windowed(state: State, sent_at: float, span_s: float, now: float) -> None:
    """A job's first success after the first throttle, sent at ``sent_at``, ``span_s`` after its
    first send: unless a job learned it first, a window lasts from the first send of any job (other
    jobs may have started before, up to a span earlier) to it, and holds their sends not refused
    over it, a margin below."""
    first = min((send[0] for send in state.sends if sent_at - 2 * span_s <= send[0] < sent_at), default=None)
    if not state.held and first is not None:
        throttled(state, sent_at, 0.0, sent_at - first, now)
        state.ramping = bool(state.held)


def uncount(state: State, sent_at: float) -> None:
    """A send the provider refused (a 429): it is not in what a window held."""
    for index, send in enumerate(state.sends):
        if send[0] == sent_at:
            del state.sends[index]
            return


def learn(state: State, sent_at: float, windows: Mapping[str, Reported], now: float) -> None:
    """A response's figures, as of the send it answers (kept in the order of their sends, the latest few)."""
    for name, window in windows.items():
        if name not in WINDOWS:
            continue
        if window.reset_in is not None and window.reset_in > 0:
            state.window_s[name] = max(state.window_s.get(name, 0.0), window.reset_in)
        if window.remaining is None:
            continue
        held = state.figures.setdefault(name, [])
        limit = window.limit if window.limit is not None else (held[-1].limit if held else None)
        settle = state.window_s.get(name, 0.0) * SETTLE
        held.append(Figure(window.remaining, sent_at, limit,
                           now + window.reset_in + settle if window.reset_in is not None else None))
        held.sort(key=lambda f: f.sent_at)
        del held[:-FIGURES_KEPT]


def prune(state: State, now: float) -> None:
    """Forget sends every figure already counts (and past ``SENDS_KEPT``); figures as rolled to now."""
    state.figures = {name: [rolled(f, state.window_s.get(name), now) for f in figures]
                     for name, figures in state.figures.items() if figures}
    if state.figures:
        counted = min(f.sent_at for figures in state.figures.values() for f in figures)
        state.sends = [send for send in state.sends if send[0] > counted]
    elif state.held_s:
        state.sends = [send for send in state.sends if send[0] > now - 2 * state.held_s]
    del state.sends[:-SENDS_KEPT]


def encode(state: State) -> str:
    """The state file's text."""
    return json.dumps({"v": STATE_VERSION, "paused_until": state.paused_until, "window_s": state.window_s,
                       "figures": {n: [[f.remaining, f.sent_at, f.limit, f.reset_at] for f in figures]
                                   for n, figures in state.figures.items()},
                       "sends": state.sends, "held": state.held, "held_s": state.held_s,
                       "ramping": state.ramping}, separators=(",", ":"))


def decode(text: str) -> State:
    """A state file's content; anything unreadable or of another shape is a fresh state."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("v") != STATE_VERSION:
            return State()
        figures = {str(n): [Figure(float(r), float(s), None if lim is None else float(lim),
                                   None if at is None else float(at)) for r, s, lim, at in held]
                   for n, held in data["figures"].items()}
        window_s = {str(n): float(w) for n, w in data["window_s"].items()}
        sends = [[float(x) for x in send] for send in data["sends"] if len(send) == 1 + len(WINDOWS)]
        held = {str(n): float(c) for n, c in data.get("held", {}).items() if n in WINDOWS}
        return State(figures, window_s, float(data["paused_until"]), sends, held, float(data.get("held_s", 0.0)),
                     data.get("ramping") is True)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return State()


class SharedBudget:
    """One endpoint's state file under a cache folder, read and changed under its lock."""

    def __init__(self, directory: Path, name: str, wall: Callable[[], float] = time.time) -> None:
        self.path = directory / f"{name}.json"
        self._lock_path = directory / f"{name}.lock"
        self._wall = wall
        self._fd: int | None = None
        self._unwritten: list[list[float]] = []  #: this job's sends while nothing was said, oldest first
        self.refused: str | None = None  #: why the folder or its lock was refused (then nothing is shared)

    @classmethod
    def under(cls, cache_dir: Path, base_url: str, route: str, key_env: str | None) -> SharedBudget:
        """The state file of an endpoint under a cache folder."""
        return cls(cache_dir / FOLDER, endpoint_id(base_url, route, key_env))

    def reserve(self, against: Callable[[str], int]) -> tuple[float, float]:
        """(seconds to wait, 0.0 when the send is written down now; the wall time it was written at)."""
        now = self._wall()
        if self.refused is not None:
            return 0.0, now
        units = {name: against(name) for name in WINDOWS}
        if self._nothing_said():  # no job has heard of a budget or met a throttle: kept here until one does
            self._unwritten.append([now, *(float(units[name]) for name in WINDOWS)])
            del self._unwritten[:-BLIND_KEPT]
            return 0.0, now
        with self._locked() as state:
            if state is None:
                return 0.0, now
            return reserve(state, units, now), now

    def learn(self, sent_at: float, windows: Mapping[str, Reported]) -> None:
        """A response's budget figures, for the send made at ``sent_at``."""
        if not windows:
            return
        with self._locked() as state:
            if state is not None:
                learn(state, sent_at, windows, self._wall())

    def throttled(self, sent_at: float, pause_s: float, window_s: float = 0.0) -> tuple[dict[str, float], float]:
        """A new throttle met by the send made at ``sent_at``: every job pauses for ``pause_s``; with
        no budget header, ``window_s`` is how long a window lasts, as the job learned it (0: unknown).
        What a window of every job's sends holds now, and how long it is (empty, 0.0: not learned)."""
        with self._locked() as state:
            if state is None:
                return {}, 0.0
            throttled(state, sent_at, pause_s, window_s, self._wall())
            return dict(state.held), state.held_s
        return {}, 0.0  # the write was refused: this job paces alone

    def _nothing_said(self) -> bool:
        """Whether the file holds no figure and no throttle was ever met (read without the lock: it is
        replaced whole). Once one was, every send is written down: the next throttle measures them."""
        state = self.read()
        return not state.figures and not state.held and state.paused_until == 0.0

    def windowed(self, sent_at: float, span_s: float) -> tuple[dict[str, float], float]:
        """A job's first success after the first throttle, sent at ``sent_at``, ``span_s`` after its first
        send: what a window of every job's sends holds, and how long it is (``throttled``)."""
        with self._locked() as state:
            if state is None:
                return {}, 0.0
            windowed(state, sent_at, span_s, self._wall())
            return dict(state.held), state.held_s
        return {}, 0.0

    def uncount(self, sent_at: float) -> None:
        """The send made at ``sent_at`` was refused: it is not in what a window held."""
        with self._locked() as state:
            if state is not None:
                uncount(state, sent_at)

    def read(self) -> State:
        """The state as the file holds it now (for tests and the curious)."""
        try:
            return decode(self.path.read_text(encoding="utf-8"))
        except OSError:
            return State()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[State | None]:
        """The state, under the lock, written back after; None when the folder or its lock is refused."""
        fd = self._lock()
        if fd is None:
            yield None
            return
        try:
            state = self.read()
            if self._unwritten:  # this job's sends from before anything was said
                state.sends = sorted(state.sends + self._unwritten)
                self._unwritten = []
            yield state
            prune(state, self._wall())
            self._write(encode(state))
        except OSError as exc:
            self._refuse(exc)
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _lock(self) -> int | None:
        if self.refused is not None:
            return None
        try:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # held for one read and one rename: microseconds
        except OSError as exc:
            self._refuse(exc)
            return None
        return self._fd

    def _write(self, text: str) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, self.path)  # no fsync: a state lost to a power cut only paces less well
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _refuse(self, exc: OSError) -> None:
        self.refused = f"{self.path.parent}: {exc.strerror or exc}"
        log.warning("pacing: cannot share the rate budget with other jobs through %s; this job paces alone "
                    "(docs/team/team.md)", self.refused)
        self.close()

    def close(self) -> None:
        """Close the lock file."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
