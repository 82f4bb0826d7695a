"""Package discovery for setuptools; everything else is in pyproject.toml.

The three folders at the top of the tree install under one name (shardscope.engine,
shardscope.app, shardscope.widgets), so no other project's "engine" or "app" can collide.
pyproject.toml's [tool.setuptools.packages.find] can only name packages after their folders,
so the shardscope. prefix is added here: every package found under engine/, app/ and widgets/
is installed, a new room included, with no list to keep by hand.
"""

from pathlib import Path

from setuptools import find_packages, setup

FOLDERS = ("engine", "app", "widgets")
HERE = Path(__file__).resolve().parent
PACKAGES = ["shardscope." + name
            for name in find_packages(where=str(HERE), include=[p for f in FOLDERS for p in (f, f + ".*")])]
PACKAGE_DIR = {"shardscope." + folder: folder for folder in FOLDERS}

if __name__ == "__main__":  # the build backend runs this file as __main__; tests import it for PACKAGES
    setup(packages=PACKAGES, package_dir=PACKAGE_DIR)
