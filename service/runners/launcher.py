"""Start the vLLM runners a profile needs, wait for their ``/health``, stop them cleanly.

Runners are started as ``python -m vllm.entrypoints.openai.api_server`` (the module behind ``vllm serve``),
which works with both distributions: ``vllm`` on GPU hosts and ``vllm-cpu`` (whose ``vllm`` console script
cannot find its own metadata) on CPU hosts. Each runner gets its own process group, so stopping it also
stops its engine-core and worker processes.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlparse

import httpx

from service.config import Settings
from service.config.engine import EngineArgs, option_name
from service.config.targets import split_entries
from service.profiles import Profile, default_checkpoint, get_profile, resolve_generator
from service.runners.cores import allowed_cpus, plan_cores
from service.runners.vl_site import default_site_dir


class RunnerStartError(RuntimeError):
    pass


class RunnerConfigError(ValueError):
    """Settings that would start a runner vLLM cannot run as asked (refused before anything starts)."""


MEDIA_DOMAIN_NOBODY = "ragserve.invalid"
"""The one domain vLLM's own media fetching admits: ``.invalid`` never resolves (RFC 2606), and an empty
``--allowed-media-domains`` would admit every domain. ragserve hands the generator data URLs only."""


def vllm_is_cpu_build() -> bool:
    """True when the installed vLLM is the ``vllm-cpu`` distribution."""
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@dataclass
class RunnerSpec:
    name: str
    checkpoint: str
    served_name: str
    host: str
    port: int
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    requires: list[Path] = field(default_factory=list)
    """Paths that must exist before the runner can start (checked by :class:`RunnerProcess`)."""
    engine_key: str = ""
    """Its section of ``RAGSERVE_ENGINE__*`` (embed, rerank, generate), named in refusals."""
    extra_args: list[str] = field(default_factory=list)
    """The ``extra_args`` passthrough, already at the end of :attr:`args`."""
    replica: int = 0
    """Which of the runner's replicas on this host (one per URL of its setting), 0 for the first."""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def label(self) -> str:
        """The name, with the replica's number from the second on (``embedding``, ``embedding-2``, ...)."""
        return self.name if self.replica == 0 else f"{self.name}-{self.replica + 1}"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.checkpoint,
            "--served-model-name", self.served_name,
            "--host", self.host,
            "--port", str(self.port),
            *self.args,
        ]


def runner_specs(settings: Settings, profile: Profile | None = None, *, cpu: bool | None = None) -> list[RunnerSpec]:
    """The runners ``profile`` needs, with the flags each model requires on this host: one replica per URL of a
    runner's setting (``http://127.0.0.1:8101,http://127.0.0.1:8111`` starts two embedding runners), each bound
    to ``RAGSERVE_RUNNERS__HOST`` on its URL's port. A ``dns+`` URL starts one, on its port: its other replicas
    are other hosts' (pods')."""
    profile = profile or get_profile(settings.profile)
    cpu = vllm_is_cpu_build() if cpu is None else cpu
    rs = settings.runners
    common = ["--runner", "pooling", "--disable-uvicorn-access-log"]
    env: dict[str, str] = {}
    if cpu:
        common += ["--enforce-eager", "--dtype", "float32"]
        env["VLLM_CPU_KVCACHE_SPACE"] = str(rs.cpu_kvcache_gib)
    else:
        common += ["--gpu-memory-utilization", str(rs.gpu_memory_utilization)]

    emb = profile.embedding
    emb_len = min(emb.max_tokens, rs.max_model_len or emb.max_tokens)
    emb_args = [*common, "--max-model-len", str(emb_len)]
    if emb.hf_overrides:
        emb_args += ["--hf-overrides", json.dumps(emb.hf_overrides)]
    specs = [
        RunnerSpec("embedding", rs.embed_model_path or default_checkpoint(emb), emb.name, rs.host,
                   _ports(rs.embed_url)[0], emb_args, dict(env)),
    ]
    rr = profile.reranker
    if rr is not None:
        rr_len = min(rr.max_tokens, rs.max_model_len or rr.max_tokens)
        rr_args = [*common, "--max-model-len", str(rr_len), "--hf-overrides", json.dumps(rr.hf_overrides)]
        template = rr.template_path()
        if template is not None:
            rr_args += ["--chat-template", str(template)]
        specs.append(RunnerSpec("rerank", rs.rerank_model_path or default_checkpoint(rr), rr.name, rs.host,
                                _ports(rs.rerank_url)[0], rr_args, dict(env)))
    generator = generator_spec(settings, profile, cpu=cpu)
    if generator is not None:
        specs.append(generator)
    for spec in specs:
        if settings.upstream.bulk_priority_for(spec.name):  # its bulk requests carry a priority: schedule by it
            spec.args += ["--scheduling-policy", "priority"]
        _add_engine_args(spec, settings, gpu=not cpu)
    setting = {"embedding": rs.embed_url, "rerank": rs.rerank_url, "generate": rs.generate_url}
    specs = [replica for spec in specs for replica in _replicas(spec, _ports(setting[spec.name]))]
    if cpu:
        _plan_cores(settings, specs)
        if settings.runners.cpu_quiet_wait:
            _quiet_waits(specs)
    else:
        _check_gpu_share(settings, specs)
    return specs


def _plan_cores(settings: Settings, specs: Sequence[RunnerSpec]) -> None:
    """Bind each runner's worker to its cores (:mod:`service.runners.cores`)."""
    ranks = [getattr(settings.engine, spec.engine_key).world_size for spec in specs]
    try:
        plans = plan_cores(ranks, allowed_cpus(), settings.runners.cpu_plan)
    except ValueError as exc:
        raise RunnerConfigError(str(exc)) from exc
    for spec, env in zip(specs, plans, strict=True):
        spec.env.update(env)


QUIET_WAIT = Path(__file__).with_name("quiet_wait")
"""The folder of the start-up hook that stops vLLM-CPU's queue readers spinning (its ``sitecustomize.py``)."""


def _quiet_waits(specs: Sequence[RunnerSpec]) -> None:
    """Put :data:`QUIET_WAIT` first on each CPU runner's path, before any path of its own (the VL runner's)."""
    for spec in specs:
        own = spec.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        spec.env["PYTHONPATH"] = _first_on_path(QUIET_WAIT, own)


def _first_on_path(folder: Path, path: str) -> str:
    """``path`` (a ``PYTHONPATH``) with ``folder`` in front."""
    return os.pathsep.join(p for p in (str(folder), path) if p)


ENGINE_KEYS = {"embedding": "embed", "rerank": "rerank", "generate": "generate"}

REFUSED_EXTRA_ARGS = {
    "--config": "it reads more arguments from a file, past every check",
    "--allowed-local-media-path": "it lets vLLM read local files named in requests",
    "--help": "it prints help and exits",
}


def _add_engine_args(spec: RunnerSpec, settings: Settings, *, gpu: bool) -> None:
    """Append the runner's ``RAGSERVE_ENGINE__*`` flags. ``extra_args`` may neither repeat a flag the launcher
    sets (a later copy would silently win, e.g. over the generator's media lock) nor name a refused one."""
    key = ENGINE_KEYS[spec.name]
    engine: EngineArgs = getattr(settings.engine, key)
    ours = {option_name(a) for a in spec.command()} - {None}
    for arg in engine.extra_args:
        name = option_name(arg)
        if name in ours or name in REFUSED_EXTRA_ARGS or arg == "-h":
            why = REFUSED_EXTRA_ARGS.get(name or "--help", "ragserve sets it itself, from its own settings")
            raise RunnerConfigError(
                f"{spec.name} runner: RAGSERVE_ENGINE__{key.upper()}__EXTRA_ARGS may not contain {arg.split('=')[0]}"
                f": {why}"
            )
    spec.args += engine.flags(gpu=gpu)
    spec.engine_key, spec.extra_args = key, list(engine.extra_args)
    if gpu and engine.gpus is not None:
        spec.env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in engine.gpus)


MAX_GPU_SHARE = 0.95


def _check_gpu_share(settings: Settings, specs: Sequence[RunnerSpec]) -> None:
    """Every runner claims its fraction of each GPU it uses at start-up; on every GPU the claims must fit.
    Runners without ``RAGSERVE_ENGINE__*__GPUS`` all start on the first GPUs, so they share GPU 0."""
    claims: dict[int, list[tuple[str, float]]] = {}
    for spec in specs:
        engine: EngineArgs = getattr(settings.engine, spec.engine_key)
        if spec.name == "generate":
            name, share = "RAGSERVE_GENERATION__GPU_MEMORY_UTILIZATION", settings.generation.gpu_memory_utilization
        else:
            name, share = "RAGSERVE_RUNNERS__GPU_MEMORY_UTILIZATION", settings.runners.gpu_memory_utilization
        for device in engine.devices():
            claims.setdefault(device, []).append((name, share))
    for device, on_it in sorted(claims.items()):
        total = sum(share for _, share in on_it)
        if total > MAX_GPU_SHARE:
            parts = " + ".join(f"{name}={share:g}" for name, share in on_it)
            raise RunnerConfigError(
                f"the runners on GPU {device} would claim {total:.2f} of the GPU's memory ({parts}); keep the sum "
                f"at or below {MAX_GPU_SHARE}, or give runners GPUs of their own (RAGSERVE_ENGINE__<RUNNER>__GPUS)"
            )


def generator_spec(settings: Settings, profile: Profile, *, cpu: bool) -> RunnerSpec | None:
    """The vLLM chat server for the profile's vision-language model, with its memory and safety knobs.

    Each flag is explained, with its measured effect, in ``deploy/generation.md``.
    """
    gs, rs, media = settings.generation, settings.runners, settings.media
    model = resolve_generator(profile, enabled=gs.enabled, model=gs.model)
    if model is None:
        return None
    if gs.lora_adapters and gs.speculative_config:
        raise RunnerConfigError(
            "LoRA adapters and speculative decoding cannot be combined on the generation runner: vLLM does "
            "not support them together. Unset RAGSERVE_GENERATION__SPECULATIVE_CONFIG or the adapters."
        )
    side = media.max_image_side
    mm_limits = {"image": {"count": media.max_images_per_request, "width": side, "height": side}, "video": 0}
    args = [
        "--disable-uvicorn-access-log",
        "--max-model-len", str(min(model.max_tokens, gs.max_model_len)),
        "--limit-mm-per-prompt", json.dumps(mm_limits),
        "--mm-processor-cache-gb", f"{gs.mm_processor_cache_gb:g}",
        "--allowed-media-domains", MEDIA_DOMAIN_NOBODY,
    ]
    env = {"VLLM_MEDIA_URL_ALLOW_REDIRECTS": "0", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "0"}
    requires: list[Path] = []
    if cpu:
        args += ["--enforce-eager", "--dtype", "float32"]
        env["VLLM_CPU_KVCACHE_SPACE"] = str(gs.cpu_kvcache_gib)
        # vLLM's Qwen-VL code needs torchvision, whose PyPI wheel breaks the CPU torch inside the venv:
        # a patched copy lives beside it and is put on this runner's path only (deploy/local/setup.sh).
        site = gs.cpu_extra_site or default_site_dir()
        requires.append(site / "torchvision")
        env["PYTHONPATH"] = _first_on_path(site, os.environ.get("PYTHONPATH", ""))
    else:
        args += ["--gpu-memory-utilization", f"{gs.gpu_memory_utilization:g}"]
    if gs.lora_adapters:
        args += ["--enable-lora", "--max-loras", str(gs.max_loras), "--max-lora-rank", str(gs.max_lora_rank),
                 "--lora-modules", *(f"{name}={path}" for name, path in gs.lora_adapters.items())]
    if gs.speculative_config:
        args += ["--speculative-config", json.dumps(gs.speculative_config)]
    return RunnerSpec("generate", rs.generate_model_path or model.name, model.name, rs.host,
                      _ports(rs.generate_url)[0], args, env, requires)


def check_command_lines(specs: Sequence[RunnerSpec], *, timeout_s: float = 300.0) -> str:
    """Parse every runner's command line with the installed vLLM's own parser (``service/runners/vllm_args.py``,
    in a child process of the runner's interpreter) and raise :class:`RunnerConfigError` naming each refused
    argument and the setting it came from. Returns the vLLM version that checked."""
    if not specs:
        return ""
    python = specs[0].command()[0]
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the `service` package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    # Keyed by position: two profiles' runners may share a name. After `python -m <module>`.
    argvs = {str(i): s.command()[3:] for i, s in enumerate(specs)}
    try:
        done = subprocess.run([python, "-m", "service.runners.vllm_args"], input=json.dumps(argvs), env=env,
                              capture_output=True, text=True, timeout=timeout_s, check=False)
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, OSError, ValueError, IndexError) as exc:
        raise RunnerConfigError(f"could not check the runner command lines with vLLM's parser: {exc}") from exc
    if "error" in answer:
        raise RunnerConfigError(f"could not check the runner command lines: {answer['error']}")
    problems = []
    for i, spec in enumerate(specs):
        reason = answer["refused"].get(str(i))
        if reason is None:
            continue
        culprit = next((a for a in spec.extra_args if a.split("=", 1)[0] in reason), None)
        source = f" (from RAGSERVE_ENGINE__{spec.engine_key.upper()}__EXTRA_ARGS)" if culprit else ""
        problems.append(f"{spec.name} runner: vLLM {answer['vllm']} refuses its command line: {reason}{source}")
    if problems:
        raise RunnerConfigError("\n".join(problems))
    return str(answer["vllm"])


def _port(url: str) -> int:
    port = urlparse(url).port
    if port is None:
        raise ValueError(f"runner URL {url!r} needs an explicit port")
    return port


def _ports(setting: str) -> list[int]:
    """The port of each URL of a runner setting: one replica each, so no two may share one."""
    ports = [_port(url) for url in split_entries(setting)]
    if len(set(ports)) != len(ports):
        raise RunnerConfigError(
            f"runner URLs {setting!r} repeat a port: the launcher starts one replica per URL on this host "
            "(replicas on other hosts are started there, and listed here only for ragserve serve)"
        )
    return ports


def _replicas(spec: RunnerSpec, ports: Sequence[int]) -> list[RunnerSpec]:
    """``spec`` for its first port, and a copy of it for each further one."""
    return [spec, *(replace(spec, port=port, replica=i, args=list(spec.args), env=dict(spec.env),
                            requires=list(spec.requires), extra_args=list(spec.extra_args))
                    for i, port in enumerate(ports[1:], start=1))]


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM this runner when the launcher dies, so a killed
    launcher never leaves runners holding ports and memory."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class RunnerProcess:
    def __init__(self, spec: RunnerSpec, log_dir: Path) -> None:
        self.spec = spec
        self.log_path = log_dir / f"{spec.label}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        """How often the supervisor restarted it (:mod:`service.runners.supervisor`)."""

    def start(self, *, append_log: bool = False) -> None:
        for path in self.spec.requires:
            if not path.exists():
                raise RunnerStartError(
                    f"{self.spec.label} runner needs {path}, which is missing: run deploy/local/setup.sh "
                    "(or `python -m service.runners.vl_site install`)"
                )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab" if append_log else "wb")  # noqa: SIM115 - handed to the child, closed with it
        if append_log:  # a restart: the crashed run's log stays above
            log.write(f"\n--- ragserve: restarting the {self.spec.label} runner ---\n".encode())
            log.flush()
        self.process = subprocess.Popen(
            self.spec.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **self.spec.env}, start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        log.close()

    def wait_healthy(self, deadline: float, *, stop: threading.Event | None = None) -> None:
        assert self.process is not None
        while time.monotonic() < deadline:
            if stop is not None and stop.is_set():
                raise RunnerStartError(f"{self.spec.label} runner: stopped while starting")
            if self.process.poll() is not None:
                code = self.process.returncode
                raise RunnerStartError(f"{self.spec.label} runner exited ({code}):\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.spec.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if stop is not None:
                stop.wait(0.25)
            else:
                time.sleep(0.25)
        raise RunnerStartError(f"{self.spec.label} runner not healthy in time:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the runner's group and wait for it; SIGKILL what is still there after ``timeout_s`` (the
        server) or a few seconds more (a child such as the engine core, also when the server had died)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5.0
        while _group_alive(self.process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.kill_group(wait_s=5.0)

    def kill_group(self, wait_s: float = 10.0) -> None:
        """SIGKILL whatever is left of the runner's process group (its engine core after the server died) and
        wait, up to ``wait_s``, until none of it is alive, so a restart finds the memory and the port free."""
        if self.process is None:
            return
        pgid = self.process.pid  # start_new_session: the runner leads its own group
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=wait_s)
        deadline = time.monotonic() + wait_s
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _group_alive(pgid: int) -> bool:
    """Whether a live (not zombie) process of group ``pgid`` remains (Linux /proc; elsewhere: kill 0)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


@contextmanager
def running(
    specs: Sequence[RunnerSpec], *, log_dir: Path, timeout_s: float = 600.0, sequential: bool | None = None,
    check: bool = True,
) -> Iterator[list[RunnerProcess]]:
    """Start the runners, wait for their health, stop them on exit (:func:`service.runners.supervisor.supervised`
    also restarts one that exits meanwhile).

    First, unless ``check`` is off, every command line goes through vLLM's own parser
    (:func:`check_command_lines`), so a misspelt engine argument stops everything before anything starts.

    On a CPU host they start together (start-up is mostly imports, so it overlaps). On a GPU host they start
    one after another: two vLLM processes profiling one GPU at once mis-size each other's KV cache, since
    each sees the other's memory in flux (``--gpu-memory-utilization`` is a fraction of the whole GPU).
    """
    if sequential is None:
        sequential = not vllm_is_cpu_build()
    if check:
        check_command_lines(specs)
    processes = [RunnerProcess(s, log_dir) for s in specs]
    try:
        deadline = time.monotonic() + timeout_s
        for p in processes:
            p.start()
            if sequential:
                p.wait_healthy(deadline)
        for p in processes:
            p.wait_healthy(deadline)
        yield processes
    finally:
        for p in processes:
            p.stop()
