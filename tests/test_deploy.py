"""The deployment files: Dockerfile, compose demo, Kubernetes sidecar, Collector load balancing.

No image is built and nothing is applied here, so each file is checked against what it
names (the project's config, CLI, package layout and the other deploy files), and what
can run does: every config validates, the image's HEALTHCHECK command runs against a live
spanscore, and the demo agent's spans go through the deployed config to an OTLP backend.
Loopback only; every process started is stopped.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import os
import py_compile
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path, PurePosixPath

import pytest
import yaml

from spanscore.config.loader import Config, load_config
from spanscore.core.endpoints import split_host_port
from spanscore.pipeline.settings import DEFAULT_SESSION_KEYS
from tests.support.ports import free_port
from tests.support.running import health_check_ok, wait_until

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DEPLOY_CONFIG = DEPLOY / "spanscore.yaml"
DEFAULT_CONFIG = ROOT / "otel-config.yaml"
AGENT_SCRIPT = DEPLOY / "agent" / "agent.py"
SPANSCORE = [sys.executable, "-m", "spanscore"]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


# --- reading the files ------------------------------------------------------------------


def dockerfile() -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(instruction, arguments) in order, continuations joined; and heredoc COPY bodies by destination."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    instructions, heredocs = [], {}
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + " " + lines[i].strip()
            i += 1
        keyword, _, arguments = line.strip().partition(" ")
        keyword, arguments = keyword.upper(), arguments.strip()
        heredoc = re.match(r"<<-?([\"']?)(\w+)\1\s+(\S+)$", arguments)
        if keyword == "COPY" and heredoc:
            body = []
            while lines[i] != heredoc.group(2):
                body.append(lines[i])
                i += 1
            i += 1
            heredocs[heredoc.group(3)] = "\n".join(body) + "\n"
        instructions.append((keyword, arguments))
    return instructions, heredocs


def instruction_args(keyword: str) -> list[str]:
    return [arguments for k, arguments in dockerfile()[0] if k == keyword]


def exec_form(arguments: str) -> list[str]:
    parsed = json.loads(arguments)
    assert isinstance(parsed, list) and all(isinstance(a, str) for a in parsed), arguments
    return parsed


def image_env() -> dict[str, str]:
    """The ENV the Dockerfile sets (KEY=value pairs)."""
    env = {}
    for arguments in instruction_args("ENV"):
        for pair in shlex.split(arguments):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


def image_config_path() -> str:
    """The config the image's CMD runs, which the Dockerfile writes from a heredoc."""
    cmd = exec_form(instruction_args("CMD")[-1])
    return cmd[cmd.index("--config") + 1]


def image_config_text() -> str:
    return dockerfile()[1][image_config_path()]


def image_health_check() -> list[str]:
    (arguments,) = instruction_args("HEALTHCHECK")
    _options, _, command = arguments.partition("CMD ")
    return exec_form(command)


def image_uid() -> str:
    return instruction_args("USER")[-1].partition(":")[0]


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def k8s_documents() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((DEPLOY / "k8s" / "sidecar.yaml").read_text())}


def k8s_pod() -> dict:
    return k8s_documents()["Deployment"]["spec"]["template"]["spec"]


def k8s_container(name: str) -> dict:
    pod = k8s_pod()
    return next(c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == name)


def container_env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def loaded(text: str, tmp_path: Path, environ: dict[str, str], name: str = "config.yaml") -> Config:
    path = tmp_path / name
    path.write_text(text)
    return load_config(path, environ=environ)


def port_of(endpoint: str) -> int:
    return split_host_port(endpoint)[1]


def ports(config: Config) -> dict[str, int]:
    """Every port a config listens on, by role."""
    (receiver,) = config.receivers
    found = {
        "grpc": port_of(receiver.config.protocols.grpc.endpoint),
        "http": port_of(receiver.config.protocols.http.endpoint),
    }
    found.update({c.type: port_of(c.config.endpoint) for c in config.metric_exporters + config.extensions})
    return found


def health_check(config: Config):
    return next(c.config for c in config.extensions if c.type == "health_check")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything that would change a config's defaults."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPANSCORE_", "OPENAI_", "OTEL_"))}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def start_spanscore(config: Path, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    """`spanscore run` with its log in cwd/spanscore.log (a pipe nobody reads could fill and block it)."""
    with open(cwd / "spanscore.log", "w") as log:
        return subprocess.Popen(
            [*SPANSCORE, "run", "--config", str(config)], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=log
        )


def log_of(cwd: Path) -> str:
    return (cwd / "spanscore.log").read_text()


def stop(process: subprocess.Popen, timeout_s: float = 45) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


# --- every file parses, every config validates ------------------------------------------


def test_every_yaml_file_under_deploy_parses():
    files = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))
    names = {str(p.relative_to(DEPLOY)) for p in files}
    assert {
        "spanscore.yaml",
        "compose.yaml",
        "prometheus/prometheus.yml",
        "k8s/sidecar.yaml",
        "loadbalancing/otelcol.yaml",
    } <= names
    for path in files:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert documents and all(isinstance(d, dict) for d in documents), path


CONFIG_SOURCES = {
    "deploy/spanscore.yaml": lambda: DEPLOY_CONFIG.read_text(),
    "Dockerfile": image_config_text,
    "k8s ConfigMap": lambda: k8s_documents()["ConfigMap"]["data"]["spanscore.yaml"],
}


@pytest.mark.parametrize("source", CONFIG_SOURCES)
def test_spanscore_validate_accepts_the_config(source, tmp_path):
    path = DEPLOY_CONFIG if source == "deploy/spanscore.yaml" else tmp_path / "config.yaml"
    if path != DEPLOY_CONFIG:
        path.write_text(CONFIG_SOURCES[source]())
    result = subprocess.run(
        [*SPANSCORE, "validate", str(path)],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{path}: valid;")


# --- the deployed configs score as the default does --------------------------------------


def scoring_view(raw: dict) -> dict:
    """A config without what a deployment may change: exporters, extensions and endpoint values."""
    view = copy.deepcopy(raw)
    view.pop("exporters", None)
    view.pop("extensions", None)
    view["service"].pop("extensions", None)
    for pipeline in view["service"]["pipelines"].values():
        pipeline.pop("exporters", None)

    def blank_endpoints(node):
        if isinstance(node, dict):
            return {k: "<endpoint>" if k == "endpoint" else blank_endpoints(v) for k, v in node.items()}
        if isinstance(node, list):
            return [blank_endpoints(v) for v in node]
        return node

    return blank_endpoints(view)


def default_raw() -> dict:
    return yaml.safe_load(DEFAULT_CONFIG.read_text())


@pytest.mark.parametrize("source", ["deploy/spanscore.yaml", "Dockerfile"])
def test_deployed_config_equals_the_default_apart_from_endpoints_and_exporters(source):
    raw = yaml.safe_load(CONFIG_SOURCES[source]())
    default = default_raw()
    assert raw["processors"] == default["processors"]
    traces, default_traces = raw["service"]["pipelines"]["traces"], default["service"]["pipelines"]["traces"]
    assert traces["processors"] == default_traces["processors"]
    assert traces["receivers"] == default_traces["receivers"]
    assert scoring_view(raw) == scoring_view(default)


DIVERGENCES = {
    "a processor setting": lambda raw: raw["processors"]["assembler"].update(trace_wait="2s"),
    "a processor left out": lambda raw: raw["service"]["pipelines"]["traces"]["processors"].remove("judge_metrics"),
    "processors reordered": lambda raw: raw["service"]["pipelines"]["traces"]["processors"].reverse(),
    "a protocol dropped": lambda raw: raw["receivers"]["otlp"]["protocols"].pop("http"),
    "a service setting": lambda raw: raw["service"].update(shutdown_timeout="5s"),
}


@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_the_comparison_fails_on_a_real_divergence(divergence):
    raw = yaml.safe_load(DEPLOY_CONFIG.read_text())
    DIVERGENCES[divergence](raw)
    assert scoring_view(raw) != scoring_view(default_raw())


def test_deploy_config_listens_on_all_interfaces_and_forwards_to_jaeger():
    config = load_config(DEPLOY_CONFIG, environ={})
    (receiver,) = config.receivers
    assert receiver.config.protocols.grpc.endpoint == "0.0.0.0:4317"
    assert receiver.config.protocols.http.endpoint == "0.0.0.0:4318"
    assert [c.type for c in config.exporters] == ["otlp"]
    otlp = config.exporters[0].config
    assert (otlp.endpoint, otlp.tls.insecure) == ("jaeger:4317", True)
    assert [(c.type, c.config.endpoint) for c in config.metric_exporters] == [("prometheus", "0.0.0.0:9464")]
    assert [(c.type, c.config.endpoint) for c in config.extensions] == [("health_check", "0.0.0.0:13133")]


# --- Dockerfile ---------------------------------------------------------------------------


def test_dockerfile_runs_as_a_numeric_non_root_user():
    uid = image_uid()
    assert uid.isdigit() and int(uid) != 0  # numeric, so Kubernetes' runAsNonRoot can check it


def copied_sources() -> set[str]:
    sources = set()
    for arguments in instruction_args("COPY"):
        words = [w for w in shlex.split(arguments) if not w.startswith("--")]
        if words[0].startswith("<<"):
            continue
        sources.update(str(PurePosixPath(w)) for w in words[:-1])
    return sources


def is_copied(path: str) -> bool:
    path = str(PurePosixPath(path))
    return any(path == s or path.startswith(s + "/") for s in copied_sources())


def package_folder(package: str) -> Path:
    """Where pyproject's package-dir puts `package` (the longest mapped prefix wins)."""
    mapping = PYPROJECT["tool"]["setuptools"]["package-dir"]
    base = max((p for p in mapping if package == p or package.startswith(p + ".")), key=len)
    return ROOT / mapping[base] / Path(*package[len(base) :].split(".")[1:])


def test_dockerfile_copies_every_folder_pyproject_maps_and_what_the_build_reads():
    needed = list(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    needed += ["pyproject.toml", PYPROJECT["project"]["readme"]]
    # Package data that is a link (src/spanscore/otel-config.yaml) needs its target too.
    for package, patterns in PYPROJECT["tool"]["setuptools"].get("package-data", {}).items():
        folder = package_folder(package)
        for pattern in patterns:
            for path in folder.glob(pattern):
                needed.append(str(path.relative_to(ROOT)))
                if path.is_symlink():
                    needed.append(str(path.resolve().relative_to(ROOT)))
    missing = [path for path in needed if not is_copied(path)]
    assert not missing, f"the Dockerfile does not COPY {missing}"


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore leaves `path` out of the build context (last matching pattern wins)."""
    parts = PurePosixPath(path).parts
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes):
            excluded = not negated
    return excluded


def test_dockerignore_keeps_every_copied_file_in_the_build_context():
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    kept = []
    for source in copied_sources():
        path = ROOT / source
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.suffix in (".py", ".yaml", ".json")]
        kept += [str(f.relative_to(ROOT)) for f in files if "__pycache__" not in f.parts]
    assert len(kept) > 20
    assert not [f for f in kept if dockerignored(f, patterns)]
    assert dockerignored("src/spanscore/__pycache__/x.pyc", patterns) and dockerignored(".git/HEAD", patterns)


def test_dockerfile_runs_its_embedded_config_and_exposes_its_ports(tmp_path):
    assert exec_form(instruction_args("ENTRYPOINT")[-1]) == ["spanscore"]
    assert exec_form(instruction_args("CMD")[-1]) == ["run", "--config", image_config_path()]
    help_text = subprocess.run(
        [*SPANSCORE, "run", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert "--config" in help_text.stdout
    config = loaded(image_config_text(), tmp_path, image_env())
    listening = ports(config)
    assert set(listening) == {"grpc", "http", "prometheus", "health_check"}
    assert {int(p) for a in instruction_args("EXPOSE") for p in a.split()} == set(listening.values())
    for receiver in config.receivers:
        assert split_host_port(receiver.config.protocols.grpc.endpoint)[0] == "0.0.0.0"
    # The output lands on the volume, which is also the working directory.
    (volume,) = instruction_args("VOLUME")
    assert instruction_args("WORKDIR")[-1] == volume
    (file_exporter,) = [c.config for c in config.exporters if c.type == "file"]
    assert Path(file_exporter.path).parent == Path(volume)
    # The HEALTHCHECK asks the health_check extension of this config.
    command = image_health_check()
    assert command[0] == "python"  # the image's interpreter; slim has no curl
    check = health_check(config)
    assert f"http://127.0.0.1:{listening['health_check']}{check.path}" in command[-1]


def test_healthcheck_command_passes_while_spanscore_runs_and_fails_once_it_stopped(tmp_path):
    health_port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(f"""
receivers: {{otlp: {{protocols: {{grpc: {{endpoint: 127.0.0.1:0}}, http: {{endpoint: 127.0.0.1:0}}}}}}}}
exporters: {{debug: {{}}}}
extensions: {{health_check: {{endpoint: '127.0.0.1:{health_port}'}}}}
service:
  extensions: [health_check]
  pipelines: {{traces: {{receivers: [otlp], exporters: [debug]}}}}
""")
    healthcheck = image_health_check()
    command = [sys.executable, *healthcheck[1:-1], healthcheck[-1].replace(":13133/", f":{health_port}/")]
    assert command[-1] != healthcheck[-1]

    def health_check_exit_code() -> int:
        return subprocess.run(command, capture_output=True, timeout=15, check=False).returncode

    assert health_check_exit_code() != 0  # nothing listens yet
    process = start_spanscore(config, tmp_path, clean_env())
    try:
        assert wait_until(
            lambda: health_check_exit_code() == 0 or process.poll() is not None, timeout_s=60, interval_s=0.2
        )
        assert process.poll() is None, log_of(tmp_path)
    finally:
        stop(process)
    assert process.returncode == 0, log_of(tmp_path)
    assert health_check_exit_code() != 0


# --- the compose demo ---------------------------------------------------------------------


def service_volumes(service: dict) -> list[tuple[str, str]]:
    """(source, target) of each short-syntax volume."""
    return [tuple(volume.split(":")[:2]) for volume in service.get("volumes", [])]


def volumes_of(service: dict) -> dict[str, str]:
    return dict(service_volumes(service))


def build_context(service: dict) -> Path:
    build = service["build"]
    return (DEPLOY / (build if isinstance(build, str) else build["context"])).resolve()


def test_compose_references_only_files_that_exist():
    stack = compose()
    assert {"agent", "spanscore", "jaeger", "prometheus", "grafana"} <= set(stack["services"])
    for name, service in stack["services"].items():
        if "build" in service:
            dockerfile_name = (
                service["build"].get("dockerfile", "Dockerfile") if isinstance(service["build"], dict) else "Dockerfile"
            )
            assert (build_context(service) / dockerfile_name).is_file(), name
        for source, _target in service_volumes(service):
            if not source.startswith((".", "/")):
                assert source in stack.get("volumes", {}), f"{name}: volume {source} is not declared"
            elif name != "grafana":
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"
    # deploy/grafana is provided alongside; the stack mounts exactly these two folders.
    assert service_volumes(stack["services"]["grafana"]) == [
        ("./grafana/provisioning", "/etc/grafana/provisioning"),
        ("./grafana/dashboards", "/var/lib/grafana/dashboards"),
    ]


def test_compose_runs_the_image_with_the_deploy_config(tmp_path):
    services = compose()["services"]
    spanscore, agent = services["spanscore"], services["agent"]
    assert build_context(spanscore) == ROOT
    assert build_context(agent) == AGENT_SCRIPT.parent
    config_path = spanscore.get("command", exec_form(instruction_args("CMD")[-1]))
    config_path = config_path[config_path.index("--config") + 1]
    volumes = volumes_of(spanscore)
    assert volumes["./spanscore.yaml"] == config_path
    assert instruction_args("VOLUME")[-1] in volumes.values()
    listening = ports(loaded(DEPLOY_CONFIG.read_text(), tmp_path, image_env()))
    assert agent["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://spanscore:{listening['grpc']}"
    assert agent["depends_on"]["spanscore"]["condition"] == "service_healthy"  # the image's HEALTHCHECK
    # spanscore forwards to the jaeger service; Prometheus scrapes spanscore's metrics port.
    exporter = load_config(DEPLOY_CONFIG, environ={}).exporters[0].config
    assert exporter.endpoint.split(":")[0] in services
    assert volumes_of(services["prometheus"])["./prometheus/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    targets = [t for job in scrape for static in job["static_configs"] for t in static["targets"]]
    assert f"spanscore:{listening['prometheus']}" in targets


def test_compose_mounts_every_rule_file_where_prometheus_looks_for_it():
    """prometheus.yml's rule_files are relative to it: each is mounted beside it in the container."""
    volumes = volumes_of(compose()["services"]["prometheus"])
    config = PurePosixPath(volumes["./prometheus/prometheus.yml"])
    rule_files = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["rule_files"]
    assert "alerts.yaml" in rule_files
    for rule_file in rule_files:
        assert (DEPLOY / "prometheus" / rule_file).is_file(), rule_file
        assert volumes[f"./prometheus/{rule_file}"] == str(config.parent / rule_file), rule_file


# --- the Kubernetes sidecar ---------------------------------------------------------------


def test_k8s_config_map_holds_deploy_config_verbatim():
    assert k8s_documents()["ConfigMap"]["data"]["spanscore.yaml"] == DEPLOY_CONFIG.read_text()


def test_k8s_sidecar_probes_ask_the_health_check_port_of_its_config(tmp_path):
    sidecar = k8s_container("spanscore")
    config = loaded(
        k8s_documents()["ConfigMap"]["data"]["spanscore.yaml"], tmp_path, {**image_env(), **container_env(sidecar)}
    )
    check = health_check(config)
    named = {p["name"]: p["containerPort"] for p in sidecar["ports"] if "name" in p}
    assert {"livenessProbe", "readinessProbe"} <= set(sidecar)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if probe in sidecar:
            get = sidecar[probe]["httpGet"]
            assert named.get(get["port"], get["port"]) == port_of(check.endpoint), probe
            assert get["path"] == check.path, probe


def test_k8s_pod_wires_the_agent_to_its_sidecar(tmp_path):
    pod, sidecar, agent = k8s_pod(), k8s_container("spanscore"), k8s_container("agent")
    if sidecar in pod.get("initContainers", []):
        assert sidecar["restartPolicy"] == "Always"  # a native sidecar, not a one-shot init container
    config = loaded(
        k8s_documents()["ConfigMap"]["data"]["spanscore.yaml"], tmp_path, {**image_env(), **container_env(sidecar)}
    )
    assert container_env(agent)["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://localhost:{ports(config)['grpc']}"
    # The ConfigMap is mounted where the sidecar's --config points.
    args = sidecar["args"]
    config_path = PurePosixPath(args[args.index("--config") + 1])
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}
    config_volume = volumes[mounts[str(config_path.parent)]]["configMap"]
    assert config_volume["name"] == k8s_documents()["ConfigMap"]["metadata"]["name"]
    assert {"key": "spanscore.yaml", "path": config_path.name} in config_volume["items"]
    assert "emptyDir" in volumes[mounts[instruction_args("VOLUME")[-1]]]
    # Non-root, with the image's uid, and bounded resources for every container.
    for container in (sidecar, agent):
        context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        assert context["runAsNonRoot"] is True
        assert {"requests", "limits"} <= set(container["resources"])
    assert str(pod["securityContext"]["runAsUser"]) == image_uid()


# --- the agent, through the deployed config -------------------------------------------------


def test_demo_agent_compiles(tmp_path):
    py_compile.compile(str(AGENT_SCRIPT), cfile=str(tmp_path / "agent.pyc"), doraise=True)


def attributes(span) -> dict:
    return {kv.key: kv.value for kv in span.attributes}


def test_demo_agent_spans_are_scored_by_the_deploy_config_and_forwarded(tmp_path, sink):
    grpc_port, metrics_port, health_port = free_port(), free_port(), free_port()
    env = clean_env(
        SPANSCORE_GRPC_ENDPOINT=f"127.0.0.1:{grpc_port}",
        SPANSCORE_HTTP_ENDPOINT="127.0.0.1:0",
        SPANSCORE_PROMETHEUS_ENDPOINT=f"127.0.0.1:{metrics_port}",
        SPANSCORE_HEALTH_ENDPOINT=f"127.0.0.1:{health_port}",
        SPANSCORE_EXPORTER_OTLP_ENDPOINT=f"127.0.0.1:{sink.grpc_port}",
    )  # the sink stands in for Jaeger
    process = start_spanscore(DEPLOY_CONFIG, tmp_path, env)
    try:
        assert wait_until(
            lambda: health_check_ok(health_port) or process.poll() is not None, timeout_s=60, interval_s=0.2
        )
        assert process.poll() is None, log_of(tmp_path)
        agent_env = clean_env(
            AGENT_TURNS="3", AGENT_INTERVAL_SECONDS="0", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{grpc_port}"
        )
        agent = subprocess.run(
            [sys.executable, str(AGENT_SCRIPT)], env=agent_env, capture_output=True, text=True, timeout=60, check=False
        )
        assert agent.returncode == 0, agent.stderr

        def roots():
            return [s for s in sink.spans() if s.name == "invoke_agent weather-agent"]

        assert wait_until(
            lambda: len(roots()) == 3 and all("eval.coherence.score" in attributes(s) for s in roots()),
            timeout_s=60,
            interval_s=0.2,
        ), log_of(tmp_path)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
            assert "gen_ai_evaluation_results_total" in response.read().decode()
    finally:
        stop(process)
    assert process.returncode == 0, log_of(tmp_path)
    spans = sink.spans()
    agent_spans = [s for s in spans if s.name != "evaluate_session"]
    assert len(agent_spans) == 3 * 4
    # One session, named on every span, so a Collector routing on session.id keeps it whole.
    sessions = {attributes(s)["session.id"].string_value for s in agent_spans}
    assert len(sessions) == 1
    (carrier,) = [s for s in spans if s.name == "evaluate_session"]  # written when the session closed at shutdown
    assert attributes(carrier)["session.id"].string_value in sessions
    assert "eval.agent_reliability.score" in attributes(carrier)


# --- scale-out behind the Collector ---------------------------------------------------------


def test_load_balancer_routes_by_session_to_the_replicas_grpc_port():
    collector = yaml.safe_load((DEPLOY / "loadbalancing" / "otelcol.yaml").read_text())
    name = next(n for n in collector["exporters"] if n.split("/")[0] in ("loadbalancing", "load_balancing"))
    exporter = collector["exporters"][name]
    assert exporter["routing_key"] == "attributes"
    assert exporter["routing_attributes"] == ["session.id"]
    assert DEFAULT_SESSION_KEYS[0] == "session.id"  # the key spanscore itself reads first
    dns = exporter["resolver"]["dns"]
    assert dns["hostname"] == "spanscore-headless"
    assert int(dns["port"]) == ports(load_config(DEPLOY_CONFIG, environ={}))["grpc"]
    assert name in collector["service"]["pipelines"]["traces"]["exporters"]
    assert "session.id" in (DEPLOY / "loadbalancing" / "README.md").read_text()
