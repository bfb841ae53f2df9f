"""Bad input is refused before any request, naming the file, the record and the field."""

import json

import pytest

from wildtrace.core.tasks import DatasetError
from wildtrace.runtime.store.dataset import load_dataset


def task(qid="q1", corpus_file="corpus/doc.txt", **over):
    record = {
        "question_id": qid,
        "question_text": "What happened?",
        "corpus_file": corpus_file,
        "paradigm": "causal_attribution",
        "ground_truth": {"scoring_rubric": [{"points": 60, "correct_criterion": "a"},
                                            {"points": 40, "correct_criterion": "b"}]},
    }
    record.update(over)
    return record


@pytest.fixture
def release(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "doc.txt").write_bytes(b"Line one.\r\nLine two.\n")
    (corpus / "zh.txt").write_text("中文" * 20, encoding="utf-8")

    def write(records, name="tasks.json", raw=None):
        path = tmp_path / name
        path.write_text(raw if raw is not None else json.dumps(records), encoding="utf-8")
        return path

    return tmp_path, corpus, write


def test_loads_release_shape_and_measures(release):
    _root, corpus, write = release
    ds = load_dataset(write([task(), task("q2", "zh.txt")]), corpus)
    assert [t.question_id for t in ds.tasks] == ["q1", "q2"]
    assert ds.tasks[0].meta == {"paradigm": "causal_attribution"}
    doc = ds.document(ds.tasks[0])
    assert doc.chars == len("Line one.\r\nLine two.\n")  # CRLF kept, measured in characters
    assert ds.document(ds.tasks[1]).ideographs == 40
    assert len(ds.tasks_sha256) == 64


@pytest.mark.parametrize("wrapper", ["tasks", "data"])
def test_object_wrappers(release, wrapper):
    _root, corpus, write = release
    assert len(load_dataset(write({wrapper: [task()]}), corpus).tasks) == 1


def test_jsonl(release):
    _root, corpus, write = release
    path = write(None, "tasks.jsonl", raw="\n".join(json.dumps(task(q)) for q in ("a", "b", "c")) + "\n")
    assert [t.question_id for t in load_dataset(path, corpus).tasks] == ["a", "b", "c"]


def test_rubric_as_json_string(release):
    _root, corpus, write = release
    record = task(ground_truth={"scoring_rubric": json.dumps([{"points": 100, "correct_criterion": "x"}])})
    assert load_dataset(write([record]), corpus).tasks[0].rubric[0].points == 100


def test_ids_and_limit(release):
    _root, corpus, write = release
    path = write([task("a"), task("b"), task("c")])
    assert [t.question_id for t in load_dataset(path, corpus, ids=["c", "a"]).tasks] == ["a", "c"]
    assert [t.question_id for t in load_dataset(path, corpus, limit=2).tasks] == ["a", "b"]
    with pytest.raises(DatasetError, match=r"unknown question_id.*zzz"):
        load_dataset(path, corpus, ids=["zzz"])


def drop(record, dotted):
    *parents, last = dotted.split(".")
    node = record
    for p in parents:
        node = node[p]
    del node[last]
    return record


@pytest.mark.parametrize(
    "records, message",
    [
        ([drop(task(), "question_text")], r"tasks.json: record #0 \(question_id='q1'\): missing field 'question_text'"),
        ([task(), drop(task("q2"), "corpus_file")], r"record #1 \(question_id='q2'\): missing field 'corpus_file'"),
        ([drop(task(), "question_id")], r"record #0: missing field 'question_id'"),
        ([drop(task(), "ground_truth")], r"missing field 'ground_truth'"),
        ([drop(task(), "ground_truth.scoring_rubric")], r"missing field 'ground_truth.scoring_rubric'"),
        ([task(ground_truth={"scoring_rubric": []})], r"'ground_truth.scoring_rubric' must be a non-empty list"),
        ([task(ground_truth={"scoring_rubric": [{"points": "ten", "correct_criterion": "x"}]})],
         r"'ground_truth.scoring_rubric\[0\].points' must be a non-negative number, got 'ten'"),
        ([task(ground_truth={"scoring_rubric": [{"points": 10, "correct_criterion": ""}]})],
         r"'ground_truth.scoring_rubric\[0\].correct_criterion' must be a non-empty string"),
        ([task(ground_truth={"scoring_rubric": [{"points": True, "correct_criterion": "x"}]})], r"points' must be"),
        ([task(question_text="   ")], r"field 'question_text' must be a non-empty string"),
        ([task(), task()], r"record #1: duplicate question_id 'q1' \(first at record #0\)"),
        (["not an object"], r"record #0: a task must be a JSON object"),
        ([], r"no tasks"),
        ([task(corpus_file="corpus/absent.txt")],
         r"record #0 \(question_id='q1'\): field 'corpus_file': corpus file 'corpus/absent.txt' not found"),
        ([task(corpus_file="../outside.txt")], r"field 'corpus_file' '../outside.txt' leaves the corpus folder"),
        ([task(corpus_file="corpus/../../outside.txt")], r"leaves the corpus folder"),
        ([task(corpus_file="/etc/passwd")], r"is an absolute path"),
    ],
)
def test_bad_records(release, records, message):
    root, corpus, write = release
    (root / "outside.txt").write_text("secret", encoding="utf-8")
    with pytest.raises(DatasetError, match=message):
        load_dataset(write(records), corpus)


def test_corpus_file_not_utf8(release):
    _root, corpus, write = release
    (corpus / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(DatasetError, match=r"record #0 \(question_id='q1'\): corpus file .*latin1.txt is not UTF-8"):
        load_dataset(write([task(corpus_file="latin1.txt")]), corpus)


def test_malformed_tasks_file(release):
    root, corpus, write = release
    with pytest.raises(DatasetError, match=r"tasks.json: malformed JSON"):
        load_dataset(write(None, raw='[{"question_id": "q1",'), corpus)
    with pytest.raises(DatasetError, match=r"tasks.jsonl: line 2: malformed JSON Lines record"):
        load_dataset(write(None, "tasks.jsonl", raw=json.dumps(task()) + "\n{oops\n"), corpus)
    with pytest.raises(DatasetError, match=r"expected a JSON list of tasks"):
        load_dataset(write({"items": []}), corpus)
    with pytest.raises(DatasetError, match="tasks file not found"):
        load_dataset(root / "nope.json", corpus)
    with pytest.raises(DatasetError, match="corpus folder not found"):
        load_dataset(write([task()]), root / "no-corpus")


#: Measures the peak memory load_dataset adds, in a process of its own (argv: tasks file, corpus, limit).
MEASURE = """
import resource, sys
from wildtrace.runtime.store.dataset import load_dataset
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
dataset = load_dataset(sys.argv[1], sys.argv[2], limit=int(sys.argv[3]))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(len(dataset.tasks), (after - before) // 1024)
"""


def test_a_limit_reads_a_large_tasks_file_in_bounded_memory(release):
    """40 MB of JSON Lines with dataset.limit=5: the first five tasks are read, not the file (peak RSS, KiB→MiB)."""
    import subprocess
    import sys

    root, corpus, _write = release
    path = root / "large.jsonl"
    filler = "x" * 2000
    with path.open("w", encoding="utf-8") as f:
        for i in range(20_000):
            f.write(json.dumps(task(f"q{i}", "doc.txt", question_text=f"{filler} {i}")) + "\n")
    assert path.stat().st_size > 40 * 2**20
    proc = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(corpus), "5"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    n_tasks, grown_mb = map(int, proc.stdout.split())
    assert n_tasks == 5
    assert grown_mb < 10, f"load_dataset grew the process by {grown_mb} MiB for 5 tasks of a 40 MB file"


def test_a_json_tasks_file_past_the_bound_is_refused_naming_both_sizes(release, monkeypatch):
    from wildtrace.runtime.store import dataset

    _root, corpus, write = release
    monkeypatch.setattr(dataset, "MAX_JSON_BYTES", 1000)
    path = write([task(f"q{i}", "doc.txt") for i in range(10)])
    size = path.stat().st_size
    with pytest.raises(DatasetError, match=rf"tasks.json: the tasks file \(dataset.tasks\) is {size:,} bytes of JSON, "
                                           r"over the 1,000 bytes .* write it as JSON Lines"):
        load_dataset(path, corpus)
    lines = write(None, "tasks.jsonl", raw="\n".join(json.dumps(task(f"q{i}", "doc.txt")) for i in range(10)))
    assert len(load_dataset(lines, corpus).tasks) == 10  # JSON Lines: any size


@pytest.mark.parametrize("raw", [
    "\ufeff" + json.dumps(task()) + "\n\n" + json.dumps(task("q2")) + "\n",  # a BOM, a blank line
    "\n" + json.dumps(task()) + "\n" + json.dumps(task("q2")),  # a blank first line, no final newline
    json.dumps({"tasks": [task(), task("q2")]}),
    json.dumps([task(), task("q2")], indent=2),
])
def test_json_lines_and_json_are_told_apart(release, raw):
    _root, corpus, write = release
    assert [t.question_id for t in load_dataset(write(None, "tasks.data", raw=raw), corpus).tasks] == ["q1", "q2"]
