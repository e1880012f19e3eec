"""Glue entry script (Command.ScriptLocation) and local entry point of the rollup job.

Under Glue, `rollup` and `headwater` come from the --extra-py-files zip (glue_jobs/package.py);
locally, this file's folder is on sys.path and headwater is installed in the venv."""

import sys

from rollup.job import main

if __name__ == "__main__":
    sys.exit(main())
