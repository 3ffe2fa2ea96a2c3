"""The ring-buffer record: decoder on fixed bytes, and the Python mirror against the compiled C header."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuslo.probes.ebpf import record
from gpuslo.probes.ebpf.record import RECORD_SIZE, CallRecord, RawRecord, decode_record

HEADER = Path(record.__file__).with_name("record.h")

# One record as the kernel writes it (little-endian): a 2 TiB cuMemAlloc_v2 failing with 2, nested at depth 1.
FIXED = bytes.fromhex(
    "efcdab8967452301"  # ts_ns 0x0123456789abcdef
    "d204000000000000"  # duration_ns 1234
    "0000000000020000"  # size 2 TiB
    "0000000000000000"  # out_value 0
    "39300000"          # pid 12345
    "3a300000"          # tid 12346
    "02000000"          # ret 2
    "00000000"          # func_id 0
    "01000000"          # depth 1
    "00000000"          # flags
) + b"python3".ljust(16, b"\0")


def test_decodes_fixed_bytes():
    assert decode_record(FIXED) == CallRecord(
        ts_ns=0x0123456789ABCDEF, duration_ns=1234, size=2 << 40, out_value=None, pid=12345, tid=12346,
        ret=2, func_id=0, depth=1, comm="python3")


def test_out_value_only_when_flagged_and_signed_codes():
    data = bytearray(FIXED)
    data[24:32] = (3).to_bytes(8, "little", signed=True)
    data[40:44] = (-1).to_bytes(4, "little", signed=True)
    data[52:56] = (record.FLAG_HAS_OUT).to_bytes(4, "little")
    decoded = decode_record(bytes(data))
    assert (decoded.out_value, decoded.ret) == (3, -1)


def test_full_comm_without_terminator_and_short_record():
    data = FIXED[:56] + b"abcdefghijklmnop"
    assert decode_record(data).comm == "abcdefghijklmnop"
    with pytest.raises(ValueError, match=f"record of 10 bytes, expected {RECORD_SIZE}"):
        decode_record(FIXED[:10])


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed on this machine")
def test_python_mirror_matches_compiled_header(tmp_path):
    fields = [name for name, _ in RawRecord._fields_]
    prints = "".join(f'printf("{f} %zu\\n", offsetof(struct gs_record, {f}));' for f in fields)
    src = tmp_path / "layout.c"
    src.write_text(f'#include <stdio.h>\n#include <stddef.h>\n#include <linux/types.h>\n#include "{HEADER}"\n'
                   f'int main(void) {{ {prints} printf("size %zu\\n", sizeof(struct gs_record)); return 0; }}\n')
    subprocess.run(["gcc", "-o", str(tmp_path / "layout"), str(src)], check=True)
    out = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout
    expected = [f"{f} {getattr(RawRecord, f).offset}" for f in fields] + [f"size {ctypes.sizeof(RawRecord)}"]
    assert out.split("\n")[:-1] == expected
