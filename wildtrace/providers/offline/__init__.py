"""The offline provider: OpenAI's wire format answered in-process, in one package.

- ``wire``: ``OfflineProvider``: the routes, the seeded answers and its facts (local: no key,
  no model list, no batch format; runtime/net/endpoint.py calls ``answer_locally`` over an in-process
  transport).
"""

from wildtrace.providers.offline.wire import OfflineProvider, seed_of

__all__ = ["OfflineProvider", "seed_of"]
