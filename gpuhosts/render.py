"""Template rendering and the plain data every unit produces: files for the host and commands to run there."""

from __future__ import annotations

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


def _quote(value: object) -> str:
    return shlex.quote(str(value))


def _bash_array(values: list[object]) -> str:
    return "(" + " ".join(shlex.quote(str(v)) for v in values) + ")"


def _install_snippet(file: HostFile) -> str:
    """The lines of a script that install `file` (idempotently, through install_file of the common library)."""
    body = file.content if file.content.endswith("\n") else file.content + "\n"
    return f"install_file {shlex.quote(file.path)} {file.mode} <<'{HEREDOC_END}'\n{body}{HEREDOC_END}"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        # Bash's ${#array[@]} would open a Jinja comment.
        comment_start_string="{{#",
        comment_end_string="#}}",
    )
    env.filters["q"] = _quote
    env.filters["bash_array"] = _bash_array
    env.globals["install"] = _install_snippet
    env.globals.update(result_prefix=protocol.RESULT_PREFIX, facts_prefix=protocol.FACTS_PREFIX,
                       lock_wait_prefix=protocol.LOCK_WAIT_PREFIX, no_change_result=protocol.Result(False).line())
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
