"""Scale model: how far one topic's appends go on AWS, by design, from 1 to 10,000 clients.

    python -m bench.bench_scale_model [--quick] [--clients 1,10,...] [--seed N] [--out PATH]

The entry point (bench/run_all.py runs it as bench_scale_model.main); the model is the
package bench/scale_model.
"""

from __future__ import annotations

from bench.scale_model.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
