"""How the project's own data files (gpuhosts/*.yaml) are read: with libyaml's parser where PyYAML was built with it,
the same safe loading, several times faster than the pure-Python one that a plan would otherwise spend most of its
own time in."""

from __future__ import annotations

import yaml

DATA_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
