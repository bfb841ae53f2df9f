"""OpenAI-compatible Chat Completions: everything wildtrace knows of this API, in one package.

- ``wire``: ``OpenAIProvider``: the request builder, the parser, the stream reader, the facts (class
  attributes) and the model list (``GET /models``, one page: ``model_list``, ``model_page``, ``model_id``);
- ``batch``: ``OpenAIBatch``: the batch format (Files + Batches), pure: runtime/batch does its I/O.
"""

from wildtrace.providers.openai.batch import OpenAIBatch
from wildtrace.providers.openai.wire import OpenAIProvider

__all__ = ["OpenAIBatch", "OpenAIProvider"]
