"""Run snmpsim's ``snmpsim-command-responder`` with a larger open data-file cache.

snmpsim keeps at most 31 data files (text + index) open and closes the oldest on every miss
(``snmpsim.datafile.DataFile.max_queue_entries``); polling more switches than that in parallel
turns every request into a reopen of a file and its dbm index. This wrapper raises that cap (and
the process's open-file limit to match) and then runs the stock responder ``main()`` unchanged:
``python -m simulator.snmp.responder --max-open-files N <snmpsim-command-responder args>``.
"""

from __future__ import annotations

import resource
import sys


def main(argv: list[str]) -> int:
    open_files = 31
    if argv[:1] == ["--max-open-files"]:
        open_files = int(argv[1])
        argv = argv[2:]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * open_files + 256))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    from snmpsim import datafile
    from snmpsim.commands import responder

    datafile.DataFile.max_queue_entries = open_files
    sys.argv = ["snmpsim-command-responder", *argv]
    return int(responder.main() or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
