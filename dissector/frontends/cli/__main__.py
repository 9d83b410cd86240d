"""EDGE: `python -m dissector.frontends.cli`, as the `pulsar-dissect` command.

Input: the process's arguments.
Output: the process's exit status.
Rule: nothing but `main`: the same command line as the console script.
"""

from __future__ import annotations

import sys

from dissector.frontends.cli.entry import main

sys.exit(main())
