"""``quotaflow acls``: ``kafka-acls.sh`` over the quota store (the ACLs every gateway on it enforces), or, with
``--bootstrap-server`` (and ``--command-config``), over the Kafka ACL APIs of a gateway or a broker.

Same options, same expansion and the same lines as Kafka's ``AclCommand``: ``--add`` / ``--remove`` / ``--list``;
principals and hosts (``--allow-host`` / ``--deny-host`` default to ``*`` when a principal is given); ``--operation``
(default ``All``); resources ``--topic``, ``--group``, ``--cluster``, ``--transactional-id``, ``--delegation-token``,
``--user-principal``, with ``--resource-pattern-type`` (literal by default; ``any`` and ``match`` filter
``--list``/``--remove``); the ``--producer`` (WRITE, DESCRIBE, CREATE on topics; WRITE, DESCRIBE on transactional
ids; IDEMPOTENT_WRITE on the cluster with ``--idempotent``) and ``--consumer`` (READ, DESCRIBE on topics; READ on
groups) shortcuts; ``--force`` skips the removal prompt. Two additions: ``--authorize`` answers "may
``--principal`` do ``--operation`` on the resource from ``--host``, and which ACL decides" (with ``--config``'s
``super.users`` / ``allow.everyone.if.no.acl.found``), and ``--import FILE`` adds every ACL of a cluster's
``kafka-acls --list`` output (migration).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final, NoReturn

import click
from click.core import ParameterSource

from quotaflow.admin.acl_listing import grouped_lines, listing, parse_listing, resource_lines
from quotaflow.admin.acls import AclAdmin, AclBackend, explain, resolve
from quotaflow.cli.common import (
    RawArgsCommand,
    announce_store,
    java_exception_line,
    open_cli_store,
    raw_args,
    store_failure,
    store_option,
)
from quotaflow.core.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    operation_from_name,
    parse_principal,
    pattern_type_from_name,
)
from quotaflow.core.authorizer import authorizer_settings
from quotaflow.core.errors import ApiError, BrokerConnectionError, CommandError, KafkaError, StoreError, for_code
from quotaflow.core.properties import parse_properties
from quotaflow.store.base import AclStore

Acls = dict[ResourcePatternFilter, set[AccessControlEntry]]
CLUSTER_FILTER = ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
DENIED_EXIT: Final = 2  # --authorize: a decision was DENIED (1 stays "the command failed"), so scripts can branch


def _usage(message: str) -> NoReturn:
    """Kafka's ``CommandLineUtils.printUsageAndExit``: the message, then the usage text, on stderr; exit 1."""
    click.echo(message, err=True)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        click.echo(ctx.get_help(), err=True)
    sys.exit(1)


def _principals(values: Iterable[str]) -> list[str]:
    out: list[str] = []
    for value in values:
        try:
            kind, name = parse_principal(value.strip())
        except ValueError as e:
            _usage(str(e))
        out.append(f"{kind}:{name}")
    return list(dict.fromkeys(out))


def _hosts(hosts: Sequence[str], principals: Sequence[str]) -> list[str]:
    if hosts:
        return list(dict.fromkeys(h.strip() for h in hosts))
    return ["*"] if principals else []


def _entries(opts: Options, operations: Iterable[AclOperation]) -> set[AccessControlEntry]:
    """AclCommand.getAcl: allowed principals x operations x allowed hosts, and the same for denied."""
    out: set[AccessControlEntry] = set()
    allow, deny = _principals(opts.allow_principal), _principals(opts.deny_principal)
    for principals, hosts, perm in ((allow, _hosts(opts.allow_host, allow), AclPermissionType.ALLOW),
                                    (deny, _hosts(opts.deny_host, deny), AclPermissionType.DENY)):
        out.update(AccessControlEntry(p, h, op, perm) for p in principals for op in operations for h in hosts)
    return out


class Options:
    """The parsed command line (one object, as AclCommandOptions)."""

    def __init__(self, **kw: object) -> None:
        self.__dict__.update(kw)

    allow_principal: tuple[str, ...]
    deny_principal: tuple[str, ...]
    allow_host: tuple[str, ...]
    deny_host: tuple[str, ...]
    operation: tuple[str, ...]
    topic: tuple[str, ...]
    group: tuple[str, ...]
    cluster: bool
    transactional_id: tuple[str, ...]
    delegation_token: tuple[str, ...]
    user_principal: tuple[str, ...]
    pattern_type: PatternType
    producer: bool
    consumer: bool
    idempotent: bool


def _resource_filters(opts: Options, *, die_if_none: bool = True) -> list[ResourcePatternFilter]:
    pt = opts.pattern_type
    out: list[ResourcePatternFilter] = [ResourcePatternFilter(ResourceType.TOPIC, t.strip(), pt) for t in opts.topic]
    if pt == PatternType.LITERAL and (opts.cluster or opts.idempotent):
        out.append(CLUSTER_FILTER)
    out += [ResourcePatternFilter(ResourceType.GROUP, g.strip(), pt) for g in opts.group]
    out += [ResourcePatternFilter(ResourceType.TRANSACTIONAL_ID, t, pt) for t in opts.transactional_id]
    out += [ResourcePatternFilter(ResourceType.DELEGATION_TOKEN, t.strip(), pt) for t in opts.delegation_token]
    out += [ResourcePatternFilter(ResourceType.USER, u.strip(), pt) for u in opts.user_principal]
    if not out and die_if_none:
        _usage("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
               "--delegation-token <Delegation Token ID>")
    return list(dict.fromkeys(out))


def _filter_to_acls(opts: Options) -> Acls:
    """AclCommand.getResourceFilterToAcls, with the --producer / --consumer expansion."""
    acls: Acls = {}
    if not opts.producer and not opts.consumer:
        operations = [operation_from_name(o) for o in opts.operation]  # a name Kafka does not know: UNKNOWN
        entries = _entries(opts, operations)
        acls.update({f: set(entries) for f in _resource_filters(opts)})
    if opts.producer:
        filters = _resource_filters(opts)
        topic = _entries(opts, [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE])
        txn = _entries(opts, [AclOperation.WRITE, AclOperation.DESCRIBE])
        acls.update({f: set(topic) for f in filters if f.resource_type == ResourceType.TOPIC})
        acls.update({f: set(txn) for f in filters if f.resource_type == ResourceType.TRANSACTIONAL_ID})
        if opts.idempotent:
            acls[CLUSTER_FILTER] = _entries(opts, [AclOperation.IDEMPOTENT_WRITE])
    if opts.consumer:
        filters = _resource_filters(opts)
        read = _entries(opts, [AclOperation.READ, AclOperation.DESCRIBE])
        group = _entries(opts, [AclOperation.READ])
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                acls[f] = read | acls.get(f, set())
            elif f.resource_type == ResourceType.GROUP:
                acls[f] = group | acls.get(f, set())
    for f, entries in acls.items():  # validateOperation: an unknown operation is an unsupported one
        valid = SUPPORTED_OPERATIONS[f.resource_type] | {AclOperation.ALL}
        if {e.operation for e in entries} - valid:
            names = ", ".join(op.name for op in sorted(valid))  # Java's Set.toString (in enum order here)
            _usage(f"ResourceType {f.resource_type.name} only supports operations [{names}]")
    return acls


def _check_args(opts: Options, actions: dict[str, bool], list_principals: tuple[str, ...],
                was_given: set[str]) -> None:
    """AclCommandOptions.checkArgs."""
    if sum(actions.values()) != 1:
        _usage("Command must include exactly one action: --list, --add, --remove. ")
    if actions["list"]:
        for name in ("producer", "consumer", "allow_host", "allow_principal", "deny_host", "deny_principal"):
            if name in was_given:
                _usage(f'Option "[list]" can\'t be used with option "[{name.replace("_", "-")}]"')
    for shortcut in ("producer", "consumer"):
        if shortcut in was_given:
            for name in ("operation", "deny_principal", "deny_host"):
                if name in was_given:
                    _usage(f'Option "[{shortcut}]" can\'t be used with option "[{name.replace("_", "-")}]"')
    if list_principals and not actions["list"]:
        _usage("The --principal option is only available if --list is set")
    if opts.producer and not opts.topic:
        _usage("With --producer you must specify a --topic")
    if opts.idempotent and not opts.producer:
        _usage("The --idempotent option is only available if --producer is set")
    if opts.consumer and (not opts.topic or not opts.group or (not opts.producer and (
            opts.cluster or opts.transactional_id))):
        _usage("With --consumer you must specify a --topic and a --group and no --cluster or --transactional-id "
               "option should be specified.")


def _raise(results: Sequence[ApiError]) -> None:
    for r in results:
        if not r.is_success:
            error = for_code(r.code)(r.message)
            click.echo(f"Error while executing ACL command: {java_exception_line(error)}")
            sys.exit(1)


def _confirm(force: bool, message: str) -> bool:
    if force:
        return True
    click.echo(message)
    return sys.stdin.readline().strip().lower() == "y"


@click.command("acls", cls=RawArgsCommand, context_settings={"help_option_names": ["-h", "--help"]}, epilog=(
    "Exit status: 0 done (--authorize: every decision ALLOWED); 1 a usage error or a failed request; "
    "2 (--authorize) a decision DENIED."))
@click.version_option(package_name="quotaflow", message="%(version)s", help="Print the version and exit.")
@store_option
@click.option("--bootstrap-server", "bootstrap_server", metavar="HOST:PORT", default=None,
              help="Manage the ACLs of a quotaflow gateway or a Kafka broker through the Kafka ACL APIs instead.")
@click.option("--command-config", "command_config", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              default=None, help="With --bootstrap-server: client properties (security.protocol=SASL_PLAINTEXT, "
                                 "sasl.mechanism=PLAIN, sasl.jaas.config=...).")
@click.option("--add", "add", is_flag=True, help="Indicates you are trying to add ACLs.")
@click.option("--remove", "remove", is_flag=True, help="Indicates you are trying to remove ACLs.")
@click.option("--list", "list_", is_flag=True, help="List ACLs for the specified resource (all without one).")
@click.option("--authorize", "authorize", is_flag=True,
              help="Decide: may --principal do --operation on the resource from --host, and which ACL decides.")
@click.option("--import", "import_file", type=click.Path(path_type=Path, dir_okay=False, exists=True), default=None,
              help="Add every ACL of a cluster's `kafka-acls --list` output (migration).")
@click.option("--allow-principal", multiple=True, help="principal is in principalType:name format (User:'*' = all).")
@click.option("--deny-principal", multiple=True, help="principal is in principalType:name format.")
@click.option("--allow-host", multiple=True, help="Host of --allow-principal (default * with a principal).")
@click.option("--deny-host", multiple=True, help="Host of --deny-principal (default * with a principal).")
@click.option("--operation", multiple=True, help="Operation allowed or denied (Read, Write, ..., default All).")
@click.option("--topic", multiple=True, help="Topic ('*' = all topics).")
@click.option("--group", multiple=True, help="Consumer group ('*' = all groups).")
@click.option("--cluster", is_flag=True, help="The cluster resource (kafka-cluster).")
@click.option("--transactional-id", multiple=True, help="Transactional id ('*' = all).")
@click.option("--delegation-token", multiple=True, help="Delegation token id ('*' = all).")
@click.option("--user-principal", multiple=True, help="A user principal as the resource (CreateTokens etc.).")
@click.option("--resource-pattern-type", "pattern_name", default="literal", show_default=True,
              help="literal or prefixed (add); any or match too (list, remove).")
@click.option("--producer", is_flag=True, help="Producer role: WRITE, DESCRIBE, CREATE on the topics.")
@click.option("--consumer", is_flag=True, help="Consumer role: READ, DESCRIBE on the topics, READ on the groups.")
@click.option("--idempotent", is_flag=True, help="With --producer: IDEMPOTENT_WRITE on the cluster.")
@click.option("--force", is_flag=True, help="Assume yes to all queries and do not prompt.")
@click.option("--principal", "principals", multiple=True,
              help="--list: only these principals' ACLs; --authorize: the principal deciding for.")
@click.option("--host", "host", default="*", show_default=True,
              help="--authorize: the client's IP address (with *, only ACLs for host * apply).")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              default=None, help="--authorize: the gateway's server.properties (super.users, "
                                 "allow.everyone.if.no.acl.found).")
@click.pass_context
def acls(ctx: click.Context, /, store: str | None, bootstrap_server: str | None, command_config: Path | None,
         add: bool, remove: bool, list_: bool, authorize: bool, import_file: Path | None, pattern_name: str,
         force: bool, principals: tuple[str, ...], host: str, config_path: Path | None, **kw: object) -> None:
    """kafka-acls.sh against the quota store (or, with --bootstrap-server, a gateway or broker): add, remove, list
    ACLs; --authorize explains a decision; --import migrates a cluster's `kafka-acls --list` output."""
    if not raw_args():  # CommandLineUtils.maybePrintHelpOrVersion: no arguments, the tool's line and its usage
        _usage("This tool helps to manage acls on kafka.")
    pattern_type = pattern_type_from_name(pattern_name)
    if pattern_type == PatternType.UNKNOWN:
        _usage(f"Unknown resource-pattern-type: {pattern_name}")
    opts = Options(pattern_type=pattern_type, **kw)
    if not opts.operation:
        opts.operation = ("All",)
    was_given = {name for name, value in kw.items()
                 if value and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE}
    try:
        if bootstrap_server is not None and store is not None:
            raise CommandError("--store and --bootstrap-server cannot be used together")
        if import_file is None and not authorize:
            _check_args(opts, {"add": add, "remove": remove, "list": list_}, principals, was_given)
        if authorize and "operation" not in was_given:
            _usage("--authorize needs exactly one --operation (Read, Write, Describe, ...)")
        # every argument check before a store is opened (or created): a usage error writes nothing
        to_add = _resource_to_acls(opts) if add and import_file is None and not authorize else {}
        to_remove = _filter_to_acls(opts) if remove and import_file is None and not authorize else {}
        with _backend(store, bootstrap_server, command_config, create=add or import_file is not None,
                      writes=add or remove or import_file is not None) as backend:
            if import_file is not None:
                _import(backend, import_file)
            elif authorize:
                _authorize(backend, opts, principals, host, config_path)
            elif add:
                _add(backend, to_add)
            elif remove:
                _remove(backend, to_remove, force)
            else:
                _list(backend, opts, principals)
    except StoreError as e:
        store_failure(e)
    except CommandError as e:
        _usage(str(e))
    except (KafkaError, BrokerConnectionError) as e:
        click.echo(f"Error while executing ACL command: {java_exception_line(e)}")
        sys.exit(1)


@contextmanager
def _backend(store: str | None, bootstrap_server: str | None, command_config: Path | None, *,
             create: bool, writes: bool) -> Iterator[AclBackend]:
    """The store's ACLs (named on stderr when the command writes to a store it was not given,
    :func:`~quotaflow.cli.common.announce_store`), or (``--bootstrap-server``) a gateway's or broker's ACL APIs."""
    if bootstrap_server is not None:
        from quotaflow.admin.acl_wire import WireAclAdmin  # kafka-python only when talking to a server

        props = parse_properties(command_config.read_text(encoding="utf-8")) if command_config is not None else {}
        wire = WireAclAdmin(bootstrap_server, props)
        try:
            yield wire
        finally:
            wire.close()
        return
    with open_cli_store(store, create=create) as st:
        if not isinstance(st, AclStore):
            raise StoreError("this store keeps no ACLs")
        if writes:
            announce_store(store)
        yield AclAdmin(st)


def _resource_to_acls(opts: Options) -> dict[ResourcePattern, set[AccessControlEntry]]:
    """AclCommand.getResourceToAcls: what ``--add`` adds, checked before any store is opened."""
    if opts.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        _usage(f"A '--resource-pattern-type' value of '{opts.pattern_type.name}' is not valid when adding acls.")
    resource_to_acls = {ResourcePattern(f.resource_type, f.name or "", f.pattern_type): entries
                        for f, entries in _filter_to_acls(opts).items()}
    if any(not entries for entries in resource_to_acls.values()):
        _usage("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    return resource_to_acls


def _add(admin: AclBackend, resource_to_acls: dict[ResourcePattern, set[AccessControlEntry]]) -> None:
    for resource, entries in resource_to_acls.items():
        click.echo(resource_lines("Adding ACLs", resource, entries))
        _raise(admin.create([AclBinding(resource, e) for e in sorted(entries, key=str)]))


def _remove(admin: AclBackend, filter_to_acls: Acls, force: bool) -> None:
    for f, entries in filter_to_acls.items():
        if not entries:
            if _confirm(force, f"Are you sure you want to delete all ACLs for resource filter `{f}`? (y/n)"):
                _raise_delete(admin, [AclBindingFilter(f, AccessControlEntryFilter())])
        else:
            body = "\n".join(f"\t{e}" for e in sorted(entries, key=str))
            if _confirm(force, f"Are you sure you want to remove ACLs: \n {body} \n from resource filter `{f}`? (y/n)"):
                _raise_delete(admin, [AclBindingFilter(f, AccessControlEntryFilter(
                    e.principal, e.host, e.operation, e.permission_type)) for e in sorted(entries, key=str)])


def _raise_delete(admin: AclBackend, filters: list[AclBindingFilter]) -> None:
    _raise([r.error for r in admin.delete(filters)])


def _list(admin: AclBackend, opts: Options, principals: tuple[str, ...]) -> None:
    filters = _resource_filters(opts, die_if_none=False)
    found: set[AclBinding] = set()
    for f in filters or [ResourcePatternFilter()]:
        found.update(admin.describe(AclBindingFilter(f)))
    if not principals:
        click.echo(listing(found), nl=False)
        return
    for principal in _principals(principals):
        click.echo(f"ACLs for principal `{principal}`")
        click.echo(listing(b for b in found if b.entry.principal == principal), nl=False)


def _import(admin: AclBackend, path: Path) -> None:
    bindings = parse_listing(path.read_text(encoding="utf-8"))
    groups: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        groups.setdefault(b.pattern, []).append(b.entry)
    click.echo(grouped_lines("Adding ACLs", groups), nl=False)
    _raise(admin.create(bindings))
    click.echo(f"Imported {len(bindings)} ACLs from {path}")


def _authorize(backend: AclBackend, opts: Options, principals: tuple[str, ...], host: str,
               config_path: Path | None) -> None:
    if len(principals) != 1:
        _usage("--authorize needs exactly one --principal")
    [principal] = _principals(principals)
    if len(opts.operation) != 1 or operation_from_name(opts.operation[0]) in (AclOperation.UNKNOWN,
                                                                               AclOperation.ANY):
        _usage("--authorize needs exactly one --operation (Read, Write, Describe, ...)")
    operation = operation_from_name(opts.operation[0])
    opts.pattern_type = PatternType.LITERAL
    resources = _resource_filters(opts)
    props = parse_properties(config_path.read_text(encoding="utf-8")) if config_path is not None else {}
    supers, allow = authorizer_settings(props)
    denied = False
    for f in resources:
        name = f.name or ""
        decision = resolve(backend, principal, host, operation, f.resource_type, name, super_users=supers,
                           allow_everyone_if_no_acl_found=allow)
        click.echo(explain(decision, principal, operation, f.resource_type, name))
        denied |= not decision.allowed
    if denied:
        sys.exit(DENIED_EXIT)
