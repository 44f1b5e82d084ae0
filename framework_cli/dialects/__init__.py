"""Floor: the ground, beside errors and http_client. How fw speaks to a model's API: one small
class a dialect (`openai`: chat completions; `anthropic`: the Messages API), which turns fw's
conversation into requests and answers back into replies. Pure: it builds requests and reads
answers, and imports nothing of fw; engine/chat.py sends them (with retries, deadlines and
redaction), and the model loop knows no dialect. On the ground floor so that `provider_models`
(domain) lists models the same way."""

from __future__ import annotations

from .anthropic import AnthropicMessages
from .base import Dialect
from .openai import OpenAIChat

DIALECTS: dict[str, Dialect] = {"openai": OpenAIChat(), "anthropic": AnthropicMessages()}
DEFAULT_API = "openai"


def dialect_for(api: str | None) -> Dialect:
    """The dialect of a provider's `api` (absent: openai)."""
    return DIALECTS[api or DEFAULT_API]
