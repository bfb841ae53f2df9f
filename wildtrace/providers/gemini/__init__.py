"""Gemini generateContent: everything wildtrace knows of this API, in one package.

- ``wire``: ``GeminiProvider``: the request builder, the parser, the stream reader, the facts
  (class attributes) and the model list
  (``GET /v1beta/models``, paged by ``pageToken``: ``model_list``, ``model_page``, ``model_id``);
- ``batch``: ``GeminiBatch``: the batch format (batchGenerateContent, inline
  requests), pure: runtime/batch does its I/O.
"""

from wildtrace.providers.gemini.batch import GeminiBatch
from wildtrace.providers.gemini.wire import GeminiProvider

__all__ = ["GeminiBatch", "GeminiProvider"]
