"""AWS behaviour the scale model assumes, where each number comes from, and what it costs.

Platform holds the numbers; ASSUMPTIONS (written into the results and docs/scale-model.md)
says where each comes from; costs() turns what a window consumed into dollars at the list
prices in bench/harness.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.harness import LAMBDA_MEMORY_GB, PRICES


@dataclass(frozen=True, slots=True)
class Platform:
    """AWS behaviour the model assumes (ASSUMPTIONS says where each number comes from)."""

    key_wru_per_s: float = 1000.0
    key_rru_per_s: float = 3000.0
    key_burst_s: float = 0.2  # bucket depth, seconds of rate
    table_wru_per_s: float = 40_000.0
    write_ms: float = 5.0  # median PutItem, in region
    update_ms: float = 5.0  # median UpdateItem (a head: the counter's reservation, a fold)
    txn_ms: float = 10.0  # median TransactWriteItems
    read_ms: float = 3.0  # median GetItem
    s3_put_ms: float = 30.0  # median small PutObject
    s3_prefix_put_per_s: float = 3500.0
    latency_sigma: float = 0.4  # lognormal shape of every call's latency (p99 ~ 2.5 x median)
    conflict_wru: float = 1.0  # share of its WRU a write that fails its condition consumes
    sdk_max_attempts: int = 8  # Settings.aws_max_attempts (HEADWATER_AWS_MAX_ATTEMPTS)
    sdk_throttle_base_s: float = 1.0  # botocore 1.44 standard mode, throttling errors
    sdk_max_backoff_s: float = 20.0
    resend_base_s: float = 0.05  # storage/ddb.py _RESEND_BASE_S
    resend_cap_s: float = 1.0
    resend_budget_s: float = 10.0  # storage/ddb.py RESOLVE_BUDGET_S
    conflict_budget_s: float = 20.0  # engine/log.py APPEND_BUDGET_S
    conflicts_to_give_up: int = 4  # engine/log.py MIN_CONFLICTS_TO_GIVE_UP
    invoke_ms: float = 10.0  # client -> function URL -> environment -> client, round trip
    cold_start_ms: float = 800.0
    concurrency_limit: int = 1000  # account concurrent executions, default quota
    scale_envs_per_s: float = 100.0  # 1,000 new environments per 10 s per function
    lambda_cpu_scale: float = 1769 / 1024  # 1 GB gets 1024/1769 of a vCPU
    lambda_memory_gb: float = LAMBDA_MEMORY_GB  # billed GB-s per second in the handler
    lmi_min_envs: int = 3
    lmi_cpu_scale: float = 1.0
    lmi_cpu_target: float = 0.7  # target average CPU utilization of the capacity provider
    lmi_envs_per_instance: int = 2  # 1-vCPU environments (one web server process) per m7g.large
    client_retry_base_s: float = 0.1  # client back-off after a 429/503 (full jitter)
    client_retry_cap_s: float = 5.0


ASSUMPTIONS: dict[str, dict[str, str]] = {
    "key_wru_per_s / key_rru_per_s": {
        "value": "1,000 WRU/s and 3,000 RRU/s per partition; one item never splits",
        "source": "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/"
        "warm-throughput-scenarios.html",
    },
    "no split for heat on the log key": {
        "value": "frames go to ever-increasing sort keys under one partition key: a split "
        "cannot spread the newest frames (the issue's premise); heads are single items",
        "source": "https://aws.amazon.com/blogs/database/part-3-scaling-dynamodb-how-"
        "partitions-hot-keys-and-split-for-heat-impact-performance/",
    },
    "table_wru_per_s": {
        "value": "40,000 WRU/s per on-demand table (default quota, raisable)",
        "source": "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/"
        "on-demand-capacity-mode-max-throughput.html",
    },
    "key_burst_s": {"value": "0.2 s of rate per key bucket", "source": "assumption"},
    "write_ms / update_ms / txn_ms / read_ms": {
        "value": "lognormal medians 5 / 5 / 10 / 3 ms (PutItem / UpdateItem / "
        "TransactWriteItems / GetItem), sigma 0.4 (single-digit ms in region; a transaction "
        "~2x a single write: it prepares and commits)",
        "source": "assumption; 'single-digit millisecond' from the DynamoDB paper, USENIX ATC "
        "2022, https://www.usenix.org/conference/atc22/presentation/elhemali",
    },
    "conflict_wru": {
        "value": "a write that fails its condition consumes its WRU (billed on the existing "
        "item's size, which here is the same size)",
        "source": "assumption",
    },
    "throttled requests": {
        "value": "consume and bill nothing; TransactWriteItems is cancelled (ThrottlingError), "
        "not retried by botocore; the engine re-sends it (50 ms x 2^k, <= 1 s, 10 s budget)",
        "source": "https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/"
        "API_TransactWriteItems.html; layers/headwater/headwater/storage/ddb.py",
    },
    "sdk retries": {
        "value": "botocore 1.44 standard (the adaptive mode adds a client-side rate limiter "
        "not modelled): throttling back-off rand(0,1) x min(1 s x 2^i, 20 s), 8 attempts "
        "(Settings.aws_max_attempts); retry quota not modelled",
        "source": "botocore/retries/standard.py (ExponentialBackoff), https://docs.aws.amazon."
        "com/sdkref/latest/guide/feature-retry-behavior.html",
    },
    "s3_put_ms / s3_prefix_put_per_s": {
        "value": "median 30 ms (sigma 0.4) for a spilled frame ('tens of milliseconds' for "
        "small requests); 3,500 PUT/s per prefix (one prefix per topic)",
        "source": "https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-"
        "best-practices/timeouts-and-retries-for-latency-sensitive-applications.html; "
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance.html",
    },
    "invoke_ms": {
        "value": "10 ms round trip client -> function URL -> environment",
        "source": "assumption",
    },
    "cold_start_ms": {"value": "800 ms (Python, our imports)", "source": "assumption"},
    "concurrency_limit": {
        "value": "1,000 concurrent executions per account and region (default quota)",
        "source": "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html",
    },
    "scale_envs_per_s": {
        "value": "1,000 new execution environments every 10 s per function",
        "source": "https://docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html",
    },
    "lambda_cpu_scale": {
        "value": "1,769 MB = 1 vCPU, so the 1,024 MB function runs CPU work 1.73x slower "
        "than one core here",
        "source": "https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html",
    },
    "managed instances": {
        "value": "K concurrent requests per environment (a design's choice; the Python "
        "runtime's default is 16 per vCPU), >= 3 environments (AZ resiliency), enough "
        "environments for every client's request and for a 70% mean CPU target (target "
        "tracking on CPU, scaled up in steady state); an environment is 1 vCPU running one "
        "uvicorn process, two per m7g.large",
        "source": "https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-"
        "python-runtime.html; https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-"
        "instances-scaling.html; https://docs.aws.amazon.com/lambda/latest/api/API_Capacity"
        "ProviderScalingConfig.html (target tracking on CPU; 70 is an assumption)",
    },
    "prices": {
        "value": "PRICES in bench/harness.py: DynamoDB on-demand $0.625/M WRU, $0.125/M RRU; "
        "Lambda $0.20/M requests + $0.0000166667/GB-s; Managed Instances $0.20/M requests + "
        "EC2 on-demand (m7g.large $0.0816/h) + 15% fee; S3 $0.005/1,000 PUT",
        "source": "https://aws.amazon.com/dynamodb/pricing/on-demand/; https://aws.amazon.com/"
        "lambda/pricing/; https://aws.amazon.com/ec2/pricing/on-demand/; https://aws.amazon."
        "com/s3/pricing/",
    },
    "web adapter": {
        "value": "on Managed Instances the adapter forwards concurrent invocations to one web "
        "server, so one process (one group-commit writer per topic) sees them all",
        "source": "https://awslabs.github.io/aws-lambda-web-adapter/features/"
        "managed-instances.html",
    },
    "hole fill (design i)": {
        "value": "a reader waits on every reserved slot and fills it with a hole 1 s after the "
        "reservation applied (HEADWATER_HOLE_TIMEOUT_MS, counted from the earliest moment a "
        "reader can see the slot: the worst case for writers); a frame put later than that "
        "fails (billed), the hole (1 KB) is billed, and the writer reserves again",
        "source": "assumption; layers/headwater/headwater/engine/slots.py",
    },
    "head cache (design i)": {
        "value": "a process reads a topic's head (GetItem) before its first reservation, and "
        "again when its cached head is older than 10 s (engine/core.py HEAD_CACHE_MAX_AGE_S); "
        "each reservation returns the head it moved",
        "source": "layers/headwater/headwater/engine/core.py, engine/append.py",
    },
    "client retries": {
        "value": "a 429 or 503 is retried by the client with full-jitter back-off 100 ms x "
        "2^k, <= 5 s; latency is counted from the first send",
        "source": "assumption",
    },
}


def costs(
    *,
    wru: float,
    rru: float,
    s3_puts: int,
    invocations: int,
    lambda_gb_s: float,
    managed_env_s: float,
    envs_per_instance: int = 2,
    prices: dict[str, Any] = PRICES,
) -> dict[str, float]:
    """Dollars for what a window consumed, at list prices (PRICES in bench/harness.py).
    Standard Lambda: requests + GB-seconds; Managed Instances: requests + instance-seconds
    with the management fee (`envs_per_instance` environments per instance)."""
    managed = managed_env_s > 0
    fee = 1 + prices["lmi_management_fee"]
    instance = prices["lmi_instance_hour"] * fee / 3600 / envs_per_instance
    out = {
        "managed_env_s": managed_env_s,
        "usd_dynamodb": (
            wru * prices["dynamodb_wru_per_million"] + rru * prices["dynamodb_rru_per_million"]
        )
        / 1e6,
        "usd_s3": s3_puts * prices["s3_put_per_thousand"] / 1e3,
        "usd_lambda": invocations
        * (prices["lmi_request_per_million"] if managed else prices["lambda_request_per_million"])
        / 1e6
        + lambda_gb_s * prices["lambda_gb_second"]
        + managed_env_s * instance,
    }
    out["usd_total"] = out["usd_dynamodb"] + out["usd_s3"] + out["usd_lambda"]
    return out
