"""The engine's times against llama.cpp's own timers (``llama_perf_context``), for ``bench --verify``.

The engine times what a user waits for (a token from call to call, TTFT from before the prompt
pass to the first sampled token); llama.cpp times ``llama_decode`` alone. What lies between is
Python around the calls, a few ms that a plain 5 % cannot hold on fast tokens or short prompts:
below a floor each pair is compared in absolute terms (docs/cross-checks.md).
"""

from __future__ import annotations

import math

from shardscope.engine.runs.verify_report import TOLERANCE, relative_difference

# The engine times a token from call to call; llama.cpp's t_eval_ms counts llama_decode alone.
# Between them lies the token's own bookkeeping (sampling, the layer callback, the detokenizer):
# about 2 ms here, which on a 60 tok/s model is 11 % (a clean-clone run: 57.3 vs 64.3 tok/s
# over 5 tokens). Compared as time per token, relative above 40 ms, absolute (2 ms) below it.
TOKEN_FLOOR_MS = 40.0


def token_time_rel(engine_ts: float, llama_ts: float) -> float:
    """Engine vs llama.cpp as time per token, (llama − engine) / max(llama, 40 ms): negative when
    the engine's figure is slower, as a tok/s difference reads."""
    if not (engine_ts > 0 and llama_ts > 0):
        return math.inf
    return -relative_difference(1000.0 / engine_ts, 1000.0 / llama_ts, floor=TOKEN_FLOOR_MS)


def token_time_note(engine_ts: float, llama_ts: float) -> str:
    if not (engine_ts > 0 and llama_ts > 0) or 1000.0 / llama_ts >= TOKEN_FLOOR_MS:
        return ""
    apart = 1000.0 / engine_ts - 1000.0 / llama_ts
    return (f"{apart:+.1f} ms a token (under {TOKEN_FLOOR_MS:.0f} ms a token the allowance is "
            f"{TOKEN_FLOOR_MS * TOLERANCE:.0f} ms: sampling and callbacks outside llama_decode)")


# TTFT is the prompt pass and the first sampled token; llama.cpp's t_p_eval_ms runs from
# llama_decode's start to the logits read. Outside it lie the Python steps around the pass
# (the abort callback, the batch, the argmax), each ctypes call a GIL hand-off: on a 2-core
# machine with the sampler and loader threads busy each hand-off can wait a 5 ms switch
# interval. Measured gaps: 2-17 ms here, 34 ms once in CI (644 vs 610 ms). Relative above
# 1 s, absolute (50 ms) below it: a figure that counted loading or left out the prompt
# (hundreds of ms) is still OFF.
TTFT_FLOOR_MS = 1000.0


def ttft_rel(ttft_ms: float, prompt_ms: float) -> float:
    return relative_difference(ttft_ms, prompt_ms, floor=TTFT_FLOOR_MS)


def ttft_note(ttft_ms: float, prompt_ms: float) -> str:
    if prompt_ms >= TTFT_FLOOR_MS:
        return ""
    return (f"{ttft_ms - prompt_ms:+.1f} ms outside the prompt pass (under {TTFT_FLOOR_MS:.0f} ms the "
            f"allowance is {TTFT_FLOOR_MS * TOLERANCE:.0f} ms: Python steps around llama_decode)")


__all__ = ["TOKEN_FLOOR_MS", "TTFT_FLOOR_MS", "token_time_rel", "token_time_note", "ttft_rel", "ttft_note"]
