"""Devices: device presets, the tok/s projection onto a device, what-if sizing of a model
on a device, and calibration of a device from llama-bench results.
"""

__all__ = ['devices', 'projection', 'run_projection', 'sizing', 'calibrate']
