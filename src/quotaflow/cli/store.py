"""``quotaflow store``: move a quota store between SQLite and a Kafka cluster (``store copy SRC DST``)."""

from __future__ import annotations

from contextlib import closing

import click

from quotaflow.cli.common import store_failure
from quotaflow.core.errors import StoreError
from quotaflow.store import open_store
from quotaflow.store.copy import copy_store
from quotaflow.store.factory import describe_store


@click.group("store")
def store() -> None:
    """Manage quota stores (SQLite files or kafka://HOST:PORT[,HOST:PORT...][/TOPIC] topics)."""


@store.command("copy")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST")
@click.option("--overwrite", is_flag=True, help="Replace whatever DST holds (by default DST must be empty).")
def copy(src: str, dst: str, overwrite: bool) -> None:
    """Copy every quota and credential from SRC to DST (a path, sqlite:///PATH or kafka://...).

    DST ends up equal to SRC; SRC is not changed. Passwords are never involved: credentials move as the salted
    derived keys the store holds. Records are re-signed: what SRC applied (with its own
    quotaflow.store.signing.key.file, only what verified) is written with DST's key, or unsigned without one."""
    try:
        src_name, dst_name = describe_store(src), describe_store(dst)
        if src_name == dst_name:
            raise StoreError("SRC and DST are the same store")
        with closing(open_store(src, create=False)) as source, closing(open_store(dst)) as target:
            result = copy_store(source, target, overwrite=overwrite, dst_name=dst_name)
    except StoreError as e:
        store_failure(e)
    removed = ""
    if result.removed_entities or result.removed_credentials:
        removed = f", removed {result.removed_entities} entities and {result.removed_credentials} users"
    click.echo(f"Copied {result.entities} entities and {result.credentials} users from {src_name} to "
               f"{dst_name}{removed}")
