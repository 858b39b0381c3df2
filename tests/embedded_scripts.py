"""The scripts a rendered command carries inside it for a container (quoted here-documents), which a linter of
the outer script does not read.
"""

from __future__ import annotations



def inner_scripts(text: str) -> list[str]:
    """Scripts a command runs inside a container: shellcheck does not read into a quoted here-document."""
    return [part.split("\nGPUHOSTS_INNER\n", 1)[0] for part in text.split("<<'GPUHOSTS_INNER'\n")[1:]]
