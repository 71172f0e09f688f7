"""``quotaflow configs``: ``kafka-configs.sh`` (``ConfigCommand``) for quotas: same options, output lines, messages.

Arguments are parsed by hand because, as in Kafka, ``--entity-name`` / ``--entity-default`` pair up with the
``--entity-type`` options by position, and the first entity given names the entity in the completion message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import click

from quotaflow.admin import AdminBackend, Alteration, QuotaOp
from quotaflow.cli.common import (
    RawArgsCommand,
    kafka_errors,
    open_backend,
    parse_java_double,
    raw_args,
    set_command_config,
)
from quotaflow.core.cidr import cidr_error, is_cidr
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import CommandError, InvalidConfigurationError
from quotaflow.core.filters import FilterComponent, QuotaFilter
from quotaflow.core.javafmt import java_double_str
from quotaflow.core.keys import CLIENT_QUOTA_KEYS, IP_QUOTA_KEYS, USER_QUOTA_KEYS
from quotaflow.core.validation import is_valid_ip_entity, java_map_order

TOOL: Final = "config"
ENTITY_TYPES: Final = {"users": "user", "clients": "client-id", "ips": "ip", "client-id-prefixes": "client-id-prefix"}
_SINGULAR: Final = {"users": "user", "clients": "client", "ips": "ip", "client-id-prefixes": "client-id-prefix"}
_SHORT_NAMED: Final = {"--user": "users", "--client": "clients", "--ip": "ips",
                       "--client-id-prefix": "client-id-prefixes"}
_SHORT_DEFAULT: Final = {"--user-defaults": "users", "--client-defaults": "clients", "--ip-defaults": "ips"}
_VALUED: Final = {
    "--entity-type", "--entity-name", "--add-config", "--delete-config", "--store", "--bootstrap-server",
    "--command-config",
}

USAGE: Final = """\
Add/remove or describe client quotas, as kafka-configs.sh does.

\b
  --describe | --alter
  --entity-type users|clients|ips|client-id-prefixes  [--entity-name NAME | --entity-default]
                                   (repeat for users + clients)
  --user NAME | --user-defaults, --client NAME | --client-defaults, --ip NAME | --ip-defaults
  --client-id-prefix PREFIX   (beyond Kafka: a client-id prefix; an --ip may be a CIDR range, 10.1.0.0/16)
  --add-config k1=v1,k2=v2   --delete-config k1,k2
  --store PATH | --bootstrap-server HOST:PORT [--command-config FILE]
"""


@dataclass
class ConfigsArgs:
    describe: bool = False
    alter: bool = False
    entity_types: list[str] = field(default_factory=list)
    entity_names: list[str] = field(default_factory=list)  # "" = --entity-default
    short: list[tuple[str, str]] = field(default_factory=list)  # (type, name or "") in order of appearance
    add_config: list[str] = field(default_factory=list)
    delete_config: list[str] = field(default_factory=list)
    store: str | None = None
    bootstrap_server: str | None = None

    def entities(self) -> list[tuple[str, str | None]]:
        """(entity type, name) pairs in the order given; name None = any, "" = the default."""
        if self.short:
            return [(t, n) for t, n in self.short]
        names: list[str | None] = list(self.entity_names)
        return [(t, names[i] if i < len(names) else None) for i, t in enumerate(self.entity_types)]


def parse_args(args: Sequence[str]) -> ConfigsArgs:
    out = ConfigsArgs()
    it = iter(args)
    for token in it:
        opt, eq, inline = token.partition("=")
        if opt in _VALUED:
            value = inline if eq else next(it, None)
            if value is None:
                raise CommandError(f"Option {opt} requires an argument")
            _store_valued(out, opt, value)
            continue
        if opt in _SHORT_NAMED:
            name = inline if eq else next(it, None)
            if name is None:
                raise CommandError(f"Option {opt} requires an argument")
            out.short.append((_SHORT_NAMED[opt], name))
            continue
        if eq:
            raise CommandError(f"Option {opt} does not take an argument")
        if opt == "--describe":
            out.describe = True
        elif opt == "--alter":
            out.alter = True
        elif opt == "--entity-default":
            out.entity_names.append("")
        elif opt in _SHORT_DEFAULT:
            out.short.append((_SHORT_DEFAULT[opt], ""))
        else:
            raise CommandError(f"{token} is not a recognized option")
    return out


def _store_valued(out: ConfigsArgs, opt: str, value: str) -> None:
    if opt == "--entity-type":
        out.entity_types.append(value)
    elif opt == "--entity-name":
        out.entity_names.append(value)
    elif opt == "--add-config":
        out.add_config.append(value)
    elif opt == "--delete-config":
        out.delete_config.append(value)
    elif opt == "--store":
        out.store = value
    elif opt == "--command-config":
        set_command_config(value)
    else:
        out.bootstrap_server = value


def check_args(a: ConfigsArgs) -> list[tuple[str, str | None]]:
    """ConfigCommand's argument checks; returns the validated (type, name) entity parts."""
    if a.describe == a.alter:
        raise CommandError("Command must include exactly one action: --describe, --alter")
    if a.short and (a.entity_types or a.entity_names):
        raise CommandError("--entity-{type,name,default} should not be used in conjunction with specific entity flags")
    if len(a.entity_names) > len(a.entity_types):
        raise CommandError("--entity-name or --entity-default must be preceded by --entity-type")
    parts = a.entities()
    if not parts:
        raise CommandError("At least one entity type must be specified")
    for t, _ in parts:
        if t not in ENTITY_TYPES:
            raise CommandError(f"Invalid entity-type {t}, --entity-type must be one of {list(ENTITY_TYPES)}")
    types = [t for t, _ in parts]
    if len(types) > 1 and sorted(types) != ["clients", "users"]:
        raise CommandError("Only 'users' and 'clients' entity types may be specified together")
    for t, n in parts:
        if t == "ips" and n and is_cidr(n):
            reason = cidr_error(n)
            if reason is not None:
                raise CommandError(f"The entity name for ips must be a valid IP, CIDR range or resolvable host, but "
                                   f"it is: {n} ({reason})")
        elif t == "ips" and n and not is_valid_ip_entity(n):
            raise CommandError(f"The entity name for ips must be a valid IP or resolvable host, but it is: {n}")
    if a.alter:
        if any(n is None for _, n in parts):
            raise CommandError(
                "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"
            )
        if not a.add_config and not a.delete_config:
            raise CommandError("At least one of --add-config, --add-config-file, or --delete-config must be "
                               "specified with --alter")
    elif a.add_config or a.delete_config:
        raise CommandError("Option --add-config / --delete-config can only be used with --alter")
    return parts


def quota_filter(parts: Sequence[tuple[str, str | None]]) -> QuotaFilter:
    """Describe is always strict: EXACT for a name, DEFAULT for the default, any name for a bare type."""
    comps = []
    for t, n in parts:
        wire_type = ENTITY_TYPES[t]
        if n is None:
            comps.append(FilterComponent.any(wire_type))
        elif n == "":
            comps.append(FilterComponent.default(wire_type))
        else:
            comps.append(FilterComponent.exact(wire_type, n))
    return QuotaFilter.contains_only(comps)


def entity_str(entity: QuotaEntity) -> str:
    """``user-principal 'u', client-id 'c'`` / ``the default user-principal`` ..."""
    labels = {"user": "user-principal", "client-id": "client-id", "ip": "ip", "client-id-prefix": "client-id-prefix"}
    out = []
    for t, name in entity.to_wire().items():
        out.append(f"the default {labels[t]}" if name is None else f"{labels[t]} '{name}'")
    return ", ".join(out)


def describe_lines(backend: AdminBackend, parts: Sequence[tuple[str, str | None]]) -> list[str]:
    lines = []
    for found in backend.describe(quota_filter(parts)):
        values = ", ".join(f"{k}={java_double_str(found.values[k])}" for k in java_map_order(found.values))
        lines.append(f"Quota configs for {entity_str(found.entity)} are {values}")
    return lines


def parse_add_config(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        for pair in item.split(","):
            key, eq, value = pair.partition("=")
            if not eq or not key:
                raise CommandError('Invalid entity config: all configs to be added must be in the format "key=val".')
            out[key.strip()] = value.strip()
    return out


def alter_entity(backend: AdminBackend, a: ConfigsArgs, parts: Sequence[tuple[str, str | None]]) -> str:
    adds = parse_add_config(a.add_config)
    deletes = [k.strip() for item in a.delete_config for k in item.split(",") if k.strip()]
    types = {t for t, _ in parts}
    # a user alone may also hold a per-principal connection_creation_rate (beyond Kafka's model)
    allowed = IP_QUOTA_KEYS if types == {"ips"} else USER_QUOTA_KEYS if types == {"users"} else CLIENT_QUOTA_KEYS
    unexpected = [k for k in [*adds, *deletes] if k not in allowed]
    if unexpected:
        names = ",".join(dict.fromkeys(unexpected))
        if types == {"ips"}:
            what = "Only connection quota configs can be added for 'ips'"
        elif types == {"users"}:
            what = "Only quota and SCRAM credential configs can be added for 'users'"
        else:
            what = "Only quota configs can be added for 'clients'"
        raise CommandError(f"{what} using --bootstrap-server. Unexpected config names: {names}")
    values = {k: parse_java_double(k, v) for k, v in adds.items()}
    entity: dict[str | None, str | None] = {ENTITY_TYPES[t]: (n or None) for t, n in parts}
    strict_exact = quota_filter(parts)
    current = backend.describe(strict_exact)
    current_keys = set(current[0].values) if current else set()
    missing = [k for k in deletes if k not in current_keys]
    if missing:
        raise InvalidConfigurationError(f"Invalid config(s): {','.join(missing)}")
    ops = tuple([QuotaOp(k, v) for k, v in values.items()] + [QuotaOp(k, None) for k in deletes])
    (result,) = backend.alter([Alteration(entity, ops)], validate_only=False)
    if not result.ok:
        raise result.error.exception()
    first_type, first_name = parts[0]
    if first_name:
        return f"Completed updating config for {_SINGULAR[first_type]} {first_name}."
    return f"Completed updating default config for {first_type} in the cluster."


@click.command(
    "configs",
    cls=RawArgsCommand,
    help=USAGE,
    context_settings={"ignore_unknown_options": True, "help_option_names": ["-h", "--help"]},
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def configs(args: tuple[str, ...]) -> None:
    with kafka_errors(TOOL, raw_args()):
        a = parse_args(args)
        parts = check_args(a)
        backend = open_backend(a.store, a.bootstrap_server, create=a.alter)
        try:
            if a.describe:
                for line in describe_lines(backend, parts):
                    click.echo(line)
            else:
                click.echo(alter_entity(backend, a, parts))
        finally:
            backend.close()
