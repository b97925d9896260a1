"""The options `scaffold new` was not given: asked for at a terminal, else their defaults."""

import sys

import typer

from scaffold.errors import UsageError
from scaffold.options import (
    OPTIONS,
    Options,
    Question,
    complete,
    default_of,
    problem_with,
    unused_flags,
)


def stdin_is_interactive() -> bool:
    """Prompts only when a person can answer them; a pipe or CI never waits."""
    return sys.stdin is not None and sys.stdin.isatty()


def _ask(question: Question, answers: dict):
    """Ask one question until the answer passes its copier.yml validator."""
    typer.secho(f"  {question.help}", dim=True, err=True)
    label = question.name.replace("_", " ")
    if question.choices:
        label = f"{label} ({'/'.join(question.choices)})"
    default = default_of(question, answers)
    while True:
        if question.type is bool:
            answer = typer.confirm(label, default=default, err=True)
        else:
            answer = typer.prompt(label, default=default, type=question.type, err=True)
        problem = problem_with(question, {**answers, question.name: answer})
        if not problem:
            return answer
        typer.echo(f"  {problem}", err=True)


def resolve_options(given: dict, interactive: bool) -> Options:
    """Fill the options not given on the command line: ask for each, or take its default.

    A follow-up flag whose switch is off (--patience without --early-stopping) is refused:
    the project would not use it.
    """
    values = {}
    for question in OPTIONS.values():
        if question.parent and values[question.parent[0]] != question.parent[1]:
            continue
        if given.get(question.name) is not None:
            values[question.name] = given[question.name]
        else:
            values[question.name] = (
                _ask(question, values) if interactive else default_of(question, values)
            )
    options = complete(values)
    unused = unused_flags(given, options)
    if unused:
        raise UsageError(unused[0])
    options.validate()
    return options
