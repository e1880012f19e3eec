"""Glue entry script (Command.ScriptLocation) and local entry point of the index job.

Under Glue, `indexer`, `rollup` and `headwater` come from the --extra-py-files zip
(glue_jobs/package.py); locally, this file's folder is on sys.path and headwater is installed
in the venv."""

import sys

from indexer.job import main

if __name__ == "__main__":
    sys.exit(main())
