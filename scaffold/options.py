"""The options of a generated project, read from copier.yml: the one place they are defined.

copier asks the questions of copier.yml for plain `copier copy`; scaffold derives its flags,
prompts, defaults and checks from the same file, and renders the same Jinja validators, so a
value is refused by both or by neither.
"""

import re
from dataclasses import asdict, dataclass, field, make_dataclass
from functools import cache
from pathlib import Path, PurePath

from scaffold.errors import ScaffoldError, UsageError

_HERE = Path(__file__).resolve().parent
# A wheel carries copier.yml inside the package; a source checkout has it at the root.
COPIER_YML = next(
    (p for p in (_HERE / "_template" / "copier.yml", _HERE.parent / "copier.yml") if p.is_file()),
    _HERE.parent / "copier.yml",
)

_TYPES = {"str": str, "int": int, "float": float, "bool": bool}
# The `when:` forms copier.yml uses: "{{ switch }}" or "{{ switch == 'value' }}".
_WHEN = re.compile(r"\{\{\s*(\w+)\s*(?:==\s*'([^']*)'\s*)?\}\}")
# Answers that name the project rather than shape it: they come from DEST, not from flags.
NAMING = ("project_name", "package_name")


@dataclass(frozen=True)
class Question:
    """One question of copier.yml, as scaffold uses it."""

    name: str
    type: type
    default: object  # a value, or a Jinja template of the earlier answers
    help: str
    choices: tuple[str, ...] | None
    parent: tuple[str, object] | None  # (switch, value) under which it is asked, else None
    validator: str  # Jinja that renders to an error message, or to nothing

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parent_flag(self) -> str:
        """How the switch that turns this question on is written on the command line."""
        switch, value = self.parent
        return f"--{switch.replace('_', '-')}" + ("" if value is True else f" {value}")


def _load() -> tuple[dict, dict[str, Question], dict]:
    import yaml  # a dependency of copier; ~15 ms, the only cost `scaffold --help` pays here

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader when PyYAML has it
    try:
        spec = yaml.load(COPIER_YML.read_text(), Loader=loader)
    except (OSError, yaml.YAMLError) as err:
        raise ScaffoldError(f"cannot read scaffold's {COPIER_YML}: {err}") from None
    settings = {k: v for k, v in spec.items() if k.startswith("_")}
    questions, hidden = {}, {}
    for name, q in spec.items():
        if name.startswith("_"):
            continue
        when = q.get("when", True)
        if when is False:
            hidden[name] = q["default"]
            continue
        parent = None
        if when is not True:
            match = _WHEN.fullmatch(when.strip())
            if not match:
                raise ScaffoldError(f"{COPIER_YML}: {name}: unsupported when: {when!r}")
            parent = (match[1], True if match[2] is None else match[2])
        choices = q.get("choices")
        questions[name] = Question(
            name=name,
            type=_TYPES[q.get("type", "str")],
            default=q.get("default"),
            help=q.get("help", name),
            choices=tuple(choices.values()) if isinstance(choices, dict) else choices,
            parent=parent,
            validator=q.get("validator", ""),
        )
    return settings, questions, hidden


_SETTINGS, QUESTIONS, HIDDEN = _load()
# The options a user chooses, in copier's order (which is also the order of the prompts).
OPTIONS = {name: q for name, q in QUESTIONS.items() if name not in NAMING}


@cache
def _jinja():
    """A Jinja environment like the one copier renders copier.yml with."""
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    envops = {k: v for k, v in _SETTINGS.get("_envops", {}).items() if k != "undefined"}
    return SandboxedEnvironment(
        extensions=["jinja2_ansible_filters.AnsibleCoreFiltersExtension"],
        undefined=StrictUndefined,
        **envops,
    )


def render(template, context: dict):
    """Render a copier.yml value with the answers so far; non-strings are returned as they are."""
    if not isinstance(template, str) or "{" not in template:
        return template
    # _copier_conf.data (the answers copier was given on this run) is empty here: the switches'
    # validators use it to refuse a follow-up given while its switch is off, which scaffold
    # refuses itself, naming the flags (unused_flags).
    conf = {"_copier_conf": {"data": {}}}
    return _jinja().from_string(template).render({**HIDDEN, **conf, **context})


def default_of(question: Question, answers: dict):
    """The question's default given the answers before it, typed as the question says."""
    value = render(question.default, answers)
    if question.type is bool and isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return question.type(value)


def problem_with(question: Question, answers: dict) -> str:
    """What copier.yml's validator says about this answer, in one line; '' when it is fine."""
    value = answers[question.name]
    if question.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, question.type) or (question.type is int and isinstance(value, bool)):
        return f"must be of type {question.type.__name__}, not {value!r}"
    if question.choices and value not in question.choices:
        return f"must be one of {', '.join(question.choices)}, not {value!r}"
    return " ".join(render(question.validator, answers).split())


class _Checks:
    """The methods of Options; its fields come from copier.yml."""

    def validate(self, as_setting: bool = False) -> None:
        """Raise UsageError, naming the option, for a value copier.yml's validators refuse.

        The option is named as a flag (`--seed -1: ...`), or with `as_setting` as the
        `--set` of `scaffold update` writes it (`seed=-1: ...`). As in copier, an option whose
        switch is off is not checked: it is not used.
        """
        answers = asdict(self)
        for question in OPTIONS.values():
            if question.parent and answers[question.parent[0]] != question.parent[1]:
                continue
            problem = problem_with(question, answers)
            if problem:
                value = answers[question.name]
                named = f"{question.name}={value}" if as_setting else f"{question.flag} {value}"
                raise UsageError(f"{named}: {problem}")

    def answers(self) -> dict:
        """The copier answers: follow-up values only where their switch is on."""
        answers = asdict(self)
        for question in OPTIONS.values():
            if question.parent and answers[question.parent[0]] != question.parent[1]:
                del answers[question.name]
        return answers

    def describe(self) -> str:
        """A short phrase such as 'regression, cosine scheduler, AMP, clipping (max norm 1.0)'."""
        parts = [self.task, f"{self.scheduler} scheduler"]
        if self.amp:
            parts.append("AMP")
        if self.clip:
            parts.append(f"clipping (max norm {self.max_grad_norm})")
        if self.grad_accum > 1:
            parts.append(f"gradient accumulation ({self.grad_accum} batches a step)")
        if self.warmup_steps:
            parts.append(f"warm-up over {self.warmup_steps} steps")
        if self.early_stopping:
            parts.append(f"early stopping (patience {self.patience})")
        if self.distributed:
            parts.append("distributed (torchrun)")
        if self.ema:
            parts.append(f"EMA of the weights (decay {self.ema_decay})")
        if self.compile:
            parts.append("torch.compile")
        return ", ".join(parts)


def _defaults() -> dict:
    values = {}
    for question in OPTIONS.values():
        values[question.name] = default_of(question, values)
    return values


DEFAULTS = _defaults()
Options = make_dataclass(
    "Options",
    [(name, q.type, field(default=DEFAULTS[name])) for name, q in OPTIONS.items()],
    bases=(_Checks,),
    frozen=True,
    namespace={"__doc__": "The answers that shape a generated project (fields from copier.yml)."},
)
Options.__module__ = __name__


def complete(given: dict) -> "Options":
    """Options from the values given; the others take copier.yml's defaults, which may
    depend on earlier answers (e.g. patience stays above the plateau patience)."""
    unknown = set(given) - set(OPTIONS)
    if unknown:
        raise UsageError(f"unknown option(s): {', '.join(sorted(unknown))}")
    values = {}
    for question in OPTIONS.values():
        value = given.get(question.name)
        values[question.name] = default_of(question, values) if value is None else value
    return Options(**values)


def unused_flags(given: dict, options: "Options") -> list[str]:
    """Flags given for a follow-up question whose switch is off, e.g. --patience without
    --early-stopping: refused, since the project would silently not use them."""
    answers = asdict(options)
    return [
        f"{q.flag} applies only with {q.parent_flag()}; add {q.parent_flag()} or drop {q.flag}"
        for q in OPTIONS.values()
        if given.get(q.name) is not None and q.parent and answers[q.parent[0]] != q.parent[1]
    ]


def project_names(dest: str) -> tuple[str, str]:
    """The distribution name and the package name that DEST's last part gives, or UsageError.

    The rules are copier.yml's validators of project_name and package_name.
    """
    if not dest.strip():
        raise UsageError("DEST is empty: give the folder to create, e.g. 'scaffold new my-project'")
    if ".." in PurePath(dest).parts:
        raise UsageError(f"DEST must not contain '..': {dest!r}")
    name = Path(dest).name or Path(dest).absolute().name
    shown = name if len(name) <= 40 else f"{name[:20]}...{name[-8:]}"
    answers = {"project_name": name}
    problem = problem_with(QUESTIONS["project_name"], answers)
    if problem:
        raise UsageError(f"{shown!r} is not a valid project name: {problem}")
    answers["package_name"] = default_of(QUESTIONS["package_name"], answers)
    problem = problem_with(QUESTIONS["package_name"], answers)
    if problem:
        raise UsageError(f"project name {shown!r}: {problem}")
    return name, answers["package_name"]


def describe_answers(answers: dict) -> str:
    """What a project was rendered with, as its answers file records it."""
    known = {k: v for k, v in answers.items() if k in Options.__dataclass_fields__}
    return Options(**known).describe()
