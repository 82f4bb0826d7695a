"""The fixed state a hybrid model's recurrent layers keep, from its GGUF header (no weights read).

Linear-attention layers keep a state whose size does not grow with the context: llama.cpp's recurrent
memory holds, per layer, the state S and the causal convolution's last inputs R (llama-hparams.cpp
n_embd_s / n_embd_r, F32). What a device must hold besides the KV cache, so `size` books it there:

- KDA (kimi-k3, kimi-linear, glm5-next; layers with head_count_kv 0): S = kda.head_dim² × heads,
  R = 3 × (conv_kernel − 1) × heads × kda.head_dim (q, k and v convolved apart).
  Kimi K3: 69 layers × (128² × 96 + 3 × 3 × 96 × 128) × 4 B = 465 MB (S alone 434 MB, the notes' figure).
- gated delta net (qwen3next, qwen35moe; all but every full_attention_interval-th layer):
  S = ssm.state_size × ssm.inner_size, R = (conv_kernel − 1) × (inner_size + 2 × group_count × state_size).
- deepseek4's compressors (ratio-4 layers: the CSA and the indexer's, ratio-128 layers: the HCA's): a
  window of pending rows and their scores, 2 × (2·ratio × 2·head) resp. 2 × (ratio × head) floats; the
  compressed rows themselves grow with the context and are KV cache.

Checked against llama.cpp's own "RS buffer size" / "DSV4 … state buffer size" log lines in
tests/test_recurrent_state.py.
"""

from __future__ import annotations

F32 = 4


def _get(meta: dict, arch: str, key: str, default=None):
    return meta.get(f"{arch}.{key}", default)


def _per_layer(value, n_layers: int) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value] * n_layers


def recurrent_state_bytes(meta: dict) -> tuple[int, str]:
    """(bytes, what they are) of the model's fixed recurrent state; (0, "") for models without one."""
    arch = str(meta.get("general.architecture", ""))
    n = int(_get(meta, arch, "block_count", 0) or 0)
    if not n:
        return 0, ""
    conv = int(_get(meta, arch, "ssm.conv_kernel", 4) or 4)
    if _get(meta, arch, "kda.head_dim"):
        head = int(_get(meta, arch, "kda.head_dim"))
        heads = int(_per_layer(_get(meta, arch, "attention.head_count", 0), n)[0])
        kv = _per_layer(_get(meta, arch, "attention.head_count_kv", heads), n)
        layers = sum(1 for x in kv[:n] if x == 0)
        per = (head * head * heads + 3 * (conv - 1) * heads * head) * F32
        return layers * per, f"KDA state of {layers} layers"
    if arch in ("qwen3next", "qwen35moe", "qwen35") and _get(meta, arch, "ssm.inner_size"):
        inner, state = int(_get(meta, arch, "ssm.inner_size")), int(_get(meta, arch, "ssm.state_size"))
        groups = int(_get(meta, arch, "ssm.group_count", 0) or 0)
        interval = int(_get(meta, arch, "full_attention_interval", 4) or 4)
        layers = sum(1 for i in range(n) if (i + 1) % interval != 0)
        per = (state * inner + (conv - 1) * (inner + 2 * groups * state)) * F32
        return layers * per, f"gated delta-net state of {layers} layers"
    if arch == "deepseek4":
        head = int(_get(meta, arch, "attention.key_length", 0) or 0)
        idx = int(_get(meta, arch, "attention.indexer.key_length", 0) or 0)
        ratios = _per_layer(_get(meta, arch, "attention.compress_ratios", 0), n)[:n]
        total = 0
        for r in ratios:
            if r == 4:
                total += 2 * (2 * r) * (2 * head) * F32 + 2 * (2 * r) * (2 * idx) * F32
            elif r:
                total += 2 * r * head * F32
        return total, f"compressor state of {sum(1 for r in ratios if r)} layers"
    return 0, ""



def recurrent_state_of_file(path) -> tuple[int, str]:
    """``recurrent_state_bytes`` of a GGUF file's header (the gguf package's reader: the per-layer arrays,
    head_count_kv and compress_ratios, are not among the keys gguf_layout keeps)."""
    import gguf  # only sizing needs it here

    reader = gguf.GGUFReader(str(path))
    meta = {}
    for f in reader.fields.values():
        if f.name.startswith("tokenizer."):
            continue
        try:
            meta[f.name] = f.contents()
        except (ValueError, IndexError):
            continue
    return recurrent_state_bytes(meta)


__all__ = ["recurrent_state_bytes", "recurrent_state_of_file"]
