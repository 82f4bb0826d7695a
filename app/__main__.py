"""``python -m app`` opens the workbench (same as ``shardscope`` with no arguments)."""

import sys

from app.main import main

sys.exit(main())
