#!/usr/bin/env python3
"""Writes the handcrafted safetensors files in this folder (run from anywhere; stdlib only).

valid.safetensors is a well-formed file written independently of the C++ writer; every other
file breaks exactly one rule of the format (docs/checkpoint-format.md §4) and must be rejected by the
reader with the message fragment listed in tests/checkpoint/safetensors_test.cc.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def image(header, buffer=b"", n=None, pad=True):
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text) if n is None else n) + text + buffer


def f32(*xs):
    return struct.pack("<%df" % len(xs), *xs)


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


VALID_HEADER = {
    "__metadata__": {"format": "pt"},
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]},
    "c": {"dtype": "BF16", "shape": [2, 1], "data_offsets": [16, 20]},
}
VALID_BUFFER = f32(1.5, -2.0) + struct.pack("<q", -7) + struct.pack("<HH", 0x3F80, 0xC040)

write("valid.safetensors", image(VALID_HEADER, VALID_BUFFER))
# Header length field larger than the file.
write("bad_header_length.safetensors", image({"a": {"dtype": "U8", "shape": [0],
                                                     "data_offsets": [0, 0]}}, n=4096))
# Header length above the 100,000,000-byte cap.
write("header_too_large.safetensors", image({}, n=100_000_001))
write("offsets_out_of_bounds.safetensors",
      image({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, f32(1, 2)))
write("overlapping.safetensors",
      image({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, f32(1, 2, 3)))
write("gap.safetensors",
      image({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
             "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, f32(1, 2, 3)))
write("dtype_shape_mismatch.safetensors",
      image({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, f32(1, 2)))
write("unknown_dtype.safetensors",
      image({"a": {"dtype": "F12", "shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)))
write("duplicate_key.safetensors",
      image(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
            b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)))
write("truncated.safetensors", image(VALID_HEADER, VALID_BUFFER)[:-3])
write("non_object_json.safetensors", image(b"[1, 2, 3]"))
write("overflowing_shape.safetensors",
      image({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 16],
                   "data_offsets": [0, 0]}}))
