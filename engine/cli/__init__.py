"""CLI: the shardscope command line (cli), its shared flags (cli_args) and the search commands.
"""

__all__ = ['cli', 'cli_args', 'cli_search']
