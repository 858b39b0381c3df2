"""One driver per engine: everything gpuhosts knows about running SGLang or vLLM as a service.

A driver supplies the package requirement, the command line, the environment, the launcher, the API-key
variable, and what the deploy gate reads (the reasoning field of a response, and how acceptance is computed from
the engine's metrics). Facts that change between releases are rows of the compatibility data (`engines:` in
gpuhosts/compat-rules.yaml), read through `EngineFacts`; a driver holds only what is true of every release it
supports. Callers pick a driver with `driver_for` instead of testing the engine's name.
"""

from __future__ import annotations

from gpuhosts.engines.base import EngineDriver, Flags
from gpuhosts.engines.sglang import SGLangDriver
from gpuhosts.engines.vllm import VllmDriver

DRIVERS: dict[str, EngineDriver] = {driver.name: driver for driver in (SGLangDriver(), VllmDriver())}


def driver_for(engine) -> EngineDriver:
    """The driver of an engine name, or of a service's `engine` spec."""
    name = getattr(getattr(engine, "name", engine), "value", getattr(engine, "name", engine))
    try:
        return DRIVERS[str(name)]
    except KeyError:
        raise ValueError(f"no driver for engine {name!r}; known: {', '.join(sorted(DRIVERS))}") from None


__all__ = ["DRIVERS", "EngineDriver", "Flags", "driver_for"]
