"""Synth: writes real GGUF files with random weights (dense and MoE) for streaming experiments.
"""

__all__ = ['synth', 'synth_moe', 'synth_shapes', 'synth_vocab']
