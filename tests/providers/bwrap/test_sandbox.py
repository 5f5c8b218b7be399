"""The sandbox conformance kit against the bubblewrap provider's sandboxes."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator

import pytest

from sandbox_sdk import BaseSandbox, ResourceLimits
from sandbox_sdk.providers.bwrap import BwrapProvider
from sandbox_sdk.testing import SandboxConformanceTests, provided_sandbox

GiB = 1024**3


class TestBwrapSandbox(SandboxConformanceTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls, module_provider: BwrapProvider) -> Iterator[BaseSandbox]:
        yield from provided_sandbox(module_provider, "conformance")


#: Reserve address space as a JVM does (heap plus 1 GiB of class space), never touching it.
RESERVE = (
    "python3 -c 'import mmap, sys; "
    "mmap.mmap(-1, int(sys.argv[1]), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ); "
    'print("reserved")\' {}'
)


def test_default_limits_let_a_runtime_reserve_what_a_jvm_does(module_provider: BwrapProvider) -> None:
    """The old 2 GiB address-space default stopped the JVM at start-up ("Could
    not allocate compressed class space"); the limit still holds beyond 8 GiB."""
    assert ResourceLimits().memory_bytes == 8 * GiB
    with module_provider.create() as sandbox:
        assert sandbox.execute(RESERVE.format(5 * GiB)).output == "reserved\n"
        beyond = sandbox.execute(RESERVE.format(9 * GiB))
        assert beyond.exit_code == 1 and "Cannot allocate memory" in beyond.output
    with module_provider.create(limits=ResourceLimits(memory_bytes=2 * GiB)) as small:
        assert "Cannot allocate memory" in small.execute(RESERVE.format(3 * GiB)).output


DIGEST_JAVA = """
import java.security.MessageDigest;
public class Digest {
    public static void main(String[] args) throws Exception {
        byte[] sum = MessageDigest.getInstance("SHA-256").digest("sandbox".getBytes("UTF-8"));
        System.out.println(String.format("%02x%02x", sum[0], sum[1]));
    }
}
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="no Java on this machine")
def test_java_finds_its_security_configuration(module_provider: BwrapProvider) -> None:
    """Debian's OpenJDK keeps java.security under /etc/java-*, linked from
    /usr/lib/jvm; without it the JVM cannot load any security provider."""
    with module_provider.create() as sandbox:
        sandbox.write("Digest.java", DIGEST_JAVA)
        response = sandbox.execute("java Digest.java", timeout=120)
    assert (response.exit_code, response.output) == (0, hashlib.sha256(b"sandbox").hexdigest()[:4] + "\n")


def test_a_read_only_scratch_directory_runs_each_script_from_its_command(
    module_provider: BwrapProvider,
) -> None:
    """Nothing can be installed on the jail's read-only ``/usr`` (EROFS, even
    for the jail's root): every operation still works, its script run from
    the command each time (docs/protocol.md)."""
    with module_provider.create() as sandbox:
        sandbox.scratch_dir = "/usr"
        for _ in range(2):
            sandbox.write("a.txt", "text\n", overwrite=True)
            assert sandbox.read("a.txt").content == "text\n"
            assert [e.name for e in sandbox.ls(".")] == ["a.txt"]
        check = sandbox.execute("mkdir /usr/probe; ls -a /usr | grep -c sbx-scripts")
        assert "Read-only file system" in check.output and check.output.split()[-1] == "0"
