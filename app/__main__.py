"""``python -m shardscope.app`` opens the workbench (same as ``shardscope`` with no arguments)."""

import sys

from shardscope.app.main import main

sys.exit(main())
