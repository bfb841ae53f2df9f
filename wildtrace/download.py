"""``python -m wildtrace.download``: fetch the WildTrace strict481 release where ``dataset=wildtrace`` reads it."""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
from pathlib import Path

REPO_ID = "CinderD/wildtrace"
TASKS_FILE = "data/wildtrace_strict481.with_answers.json"
CORPUS_DIR = "corpus"
# Only what the harness and an auditor need; anything else in the repo is not fetched.
ALLOW_PATTERNS = ["corpus/*", "data/*", "eval/*", "documentation/*", "README.md"]
RUN_COMMAND = "python -m wildtrace dataset=wildtrace model=<name> judge_panel=paper"


def _abspath(path: str) -> Path:
    """Absolute path the way conf/ resolves it (``wt.abspath``), so comparisons with it agree."""
    return Path(os.path.abspath(os.path.expanduser(path)))


def default_dest() -> Path:
    """The folder ``conf/dataset/wildtrace.yaml`` reads: $WILDTRACE_DATA_DIR, else ./outputs/datasets/wildtrace."""
    return _abspath(os.environ.get("WILDTRACE_DATA_DIR") or os.path.join("outputs", "datasets", "wildtrace"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line; defaults point at the folder the benchmark config reads."""
    parser = argparse.ArgumentParser(prog="wildtrace-download", description=__doc__)
    parser.add_argument("--dest", type=_abspath, default=None,
                        help="target folder (default: $WILDTRACE_DATA_DIR, else ./outputs/datasets/wildtrace)")
    parser.add_argument("--revision", default="main", help="branch, tag or commit (default: main)")
    parser.add_argument("--repo-id", default=REPO_ID, help=f"Hub dataset repo (default: {REPO_ID})")
    args = parser.parse_args(argv)
    # Resolved after parsing so the environment and cwd of this very call decide it.
    args.dest = args.dest or default_dest()
    return args


def expected_errors() -> tuple[type[BaseException], ...]:
    """Exceptions an offline or unreachable Hub raises, across huggingface_hub versions.

    OSError covers huggingface_hub's own errors (HfHubHTTPError, LocalEntryNotFoundError,
    OfflineModeIsEnabled) and requests' (0.x). The httpx family (httpx in 1.x, httpx2 in 2.x)
    does not derive from OSError and can escape raw, so add whichever is installed.
    """
    errors: list[type[BaseException]] = [OSError]
    for module, name in (("httpx", "HTTPError"), ("httpx2", "HTTPError"), ("requests", "RequestException")):
        try:
            errors.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


def fetch(repo_id: str, revision: str, dest: Path) -> None:
    """Download the release into ``dest``; HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE apply natively."""
    from huggingface_hub import snapshot_download  # imported here so --help stays instant

    snapshot_download(repo_id=repo_id, repo_type="dataset", local_dir=dest, revision=revision,
                      allow_patterns=ALLOW_PATTERNS)


def corpus_files(dest: Path) -> list[Path]:
    """The documents under ``dest/corpus`` (empty if the folder is absent)."""
    corpus = dest / CORPUS_DIR
    return sorted(p for p in corpus.rglob("*") if p.is_file()) if corpus.is_dir() else []


def missing_parts(dest: Path) -> list[str]:
    """What ``dataset=wildtrace`` needs but ``dest`` lacks: the tasks file and a non-empty corpus."""
    missing = [] if (dest / TASKS_FILE).is_file() else [str(dest / TASKS_FILE)]
    if not corpus_files(dest):
        missing.append(f"{dest / CORPUS_DIR}/ (no files)")
    return missing


def instructions(repo_id: str, revision: str, dest: Path, reason: str) -> str:
    """The one message for a failed fetch: what went wrong, what to fetch, where to put it."""
    d, rev = shlex.quote(str(dest)), shlex.quote(revision)
    return (
        f"wildtrace-download: could not get the Hugging Face dataset {repo_id} (revision {revision}) "
        f"into {dest}: {reason}\n"
        "Fetch it on a machine with network access, by the same command:\n"
        f"  python -m wildtrace.download --repo-id {repo_id} --revision {rev} --dest {d}\n"
        "or with the Hub CLI (`hf download` in newer huggingface_hub, same arguments):\n"
        f"  huggingface-cli download {repo_id} --repo-type dataset --revision {rev} --local-dir {d}\n"
        f"then put the folder at {dest}; it must hold {TASKS_FILE} and {CORPUS_DIR}/.\n"
        "Or point WILDTRACE_DATA_DIR at an existing copy of that folder."
    )


def run_command(dest: Path) -> str:
    """The benchmark command for ``dest``; names WILDTRACE_DATA_DIR only when the config would not find it."""
    return RUN_COMMAND if dest == default_dest() else f"WILDTRACE_DATA_DIR={shlex.quote(str(dest))} {RUN_COMMAND}"


def summary(dest: Path) -> str:
    """What landed where, and how to run the benchmark on it."""
    return (f"WildTrace release ready in {dest}\n"
            f"  corpus files: {len(corpus_files(dest))}\n"
            f"  tasks file:   {dest / TASKS_FILE}\n"
            f"Run the benchmark with:\n  {run_command(dest)}")


def _reason(error: BaseException) -> str:
    """A one-line reason: the error type and the first line of its message (hub errors run long)."""
    first = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def main(argv: list[str] | None = None) -> int:
    """Fetch, verify and summarise; 0 when the release is usable, 2 with instructions otherwise."""
    args = parse_args(argv)
    try:
        fetch(args.repo_id, args.revision, args.dest)
    except expected_errors() as error:  # evaluated only on failure, so the imports cost nothing on success
        print(instructions(args.repo_id, args.revision, args.dest, _reason(error)), file=sys.stderr)
        return 2
    missing = missing_parts(args.dest)
    if missing:
        reason = "the download finished but lacks " + ", ".join(missing)
        print(instructions(args.repo_id, args.revision, args.dest, reason), file=sys.stderr)
        return 2
    print(summary(args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
