"""How a `scaffold` command ends: an error or interrupt as one line on stderr, and an exit code."""

import sys

import typer
from typer.core import TyperGroup

from scaffold import interrupts
from scaffold.errors import Interrupted, ScaffoldError


class OneLineErrors(TyperGroup):
    """Report every error as one line on stderr with exit code 2 (usage) or 1, no traceback."""

    command = None  # the subcommand being run, once Click has found it

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        self.command = name
        return name, command, rest

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        interrupts.catch_interrupts()
        try:
            code = self._outcome(*args, **kwargs)
            interrupts.ignore_late_interrupts()
        except KeyboardInterrupt:  # after the command ended, before the line above
            interrupts.ignore_late_interrupts()
            typer.echo(interrupts.interrupted_message(), err=True)
            code = 130
        sys.exit(code)

    def _outcome(self, *args, **kwargs) -> int:
        """Run the command; report how it ended in one line, and return the exit code."""
        try:
            result = super().main(*args, standalone_mode=False, **kwargs)
        except Interrupted as err:
            typer.echo(str(err), err=True)
            return err.exit_code
        except ScaffoldError as err:
            typer.echo(f"error: {err}", err=True)
            return err.exit_code
        except typer.TyperException as err:  # bad flags or values: Typer's usage errors
            typer.echo(f"error: {err.format_message()}", err=True)
            return 2
        except typer.Abort:
            message = interrupts.interrupted_message()
            typer.echo(message.replace("interrupted", "aborted", 1), err=True)
            return 130
        if result == 130:  # Typer turns a Ctrl-C that no command caught into a silent 130
            # `new` reports its own interrupts; one that reaches here came before it began or
            # after it returned.
            new = self.command in (None, "new")
            typer.echo(interrupts.interrupted_message() if new else "interrupted", err=True)
        return result if isinstance(result, int) else 0
