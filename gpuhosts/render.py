"""Template rendering and the plain data every unit produces: files for the host and commands to run there."""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from gpuhosts import protocol

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# An installed wheel carries the templates inside the package (pyproject.toml force-include); a checkout has them
# at its root.
_PACKAGED = Path(__file__).resolve().parent / "templates"
TEMPLATES = _PACKAGED if _PACKAGED.is_dir() else PROJECT_ROOT / "templates"
HEREDOC_END = "GPUHOSTS_EOF"
# The modules scripts carry to the host and run there (standard library only).
HOSTSIDE = Path(__file__).resolve().parent / "hostside"


class TemplateError(Exception):
    pass


@dataclass(frozen=True)
class HostFile:
    """A file a unit installs on the host, at its absolute path."""

    path: str
    content: str
    mode: str = "0644"

    def __post_init__(self) -> None:
        if not self.path.startswith("/"):
            raise ValueError(f"host file path must be absolute: {self.path}")
        if any(line == HEREDOC_END for line in self.content.splitlines()):
            raise ValueError(f"{self.path} contains the line {HEREDOC_END}, which would end its here-document")


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_NAMES = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", "\x00": "a NUL byte"}
_SYSTEMD_PLAIN = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
# How systemd reads each setting gpuhosts writes (systemd.exec(5), systemd.service(5), systemd.unit(5)): "exec"
# words are unquoted, C-unescaped and `$`-expanded; "word" ones unquoted and C-unescaped, `$` plain; the rest are
# taken as the whole rest of the line. Every setting expands `%` specifiers.
_SYSTEMD_KINDS = {"ExecStart": "exec", "ExecStopPost": "exec", "Environment": "word"}


def refuse_control(value: str, purpose: str) -> str:
    """`value`, unless it holds a control character: a newline or carriage return would end the line it is put on
    (a comment, a unit setting) and start a line of its own."""
    found = _CONTROL.search(value)
    if found:
        char = found[0]
        name = _CONTROL_NAMES.get(char, f"the control character U+{ord(char):04X}")
        raise ValueError(f"{purpose}: {value!r} contains {name}; it cannot be written there")
    return value


def _quote(value: object) -> str:
    return shlex.quote(str(value))


def _bash_array(values: list[object]) -> str:
    return "(" + " ".join(shlex.quote(str(v)) for v in values) + ")"


@jinja2.pass_context
def _comment(context: jinja2.runtime.Context, value: object) -> str:
    return refuse_control(str(value), f"a comment in templates/{context.name}")


@jinja2.pass_context
def _heredoc(context: jinja2.runtime.Context, body: str, delimiter: str) -> str:
    """A script embedded in a quoted here-document: refused when a line of it would end the here-document early
    (a config value with a newline and the delimiter in it), which would run the rest on the outer shell."""
    if delimiter in str(body).splitlines():
        raise ValueError(f"templates/{context.name}: the embedded script contains the line {delimiter}, which would "
                         "end its here-document")
    return str(body)


def systemd_value(value: object, purpose: str, kind: str = "text") -> str:
    """`value` as systemd must read it back: `%` escaped everywhere; for a word of a command line or assignment
    ("exec", "word") quoted where needed, `$` escaped in "exec". Control characters are refused: systemd reads a
    unit line by line, so a newline would start a setting of its own."""
    text = refuse_control(str(value), purpose)
    escaped = text.replace("%", "%%")
    if kind == "text":
        if text.endswith("\\"):
            raise ValueError(f"{purpose}: {text!r} ends with a backslash, which would continue the unit line onto the "
                             "next one")
        return escaped
    if kind == "exec":
        escaped = escaped.replace("$", "$$")
    if _SYSTEMD_PLAIN.match(text):
        return escaped
    if "'" not in text and "\\" not in text:
        return "'" + escaped + "'"
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_command(argv: list[str], purpose: str) -> str:
    """ExecStart's value, one flag (with its value) per continued line."""
    groups: list[list[str]] = []
    for arg in argv:
        # A value stays on the line of its flag (all of them, for a flag taking a list); "--" stands alone.
        if groups and not arg.startswith("--") and groups[-1][0] != "--":
            groups[-1].append(arg)
        else:
            groups.append([arg])
    return " \\\n    ".join(" ".join(systemd_value(a, purpose, "exec") for a in group) for group in groups)


@jinja2.pass_context
def _systemd(context: jinja2.runtime.Context, value: object, setting: str) -> str:
    purpose = f"{setting}= of templates/{context.name}"
    kind = _SYSTEMD_KINDS.get(setting, "text")
    if kind == "exec":
        return systemd_command([str(v) for v in value], purpose)
    return systemd_value(value, purpose, kind)


def _hostside_source(module: str) -> str:
    """A module of gpuhosts/hostside/ as the text a script embeds and runs with `python3 -I -c` (its last newline
    left to the here-document)."""
    if not re.fullmatch(r"[a-z_]+", module):
        raise ValueError(f"not a hostside module name: {module!r}")
    return (HOSTSIDE / f"{module}.py").read_text().rstrip("\n")


def _install_snippet(file: HostFile) -> str:
    """The lines of a script that install `file` (idempotently, through install_file of the common library)."""
    body = file.content if file.content.endswith("\n") else file.content + "\n"
    return f"install_file {shlex.quote(file.path)} {file.mode} <<'{HEREDOC_END}'\n{body}{HEREDOC_END}"


_OPTIONS = dict(
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
    # Bash's ${#array[@]} would open a Jinja comment.
    comment_start_string="{{#",
    comment_end_string="#}}",
)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept between runs: compiling the templates is most of a plan's own time. Jinja keys each
    entry by the template's path and the digest of its source, not by the environment's options, so the options'
    digest goes into the file names. Jinja's default folder is the user's own, 0700, and refused when it is not
    (`FileSystemBytecodeCache._get_default_cache_dir`); without one, templates are compiled each run."""
    options = hashlib.sha256(repr(sorted((k, str(v)) for k, v in _OPTIONS.items())).encode()).hexdigest()[:12]
    try:
        return jinja2.FileSystemBytecodeCache(pattern=f"__gpuhosts_{options}_%s.cache")
    except (OSError, RuntimeError):
        return None


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), bytecode_cache=_bytecode_cache(),
                             **_OPTIONS)
    env.filters["q"] = _quote
    env.filters["bash_array"] = _bash_array
    env.filters["comment"] = _comment
    env.filters["heredoc"] = _heredoc
    env.filters["systemd"] = _systemd
    env.globals["install"] = _install_snippet
    env.globals["hostside_source"] = _hostside_source
    env.globals.update(result_prefix=protocol.RESULT_PREFIX, facts_prefix=protocol.FACTS_PREFIX,
                       lock_wait_prefix=protocol.LOCK_WAIT_PREFIX, no_change_result=protocol.Result(False).line(),
                       lock_timeout_s=protocol.LOCK_TIMEOUT_S, skipped_prefix=protocol.SKIPPED_PREFIX)
    return env


_ENV = _environment()


def render(template: str, **values: object) -> str:
    """Render templates/<template>; errors name the template file and line."""
    try:
        return _ENV.get_template(template).render(**values)
    except jinja2.TemplateSyntaxError as error:
        raise TemplateError(f"templates/{error.filename or template}:{error.lineno}: {error.message}") from None
    except jinja2.UndefinedError as error:
        raise TemplateError(f"templates/{template}: {error.message}") from None
