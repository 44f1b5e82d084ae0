"""Checking providers and MCP servers: a static test, and a provider's model list."""

from __future__ import annotations

import os
import shutil
from typing import Any

from ..dialects import dialect_for
from ..errors import FwError
from ..home import secrets
from ..home.kinds import KINDS, check_name
from ..home.records import find_one, parse_text, validate_stored
from ..home.store import Home
from ..suggest import plural
from .resources import resource_read


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": ok, "detail": detail}


def resource_test(home: Home, kind: str, reference: str) -> dict[str, Any]:
    """Static checks only: the definition, the key source, the command. No network, no process."""
    if kind not in ("provider", "mcp"):
        raise FwError("invalid", f"resource_test checks providers and mcps, not {kind!r}", "use kind provider or mcp")
    spec = KINDS[kind]
    check_name(reference, f"{kind} reference")
    _, rel = find_one(home, spec, reference)
    checks = []
    try:
        data, _ = parse_text(spec, home.read_text(rel) or "", rel)
        plain = validate_stored(spec, reference, data, rel)
        checks.append(_check("definition", True, f"{rel} is valid"))
    except FwError as exc:
        checks.append(_check("definition", False, exc.message))
        return {"ok": False, "checks": checks}
    try:
        stored = secrets.load(home, kind, reference)
    except FwError as exc:
        checks.append(_check("secrets", False, exc.message))
        return {"ok": False, "checks": checks}
    if kind == "provider":
        checks.append(_check("base_url", plain["base_url"].startswith(("http://", "https://")), plain["base_url"]))
        if plain.get("api_key") or stored.get("api_key"):
            checks.append(_check("api_key", True, "a key is stored under secrets/"))
        elif plain.get("api_key_env"):
            var = plain["api_key_env"]
            present = bool(os.environ.get(var))
            checks.append(_check("api_key_env", present, f"${var} is {'set' if present else 'not set in this environment'}"))
        else:
            checks.append(_check("api_key", False, f"no key: store one with `printf %s \"$KEY\" | fw resource write provider {reference} --api-key-stdin`"))
    else:
        if plain["transport"] == "stdio":
            found = shutil.which(plain["command"])
            checks.append(_check("command", found is not None, found or f"{plain['command']!r} is not on PATH"))
        else:
            checks.append(_check("url", plain["url"].startswith(("http://", "https://")), plain["url"]))
        names = sorted({**(plain.get("env") or {}), **(stored.get("env") or {}), **(plain.get("headers") or {}), **(stored.get("headers") or {})})
        checks.append(_check("secrets", True, f"{plural(len(names), 'secret value')} stored" if names else "no secret values"))
    return {"ok": all(c["ok"] for c in checks), "checks": checks}


def provider_key(home: Home, reference: str, data: dict[str, Any]) -> str:
    """The key a request to a provider carries: its stored key, or the variable it names."""
    key = secrets.load(home, "provider", reference).get("api_key")
    if not key and data.get("api_key_env"):
        key = os.environ.get(data["api_key_env"])
        if not key:
            raise FwError(
                "invalid",
                f"provider {reference!r} reads its key from ${data['api_key_env']}, which is not set",
                f"set ${data['api_key_env']} in this shell, or store the key instead: "
                f"`printf %s \"$KEY\" | fw resource write provider {reference} --data '{{\"api_key_env\": null}}' --api-key-stdin`",
                reason="no_key", provider=reference,
            )
        secrets.remember(key)
    if not key:
        raise FwError("invalid", f"provider {reference!r} has no key", f"store one: `printf %s \"$KEY\" | fw resource write provider {reference} --api-key-stdin`",
                      reason="no_key", provider=reference)
    return key


def provider_models(home: Home, reference: str, timeout: float = 10.0) -> dict[str, Any]:
    """The ids of the models a provider lists, asked in its dialect with the stored key:
    `GET {base_url}/models` (openai: `Authorization: Bearer`; anthropic: `x-api-key`)."""
    import httpx

    shown = resource_read(home, "provider", reference)["data"]
    key = provider_key(home, reference, shown)
    dialect = dialect_for(shown.get("api"))
    request = dialect.models_request(shown["base_url"], key)
    url = request.url.split("?")[0]
    try:
        response = httpx.get(request.url, headers=request.headers, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise FwError("unavailable", f"could not reach {url}: {type(exc).__name__}",
                      "check the provider's base_url and the network", reason="model") from None
    except UnicodeError:
        raise FwError("unavailable", "the provider's key holds characters an HTTP header cannot carry",
                      f"store the key again: `fw resource write provider {reference} --api-key-stdin`",
                      reason="model") from None
    if response.status_code != 200:
        snippet = secrets.redact(response.text).strip()[:200]  # redact first: a cut key is still a key
        raise FwError("unavailable", f"{url} answered {response.status_code}: {snippet}",
                      "check the key and the base_url", reason="model", status=response.status_code)
    try:
        models = dialect.model_ids(response.json())
    except (ValueError, KeyError, TypeError):
        raise FwError("unavailable", f"{url} did not answer with a model list", dialect.unreadable_hint,
                      reason="model") from None
    return {"models": [secrets.redact(m) for m in models]}
