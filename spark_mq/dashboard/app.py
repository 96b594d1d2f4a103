"""The console's web application: its routes, the login and logout of an ACL account, and the
lifespan that runs the sampler and closes the cluster clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from spark_mq.common.errors import MQClientError, RemotingError
from spark_mq.dashboard import actions, pages
from spark_mq.dashboard.auth import ANONYMOUS, LOGIN_FAILURES_MAX, SESSION_COOKIE, Account, LoginLimiter, Sessions
from spark_mq.dashboard.clients import ClusterClients, refused
from spark_mq.dashboard.sampler import SAMPLE_INTERVAL_S, Sampler
from spark_mq.dashboard.web import TEMPLATES, ConsoleState, account_of, redirect

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"


def _safe_next(path: str) -> str:
    """Where to go after login: a path of this console only."""
    return path if path.startswith("/") and not path.startswith("//") else "/"


async def login(request: Request) -> Response:
    state: ConsoleState = request.app.state.console
    next_path = _safe_next(request.query_params.get("next", "/"))
    error = None
    status = 200
    addr = request.client.host if request.client else ""
    wait_s = state.login_limiter.wait_s(addr) if request.method == "POST" else 0.0
    if wait_s:
        status, error = 429, (f"Too many failed log-ins from {addr}: try again in {math.ceil(wait_s)} s "
                              f"(at most {LOGIN_FAILURES_MAX} a minute).")
    elif request.method == "POST":
        form = await request.form()
        access, secret = str(form.get("access_key", "")).strip(), str(form.get("secret_key", ""))
        if access and secret:
            probe = Account(access, secret, admin=False)
            try:
                account = Account(access, secret, admin=await state.clients.is_admin(probe))
            except (RemotingError, MQClientError) as e:
                error = f"The cluster did not answer: {e}"
                if refused(e):
                    error = "The servers do not know this account, or its secret key is wrong."
                    state.login_limiter.failed(addr)
                    state.clients.release(probe)  # a wrong key or secret: nothing will use its connections
            else:
                if not state.fixed_account:
                    state.sampler.account = account
                response = redirect(next_path)
                response.set_cookie(SESSION_COOKIE, state.sessions.open(account), httponly=True, samesite="strict")
                log.info("console: account %s logged in (%s)", access, "admin" if account.admin else "read-only")
                return response
        else:
            error = "Give the account's access key and secret key."
    return TEMPLATES.TemplateResponse(request, "login.html", {"account": account_of(request) or ANONYMOUS,
                                                               "error": error, "next": next_path, "note": None},
                                      status_code=status)  # the form again, saying what was wrong


async def logout(request: Request) -> Response:
    state: ConsoleState = request.app.state.console
    state.sessions.close(request.cookies.get(SESSION_COOKIE))
    response = redirect("/login")
    response.delete_cookie(SESSION_COOKIE)
    return response


ROUTES = [
    Route("/", pages.overview),
    Route("/topics", pages.topic_list),
    Route("/topics", actions.save_topic, methods=["POST"]),
    Route("/topics/{topic}", pages.topic),
    Route("/topics/{topic}/delete", actions.delete_topic, methods=["POST"]),
    Route("/topics/{topic}/send", actions.send_test, methods=["POST"]),
    Route("/groups", pages.group_list),
    Route("/groups/{group}", pages.group),
    Route("/groups/{group}/reset", actions.reset_offsets, methods=["POST"]),
    Route("/groups/{group}/offset", actions.set_offset, methods=["POST"]),
    Route("/groups/{group}/delete", actions.delete_group, methods=["POST"]),
    Route("/messages", pages.message_search),
    Route("/messages/resend", actions.resend, methods=["POST"]),
    Route("/controller", pages.controller),
    Route("/login", login, methods=["GET", "POST"]),
    Route("/logout", logout, methods=["POST"]),
    Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
]


def create_app(clients: ClusterClients, *, account: Account = ANONYMOUS, controller_addrs: list[str] | None = None,
               sample_interval_s: float = SAMPLE_INTERVAL_S, archive_root: str = "") -> Starlette:
    """The console over ``clients``' cluster. ``account`` signs the sampler's requests (ANONYMOUS: the
    last login's, with ACL on); ``controller_addrs`` (default: the NameServers, which may embed one) are
    asked for the controller's view; ``archive_root`` is the tiered archive's ("": none)."""
    sampler = Sampler(clients, account, sample_interval_s)

    def forget(ended: Account) -> None:  # an account's last session ended: close its connections
        if ended != sampler.account:
            clients.release(ended)

    state = ConsoleState(clients, Sessions(on_forget=forget), sampler, controller_addrs or clients.base.namesrv_addrs,
                         account.signed, LoginLimiter(), archive_root)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        task = asyncio.create_task(sampler.run(stop))
        try:
            yield
        finally:
            stop.set()
            await task
            await clients.close()

    app = Starlette(routes=ROUTES, lifespan=lifespan)
    app.state.console = state
    return app
