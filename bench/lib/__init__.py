"""Helpers the bench scripts share (models, cold caches, the window driver, child processes):
nothing here runs alone."""
