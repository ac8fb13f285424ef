"""The ``%%agent`` options, declared once: :class:`AgentOptions` is the table.

Each field of :class:`AgentOptions` is one option: its type, default, flags, help, group, whether
``%config AgentMagics.<name>`` sets it (a traitlet) and the environment variable consulted when neither the command
line nor ``%config`` gives a value. From that one table come the traitlets on ``AgentMagics``
(:func:`option_traits`), the magic's ``magic_arguments`` parser and its grouped ``%%agent?`` help
(:func:`option_arguments`), and the merge (:func:`merge`: command line > ``%config`` > environment > default),
whose result is a typed :class:`AgentOptions` the magic reads.

Adding an option is one field here plus the wiring where its value is used, e.g.::

    temperature: float | None = option(None, "--temperature", group="model", metavar="T",
                                       help="sampling temperature", shown="the model's own")

A ``bool`` field is a switch: ``--flag`` for a field that defaults to False, ``--no-flag`` style for one that
defaults to True, and both ``--flag`` and ``--no-flag`` for a ``bool | None`` one (None: decided when it is
used). A text field whose flag is ``--no-...`` takes no value on the command line: the flag sets it to ``""`` (off),
and ``%config`` sets its text. Numbers are never negative nor above :data:`MAX_NUMBER`; 0 switches a budget or guard
off.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import shlex
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar

from IPython.core import magic_arguments
from IPython.core.error import UsageError
from traitlets import Bool, Enum, Float, Int, List, TraitType, Unicode

from ..errors import AgentConfigError
from ..models.providers import PROVIDERS
from ..tools.files import FILE_TOOL_NAMES
from .kernel import KERNEL_TOOL_NAMES

T = TypeVar("T")

GROUPS = ("model", "budgets", "guards", "tools", "session and recording")
API_CHOICES = ("responses", "chat")
USAGE = "%%agent [options]            (the prompt is the cell body)\n  %%agent [options] prompt"
"""Usage for argparse, which turns ``%%`` into ``%`` and puts one more ``%`` in front of the first line."""
MAX_NUMBER = 10**12
"""The largest number an option takes: no budget needs more (10^12 s is 31,000 years), and every number stays exact
in JSON and JavaScript, where the panel shows it."""
HELP_FLAGS = ("--help", "-h")
HELP_POINTER = "(%%agent? lists the options)"


@dataclass(frozen=True)
class Spec:
    """How one option appears: everything but its name, type and default (which are the field's)."""

    flags: tuple[str, ...]
    group: str
    help: str
    trait: bool
    env: str | None
    choices: tuple[str, ...]
    metavar: str | None
    shown: str | None
    alone: str | None = None
    """For an option whose value may be left out: its value then. On a ``%%agent`` line (all options) the next word
    that is not an option is its value; on the one-line ``%agent`` only a word ending with ``.jsonl``, naming a file
    that exists, or after ``=`` (``--continue=run.log``), so that ``%agent --continue next question`` keeps its
    prompt."""


def option(default: T, *flags: str, group: str, help: str, trait: bool = True, env: str | None = None,
           choices: tuple[str, ...] = (), metavar: str | None = None, shown: str | None = None,
           alone: str | None = None) -> T:
    """One row of the table: a dataclass field carrying its :class:`Spec`.

    ``flags`` empty: a ``%config``-only setting. ``trait=False``: this cell only (no ``%config``). ``env``: read
    when neither the command line nor ``%config`` gives a value. ``shown``: the default as the help states it,
    when the value alone would not say it (``$OPENAI_BASE_URL``, "the working directory"). ``alone``: the value
    when the flag is given without one (see :attr:`Spec.alone`).
    """
    assert group in GROUPS, group
    spec = Spec(flags, group, help, trait, env, choices, metavar, shown, alone)
    if isinstance(default, list):
        items = list(default)
        return field(default_factory=lambda: list(items), metadata={"option": spec})  # type: ignore[return-value]
    return field(default=default, metadata={"option": spec})


@dataclass
class AgentOptions:
    """Every ``%%agent`` option and ``%config AgentMagics`` setting, merged for one cell."""

    # -- model
    model: str = option("", "--model", "-m", group="model", env="AGENTKERNEL_MODEL", metavar="NAME",
                        help="a model name for the API, PROVIDER:MODEL for another provider (" + ", ".join(PROVIDERS)
                             + "; keys: " + ", ".join(p.key_env for p in PROVIDERS.values() if p.key_env)
                             + "), or the name of a model object in the notebook",
                        shown="$AGENTKERNEL_MODEL, else gpt-4.1-mini when OPENAI_API_KEY is set")
    api: str = option("responses", "--api", group="model", choices=API_CHOICES,
                      help="the OpenAI Responses API, or Chat Completions for OpenAI-compatible servers")
    base_url: str = option("", "--base-url", group="model", env="OPENAI_BASE_URL", metavar="URL",
                           help="a server speaking the provider's API in place of its own URL: OpenAI-compatible "
                                "(vLLM, Ollama, llama.cpp, ...) at its /v1 URL, or for anthropic: the server's root",
                           shown="$OPENAI_BASE_URL")
    system: str = option("", "--system", group="model", metavar="TEXT", help="the system prompt",
                         shown="agentkernel's bounded-loop prompt")
    expand: bool = option(True, "--no-expand", group="model",
                          help="keep {expression} and $name as written, in the prompt and in this option line "
                               "(else both are expanded as IPython expands a magic line)",
                          shown="expanded")
    api_key_env: str = option("", "--api-key-env", group="model", metavar="NAME",
                              help="the environment variable holding the key for --base-url (a provider's key goes "
                                   "only to its own API, or to $OPENAI_BASE_URL / $ANTHROPIC_BASE_URL)", shown="none")
    temperature: float | None = option(None, "--temperature", group="model", metavar="T",
                                       help="sampling temperature sent with each request", shown="the model's own")
    images: bool | None = option(None, "--images", group="model",
                                 help="send run_python's figures and images to the model as images (--no-images: "
                                      "placeholders only)",
                                 shown="on for the OpenAI API and model objects, off for other base URLs")
    instructions: bool = option(True, "--no-instructions", group="model",
                                help="leave out the project's instructions (AGENTS.md, else CLAUDE.md or GEMINI.md, in "
                                     "each folder from the project root (see --root) down to the notebook's, then the "
                                     "notebook's markdown cells tagged agent-instructions; the nearest last)",
                                shown="read")
    mcp_prompt: str | None = option(None, "--prompt", group="model", trait=False, metavar="SERVER/PROMPT",
                                    help="use an MCP server's prompt as the cell's prompt (its arguments follow as "
                                         "NAME=VALUE words; a cell body is added after it); %agent_mcp prompts lists "
                                         "them")
    # -- budgets (0: off)
    max_iterations: int = option(0, "--max-iterations", group="budgets", metavar="N", help="cap on model requests")
    max_tokens: int = option(0, "--max-tokens", group="budgets", metavar="N",
                             help="cap on total tokens, as the API reports them")
    max_seconds: float = option(0.0, "--max-seconds", group="budgets", metavar="S",
                                help="wall clock; cuts an in-flight request or tool")
    max_tool_calls: int = option(0, "--max-tool-calls", group="budgets", metavar="N",
                                 help="cap on tool calls; calls past it are not run")
    max_cost: float = option(0.0, "--max-cost", group="budgets", metavar="USD",
                             help="cap on the run's cost in USD (needs the model's price: genai-prices' or "
                                  "--price): a request the rest cannot pay is not made, and each response's output "
                                  "cap is lowered to what is left")
    price: str = option("", "--price", group="budgets", metavar="IN,OUT[,CACHED_IN]",
                        help="the model's price in USD per million input, output (and cached input) tokens; 0 for "
                             "a free local server", shown="genai-prices' data for the model and its base URL")
    max_output_tokens: int = option(0, "--max-output-tokens", group="budgets", metavar="N",
                                    help="cap on each model response, sent with the request; a response cut by it "
                                         "ends the run as truncated", shown="0 = the server's own limit")
    context_window: int = option(0, "--context-window", group="model", metavar="N",
                                 help="the model's context window in tokens: past 85% of it the model's view of "
                                      "the history is compacted (old outputs elided, then older turns summarised)",
                                 shown="0 = unknown: asked of the server (llama.cpp), else learned from its first "
                                       "overflow error")
    # -- guards (0: off)
    repeat_limit: int = option(3, "--repeat-limit", group="guards", metavar="N",
                               help="stop when one (tool, arguments, output) signature has occurred N times")
    stuck_window: int = option(8, "--stuck-window", group="guards", metavar="N",
                               help="stop when the last N tool calls repeat a cycle of 1-3 calls")
    stale_turns: int = option(3, "--stale-turns", group="guards", metavar="N",
                              help="stop after N model turns in a row that are empty or repeat the one before")
    failure_rounds: int = option(3, "--failure-rounds", group="guards", metavar="N",
                                 help="stop after N rounds in a row in which every tool call failed")
    text_repeats: int = option(10, "--text-repeats", group="guards", metavar="N",
                               help="cut a response that repeats itself (one 50-character chunk back N times, "
                                    "code and tables aside) and stop; at least 2")
    # -- tools
    tools: list[str] = option([*FILE_TOOL_NAMES, *KERNEL_TOOL_NAMES], "--tools", group="tools", metavar="NAMES",
                              help="built-in tools (file and kernel tools), @tool functions in the notebook, MCP "
                                   "servers (all their tools) and server__tool names, comma-separated",
                              shown="every built-in")
    mcp: list[str] = option([], "--mcp", group="tools", metavar="NAMES",
                            help="MCP servers whose tools the model gets beside --tools, comma-separated",
                            shown="none")
    mcp_config: str = option("", "--mcp-config", group="tools", env="AGENTKERNEL_MCP_CONFIG", metavar="PATH",
                             help="the MCP configuration: a JSON file in the mcpServers shape of .mcp.json",
                             shown="$AGENTKERNEL_MCP_CONFIG, else .mcp.json in the working directory")
    root: str = option("", "--root", group="tools", metavar="DIR",
                       help="the project root: instructions and skills are read from it down to the notebook's "
                            "folder, and it is the only folder the built-in file tools may read",
                       shown="found: the nearest repository (.git) at or above the notebook's folder, else the "
                             "highest folder holding AGENTS.md or .agents/, never reaching your home folder; the file "
                             "tools read the notebook's folder")
    allow_writes: bool = option(False, "--allow-writes", group="tools", help="run side-effecting tools without asking")
    allow_secret_files: bool = option(False, "--allow-secret-files", group="tools",
                                      help="let read_file and search_text read .env, *.pem, *.key, SSH keys, .netrc "
                                           "and other credential files (their secrets are still redacted)")
    secret_env: list[str] = option([], group="tools",
                                   help="environment variables whose values are kept from the model as secrets, "
                                        "beside those whose names say so (GITHUB_TOKEN, PGPASSWORD, ...)")
    skill_paths: list[str] = option([], group="tools",
                                    help="more folders of Agent Skills (each holds skill folders with a SKILL.md, or "
                                         "is one), after .agents/skills under the project root and "
                                         "~/.agentkernel/skills")
    approval_timeout: float = option(300.0, group="tools",
                                     help="seconds to wait for Approve / Deny before denying (0: wait for ever)")
    undo_budget: float = option(256.0, group="tools", metavar="MB",
                                help="megabytes of copies the kernel keeps so that an undo can give back "
                                     "what run_python changed in place (all runs together; 0: none, bindings only)")
    cells: bool = option(False, "--cells", group="tools",
                         help="keep the code run_python ran in the notebook when the run ends: one cell per piece "
                              "with agentkernel's notebook extension, else one new cell below")
    # -- session and recording
    background: bool = option(False, "--background", group="session and recording",
                              help="end the cell as soon as the run has started and let it go on in the kernel "
                                   "while other cells run: its panel stays live in this cell and becomes its record; "
                                   "%agent_runs, %agent_wait and %agent_stop (headless and in terminal IPython "
                                   "it runs in the foreground, saying so)")
    tracing: bool = option(False, group="session and recording",
                           help="send each run's OpenTelemetry GenAI spans (the Tracing page says where and what); "
                                "also on when the OTEL_* environment asks for traces or a TracerProvider is set")
    resume: str | None = option(None, "--continue", group="session and recording", trait=False, metavar="FILE",
                                alone="", help="go on from _agent.history, or from the transcript FILE (a run's "
                                ".jsonl, repaired on load), with this prompt as the next user message")
    out: str | None = option(None, "--out", group="session and recording", trait=False, metavar="VAR",
                             help="also store the LoopResult in the variable VAR")
    record: str | None = option(None, "--record", group="session and recording", trait=False, metavar="FILE",
                                help="save every model exchange to this JSONL cassette")
    replay: str | None = option(None, "--replay", group="session and recording", trait=False, metavar="FILE",
                                help="play a cassette back: no network, no key")
    transcripts: str | None = option(None, "--no-transcript", group="session and recording", metavar="DIR",
                                     help="the folder each run's JSONL transcript is written to, which keeps the "
                                          "newest 200 runs; '' (or --no-transcript for one cell) writes none",
                                     shown="$AGENTKERNEL_TRANSCRIPTS, else ~/.agentkernel/transcripts")
    stream_throttle: float = option(0.1, group="session and recording",
                                    help="seconds between updates of the live panel (text, status, sections)")


@dataclass(frozen=True)
class Option:
    """One field of :class:`AgentOptions` with its type and default resolved."""

    name: str
    kind: type  # bool, int, float, str or list (of str)
    optional: bool  # the type admits None
    default: Any
    spec: Spec

    @property
    def takes_value(self) -> bool:
        return self.kind is not bool and not self.switches_off

    @property
    def switches_off(self) -> bool:
        """A text option whose flag (``--no-transcript``) sets it to ``""`` and takes no value."""
        return self.kind is str and bool(self.spec.flags) and self.spec.flags[0].startswith("--no-")

    @property
    def shown_default(self) -> str:
        if self.spec.shown:
            return self.spec.shown
        if self.kind is bool:
            return "on" if self.default else "off"
        if self.kind is list:
            return ",".join(self.default)
        if self.kind in (int, float) and self.default == 0:
            return "0 = off"
        return str(self.default)

    @property
    def named(self) -> str:
        """How a message names the option: its flag, else its ``%config`` setting."""
        return self.spec.flags[0] if self.spec.flags else f"%config AgentMagics.{self.name}"

    def help_text(self) -> str:
        """An option's help on the command line: with the default, and the trait's name unless the flag spells it."""
        if not self.spec.trait:
            return self.spec.help
        named = "" if name_of(self.spec.flags[0]) == self.name else f"; %config AgentMagics.{self.name}"
        return f"{self.spec.help} (default: {self.shown_default}{named})"

    def argument(self) -> magic_arguments.argument:
        """The ``magic_arguments`` entry: the parsed value is None unless the option is on the command line."""
        kwargs: dict[str, Any] = {"dest": self.name, "default": None, "help": self.help_text().replace("%", "%%")}
        if self.kind is bool:
            kwargs["action"] = (argparse.BooleanOptionalAction if self.optional
                                else "store_false" if self.default else "store_true")
        elif self.switches_off:
            kwargs.update(action="store_const", const="")
        else:
            kwargs["metavar"] = self.spec.metavar
            kwargs["type"] = CONVERTERS.get(self.kind)
            if self.spec.choices:
                kwargs.update(choices=self.spec.choices, metavar=None)
            if self.spec.alone is not None:
                kwargs.update(nargs="?", const=self.spec.alone)
        return magic_arguments.argument(*self.spec.flags, **kwargs)

    def trait(self) -> TraitType:
        """The ``%config AgentMagics.<name>`` traitlet."""
        text = self.spec.help
        if self.spec.flags:
            text += f" (default: {self.shown_default}; command line: {self.spec.flags[0]})"
        kwargs: dict[str, Any] = {"help": text, "allow_none": self.optional}
        trait: TraitType
        if self.spec.choices:
            trait = Enum(list(self.spec.choices), self.default, **kwargs)
        elif self.kind is bool:
            trait = Bool(self.default, **kwargs)
        elif self.kind is int:
            trait = Int(self.default, min=0, max=MAX_NUMBER, **kwargs)
        elif self.kind is float:
            trait = Float(self.default, min=0.0, max=float(MAX_NUMBER), **kwargs)
        elif self.kind is list:
            trait = List(Unicode(), default_value=list(self.default), **kwargs)
        else:
            trait = (Switchable if self.switches_off else Unicode)(self.default, **kwargs)
        return trait.tag(config=True)


class Switchable(Unicode):  # type: ignore[type-arg]
    """A text setting with an off switch (``--no-transcript``), which was once a switch alone: ``False`` is ``""``
    (off), ``True`` the default."""

    def validate(self, obj: Any, value: Any) -> Any:
        if isinstance(value, bool):
            return self.default_value if value else ""
        return super().validate(obj, value)


def _number(kind: Callable[[str], float]) -> Callable[[str], float]:
    def convert(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        if problem := out_of_range(value):
            raise argparse.ArgumentTypeError(f"{problem}, not {text!r}")
        return value

    return convert


def out_of_range(value: float) -> str | None:
    """What a number must be when it cannot be an option's value (negative, past :data:`MAX_NUMBER`, inf, nan),
    else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if value < 0:
        return "must be 0 or more"
    if value > MAX_NUMBER:
        return f"must be at most {MAX_NUMBER:,}"
    return None


def comma_list(text: str) -> list[str]:
    """``"a, b,"`` -> ``["a", "b"]``; an empty text is an empty list."""
    return [name.strip() for name in text.split(",") if name.strip()]


CONVERTERS: dict[type, Callable[[str], Any]] = {int: _number(int), float: _number(float), list: comma_list}


def _resolve(hint: Any) -> tuple[type, bool]:
    """A field's type as (kind, optional): ``float | None`` -> (float, True), ``list[str]`` -> (list, False)."""
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    kinds = [a for a in args if a is not type(None)]
    assert len(kinds) == 1, hint
    kind = typing.get_origin(kinds[0]) or kinds[0]
    return kind, len(kinds) < len(args)


def _options() -> tuple[Option, ...]:
    hints = typing.get_type_hints(AgentOptions)
    table = []
    for f in fields(AgentOptions):
        default = f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default
        table.append(Option(f.name, *_resolve(hints[f.name]), default, f.metadata["option"]))
    return tuple(table)


OPTIONS = _options()
BY_FLAG = {flag: o for o in OPTIONS for flag in o.spec.flags}


def option_traits() -> dict[str, TraitType]:
    """The traitlets for ``AgentMagics``: one per option that ``%config`` can set."""
    return {o.name: o.trait() for o in OPTIONS if o.spec.trait}


def option_arguments(func: Any) -> Any:
    """Decorate the magic with its grouped ``magic_arguments`` parser, as IPython's own magics are decorated.

    The help (``%%agent?``) is the docstring, then the options by group with their defaults, then the settings
    only ``%config`` sets.
    """
    decorators: list[magic_arguments.ArgDecorator] = []
    for group in GROUPS:
        decorators.append(magic_arguments.argument_group(group))
        decorators.extend(o.argument() for o in OPTIONS if o.spec.group == group and o.spec.flags)
    for decorator in reversed(decorators):  # as if written top to bottom above the function
        func = decorator(func)
    func = magic_arguments.kwds(usage=USAGE, epilog=_epilog())(func)
    func = magic_arguments.magic_arguments()(func)
    func.parser.allow_abbrev = False  # a prefix that is unique today becomes ambiguous when an option is added
    func.parser.formatter_class = HelpFormatter
    func.__doc__ = func.parser.format_help()  # as magic_arguments made it, without the "::"
    return func


class HelpFormatter(magic_arguments.MagicHelpFormatter):
    """IPython's help layout for magics without the ``::`` it puts above the usage (a reST literal block marker
    for Sphinx, shown as is by ``%%agent?``)."""

    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: str | None = "  %") -> None:
        super().add_usage(usage, actions, groups, prefix)


def _epilog() -> str:
    settings = [(f"{o.name} = {o.default!r}", o.spec.help) for o in OPTIONS if not o.spec.flags]
    width = max(len(assignment) for assignment, _ in settings)
    return "\n".join([
        "%config AgentMagics.<name> = value sets an option's default for the cells after it, <name> being the",
        "option's long flag with _ for - (%config AgentMagics.max_seconds = 60) unless its help names it; the",
        "command line wins. Settings %config alone sets:",
        *(f"  {assignment:<{width}}  {text}" for assignment, text in settings),
    ])


def name_of(flag: str) -> str:
    """The ``%config`` name of a long flag: ``--max-seconds`` -> ``max_seconds``."""
    return flag.removeprefix("--").replace("-", "_")


def split_line(line: str, cell: bool = False) -> tuple[list[str], str]:
    """Split a magic line into its options and the text after them.

    The options are split as a POSIX shell would (``--system "be terse"`` gives the word ``be terse``); the text
    after them, from the first word that is neither an option nor an option's value, is kept as typed: it is
    the one-line ``%agent``'s prompt (``what's in x.txt?``). A ``--`` ends the options. ``cell``: the line of a
    ``%%agent`` cell, all options (so ``--continue notes.txt`` names a file, see :attr:`Spec.alone`).
    """
    stream = io.StringIO(line)  # its position is where the next word starts (after the whitespace)
    lexer = shlex.shlex(stream, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    words: list[str] = []
    wants_value = False
    while rest := line[stream.tell():].strip():
        if not wants_value and not rest.startswith("-"):
            return words, rest
        try:
            word = lexer.get_token()
        except ValueError as e:  # an unclosed quote
            raise UsageError(f"{e} in {rest!r}") from None
        if word is None:
            break
        if word == "--" and not wants_value:
            return words, line[stream.tell():].strip()
        words.append(word)
        flag, equals, _ = word.partition("=")
        wants_value = not wants_value and flag in BY_FLAG and BY_FLAG[flag].takes_value and not equals
        if wants_value and BY_FLAG[flag].spec.alone is not None:  # its value is optional: is the next word it?
            wants_value = _is_value(_next_word(line[stream.tell():]), cell)
    return words, ""


def _is_value(word: str, cell: bool) -> bool:
    """Whether ``word`` is the value of an option whose value may be left out (:attr:`Spec.alone`)."""
    if not word or word.startswith("-"):
        return False
    return cell or word.lower().endswith(".jsonl") or os.path.isfile(os.path.expanduser(word))


def wants_help(words: list[str]) -> bool:
    """Whether the option words ask for the help (``--help``, ``-h``), which ``%%agent?`` shows too."""
    return any(word in HELP_FLAGS for word in words)


def usage_line(problem: object) -> str:
    """A usage error as one line, with where the options are listed."""
    text = " ".join(str(problem).split("\nusage:")[0].split())
    return f"{text} {HELP_POINTER}"


def _next_word(text: str) -> str:
    """The first word of ``text`` as the shell would split it ("" if none, or if its quote is not closed)."""
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return lexer.get_token() or ""
    except ValueError:
        return ""


def merge(args: argparse.Namespace, configured: object) -> AgentOptions:
    """Each option from the command line, else its ``%config`` trait on ``configured`` (``AgentMagics``), else its
    environment variable, else its default."""
    values: dict[str, Any] = {}
    for o in OPTIONS:
        value = getattr(args, o.name, None)
        if value is None and o.spec.trait:
            value = getattr(configured, o.name)
        if not value and o.spec.env:
            value = os.environ.get(o.spec.env) or value
        if value is None:
            value = o.default
        values[o.name] = list(value) if isinstance(value, list) else value  # a copy, not the trait's own list
    return AgentOptions(**values)


def check(options: AgentOptions) -> None:
    """AgentConfigError, one line naming the option, for a value that cannot work, whether it came from the command
    line, ``%config`` or the environment: checked when the options become a plan, before the run starts."""
    for o in OPTIONS:
        value = getattr(options, o.name)
        if o.kind in (int, float) and value is not None and (problem := out_of_range(value)):
            raise AgentConfigError(f"{o.named}: {problem}, not {value!r}")
    if options.base_url and not options.base_url.lower().startswith(("http://", "https://")):
        where = "$OPENAI_BASE_URL" if options.base_url == os.environ.get("OPENAI_BASE_URL") else "--base-url"
        raise AgentConfigError(f"{where}: {options.base_url!r} is not a URL: it begins with http:// or https:// "
                               "(e.g. http://localhost:8080/v1)")
    if options.root and not os.path.isdir(os.path.expanduser(options.root)):
        what = "a file, not a folder" if os.path.exists(os.path.expanduser(options.root)) else "no such folder"
        raise AgentConfigError(f"--root: {options.root!r} is {what}")
    if options.record:
        folder = os.path.dirname(os.path.abspath(os.path.expanduser(options.record)))
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise AgentConfigError(f"--record: cannot write {options.record!r}: {folder!r} is a file, not a folder")
        if not os.path.isdir(folder):
            raise AgentConfigError(f"--record: cannot write {options.record!r}: there is no folder {folder!r} "
                                   "(folders are not made for you)")
