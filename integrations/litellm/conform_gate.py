"""conform's failover gate for LiteLLM's proxy: fallbacks only where the allowlist permits.

A `CustomLogger` whose `async_pre_call_hook` runs before the proxy routes a request. It
takes the request's fallback lists (`fallbacks`, `context_window_fallbacks`,
`content_policy_fallbacks`: the request's own, else the router's from config.yaml), asks
`conform serve`'s `GET /v1/gate?suite=S&provider=P` about each fallback, and hands the
request on with only those the gate answered `"permitted": true`. It asks on every
request, so a revocation written to the allowlist reaches the very next one, with no
export and no restart.

Fail closed: a gate that cannot be reached, answers late, answers anything but 200 with
`"permitted": true`, or a request with no suite, leaves the request with no fallback at
all. The primary is never touched: the gate decides only who may take over.

Settings (environment variables, read when the proxy loads this module):
  CONFORM_GATE_URL        conform serve's address, e.g. http://127.0.0.1:8080 (required)
  CONFORM_GATE_SUITE      the suite asked about when a request names none
  CONFORM_GATE_PROVIDERS  LiteLLM model_name=conform provider pairs, comma separated, for
                          names that differ (`conform export --name` in reverse); others
                          are asked about under their LiteLLM name
  CONFORM_GATE_TIMEOUT    seconds to wait for each answer (default 2)
A request names its suite in `metadata.conform_suite`.

Enable it in config.yaml (this file next to config.yaml, or on PYTHONPATH):
  litellm_settings:
    callbacks: conform_gate.proxy_handler_instance
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Iterable, Optional

import httpx
from litellm.integrations.custom_logger import CustomLogger

log = logging.getLogger("conform_gate")

# The request members LiteLLM's router fails over by: each one hands the call to another
# model group.
FALLBACK_KEYS = ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks")


def _pairs(text: str) -> dict[str, str]:
    pairs = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        name, _, provider = item.partition("=")
        if name.strip() and provider.strip():
            pairs[name.strip()] = provider.strip()
    return pairs


class ConformGate(CustomLogger):
    def __init__(
        self,
        gate_url: Optional[str] = None,
        suite: Optional[str] = None,
        providers: Optional[dict[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> None:
        super().__init__()
        self.gate_url = (gate_url or os.environ.get("CONFORM_GATE_URL", "")).rstrip("/")
        self.suite = suite or os.environ.get("CONFORM_GATE_SUITE") or None
        self.providers = providers if providers is not None else _pairs(os.environ.get("CONFORM_GATE_PROVIDERS", ""))
        self.timeout = timeout if timeout is not None else float(os.environ.get("CONFORM_GATE_TIMEOUT", "2"))

    async def async_pre_call_hook(self, user_api_key_dict, cache, data: dict, call_type) -> dict:
        try:
            await self._keep_permitted(data)
        except Exception:  # fail closed: whatever went wrong, no fallback is proven
            log.exception("conform gate: fallbacks dropped")
            for key in FALLBACK_KEYS:
                data[key] = []
        return data

    async def _keep_permitted(self, data: dict) -> None:
        suite = self._suite(data)
        # A list neither the request nor the router sets stays unset: LiteLLM then falls
        # back on `fallbacks` (for a context window error), itself filtered here.
        configured = {key: self._configured(data, key) for key in FALLBACK_KEYS}
        lists = {key: value for key, value in configured.items() if value is not None}
        names = sorted({name for value in lists.values() for name in _names(value)})
        permitted: set[str] = set()
        if suite and self.gate_url and names:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                answers = await asyncio.gather(*(self._permits(client, suite, n) for n in names))
            permitted = {name for name, ok in zip(names, answers) if ok}
        dropped = [n for n in names if n not in permitted]
        if dropped:
            log.warning("conform gate: suite %r: not proven, dropped: %s", suite, ", ".join(dropped))
        for key, value in lists.items():
            data[key] = _filtered(value, permitted)

    def _suite(self, data: dict) -> Optional[str]:
        for section in ("metadata", "litellm_metadata"):
            meta = data.get(section)
            if isinstance(meta, dict) and isinstance(meta.get("conform_suite"), str):
                return meta["conform_suite"]
        return self.suite

    @staticmethod
    def _configured(data: dict, key: str) -> Optional[list]:
        """The request's own list, else the router's: the one LiteLLM would use."""
        if data.get(key) is not None:
            return data[key] if isinstance(data[key], list) else []
        from litellm.proxy import proxy_server

        router = getattr(proxy_server, "llm_router", None)
        value = getattr(router, key, None)
        return list(value) if isinstance(value, list) else None

    async def _permits(self, client: httpx.AsyncClient, suite: str, name: str) -> bool:
        provider = self.providers.get(name, name)
        try:
            answer = await client.get(f"{self.gate_url}/v1/gate", params={"suite": suite, "provider": provider})
            return answer.status_code == 200 and answer.json().get("permitted") is True
        except Exception as e:  # unreachable, late, not JSON: not permitted
            log.warning("conform gate: %s for %s: %s", suite, provider, type(e).__name__)
            return False


def _names(fallbacks: list) -> Iterable[str]:
    """Every model group a fallback list can hand a call to, in any of LiteLLM's shapes:
    `[{"primary": ["fb", …]}]`, `["fb", …]`, or `[{"model": "fb", …}]`."""
    for item in fallbacks:
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict) and isinstance(item.get("model"), str):
            yield item["model"]
        elif isinstance(item, dict):
            for chain in item.values():
                if isinstance(chain, list):
                    yield from (n for n in chain if isinstance(n, str))


def _filtered(fallbacks: list, permitted: set[str]) -> list:
    """The same list with every fallback not in `permitted` left out (a primary keeps its
    key, with an empty chain if nothing is left: LiteLLM then does not fail over)."""
    out: list[Any] = []
    for item in fallbacks:
        if isinstance(item, str):
            if item in permitted:
                out.append(item)
        elif isinstance(item, dict) and isinstance(item.get("model"), str):
            if item["model"] in permitted:
                out.append(item)
        elif isinstance(item, dict):
            out.append({k: [n for n in v if n in permitted] if isinstance(v, list) else [] for k, v in item.items()})
    return out


proxy_handler_instance = ConformGate()
