"""Screenshot scripts: the window on a given model and settings, saved as the PNGs in docs/img/."""
