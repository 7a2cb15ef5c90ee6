#!/usr/bin/env python3
"""Small BPF programs loaded through the raw bpf() syscall, so no toolchain or loader of ours is
involved: the instruction encoders and loaders `bench/ack_parts.py` builds its per-ACK pieces
with, and (run as a script) whether this kernel lets a BPF trampoline (fentry) attach to the
TCP receive path, the hook issue 15 would measure against sock_ops (a trampoline costs ~6-7 ns
per trigger in the kernel's own benchmarks). The script loads the smallest possible fentry
program ("return 0") on `tcp_rcv_established`, attaches it for a moment and says what the
kernel answered. Run as root; prints JSON."""
import ctypes
import errno
import json
import os
import struct
import subprocess
import tempfile

SYS_BPF = 321  # x86-64
BPF_MAP_CREATE = 0
BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_DETACH = 9
BPF_RAW_TRACEPOINT_OPEN = 17
BPF_BTF_LOAD = 18
BPF_PROG_TYPE_SOCK_OPS = 13
BPF_PROG_TYPE_RAW_TRACEPOINT = 17
BPF_PROG_TYPE_TRACING = 26
BPF_MAP_TYPE_HASH = 1
BPF_MAP_TYPE_SK_STORAGE = 24
BPF_CGROUP_SOCK_OPS = 3
BPF_F_ALLOW_MULTI = 2
BPF_F_NO_PREALLOC = 1
BPF_TRACE_FENTRY = 24
TARGET = "tcp_rcv_established"

_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(cmd, attr):
    fd = _libc.syscall(SYS_BPF, cmd, attr, ctypes.sizeof(attr))
    return fd, ctypes.get_errno()


def _checked(cmd, attr, log=None):
    """bpf(cmd, attr), raising BpfError (with the verifier's last line, when `log` has one)."""
    fd, err = _bpf(cmd, attr)
    if fd < 0:
        last = log.value.decode(errors="replace").strip().splitlines()[-1:] if log is not None else []
        raise BpfError(err, last[0] if last else None)
    return fd


class BpfError(OSError):
    """A refused bpf() call: its errno, and the verifier's last line when it has one."""

    def __init__(self, err, verifier=None):
        super().__init__(err, os.strerror(err) + (f"; verifier: {verifier}" if verifier else ""))
        self.verifier = verifier

    def answer(self):
        """`EPERM (Operation not permitted)`, and the verifier's line after it."""
        return (f"{errno.errorcode.get(self.errno, self.errno)} ({os.strerror(self.errno)})"
                + (f"; verifier: {self.verifier}" if self.verifier else ""))


# Instruction encoders: `struct bpf_insn` is code, dst and src registers (4 bits each), a 16-bit
# offset and a 32-bit immediate. Only what the per-ACK pieces use.
def insn(code, dst=0, src=0, off=0, imm=0):
    return struct.pack("<BBhi", code, dst | (src << 4), off, imm)


def mov_imm(dst, imm):
    return insn(0xb7, dst, imm=imm)


def mov(dst, src):
    return insn(0xbf, dst, src)


def add_imm(dst, imm):
    return insn(0x07, dst, imm=imm)


def load64(dst, src, off):
    return insn(0x79, dst, src, off)


def store64(dst, off, src):
    return insn(0x7b, dst, src, off)


def store64_imm(dst, off, imm):
    return insn(0x7a, dst, off=off, imm=imm)


def call(helper):
    return insn(0x85, imm=helper)


def jump_if_not(reg, imm, skip):
    """Skip `skip` instructions unless reg == imm."""
    return insn(0x55, reg, off=skip, imm=imm)


def jump(skip):
    return insn(0x05, off=skip)


def load_map(dst, map_fd):
    """The two-slot instruction that puts a map (by fd, resolved at load) into `dst`."""
    return insn(0x18, dst, 1, imm=map_fd) + insn(0)


def exit_with(value):
    return mov_imm(0, value) + insn(0x95)


def count(code):
    return len(code) // 8


def load_program(prog_type, code, name, attach_type=0, attach_btf_id=0):
    """Loads `code` (GPL) as a program of `prog_type` (a tracing one: for `attach_type` on the
    kernel function of BTF id `attach_btf_id`); returns its fd."""
    insns = ctypes.create_string_buffer(code, len(code))
    license = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 16)
    attr = ctypes.create_string_buffer(144)
    struct.pack_into("<IIQQIIQ", attr, 0, prog_type, count(code), ctypes.addressof(insns),
                     ctypes.addressof(license), 1, len(log), ctypes.addressof(log))
    struct.pack_into("16s", attr, 48, name.encode())  # prog_name
    struct.pack_into("<I", attr, 68, attach_type)  # expected_attach_type
    struct.pack_into("<I", attr, 108, attach_btf_id)
    return _checked(BPF_PROG_LOAD, attr, log)


def create_map(map_type, key_size, value_size, max_entries, flags, btf=None):
    """A map; `btf` = (btf fd, key type id, value type id) where the map type needs one."""
    attr = ctypes.create_string_buffer(72)
    struct.pack_into("<IIIII", attr, 0, map_type, key_size, value_size, max_entries, flags)
    if btf:
        struct.pack_into("<III", attr, 48, *btf)
    return _checked(BPF_MAP_CREATE, attr)


def load_int_btf(value_size):
    """BTF for a socket-storage map: type 1 `int` (its key must be a 32-bit int) and type 3 an
    array of `value_size` / 8 `u64`s (its value)."""
    strings = b"\0int\0u64\0"
    kind_int, kind_array = 1 << 24, 3 << 24
    types = struct.pack("<IIII", 1, kind_int, 4, (1 << 24) | 32)  # 1: int, signed, 32 bits
    types += struct.pack("<IIII", 5, kind_int, 8, 64)  # 2: u64, unsigned, 64 bits
    types += struct.pack("<IIIIII", 0, kind_array, 0, 2, 1, value_size // 8)  # 3: u64[n]
    blob = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings)) + types + strings
    buf = ctypes.create_string_buffer(blob, len(blob))
    log = ctypes.create_string_buffer(4096)
    attr = ctypes.create_string_buffer(40)
    struct.pack_into("<QQIII", attr, 0, ctypes.addressof(buf), ctypes.addressof(log), len(blob), len(log), 1)
    return _checked(BPF_BTF_LOAD, attr, log)


def cgroup_attach(prog_fd, cgroup_fd, attach_type, flags):
    attr = ctypes.create_string_buffer(20)
    struct.pack_into("<IIII", attr, 0, cgroup_fd, prog_fd, attach_type, flags)
    _checked(BPF_PROG_ATTACH, attr)


def cgroup_detach(prog_fd, cgroup_fd, attach_type):
    attr = ctypes.create_string_buffer(20)
    struct.pack_into("<IIII", attr, 0, cgroup_fd, prog_fd, attach_type, 0)
    _checked(BPF_PROG_DETACH, attr)


def raw_tracepoint_open(prog_fd, name=None):
    """Attaches a raw tracepoint program to tracepoint `name` (a tracing program, None: to the
    function it was loaded for); the returned link fd holds it until closed."""
    tp = ctypes.create_string_buffer(name.encode()) if name else None
    attr = ctypes.create_string_buffer(16)
    struct.pack_into("<QI", attr, 0, ctypes.addressof(tp) if tp else 0, prog_fd)
    return _checked(BPF_RAW_TRACEPOINT_OPEN, attr)


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
    try:
        prog = load_program(BPF_PROG_TYPE_TRACING, exit_with(0), "", BPF_TRACE_FENTRY, btf_id)
    except BpfError as e:
        return {**result, "loads": False, "answer": f"load refused: {e.answer()}"}
    try:
        os.close(raw_tracepoint_open(prog))
        return {**result, "loads": True, "attaches": True, "answer": "loads and attaches"}
    except BpfError as e:
        return {**result, "loads": True, "attaches": False, "answer": f"loads, attach refused: {e.answer()}"}
    finally:
        os.close(prog)


if __name__ == "__main__":
    print(json.dumps(probe_fentry(), indent=1))
