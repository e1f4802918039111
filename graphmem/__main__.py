import sys

from graphmem.cli.main import run_command

sys.exit(run_command())
