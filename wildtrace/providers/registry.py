"""Provider names → classes: the one place a new wire format is registered."""

from __future__ import annotations

from wildtrace.providers.anthropic import AnthropicProvider
from wildtrace.providers.base import EndpointSpec, Provider
from wildtrace.providers.gemini import GeminiProvider
from wildtrace.providers.offline import OfflineProvider
from wildtrace.providers.openai import OpenAIProvider

PROVIDERS: dict[str, type[Provider]] = {
    cls.name: cls for cls in (OpenAIProvider, AnthropicProvider, GeminiProvider, OfflineProvider)
}


def make_provider(spec: EndpointSpec) -> Provider:
    """The provider for a spec; an unknown name is a config error naming the choices."""
    try:
        return PROVIDERS[spec.provider](spec)
    except KeyError:
        raise ValueError(
            f"{spec.label}: unknown provider {spec.provider!r} (choose from {', '.join(sorted(PROVIDERS))})"
        ) from None
