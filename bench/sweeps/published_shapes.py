"""`size --model` on each new arch's full published shape against the arithmetic from that shape (issue 49).

    python -m bench.sweeps.published_shapes [--dir /tmp/shardscope-published] [--device laptop-16gb]

For Kimi K3, DeepSeek-V4-Flash and Qwen3.5-35B-A3B: writes the header-only GGUF of the published
shape (engine/synth/synth_published.py: tensor table at the real widths, the data section a hole),
runs `shardscope size --model` on it in its own process and reads the bytes a token touches from its
output; beside it, the same figure from the config numbers alone (written out below, per layer kind:
weights x bytes per weight of the file's types — Q8_0 34/32 B, MXFP4 17/32 B, Q4_K 144/256 B, Q6_K
210/256 B, F32 4 B — norms and the few-element vectors left out, the embedding and output head
counted whole as `size` counts globals). Prints the docs/architectures.md table; exit 1 if any row is
off by more than 2 %.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

Q8, MX, Q4K, Q6K, F32 = 34 / 32, 17 / 32, 144 / 256, 210 / 256, 4.0


def kimi_k3() -> tuple[float, float]:
    """(bytes a token touches, of it the routed experts) from Kimi K3's config."""
    e, layers, vocab = 7168, 93, 163840
    heads, kda_head, q_lora, kv_lora, nope, rope, v = 96, 128, 1536, 512, 128, 64, 128
    latent, width, n_exp, k, shared_ff, dense_ff = 3584, 3072, 896, 16, 2 * 3072, 33792
    d = heads * kda_head
    mla_layers = [i for i in range(layers) if (i + 1) % 4 == 0 or i == layers - 1]
    n_mla, n_kda = len(mla_layers), layers - len(mla_layers)
    kda = (5 * e * d + e * kda_head + kda_head * d + e * heads) * Q8 + 3 * d * 4 * F32
    mla = (e * q_lora + q_lora * heads * (nope + rope) + e * (kv_lora + rope) + e * heads * v + heads * v * e) * Q8 \
        + (nope * kv_lora + kv_lora * v) * heads * F32
    moe_dense = e * n_exp * F32 + 2 * e * latent * Q8 + 3 * e * shared_ff * Q8
    trunk = n_kda * kda + n_mla * mla + 3 * e * dense_ff * Q8 + (layers - 1) * moe_dense + 2 * vocab * e * Q8
    experts = k * (layers - 1) * 3 * latent * width * MX
    return trunk + experts, experts


def deepseek4() -> tuple[float, float]:
    e, layers, vocab, heads, head, q_lora, o_lora, groups = 4096, 43, 129280, 64, 512, 1024, 1024, 8
    n_exp, k, width, hc = 256, 6, 2048, 4
    idx_heads, idx_dim, hash_layers = 64, 128, 3
    attn = (e * q_lora + q_lora * heads * head + e * head + heads * head * o_lora + groups * o_lora * e) * Q8
    hc_mix = 2 * (hc * e * (2 + hc) * hc) * F32
    ratios = [0 if i < 2 else (4 if i % 2 == 0 else 128) for i in range(layers)]
    comp = sum(2 * e * (2 if r == 4 else 1) * head * Q8 for r in ratios if r)
    indexer = sum((e * idx_heads + q_lora * idx_heads * idx_dim + 2 * e * 2 * idx_dim) * Q8 for r in ratios if r == 4)
    router = layers * e * n_exp * F32 + hash_layers * vocab * k * 4  # the tid2eid tables (I32)
    shared = layers * 3 * e * width * Q8
    trunk = layers * (attn + hc_mix) + comp + indexer + router + shared + 2 * vocab * e * Q8
    experts = k * layers * (2 * e * width + width * e) * MX
    return trunk + experts, experts


def qwen35moe() -> tuple[float, float]:
    e, layers, vocab, n_exp, k, width = 2048, 40, 248320, 256, 8, 512
    q, kv = 16 * 256, 2 * 256  # 16 heads x 256 (and their gate), 2 KV heads
    key, value = 16 * 128, 32 * 128  # the delta net's key and value widths
    n_full = sum(1 for i in range(layers) if (i + 1) % 4 == 0)
    full = (e * 2 * q + 2 * e * kv + q * e) * Q8
    linear = (e * (2 * key + value) + e * value + 2 * e * 32 + value * e) * Q8 + (2 * key + value) * 4 * F32
    moe_dense = e * n_exp * F32 + 3 * e * width * Q8 + e * F32
    trunk = n_full * full + (layers - n_full) * linear + layers * moe_dense + 2 * vocab * e * Q8
    experts = k * layers * (2 * e * width * Q4K + width * e * Q6K)
    return trunk + experts, experts


SHAPES = {"kimi-k3": ("Kimi-K3", kimi_k3), "deepseek4": ("DeepSeek-V4-Flash", deepseek4),
          "qwen35moe": ("Qwen3.5-35B-A3B", qwen35moe)}
_UNITS = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def touched(output: str) -> tuple[float, float]:
    """(bytes a token touches, the file's size) from `size`'s output lines."""
    per = re.search(r"per token\s+touches ([\d.]+) (\w+)", output)
    weights = re.search(r"weights\s+([\d.]+) (\w+) \(", output)
    if not per or not weights:
        raise SystemExit(f"size printed no 'per token touches' line:\n{output}")
    return float(per.group(1)) * _UNITS[per.group(2)], float(weights.group(1)) * _UNITS[weights.group(2)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="/tmp/shardscope-published")
    parser.add_argument("--device", default="laptop-16gb")
    args = parser.parse_args()
    from shardscope.engine.synth.synth_published import write_header

    Path(args.dir).mkdir(parents=True, exist_ok=True)
    print("| --arch | published shape | file (sparse: header only) | size --model: a token touches | shape arithmetic "
          "| of it routed experts | off |")
    print("|---|---|---:|---:|---:|---:|---:|")
    worst = 0.0
    for arch, (like, arithmetic) in SHAPES.items():
        path = write_header(arch, Path(args.dir) / f"{arch}.gguf")
        done = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "size", "--model", str(path),
                               "--device", args.device], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"| {arch} | {like} | size failed: {(done.stderr or done.stdout).strip().splitlines()[-1]} |")
            worst = float("inf")
            continue
        size_bytes, file_bytes = touched(done.stdout)
        shape_bytes, expert_bytes = arithmetic()
        off = size_bytes / shape_bytes - 1
        worst = max(worst, abs(off))
        print(f"| {arch} | {like} | {file_bytes / 1e9:.4g} GB | {size_bytes / 1e9:.4g} GB | {shape_bytes / 1e9:.4g} GB "
              f"| {expert_bytes / 1e9:.4g} GB | {100 * off:+.2f} % |")
    print(f"\nworst {100 * worst:.2f} % (goal: within 2 %)")
    return 0 if worst <= 0.02 else 1


if __name__ == "__main__":
    raise SystemExit(main())
