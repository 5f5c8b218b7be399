"""``DockerProvider`` against a real engine: the lifecycle contract kit, one container
for eight processes racing on one label set, the safe defaults, images that lack what the
SDK needs, and expiry (``ttl``, ``idle_timeout``, ``reap``)."""

from __future__ import annotations

import multiprocessing
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_sdk import Mount, errors, get_provider
from sandbox_sdk.providers.docker import DEFAULT_IMAGE, DockerProvider, sandbox_name
from sandbox_sdk.providers.docker.provider import EXPIRES_LABEL, KEPT_CAPABILITIES, WORKSPACE
from sandbox_sdk.testing import ProviderConformanceTests
from tests.cli.support import Sbx

pytestmark = pytest.mark.engines


class TestDockerProvider(ProviderConformanceTests):
    """Runs on the conftest's ``provider``."""


def test_registered_as_entry_point(docker_url: str) -> None:
    with get_provider("docker", base_url=docker_url) as provider:
        assert isinstance(provider, DockerProvider)


def test_an_engine_that_does_not_answer_is_said_at_construction(tmp_path: Path) -> None:
    with pytest.raises(errors.ProviderUnavailableError, match="cannot reach the container engine"):
        DockerProvider(base_url=f"unix://{tmp_path}/no-engine.sock")


def claim(url: str, labels: dict[str, str], start: multiprocessing.synchronize.Event) -> str:
    """One racer: wait for the start, then ``get_or_create`` by ``labels``."""
    start.wait()
    with DockerProvider(base_url=url) as provider:
        return provider.get_or_create(labels=labels).id


def test_eight_processes_get_or_create_one_container(docker_url: str, provider: DockerProvider) -> None:
    labels = {"race": secrets.token_hex(6)}
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        start = manager.Event()
        with context.Pool(8) as pool:
            pending = [pool.apply_async(claim, (docker_url, labels, start)) for _ in range(8)]
            start.set()
            ids = {result.get(timeout=300) for result in pending}
    try:
        assert len(ids) == 1
        assert [info.id for info in provider.list(labels=labels).items] == list(ids)
        assert provider.list(labels=labels).items[0].metadata["name"] == sandbox_name(labels)
    finally:
        for sandbox_id in ids:
            provider.delete(sandbox_id)


#: What a command sees of its confinement: its user, capabilities and no_new_privs, the
#: network devices, whether the root and the workspace take writes, the cgroup limits
#: (cgroups v1 paths, as the engines mount a container's own), and PID 1.
CONFINEMENT = (
    "id -un; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; ls /sys/class/net | tr '\\n' ' '; "
    "echo; touch /etc/probe 2>&1; touch /tmp/probe ./probe && echo writable; "
    "cd /sys/fs/cgroup; cat memory/memory.limit_in_bytes pids/pids.max cpu/cpu.cfs_quota_us; "
    "tr '\\0' ' ' </proc/1/cmdline"
)


def test_the_defaults_confine_the_container(module_provider: DockerProvider) -> None:
    """Checked from inside, where both engines must agree (they report them differently)."""
    with module_provider.create() as sandbox:
        seen = sandbox.execute(CONFINEMENT).output.splitlines()
    assert seen[0] == "sandbox"
    assert seen[1].split() == ["CapEff:", "0000000000000000"]  # a non-root user has none
    assert seen[2].split() == ["CapBnd:", format(_capability_mask(), "016x")]
    assert seen[3].split() == ["NoNewPrivs:", "1"]
    assert seen[4] == "lo "  # no network but loopback
    assert "Read-only file system" in seen[5] and seen[6] == "writable"
    assert seen[7:10] == [str(2 * 1024**3), "1024", "-1"]  # memory, processes, no CPU quota
    assert seen[10].endswith("-- sleep infinity ")  # an init (docker-init, podman-init) reaps orphans


def test_limits_and_network_are_options(module_provider: DockerProvider) -> None:
    """Limits are options; so is the network, whose modes are checked without making one
    (a bridge hands out addresses of a private range: the tests never use one)."""
    with module_provider.create(memory_bytes=256 * 1024**2, pids_limit=64, cpu=0.5) as sandbox:
        seen = sandbox.execute(CONFINEMENT).output.splitlines()
        assert seen[7:10] == [str(256 * 1024**2), "64", "50000"]  # half of each 100 ms period
        hog = sandbox.execute("python3 -c 'b = bytearray(512 * 1024 * 1024); print(len(b))'", timeout=60)
        assert hog.exit_code == 137  # killed by the memory limit
    for bad in ({"memory_bytes": 0}, {"pids_limit": "many"}, {"network": 3}, {"cpu": -1}, {"gpus": 1}):
        with pytest.raises(errors.InvalidArgumentError):
            module_provider.create(**bad)
    modes = {True: "bridge", False: "none", "sandboxes": "sandboxes"}
    for network, mode in modes.items():
        assert module_provider._host_options({"network": network})["network_mode"] == mode


@pytest.fixture(scope="module")
def derived_image(module_provider: DockerProvider) -> Iterator[object]:
    """Make images from the default one with a command run as root in it; removed afterwards."""
    client = module_provider.client
    made: list[str] = []

    def derive(script: str) -> str:
        tag = f"sandbox-sdk-test/derived:{secrets.token_hex(4)}"
        container = client.create_container(DEFAULT_IMAGE, entrypoint=["sh", "-c", script], user="0")["Id"]
        try:
            client.start(container)
            assert client.wait(container, timeout=60)["StatusCode"] == 0
            repository, _, version = tag.partition(":")
            client.commit(container, repository=repository, tag=version, changes=["USER sandbox"])
        finally:
            client.remove_container(container, force=True)
        made.append(tag)
        return tag

    yield derive
    for tag in made:
        client.remove_image(tag, force=True)


def test_an_image_without_python3_is_a_typed_error_naming_it(
    module_provider: DockerProvider, derived_image: object
) -> None:
    image = derived_image("rm -f /usr/bin/python3 /usr/bin/python3.*")  # type: ignore[operator]
    labels = {"missing": secrets.token_hex(4)}
    with pytest.raises(errors.InvalidArgumentError, match="lacks python3"):
        module_provider.create(labels=labels, image=image)
    assert module_provider.list(labels=labels).items == []  # rolled back


def test_a_missing_image_is_a_typed_error(module_provider: DockerProvider) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="never pulls"):
        module_provider.create(image="sandbox-sdk-test/no-such-image:1")


def test_the_workspace_goes_to_the_users_where_the_image_has_none(
    module_provider: DockerProvider, derived_image: object
) -> None:
    image = derived_image(f"rm -rf {WORKSPACE}")  # type: ignore[operator]
    with module_provider.create(image=image) as sandbox:
        assert sandbox.execute("stat -c %U .; touch made && echo ok").output == "sandbox\nok\n"


def test_a_user_override_runs_commands_as_that_user(docker_url: str) -> None:
    with DockerProvider(base_url=docker_url, user="root") as provider, provider.create() as sandbox:
        assert sandbox.execute("id -u; grep CapEff /proc/self/status").output.split() == [
            "0",
            "CapEff:",
            format(_capability_mask(), "016x"),
        ]


def _capability_mask() -> int:
    """The effective capability mask of :data:`KEPT_CAPABILITIES`."""
    bits = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7}
    bits["NET_BIND_SERVICE"] = 10
    return sum(1 << bits[name] for name in KEPT_CAPABILITIES)


def test_an_expired_ttl_is_not_found_and_removed(module_provider: DockerProvider) -> None:
    sandbox = module_provider.create(ttl=1)
    expires = float(module_provider.client.inspect_container(sandbox.id)["Config"]["Labels"][EXPIRES_LABEL])
    while time.time() < expires:  # the condition: the sandbox's deadline has passed
        time.sleep(0.05)
    with pytest.raises(errors.SandboxNotFoundError, match="expired"):
        module_provider.get(sandbox.id)
    assert sandbox.id not in [info.id for info in module_provider.iter_sandboxes()]


def test_reap_removes_idle_and_stopped_sandboxes_and_keeps_the_rest(module_provider: DockerProvider) -> None:
    kept = module_provider.create(idle_timeout=3600)
    idle = module_provider.create(idle_timeout=1)
    stopped = module_provider.create()
    try:
        used = time.time()
        idle.execute("true")
        module_provider.client.kill(stopped.id)
        while time.time() < used + 2.5:  # the condition: a full second idle past the timeout
            time.sleep(0.05)
        reaped = module_provider.reap()
        assert idle.id in reaped and stopped.id in reaped and kept.id not in reaped
        assert kept.execute("echo alive").output == "alive\n"
    finally:
        for sandbox in (kept, idle, stopped):
            module_provider.delete(sandbox.id)


def test_sbx_reap_removes_expired_containers(
    docker_url: str, module_provider: DockerProvider, tmp_path: Path
) -> None:
    """``sbx reap`` reaps on docker, as on the local providers (cloud platforms expire their own)."""
    sandbox = module_provider.create(ttl=1)
    expires = float(module_provider.client.inspect_container(sandbox.id)["Config"]["Labels"][EXPIRES_LABEL])
    while time.time() < expires:  # the condition: the sandbox's deadline has passed
        time.sleep(0.05)
    done = Sbx(tmp_path, "docker", env={"DOCKER_HOST": docker_url})("reap")
    assert sandbox.id in done.stdout.split()
    assert sandbox.id not in [info.id for info in module_provider.iter_sandboxes()]


def test_mounts_are_binds_read_only_or_shared(module_provider: DockerProvider, tmp_path: Path) -> None:
    """``mounts`` are engine binds (docs/policy.md): read-only refuses every
    change, read-write is shared both ways, unsafe targets are refused first."""
    skills, outputs = tmp_path / "skills", tmp_path / "outputs"
    skills.mkdir()
    outputs.mkdir()
    outputs.chmod(0o777)  # the image's user writes here
    (skills / "SKILL.md").write_text("how to\n")
    mounts = [
        Mount(source=str(skills), target="/mnt/skills"),
        Mount(source=str(outputs), target="/mnt/outputs", read_only=False),
    ]
    with module_provider.create(mounts=mounts) as sandbox:
        assert sandbox.read("/mnt/skills/SKILL.md").content == "how to\n"
        for change in ["echo x > /mnt/skills/SKILL.md", "touch /mnt/skills/new", "rm /mnt/skills/SKILL.md"]:
            assert sandbox.execute(change).exit_code != 0, change
        sandbox.write("/mnt/outputs/report.md", "done\n")
        assert (outputs / "report.md").read_text() == "done\n"
        (outputs / "from-host.txt").write_text("host\n")
        assert sandbox.execute("cat /mnt/outputs/from-host.txt").output == "host\n"
    assert (skills / "SKILL.md").read_text() == "how to\n"
    with pytest.raises(errors.InvalidPathError, match="would cover /etc"):
        module_provider.create(mounts=[Mount(source=str(skills), target="/etc/skills")])
