"""``python -m shardscope.app`` opens the workbench (same as ``shardscope`` with no arguments)."""

import sys

from shardscope.app.window.main import main

sys.exit(main())
