"""What a Prometheus the user runs needs to watch a stack: scrape targets (file_sd), alert rules and Grafana
dashboards, all built from the metric catalog (gpuhosts/metrics-catalog.yaml) by role, so no metric name is written
here. Pure: a stack's typed config in, documents (dicts) out; gpuhosts/plans renders them as files.

Where a target is scraped: at the address it binds. A loopback bind (the default of every service, the monitor and
the exporters) is reachable only from the same network namespace, so targets are grouped by place (the Proxmox host,
each container, the training node): a Prometheus reads the file_sd files of the place it runs in. Nothing is opened
to the network for scraping unless the stack binds it there (`bind` of a service, the monitor or the exporters)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuhosts.config import NAMESPACE, ConfigError, MonitoringSpec, Problem, StackConfig
from gpuhosts.fields import is_loopback, local_address
from gpuhosts.metrics import Catalog, catalog
from gpuhosts.services import ServiceConfig, SpecMethod
from gpuhosts.training import TrainerStack

JOB_PREFIX = "gpuhosts-"
# Debian 12's prometheus-node-exporter (Proxmox VE 8 and the node's Debian/Ubuntu packages are of that line), and the
# DCGM exporter release the counters file is written for; both are catalog rows.
NODE_EXPORTER_RELEASE = "1.5.0"
DCGM_EXPORTER_RELEASE = "4.5.3-4.8.2"
MONITOR_RELEASE = "current"
# Where the monitor's unit keeps its token (gpuhosts/plans/training_monitor.py MONITOR_TOKEN, which a plan may not
# import from here); tests/test_observability_stack.py keeps the two equal.
MONITOR_TOKEN_FILE = "/etc/gpuhosts/monitor.token"
# Acceptance is judged over a longer window than a scrape: SGLang's gauges cover its last decode-log window (about
# 40 steps), vLLM's counters move only with traffic; ten minutes is the issue's "stays below" for decode speed too.
SUSTAINED = "10m"
RATE_WINDOW = "5m"
# The alert of a target that does not answer its scrape, by job.
DOWN_ALERTS = {"engines": "GpuhostsServiceDown", "node": "GpuhostsNodeExporterDown", "dcgm": "GpuhostsDcgmExporterDown",
               "hidden-state-server": "GpuhostsHiddenStateServerDown", "training-monitor": "GpuhostsTrainingMonitorDown"}


@dataclass(frozen=True)
class Target:
    """One scrape target: which catalog exporter and release it is, where it runs, and its labels."""

    job: str
    exporter: str
    release: str
    place: str
    address: str
    labels: dict[str, str] = field(default_factory=dict)
    # A target behind a bearer token: the file its Prometheus reads the token from, never the token itself.
    credentials_file: str | None = None


@dataclass(frozen=True)
class EngineWatch:
    """What the rules watch of one engine: the gate's thresholds for it."""

    service: str
    exporter: str
    release: str
    min_decode_tokens_per_s: float
    min_acceptance_rate: float | None


@dataclass(frozen=True)
class Watch:
    """Everything watched on one stack."""

    stack: str
    targets: tuple[Target, ...]
    engines: tuple[EngineWatch, ...] = ()
    storage: str | None = None
    hidden_state_server: bool = False
    spec: MonitoringSpec = MonitoringSpec()


def scrape_address(bind: str, port: int) -> str:
    """Where a Prometheus of the same place reaches a listener: a wildcard bind answers on loopback too."""
    host = "127.0.0.1" if is_loopback(bind) else local_address(bind)
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


# --- the stacks -------------------------------------------------------------------------------------------------

def watch_proxmox(stack: StackConfig, name: str, spec: MonitoringSpec = MonitoringSpec()) -> Watch:
    """A Proxmox host: node and DCGM exporters on the host (where the driver runs), each enabled engine's /metrics in
    its container."""
    host = {"gpuhosts_host": name}
    targets = [Target("node", "node", NODE_EXPORTER_RELEASE, "host", scrape_address(spec.bind, spec.node_exporter_port), host)]
    if stack.nvidia is not None and stack.nvidia_gpus:
        targets.append(Target("dcgm", "dcgm", DCGM_EXPORTER_RELEASE, "host",
                              scrape_address(spec.bind, spec.dcgm_exporter_port), host))
    engines = []
    for service in stack.services:
        for instance in service.instances:
            if not instance.enabled:
                continue
            targets.append(Target("engines", instance.engine.name, instance.engine.version, f"ct{instance.container}",
                                  scrape_address(instance.bind, instance.port), {**host, "service": instance.name}))
            engines.append(engine_watch(instance))
    return Watch(name, tuple(targets), tuple(engines), spec=spec)


def engine_watch(service: ServiceConfig) -> EngineWatch:
    rate = None
    if service.speculative.method is not SpecMethod.NONE:
        # the gate's own default floor (gpuhosts/hostside/gate_probe.py GateSettings.acceptance_rate_floor)
        rate = service.gate.min_acceptance_rate if service.gate.min_acceptance_rate is not None else 0.1
    return EngineWatch(service.name, service.engine.name, service.engine.version,
                       service.gate.min_decode_tokens_per_s, rate)


def watch_trainer(stack: TrainerStack, spec: MonitoringSpec = MonitoringSpec()) -> Watch:
    """A training node: node and DCGM exporters, the hidden-state server's vLLM /metrics and the monitor's."""
    node, training = stack.node, stack.training
    host = {"gpuhosts_host": node.name}
    targets = (
        Target("node", "node", NODE_EXPORTER_RELEASE, node.name, scrape_address(spec.bind, spec.node_exporter_port), host),
        Target("dcgm", "dcgm", DCGM_EXPORTER_RELEASE, node.name, scrape_address(spec.bind, spec.dcgm_exporter_port), host),
        # speculators' launch_vllm.py serves on 127.0.0.1 (gpuhosts/engines/speculators.py)
        Target("hidden-state-server", "vllm", training.vllm.version, node.name,
               scrape_address("127.0.0.1", training.server.port), host),
        Target("training-monitor", "monitor", MONITOR_RELEASE, node.name,
               scrape_address(training.monitor.bind, training.monitor.port), host,
               credentials_file=(spec.monitor_token_file or MONITOR_TOKEN_FILE) if training.monitor.token_secret
               else None),
    )
    return Watch(node.name, targets, storage=node.storage, hidden_state_server=True, spec=spec)


# --- scrape config ----------------------------------------------------------------------------------------------

def file_sd(watch: Watch) -> dict[str, list[dict[str, Any]]]:
    """The file_sd documents, one per place and job (`<place>-<job>.json`): Prometheus's file_sd_config format, a list
    of {targets, labels} groups (prometheus/discovery/file, the format of docs/configuration: <file_sd_config>)."""
    files: dict[str, list[dict[str, Any]]] = {}
    for target in watch.targets:
        files.setdefault(f"{target.place}-{target.job}.json", []).append(
            {"targets": [target.address], "labels": dict(sorted(target.labels.items()))})
    return files


def scrape_configs(watch: Watch, sd_dir: str, place: str) -> list[dict[str, Any]]:
    """The scrape_configs a Prometheus in `place` needs: one job per kind of target, reading the place's files."""
    jobs: dict[str, Target] = {}
    for target in watch.targets:
        if target.place == place:
            jobs.setdefault(target.job, target)
    configs = []
    for job, target in sorted(jobs.items()):
        config: dict[str, Any] = {"job_name": JOB_PREFIX + job,
                                  "file_sd_configs": [{"files": [f"{sd_dir}/{target.place}-{job}.json"]}]}
        if target.credentials_file:
            # scrape_config `authorization` (type Bearer by default): Prometheus reads the file at each scrape, so
            # the token is in no file gpuhosts renders and a rotated one is picked up without a reload.
            config["authorization"] = {"type": "Bearer", "credentials_file": target.credentials_file}
        configs.append(config)
    return configs


def places(watch: Watch) -> list[str]:
    return sorted({t.place for t in watch.targets})


# --- alert rules -------------------------------------------------------------------------------------------------

def _sel(*matchers: str, **labels: str) -> str:
    return "{" + ",".join([*(f'{k}="{v}"' for k, v in labels.items()), *matchers]) + "}"


def _rule(alert: str, expr: str, duration: str | None, severity: str, summary: str, description: str,
          **labels: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": alert, "expr": expr}
    if duration:
        rule["for"] = duration
    rule["labels"] = {"severity": severity, **labels}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def _job(job: str) -> str:
    return JOB_PREFIX + job


def alert_rules(watch: Watch, cat: Catalog | None = None) -> dict[str, Any]:
    """The rule file (Prometheus's rule-file format: groups of rules) for one stack."""
    cat = cat or catalog()
    host = {"gpuhosts_host": watch.stack}
    rules: list[dict[str, Any]] = []
    for job in sorted({t.job for t in watch.targets}):
        rules.append(_rule(
            DOWN_ALERTS[job], f"up{_sel(job=_job(job), **host)} == 0", "2m", "critical",
            f"{{{{ $labels.instance }}}} ({job}) on {watch.stack} is down",
            f"Prometheus has not scraped {{{{ $labels.instance }}}} of {job} for 2 minutes: the service or exporter "
            "is stopped, failing, or no longer listening where the stack says."))
    for engine in watch.engines:
        rules += _engine_rules(engine, host, cat)
    rules += _gpu_rules(watch, host, cat)
    if watch.storage is not None:
        rules += _disk_rules(watch, host, cat)
    if watch.hidden_state_server:
        rules += _trainer_rules(watch, host, cat)
    return {"groups": [{"name": f"gpuhosts-{watch.stack}", "rules": rules}]}


def _known_metrics(cat: Catalog, exporter: str, release: str, who: str) -> dict:
    """A release's metrics by role; a release nobody read is refused, not guessed: a rule on a metric name it does
    not have would never fire."""
    try:
        return cat.release(exporter, release).metrics
    except KeyError as missing:
        raise ConfigError([Problem(path=f"{NAMESPACE}:monitoring", message=(
            f"{who} runs {exporter} {release}, whose metrics are not known: {missing.args[0]}, or leave "
            "gpuhosts:monitoring out of the stack"))]) from None


def _engine_rules(engine: EngineWatch, host: dict[str, str], cat: Catalog) -> list[dict[str, Any]]:
    release = _known_metrics(cat, engine.exporter, engine.release, f"service {engine.service}")
    sel = _sel(job=_job("engines"), **host, service=engine.service)
    itl = release["inter_token_latency"].name
    # Per-stream decode speed, the gate's measure: over a window the tokens observed (count) over the time they
    # took (sum). Both engines count one observation per token: vLLM 0.26.0 observes each token's latency
    # (loggers.py record, inter_token_latencies_iter); SGLang 0.5.11 adds a chunk's interval to the sum and its
    # token count to the buckets (metrics_collector.py observe_inter_token_latency). Without traffic the quotient
    # is empty and nothing fires.
    # The sums keep no label of the series: the alert carries its host and service as the rule's own labels, so a
    # Prometheus watching several hosts tells them apart.
    decode = f"sum(rate({itl}_count{sel}[{RATE_WINDOW}])) / sum(rate({itl}_sum{sel}[{RATE_WINDOW}]))"
    rules = [_rule(
        "GpuhostsDecodeSlow", f"{decode} < {engine.min_decode_tokens_per_s:g}", SUSTAINED, "warning",
        f"{engine.service} decodes below its gate's {engine.min_decode_tokens_per_s:g} tok/s",
        f"Per-stream decode of {engine.service} has stayed below the deploy gate's minDecodeTokensPerS for "
        f"{SUSTAINED}: {{{{ $value | printf \"%.1f\" }}}} tok/s.", **host, service=engine.service)]
    if engine.min_acceptance_rate is None:
        return rules
    floor = f"{engine.min_acceptance_rate:g}"
    if "acceptance_rate" in release:
        # a gauge per rank over the engine's last decode window: averaged over the ranks, as the gate does
        expr = f"avg(avg_over_time({release['acceptance_rate'].name}{sel}[{RATE_WINDOW}])) < {floor}"
    else:
        accepted, drafted = release["accepted_tokens"].name, release["draft_tokens"].name
        expr = (f"sum(rate({accepted}{sel}[{SUSTAINED}])) / sum(rate({drafted}{sel}[{SUSTAINED}])) < {floor}")
    rules.append(_rule(
        "GpuhostsAcceptanceCollapsed", expr, SUSTAINED, "critical",
        f"speculative acceptance of {engine.service} collapsed",
        f"Draft-token acceptance of {engine.service} has stayed below the gate's minAcceptanceRate {floor} for "
        f"{SUSTAINED} ({{{{ $value | humanizePercentage }}}}): the drafter no longer matches the target, and "
        "speculative decoding costs more than it saves.", **host, service=engine.service))
    return rules


def _gpu_rules(watch: Watch, host: dict[str, str], cat: Catalog) -> list[dict[str, Any]]:
    if not any(t.job == "dcgm" for t in watch.targets):
        return []
    dcgm = cat.release("dcgm", DCGM_EXPORTER_RELEASE).metrics
    sel = _sel(job=_job("dcgm"), **host)
    used, free = dcgm["memory_used"].name, dcgm["memory_free"].name
    ratio = f"{watch.spec.gpu_memory_full_ratio:g}"
    return [
        _rule("GpuhostsGpuXid", f"{dcgm['xid'].name}{sel} > 0", None, "critical",
              "GPU {{ $labels.gpu }} on " + watch.stack + " reported Xid {{ $value }}",
              "The driver reported an Xid error on GPU {{ $labels.gpu }} ({{ $labels.UUID }}); see NVIDIA's Xid "
              "catalog for what the code means and whether the GPU needs a reset."),
        _rule("GpuhostsGpuEccUncorrectable", f"increase({dcgm['ecc_dbe'].name}{sel}[10m]) > 0", None, "critical",
              "GPU {{ $labels.gpu }} on " + watch.stack + " had uncorrectable ECC errors",
              "Double-bit (uncorrectable) volatile ECC errors on GPU {{ $labels.gpu }} in the last 10 minutes."),
        _rule("GpuhostsGpuMemoryFull", f"{used}{sel} / ({used}{sel} + {free}{sel}) > {ratio}", "15m", "warning",
              "GPU {{ $labels.gpu }} on " + watch.stack + " memory nearly full",
              f"Framebuffer of GPU {{{{ $labels.gpu }}}} more than {ratio} used for 15 minutes "
              "({{ $value | humanizePercentage }})."),
    ]


def _disk_rules(watch: Watch, host: dict[str, str], cat: Catalog) -> list[dict[str, Any]]:
    node = cat.release("node", NODE_EXPORTER_RELEASE).metrics
    sel = _sel(job=_job("node"), **host, mountpoint=watch.storage)
    ratio = f"{watch.spec.disk_free_ratio:g}"
    return [_rule(
        "GpuhostsStorageFilling", f"{node['filesystem_avail'].name}{sel} / {node['filesystem_size'].name}{sel} < {ratio}",
        "10m", "warning", f"{watch.storage} on {watch.stack} is filling",
        f"Less than {ratio} of {watch.storage} is free ({{{{ $value | humanizePercentage }}}}): checkpoints and "
        "the data set share it, and a full disk stops the training at its next save.")]


def _trainer_rules(watch: Watch, host: dict[str, str], cat: Catalog) -> list[dict[str, Any]]:
    server = next(t for t in watch.targets if t.job == "hidden-state-server")
    vllm = _known_metrics(cat, server.exporter, server.release, "the hidden-state server (training.vllm)")
    monitor = cat.release("monitor", MONITOR_RELEASE).metrics
    errors = (f"sum(rate({vllm['http_requests'].name}{_sel(job=_job('hidden-state-server'), **host, status='5xx')}"
              f"[{RATE_WINDOW}])) > 0 or sum(rate({vllm['request_success'].name}"
              f"{_sel(job=_job('hidden-state-server'), **host, finished_reason='error')}[{RATE_WINDOW}])) > 0")
    return [
        _rule("GpuhostsHiddenStateServerErrors", errors, "1m", "critical",
              f"the hidden-state server on {watch.stack} answers with errors",
              "The vLLM server that extracts hidden states for the trainer answered requests with 5xx or finished "
              "them with an internal error: the trainer gets no states for those samples.", **host),
        # the monitor applies its own stall rule (gpuhosts_monitor/app.py); the alert repeats its verdict
        _rule("GpuhostsTrainingStalled", f"{monitor['stalled'].name}{_sel(job=_job('training-monitor'), **host)} == 1",
              None, "critical", f"training on {watch.stack} stalled",
              "No new training step for longer than the monitor's stall threshold (max of its floor and ten median "
              "step intervals); a rank died or a collective hangs."),
        # a signal ended the launch through speculators' graceful shutdown: no step comes, but it is no stall
        _rule("GpuhostsTrainingInterrupted",
              f"{monitor['interrupted'].name}{_sel(job=_job('training-monitor'), **host)} == 1",
              "5m", "warning", f"training on {watch.stack} was interrupted",
              "The training launch ended on a signal and saved its state under interrupted/; nothing trains until "
              "it is launched again (a reboot, an OOM kill of the launcher, or a stop by hand)."),
        # a worker died or the launch ended non-zero; the unit restarts it (Restart=on-failure), which clears it, so
        # the alert waits past the unit's RestartSec and a launch's start-up
        _rule("GpuhostsTrainingFailed",
              f"{monitor['failed'].name}{_sel(job=_job('training-monitor'), **host)} == 1",
              "10m", "critical", f"training on {watch.stack} failed",
              "The training launch died (torchrun's root cause or the launch's exit code is on the monitor's page) "
              "and no launch has started since."),
    ]


# --- dashboards ---------------------------------------------------------------------------------------------------

def _panel(pid: int, title: str, exprs: list[tuple[str, str]], unit: str, x: int, y: int) -> dict[str, Any]:
    return {
        "id": pid, "type": "timeseries", "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend,
                     "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                    for i, (expr, legend) in enumerate(exprs)],
    }


def _dashboard(uid: str, title: str, panels: list[tuple[str, list[tuple[str, str]], str]]) -> dict[str, Any]:
    laid = [_panel(i + 1, title_, exprs, unit, 12 * (i % 2), 8 * (i // 2))
            for i, (title_, exprs, unit) in enumerate(panels)]
    return {
        "uid": uid, "title": title, "tags": ["gpuhosts"], "timezone": "browser", "schemaVersion": 39, "version": 1,
        "editable": False, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus",
                                 "label": "Prometheus"}]},
        "annotations": {"list": []}, "panels": laid,
    }


def _gpu_panels(sel: str, cat: Catalog) -> list[tuple[str, list[tuple[str, str]], str]]:
    dcgm = cat.release("dcgm", DCGM_EXPORTER_RELEASE).metrics
    used, free = dcgm["memory_used"].name, dcgm["memory_free"].name
    return [
        ("GPU utilisation", [(f"{dcgm['utilization'].name}{sel}", "GPU {{gpu}}")], "percent"),
        ("GPU memory used", [(f"{used}{sel} / ({used}{sel} + {free}{sel})", "GPU {{gpu}}")], "percentunit"),
        ("GPU temperature and power", [(f"{dcgm['temperature'].name}{sel}", "GPU {{gpu}} °C"),
                                       (f"{dcgm['power'].name}{sel}", "GPU {{gpu}} W")], "short"),
    ]


def dashboards(watch: Watch, cat: Catalog | None = None) -> dict[str, dict[str, Any]]:
    """Grafana dashboards of the stack, by file name: one for its inference services, one for its training."""
    cat = cat or catalog()
    host = {"gpuhosts_host": watch.stack}
    out: dict[str, dict[str, Any]] = {}
    if watch.engines:
        panels: list[tuple[str, list[tuple[str, str]], str]] = []
        by_release: dict[tuple[str, str], list[str]] = {}
        for engine in watch.engines:
            by_release.setdefault((engine.exporter, engine.release), []).append(engine.service)
        series: dict[str, list[tuple[str, str]]] = {k: [] for k in ("tput", "ttft", "acc", "queue", "kv")}
        for (exporter, release), services in sorted(by_release.items()):
            m = cat.release(exporter, release).metrics
            sel = _sel(f'service=~"{"|".join(services)}"', job=_job("engines"), **host)
            series["tput"].append((f"sum by (service) (rate({m['generation_tokens'].name}{sel}[{RATE_WINDOW}]))",
                                   "{{service}} generated tok/s"))
            series["ttft"].append((f"histogram_quantile(0.5, sum by (service, le) (rate({m['ttft'].name}_bucket{sel}"
                                   f"[{RATE_WINDOW}])))", "{{service}} p50"))
            series["ttft"].append((f"histogram_quantile(0.95, sum by (service, le) (rate({m['ttft'].name}_bucket{sel}"
                                   f"[{RATE_WINDOW}])))", "{{service}} p95"))
            if "acceptance_rate" in m:
                series["acc"].append((f"avg by (service) ({m['acceptance_rate'].name}{sel})", "{{service}} rate"))
            else:
                series["acc"].append((f"sum by (service) (rate({m['accepted_tokens'].name}{sel}[{RATE_WINDOW}])) / "
                                      f"sum by (service) (rate({m['draft_tokens'].name}{sel}[{RATE_WINDOW}]))",
                                      "{{service}} rate"))
            series["queue"].append((f"sum by (service) ({m['queued'].name}{sel})", "{{service}} waiting"))
            series["queue"].append((f"sum by (service) ({m['running'].name}{sel})", "{{service}} running"))
            series["kv"].append((f"max by (service) ({m['kv_usage'].name}{sel})", "{{service}}"))
        panels += [("Generation throughput", series["tput"], "short"), ("Time to first token", series["ttft"], "s"),
                   ("Speculative acceptance rate", series["acc"], "percentunit"),
                   ("Requests waiting and running", series["queue"], "short"), ("KV cache used", series["kv"], "percentunit")]
        if any(t.job == "dcgm" for t in watch.targets):
            panels += _gpu_panels(_sel(job=_job("dcgm"), **host), cat)
        out[f"gpuhosts-{watch.stack}-inference.json"] = _dashboard(
            f"gpuhosts-{watch.stack}-inference", f"gpuhosts · {watch.stack} · inference", panels)
    if watch.hidden_state_server:
        m = cat.release("monitor", MONITOR_RELEASE).metrics
        sel = _sel(job=_job("training-monitor"), **host)
        panels = [
            ("Loss", [(f"{m['loss'].name}{sel}", "loss")], "short"),
            ("Acceptance per draft position", [(f"{m['acceptance_per_position'].name}{sel}", "position {{position}}")],
             "percentunit"),
            ("Acceptance length", [(f"{m['acceptance_length'].name}{sel}", "tokens per step")], "short"),
            ("Step rate", [(f"{m['steps_per_s'].name}{sel}", "steps/s")], "short"),
            ("Time to finish", [(f"{m['eta'].name}{sel}", "ETA")], "s"),
            ("Progress", [(f"{m['step'].name}{sel} / {m['total_steps'].name}{sel}", "done")], "percentunit"),
            ("Stall watch", [(f"{m['last_step_age'].name}{sel}", "since the last step"),
                             (f"{m['stall_threshold'].name}{sel}", "stall threshold")], "s"),
        ]
        panels += _gpu_panels(_sel(job=_job("dcgm"), **host), cat)
        out[f"gpuhosts-{watch.stack}-training.json"] = _dashboard(
            f"gpuhosts-{watch.stack}-training", f"gpuhosts · {watch.stack} · training", panels)
    return out


def dashboard_provider(folder: str) -> dict[str, Any]:
    """Grafana's dashboard provisioning file (provisioning/dashboards/*.yaml: apiVersion 1, providers of type file
    reading `options.path`), pointing at the folder the dashboards are written to."""
    return {"apiVersion": 1, "providers": [{"name": "gpuhosts", "orgId": 1, "folder": "gpuhosts", "type": "file",
                                            "disableDeletion": True, "allowUiUpdates": False,
                                            "updateIntervalSeconds": 60, "options": {"path": folder}}]}


def counters_csv(cat: Catalog | None = None) -> str:
    """The DCGM exporter's counters file (`-f`): what the rules and dashboards read of it, in its CSV format
    (DCGM field, Prometheus type, help; etc/default-counters.csv of the release)."""
    cat = cat or catalog()
    release = cat.release("dcgm", DCGM_EXPORTER_RELEASE)
    lines = ["# managed by gpuhosts — the DCGM fields gpuhosts' alert rules and dashboards read "
             "(gpuhosts/metrics-catalog.yaml)", "# DCGM FIELD, Prometheus metric type, help message"]
    lines += [f"{m.name}, {m.type.value}, {m.where.split(': ', 1)[-1]}" for m in release.metrics.values()]
    return "\n".join(lines) + "\n"
