"""``quotaflow configs``: ``kafka-configs.sh`` (``ConfigCommand``) for quotas and users' SCRAM credentials: same
options, output lines, messages.

Arguments are parsed by hand because, as in Kafka, ``--entity-name`` / ``--entity-default`` pair up with the
``--entity-type`` options by position, and the first entity given names the entity in the completion message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import click

from quotaflow.admin import AdminBackend, Alteration, QuotaOp
from quotaflow.cli.common import (
    RawArgsCommand,
    java_exception_line,
    kafka_errors,
    open_backend,
    parse_java_double,
    raw_args,
    set_command_config,
)
from quotaflow.cli.scram import ScramClient, is_scram, parse_upsertion
from quotaflow.core.cidr import cidr_error, is_cidr
from quotaflow.core.entities import QuotaEntity
from quotaflow.core.errors import (
    ClusterAuthorizationFailedError,
    CommandError,
    InvalidConfigurationError,
    UnsupportedVersionError,
)
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
  users: --add-config 'SCRAM-SHA-256=[iterations=8192,password=PW],SCRAM-SHA-512=[password=PW]'
         (iterations default 4096)   --delete-config SCRAM-SHA-512   (not mixed with quota configs)
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
    """The quota lines, then (for users alone, not their defaults) the SCRAM credential lines, as
    ``describeClientQuotaAndUserScramCredentialConfigs``."""
    lines = []
    for found in backend.describe(quota_filter(parts)):
        values = ", ".join(f"{k}={java_double_str(found.values[k])}" for k in java_map_order(found.values))
        lines.append(f"Quota configs for {entity_str(found.entity)} are {values}")
    names = [n for _, n in parts if n is not None]
    if {t for t, _ in parts} == {"users"} and "" not in names:
        try:
            lines += ScramClient(backend).describe_lines(names)
        except (ClusterAuthorizationFailedError, UnsupportedVersionError) as e:
            # a principal may describe quotas without DESCRIBE on the cluster for SCRAM users (a gateway without
            # admin principals), or the server lacks KIP-554: the quota lines stand, and stderr says what is missing
            click.echo(f"Error retrieving SCRAM credential configs: {java_exception_line(e)}", err=True)
    return lines


# kafka-configs' split: commas and '=' outside [...] only, so a SCRAM value keeps its own commas and '='
_OUTSIDE_BRACKETS: Final = r"(?=[^\]]*(?:\[|$))"
_PAIR_SEPARATOR: Final = re.compile("," + _OUTSIDE_BRACKETS)
_KEY_SEPARATOR: Final = re.compile(r"\s*=\s*" + _OUTSIDE_BRACKETS)
_PASSWORD: Final = re.compile(r"(password=)[^\]]*")  # a SCRAM password, kept out of the error header


def parse_add_config(items: Sequence[str]) -> dict[str, str]:
    """``ConfigCommand.parseConfigsToBeAdded``: ``k1=v1,k2=[a=1,b=2]`` -> {k1: v1, k2: "a=1,b=2"} (brackets
    dropped, values trimmed, a repeated key's last value kept)."""
    out: dict[str, str] = {}
    for item in items:
        pairs = _PAIR_SEPARATOR.split(item)
        while pairs and not pairs[-1]:  # Java's String.split drops trailing empty strings
            pairs.pop()
        for pair in pairs:
            parts = _KEY_SEPARATOR.split(pair)
            if len(parts) != 2:
                raise CommandError('Invalid entity config: all configs to be added must be in the format "key=val".')
            out[parts[0].strip()] = parts[1].replace("[", "").replace("]", "").strip()
    return out


def _check_config_names(types: set[str], parts: Sequence[tuple[str, str | None]], adds: Sequence[str],
                        deletes: Sequence[str]) -> None:
    """ConfigCommand.alterConfig's name checks for quota entities, in its order and words."""
    if types == {"ips"}:
        unknown = [k for k in [*adds, *deletes] if k not in IP_QUOTA_KEYS]
        if unknown:
            raise CommandError("Only connection quota configs can be added for 'ips' using --bootstrap-server. "
                               f"Unexpected config names: {_names(unknown)}")
        return
    # a user alone may also hold a per-principal connection_creation_rate (beyond Kafka's model)
    quota_keys = USER_QUOTA_KEYS if types == {"users"} else CLIENT_QUOTA_KEYS
    if types != {"users"}:
        for verb, keys in (("added", adds), ("deleted", deletes)):
            unknown = [k for k in keys if k not in quota_keys]
            if unknown:
                raise CommandError(f"Only quota configs can be {verb} for 'clients' using --bootstrap-server. "
                                   f"Unexpected config names: {_names(unknown)}")
        return
    for verb, keys in (("added", adds), ("deleted", deletes)):
        unknown = [k for k in keys if k not in quota_keys and not is_scram(k)]
        if unknown:
            raise CommandError(f"Only quota and SCRAM credential configs can be {verb} for 'users' using "
                               f"--bootstrap-server. Unexpected config names: {_names(unknown)}")
    if any(is_scram(k) for k in [*adds, *deletes]):
        if any(n == "" for _, n in parts):
            raise CommandError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                               "Credentials using --bootstrap-server.")
        if any(not is_scram(k) for k in [*adds, *deletes]):
            raise CommandError("Cannot alter both quota and SCRAM credential configs simultaneously for 'users' "
                               "using --bootstrap-server.")


def _names(keys: Sequence[str]) -> str:
    return ",".join(dict.fromkeys(keys))


def _alter_scram(backend: AdminBackend, user: str, adds: dict[str, str], deletes: Sequence[str]) -> None:
    """``alterUserScramCredentialConfigs``: every SCRAM value parsed before anything is sent, then one request."""
    upsertions = [parse_upsertion(mechanism, value) for mechanism, value in adds.items()]
    ScramClient(backend).alter(user, list(dict.fromkeys(deletes)), upsertions)


def alter_entity(backend: AdminBackend, a: ConfigsArgs, parts: Sequence[tuple[str, str | None]]) -> str:
    adds = parse_add_config(a.add_config)
    deletes = [k.strip() for item in a.delete_config for k in item.split(",") if k.strip()]
    types = {t for t, _ in parts}
    _check_config_names(types, parts, list(adds), deletes)
    if types == {"users"} and any(is_scram(k) for k in [*adds, *deletes]):
        user = parts[0][1]
        assert user  # a name, not the default: checked above
        _alter_scram(backend, user, adds, deletes)
        return f"Completed updating config for user {user}."
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
    with kafka_errors(TOOL, [_PASSWORD.sub(r"\1[hidden]", arg) for arg in raw_args()]):
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
