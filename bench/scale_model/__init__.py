"""Scale model: how far one topic's appends go on AWS, by design, from 1 to 10,000 clients.

    python -m bench.bench_scale_model [--quick] [--clients 1,10,...] [--seed N] [--out PATH]

Everything else in bench/ measures one machine; this is a small deterministic discrete-event
simulation (heapq, seeded) of what the same engine does on AWS, where the load lands:

  N clients (closed loop: the next append when the last is acknowledged)
    -> execution environments: Lambda (one request per environment, scaled out on demand up
       to a concurrency limit, cold starts, 429 past it) or Lambda Managed Instances behind
       the Lambda Web Adapter (K concurrent requests per environment into one web server, so
       the engine's group commit merges concurrent appends to a topic)
    -> the engine's commit loop (group commit <= 64 requests, optimistic sequencing: a commit
       that loses a race learns the winner and retries; jittered back-off after 2 losses)
    -> DynamoDB: a token bucket per partition key (1,000 WRU/s, 3,000 RRU/s) and per table
       (40,000 WRU/s on-demand default); an over-budget request is throttled and retried
       (botocore standard back-off for single writes, the engine's re-send loop on top; a
       throttled transaction is cancelled and only the engine re-sends it)
    -> S3 for frames past the spill threshold.

A design is data (`Design`): what one commit writes (head and frame items, under which keys,
in a transaction or not), how seqs are decided, and where requests run. The inputs of design
(a) (calls, WRU per append and how they split between the head and the log key, frame bytes
per record, CPU per request and per commit) come from measurement: the real engine runs
in-process against moto with `headwater.storage.callcount` (skipped by --quick, which uses the
figures recorded in DEFAULT_INPUTS), and bench_v0's latest results give CPU. Latency measured
against an emulator is not AWS latency: only call counts, WRU and CPU transfer. Every other
number is an assumption, listed with its source in ASSUMPTIONS and docs/scale-model.md.
Results go to bench/results/latest-scale-model.json.

Modules:
  designs   Inputs (what an append writes and spends), DEFAULT_INPUTS, Design, DESIGNS
  aws       Platform (AWS behaviour), ASSUMPTIONS with sources, costs at list prices
  sim       the event kernel (Sim, Signal) and token buckets
  model     Model: clients, environments, group commit, retried storage calls; simulate()
  measure   the local measurement through the engine, and the inputs derived from it
  validate  measured vs modelled: the in-process measurement, and bench_writers' N processes
  report    target verdicts, ceilings, tables, JSON rows
  cli       main(): the run, the report and the results file
"""
