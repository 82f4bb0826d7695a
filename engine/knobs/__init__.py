"""Knobs: every run setting declared once (knobs), their ranges for sweeps (knob_ranges),
the validated RunSettings (settings) and tuning-profile files (profile_file).
"""

__all__ = ['knobs', 'knob_ranges', 'settings', 'profile_file']
