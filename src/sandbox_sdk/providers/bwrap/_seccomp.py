"""The jail's seccomp filter: system calls that have no place in sandboxed
code answer EPERM, after Docker's default profile.

Docker's profile (github.com/moby/profiles, ``seccomp/default.json`` at
commit cd3bed8061c7b7378b61fc6827c7885779417a75, vendored in moby/moby as
``vendor/github.com/moby/profiles/seccomp/default.json``; line numbers below
are that file's) is an allow-list: everything not listed answers EPERM
(lines 2-3), 361 calls are allowed (lines 62-427), and some more only with a
capability (lines 622-873). This filter is the complement, a deny-list of
what that profile refuses a container without capabilities: a jail never has
any, so that is what remains reachable, and a deny-list does not break
programs using calls newer than the list. docs/bwrap.md says where it
differs from Docker and why.

libseccomp (``libseccomp.so.2``, behind Docker's and Flatpak's filters too)
compiles the rules to classic BPF for this machine's architecture; a call of
any other ABI (32-bit x86 or x32 on x86_64, 32-bit ARM on aarch64) kills the
process. Its own Python bindings exist only as distribution packages for the
system Python (Debian's python3-seccomp), and PyPI's ctypes port (pyseccomp)
has had no release since 2021 and no type hints, so the six functions
needed are bound here.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import tempfile

from sandbox_sdk import errors

log = logging.getLogger(__name__)

#: Denied with EPERM, by what they would reach: each is missing from the
#: profile's allow-list, and some it allows with a capability (lines 622-873).
#: Names an architecture lacks (``umount``, ``stime`` on 64-bit machines)
#: are skipped there.
DENIED_SYSCALLS = {
    "kernel keyrings: the caller's session keyring, other jails' keys": ("add_key", "keyctl", "request_key"),
    "new namespaces, or entering another's (clone: by its flags, below)": ("unshare", "setns"),
    "mounts and the root directory": (
        *("mount", "umount", "umount2", "pivot_root", "chroot", "mount_setattr"),
        *("move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick"),
    ),
    "kernel code, the machine and its clock": (
        *("init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load"),
        *("reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup"),
        *("settimeofday", "clock_settime", "stime", "sethostname", "setdomainname", "iopl", "ioperm"),
        *("lookup_dcookie", "_sysctl", "uselib", "sysfs", "ustat"),
    ),
    "kernel attack surface open without privileges": (
        *("bpf", "perf_event_open", "userfaultfd", "open_by_handle_at", "fanotify_init"),
        *("io_uring_setup", "io_uring_enter", "io_uring_register"),
    ),
    "other processes' descriptors and memory (ptrace itself stays allowed)": (
        "kcmp",
        "pidfd_getfd",
        "process_madvise",
    ),
    "NUMA memory placement": (
        *("get_mempolicy", "set_mempolicy", "set_mempolicy_home_node", "mbind"),
        *("migrate_pages", "move_pages"),
    ),
}
#: ``clone`` making any new namespace (CLONE_NEWNS, NEWCGROUP, NEWUTS,
#: NEWIPC, NEWUSER, NEWPID, NEWNET): Docker allows clone only when
#: ``flags & 0x7E020000 == 0`` (lines 669-715; flags are the second argument
#: on s390).
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
#: ``socket`` families Docker refuses (lines 439-477): AF_ALG (the kernel's
#: crypto API) and AF_VSOCK (sockets to the hypervisor, which a network
#: namespace does not cut off).
DENIED_SOCKET_FAMILIES = (38, 40)

# libseccomp's constants (seccomp.h)
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_FLTATR_ACT_BADARCH = 2
SCMP_CMP_MASKED_EQ = 7
NR_SCMP_ERROR = -1
LIBRARY = "libseccomp.so.2"
INSTALL_HINT = (
    "libseccomp builds the bwrap jail's seccomp filter: install it "
    "(Debian/Ubuntu: `apt-get install libseccomp2`; Fedora: `dnf install libseccomp`)"
)


def errno_action(code: int) -> int:
    """``SCMP_ACT_ERRNO(code)``: the call fails with errno ``code``."""
    return 0x00050000 | (code & 0xFFFF)


class _ArgCmp(ctypes.Structure):
    """``struct scmp_arg_cmp``: one condition on one argument."""

    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


@functools.cache
def _libseccomp() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(LIBRARY)
    except OSError as exc:
        raise errors.ProviderUnavailableError(f"{INSTALL_HINT} ({exc})") from exc
    lib.seccomp_init.argtypes = (ctypes.c_uint32,)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_release.argtypes = (ctypes.c_void_p,)
    lib.seccomp_release.restype = None
    lib.seccomp_attr_set.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32)
    lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    lib.seccomp_rule_add_array.argtypes = (
        *(ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int),
        *(ctypes.c_uint, ctypes.POINTER(_ArgCmp)),
    )
    lib.seccomp_export_bpf.argtypes = (ctypes.c_void_p, ctypes.c_int)
    return lib


def syscall_number(name: str) -> int:
    """The number of system call ``name`` on this machine."""
    number = int(_libseccomp().seccomp_syscall_resolve_name(name.encode()))
    if number < 0:
        raise errors.ProviderUnavailableError(f"libseccomp knows no system call {name!r} on this machine")
    return number


@functools.cache
def denied_numbers() -> dict[str, int]:
    """``DENIED_SYSCALLS`` that exist here, by name. One the installed
    libseccomp does not know (newer than it) cannot be filtered: logged."""
    lib = _libseccomp()
    numbers: dict[str, int] = {}
    for names in DENIED_SYSCALLS.values():
        for name in names:
            number = int(lib.seccomp_syscall_resolve_name(name.encode()))
            if number == NR_SCMP_ERROR:
                log.warning("libseccomp does not know the system call %s: the jail cannot deny it", name)
            elif number >= 0:  # a negative pseudo-number: no such call on this architecture
                numbers[name] = number
    return numbers


Rule = tuple[int, int, "_ArgCmp | None"]
"""What a call answers (an errno), its number, and a condition on one argument."""


def filter_rules() -> list[Rule]:
    """Every rule of the filter."""
    rules: list[Rule] = [(errno.EPERM, number, None) for number in denied_numbers().values()]
    clone, flags = syscall_number("clone"), 1 if os.uname().machine.startswith("s390") else 0
    rules += [(errno.EPERM, clone, _ArgCmp(flags, SCMP_CMP_MASKED_EQ, f, f)) for f in CLONE_NAMESPACE_FLAGS]
    # glibc and musl fall back to clone when clone3 is missing; Docker answers ENOSYS too (lines 716-727)
    rules.append((errno.ENOSYS, syscall_number("clone3"), None))
    # the family is an int: the kernel ignores the upper half of the register, so must the rule
    family = [_ArgCmp(0, SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, f) for f in DENIED_SOCKET_FAMILIES]
    rules += [(errno.EPERM, syscall_number("socket"), condition) for condition in family]
    return rules


@functools.cache
def deny_filter() -> bytes:
    """The filter as a BPF program, as ``bwrap --seccomp`` reads it."""
    lib = _libseccomp()
    context = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not context:
        raise errors.ProviderUnavailableError("libseccomp could not start a filter")
    try:
        _check(lib.seccomp_attr_set(context, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS))
        for code, number, condition in filter_rules():
            conditions = None if condition is None else (_ArgCmp * 1)(condition)
            count = 0 if condition is None else 1
            _check(lib.seccomp_rule_add_array(context, errno_action(code), number, count, conditions))
        with tempfile.TemporaryFile() as program:
            _check(lib.seccomp_export_bpf(context, program.fileno()))
            program.seek(0)
            return program.read()
    finally:
        lib.seccomp_release(context)


def _check(result: int) -> None:
    if result < 0:
        raise errors.ProviderUnavailableError(
            f"libseccomp could not build the jail's seccomp filter: {os.strerror(-result)}"
        )


#: Loads a filter and executes the rest of its command line: ``perl -e LOADER
#: FD PRCTL command...`` reads the BPF program from descriptor FD and installs
#: it with ``prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)`` (system call number
#: PRCTL), which needs no_new_privs set. As root, the jail's command makes
#: its own user namespace after bwrap has started it, so bwrap cannot load a
#: filter refusing that; this runs after. perl (perl-base, essential on
#: Debian and Ubuntu) starts several times faster than python3 with ctypes.
LOADER = (
    "my ($fd, $prctl) = map { $_ + 0 } splice @ARGV, 0, 2;"
    'open my $in, "<&=", $fd or die "seccomp filter: $!\\n";'
    "binmode $in; local $/; my $bpf = <$in>; close $in;"
    'syscall($prctl, 22, 2, pack("S x![P] P", length($bpf) / 8, $bpf)) == 0 or die "seccomp filter: $!\\n";'
    'exec { $ARGV[0] } @ARGV or die "$ARGV[0]: $!\\n";'
)


def loader_args(fd: int) -> list[str]:
    """``perl`` arguments that load the filter read from ``fd`` and execute
    what follows them."""
    return ["-e", LOADER, str(fd), str(syscall_number("prctl"))]
