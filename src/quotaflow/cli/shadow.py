"""``quotaflow shadow``: try a proposal on live traffic before enforcing it (issue 36).

``start --from-file proposal.json`` (the ``client-quotas --alter --from-file`` file, validated by the same code) puts
a shadow set in the store; every gateway on the store evaluates each request under it beside the enforced quotas,
enforcing only those, and records both decisions. ``status`` shows it, ``stop`` drops it, ``promote`` makes it the
enforced set in one store batch every gateway applies at the same instant, ``rollback`` undoes a promotion,
``history`` lists every set and promotion. Errors are one line on stderr, exit status 1 (2: a usage error).
"""

from __future__ import annotations

import datetime
import getpass
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import click

from quotaflow.admin import shadow as shadows
from quotaflow.cli.common import announce_store, open_cli_store, store_option
from quotaflow.cli.shadow_report import report
from quotaflow.core.entities import entity_text
from quotaflow.core.errors import QuotaflowError
from quotaflow.core.javafmt import java_double_str
from quotaflow.store.base import EntityChange, Promotion, QuotaStore

POLL_MS_DEFAULT: Final = 250  # quotaflow.store.poll.ms's default (gateway.config): a grace under 2x of it is late


def _user() -> str:
    """Who runs the command: the OS user (``getpass.getuser``), the uid where the system names none."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid {os.getuid()}"


def by_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--by", "by", metavar="WHO", default=None,
                        help="Who does this, for the history (default: the OS user).")(f)


def output_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)(f)


@contextmanager
def _store(store: str | None, *, writes: bool) -> Iterator[QuotaStore]:
    """The command's store; any quotaflow error (the store, the proposal, the shadow state) one line, exit 1."""
    try:
        qs = open_cli_store(store, create=writes)
        if writes:
            announce_store(store)
        try:
            yield qs
        finally:
            qs.close()
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e


@click.group("shadow")
def shadow() -> None:
    """Shadow quotas: evaluate a proposal on live traffic beside the enforced quotas, then promote or stop it."""


@shadow.command("start")
@click.option("--from-file", "from_file", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The proposal: a `client-quotas --describe --output json` document (a `quotaflow recommend` "
                   "proposal.json); changes over the enforced quotas, null removes a key.")
@click.option("--name", required=True, help="A name for the shadow set (reports and the console show it).")
@by_option
@store_option
def start(from_file: Path, name: str, by: str | None, store: str | None) -> None:
    """Start a shadow set (one already running is replaced). Every entity must be valid, or nothing starts."""
    with _store(store, writes=True) as qs:
        before = shadows.status(qs)
        started = shadows.start_from_file(qs, from_file, name, by or _user())
        lines = _change_lines(qs, started.changes)
    values = sum(len(ops) for _, ops in started.changes)
    click.echo(f"Started shadow set {started.id} {started.name!r} by {started.started_by}: "
               f"{len(started.changes)} entities, {values} values"
               + (f" (replacing shadow set {before.id} {before.name!r})" if before is not None else ""))
    for line in lines:
        click.echo(line)


@shadow.command("status")
@output_option
@store_option
def status(output: str, store: str | None) -> None:
    """The running shadow set: each change, enforced value -> shadow value."""
    with _store(store, writes=False) as qs:
        running = shadows.status(qs)
        version = shadows.shadow_store(qs).shadow_version()
        lines = [] if running is None else _change_lines(qs, running.changes)
    if output == "json":
        click.echo(json.dumps({"shadow": None if running is None else shadows.shadow_json(running),
                               "shadow_version": version}, indent=2))
        return
    if running is None:
        click.echo("No shadow set is running.")
        return
    values = sum(len(ops) for _, ops in running.changes)
    click.echo(f"Shadow set {running.id} {running.name!r}: running since {_when(running.started_ms)} "
               f"(started by {running.started_by}), {len(running.changes)} entities, {values} values "
               f"(enforced -> shadow)")
    for line in lines:
        click.echo(line)


@shadow.command("stop")
@by_option
@store_option
def stop(by: str | None, store: str | None) -> None:
    """Stop the running shadow set without enforcing it."""
    with _store(store, writes=True) as qs:
        stopped = shadows.stop(qs, by or _user())
    click.echo(f"Stopped shadow set {stopped.id} {stopped.name!r}")


@shadow.command("promote")
@click.option("--in", "grace", type=float, default=shadows.DEFAULT_GRACE_S, show_default=True, metavar="SECONDS",
              help="Take effect this many seconds from now, on every gateway at once (at least twice the "
                   "gateways' quotaflow.store.poll.ms, so each has read it before).")
@by_option
@store_option
def promote(grace: float, by: str | None, store: str | None) -> None:
    """Enforce the running shadow set: one store batch every gateway applies at the same instant."""
    _warn_short(grace)
    with _store(store, writes=True) as qs:
        done = shadows.promote(qs, by or _user(), grace)
    _show_batch(f"Promoted shadow set {done.shadow_id} {done.shadow_name!r}", done)


@shadow.command("rollback")
@click.option("--in", "grace", type=float, default=shadows.DEFAULT_GRACE_S, show_default=True, metavar="SECONDS",
              help="Take effect this many seconds from now, on every gateway at once.")
@click.option("--force", is_flag=True,
              help="Restore even the keys changed since the promotion (undoing those later changes).")
@by_option
@store_option
def rollback(grace: float, force: bool, by: str | None, store: str | None) -> None:
    """Restore the values the last promotion replaced (refused over keys changed since it, unless --force)."""
    _warn_short(grace)
    with _store(store, writes=True) as qs:
        done = shadows.rollback(qs, by or _user(), grace, force=force)
    _show_batch(f"Rolled back the promotion of shadow set {done.shadow_id} {done.shadow_name!r}", done)


@shadow.command("history")
@output_option
@store_option
def history(output: str, store: str | None) -> None:
    """Every shadow set (with how it ended) and every promotion and rollback, oldest first."""
    with _store(store, writes=False) as qs:
        found = shadows.history(qs)
    if output == "json":
        click.echo(json.dumps(shadows.history_json(found), indent=2))
        return
    if not found.shadows:
        click.echo("No shadow set was ever started.")
        return
    click.echo("Shadow sets:")
    for s in found.shadows:
        ended = "" if s.ended_ms is None else f", {s.outcome} {_when(s.ended_ms)} by {s.ended_by}"
        click.echo(f"  {s.id} {s.name!r}: started {_when(s.started_ms)} by {s.started_by}, "
                   f"{len(s.changes)} entities{ended}" + (" (running)" if s.outcome == "running" else ""))
    if found.promotions:
        click.echo("Promotions:")
    for p in found.promotions:
        click.echo(f"  {p.id} {p.kind} of shadow set {p.shadow_id} {p.shadow_name!r} by {p.by} at {_when(p.at_ms)}, "
                   f"effective {_when(p.effective_ms)}: {_count(p)} values")
        for line in _batch_lines(p):
            click.echo("  " + line)


shadow.add_command(report)  # enforced vs shadow over the events a shadow set saw (Spark): cli/shadow_report.py


# -- text ------------------------------------------------------------------------------------------------------------


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _value(value: float | None) -> str:
    return "-" if value is None else java_double_str(value)


def _entity(change: EntityChange) -> str:
    return "{" + entity_text(change[0].to_wire()) + "}"


def _change_lines(qs: QuotaStore, changes: Sequence[EntityChange]) -> list[str]:
    """Each change as ``{entity}: key enforced -> shadow``, with ``(unchanged)`` where they agree."""
    out = []
    for change in changes:
        now = qs.get(change[0])
        out.append(f"  {_entity(change)}")
        for key, value in change[1].items():
            same = now.get(key) == value
            new = "(removed)" if value is None else java_double_str(value)
            out.append(f"    {key}: {_value(now.get(key))} -> {new}" + (" (unchanged)" if same else ""))
    return out


def _count(p: Promotion) -> int:
    return sum(len(ops) for _, ops in p.applied)


def _batch_lines(p: Promotion) -> list[str]:
    before = dict(p.previous)
    out = []
    for change in p.applied:
        out.append(f"  {_entity(change)}")
        for key, value in change[1].items():
            new = "(removed)" if value is None else java_double_str(value)
            out.append(f"    {key}: {_value(before.get(change[0], {}).get(key))} -> {new}")
    return out


def _show_batch(head: str, p: Promotion) -> None:
    seqs = f"change seq {p.first_seq}" + (f"..{p.last_seq}" if p.last_seq != p.first_seq else "")
    click.echo(f"{head}: {_count(p)} values on {len(p.applied)} entities, effective {_when(p.effective_ms)} on "
               f"every gateway (id {p.id}, {seqs if _count(p) else 'no change'})")
    for line in _batch_lines(p):
        click.echo(line)


def _warn_short(grace: float) -> None:
    if 0 <= grace < 2 * POLL_MS_DEFAULT / 1000:
        click.echo(f"Warning: --in {grace:g} s is under twice the gateways' quotaflow.store.poll.ms "
                   f"({POLL_MS_DEFAULT} ms by default): a gateway may read the batch after it takes effect and "
                   f"apply it late", err=True)

