"""The flags of `scaffold new`, one for each option of copier.yml, made from its definition."""

import inspect
from enum import Enum
from typing import Annotated

import typer

from scaffold.options import DEFAULTS, OPTIONS, Question


def _choices(question: Question) -> type[Enum]:
    name = question.name.title().replace("_", "")
    return Enum(name, [(value, value) for value in question.choices], type=str)


# The choices of each option that has them, as Typer takes them (--task <a|b|c>).
CHOICES = {name: _choices(q) for name, q in OPTIONS.items() if q.choices}


def flag_help(name: str) -> str:
    """An option's --help line: copier.yml's help, the switch it needs, and its default."""
    question = OPTIONS[name]
    text = question.help
    if question.parent:
        text += f" (with {question.parent_flag()})"
    default = DEFAULTS[name]
    if question.type is bool:
        default = "on" if default else "off"
    return f"{text}. [default: {default}]"


def _parameter(question: Question) -> inspect.Parameter:
    """The option as a keyword parameter whose default None means "not given"."""
    flag = question.flag
    names = f"{flag}/--no-{flag[2:]}" if question.type is bool else flag
    kind = CHOICES.get(question.name, question.type)
    return inspect.Parameter(
        question.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[kind | None, typer.Option(names, help=flag_help(question.name))],
    )


def with_option_flags(command):
    """Give `command(ARGUMENTS, *, OWN FLAGS, **options)` a flag for each option, between its
    arguments and its own flags (the order --help lists them in).

    Typer builds a command's parameters from the signature of its function: this one gets a
    signature (`__signature__`, which `inspect.signature`, and so Typer, reads) with a keyword
    parameter per option, typed and helped from copier.yml, as if written by hand; the function
    takes them as **options. They go through Typer's own code, as hand-written ones would: the
    same --help layout, bools as --amp/--no-amp, ints and floats parsed, choices checked.
    """
    signature = inspect.signature(command)
    *own, rest = signature.parameters.values()
    if rest.kind is not inspect.Parameter.VAR_KEYWORD:
        raise TypeError(f"{command.__name__} must end with **options to take the option flags")
    clash = sorted(set(OPTIONS) & {p.name for p in own})
    if clash:
        raise TypeError(f"copier.yml's option {clash[0]!r} clashes with a flag of scaffold")
    first_flag = next(
        (i for i, p in enumerate(own) if p.kind is inspect.Parameter.KEYWORD_ONLY), len(own)
    )
    flags = [_parameter(question) for question in OPTIONS.values()]
    command.__signature__ = signature.replace(
        parameters=[*own[:first_flag], *flags, *own[first_flag:]]
    )
    return command


def given_options(options: dict) -> dict:
    """The value of each option from the flags, None where it was not given."""
    values = {name: options.get(name) for name in OPTIONS}
    return {k: v.value if isinstance(v, Enum) else v for k, v in values.items()}


def set_help() -> str:
    """The --help line of `scaffold update --set`, naming the options it may change."""
    return (
        "Change an answer, e.g. --set amp=true or --set scheduler=plateau (repeatable); "
        f"KEY is one of: {', '.join(OPTIONS)}."
    )
