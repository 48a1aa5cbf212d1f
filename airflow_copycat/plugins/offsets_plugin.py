"""The Airflow plugin of the offsets page: the app (:mod:`.offsets_app`) mounted by the API server
at ``/copycat``, and an entry "Copycat offsets" in the UI's Browse menu that shows
``/copycat/offsets`` inside the UI.

Registered both ways providers register plugins: the ``airflow.plugins`` entry point (which
Airflow loads in every process) and the ``plugins`` list of the provider info (which it loads
when ``[core] lazy_discover_providers`` is off; the same name, so never twice). Every Airflow
process loads plugins, tasks too: importing this module stays cheap -- the app and the API
server's security imports are built on the first request routed to it.
"""

from __future__ import annotations

from typing import Any

try:
    from airflow.sdk.plugins_manager import AirflowPlugin  # what providers subclass (tasks load plugins too)
except ImportError:  # Airflow < 3.2
    from airflow.plugins_manager import AirflowPlugin

URL_PREFIX = "/copycat"
"""Where the API server mounts the app."""


class _LazyApp:
    """An ASGI app that builds :func:`.offsets_app.create_app` when it is first called."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope, receive, send) -> None:
        if self._app is None:
            from .offsets_app import create_app

            self._app = create_app()
        await self._app(scope, receive, send)

    def __repr__(self) -> str:
        return "airflow_copycat.plugins.offsets_app:create_app()"


class CopycatOffsetsPlugin(AirflowPlugin):
    """Copycat's offsets page in the Airflow UI (see :mod:`airflow_copycat.plugins`)."""

    name = "copycat_offsets"
    fastapi_apps = [{"app": _LazyApp(), "url_prefix": URL_PREFIX, "name": "Copycat offsets"}]
    external_views = [{
        "name": "Copycat offsets",
        "href": f"{URL_PREFIX}/offsets",
        "destination": "nav",
        "category": "browse",
        "url_route": "copycat-offsets",
    }]
