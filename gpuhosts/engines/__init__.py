"""One driver per engine: everything gpuhosts knows about running SGLang or vLLM as a service.

A driver supplies how the engine is installed (`install`: a spec the install plan reads, by default a pip package
in a uv environment), the command line, the environment, the files it ships beside its unit (SGLang's launcher;
none for vLLM), the API-key variable, and what the deploy gate reads (the reasoning field of a response, and which
metrics give acceptance, as gauges or counters). Facts that change between releases are rows of the compatibility
data (`engines:` in gpuhosts/compat-rules.yaml), read through `EngineFacts`; a driver holds only what is true of
every release it supports. Callers pick a driver with `driver_for` instead of testing the engine's name.
"""

from __future__ import annotations

from gpuhosts.engines.base import ENGINE_SETTINGS, EngineDriver, Flags
from gpuhosts.engines.sglang import SGLangDriver
from gpuhosts.engines.vllm import VllmDriver
from gpuhosts.services import ServiceConfig, SpecMethod

DRIVERS: dict[str, EngineDriver] = {driver.name: driver for driver in (SGLangDriver(), VllmDriver())}


def driver_for(engine) -> EngineDriver:
    """The driver of an engine name, or of a service's `engine` spec."""
    name = getattr(getattr(engine, "name", engine), "value", getattr(engine, "name", engine))
    try:
        return DRIVERS[str(name)]
    except KeyError:
        raise ValueError(f"no driver for engine {name!r}; known: {', '.join(sorted(DRIVERS))}") from None


def service_problems(service: ServiceConfig) -> list[tuple[str, str]]:
    """What a service asks of its engine that no driver or not its own serves, as (field, why) pairs with the field
    under the service's entry: an engine without a driver, a speculative method or an engine-only setting that its
    driver does not serve (naming the engines that do)."""
    name = service.engine.name
    if name not in DRIVERS:
        return [("engine.name", f"no driver for engine {name!r}; use one of: {', '.join(sorted(DRIVERS))}")]
    driver, found = DRIVERS[name], []
    method = service.speculative.method
    if method is not SpecMethod.NONE and method not in driver.methods:
        others = sorted(d.name for d in DRIVERS.values() if method in d.methods)
        found.append(("speculative.method", f"{method.value} is not served by {name}"
                      + (f"; use engine {' or '.join(others)}" if others else "")))
    for field, stack_name in ENGINE_SETTINGS.items():
        if getattr(service, field) is not None and field not in driver.settings:
            readers = sorted(d.name for d in DRIVERS.values() if field in d.settings)
            found.append((stack_name, f"is a setting of {' and '.join(readers) or 'no engine'}, not of {name}; "
                                      "remove it"))
    return found


def shipped_paths() -> list[str]:
    """Every file any driver ships beside its services' units: whichever service of a container goes last removes
    them all, also those an engine shipped that no service runs any more."""
    return list(dict.fromkeys(path for driver in DRIVERS.values() for path, _ in driver.launchers))


__all__ = ["DRIVERS", "EngineDriver", "Flags", "driver_for", "service_problems", "shipped_paths"]
