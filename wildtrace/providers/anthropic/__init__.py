"""Anthropic Messages: everything wildtrace knows of this API, in one package.

- ``wire``: ``AnthropicProvider``: the request builder, the parser, the stream reader, the facts
  (class attributes) and the model list
  (``GET /v1/models``, paged by ``after_id``: ``model_list``, ``model_page``, ``model_id``);
- ``batch``: ``AnthropicBatch``: the batch format (Message Batches), pure: runtime/batch does its I/O.
"""

from wildtrace.providers.anthropic.batch import AnthropicBatch
from wildtrace.providers.anthropic.wire import AnthropicProvider

__all__ = ["AnthropicBatch", "AnthropicProvider"]
