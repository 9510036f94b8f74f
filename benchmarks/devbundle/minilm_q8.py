"""Carry the packaged MiniLM embedder in 22 MB instead of 91 (fp32) or 45 (fp16).

pack SRC.safetensors OUT.safetensors: every 2-D float weight as int8 with one fp32 scale per row
(symmetric, max-abs / 127), everything else as fp16.
unpack IN.safetensors OUT.safetensors: back to fp32 (what sentence-transformers loads; the embeddings of
the de-quantised model agree with the original's to a cosine of about 0.999, plenty for a throughput check).
Needs only torch and safetensors (both on the GPU machine).
"""

import sys

import torch
from safetensors.torch import load_file, save_file

SCALE = ".__q8scale"


def pack(src: str, out: str) -> None:
    q = {}
    for k, v in load_file(src).items():
        if v.is_floating_point() and v.ndim == 2:
            s = v.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
            q[k] = torch.round(v.float() / s).clamp(-127, 127).to(torch.int8)
            q[k + SCALE] = s
        elif v.is_floating_point():
            q[k] = v.half()
        else:
            q[k] = v
    save_file(q, out, metadata={"format": "pt"})


def unpack(src: str, out: str) -> None:
    q = load_file(src)
    w = {}
    for k, v in q.items():
        if k.endswith(SCALE):
            continue
        if v.dtype == torch.int8 and k + SCALE in q:
            w[k] = (v.float() * q[k + SCALE]).contiguous()
        elif v.is_floating_point():
            w[k] = v.float().contiguous()
        else:
            w[k] = v
    save_file(w, out, metadata={"format": "pt"})


if __name__ == "__main__":
    {"pack": pack, "unpack": unpack}[sys.argv[1]](sys.argv[2], sys.argv[3])
