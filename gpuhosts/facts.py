"""Desired facts and the probe that observes them, declared together so that they cannot disagree.

A `Fact` is a name (what `pulumi preview` shows under `facts`), a bash expression run by the unit's probe that
prints the observed value as one line, and the value a host in the declared state gives. The probe is rendered
from the facts (templates/common/probe.sh.j2); the unit's `desired` dict is `{name: desired}`.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
from dataclasses import dataclass

from gpuhosts.render import HostFile, render

MISSING = "missing"


@dataclass(frozen=True)
class Fact:
    """`desired` None: an observation only (a GPU's minor, a dynamic major), reported as the resource's output
    `observed` and never compared, since no plan can know it."""

    name: str
    probe: str
    desired: str | None
    # Statements the probe runs once, before any fact, in its own shell (a fact runs in a subshell of it): what several
    # facts read from one command. Facts that share a statement name it alike; the probe runs it once.
    setup: tuple[str, ...] = ()


def observation(name: str, probe: str) -> Fact:
    return Fact(f"observed: {name}", probe, None)


def file_digest(content: str, mode: str) -> str:
    """What `file_state` in templates/common/lib.sh.j2 prints for a file with this content and mode."""
    return f"sha256:{hashlib.sha256(content.encode()).hexdigest()[:16]} mode:{int(mode, 8):o}"


def file_fact(file: HostFile) -> Fact:
    return Fact(f"file {file.path}", f"file_state {shlex.quote(file.path)}", file_digest(file.content, file.mode))


AS_RECORDED = "as recorded"


def content_fact(directory: str) -> Fact:
    """The files a unit wrote into `directory`, each by its size and sampled digest against the record it kept
    (templates/common/content.sh.j2, which the probe's prelude must include)."""
    return Fact(f"content of {directory}", f'content_state "$root"{shlex.quote(directory)}', AS_RECORDED)


def deep_content_fact(directory: str) -> Fact:
    """As content_fact, each file read whole against its recorded sha256: the deep check's."""
    return Fact(f"sha256 of the content of {directory}", f'content_state "$root"{shlex.quote(directory)} deep',
                AS_RECORDED)


def files_facts(files) -> list[Fact]:
    return [file_fact(f) for f in files]


# --- the systemd units gpuhosts installs -------------------------------------------------------------------------
# What a probe reads of such a unit is what systemd has loaded: the unit file merged with every drop-in, a mask
# included. One `systemctl show -p …` gives it (systemctl(1) "show": with -p a property is printed even when empty);
# the properties are those of org.freedesktop.systemd1(5). Their desired values are read from the unit file the plan
# installs, the way systemd reads it, so that the plan and the probe cannot disagree.
SHOWN_PROPERTIES = ("ExecStart", "Environment", "User", "UnitFileState", "ActiveState", "DropInPaths")
# shell_maybe_quote (systemd src/basic/escape.c, SHELL_NEED_QUOTES of escape.h): what `systemctl show` quotes in
# a list of strings such as Environment; systemd 252 quotes these, as tests/fixtures/systemd/show/ records.
_SHELL_NEED_QUOTES = set(" \t\n\r\"\\`$*?['()<>|&;!")
_SHELL_NEED_ESCAPE = set("\"\\`$")
# The C escapes systemd's word splitting takes (extract_first_word with EXTRACT_CUNESCAPE, src/basic/escape.c
# cunescape_one); an unknown one keeps its backslash, as systemd 252 prints `\;` back.
_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "s": " ",
              "\\": "\\", "\"": "\"", "'": "'"}
# systemd.service(5) "Command lines": the prefixes an Exec line's program may carry.
_EXEC_PREFIXES = "-@:+!"


def _unit_settings(content: str, unit_name: str) -> dict[str, list[str]]:
    """'Section.Key' -> its values in order, as systemd reads a unit file (systemd.syntax(7)): `#` and `;` start a
    comment, a trailing backslash joins the next line (with a space), and an empty assignment empties the list
    (systemd.service(5) ExecStart=, systemd.exec(5) Environment=)."""
    settings: dict[str, list[str]] = {}
    section = ""
    lines = iter(content.splitlines())
    for raw in lines:
        line = raw.strip()
        while line.endswith("\\"):
            line = line[:-1] + " " + next(lines, "").strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, equals, value = line.partition("=")
        if not equals:
            raise ValueError(f"{unit_name}: {line!r} is neither a section nor an assignment")
        values = settings.setdefault(f"{section}.{key.strip()}", [])
        if value.strip():
            values.append(value.strip())
        else:
            values.clear()
    return settings


def _specifiers(word: str, unit_name: str) -> str:
    """`%%` is one `%` (systemd.unit(5) "Specifiers"); gpuhosts writes no other specifier, so one here is an error
    rather than a value this module would have to guess."""
    out, index = [], 0
    while index < len(word):
        char = word[index]
        if char == "%":
            if word[index + 1:index + 2] != "%":
                raise ValueError(f"{unit_name}: the specifier {word[index:index + 2]!r} in {word!r} is not one gpuhosts "
                                 "writes")
            index += 1
        out.append(char)
        index += 1
    return "".join(out)


def _systemd_words(text: str, unit_name: str) -> list[str]:
    """A setting split into words as systemd splits a command line or an Environment= assignment
    (src/basic/extract-word.c `extract_first_word` with EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE): whitespace separates,
    single and double quotes group (and may start inside a word), a backslash escapes inside quotes too."""
    words: list[str] = []
    word: list[str] | None = None
    quote = ""
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char == "\\" and index < len(text):
            escaped = text[index]
            index += 1
            if escaped == "x" and len(text) >= index + 2:
                char, index = chr(int(text[index:index + 2], 16)), index + 2
            elif escaped in "01234567" and len(text) >= index + 2 and text[index:index + 2].isdigit():
                char, index = chr(int(text[index - 1:index + 2], 8)), index + 2
            else:
                char = _C_ESCAPES.get(escaped, "\\" + escaped)
            word = (word or []) + [char]
        elif quote:
            if char == quote:
                quote = ""
            else:
                word = (word or []) + [char]
        elif char in "'\"":
            quote, word = char, word or []
        elif char in " \t":
            if word is not None:
                words.append("".join(word))
            word = None
        else:
            word = (word or []) + [char]
    if quote:
        raise ValueError(f"{unit_name}: unbalanced {quote} in {text!r}")
    if word is not None:
        words.append("".join(word))
    return [_specifiers(w, unit_name) for w in words]


def _shell_maybe_quote(value: str) -> str:
    if not any(char in _SHELL_NEED_QUOTES or ord(char) < 32 or ord(char) == 127 for char in value):
        return value
    return '"' + "".join("\\" + char if char in _SHELL_NEED_ESCAPE else char for char in value) + '"'


def shown_exec(lines: list[str], unit_name: str) -> str:
    """ExecStart= as a fact: each command as `systemctl show` prints it (systemd src/systemctl/systemctl-show.c
    `print_property`, the exec command list: `{ path=… ; argv[]=… ; ignore_errors=… ; … }`, argv joined by spaces)
    without what the last run left (start and stop time, pid, exit status), the commands side by side."""
    commands = []
    for line in lines:
        prefix = line[:len(line) - len(line.lstrip(_EXEC_PREFIXES))]
        words = _systemd_words(line[len(prefix):], unit_name)
        if not words:
            raise ValueError(f"{unit_name}: ExecStart={line!r} names no program")
        # `@`: the first word is the program, the second its argv[0] (systemd.service(5) "Command lines").
        path, argv = (words[0], words[1:]) if "@" in prefix else (words[0], words)
        if not path.startswith("/"):
            raise ValueError(f"{unit_name}: ExecStart= names {path!r}, not an absolute path: systemd would search "
                             "for it, and the probe could not know where it finds it")
        commands.append(f"{{ path={path} ; argv[]={' '.join(argv)} ; ignore_errors={'yes' if '-' in prefix else 'no'} }}")
    return " ".join(commands)


def shown_environment(lines: list[str], unit_name: str) -> str:
    """Environment= as `systemctl show` prints it: the assignments in the order of their first appearance, each
    variable with its last value (systemd src/basic/env-util.c `strv_env_replace_consume`), each quoted where a
    shell would need it, separated by spaces."""
    assignments: dict[str, str] = {}
    for line in lines:
        for word in _systemd_words(line, unit_name):
            name, equals, _value = word.partition("=")
            if not equals or not name:
                raise ValueError(f"{unit_name}: Environment= {word!r} is not NAME=VALUE")
            assignments[name] = word
    return " ".join(_shell_maybe_quote(word) for word in assignments.values())


def systemd_unit_facts(unit_file: HostFile, *, enabled: bool = True, active: bool = True) -> list[Fact]:
    """The facts of a systemd unit gpuhosts installs at `unit_file`, all from one `systemctl show` of it:

    * `systemd NAME` — UnitFileState and ActiveState, the words of `systemctl is-enabled` / `is-active`
      (org.freedesktop.systemd1(5): UnitFileState is "masked" for a masked unit);
    * `ExecStart of NAME`, `Environment of NAME`, `User of NAME` — what systemd runs, with whatever drop-in is in
      force (ExecStart: the commands' paths and argv; Environment: the assignments; User: empty for root);
    * `DropInPaths of NAME` — the drop-ins named for the unit (NAME.d/*.conf, org.freedesktop.systemd1(5)
      DropInPaths): gpuhosts writes none, so any is drift. Drop-ins for every service (`service.d/`) or for a name
      prefix are the host's policy for all units, not a change of this one, and are not read.
    """
    name = posixpath.basename(unit_file.path)
    settings = _unit_settings(unit_file.content, name)
    user = settings.get("Service.User", [""])
    quoted = shlex.quote(name)
    setup = (render("common/systemd-show.sh.j2", properties=",".join(SHOWN_PROPERTIES)).rstrip("\n"),
             f"systemd_shown[{quoted}]=\"$(systemd_show {quoted})\"")

    def fact(fact_name: str, function: str, value: str) -> Fact:
        return Fact(fact_name, f"{function} {quoted}", value, setup)

    return [
        fact(f"systemd {name}", "systemd_state",
             f"{'enabled' if enabled else 'disabled'} {'active' if active else 'inactive'}"),
        fact(f"ExecStart of {name}", "systemd_exec", shown_exec(settings.get("Service.ExecStart", []), name)),
        fact(f"Environment of {name}", "systemd_property_of Environment",
             shown_environment(settings.get("Service.Environment", []), name)),
        fact(f"User of {name}", "systemd_property_of User", _specifiers(user[-1], name) if user else ""),
        fact(f"DropInPaths of {name}", "systemd_dropins", ""),
    ]


def render_probe(unit: str, facts: list[Fact], *, prelude: str = "", vmid: int | None = None,
                 container_facts: list[Fact] = (), container_prelude: str = "") -> str:
    """The probe script of a unit: read-only, one facts line. `container_facts` are observed inside container
    `vmid` through one `pct exec` (a running container's files are not visible from the host's side)."""
    names = [fact.name for fact in [*facts, *container_facts]]
    if len(names) != len(set(names)):
        raise ValueError(f"unit {unit}: two facts share a name")
    inner = ""
    if container_facts:
        inner = render("common/probe.sh.j2", unit=unit, facts=list(container_facts),
                       prelude=_with_setup(container_prelude, container_facts), inner=None, vmid=None,
                       container_fact_names=[])
    return render("common/probe.sh.j2", unit=unit, facts=list(facts), prelude=_with_setup(prelude, facts),
                  inner=inner.rstrip("\n"), vmid=vmid, container_fact_names=[fact.name for fact in container_facts])


def _with_setup(prelude: str, facts) -> str:
    return "\n".join(part for part in (prelude, *dict.fromkeys(s for fact in facts for s in fact.setup)) if part)


def desired(facts: list[Fact]) -> dict[str, str]:
    return {fact.name: fact.desired for fact in facts if fact.desired is not None}


# --- files that hold a secret --------------------------------------------------------------------------------------
# Their content may not be a fact (it would print the secret), and a digest of it alone could be brute-forced
# without a salt, so the probe prints a digest keyed by the unit: the sha256 of "gpuhosts-file", the unit's key and
# the content, NUL-separated (the salt derived from the unit key, as gpuhosts/provider.py `secret_digest` keys the
# secrets of inputs), with the mode and which secret the file should hold. Only the provider knows the secret: at
# refresh it computes the same digest of the content the ensure writes and reports the fact in its desired words
# when they agree (`keyed_observed`), so a key rewritten by hand is drift and no value is ever printed.
_KEYED_SETUP = r'''keyed_file_state() {
  local target="$root$2"
  [ -f "$target" ] || { echo missing; return 0; }
  printf 'keyed sha256:%s mode:%s (gpuhosts:%s as %s)\n' \
    "$({ printf 'gpuhosts-file\0%s\0' "$1"; cat "$target"; } | sha256sum | cut -c1-16)" "$(stat -c %a "$target")" "$3" "$4"
}'''
_KEYED = re.compile(r"^keyed sha256:([0-9a-f]{16}) mode:([0-7]+) \(gpuhosts:(\w+) as (\w+)\)$")


def keyed_digest(unit: str, content: str) -> str:
    return hashlib.sha256(b"gpuhosts-file\0" + unit.encode() + b"\0" + content.encode()).hexdigest()[:16]


def secret_file_fact(unit: str, path: str, secret: str, variable: str, mode: str = "600") -> Fact:
    """A file that holds `VARIABLE=<secret>` and nothing else (an EnvironmentFile), with `mode`."""
    return Fact(f"key file {path}", f"keyed_file_state {shlex.quote(unit)} {shlex.quote(path)} {secret} {variable}",
                f"holds gpuhosts:{secret} as {variable}, mode:{mode}", (_KEYED_SETUP,))


ADMIN_KEY_VARIABLE = "GPUHOSTS_ADMIN_API_KEY"
# 24 random bytes in URL-safe base64 (templates/common/container-service.sh.j2 writes it).
ADMIN_KEY_LINE = f"^{ADMIN_KEY_VARIABLE}=[A-Za-z0-9_-]{{32}}$"


def admin_key_file_fact(path: str) -> Fact:
    """The file that holds the engine's admin key, which the container makes itself and no one else knows: its
    form and mode, never its value."""
    probe = (f'if [ ! -f "$root"{shlex.quote(path)} ]; then echo missing; '
             f'elif [ "$(wc -l < "$root"{shlex.quote(path)})" = 1 ] && grep -Eq {shlex.quote(ADMIN_KEY_LINE)} '
             f'"$root"{shlex.quote(path)}; then echo "a random key, mode:$(stat -c %a "$root"{shlex.quote(path)})"; '
             'else echo "not a key gpuhosts made"; fi')
    return Fact(f"admin key file {path}", probe, "a random key, mode:600")


def keyed_observed(unit: str, observed: str, secret_value) -> tuple[str, str | None]:
    """A probed value as a refresh stores it, and a note when it cannot be compared: a keyed digest becomes the
    desired words when the file holds exactly what the ensure writes of the configured secret
    (`secret_value(name)`, None where the secret is not given); any other value is kept."""
    match = _KEYED.match(observed)
    if not match:
        return observed, None
    digest, mode, secret, variable = match.groups()
    value = secret_value(secret)
    if value is None:
        return observed, f"not compared: gpuhosts:{secret} is not given here"
    if digest == keyed_digest(unit, f"{variable}={value}\n"):
        return f"holds gpuhosts:{secret} as {variable}, mode:{mode}", None
    # Only that it differs: a digest of the key the host holds now would sit in the state, where anyone who reads
    # the state could test guesses against it offline.
    return f"not gpuhosts:{secret} (another value), mode:{mode}", None
