"""Provider names → classes: the one place a new wire format is registered.

A provider is one package (``providers/<name>/``: its class, which holds every fact about it in
``Provider``'s class attributes, and its batch format) and one line below; nothing else in the
harness names it.
"""

from __future__ import annotations

from wildtrace.providers.anthropic import AnthropicProvider
from wildtrace.providers.base import EndpointSpec, Provider
from wildtrace.providers.gemini import GeminiProvider
from wildtrace.providers.offline import OfflineProvider
from wildtrace.providers.openai import OpenAIProvider

#: name → class, in the order config's errors list the choices.
PROVIDERS: dict[str, type[Provider]] = {cls.name: cls for cls in (
    OpenAIProvider,
    AnthropicProvider,
    GeminiProvider,
    OfflineProvider,
)}


def provider_class(name: str) -> type[Provider]:
    """The class whose facts apply to a provider name. An unknown name gets the base class's
    (not local, no batch API, temperatures 0–2): config refuses the name itself where the
    endpoint is used, and where it is not (the model under stage=judge) nothing else is at stake."""
    return PROVIDERS.get(name, Provider)


def batch_providers() -> list[str]:
    """The names whose batch API runtime/batch speaks, in registry order."""
    return [name for name, cls in PROVIDERS.items() if cls.batch_api is not None]


def make_provider(spec: EndpointSpec) -> Provider:
    """The provider for a spec; an unknown name is a config error naming the choices."""
    try:
        return PROVIDERS[spec.provider](spec)
    except KeyError:
        raise ValueError(
            f"{spec.label}: unknown provider {spec.provider!r} (choose from {', '.join(sorted(PROVIDERS))})"
        ) from None
