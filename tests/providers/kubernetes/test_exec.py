"""Pod exec on the real 1.20 cluster: the protocol it speaks, and each known pitfall of
exec through the official client handled (output decoded once, large commands staged,
the timeout enforced in the pod, calls from many threads at once)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from sandbox_sdk import errors
from sandbox_sdk.providers.kubernetes import KubernetesProvider, KubernetesSandbox, _exec
from sandbox_sdk.providers.kubernetes.sandbox import ARGV_COMMAND_BYTES

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def sandbox(module_provider: KubernetesProvider) -> Iterator[KubernetesSandbox]:
    with module_provider.create(labels={"suite": "exec"}) as made:
        yield made


def test_the_cluster_speaks_v4_and_the_client_falls_back_to_it(sandbox: KubernetesSandbox) -> None:
    """1.20 predates v5 (Kubernetes 1.29+): offered both, it picks v4."""
    assert sandbox.execute("echo hi").output == "hi\n"
    assert sandbox.protocol == _exec.V4_PROTOCOL


def test_a_server_without_v5_refuses_a_client_offering_only_v5(
    module_provider: KubernetesProvider, sandbox: KubernetesSandbox
) -> None:
    only_v5 = KubernetesSandbox(
        module_provider.configuration,
        module_provider.namespace,
        sandbox.pod,
        sandbox_id=sandbox.id,
        protocols=(_exec.V5_PROTOCOL,),
    )
    with pytest.raises(errors.SandboxError):
        only_v5.execute("true")


def test_multibyte_output_split_across_frames_is_decoded_once(sandbox: KubernetesSandbox) -> None:
    """Half a megabyte of two-byte characters after one odd byte: the stream's frames cut
    characters in half, and the output is still exact."""
    result = sandbox.execute("python3 -c \"import sys; sys.stdout.write('a' + 'é' * 250000)\"")
    assert result.output == "a" + "é" * 250000


def test_a_long_command_is_staged_over_stdin_intact(sandbox: KubernetesSandbox) -> None:
    """Past the argument limit a command goes over stdin in 1 MiB messages, and the
    runner reads exactly its bytes (v4 cannot close stdin)."""
    data = secrets.token_hex(1536 * 1024)  # 3 MiB of text
    command = f"sha256sum <<'END'\n{data}\nEND"
    assert len(command) > ARGV_COMMAND_BYTES
    result = sandbox.execute(command)
    assert result.exit_code == 0
    assert result.output.split()[0] == hashlib.sha256(f"{data}\n".encode()).hexdigest()


def test_the_timeout_kills_the_command_and_what_it_started(sandbox: KubernetesSandbox) -> None:
    tag = secrets.token_hex(4)
    result = sandbox.execute(f"bash -c 'exec -a sbx-orphan-{tag} sleep 60' & echo started; wait", timeout=1)
    assert result.timed_out and result.exit_code == 124 and result.output == "started\n"
    # Processes whose argv[0] is the orphan's, read by the probe's shell itself (a grep for it
    # would find its own command line).
    probe = (
        f'n=0; for f in /proc/[0-9]*/cmdline; do IFS= read -r -d "" a <"$f" 2>/dev/null;'
        f' [ "$a" = sbx-orphan-{tag} ] && n=$((n + 1)); done; echo $n'
    )
    assert sandbox.execute(probe).output == "0\n"


def test_exit_statuses_and_signals(sandbox: KubernetesSandbox) -> None:
    assert sandbox.execute("exit 7").exit_code == 7
    assert sandbox.execute("kill -TERM $$").exit_code == 128 + 15
    assert sandbox.execute("echo out; echo err >&2").output == "out\nerr\n"


def test_calls_from_many_threads_at_once(sandbox: KubernetesSandbox) -> None:
    """Each call opens its own connection: nothing of the client is shared between calls."""
    with ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(lambda n: sandbox.execute(f"echo {n}").output, range(32)))
    assert outputs == [f"{n}\n" for n in range(32)]


def test_a_deleted_pod_is_not_found(module_provider: KubernetesProvider) -> None:
    made = module_provider.create()
    module_provider.delete(made.id)
    with pytest.raises(errors.SandboxNotFoundError):
        module_provider.get(made.id)
    with pytest.raises(errors.SandboxNotFoundError):
        made.execute("true")
