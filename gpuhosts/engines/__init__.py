"""One driver per engine: everything gpuhosts knows about running SGLang or vLLM as a service.

A driver supplies how the engine is installed (`install`: a spec the install plan reads, by default a pip package
in a uv environment), the command line, the environment, the files it ships beside its unit (SGLang's launcher;
none for vLLM), the API-key variable, and what the deploy gate reads (the reasoning field of a response, and which
metrics give acceptance, as gauges or counters). Facts that change between releases are rows of the compatibility
data (`engines:` in gpuhosts/compat-rules.yaml), read through `EngineFacts`; a driver holds only what is true of
every release it supports. Callers pick a driver with `driver_for` instead of testing the engine's name.
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


def shipped_paths() -> list[str]:
    """Every file any driver ships beside its services' units: whichever service of a container goes last removes
    them all, also those an engine shipped that no service runs any more."""
    return list(dict.fromkeys(path for driver in DRIVERS.values() for path, _ in driver.launchers))


__all__ = ["DRIVERS", "EngineDriver", "Flags", "driver_for", "shipped_paths"]
