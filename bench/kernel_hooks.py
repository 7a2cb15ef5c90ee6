#!/usr/bin/env python3
"""Whether this kernel lets a BPF trampoline (fentry) attach to the TCP receive path: the hook
issue 15 would measure against sock_ops (a trampoline costs ~6-7 ns per trigger in the kernel's
own benchmarks; sock_ops' dispatch alone costs ~88 ns per run here). Loads the smallest possible
fentry program ("return 0") on `tcp_rcv_established` through the raw bpf() syscall, so no
toolchain or loader of ours is involved, attaches it for a moment and says what the kernel
answered. Run as root; prints JSON."""
import ctypes
import errno
import json
import os
import struct
import subprocess
import tempfile

SYS_BPF = 321  # x86-64
BPF_PROG_LOAD = 5
BPF_RAW_TRACEPOINT_OPEN = 17
BPF_PROG_TYPE_TRACING = 26
BPF_TRACE_FENTRY = 24
TARGET = "tcp_rcv_established"

_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd, attr):
    fd = _libc.syscall(SYS_BPF, cmd, attr, ctypes.sizeof(attr))
    return fd, ctypes.get_errno()


def btf_func_id(name):
    """The BTF type id of kernel function `name` (from bpftool's dump of vmlinux BTF)."""
    out = subprocess.run(["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux"],
                         capture_output=True, text=True, check=True).stdout
    needle = f"] FUNC '{name}' "
    for line in out.splitlines():
        if needle in line:
            return int(line[1:line.index("]")])
    return None


def lockdown():
    """The kernel lockdown mode (none, integrity, confidentiality), from securityfs: the one
    mounted, else one mounted for the moment in a directory of our own."""
    def read(path):
        with open(path) as f:
            text = f.read()
        return text[text.index("[") + 1:text.index("]")]
    try:
        return read("/sys/kernel/security/lockdown")
    except (OSError, ValueError):
        pass
    with tempfile.TemporaryDirectory(prefix="scaletrace-securityfs-") as mnt:
        if subprocess.run(["mount", "-t", "securityfs", "securityfs", mnt], capture_output=True).returncode:
            return "unknown (securityfs cannot be mounted)"
        try:
            return read(os.path.join(mnt, "lockdown"))
        except (OSError, ValueError):
            return "unknown (no lockdown in securityfs)"
        finally:
            subprocess.run(["umount", mnt], capture_output=True)


def probe_fentry():
    result = {"hook": f"fentry/{TARGET}", "lockdown": lockdown()}
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return {**result, "loads": False, "answer": "no kernel BTF"}
    btf_id = btf_func_id(TARGET)
    if btf_id is None:
        return {**result, "loads": False, "answer": f"{TARGET} is not in the kernel's BTF"}
    # r0 = 0; exit
    insns = ctypes.create_string_buffer(struct.pack("<BBhiBBhi", 0xb7, 0, 0, 0, 0x95, 0, 0, 0))
    license = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 16)
    attr = ctypes.create_string_buffer(144)
    # union bpf_attr, BPF_PROG_LOAD: prog_type, insn_cnt, insns, license, log_level, log_size,
    # log_buf ... expected_attach_type at 68, attach_btf_id at 108
    struct.pack_into("<IIQQIIQ", attr, 0, BPF_PROG_TYPE_TRACING, 2, ctypes.addressof(insns),
                     ctypes.addressof(license), 1, len(log), ctypes.addressof(log))
    struct.pack_into("<I", attr, 68, BPF_TRACE_FENTRY)
    struct.pack_into("<I", attr, 108, btf_id)
    prog, err = _bpf(BPF_PROG_LOAD, attr)
    if prog < 0:
        verifier = log.value.decode(errors="replace").strip().splitlines()
        return {**result, "loads": False,
                "answer": f"load refused: {errno.errorcode.get(err, err)} ({os.strerror(err)})"
                          + (f"; verifier: {verifier[-1]}" if verifier else "")}
    try:
        link_attr = ctypes.create_string_buffer(16)
        struct.pack_into("<QI", link_attr, 0, 0, prog)
        link, err = _bpf(BPF_RAW_TRACEPOINT_OPEN, link_attr)
        if link < 0:
            return {**result, "loads": True, "attaches": False,
                    "answer": f"loads, attach refused: {errno.errorcode.get(err, err)} ({os.strerror(err)})"}
        os.close(link)
        return {**result, "loads": True, "attaches": True, "answer": "loads and attaches"}
    finally:
        os.close(prog)


if __name__ == "__main__":
    print(json.dumps(probe_fentry(), indent=1))
