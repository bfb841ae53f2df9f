"""wildtrace.download against a real local server speaking the slice of the Hub API snapshot_download uses.

huggingface_hub reads HF_ENDPOINT and HF_HUB_OFFLINE into module constants at import time, so each
download runs as ``python -m wildtrace.download`` in a subprocess with its own environment.

The emulated endpoints (huggingface_hub 2.x, read from its source):
  GET  /api/agent-harnesses                          User-Agent agent detection (only with telemetry on)
  GET  /api/datasets/{repo}/revision/{rev}           repo_info: the commit sha (+ siblings)
  GET  /api/datasets/{repo}/tree/{sha}?recursive=... list_repo_tree: path, size, oid per entry
  HEAD /datasets/{repo}/resolve/{sha}/{path}         metadata: X-Repo-Commit, ETag, Content-Length
  GET  /datasets/{repo}/resolve/{sha}/{path}         the bytes
No X-Xet-Hash header nor xetHash tree field is ever sent, so the client takes the plain HTTP path.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from wildtrace import download
from wildtrace.core.tasks import parse_tasks

REPO = download.REPO_ID
COMMIT = "5f3c9a1e0b7d2c4e6f8a0b1c2d3e4f5a6b7c8d9e"
EMPTY_REGISTRY = {"standardEnvVars": [], "harnesses": {}}
OUTSIDE_ALLOW_PATTERNS = "scripts/build_release.py"


def build_release(root: Path, *, with_tasks: bool = True) -> Path:
    """Write a tiny release in the real layout: 2 corpus files, the tasks file, eval/, docs, and one stray file."""
    tasks = [
        {"question_id": "wt-0001", "question_text": "Who signed the 1887 charter?",
         "corpus_file": "corpus/source-0001.txt",
         "ground_truth": {"scoring_rubric": [{"points": 60, "correct_criterion": "Names A. Moreau"},
                                             {"points": 40, "correct_criterion": "Gives the year 1887"}]}},
        {"question_id": "wt-0002", "question_text": "哪一年港口重建？",
         "corpus_file": "corpus/source-0002.txt",
         "ground_truth": {"scoring_rubric": [{"points": 100, "correct_criterion": "答出1902年"}]}},
    ]
    files = {
        "corpus/source-0001.txt": "The charter was signed in 1887 by A. Moreau.\n" * 40,
        "corpus/source-0002.txt": "港口于1902年重建。\n" * 40,
        "data/RDM_FINAL_FREEZE_20260621_strict481.lock.json": json.dumps({"tasks": 2}),
        "eval/config.json": json.dumps({"judges": ["a", "b", "c"]}),
        "documentation/SPEC.md": "# spec\n",
        "README.md": "# WildTrace (test double)\n",
        OUTSIDE_ALLOW_PATTERNS: "print('not part of what the harness fetches')\n",
    }
    if with_tasks:
        files[download.TASKS_FILE] = json.dumps(tasks, ensure_ascii=False, indent=1)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(text.encode("utf-8"))
    return root


def git_blob_sha1(data: bytes) -> str:
    """The git blob id the Hub reports as ``oid`` and ETag for non-LFS files."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer(ThreadingHTTPServer):
    """Serves one dataset repo at one commit from a folder; records every request it gets."""

    request_queue_size = 128
    daemon_threads = True

    def __init__(self, release: Path) -> None:
        """Index ``release`` (every file, by its '/'-separated relative path) and bind a free port."""
        super().__init__(("127.0.0.1", 0), HubHandler)
        self.files = {p.relative_to(release).as_posix(): p.read_bytes()
                      for p in sorted(release.rglob("*")) if p.is_file()}
        self.requests: list[tuple[str, str]] = []
        #: None (public), "private" (a token is needed), "gated" (files need granted access), "down" (500s).
        self.mode: str | None = None
        #: The one token "private" mode accepts.
        self.good_token = "hf_good" + "x" * 30

    @property
    def url(self) -> str:
        """The value to put in HF_ENDPOINT."""
        return f"http://127.0.0.1:{self.server_port}"

    def tree(self) -> list[dict]:
        """The recursive tree listing: folders then files, in the Hub's JSON shape (no xetHash, no lfs)."""
        folders = sorted({str(Path(p).parent.as_posix()) for p in self.files} - {"."})
        entries = [{"type": "directory", "path": d, "oid": git_blob_sha1(d.encode()), "size": 0} for d in folders]
        entries += [{"type": "file", "path": p, "size": len(b), "oid": git_blob_sha1(b)}
                    for p, b in self.files.items()]
        return entries


class HubHandler(BaseHTTPRequestHandler):
    """The handful of Hub routes snapshot_download calls for a dataset repo."""

    server: HubServer
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's pooled session expects

    def log_message(self, format: str, *args: object) -> None:
        """Keep pytest output clean."""

    def do_GET(self) -> None:
        """Route a GET."""
        self._route(send_body=True)

    def do_HEAD(self) -> None:
        """Route a HEAD (same headers, no body)."""
        self._route(send_body=False)

    def _route(self, send_body: bool) -> None:
        """Dispatch on the path; anything unknown is a Hub-style 404."""
        path = unquote(urlsplit(self.path).path)
        self.server.requests.append((self.command, path))
        if path == "/api/agent-harnesses":
            return self._send(200, json.dumps(EMPTY_REGISTRY).encode(), {}, send_body)
        if self._refused(path, send_body):
            return None
        if m := re.fullmatch(rf"/api/datasets/{REPO}/revision/([^/]+)", path):
            return self._revision(m.group(1), send_body)
        if m := re.fullmatch(rf"/api/datasets/{REPO}/tree/([^/]+)", path):
            return self._known_rev(m.group(1), send_body) and self._send(
                200, json.dumps(self.server.tree()).encode(), {}, send_body)
        if m := re.fullmatch(rf"/datasets/{REPO}/resolve/([^/]+)/(.+)", path):
            return self._known_rev(m.group(1), send_body) and self._file(m.group(2), send_body)
        self._send(404, b'{"error":"Repository not found"}', {"X-Error-Code": "RepoNotFound"}, send_body)

    def _refused(self, path: str, send_body: bool) -> bool:
        """Answer as the Hub does for a private or gated repo, or when it is down; False to serve normally."""
        mode, auth = self.server.mode, self.headers.get("Authorization", "")
        request_id = {"X-Request-Id": "Root=1-6756a1b2-0c1d2e3f4a5b6c7d8e9f0a1b"}
        if mode == "down":
            self._send(500, b'{"error":"Internal Error - We\'re working hard to fix this as soon as possible!"}',
                       request_id, send_body)
        elif mode == "private" and auth != f"Bearer {self.server.good_token}":
            if auth:  # a token the Hub does not know; real providers echo it back, so this double does too
                body = {"error": "Invalid credentials in Authorization header",
                        "error_description": f"the token {auth.removeprefix('Bearer ')} is not valid"}
                self._send(401, json.dumps(body).encode(),
                           {**request_id, "X-Error-Message": "Invalid credentials in Authorization header"}, send_body)
            else:
                self._send(401, b'{"error":"Repository not found"}',
                           {**request_id, "X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
                           send_body)
        elif mode == "gated" and "/resolve/" in path:  # the repo's metadata is public, its files are not
            if auth:
                message = (f"Access to dataset {REPO} is restricted and you are not in the authorized list. "
                           f"Visit https://huggingface.co/datasets/{REPO} to ask for access.")
                status = 403
            else:
                message = (f"Access to dataset {REPO} is restricted. You must have access to it and be "
                           "authenticated to access it. Please log in.")
                status = 401
            self._send(status, json.dumps({"error": message}).encode(),
                       {**request_id, "X-Error-Code": "GatedRepo", "X-Error-Message": message}, send_body)
        else:
            return False
        return True

    def _known_rev(self, rev: str, send_body: bool) -> bool:
        """True for main or the commit; otherwise answer the Hub's RevisionNotFound 404."""
        if rev in ("main", COMMIT):
            return True
        self._send(404, b'{"error":"Invalid rev id"}', {"X-Error-Code": "RevisionNotFound"}, send_body)
        return False

    def _revision(self, rev: str, send_body: bool) -> None:
        """repo_info: the commit the revision points at, and the file list."""
        if self._known_rev(rev, send_body):
            info = {"id": REPO, "sha": COMMIT, "private": False,
                    "siblings": [{"rfilename": p} for p in self.server.files]}
            self._send(200, json.dumps(info).encode(), {}, send_body)

    def _file(self, rel: str, send_body: bool) -> None:
        """A file's bytes with the headers hf_hub_download requires (commit, ETag, size)."""
        data = self.server.files.get(rel)
        if data is None:
            return self._send(404, b'{"error":"Entry not found"}',
                              {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT}, send_body)
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{git_blob_sha1(data)}"',
                   "Content-Type": "application/octet-stream"}
        self._send(200, data, headers, send_body)

    def _send(self, status: int, body: bytes, headers: dict[str, str], send_body: bool) -> None:
        """Write status, headers (Content-Length always, for keep-alive) and, for GET, the body."""
        self.send_response(status)
        self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)


@pytest.fixture
def hub() -> Iterator[Callable[[Path], HubServer]]:
    """Start HubServers on demand; every one is shut down and closed at teardown."""
    servers: list[HubServer] = []

    def serve(release: Path) -> HubServer:
        server = HubServer(release)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    """An endpoint nothing listens on: bind a port, then close it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run_download(tmp_path: Path, endpoint: str, *args: str, **extra_env: str) -> subprocess.CompletedProcess:
    """``python -m wildtrace.download`` in tmp_path, with a clean Hub environment aimed at ``endpoint``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "HUGGINGFACE_")) and k not in ("WILDTRACE_DATA_DIR", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf_home"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               **extra_env)
    return subprocess.run([sys.executable, "-m", "wildtrace.download", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def assert_instructions(stderr: str, dest: Path) -> None:
    """The single failure message: names repo, dest, the files needed, both fetch commands and the env var."""
    assert "Traceback" not in stderr
    assert stderr.count("wildtrace-download:") == 1
    for needle in (REPO, str(dest), download.TASKS_FILE, "corpus/", "WILDTRACE_DATA_DIR", "  why: ", "  fix: ",
                   "python -m wildtrace.download", f"hf download {REPO} --repo-type dataset"):
        assert needle in stderr, needle
    assert "huggingface-cli" not in stderr  # current huggingface_hub no longer installs it


@pytest.mark.slow
def test_download_lands_release_byte_identical(hub, tmp_path: Path) -> None:
    """Default dest is ./outputs/datasets/wildtrace; allowed files arrive byte for byte; the summary is printed."""
    release = build_release(tmp_path / "release")
    server = hub(release)
    result = run_download(tmp_path, server.url)
    assert result.returncode == 0, result.stderr

    dest = tmp_path / "outputs" / "datasets" / "wildtrace"
    for rel, data in server.files.items():
        landed = dest / rel
        if rel == OUTSIDE_ALLOW_PATTERNS:
            assert not landed.exists()
        else:
            assert landed.read_bytes() == data == (release / rel).read_bytes(), rel
    assert len(parse_tasks(json.loads((dest / download.TASKS_FILE).read_text("utf-8")), "tasks")) == 2

    assert str(dest) in result.stdout
    assert "corpus files: 2" in result.stdout
    assert str(dest / download.TASKS_FILE) in result.stdout
    assert f"\n  {download.RUN_COMMAND}" in result.stdout  # the default folder needs no WILDTRACE_DATA_DIR
    assert "Traceback" not in result.stderr

    routes = {(method, re.sub(r"/resolve/[^/]+/.*", "/resolve/…", p)) for method, p in server.requests}
    assert ("GET", f"/api/datasets/{REPO}/revision/main") in routes
    assert ("GET", f"/api/datasets/{REPO}/tree/{COMMIT}") in routes
    assert {("HEAD", f"/datasets/{REPO}/resolve/…"), ("GET", f"/datasets/{REPO}/resolve/…")} <= routes
    assert not any("xet" in p.lower() for _, p in server.requests)


@pytest.mark.slow
def test_unreachable_endpoint_exits_2_with_instructions(tmp_path: Path) -> None:
    """Connection refused: exit 2, one message, no traceback, nothing pretending to be a release."""
    dest = tmp_path / "wt"
    result = run_download(tmp_path, closed_port_url(), "--dest", str(dest))
    assert result.returncode == 2, result.stderr
    assert_instructions(result.stderr, dest)
    assert not (dest / download.TASKS_FILE).exists()


@pytest.mark.slow
def test_offline_mode_exits_2_without_touching_the_network(hub, tmp_path: Path) -> None:
    """HF_HUB_OFFLINE=1 with nothing cached: exit 2 with the message, and the live server sees no request."""
    server = hub(build_release(tmp_path / "release"))
    dest = tmp_path / "wt"
    result = run_download(tmp_path, server.url, "--dest", str(dest), HF_HUB_OFFLINE="1")
    assert result.returncode == 2, result.stderr
    assert_instructions(result.stderr, dest)
    assert server.requests == []


@pytest.mark.slow
def test_release_without_tasks_file_exits_2_naming_it(hub, tmp_path: Path) -> None:
    """The download 'succeeds' but the tasks file is absent: exit 2, the missing path named."""
    server = hub(build_release(tmp_path / "release", with_tasks=False))
    dest = tmp_path / "wt"
    result = run_download(tmp_path, server.url, "--dest", str(dest))
    assert result.returncode == 2, result.stderr
    assert_instructions(result.stderr, dest)
    assert f"lacks {dest / download.TASKS_FILE}" in result.stderr
    assert (dest / "corpus" / "source-0001.txt").is_file()


@pytest.mark.slow
def test_unknown_revision_exits_2(hub, tmp_path: Path) -> None:
    """A revision the Hub does not have (RevisionNotFoundError) is an expected failure too."""
    server = hub(build_release(tmp_path / "release"))
    dest = tmp_path / "wt"
    result = run_download(tmp_path, server.url, "--dest", str(dest), "--revision", "v9")
    assert result.returncode == 2, result.stderr
    assert_instructions(result.stderr, dest)
    assert "revision v9" in result.stderr and "RevisionNotFoundError" in result.stderr
    assert "  why: the dataset has no revision 'v9'" in result.stderr


def test_dest_defaults_and_run_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--dest follows WILDTRACE_DATA_DIR like the config; a folder the config would not read gets the env prefix."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WILDTRACE_DATA_DIR", raising=False)
    assert download.parse_args([]).dest == tmp_path / "outputs" / "datasets" / "wildtrace"
    assert download.run_command(tmp_path / "elsewhere") == (
        f"WILDTRACE_DATA_DIR={tmp_path / 'elsewhere'} {download.RUN_COMMAND}")
    monkeypatch.setenv("WILDTRACE_DATA_DIR", str(tmp_path / "copy"))
    args = download.parse_args(["--revision", "v1"])
    assert (args.dest, args.revision, args.repo_id) == (tmp_path / "copy", "v1", REPO)
    assert download.run_command(args.dest) == download.RUN_COMMAND


# ---------------------------------------------------------------------------------------------
# One message per cause, each with its fix and the Hub's whole message; never a token.

CANARY = "hf_canary" + "Q7w" * 10
NETWORK_ADVICE = "machine with network access"
#: case → (server mode or None, HF_TOKEN or None, extra args, kind's cause, fix needles, the Hub's words kept)
CASES = {
    "private, no token": ("private", None, [], "the Hub answered 401 and no token was sent",
                          ["export HF_TOKEN=", "https://huggingface.co/settings/tokens", "--repo-id"],
                          ["401 Client Error.", "Repository Not Found for url:",
                           "make sure you are authenticated", "Request ID: Root=1-6756a1b2"]),
    "private, token refused": ("private", CANARY, [], "the Hub refused the token in HF_TOKEN",
                               ["https://huggingface.co/settings/tokens", "export HF_TOKEN="],
                               ["Invalid credentials in Authorization header", "the token hf_*** is not valid"]),
    "gated, no token": ("gated", None, [], f"{REPO} is a gated dataset and no token was sent",
                        [f"request access on https://huggingface.co/datasets/{REPO}", "export HF_TOKEN="],
                        ["GatedRepoError", "Cannot access gated repo for url",
                         "authenticated to access it. Please log in."]),
    "gated, not granted": ("gated", CANARY, [], f"{REPO} is a gated dataset and the account of your token has no",
                           [f"request access on https://huggingface.co/datasets/{REPO}", "same HF_TOKEN"],
                           ["403 Client Error.", "you are not in the authorized list"]),
    "unknown revision": (None, None, ["--revision", "v9"], "the dataset has no revision 'v9'",
                         ["pass --revision with a branch, tag or commit", f"datasets/{REPO}/tree/main"],
                         ["RevisionNotFoundError", "Revision Not Found for url:", "Invalid rev id"]),
    "unknown repo": (None, None, ["--repo-id", "someone/else"], "the Hub has no dataset someone/else (404)",
                     ["check --repo-id", f"the release is {REPO}"], ["Repository Not Found for url:"]),
    "hub down": ("down", None, [], "the Hub answered 500: it is down or overloaded", ["try again in a few minutes"],
                 ["We're working hard to fix this"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_failure_has_its_own_message_and_fix(hub, tmp_path: Path, case: str) -> None:
    """Table-driven against the Hub double: the cause, the fix, the Hub's full message; no token, no traceback."""
    mode, token, args, cause, fixes, hub_words = CASES[case]
    server = hub(build_release(tmp_path / "release"))
    server.mode = mode
    dest = tmp_path / "wt"
    env = {"HF_TOKEN": token} if token else {}
    result = run_download(tmp_path, server.url, "--dest", str(dest), *args, **env)
    assert result.returncode == 2, result.stderr
    assert_instructions(result.stderr.replace("someone/else", REPO), dest)
    why = next(line for line in result.stderr.splitlines() if line.startswith("  why: "))
    assert why.startswith(f"  why: {cause}"), why
    for needle in fixes + hub_words:
        assert needle in result.stderr, needle
    assert NETWORK_ADVICE not in result.stderr  # only when the network really is the problem
    assert CANARY not in result.stderr + result.stdout
    assert not (dest / download.TASKS_FILE).exists()


@pytest.mark.slow
def test_the_right_token_fetches_a_private_release(hub, tmp_path: Path) -> None:
    """The fix for 'token missing' works: the same Hub with HF_TOKEN set serves the release."""
    server = hub(build_release(tmp_path / "release"))
    server.mode = "private"
    result = run_download(tmp_path, server.url, "--dest", str(tmp_path / "wt"), HF_TOKEN=server.good_token)
    assert result.returncode == 0, result.stderr
    assert "corpus files: 2" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("where", ["network down", "offline"])
def test_network_problems_advise_another_machine(hub, tmp_path: Path, where: str) -> None:
    """Connection refused and HF_HUB_OFFLINE each say so, and only they send the user to another machine."""
    dest = tmp_path / "wt"
    if where == "offline":
        result = run_download(tmp_path, hub(build_release(tmp_path / "release")).url, "--dest", str(dest),
                              HF_HUB_OFFLINE="1")
        cause = "  why: HF_HUB_OFFLINE is set"
    else:
        result = run_download(tmp_path, closed_port_url(), "--dest", str(dest))
        cause = "  why: the Hub could not be reached"
    assert result.returncode == 2
    assert_instructions(result.stderr, dest)
    assert cause in result.stderr and NETWORK_ADVICE in result.stderr


@pytest.mark.slow
def test_the_fallback_hf_command_exists_and_fetches_only_the_release(hub, tmp_path: Path) -> None:
    """The printed `hf download …` line, run as printed against the same Hub, lands the allowed files only."""
    server = hub(build_release(tmp_path / "release"))
    server.mode = "down"
    dest = tmp_path / "wt"
    failed = run_download(tmp_path, server.url, "--dest", str(dest))
    line = next(x.strip() for x in failed.stderr.splitlines() if x.strip().startswith("hf download "))
    server.mode = None  # the Hub is back
    hf = Path(sys.executable).parent / "hf"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_ENDPOINT=server.url, HF_HOME=str(tmp_path / "hf_home"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    argv = [str(hf), *shlex.split(line)[1:]]
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    landed = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")
                    if p.is_file() and ".cache" not in p.parts)
    assert landed == sorted(p for p in server.files if p != OUTSIDE_ALLOW_PATTERNS)
    assert download.missing_parts(dest) == []


def test_redact_replaces_known_tokens_and_token_shapes() -> None:
    """A known token anywhere, and anything shaped like a Hub token, never survive."""
    text = f"Bearer {CANARY}; saved=hf_{'a' * 34}; short hf_ab is not a token; secret-value here"
    assert download.redact(text, ["secret-value"]) == (
        "Bearer hf_***; saved=hf_***; short hf_ab is not a token; hf_*** here")


def test_hub_message_keeps_every_line_and_cause_bounded() -> None:
    """The whole message and its cause, indented; a huge message is cut with a count."""
    try:
        try:
            raise ConnectionError("first line\nsecond line")
        except ConnectionError as inner:
            raise OSError("outer: lookup failed") from inner
    except OSError as error:
        said = download.hub_message(error, [])
    assert said == "    OSError: outer: lookup failed\n    ConnectionError: first line\n    second line"
    huge = download.hub_message(OSError("x" * 10_000), [])
    assert len(huge) < download.MAX_HUB_MESSAGE + 100 and huge.endswith("more characters]")


def test_fetch_commands_quote_and_list_the_release_patterns(tmp_path: Path) -> None:
    """Golden: both commands, with a path that needs quoting."""
    ours, theirs = download.fetch_commands(REPO, "v1", tmp_path / "my data")
    assert ours == f"python -m wildtrace.download --repo-id {REPO} --revision v1 --dest '{tmp_path / 'my data'}'"
    assert theirs == (f"hf download {REPO} --repo-type dataset --revision v1 --local-dir '{tmp_path / 'my data'}' "
                      "--include 'corpus/*' --include 'data/*' --include 'eval/*' --include 'documentation/*' "
                      "--include README.md")


def test_dataset_wildtrace_without_the_data_names_the_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dataset=wildtrace` before the download: the error names `python -m wildtrace.download`."""
    from conftest import compose_config
    from wildtrace.config import to_settings
    from wildtrace.core.tasks import DatasetError
    from wildtrace.runtime.store.dataset import load_dataset

    monkeypatch.delenv("WILDTRACE_DATA_DIR", raising=False)
    cfg = to_settings(compose_config([f"root={tmp_path / 'outputs'}", "dataset=wildtrace"]))
    with pytest.raises(DatasetError) as info:
        load_dataset(cfg.dataset.tasks, cfg.dataset.corpus)
    assert "python -m wildtrace.download" in str(info.value)
    assert "WILDTRACE_DATA_DIR" in str(info.value)
