"""Long ioctls by the device they go to (a real BPF program, a real loop block device): an ioctl on an NVIDIA
device file (/dev/nvidia*) is the driver's share, an ioctl on any other file is the kernel's, and the evidence
names the file. The NVIDIA file is a device node made with mknod for the loop device's numbers, so the same
slow ioctl (BLKFLSBUF after 64 MiB written: tens of ms) reaches the kernel through both names."""

from __future__ import annotations

import os
import subprocess

import pytest
from bpf_support import requires_bpf
from ebpf_support import watch_child_step

from gpuslo.probes.attribution.collector import IOCTL, SYSCALL, Record, to_interval

CHILD = r"""
import ctypes, fcntl, os, sys, time
ctypes.CDLL(None).prctl(15, b"gs-engine", 0, 0, 0)
fds = [os.open(path, os.O_RDWR) for path in sys.argv[1:]]
print("ready", flush=True); sys.stdin.readline()
block = os.urandom(1 << 20)
for fd in fds:
    os.lseek(fd, 0, 0)
    for _ in range(64):
        os.write(fd, block)
    fcntl.ioctl(fd, 0x1261, 0)                  # BLKFLSBUF: writes the 64 MiB back, then drops the buffers
time.sleep(0.6)                                 # fds still open while the ring buffer is read
print("done", flush=True)
"""


@pytest.fixture
def two_names_of_one_device(tmp_path):
    image = tmp_path / "loop.img"
    image.write_bytes(b"")
    os.truncate(image, 256 << 20)
    loop = subprocess.run(["losetup", "--find", "--show", str(image)], check=True, capture_output=True,
                          text=True).stdout.strip()
    nvidia = f"/dev/nvidia-gpuslo-test-{os.getpid()}"
    try:
        os.mknod(nvidia, 0o600 | 0o060000, os.stat(loop).st_rdev)  # S_IFBLK, the loop device's numbers
        yield nvidia, loop
    finally:
        if os.path.exists(nvidia):
            os.unlink(nvidia)
        subprocess.run(["losetup", "--detach", loop], check=False)


@requires_bpf
def test_an_ioctl_on_an_nvidia_device_is_the_drivers_and_on_another_file_the_kernels(two_names_of_one_device,
                                                                                      fake_build):
    nvidia, loop = two_names_of_one_device
    step = watch_child_step(fake_build.lib, CHILD, nvidia, loop)
    assert step.drained.reply == "done\n"
    ioctls = [(i.kind, i.detail) for i in step.drained.found if i.pid == step.pid and "ioctl" in i.detail]
    assert ("ioctl", f"ioctl on {nvidia}") in ioctls, ioctls
    assert ("syscall", f"ioctl on {loop}") in ioctls, ioctls
    assert len(ioctls) == 2, ioctls


def test_an_ioctl_record_is_named_by_the_file_its_fd_names():
    def record(fd: int) -> Record:
        return Record(kind=SYSCALL, arg=IOCTL | fd << 32, pid=4242, start_ns=0, end_ns=5_000_000)

    paths = {(4242, 7): "/dev/nvidiactl", (4242, 8): "/dev/nvidia-uvm", (4242, 9): "/dev/pts/3"}.get
    assert (to_interval(record(7), lambda p, f: paths((p, f))).kind,
            to_interval(record(7), lambda p, f: paths((p, f))).detail) == ("ioctl", "ioctl on /dev/nvidiactl")
    assert to_interval(record(8), lambda p, f: paths((p, f))).kind == "ioctl"
    other = to_interval(record(9), lambda p, f: paths((p, f)))
    assert (other.kind, other.detail) == ("syscall", "ioctl on /dev/pts/3")
    closed = to_interval(record(10), lambda p, f: paths((p, f)))  # closed before the record was read
    assert (closed.kind, closed.detail) == ("ioctl", "ioctl (fd 10)")
    write = to_interval(Record(kind=SYSCALL, arg=1, pid=4242, start_ns=0, end_ns=5_000_000))
    assert (write.kind, write.detail) == ("syscall", "write")
