"""``quotaflow client-quotas``: the ``kafka-client-quotas.sh`` KIP-546 proposed (Kafka never shipped it).

``--describe`` with exact names, defaults and any-name components (``--strict`` for containsOnly); ``--alter``
with ``--add`` / ``--delete`` / ``--validate-only``; ``--resolve`` for a (user, client-id) pair or an ip. Text
output follows KIP-546 (an entity line, then indented ``key=value`` lines; resolve adds the supplying entity);
``--output json`` prints one JSON document for scripts. See docs/cli.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import click

from quotaflow.admin import AdminBackend, Alteration, DescribedEntity, QuotaOp, Resolution
from quotaflow.admin.batch import apply, changes_to_json, read_proposal
from quotaflow.admin.codec import alter_to_json, describe_to_json, resolution_to_json
from quotaflow.cli.common import (
    RawArgsCommand,
    bootstrap_option,
    kafka_errors,
    open_backend,
    parse_java_double,
    raw_args,
    store_option,
)
from quotaflow.core.cidr import is_cidr
from quotaflow.core.entities import QuotaEntity, entity_text
from quotaflow.core.errors import CommandError, QuotaflowError
from quotaflow.core.filters import FilterComponent, QuotaFilter
from quotaflow.core.javafmt import java_double_str

TOOL: Final = "client-quotas"


def parse_names(text: str | None) -> dict[str, str]:
    """``type=name,type=name``."""
    out: dict[str, str] = {}
    for item in _split(text):
        entity_type, eq, name = item.partition("=")
        if not eq:
            raise CommandError(f"Invalid --names entry '{item}': expected type=name")
        if entity_type in out:
            raise CommandError(f"Entity type {entity_type} given more than once")
        out[entity_type] = name
    return out


def _split(text: str | None) -> list[str]:
    return [p for p in (text or "").split(",") if p]


def parse_add(text: str | None) -> list[tuple[str, float]]:
    out = []
    for item in _split(text):
        key, eq, value = item.partition("=")
        if not eq:
            raise CommandError(f"Invalid --add entry '{item}': expected key=value")
        out.append((key, parse_java_double(key, value)))
    return out


def render_entity(entity: Mapping[str, str | None]) -> str:
    """KIP-546 style ``{user=user-one, client-id=my-client}``; a default part shows as ``<default>``."""
    return "{" + entity_text(entity) + "}"


def describe_filter(names: dict[str, str], defaults: list[str], any_types: list[str], strict: bool) -> QuotaFilter:
    comps = [FilterComponent.exact(t, n) for t, n in names.items()]
    comps += [FilterComponent.default(t) for t in defaults]
    comps += [FilterComponent.any(t) for t in any_types]
    return QuotaFilter(tuple(comps), strict)


def describe_text(found: Sequence[DescribedEntity]) -> str:
    lines = []
    for d in found:
        lines.append(render_entity(d.entity.to_wire()))
        lines += [f"  {k}={java_double_str(d.values[k])}" for k in sorted(d.values)]
    return "\n".join(lines)


def _beyond_kafka(entity: QuotaEntity) -> bool:
    """A client-id prefix or a CIDR range: resolve names what such an entity overrides (or is overridden by)."""
    return entity.is_prefix() or (isinstance(entity.ip, str) and is_cidr(entity.ip))


def resolve_text(res: Resolution) -> str:
    lines = [render_entity(res.entity.to_wire())]
    for key in sorted(res.quotas):
        q = res.quotas[key]
        if q.value is None or q.entity is None:
            lines.append(f"  {key}=unlimited")
            continue
        line = f"  {key}={java_double_str(q.value)} {render_entity(q.entity.to_wire())}"
        if q.overridden and any(_beyond_kafka(e) for e in (q.entity, *(c.entity for c in q.overridden))):
            shadowed = ", ".join(f"{render_entity(c.entity.to_wire())}={java_double_str(c.value)}"
                                 for c in q.overridden)
            line += f" overrides {shadowed}"
        lines.append(line)
    return "\n".join(lines)


def do_resolve(backend: AdminBackend, names: dict[str, str]) -> Resolution:
    if set(names) == {"ip"}:
        return backend.resolve_ip(names["ip"])
    if set(names) == {"user", "client-id"}:
        return backend.resolve(names["user"], names["client-id"])
    raise CommandError("--resolve needs --names user=<user>,client-id=<client-id> or --names ip=<ip>")


@click.command("client-quotas", cls=RawArgsCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--describe", "describe", is_flag=True, help="List entities matching the filter and their quotas.")
@click.option("--resolve", "resolve", is_flag=True, help="Effective quotas for a (user, client-id) pair or an ip.")
@click.option("--alter", "alter", is_flag=True, help="Set (--add) or remove (--delete) quotas of one entity.")
@click.option("--names", metavar="TYPE=NAME,...",
              help="Named entity parts (user, client-id, ip, client-id-prefix; an ip may be a CIDR range).")
@click.option("--defaults", metavar="TYPE,...", help="Default entity parts.")
@click.option("--any", "any_types", metavar="TYPE,...", help="Describe: any name of the type, default included.")
@click.option("--strict", is_flag=True, help="Describe: only entities with exactly the given types.")
@click.option("--add", metavar="KEY=VALUE,...", help="Alter: quotas to set.")
@click.option("--delete", metavar="KEY,...", help="Alter: quotas to remove.")
@click.option("--validate-only", is_flag=True, help="Alter: validate and report, write nothing.")
@click.option("--from-file", "from_file", type=click.Path(path_type=Path, dir_okay=False),
              help="Alter: the entities and values of a `--describe --output json` document (a `quotaflow "
              "recommend` proposal.json); each entity all-or-nothing.")
@click.option("--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
@store_option
@bootstrap_option
def client_quotas(
    describe: bool,
    resolve: bool,
    alter: bool,
    names: str | None,
    defaults: str | None,
    any_types: str | None,
    strict: bool,
    add: str | None,
    delete: str | None,
    validate_only: bool,
    from_file: Path | None,
    output: str,
    store: str | None,
    bootstrap_server: str | None,
) -> None:
    """Describe, alter and resolve client quotas (KIP-546)."""
    with kafka_errors(TOOL, raw_args()):
        if describe + resolve + alter != 1:
            raise CommandError("Command must include exactly one action: --describe, --resolve, --alter")
        named = parse_names(names)
        default_types = _split(defaults)
        for entity_type in (set(named) & set(default_types)) if alter else ():
            # a name and a default of one type is no entity: said, not silently merged (describe's filter gets
            # Kafka's own "cannot appear more than once in the filter")
            raise CommandError(f"Entity type {entity_type} given more than once")
        if not describe and (any_types or strict):
            raise CommandError("--any and --strict can only be used with --describe")
        if not alter and (add or delete or validate_only or from_file):
            raise CommandError("--add, --delete, --from-file and --validate-only can only be used with --alter")
        if from_file is not None:
            if add or delete or named or default_types:
                raise CommandError("--from-file names its entities and values: no --names, --defaults, --add, --delete")
            alter_from_file(from_file, validate_only, output, store, bootstrap_server)
            return
        ops: list[QuotaOp] = []
        if alter:
            ops = [QuotaOp(k, v) for k, v in parse_add(add)] + [QuotaOp(k, None) for k in _split(delete)]
            if not ops:
                raise CommandError("--alter needs --add and/or --delete")
            keys = [op.key for op in ops]
            for key in dict.fromkeys(k for k in keys if keys.count(k) > 1):
                # Kafka's controller answers "Ignoring duplicate entity ..." for this; say which key, before sending
                raise CommandError(f"Duplicate quota key {key}: give each key once, in --add or --delete")
        if resolve and default_types:
            raise CommandError("--resolve takes names only: a client always has a user and a client-id")
        backend = open_backend(store, bootstrap_server, create=alter)
        try:
            result: object
            if describe:
                found = backend.describe(describe_filter(named, default_types, _split(any_types), strict))
                result = describe_to_json(found) if output == "json" else describe_text(found)
            elif resolve:
                res = do_resolve(backend, named)
                result = resolution_to_json(res) if output == "json" else resolve_text(res)
            else:
                entity: dict[str | None, str | None] = dict(named.items())
                entity.update(dict.fromkeys(default_types))
                results = backend.alter([Alteration(entity, tuple(ops))], validate_only)
                failed = [r for r in results if not r.ok]
                if failed:
                    raise failed[0].error.exception()
                verb = "Validated (nothing written)" if validate_only else "Altered"
                result = alter_to_json(results) if output == "json" else f"{verb} {render_entity(_known(entity))}"
        finally:
            backend.close()
        if isinstance(result, str):
            if result:
                click.echo(result)
        else:
            click.echo(json.dumps(result, indent=2))


def alter_from_file(path: Path, validate_only: bool, output: str, store: str | None,
                    bootstrap_server: str | None) -> None:  # fmt: skip
    """``--alter --from-file``: every entity of the file, each validated and applied all-or-nothing, with a summary
    of what changes; exit status 1 when an entity failed."""
    alterations = read_proposal(path)
    backend = open_backend(store, bootstrap_server, create=True)
    try:
        in_force = {} if output == "json" else {
            frozenset(a.entity.items()): _in_force(backend, a.entity) for a in alterations}
        done = apply(backend, alterations, validate_only)
    finally:
        backend.close()
    failed = [c for c in done if c.result is not None and not c.result.ok]
    if output == "json":
        click.echo(json.dumps(changes_to_json(done), indent=2))
    else:
        for c in done:
            click.echo(f"{render_entity(_known(c.alteration.entity))}"
                       + ("" if c.result is None or c.result.ok else f"  FAILED: {c.result.error.message}"))
            resolved = in_force.get(frozenset(c.alteration.entity.items()))
            for k in c.keys:
                old = "-" if k.old is None else java_double_str(k.old)
                held = None if resolved is None or k.old is not None else resolved.quotas.get(str(k.key))
                if held is not None and held.value is not None and held.entity is not None:
                    # nothing on this entity, but a quota is in force for its clients: say which, from where
                    old += f" ({java_double_str(held.value)} in force from {render_entity(held.entity.to_wire())})"
                new = "(removed)" if k.new is None else java_double_str(k.new)
                click.echo(f"  {k.key}: {old} -> {new}" + ("" if k.changed else " (unchanged)"))
        verb = "Validated (nothing written)" if validate_only else "Altered"
        ok = [c for c in done if c not in failed]
        click.echo(f"{verb}: {len(ok)} entities, {sum(c.changed for c in ok)} values changed; {len(failed)} failed")
    if failed:
        raise SystemExit(1)


def _in_force(backend: AdminBackend, entity: Mapping[str | None, str | None]) -> Resolution | None:
    """What a client of this entity is held to now (``--resolve``): a named user and/or client-id, the part the
    entity leaves open an empty name; a client-id prefix, the prefix as a client-id. None for defaults and ips."""
    parts = _known(entity)
    if not parts or "ip" in parts or any(v is None for v in parts.values()):
        return None
    client = parts.get("client-id") or parts.get("client-id-prefix") or ""
    try:
        return backend.resolve(parts.get("user") or "", client)
    except QuotaflowError:
        return None


def _known(entity: Mapping[str | None, str | None]) -> dict[str, str | None]:
    return {k: v for k, v in entity.items() if k is not None}

