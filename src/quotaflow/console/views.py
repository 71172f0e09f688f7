"""How the pages show things: entity text, links between Quotas and Resolve, numbers, the Jinja2 environment."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.templating import Jinja2Templates

from quotaflow.admin.local import IP_RANGE_LEVEL
from quotaflow.console.state import console_of
from quotaflow.core.entities import entity_text
from quotaflow.core.javafmt import java_double_str
from quotaflow.core.precedence import LEVEL_NAMES, PREFIX_TAG_USER
from quotaflow.core.sanitize import desanitize

TEMPLATES_DIR: Final = Path(__file__).parent / "templates"


def entity_label(entity: dict[str, str | None] | None) -> str:
    """``user=alice, client-id=<default>`` (no entity: ``-``)."""
    return entity_text(entity) if entity else "-"


def quotas_link(entity: dict[str, str | None] | None) -> str:
    """The Quotas page filtered (strict) to exactly this entity."""
    query: dict[str, str] = {"strict": "1"}
    for t, n in (entity or {}).items():
        if n is None:
            query[f"{t}_match"] = "default"
        else:
            query[f"{t}_match"], query[t] = "exact", n
    return "/quotas?" + urlencode(query)


def resolve_link(entity: dict[str, str | None] | None) -> str | None:
    """Resolve for a client this entity applies to: its names, a part it leaves open (a user alone, a prefix) as
    an empty name (Kafka's empty client-id), so the link shows a resolution; the default parts left to fill."""
    if not entity:
        return None
    named = {t: n for t, n in entity.items() if n is not None}
    if "client-id-prefix" in named:  # a client whose id is the prefix itself is one of its clients
        named = {"client-id": named.pop("client-id-prefix")}
    if "/" in named.get("ip", ""):  # a CIDR range: its first address
        named["ip"] = named["ip"].split("/", 1)[0]
    if named and "ip" not in named:  # a client needs both parts: the one the entity leaves open is empty
        named = {"user": named.get("user", ""), "client-id": named.get("client-id", "")}
    return "/resolve" + ("?" + urlencode(named) if named else "")


def shares_text(quota_id: dict[str, str] | None) -> str:
    """Who is metered together under this quota-id (the metric tags)."""
    if quota_id is None:
        return "not metered: no quota of this kind is configured anywhere"
    if "ip" in quota_id:
        return f"connections from ip {quota_id['ip']}"
    if quota_id.get("user") == PREFIX_TAG_USER:
        return f"every client whose client-id starts with {quota_id.get('client-id', '')}"
    if set(quota_id) == {"user"}:
        return f"connections of user {quota_id['user']}"
    user, client = desanitize(quota_id.get("user", "")), quota_id.get("client-id", "")  # the user tag is sanitized
    if user and client:
        return f"only user {user} with client-id {client}"
    if user:
        return f"every client-id of user {user}"
    if client:
        return f"every user with client-id {client}"
    return "everyone (no tags)"


def tags_text(tags: dict[str, str] | None) -> str:
    """A quota-id's metric tags as text (``{user=<client-id-prefix>, client-id=etl-}``), escaped by the template as
    any text: JSON in a page escapes ``<`` as ``\u003c`` for scripts, which a person then reads."""
    return "{" + ", ".join(f"{k}={v}" for k, v in (tags or {}).items()) + "}"


def level_name(level: int, entity: dict[str, str | None]) -> str:
    """The precedence level's name: KIP-55's eight (and the client-id prefix) for a client, KIP-612's two (and the
    CIDR range) for an ip."""
    if "ip" in entity:
        return {1: "ip", 2: "<default> ip", IP_RANGE_LEVEL: "ip range (CIDR)"}.get(level, "")
    return LEVEL_NAMES.get(level, "")


def num(value: Any) -> str:
    """Table numbers: thousands separated, small ones to four significant digits, None as a dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def make_templates() -> Jinja2Templates:
    env = Environment(loader=FileSystemLoader(TEMPLATES_DIR), autoescape=select_autoescape())
    env.filters["jd"] = lambda v: "unlimited" if v is None else java_double_str(float(v))
    env.filters["entity"] = entity_label
    env.filters["num"] = num
    env.filters["tags"] = tags_text
    env.globals.update(
        quotas_link=quotas_link, resolve_link=resolve_link, shares_text=shares_text, level_name=level_name
    )
    return Jinja2Templates(env=env)


async def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    """A page: ``name`` with ``context`` plus what the layout shows (who is signed in, read-only, the nav)."""
    console = console_of(request)
    base = {
        "principal": await console.principal(request),
        "read_only": console.config.read_only,
        "nav": name.removesuffix(".html"),
        "gateways": list(console.live.gateways),
        "backtests_dir": console.config.backtests,
    }
    templates: Jinja2Templates = request.app.state.templates
    response: HTMLResponse = templates.TemplateResponse(request, name, {**base, **context}, status_code=status)
    return response
