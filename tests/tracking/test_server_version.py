"""MLflow's REST store keeps a failed ``/version`` probe for the life of the process: after one
failure every later ``log_spans`` to that server is refused. A refused batch makes it ask again."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from wildtrace.tracking.traces import write_traces


class RefusingClient:
    """A trace client whose spans are refused as MLflow refuses them when the version is unknown."""

    def start_trace(self, info):
        return info

    def log_spans(self, location, spans):
        raise NotImplementedError("log_spans is not supported: could not identify MLflow server version")


@pytest.mark.mlflow
def test_a_refused_batch_makes_the_next_one_ask_the_server_again():
    from mlflow.store.tracking.rest_store import RestStore
    from mlflow.utils.rest_utils import MlflowHostCreds

    RestStore._get_server_version.cache_clear()
    assert RestStore._get_server_version(MlflowHostCreds("http://127.0.0.1:9")) is None  # nothing listens
    assert RestStore._get_server_version.cache_info().currsize == 1  # the failure is kept
    trace = SimpleNamespace(info=SimpleNamespace(trace_id="tr-1", tags={"question_id": "q0"}),
                            data=SimpleNamespace(spans=["span"]))
    with pytest.raises(NotImplementedError):
        write_traces(RefusingClient(), "0", [trace])
    assert RestStore._get_server_version.cache_info().currsize == 0  # forgotten: the next log_spans asks again
