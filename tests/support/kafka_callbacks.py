"""A SASL/OAUTHBEARER token callback named by dotted path in a ``kafka`` connection's extra
(``"oauth_cb": "tests.support.kafka_callbacks.oauth_token"``), recording each call."""

from __future__ import annotations

import time

CALLS: list[str] = []


def oauth_token(oauthbearer_config: str) -> tuple[str, float]:
    """confluent-kafka's ``oauth_cb``: gets ``sasl.oauthbearer.config``, returns (token, expiry in s)."""
    CALLS.append(oauthbearer_config)
    return "token-from-the-callback", time.time() + 300
