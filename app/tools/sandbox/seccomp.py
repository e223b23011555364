"""The sandbox's seccomp filter: a classic-BPF program, assembled here, that bwrap installs.

No library: ``libseccomp``'s Python bindings need the C library and Debian's package, which the
virtualenv does not see. The program is small enough to assemble by hand (``struct sock_filter``
is four fields), and :func:`deny_program` is the whole of it.

What it refuses, with ``EPERM``: creating or entering namespaces (``unshare``, ``setns``, and
``clone`` with any ``CLONE_NEW*`` flag), mounting (``mount``, ``umount2``, ``pivot_root``, the
new mount API), ``ptrace`` and reading other processes' memory, the kernel keyring, ``bpf``,
``perf_event_open``, ``userfaultfd``, ``io_uring``, module and kexec loading, and a few
host-wide knobs (``reboot``, ``swapon``, ``sethostname``, ``syslog``, ``acct``, ``quotactl``).
``clone3`` answers ``ENOSYS``, so the C library falls back to ``clone``, whose flags the filter
can read (``clone3`` keeps them in memory it cannot). A call from another ABI (x32, or a 32-bit
``int 0x80`` call) kills the process. Only x86-64 has a table here; elsewhere
:func:`deny_program` is None and the sandbox runs without a filter (the README says so).
"""

from __future__ import annotations

import errno
import os
import platform
import struct

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000

_OFFSET_NR = 0
_OFFSET_ARCH = 4
_OFFSET_ARG0_LOW = 16  # args[0], low 32 bits (little endian): where clone's flags are

CLONE_NEW_FLAGS = (
    0x00000080  # CLONE_NEWTIME
    | 0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)

X86_64_DENIED = {
    "ptrace": 101, "syslog": 103, "pivot_root": 155, "acct": 163, "mount": 165, "umount2": 166,
    "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171,
    "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176, "quotactl": 179,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313,
    "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
}  # fmt: skip
"""Refused syscalls and their x86-64 numbers (``arch/x86/entry/syscalls/syscall_64.tbl``)."""

_X86_64_CLONE = 56
_X86_64_CLONE3 = 435


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def deny_program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture (``struct sock_filter[]``); None: no table."""
    if (machine or platform.machine()) not in ("x86_64", "AMD64"):
        return None
    errno_eperm = _op(_RET_K, _RET_ERRNO | errno.EPERM)
    program = [
        _op(_LD_W_ABS, _OFFSET_ARCH),
        _op(_JEQ_K, _AUDIT_ARCH_X86_64, jt=1),  # another ABI (int 0x80): kill
        _op(_RET_K, _RET_KILL_PROCESS),
        _op(_LD_W_ABS, _OFFSET_NR),
        _op(_JGE_K, _X32_SYSCALL_BIT, jf=1),  # x32: kill
        _op(_RET_K, _RET_KILL_PROCESS),
        _op(_JEQ_K, _X86_64_CLONE3, jf=1),
        _op(_RET_K, _RET_ERRNO | errno.ENOSYS),
        _op(_JEQ_K, _X86_64_CLONE, jf=4),
        _op(_LD_W_ABS, _OFFSET_ARG0_LOW),
        _op(_JSET_K, CLONE_NEW_FLAGS, jf=1),
        errno_eperm,
        _op(_RET_K, _RET_ALLOW),
    ]
    for number in sorted(X86_64_DENIED.values()):
        program += [_op(_JEQ_K, number, jf=1), errno_eperm]
    program.append(_op(_RET_K, _RET_ALLOW))
    return b"".join(program)


def program_fd(program: bytes | None) -> int | None:
    """A pipe's read end holding ``program`` whole (a filter is far below a pipe's buffer)."""
    if program is None:
        return None
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)
    finally:
        os.close(write_end)
    return read_end
