"""``python -m wildtrace.download``: fetch the WildTrace strict481 release where ``dataset=wildtrace`` reads it."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wildtrace.exitcodes import ArgumentParser, ExitCode
from wildtrace.exitcodes import error as report_error

PROG = "wildtrace-download"
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
    parser = ArgumentParser(prog=PROG, description=__doc__)
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


HUB = "https://huggingface.co"
#: Where a read token is made; and how long a Hub message may run in ours (it is outside bytes).
TOKENS_PAGE, MAX_HUB_MESSAGE = f"{HUB}/settings/tokens", 4000
#: Hub tokens as the Hub formats them, redacted wherever they appear in a message.
_TOKEN_SHAPE = re.compile(r"hf_[A-Za-z0-9]{8,}")


@dataclass(frozen=True)
class Diagnosis:
    """What went wrong with a fetch, said for a person: a kind (for tests and logs), the cause, the fix."""

    #: token_missing | token_refused | no_permission | gated | revision | repo_not_found | offline | incomplete |
    #: hub_unavailable | network | other
    kind: str
    #: One sentence: what the Hub or the network did.
    cause: str
    #: What to do about it.
    fix: str


def _chain(error: BaseException) -> list[BaseException]:
    """The error and its causes (``raise … from``), bounded so a cyclic chain cannot loop."""
    chain: list[BaseException] = []
    while error is not None and len(chain) < 8:
        chain.append(error)
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return chain


def _status(error: BaseException) -> int | None:
    """The HTTP status of a Hub error, when it carries a response."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _named(error: BaseException, *names: str) -> bool:
    """True if the error's class or a base is one of ``names`` (huggingface_hub's classes move between versions)."""
    return any(cls.__name__ in names for cls in type(error).__mro__)


def _auth_diagnosis(repo_id: str, status: int | None, token_sent: bool, gated: bool) -> Diagnosis:
    """401/403 and gated repos: missing token, refused token, or access not (yet) granted."""
    page = f"{HUB}/datasets/{repo_id}"
    if gated and token_sent:
        return Diagnosis("gated", f"{repo_id} is a gated dataset and the account of your token has no access to it "
                         "(yet)", f"request access on {page} (signed in as that account), wait for approval, "
                         "then run this again with the same HF_TOKEN")
    if gated:
        return Diagnosis("gated", f"{repo_id} is a gated dataset and no token was sent",
                         f"request access on {page}, create a read token at {TOKENS_PAGE} and "
                         "export HF_TOKEN=<token> (or run `hf auth login`)")
    if status == 403:
        return Diagnosis("no_permission", "the Hub refused your token for this dataset (403)",
                         f"give the token read access to public gated repos (fine-grained tokens) or create a read "
                         f"token at {TOKENS_PAGE} and export HF_TOKEN=<token>")
    if token_sent:
        return Diagnosis("token_refused", "the Hub refused the token in HF_TOKEN (or the saved login): invalid, "
                         "expired or without access (401)", f"create a read token at {TOKENS_PAGE} and export "
                         "HF_TOKEN=<token>; for a public dataset, unset HF_TOKEN")
    return Diagnosis("token_missing", f"the Hub answered 401 and no token was sent: {repo_id} is private or gated, "
                     "or does not exist", f"export HF_TOKEN=<a read token from {TOKENS_PAGE}> (request access on "
                     f"{page} first if it is gated), and check --repo-id")


def diagnose(error: BaseException, repo_id: str, revision: str, token_sent: bool) -> Diagnosis:
    """Classify a failed fetch by huggingface_hub's error classes and HTTP status, looking through its causes."""
    chain = _chain(error)
    status = next((s for s in map(_status, chain) if s is not None), None)
    if any(_named(e, "GatedRepoError") for e in chain):
        return _auth_diagnosis(repo_id, status, token_sent, gated=True)
    if any(_named(e, "RevisionNotFoundError") for e in chain):
        return Diagnosis("revision", f"the dataset has no revision {revision!r}",
                         f"pass --revision with a branch, tag or commit of {repo_id} (default main); "
                         f"they are listed on {HUB}/datasets/{repo_id}/tree/main")
    if status in (401, 403):
        return _auth_diagnosis(repo_id, status, token_sent, gated=False)
    if any(_named(e, "RepositoryNotFoundError") for e in chain):
        return Diagnosis("repo_not_found", f"the Hub has no dataset {repo_id} (404)",
                         f"check --repo-id (the release is {REPO_ID}) and that it is a dataset repository")
    if any(_named(e, "OfflineModeIsEnabled") for e in chain) or "HF_HUB_OFFLINE" in str(error):
        return Diagnosis("offline", "HF_HUB_OFFLINE is set, so nothing was fetched, and no copy is cached",
                         "unset HF_HUB_OFFLINE here, or fetch on a machine with network access and copy the folder")
    if status is not None and status >= 500:
        return Diagnosis("hub_unavailable", f"the Hub answered {status}: it is down or overloaded",
                         "try again in a few minutes (https://status.huggingface.co)")
    if status is None:
        return Diagnosis("network", "the Hub could not be reached (network down, DNS, proxy or firewall)",
                         "check the connection (HF_ENDPOINT, HTTPS_PROXY), or fetch on a machine with network "
                         "access and copy the folder here")
    return Diagnosis("other", f"the Hub answered {status}", "see the Hub's message below")


def known_tokens(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The Hub tokens this process could have sent (env vars, the saved login), for redaction and diagnosis."""
    tokens = [environ.get(name, "").strip() for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")]
    home = environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    token_file = Path(environ.get("HF_TOKEN_PATH") or os.path.join(home, "token"))
    with contextlib.suppress(OSError, UnicodeDecodeError):
        tokens.append(token_file.read_text("utf-8").strip()[:512])
    return [t for t in tokens if t]


def redact(text: str, tokens: list[str]) -> str:
    """``text`` with every known token and anything shaped like a Hub token replaced by ``hf_***``."""
    for token in sorted(tokens, key=len, reverse=True):
        text = text.replace(token, "hf_***")
    return _TOKEN_SHAPE.sub("hf_***", text)


def hub_message(error: BaseException, tokens: list[str]) -> str:
    """The Hub's whole message (every line, its cause's too), bounded and redacted, indented for the report."""
    parts: list[str] = []
    for e in _chain(error):
        text = str(e).strip()
        if text and not any(text in p for p in parts):
            parts.append(f"{type(e).__name__}: {text}")
    message = redact("\n".join(parts) or type(error).__name__, tokens)
    if len(message) > MAX_HUB_MESSAGE:
        message = message[:MAX_HUB_MESSAGE] + f" … [{len(message) - MAX_HUB_MESSAGE} more characters]"
    return "\n".join("    " + line for line in message.splitlines())


def fetch_commands(repo_id: str, revision: str, dest: Path) -> list[str]:
    """This command again, and huggingface_hub's own CLI fetching only the release's files (``hf download``)."""
    d, rev = shlex.quote(str(dest)), shlex.quote(revision)
    includes = " ".join(f"--include {shlex.quote(p)}" for p in ALLOW_PATTERNS)
    return [f"python -m wildtrace.download --repo-id {repo_id} --revision {rev} --dest {d}",
            f"hf download {repo_id} --repo-type dataset --revision {rev} --local-dir {d} {includes}"]


def instructions(repo_id: str, revision: str, dest: Path, diagnosis: Diagnosis, hub_said: str | None = None) -> str:
    """The one message for a failed fetch: what went wrong, the fix, the Hub's words, how to fetch it."""
    ours, theirs = fetch_commands(repo_id, revision, dest)
    lines = [f"could not get the Hugging Face dataset {repo_id} (revision {revision}) into {dest}",
             f"  why: {diagnosis.cause}",
             f"  fix: {diagnosis.fix}"]
    if hub_said:
        lines += ["  huggingface_hub said:", hub_said]
    lines += ["Then fetch it with", f"  {ours}", "or with huggingface_hub's CLI (only the release's files):",
              f"  {theirs}",
              f"The folder must hold {TASKS_FILE} and {CORPUS_DIR}/; "
              "or point WILDTRACE_DATA_DIR at an existing copy of it."]
    return "\n".join(lines)


def run_command(dest: Path) -> str:
    """The benchmark command for ``dest``; names WILDTRACE_DATA_DIR only when the config would not find it."""
    return RUN_COMMAND if dest == default_dest() else f"WILDTRACE_DATA_DIR={shlex.quote(str(dest))} {RUN_COMMAND}"


def summary(dest: Path) -> str:
    """What landed where, and how to run the benchmark on it."""
    return (f"WildTrace release ready in {dest}\n"
            f"  corpus files: {len(corpus_files(dest))}\n"
            f"  tasks file:   {dest / TASKS_FILE}\n"
            f"Run the benchmark with:\n  {run_command(dest)}")


def main(argv: list[str] | None = None) -> int:
    """Fetch, verify and summarise; 0 when the release is usable, 2 with the cause and the fix otherwise."""
    args = parse_args(argv)
    try:
        fetch(args.repo_id, args.revision, args.dest)
    except expected_errors() as error:  # evaluated only on failure, so the imports cost nothing on success
        tokens = known_tokens()
        diagnosis = diagnose(error, args.repo_id, args.revision, token_sent=bool(tokens))
        report_error(PROG, instructions(args.repo_id, args.revision, args.dest, diagnosis, hub_message(error, tokens)))
        return ExitCode.BAD_INPUT
    missing = missing_parts(args.dest)
    if missing:
        diagnosis = Diagnosis("incomplete", "the download finished but lacks " + ", ".join(missing),
                              f"check that revision {args.revision} of {args.repo_id} is the strict481 release")
        report_error(PROG, instructions(args.repo_id, args.revision, args.dest, diagnosis))
        return ExitCode.BAD_INPUT
    print(summary(args.dest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
