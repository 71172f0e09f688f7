"""``quotaflow users``: the SASL credentials the gateway checks: PLAIN as salted slow hashes, SCRAM-SHA-256/512 as
Kafka stores them (salt, iterations, StoredKey, ServerKey); never the password."""

from __future__ import annotations

import sys

import click

from quotaflow.cli.common import announce_store, open_cli_store, store_option
from quotaflow.core.errors import QuotaflowError
from quotaflow.gateway.auth.sasl import hash_password
from quotaflow.store.base import ScramStore
from quotaflow.store.scram import DEFAULT_ITERATIONS, HASHES, scram_credential


@click.group("users")
def users() -> None:
    """Manage the SASL users the gateway authenticates (PLAIN: PBKDF2 hashes; SCRAM: derived keys only)."""


def _read_password(user: str) -> str:
    """From an interactive prompt (typed twice, hidden), else the first line of stdin."""
    if sys.stdin.isatty():
        password: str = click.prompt(f"Password for {user}", hide_input=True, confirmation_prompt=True)
        return password
    return sys.stdin.readline().rstrip("\r\n")


@users.command("add")
@click.argument("user")
@click.option("--password", default=None, help="The password (default: prompt, or the first line of stdin).")
@click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(["PLAIN", *HASHES]),
              help="Store credentials for this SASL mechanism (repeatable; default: PLAIN, SCRAM-SHA-256 and "
                   "SCRAM-SHA-512).")
@click.option("--iterations", type=int, default=DEFAULT_ITERATIONS, show_default=True,
              help="SCRAM iterations (4096 to 16384, as Kafka).")
@store_option
def add(user: str, password: str | None, mechanisms: tuple[str, ...], iterations: int, store: str | None) -> None:
    """Add USER, or replace USER's password."""
    if not user:
        raise click.BadParameter("must not be empty", param_hint="USER")
    secret = password if password is not None else _read_password(user)
    if not secret:
        raise click.BadParameter("must not be empty", param_hint="--password")
    try:
        qs = open_cli_store(store)
        announce_store(store)
        try:
            scram_store = qs if isinstance(qs, ScramStore) else None
            chosen = mechanisms or (("PLAIN", *HASHES) if scram_store is not None else ("PLAIN",))
            scram = [scram_credential(user, m, secret, iterations=iterations) for m in chosen if m in HASHES]
            if scram and scram_store is None:
                raise click.ClickException(f"this store keeps PLAIN credentials only, not {', '.join(HASHES)}")
            existed = user in qs.list_credentials()
            if "PLAIN" in chosen:
                qs.put_credential(hash_password(user, secret))
            for credential in scram:
                assert scram_store is not None
                scram_store.put_scram_credential(credential)
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
        qs = open_cli_store(store, create=False)
        announce_store(store)
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
        qs = open_cli_store(store, create=False)
        try:
            names = qs.list_credentials()
        finally:
            qs.close()
    except QuotaflowError as e:
        raise click.ClickException(str(e)) from e
    for name in sorted(names):
        click.echo(name)
