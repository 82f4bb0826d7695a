"""Layout: what a GGUF file holds and where -- tensor offsets (gguf_layout, cached by
layout_cache), layers grouped into shards (shard_plan), and the expert slices of a
mixture-of-experts (moe_layout, which also states the run-kind rule).
"""

__all__ = ['gguf_layout', 'layout_cache', 'shard_plan', 'moe_layout']
