"""`anarchon dashboard`: the dashboard on its own, served by uvicorn until SIGINT/SIGTERM."""

from __future__ import annotations

from typing import Any

import uvicorn

from ._app import Dashboard

__all__ = ["serve"]


def serve(store: str | Any, *, namespace: str = "anarchon", host: str = "127.0.0.1", port: int = 8321,
          read_only: bool = False, refresh: float | str = 2.0, log_level: str = "info",
          token: str | None = None, basic: str | None = None) -> None:
    """Serve the dashboard of `namespace` in `store` at http://host:port/ until interrupted; with
    `token` or `basic` ("USER:PASSWORD"), behind a login of its own."""
    dashboard = Dashboard(store, namespace=namespace, read_only=read_only, refresh=refresh, token=token,
                          basic=basic)
    mode = "read-only" if read_only else "with pause, resume, trigger and schedule edits"
    logins = {"token": "login with a token", "basic": "HTTP basic login"}
    login = logins.get(dashboard.login or "",
                       "no login: bind to a private address or put it behind your auth")
    print(f"anarchon dashboard: namespace {namespace!r} on {dashboard.url}, {mode}, at "
          f"http://{host}:{port}/ ({login})", flush=True)
    config = uvicorn.Config(dashboard, host=host, port=port, log_level=log_level, lifespan="on",
                            access_log=False)
    uvicorn.Server(config).run()
