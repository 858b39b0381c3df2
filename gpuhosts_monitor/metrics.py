"""/metrics: the monitor's readings in Prometheus's text exposition format (version 0.0.4), from the same status the
page shows, so an alert and the page never disagree (the stall verdict is the monitor's own rule, app.py). Written
by hand: the monitor's environment holds Flask only."""

from __future__ import annotations

import math

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (name, help) of every family; gpuhosts/metrics-catalog.yaml lists these names and
# tests/test_monitor_metrics.py keeps the two equal.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("gpuhosts_training_step", "Newest training step in the log."),
    ("gpuhosts_training_total_steps", "Steps of the whole run (the command line's, else the log's)."),
    ("gpuhosts_training_loss", "Loss of the newest step."),
    ("gpuhosts_training_steps_per_second", "Step rate of the current launch."),
    ("gpuhosts_training_eta_seconds", "Seconds to the last step at the current rate."),
    ("gpuhosts_training_acceptance_length", "Expected acceptance length of the newest step."),
    ("gpuhosts_training_acceptance_per_position", "Acceptance rate per draft position, newest step."),
    ("gpuhosts_training_last_step_age_seconds", "Seconds since a new step reached the log."),
    ("gpuhosts_training_stall_threshold_seconds", "Seconds without a step after which the run is stalled."),
    ("gpuhosts_training_stalled", "1 while the monitor's stall rule says the run is stalled."),
    ("gpuhosts_training_interrupted", "1 while the current launch is interrupted by a signal (graceful shutdown)."),
    ("gpuhosts_training_failed", "1 while the current launch has died (a worker's exit, the launch's non-zero end)."),
    ("gpuhosts_training_finished", "1 once the run ended normally: every epoch trained and validated, or its launch "
                                   "exited 0."),
    ("gpuhosts_training_server_up", "1 while the hidden-state server answers /health."),
)


def _value(value) -> str | None:
    if value is None:
        return None
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(status: dict) -> str:
    """The text of /metrics from Monitor.status(); a reading the monitor does not have yet is left out."""
    training = status["training"]
    acceptance = training.get("acceptance") or {}
    stall = training.get("stall") or {}
    samples: dict[str, list[tuple[str, str | None]]] = {
        "gpuhosts_training_step": [("", _value(training.get("step")))],
        "gpuhosts_training_total_steps": [("", _value(training.get("total_steps")))],
        "gpuhosts_training_loss": [("", _value(training.get("loss")))],
        "gpuhosts_training_steps_per_second": [("", _value(training.get("steps_per_s")))],
        "gpuhosts_training_eta_seconds": [("", _value(training.get("eta_s")))],
        "gpuhosts_training_acceptance_length": [("", _value(acceptance.get("eal")))],
        "gpuhosts_training_acceptance_per_position": [
            (f'{{position="{_escape(str(p["position"]))}"}}', _value(p.get("acc")))
            for p in acceptance.get("positions") or []],
        "gpuhosts_training_last_step_age_seconds": [("", _value(training.get("last_step_age_s")))],
        "gpuhosts_training_stall_threshold_seconds": [("", _value(stall.get("threshold_s")))],
        "gpuhosts_training_stalled": [("", "1.0" if training.get("state") == "stalled" else "0.0")],
        "gpuhosts_training_interrupted": [("", "1.0" if training.get("state") == "interrupted" else "0.0")],
        "gpuhosts_training_failed": [("", "1.0" if training.get("state") == "failed" else "0.0")],
        "gpuhosts_training_finished": [("", "1.0" if training.get("state") == "finished" else "0.0")],
        "gpuhosts_training_server_up": [("", "1.0" if (status.get("server") or {}).get("state") == "up" else "0.0")],
    }
    lines = []
    for name, help_text in FAMILIES:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        lines += [f"{name}{labels} {value}" for labels, value in samples[name] if value is not None]
    return "\n".join(lines) + "\n"
