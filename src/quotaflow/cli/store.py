"""``quotaflow store``: move a quota store between SQLite and a Kafka cluster (``store copy SRC DST``)."""

from __future__ import annotations

from contextlib import closing

import click

from quotaflow.cli.common import open_cli_store, store_failure
from quotaflow.core.errors import StoreError
from quotaflow.store import open_store
from quotaflow.store.copy import copy_store
from quotaflow.store.factory import describe_store, stderr_notice


@click.group("store")
def store() -> None:
    """Manage quota stores (SQLite files or kafka://HOST:PORT[,HOST:PORT...][/TOPIC] topics)."""


@store.command("copy")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST")
@click.option("--overwrite", is_flag=True, help="Replace whatever DST holds (by default DST must be empty).")
def copy(src: str, dst: str, overwrite: bool) -> None:
    """Copy every quota, credential and ACL from SRC to DST (a path, sqlite:///PATH or kafka://...).

    DST ends up equal to SRC; SRC is not changed. Passwords are never involved: credentials move as the salted
    derived keys the store holds. Records are re-signed: what SRC applied (with its own
    quotaflow.store.signing.key.file, only what verified) is written with DST's key, or unsigned without one."""
    try:
        src_name, dst_name = describe_store(src), describe_store(dst)
        if src_name == dst_name:
            raise StoreError("SRC and DST are the same store")
        with closing(open_cli_store(src, create=False)) as source, \
                closing(open_store(dst, notice=stderr_notice)) as target:
            result = copy_store(source, target, overwrite=overwrite, dst_name=dst_name)
    except StoreError as e:
        store_failure(e)
    click.echo(f"Copied {_counts(result.entities, result.credentials, result.acls)} from {src_name} to {dst_name}"
               + (f", removed {_counts(result.removed_entities, result.removed_credentials, result.removed_acls)}"
                  if result.removed_entities or result.removed_credentials or result.removed_acls else "")
               + (f"; shadow set {result.shadow!r} started in {dst_name}" if result.shadow else ""))


def _counts(entities: int, users: int, acls: int) -> str:
    """``2 entities and 1 users``, with ``, ... and N ACLs`` when there are ACLs."""
    return f"{entities} entities, {users} users and {acls} ACLs" if acls else f"{entities} entities and {users} users"
