"""Documents stored once per tracking store, content-addressed by sha256.

The corpus is most of a run's bytes (about 230 MB on the release): copied into every run, a
six-job sweep would store it six times. Instead one run, ``documents`` in the experiment
``wildtrace-documents``, holds ``documents/<sha256>/<file name>``; a document already there is
never uploaded again, and each run points at it (tag ``wildtrace.documents_run_id``, column
``document_uri`` of ``tables/tasks.json``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wildtrace.core.tasks import DatasetError
from wildtrace.files import resolve_corpus_file
from wildtrace.tracking.rundir import RunDir
from wildtrace.tracking.store import get_or_create_experiment, log

EXPERIMENT = "wildtrace-documents"
STORE_TAG = "wildtrace.documents"
RUN_TAG = "wildtrace.documents_run_id"
PREFIX = "documents"


def document_store(client: Any, artifact_location: str | None) -> str:
    """The run holding the store's documents, created on first use (the oldest wins a race)."""
    experiment_id = get_or_create_experiment(client, EXPERIMENT, artifact_location)
    query = f"tags.`{STORE_TAG}` = 'store'"
    found = client.search_runs([experiment_id], query, order_by=["attributes.start_time ASC"], max_results=1)
    if found:
        return found[0].info.run_id
    mine = client.create_run(experiment_id, run_name="documents", tags={STORE_TAG: "store"}).info.run_id
    client.set_terminated(mine, "FINISHED")
    oldest = client.search_runs([experiment_id], query, order_by=["attributes.start_time ASC"], max_results=1)
    if oldest and oldest[0].info.run_id != mine:  # a parallel job created one first: keep theirs
        client.delete_run(mine)
        return oldest[0].info.run_id
    return mine


def sha256_file(path: Path) -> str:
    """The file's sha256, read in blocks (documents reach tens of MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_documents(rd: RunDir) -> dict[str, Path]:
    """sha256 → file of each document the run used (a file that moved since is skipped)."""
    corpus = Path(rd.config["dataset"]["corpus"])
    found: dict[str, Path] = {}
    seen: set[str] = set()
    for r in rd.responses:
        doc: Mapping = r.get("document") or {}
        name = doc.get("corpus_file")
        if not name or name in seen:
            continue
        seen.add(name)
        try:
            path = resolve_corpus_file(corpus, name, str(rd.path))
        except DatasetError as exc:
            log.warning("MLflow: document not stored (%s)", exc)
            continue
        found[doc.get("sha256") or sha256_file(path)] = path
    return found


class DocumentUploader:
    """Puts documents into the store once, whichever thread asks: the trace thread as tasks
    finish (so the copy is spread over the run), and the end of the run for the rest."""

    def __init__(self, client: Any, artifact_location: str | None) -> None:
        """Upload through ``client`` into the store beside ``artifact_location``."""
        self.client, self.artifact_location = client, artifact_location
        self._lock = threading.Lock()
        self._store_run: str | None = None
        self._stored: set[str] = set()

    def store_run(self) -> str:
        """The documents run (created on first use), with what it already holds listed once."""
        with self._lock:
            return self._open()

    def _open(self) -> str:
        if self._store_run is None:
            self._store_run = document_store(self.client, self.artifact_location)
            self._stored = {Path(a.path).name for a in self.client.list_artifacts(self._store_run, PREFIX)}
        return self._store_run

    def put(self, sha: str, path: Path) -> str:
        """Store ``path`` under its sha256 unless it is there; its ``runs:/`` URI."""
        with self._lock:
            run = self._open()
            if sha not in self._stored:
                self.client.log_artifact(run, str(path), artifact_path=f"{PREFIX}/{sha}")
                self._stored.add(sha)
            return f"runs:/{run}/{PREFIX}/{sha}/{path.name}"

    def put_task(self, document: Mapping, corpus_dir: str) -> None:
        """The document of one finished task (its answer's ``document``: corpus_file, sha256), if not stored yet."""
        doc: Mapping = document or {}
        sha, name = doc.get("sha256"), doc.get("corpus_file")
        if not sha or not name or sha in self._stored:
            return
        self.put(sha, resolve_corpus_file(Path(corpus_dir), name, "documents"))


def store_documents(client: Any, rd: RunDir, artifact_location: str | None,
                    uploader: DocumentUploader | None = None) -> tuple[str, dict[str, str]]:
    """Upload the run's documents the store lacks; (store run id, sha256 → runs:/ URI of each)."""
    uploader = uploader or DocumentUploader(client, artifact_location)
    uris = {sha: uploader.put(sha, path) for sha, path in run_documents(rd).items()}
    return uploader.store_run(), uris
