"""``quotaflow``: one entry point, subcommands loaded lazily so each stays a small module of its own."""

from __future__ import annotations

import importlib
import sys

import click

# subcommand name -> "module:attribute" of a click command. Add a line when a subcommand lands.
COMMANDS: dict[str, str] = {
    "report": "quotaflow.cli.report:report",
    "generate-traffic": "quotaflow.cli.generate_traffic:generate_traffic", "backtest": "quotaflow.cli.backtest:backtest", "replay": "quotaflow.cli.replay:replay",  # noqa: E501
    "configs": "quotaflow.cli.configs:configs", "client-quotas": "quotaflow.cli.client_quotas:client_quotas",
    "stream": "quotaflow.cli.stream:stream",
    "users": "quotaflow.cli.users:users",
    "gateway": "quotaflow.cli.gateway:gateway",
    "store": "quotaflow.cli.store:store",
    "console": "quotaflow.cli.console:console",
    "recommend": "quotaflow.cli.recommend:recommend",
    "acls": "quotaflow.cli.acls:acls",
    "shadow": "quotaflow.cli.shadow:shadow",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        cmd = getattr(importlib.import_module(module), attr)
        assert isinstance(cmd, click.Command)
        return cmd


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="quotaflow")
def cli() -> None:
    """quotaflow: Kafka client quotas (KIP-55, KIP-124, KIP-546, KIP-612) for any Kafka-compatible cluster."""


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="quotaflow", standalone_mode=True)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
