"""A loopback LLM gateway that answers as the LiteLLM proxy does for one virtual key with a budget.

``GET /key/info`` with the key answers ``{"key": <the key>, "info": {"key_name": "sk-...abcd", "spend": ...,
"max_budget": ..., "budget_reset_at": null, ...}}`` (LiteLLM's ``info_key_fn``: the key itself is echoed back, so a
client must not keep the answer); a wrong key gets LiteLLM's 401 body. A model request with the key is answered
from the script (as :class:`~openai_server.ScriptedServer`) and costs ``cost`` dollars, counted when the answer is
sent; once the key's ``spend`` reaches its ``max_budget`` every request is refused before the model as the proxy
refuses it (``auth_checks.py``: ``BudgetExceededError``, sent as HTTP 429 with ``error.type`` ``budget_exceeded``).
"""

from __future__ import annotations

import threading
from typing import Any

from openai_server import Received, Reply, ScriptedServer

BUDGET_STATUS = 429


def budget_body(alias: str, key: str, spend: float, budget: float) -> dict[str, Any]:
    """LiteLLM's refusal of a spent key (its ``ProxyException`` JSON)."""
    return {"error": {"message": f"Budget has been exceeded! Key={alias} (sk-...{key[-4:]}) Current cost: {spend}, "
                                 f"Max budget: {budget}",
                      "type": "budget_exceeded", "param": None, "code": str(BUDGET_STATUS)}}


def auth_body(key: str) -> dict[str, Any]:
    return {"error": {"message": f"Authentication Error, Invalid proxy server token passed. Received API Key = "
                                 f"sk-...{key[-4:]}, Key Hash (Token) =...", "type": "auth_error", "param": "None",
                      "code": "401"}}


class GatewayServer(ScriptedServer):
    """``with GatewayServer(key, max_budget=0.01, cost=0.004) as gateway:`` serves on ``gateway.url`` (``/v1``)."""

    def __init__(self, key: str, *replies: Reply, max_budget: float | None, cost: float, spend: float = 0.0,
                 alias: str = "student-01"):
        super().__init__(*replies)
        self.key, self.max_budget, self.cost, self.spend, self.alias = key, max_budget, cost, spend, alias
        self.info_requests = 0
        self.refused = 0
        self._money = threading.Lock()

    def get_with_headers(self, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if path.split("?")[0] != "/key/info":
            return self.get(path)
        self.info_requests += 1
        if headers.get("authorization") != f"Bearer {self.key}":
            return 401, auth_body(headers.get("authorization", "none"))
        with self._money:
            info = {"key_name": f"sk-...{self.key[-4:]}", "key_alias": self.alias, "spend": self.spend,
                    "max_budget": self.max_budget, "budget_duration": None, "budget_reset_at": None,
                    "models": [], "user_id": self.alias, "team_id": None, "metadata": {}}
        return 200, {"key": self.key, "info": info}

    def next_reply(self, received: Received) -> Reply:
        if received.headers.get("authorization") != f"Bearer {self.key}":
            with self._lock:
                self.requests.append(received)
            return Reply(status=401, body=auth_body(received.headers.get("authorization", "none")))
        with self._money:
            if self.max_budget is not None and self.spend >= self.max_budget:
                self.refused += 1
                with self._lock:
                    self.requests.append(received)
                return Reply(status=BUDGET_STATUS, body=budget_body(self.alias, self.key, self.spend, self.max_budget))
            self.spend = round(self.spend + self.cost, 10)
        return super().next_reply(received)
