"""``quotaflow users``: the SASL/PLAIN credentials the gateway checks (salted slow hashes in the quota store)."""

from __future__ import annotations

import sys

import click

from quotaflow.cli.common import store_option
from quotaflow.core.errors import QuotaflowError
from quotaflow.gateway.sasl import hash_password
from quotaflow.store import open_store


@click.group("users")
def users() -> None:
    """Manage the SASL/PLAIN users the gateway authenticates (passwords are stored as PBKDF2 hashes only)."""


def _read_password(user: str) -> str:
    """From an interactive prompt (typed twice, hidden), else the first line of stdin."""
    if sys.stdin.isatty():
        password: str = click.prompt(f"Password for {user}", hide_input=True, confirmation_prompt=True)
        return password
    return sys.stdin.readline().rstrip("\r\n")


@users.command("add")
@click.argument("user")
@click.option("--password", default=None, help="The password (default: prompt, or the first line of stdin).")
@store_option
def add(user: str, password: str | None, store: str | None) -> None:
    """Add USER, or replace USER's password."""
    if not user:
        raise click.BadParameter("must not be empty", param_hint="USER")
    secret = password if password is not None else _read_password(user)
    if not secret:
        raise click.BadParameter("must not be empty", param_hint="--password")
    credential = hash_password(user, secret)
    try:
        qs = open_store(store)
        try:
            existed = qs.get_credential(user) is not None
            qs.put_credential(credential)
        finally:
            qs.close()
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"{'Updated' if existed else 'Added'} user {user}")


@users.command("remove")
@click.argument("user")
@store_option
def remove(user: str, store: str | None) -> None:
    """Remove USER; later SASL logins as USER fail. Exit status 1 when USER does not exist."""
    try:
        qs = open_store(store, create=False)
        try:
            removed = qs.delete_credential(user)
        finally:
            qs.close()
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    if not removed:
        raise click.ClickException(f"no such user: {user}")
    click.echo(f"Removed user {user}")


@users.command("list")
@store_option
def list_users(store: str | None) -> None:
    """Print the user names, one per line, sorted."""
    try:
        qs = open_store(store, create=False)
        try:
            names = qs.list_credentials()
        finally:
            qs.close()
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    for name in sorted(names):
        click.echo(name)
